"""The controller's admin operations: CreatePartitions, partition reassignment (KIP-455) and topic and broker
configs, each deciding with the replication and configuration cores and committing the records they return.

A part of the Controller (it inherits them), kept in a module of its own; like every controller operation
they decide first and change state only by replaying what they commit.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Protocol, TypeVar

from kio.schema.alter_configs.v2 import request as alter_configs_req
from kio.schema.alter_configs.v2 import response as alter_configs_resp
from kio.schema.alter_partition_reassignments.v1 import response as reassign_resp
from kio.schema.alter_partition_reassignments.v1.request import AlterPartitionReassignmentsRequest
from kio.schema.create_partitions.v3 import response as create_partitions_resp
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest
from kio.schema.incremental_alter_configs.v1 import request as incremental_req
from kio.schema.incremental_alter_configs.v1 import response as incremental_resp
from kio.schema.list_partition_reassignments.v0 import response as list_reassign_resp
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from epochkraft.controller.cluster_control import ClusterControl
from epochkraft.controller.configuration_control import ApiError, ConfigurationControl, OpType
from epochkraft.controller.replication_control import ReplicationControl
from epochkraft.metadata.config_schema import MIN_INSYNC, UNCLEAN, ResourceType
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ConfigRecord

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


class ConfigResource(Protocol):
    """A resource of AlterConfigs or IncrementalAlterConfigs: what both requests' resources share."""

    @property
    def resource_type(self) -> i8: ...
    @property
    def resource_name(self) -> str: ...


R = TypeVar("R", bound=ConfigResource)


class AdminOperations:
    cluster: ClusterControl
    replication: ReplicationControl
    configuration: ConfigurationControl
    _commit: Callable[[list, int], int]

    def create_partitions(
        self, now_ms: int, request: CreatePartitionsRequest
    ) -> create_partitions_resp.CreatePartitionsResponse:
        """CreatePartitions v3: each topic's partition count raised, all or nothing per topic."""
        active = [b for b, r in self.cluster.brokers.items() if r.active]
        names = [t.name for t in request.topics]
        results = []
        for topic in request.topics:
            error: ErrorCode
            message: str | None
            records: list
            if names.count(topic.name) > 1:
                error, message, records = ErrorCode.invalid_request, "Duplicate topic in request.", []
            else:
                assignments = (
                    None if topic.assignments is None else [tuple(a.broker_ids) for a in topic.assignments]
                )
                error, message, records = self.replication.decide_create_partitions(
                    topic.name, topic.count, assignments, active, set(self.cluster.brokers)
                )
            if error == ErrorCode.none and not request.validate_only:
                self._commit(records, now_ms)
            results.append(
                create_partitions_resp.CreatePartitionsTopicResult(
                    name=topic.name, error_code=error, error_message=message
                )
            )
        return create_partitions_resp.CreatePartitionsResponse(
            throttle_time=NO_THROTTLE, results=tuple(results)
        )

    def alter_partition_reassignments(
        self, now_ms: int, request: AlterPartitionReassignmentsRequest
    ) -> reassign_resp.AlterPartitionReassignmentsResponse:
        """AlterPartitionReassignments v1: start (replicas) or cancel (null) each partition's reassignment."""
        registered = set(self.cluster.brokers)
        allow_rf_change = request.allow_replication_factor_change
        records: list = []
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                error, message, record = self.replication.decide_alter_partition_reassignment(
                    topic.name,
                    p.partition_index,
                    None if p.replicas is None else tuple(p.replicas),
                    registered,
                    self.cluster.is_active,
                    allow_rf_change,
                )
                if record is not None:
                    records.append(record)
                partitions.append(
                    reassign_resp.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=error, error_message=message
                    )
                )
            topics.append(
                reassign_resp.ReassignableTopicResponse(name=topic.name, partitions=tuple(partitions))
            )
        self._commit(records, now_ms)
        return reassign_resp.AlterPartitionReassignmentsResponse(
            throttle_time=NO_THROTTLE,
            allow_replication_factor_change=allow_rf_change,
            error_code=ErrorCode.none,
            error_message=None,
            responses=tuple(topics),
        )

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> list_reassign_resp.ListPartitionReassignmentsResponse:
        """ListPartitionReassignments v0: the ongoing reassignments (of the partitions asked for)."""
        wanted = (
            None
            if request.topics is None
            else {(t.name, index) for t in request.topics for index in t.partition_indexes}
        )
        by_topic: dict[str, list] = {}
        for topic, index, p in self.replication.reassignments():
            if wanted is None or (topic.name, index) in wanted:
                by_topic.setdefault(topic.name, []).append(
                    list_reassign_resp.OngoingPartitionReassignment(
                        partition_index=i32(index),
                        replicas=_broker_ids(p.replicas),
                        adding_replicas=_broker_ids(p.adding_replicas),
                        removing_replicas=_broker_ids(p.removing_replicas),
                    )
                )
        return list_reassign_resp.ListPartitionReassignmentsResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            topics=tuple(
                list_reassign_resp.OngoingTopicReassignment(name=TopicName(name), partitions=tuple(parts))
                for name, parts in sorted(by_topic.items())
            ),
        )

    # ---- configs ------------------------------------------------------------------------------------
    def incremental_alter_configs(
        self, now_ms: int, request: incremental_req.IncrementalAlterConfigsRequest
    ) -> incremental_resp.IncrementalAlterConfigsResponse:
        """IncrementalAlterConfigs v1: SET/DELETE/APPEND/SUBTRACT per key, atomic per resource."""

        def decide(resource: incremental_req.AlterConfigsResource) -> tuple[ApiError, list[ConfigRecord]]:
            operations = []
            for c in resource.configs:
                try:
                    operations.append((c.name, OpType(c.config_operation), c.value))
                except ValueError:
                    return ApiError(ErrorCode.invalid_request, f"Unknown operation {c.config_operation}."), []
            return self.configuration.decide_incremental_alter(
                (resource.resource_type, resource.resource_name), operations
            )

        results = self._alter_configs(now_ms, request.resources, request.validate_only, decide)
        return incremental_resp.IncrementalAlterConfigsResponse(
            throttle_time=NO_THROTTLE,
            responses=tuple(
                incremental_resp.AlterConfigsResourceResponse(
                    error_code=result.error,
                    error_message=result.message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
                for resource, result in results
            ),
        )

    def alter_configs(
        self, now_ms: int, request: alter_configs_req.AlterConfigsRequest
    ) -> alter_configs_resp.AlterConfigsResponse:
        """AlterConfigs v2: each resource's dynamic configs are replaced by the ones given."""

        def decide(resource: alter_configs_req.AlterConfigsResource) -> tuple[ApiError, list[ConfigRecord]]:
            configs = {c.name: c.value for c in resource.configs}
            if len(configs) != len(resource.configs):
                return ApiError(ErrorCode.invalid_request, "Duplicate config keys."), []
            return self.configuration.decide_legacy_alter(
                (resource.resource_type, resource.resource_name), configs
            )

        results = self._alter_configs(now_ms, request.resources, request.validate_only, decide)
        return alter_configs_resp.AlterConfigsResponse(
            throttle_time=NO_THROTTLE,
            responses=tuple(
                alter_configs_resp.AlterConfigsResourceResponse(
                    error_code=result.error,
                    error_message=result.message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
                for resource, result in results
            ),
        )

    def _alter_configs(
        self,
        now_ms: int,
        resources: tuple[R, ...],
        validate_only: bool,
        decide: Callable[[R], tuple[ApiError, list[ConfigRecord]]],
    ) -> list[tuple[R, ApiError]]:
        """Decides each resource, commits the accepted ones, then lets the leaderless partitions a write of
        unclean.leader.election.enable covers elect (``_unclean_elections_for_configs``)."""
        keys = [(r.resource_type, r.resource_name) for r in resources]
        results = []
        records: list[ConfigRecord] = []
        for resource, key in zip(resources, keys, strict=True):
            if keys.count(key) > 1:
                result = ApiError(ErrorCode.invalid_request, "Each resource may only appear once.")
            else:
                result, resource_records = decide(resource)
                records += resource_records
            results.append((resource, result))
        if not validate_only and records:
            # The configs and the ELR they invalidate in one batch (Kafka's atomic ControllerResult): a
            # failover between them would leave an ELR chosen under the old min ISR.
            self._commit(records + self._elr_changes_for_configs(records), now_ms)
            self._commit(self._unclean_elections_for_configs(records), now_ms)
        return results

    def _unclean_elections_for_configs(self, records: list[ConfigRecord]) -> list:
        """unclean.leader.election.enable written lets the leaderless partitions it covers elect at once:
        a topic's for a topic config, every topic's for a broker-level one. No other config elects, so a
        retention change does not walk every partition. Kafka also looks on a timer
        (ReplicationControlManager.maybeTriggerUncleanLeaderElectionForLeaderlessPartitions); here a
        partition left leaderless elects when a replica is unfenced (decide_leaderless_elections)."""
        changed = {(r.resource_type, r.resource_name) for r in records if r.name == UNCLEAN}
        if not changed:
            return []
        if any(resource_type == ResourceType.BROKER for resource_type, _ in changed):
            return self.replication.maybe_elect_unclean_leaders(self.cluster.is_active)
        topics = sorted(name for _resource_type, name in changed)
        return self.replication.maybe_elect_unclean_leaders(self.cluster.is_active, topics)

    def _elr_changes_for_configs(self, records: list[ConfigRecord]) -> list:
        """A min.insync.replicas write clears the ELR it could invalidate (Kafka clears it even when the
        value is unchanged): a topic's for a topic config, every topic's for a broker-level one."""
        if not self.replication.elr_enabled:
            return []
        changed = {(r.resource_type, r.resource_name) for r in records if r.name == MIN_INSYNC}
        if any(resource_type == ResourceType.BROKER for resource_type, _ in changed):
            return self.replication.decide_clear_elr(None)
        changes = []
        for _resource_type, topic in sorted(changed):
            changes += self.replication.decide_clear_elr(topic)
        return changes


def _broker_ids(replicas: tuple[int, ...]) -> tuple[BrokerId, ...]:
    return tuple(BrokerId(b) for b in replicas)
