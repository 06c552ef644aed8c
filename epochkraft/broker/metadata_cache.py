"""The broker's metadata cache: the cluster as the metadata log describes it, applied record by record.

``apply`` returns what changed (partitions, brokers, deleted topics) so the replica manager can react;
partition changes carry the partition epoch so stale ones can be ignored downstream.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from functools import singledispatchmethod

from epochkraft.controller.config_schema import ResourceType
from epochkraft.controller.replication_control import apply_change
from epochkraft.controller.state import BrokerRegistration, Endpoint, PartitionRegistration, TopicInfo
from epochkraft.protocol.metadata_records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

TOPIC, BROKER = int(ResourceType.TOPIC), int(ResourceType.BROKER)


@dataclass
class Changes:
    partitions: set[tuple[str, int]] = field(default_factory=set)
    brokers: set[int] = field(default_factory=set)
    deleted_topics: list[TopicInfo] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.partitions or self.brokers or self.deleted_topics)


class MetadataCache:
    def __init__(self, node_id: int = -1) -> None:
        self.node_id = node_id  # whose per-broker dynamic configs apply
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[uuid.UUID, TopicInfo] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}  # (resource type, name) -> dynamic configs
        self.next_offset = 0  # offset after the last applied record
        self.cluster_id: str | None = None
        self._apply = self._apply  # bind once: 3.11's singledispatchmethod rebuilds a wrapper per access

    # ---- BrokerView (for the partition core) ---------------------------------------------------------
    def is_fenced(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is None or reg.fenced

    def in_controlled_shutdown(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and reg.in_controlled_shutdown

    def broker_epoch(self, broker_id: int) -> int | None:
        reg = self.brokers.get(broker_id)
        return None if reg is None else reg.epoch

    # ---- queries -------------------------------------------------------------------------------------
    def endpoint(self, broker_id: int, listener_name: str | None = None) -> Endpoint | None:
        """The broker's endpoint on the named listener (None: its first), or None if it has none."""
        reg = self.brokers.get(broker_id)
        if reg is None or not reg.endpoints:
            return None
        if listener_name is None:
            return reg.endpoints[0]
        return next((e for e in reg.endpoints if e.name == listener_name), None)

    def topic(self, name: str) -> TopicInfo | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics.get(topic_id)

    def partition(self, name: str, index: int) -> PartitionRegistration | None:
        topic = self.topic(name)
        return None if topic is None else topic.partitions.get(index)

    def dynamic_config(self, resource_type: int, name: str) -> dict[str, str]:
        return self.configs.get((resource_type, name), {})

    def topic_config(self, topic: str, key: str) -> str | None:
        """The topic's own value, else this broker's dynamic value, else the cluster-wide dynamic default
        (None: the static setting applies), in Kafka's precedence."""
        for resource in ((TOPIC, topic), (BROKER, str(self.node_id)), (BROKER, "")):
            value = self.configs.get(resource, {}).get(key)
            if value is not None:
                return value
        return None

    def min_insync(self, topic: str, default: int) -> int:
        value = self.topic_config(topic, "min.insync.replicas")
        return int(value) if value is not None else default

    def alive_brokers(self) -> list[BrokerRegistration]:
        return [r for r in sorted(self.brokers.values(), key=lambda r: r.broker_id) if not r.fenced]

    # ---- applying records ----------------------------------------------------------------------------
    def apply(self, offset: int, record: object, changes: Changes) -> None:
        self._apply(record, changes)
        self.next_offset = offset + 1

    @singledispatchmethod
    def _apply(self, record: object, changes: Changes) -> None:
        pass  # records the broker does not need

    @_apply.register
    def _(self, record: RegisterBrokerRecord, changes: Changes) -> None:
        self.brokers[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in record.end_points),
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
        )
        changes.brokers.add(record.broker_id)

    def _update_broker(self, broker_id: int, epoch: int, changes: Changes, **fields: bool) -> None:
        reg = self.brokers.get(broker_id)
        if reg is not None and reg.epoch == epoch:
            self.brokers[broker_id] = replace(reg, **fields)
            changes.brokers.add(broker_id)

    @_apply.register
    def _(self, record: FenceBrokerRecord, changes: Changes) -> None:
        self._update_broker(record.id, record.epoch, changes, fenced=True)

    @_apply.register
    def _(self, record: UnfenceBrokerRecord, changes: Changes) -> None:
        self._update_broker(record.id, record.epoch, changes, fenced=False)

    @_apply.register
    def _(self, record: BrokerRegistrationChangeRecord, changes: Changes) -> None:
        fields: dict[str, bool] = {}
        if record.fenced in (1, -1):
            fields["fenced"] = record.fenced == 1
        if record.in_controlled_shutdown == 1:
            fields["in_controlled_shutdown"] = True
        self._update_broker(record.broker_id, record.broker_epoch, changes, **fields)

    @_apply.register
    def _(self, record: UnregisterBrokerRecord, changes: Changes) -> None:
        reg = self.brokers.get(record.broker_id)
        if reg is not None and reg.epoch == record.broker_epoch:
            del self.brokers[record.broker_id]
            changes.brokers.add(record.broker_id)

    @_apply.register
    def _(self, record: TopicRecord, changes: Changes) -> None:
        self.topics[record.topic_id] = TopicInfo(record.name, record.topic_id)
        self.topic_ids[record.name] = record.topic_id

    @_apply.register
    def _(self, record: PartitionRecord, changes: Changes) -> None:
        topic = self.topics.get(record.topic_id)
        if topic is None:
            return
        from epochkraft.controller.state import LeaderRecoveryState

        topic.partitions[record.partition_id] = PartitionRegistration(
            replicas=tuple(record.replicas),
            isr=tuple(record.isr),
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            leader_recovery_state=LeaderRecoveryState(record.leader_recovery_state),
            removing_replicas=tuple(record.removing_replicas),
            adding_replicas=tuple(record.adding_replicas),
        )
        changes.partitions.add((topic.name, record.partition_id))

    @_apply.register
    def _(self, record: PartitionChangeRecord, changes: Changes) -> None:
        topic = self.topics.get(record.topic_id)
        if topic is None or record.partition_id not in topic.partitions:
            return
        topic.partitions[record.partition_id] = apply_change(topic.partitions[record.partition_id], record)
        changes.partitions.add((topic.name, record.partition_id))

    @_apply.register
    def _(self, record: RemoveTopicRecord, changes: Changes) -> None:
        topic = self.topics.pop(record.topic_id, None)
        if topic is not None:
            self.topic_ids.pop(topic.name, None)
            self.configs.pop((TOPIC, topic.name), None)
            changes.deleted_topics.append(topic)

    @_apply.register
    def _(self, record: ConfigRecord, changes: Changes) -> None:
        resource = (record.resource_type, record.resource_name)
        configs = self.configs.setdefault(resource, {})
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value
        if not configs:
            del self.configs[resource]
        # Replicas re-read their configs (min.insync.replicas) when their partition is reported changed.
        if record.resource_type == TOPIC:
            topic = self.topic(record.resource_name)
            if topic is not None:
                changes.partitions.update((topic.name, i) for i in topic.partitions)
        elif record.resource_type == BROKER and record.resource_name in ("", str(self.node_id)):
            for topic in self.topics.values():
                changes.partitions.update((topic.name, i) for i in topic.partitions)

    @_apply.register(FeatureLevelRecord)
    @_apply.register(NoOpRecord)
    @_apply.register(ProducerIdsRecord)
    def _(self, record: object, changes: Changes) -> None:
        pass
