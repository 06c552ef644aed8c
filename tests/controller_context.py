"""A test context speaking the controller's domain, as Kafka's ReplicationControlTestContext does."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.alter_configs.v2 import request as ac2
from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.alter_partition_reassignments.v1 import request as apr
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v3.request import BrokerRegistrationRequest, Listener
from kio.schema.create_partitions.v3 import request as cp
from kio.schema.create_topics.v7 import request as ct
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.incremental_alter_configs.v1 import request as iac1
from kio.schema.list_partition_reassignments.v0 import request as lpr

from epochkraft.controller.configuration_control import OpType
from epochkraft.controller.controller import Controller
from epochkraft.controller.settings import ControllerSettings
from epochkraft.metadata.registrations import PartitionRegistration
from epochkraft.protocol.errors import ErrorCode

CLUSTER_ID = "test-cluster-id-00000000"
NO_TIMEOUT = __import__("datetime").timedelta(seconds=30)


class ControllerContext:
    def __init__(self, **settings: Any) -> None:
        self.now = 1_000
        self.controller = Controller(CLUSTER_ID, ControllerSettings(**settings))
        self.controller.bootstrap(self.now)
        self.incarnations: dict[int, uuid.UUID] = {}

    # ---- client quotas ------------------------------------------------------------------------------
    def alter_client_quotas(
        self,
        alterations: dict[tuple[tuple[str, str | None], ...], dict[str, float | None]],
        validate_only: bool = False,
    ) -> dict[tuple[tuple[str, str | None], ...], tuple[int, str | None]]:
        """AlterClientQuotas: {entity pairs: {key: value, or None to remove}} -> {entity: (error, message)}."""
        request = acq.AlterClientQuotasRequest(
            entries=tuple(
                acq.EntryData(
                    entity=tuple(acq.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                    ops=tuple(
                        acq.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                        for k, v in ops.items()
                    ),
                )
                for entity, ops in alterations.items()
            ),
            validate_only=validate_only,
        )
        response = self.controller.alter_client_quotas(self.now, request)
        return {
            tuple((e.entity_type, e.entity_name) for e in entry.entity): (
                entry.error_code,
                entry.error_message,
            )
            for entry in response.entries
        }

    # ---- brokers ------------------------------------------------------------------------------------
    def registration(self, broker_id: int, incarnation: uuid.UUID | None = None, **kw: Any) -> Any:
        incarnation = incarnation or self.incarnations.get(broker_id) or uuid.uuid4()
        self.incarnations[broker_id] = incarnation
        fields = {
            "broker_id": broker_id,
            "cluster_id": CLUSTER_ID,
            "incarnation_id": incarnation,
            "listeners": (
                Listener(name="PLAINTEXT", host="127.0.0.1", port=9090 + broker_id, security_protocol=0),
            ),
            "features": (),
            "rack": None,
            "is_migrating_zk_broker": False,
            "log_dirs": (),
            "previous_broker_epoch": -1,
        } | kw
        return self.controller.register_broker(self.now, BrokerRegistrationRequest(**fields))

    def register_brokers(self, *ids: int) -> dict[int, int]:
        epochs = {}
        for broker_id in ids:
            response = self.registration(broker_id)
            assert response.error_code == ErrorCode.none
            epochs[broker_id] = response.broker_epoch
        return epochs

    def epoch(self, broker_id: int) -> int:
        return self.controller.cluster.brokers[broker_id].epoch

    def heartbeat(
        self,
        broker_id: int,
        *,
        want_fence: bool = False,
        want_shut_down: bool = False,
        epoch: int | None = None,
        metadata_offset: int | None = None,
    ) -> Any:
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=self.epoch(broker_id) if epoch is None else epoch,
            current_metadata_offset=self.controller.log.next_offset
            if metadata_offset is None
            else metadata_offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
            offline_log_dirs=(),
        )
        return self.controller.heartbeat(self.now, request)

    def unfence_brokers(self, *ids: int) -> None:
        for broker_id in ids:
            response = self.heartbeat(broker_id)
            assert response.error_code == ErrorCode.none and not response.is_fenced

    def fence_brokers(self, *ids: int) -> None:
        for broker_id in ids:
            assert self.heartbeat(broker_id, want_fence=True).is_fenced

    def shut_down_brokers(self, *ids: int) -> None:
        for broker_id in ids:
            self.heartbeat(broker_id, want_shut_down=True)

    def brokers_ready(self, *ids: int) -> None:
        self.register_brokers(*ids)
        self.unfence_brokers(*ids)

    def advance(self, ms: int) -> list[int]:
        self.now += ms
        return self.controller.tick(self.now)

    # ---- topics -------------------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        assignment: list[list[int]] | None = None,
        *,
        partitions: int = -1,
        rf: int = -1,
        configs: dict[str, str] | None = None,
        expected: ErrorCode = ErrorCode.none,
    ) -> Any:
        topic = ct.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=rf,
            assignments=tuple(
                ct.CreatableReplicaAssignment(partition_index=i, broker_ids=tuple(r))
                for i, r in enumerate(assignment or [])
            ),
            configs=tuple(ct.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
        )
        response = self.controller.create_topics(
            self.now, ct.CreateTopicsRequest(topics=(topic,), timeout=NO_TIMEOUT, validate_only=False)
        )
        result = response.topics[0]
        assert result.error_code == expected, (result.error_code, result.error_message)
        return result

    def create_partitions(
        self, *topics: tuple[str, int, list[list[int]] | None], validate_only: bool = False
    ) -> list[tuple[ErrorCode, str | None]]:
        """(name, new count, assignments of the new partitions or None) -> [(error, message)] per topic."""
        request = cp.CreatePartitionsRequest(
            topics=tuple(
                cp.CreatePartitionsTopic(
                    name=name,
                    count=count,
                    assignments=None
                    if assignments is None
                    else tuple(cp.CreatePartitionsAssignment(broker_ids=tuple(a)) for a in assignments),
                )
                for name, count, assignments in topics
            ),
            timeout=NO_TIMEOUT,
            validate_only=validate_only,
        )
        response = self.controller.create_partitions(self.now, request)
        return [(r.error_code, r.error_message) for r in response.results]

    def partition(self, topic: str, index: int = 0) -> PartitionRegistration:
        return self.controller.replication.topic(topic).partitions[index]

    def topic_id(self, topic: str) -> uuid.UUID:
        return self.controller.replication.topic_ids[topic]

    # ---- AlterPartition -----------------------------------------------------------------------------
    def alter_partition(
        self,
        requester: int,
        topic: str,
        isr: list[int] | list[tuple[int, int]],
        *,
        index: int = 0,
        version: int = 3,
        leader_epoch: int | None = None,
        partition_epoch: int | None = None,
        recovery: int | None = None,
        requester_epoch: int | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> tuple[Any, Any]:
        """Sends AlterPartition; ``isr`` as ids (each broker's current epoch) or (id, epoch) pairs.
        Returns (top-level response, the partition's response)."""
        known = self.controller.replication.topic(topic)
        current = known.partitions.get(index) if known is not None and topic_id is None else None
        members = tuple(
            ap3.BrokerState(broker_id=m[0], broker_epoch=m[1])
            if isinstance(m, tuple)
            else ap3.BrokerState(
                broker_id=m, broker_epoch=self.epoch(m) if m in self.controller.cluster.brokers else -1
            )
            for m in isr
        )
        request = ap3.AlterPartitionRequest(
            broker_id=requester,
            broker_epoch=self.epoch(requester) if requester_epoch is None else requester_epoch,
            topics=(
                ap3.TopicData(
                    topic_id=self.topic_id(topic) if topic_id is None else topic_id,
                    partitions=(
                        ap3.PartitionData(
                            partition_index=index,
                            leader_epoch=current.leader_epoch if leader_epoch is None else leader_epoch,
                            new_isr_with_epochs=members,
                            leader_recovery_state=(
                                int(current.leader_recovery_state) if recovery is None else recovery
                            )
                            if current
                            else (recovery or 0),
                            partition_epoch=current.partition_epoch
                            if partition_epoch is None
                            else partition_epoch,
                        ),
                    ),
                ),
            ),
        )
        response = self.controller.alter_partition(self.now, request, version)
        partition = response.topics[0].partitions[0] if response.topics else None
        return response, partition

    def elect(self, topic: str, partitions: list[int], unclean: bool) -> Any:
        request = ElectLeadersRequest(
            election_type=1 if unclean else 0,
            topic_partitions=(TopicPartitions(topic=topic, partitions=tuple(partitions)),),
            timeout=NO_TIMEOUT,
        )
        response = self.controller.elect_leaders(self.now, request)
        return response.replica_election_results[0].partition_result[0].error_code

    # ---- configs ------------------------------------------------------------------------------------
    def incremental_alter_configs(
        self,
        resources: dict[tuple[int, str], dict[str, tuple[OpType, str | None]]],
        validate_only: bool = False,
    ) -> dict[tuple[int, str], tuple[ErrorCode, str | None]]:
        """{(resource type, name): {key: (op, value)}} -> {(resource type, name): (error, message)}."""
        request = iac1.IncrementalAlterConfigsRequest(
            resources=tuple(
                iac1.AlterConfigsResource(
                    resource_type=rtype,
                    resource_name=name,
                    configs=tuple(
                        iac1.AlterableConfig(name=k, config_operation=int(op), value=v)
                        for k, (op, v) in ops.items()
                    ),
                )
                for (rtype, name), ops in resources.items()
            ),
            validate_only=validate_only,
        )
        response = self.controller.incremental_alter_configs(self.now, request)
        return {
            (r.resource_type, r.resource_name): (r.error_code, r.error_message) for r in response.responses
        }

    def alter_configs(
        self, resource_type: int, name: str, configs: dict[str, str | None], validate_only: bool = False
    ) -> tuple[ErrorCode, str | None]:
        request = ac2.AlterConfigsRequest(
            resources=(
                ac2.AlterConfigsResource(
                    resource_type=resource_type,
                    resource_name=name,
                    configs=tuple(ac2.AlterableConfig(name=k, value=v) for k, v in configs.items()),
                ),
            ),
            validate_only=validate_only,
        )
        result = self.controller.alter_configs(self.now, request).responses[0]
        return result.error_code, result.error_message

    def configs(self, resource_type: int, name: str) -> dict[str, str]:
        return self.controller.configuration.get(resource_type, name)

    # ---- reassignment -------------------------------------------------------------------------------
    def reassign(
        self, topic: str, targets: dict[int, list[int] | None], allow_rf_change: bool = True
    ) -> dict[int, tuple[ErrorCode, str | None]]:
        """{partition: target replicas, or None to cancel} -> {partition: (error, message)}."""
        request = apr.AlterPartitionReassignmentsRequest(
            timeout=NO_TIMEOUT,
            allow_replication_factor_change=allow_rf_change,
            topics=(
                apr.ReassignableTopic(
                    name=topic,
                    partitions=tuple(
                        apr.ReassignablePartition(partition_index=i, replicas=None if r is None else tuple(r))
                        for i, r in targets.items()
                    ),
                ),
            ),
        )
        response = self.controller.alter_partition_reassignments(self.now, request)
        return {p.partition_index: (p.error_code, p.error_message) for p in response.responses[0].partitions}

    def reassignments(
        self, topics: dict[str, list[int]] | None = None
    ) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """{(topic, partition): (replicas, adding, removing)} of the reassignments in progress."""
        request = lpr.ListPartitionReassignmentsRequest(
            timeout=NO_TIMEOUT,
            topics=None
            if topics is None
            else tuple(
                lpr.ListPartitionReassignmentsTopics(name=n, partition_indexes=tuple(p))
                for n, p in topics.items()
            ),
        )
        response = self.controller.list_partition_reassignments(request)
        return {
            (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in response.topics
            for p in t.partitions
        }
