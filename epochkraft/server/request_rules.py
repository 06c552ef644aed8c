"""The topic, group and cluster operations the rest of the broker's APIs need (Kafka's KafkaApis), checked
before the handler runs when an authorizer is on. A request naming a resource its principal may not use is
answered with its error response carrying GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED or
CLUSTER_AUTHORIZATION_FAILED in every error field.

Where Kafka answers the authorized topics of a request and refuses the others, this refuses the whole
request: stricter, never looser. Produce, Fetch, Metadata, CreateTopics and DeleteTopics check per topic in
their handlers; the controller-listener and cluster-wide APIs are in ``operations``.
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.static.protocol import RequestPayload

from epochkraft.protocol import request_types as rt
from epochkraft.protocol.errors import ErrorCode
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.security.operations import CLUSTER_OPERATIONS
from epochkraft.server.context import RequestContext

READ, DESCRIBE, DELETE, ALTER = (
    AclOperation.READ,
    AclOperation.DESCRIBE,
    AclOperation.DELETE,
    AclOperation.ALTER,
)
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_GROUP = (
    2,
    4,
    8,
    32,
)  # DescribeConfigs resource types
# API key -> the operation on each topic the request names
TOPIC_OPERATIONS: dict[int, AclOperation] = {
    2: DESCRIBE,  # ListOffsets
    8: READ,  # OffsetCommit
    21: DELETE,  # DeleteRecords
    23: DESCRIBE,  # OffsetForLeaderEpoch (a follower's: CLUSTER_ACTION)
    28: READ,  # TxnOffsetCommit
    37: ALTER,  # CreatePartitions
    47: READ,  # OffsetDelete
    61: READ,  # DescribeProducers
    75: DESCRIBE,  # DescribeTopicPartitions
}
# API key -> the operation on the group the request names
GROUP_OPERATIONS: dict[int, AclOperation] = {
    8: READ,  # OffsetCommit
    9: DESCRIBE,  # OffsetFetch
    10: DESCRIBE,  # FindCoordinator (key type GROUP)
    11: READ,  # JoinGroup
    12: READ,  # Heartbeat
    13: READ,  # LeaveGroup
    14: READ,  # SyncGroup
    15: DESCRIBE,  # DescribeGroups
    25: READ,  # AddOffsetsToTxn
    28: READ,  # TxnOffsetCommit
    42: DELETE,  # DeleteGroups
    47: DELETE,  # OffsetDelete
    68: READ,  # ConsumerGroupHeartbeat (DESCRIBE on its subscribed topics: in the handler)
    69: DESCRIBE,  # ConsumerGroupDescribe
}
CONFIG_OPERATIONS = {
    32: AclOperation.DESCRIBE_CONFIGS,
    33: AclOperation.ALTER_CONFIGS,
    44: AclOperation.ALTER_CONFIGS,
}
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
# API key -> the operation on the transactional ids the request names (Kafka's KafkaApis)
TRANSACTIONAL_ID_OPERATIONS: dict[int, AclOperation] = {
    10: DESCRIBE,  # FindCoordinator (key type TRANSACTION)
    22: AclOperation.WRITE,  # InitProducerId
    24: AclOperation.WRITE,  # AddPartitionsToTxn (a client's, v0-3)
    25: AclOperation.WRITE,  # AddOffsetsToTxn
    26: AclOperation.WRITE,  # EndTxn
    28: AclOperation.WRITE,  # TxnOffsetCommit
}


# The requests whose group the GROUP_OPERATIONS check reads from ``group_id``
_OF_ONE_GROUP = (
    rt.OffsetCommit
    | rt.JoinGroup
    | rt.Heartbeat
    | rt.LeaveGroup
    | rt.SyncGroup
    | rt.AddOffsetsToTxn
    | rt.TxnOffsetCommit
    | rt.OffsetDelete
    | rt.ConsumerGroupHeartbeat
)
# The requests whose topics the TOPIC_OPERATIONS check reads from ``topics``
_NAMING_TOPICS = (
    rt.ListOffsets
    | rt.OffsetCommit
    | rt.DeleteRecords
    | rt.OffsetForLeaderEpoch
    | rt.TxnOffsetCommit
    | rt.CreatePartitions
    | rt.OffsetDelete
    | rt.DescribeProducers
    | rt.DescribeTopicPartitions
)


def _names(items: Iterable[object] | None) -> list[str]:
    return [str(getattr(t, "name", None) or getattr(t, "topic", "")) for t in items or ()]


def _not_served(key: int, request: RequestPayload) -> TypeError:
    """A request these rules do not know under its key (every version a handler registers is known)."""
    return TypeError(f"API {key}: not a request the rules read: {type(request).__name__}")


def _coordinator_keys(request: rt.FindCoordinator) -> list[str]:
    if hasattr(request, "coordinator_keys"):  # v4+; v0-v3 name one key
        return list(request.coordinator_keys)
    return [request.key]


def _groups(key: int, request: RequestPayload) -> list[str]:
    if isinstance(request, rt.FindCoordinator):
        if getattr(request, "key_type", 0) != 0:
            return []  # a transactional id: TRANSACTIONAL_ID_OPERATIONS
        return _coordinator_keys(request)
    if isinstance(request, rt.OffsetFetch):
        if hasattr(request, "groups"):  # v8+
            return [g.group_id for g in request.groups]
        return [request.group_id]
    if isinstance(request, rt.DescribeGroups):
        return list(request.groups)
    if isinstance(request, rt.DeleteGroups):
        return list(request.groups_names)
    if isinstance(request, rt.ConsumerGroupDescribe):
        return list(request.group_ids)
    if isinstance(request, _OF_ONE_GROUP):
        return [request.group_id]
    raise _not_served(key, request)


def _transactional_ids(key: int, request: RequestPayload) -> list[str]:
    if isinstance(request, rt.FindCoordinator):
        return _coordinator_keys(request) if getattr(request, "key_type", 0) == 1 else []
    if isinstance(request, rt.AddPartitionsToTxn):
        if hasattr(request, "transactions"):
            return []  # a broker's verification (v4+): CLUSTER_ACTION
        return [request.v3_and_below_transactional_id]
    transactional_id = getattr(request, "transactional_id", None)
    return [] if transactional_id is None else [transactional_id]


def _transaction_refusal(key: int, request: RequestPayload, ctx: RequestContext) -> ErrorCode | None:
    """TRANSACTIONAL_ID WRITE (DESCRIBE for FindCoordinator), and for AddPartitionsToTxn WRITE on its
    topics from a client or CLUSTER_ACTION from a broker (v4+)."""
    operation = TRANSACTIONAL_ID_OPERATIONS.get(key)
    if operation is None:
        return None
    if not all(
        ctx.authorized(operation, ResourceType.TRANSACTIONAL_ID, t) for t in _transactional_ids(key, request)
    ):
        return ErrorCode.transactional_id_authorization_failed
    if isinstance(request, rt.AddPartitionsToTxn):
        if hasattr(request, "transactions"):
            if not ctx.authorized_cluster(AclOperation.CLUSTER_ACTION):
                return ErrorCode.cluster_authorization_failed
        elif not all(
            ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, t.name)
            for t in request.v3_and_below_topics
        ):
            return ErrorCode.topic_authorization_failed
    return None


def _topic_refusal(key: int, request: RequestPayload, ctx: RequestContext) -> ErrorCode | None:
    if key == 23 and getattr(request, "replica_id", -1) >= 0:  # v3+ names the replica
        if not ctx.authorized_cluster(AclOperation.CLUSTER_ACTION):
            return ErrorCode.cluster_authorization_failed
        return None
    if not isinstance(request, _NAMING_TOPICS):
        raise _not_served(key, request)
    if not all(ctx.authorized(TOPIC_OPERATIONS[key], ResourceType.TOPIC, n) for n in _names(request.topics)):
        return ErrorCode.topic_authorization_failed
    return None


def _config_refusal(key: int, request: RequestPayload, ctx: RequestContext) -> ErrorCode | None:
    if not isinstance(request, rt.DescribeConfigs | rt.AlterConfigs | rt.IncrementalAlterConfigs):
        raise _not_served(key, request)
    operation = CONFIG_OPERATIONS[key]
    for resource in request.resources:
        if resource.resource_type == CONFIG_TOPIC:
            if not ctx.authorized(operation, ResourceType.TOPIC, resource.resource_name):
                return ErrorCode.topic_authorization_failed
        elif resource.resource_type == CONFIG_GROUP:  # the group's own ACLs (Kafka's ConfigHelper)
            if not ctx.authorized(operation, ResourceType.GROUP, resource.resource_name):
                return ErrorCode.group_authorization_failed
        elif not ctx.authorized_cluster(operation):
            return ErrorCode.cluster_authorization_failed
    return None


def refusal(key: int, request: RequestPayload, ctx: RequestContext) -> ErrorCode | None:
    """The error a request gets before its handler runs, or None (the controller listener serves the config
    and CreatePartitions APIs of these tables, checked as ControllerApis checks them)."""
    if ctx.authorizer is None:
        return None
    transaction_refused = _transaction_refusal(key, request, ctx)
    if transaction_refused is not None:
        return transaction_refused
    if key in GROUP_OPERATIONS:
        operation = GROUP_OPERATIONS[key]
        if not all(ctx.authorized(operation, ResourceType.GROUP, g) for g in _groups(key, request)):
            return ErrorCode.group_authorization_failed
    if key in TOPIC_OPERATIONS and (topic_refused := _topic_refusal(key, request, ctx)) is not None:
        return topic_refused
    if key in CONFIG_OPERATIONS and (config_refused := _config_refusal(key, request, ctx)) is not None:
        return config_refused
    # An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KafkaApis
    # handleInitProducerIdRequest, authorizeByResourceType).
    idempotent = (  # the key first: the isinstance of a union costs every request a few hundred ns
        key == INIT_PRODUCER_ID
        and isinstance(request, rt.InitProducerId)
        and request.transactional_id is None
    )
    if (
        idempotent
        and not ctx.authorized_cluster(AclOperation.IDEMPOTENT_WRITE)
        and not ctx.authorized_any(AclOperation.WRITE, ResourceType.TOPIC)
    ):
        return ErrorCode.cluster_authorization_failed
    return None


def listener_refusal(
    listener: str, key: int, request: RequestPayload, ctx: RequestContext
) -> ErrorCode | None:
    """The authorization error a request gets on ``listener`` before its handler runs: the cluster
    operation its API needs there, then the checks above (None: allowed, or no authorizer). A request a
    broker forwarded in an Envelope is checked so too, as its client."""
    if ctx.authorizer is None:
        return None
    operation = CLUSTER_OPERATIONS[listener].get(key)
    if operation is not None and not ctx.authorized_cluster(operation):
        return ErrorCode.cluster_authorization_failed
    return refusal(key, request, ctx)
