"""The controller's admin operations: CreatePartitions, partition reassignment (KIP-455) and topic and broker
configs, each deciding with the replication and configuration cores and committing the records they return.

A part of the Controller (it inherits them), kept in a module of its own; like every controller operation
they decide first and change state only by replaying what they commit.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.alter_configs.v2 import response as alter_configs_resp
from kio.schema.alter_partition_reassignments.v1 import response as reassign_resp
from kio.schema.create_partitions.v3 import response as create_partitions_resp
from kio.schema.incremental_alter_configs.v1 import response as incremental_resp
from kio.schema.list_partition_reassignments.v0 import response as list_reassign_resp
from kio.schema.types import TopicName
from kio.static.primitive import i32

from epochkraft.controller.cluster_control import ClusterControl
from epochkraft.controller.configuration_control import ApiError, ConfigurationControl, OpType
from epochkraft.controller.replication_control import ReplicationControl
from epochkraft.metadata.config_schema import MIN_INSYNC, UNCLEAN, ResourceType
from epochkraft.protocol.errors import ErrorCode

NO_THROTTLE = datetime.timedelta(0)


class AdminOperations:
    cluster: ClusterControl
    replication: ReplicationControl
    configuration: ConfigurationControl
    _commit: Callable[[list, int], int]

    def create_partitions(self, now_ms: int, request: Any) -> create_partitions_resp.CreatePartitionsResponse:
        """CreatePartitions v3: each topic's partition count raised, all or nothing per topic."""
        active = [b for b, r in self.cluster.brokers.items() if r.active]
        names = [t.name for t in request.topics]
        results = []
        for topic in request.topics:
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
        self, now_ms: int, request: Any
    ) -> reassign_resp.AlterPartitionReassignmentsResponse:
        """AlterPartitionReassignments v1: start (replicas) or cancel (null) each partition's reassignment."""
        registered = set(self.cluster.brokers)
        allow_rf_change = getattr(request, "allow_replication_factor_change", True)
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
        self, request: Any
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
                        replicas=p.replicas,
                        adding_replicas=p.adding_replicas,
                        removing_replicas=p.removing_replicas,
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
        self, now_ms: int, request: Any
    ) -> incremental_resp.IncrementalAlterConfigsResponse:
        """IncrementalAlterConfigs v1: SET/DELETE/APPEND/SUBTRACT per key, atomic per resource."""

        def decide(resource: Any) -> tuple[ApiError, list]:
            operations = []
            for c in resource.configs:
                try:
                    operations.append((c.name, OpType(c.config_operation), c.value))
                except ValueError:
                    return ApiError(ErrorCode.invalid_request, f"Unknown operation {c.config_operation}."), []
            return self.configuration.decide_incremental_alter(
                (resource.resource_type, resource.resource_name), operations
            )

        results = self._alter_configs(now_ms, request, decide)
        return incremental_resp.IncrementalAlterConfigsResponse(
            throttle_time=NO_THROTTLE,
            responses=tuple(incremental_resp.AlterConfigsResourceResponse(**r) for r in results),
        )

    def alter_configs(self, now_ms: int, request: Any) -> alter_configs_resp.AlterConfigsResponse:
        """AlterConfigs v2: each resource's dynamic configs are replaced by the ones given."""

        def decide(resource: Any) -> tuple[ApiError, list]:
            configs = {c.name: c.value for c in resource.configs}
            if len(configs) != len(resource.configs):
                return ApiError(ErrorCode.invalid_request, "Duplicate config keys."), []
            return self.configuration.decide_legacy_alter(
                (resource.resource_type, resource.resource_name), configs
            )

        results = self._alter_configs(now_ms, request, decide)
        return alter_configs_resp.AlterConfigsResponse(
            throttle_time=NO_THROTTLE,
            responses=tuple(alter_configs_resp.AlterConfigsResourceResponse(**r) for r in results),
        )

    def _alter_configs(
        self, now_ms: int, request: Any, decide: Callable[[Any], tuple[ApiError, list]]
    ) -> list[dict[str, Any]]:
        """Decides each resource, commits the accepted ones, then lets the leaderless partitions a write of
        unclean.leader.election.enable covers elect (``_unclean_elections_for_configs``)."""
        keys = [(r.resource_type, r.resource_name) for r in request.resources]
        results = []
        records: list = []
        for resource, key in zip(request.resources, keys, strict=True):
            if keys.count(key) > 1:
                result = ApiError(ErrorCode.invalid_request, "Each resource may only appear once.")
            else:
                result, resource_records = decide(resource)
                records += resource_records
            results.append(
                {
                    "error_code": result.error,
                    "error_message": result.message,
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                }
            )
        if not request.validate_only and records:
            # The configs and the ELR they invalidate in one batch (Kafka's atomic ControllerResult): a
            # failover between them would leave an ELR chosen under the old min ISR.
            self._commit(records + self._elr_changes_for_configs(records), now_ms)
            self._commit(self._unclean_elections_for_configs(records), now_ms)
        return results

    def _unclean_elections_for_configs(self, records: list) -> list:
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

    def _elr_changes_for_configs(self, records: list) -> list:
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
