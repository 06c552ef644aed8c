"""The cluster operation an API needs before its handler runs, per listener (Kafka's ControllerApis
``authHelper.authorizeClusterOperation`` and the same checks in KafkaApis). A request without it gets its
error response with CLUSTER_AUTHORIZATION_FAILED. Per-topic and per-group checks are in the handlers."""

from __future__ import annotations

from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.security.authorizer import AclOperation

CLUSTER_OPERATIONS: dict[str, dict[int, AclOperation]] = {
    CONTROLLER: {
        1: AclOperation.CLUSTER_ACTION,  # Fetch of __cluster_metadata (handleFetch)
        43: AclOperation.ALTER,  # ElectLeaders
        45: AclOperation.ALTER,  # AlterPartitionReassignments
        46: AclOperation.DESCRIBE,  # ListPartitionReassignments
        52: AclOperation.CLUSTER_ACTION,  # Vote (handleVote)
        53: AclOperation.CLUSTER_ACTION,  # BeginQuorumEpoch
        54: AclOperation.CLUSTER_ACTION,  # EndQuorumEpoch
        55: AclOperation.DESCRIBE,  # DescribeQuorum
        56: AclOperation.CLUSTER_ACTION,  # AlterPartition
        57: AclOperation.ALTER,  # UpdateFeatures (ControllerApis.handleUpdateFeatures)
        58: AclOperation.CLUSTER_ACTION,  # Envelope (ControllerApis.handleEnvelopeRequest)
        62: AclOperation.CLUSTER_ACTION,  # BrokerRegistration
        63: AclOperation.CLUSTER_ACTION,  # BrokerHeartbeat
        64: AclOperation.ALTER,  # UnregisterBroker
        59: AclOperation.CLUSTER_ACTION,  # FetchSnapshot
        67: AclOperation.CLUSTER_ACTION,  # AllocateProducerIds
        80: AclOperation.ALTER,  # AddRaftVoter (handleAddRaftVoter)
        81: AclOperation.ALTER,  # RemoveRaftVoter
        82: AclOperation.CLUSTER_ACTION,  # UpdateRaftVoter
    },
    BROKER: {
        43: AclOperation.ALTER,  # ElectLeaders
        45: AclOperation.ALTER,  # AlterPartitionReassignments
        46: AclOperation.DESCRIBE,  # ListPartitionReassignments
        35: AclOperation.DESCRIBE,  # DescribeLogDirs
        48: AclOperation.DESCRIBE_CONFIGS,  # DescribeClientQuotas
        # Forwarded by Kafka's brokers and checked by its controller for the client's principal; ours
        # checks here (DescribeQuorum goes to the controller as the broker's own request).
        55: AclOperation.DESCRIBE,  # DescribeQuorum
        57: AclOperation.ALTER,  # UpdateFeatures
    },
}
# On both listeners: the ACL and SCRAM APIs (AclApis, ControllerApis.handleAlterUserScramCredentials).
for _listener in (BROKER, CONTROLLER):
    CLUSTER_OPERATIONS[_listener].update(
        {
            29: AclOperation.DESCRIBE,  # DescribeAcls
            30: AclOperation.ALTER,  # CreateAcls
            31: AclOperation.ALTER,  # DeleteAcls
            50: AclOperation.DESCRIBE,  # DescribeUserScramCredentials
            51: AclOperation.ALTER,  # AlterUserScramCredentials
            49: AclOperation.ALTER_CONFIGS,  # AlterClientQuotas
        }
    )
