"""The metadata image: the cluster as the metadata log describes it, built record by record.

One image type for the controller and the brokers alike, as Kafka's MetadataImage/MetadataDelta: the
controller's registration, replication and configuration managers keep their own bookkeeping (heartbeat
sessions, registration offsets) beside it, and the broker's metadata cache adds its queries to it. A
record for an older broker incarnation (another broker epoch) changes nothing. ``replay`` notes in a
``Changes`` what the record changed, so a broker's replicas can react; partition changes carry the
partition epoch, so stale ones can be ignored downstream.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field, replace
from functools import singledispatchmethod
from typing import TypedDict

from epochkraft.metadata.client_quotas import QuotaEntity, quota_entity
from epochkraft.metadata.config_schema import ResourceType
from epochkraft.metadata.registrations import (
    NO_LEADER_CHANGE,
    BrokerRegistration,
    Endpoint,
    LeaderRecoveryState,
    PartitionRegistration,
    TopicInfo,
)
from epochkraft.protocol.metadata_records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from epochkraft.security.authorizer import AclBinding, AclOperation, AclPermissionType, PatternType
from epochkraft.security.authorizer import ResourceType as AclResourceType

TOPIC, BROKER = int(ResourceType.TOPIC), int(ResourceType.BROKER)
# BrokerRegistrationChangeRecord.fenced values
CHANGE_FENCE = 1
CHANGE_UNFENCE = -1
METADATA_VERSION = "metadata.version"
ELR_VERSION = "eligible.leader.replicas.version"  # KIP-966's feature: level 1 turns ELR on
TRANSACTION_VERSION = "transaction.version"  # KIP-890's feature: level 2 bumps the epoch per transaction
MIN_ELR_METADATA_VERSION = 23  # 4.0-IV1, the first metadata.version whose records carry the ELR
_TOPICS_VERSIONS = itertools.count(1)


class BrokerStateChange(TypedDict, total=False):
    """The BrokerRegistration flags a fence, unfence or registration-change record sets."""

    fenced: bool
    in_controlled_shutdown: bool


@dataclass
class Changes:
    """What replayed records changed: partitions (topic, index), broker ids, deleted topics, and the
    names of the dynamic configs that changed per topic and at this broker's level (its own id or the
    cluster-wide default), as Kafka's ConfigurationsDelta: a config change names its topic, not the
    topic's partitions, so a broker updates what the config governs (Kafka's TopicConfigHandler)."""

    partitions: set[tuple[str, int]] = field(default_factory=set)
    brokers: set[int] = field(default_factory=set)
    deleted_topics: list[TopicInfo] = field(default_factory=list)
    topic_configs: dict[str, set[str]] = field(default_factory=dict)  # topic -> changed config names
    broker_configs: set[str] = field(default_factory=set)  # this broker's or the cluster default's

    def __bool__(self) -> bool:
        return bool(
            self.partitions
            or self.brokers
            or self.deleted_topics
            or self.topic_configs
            or self.broker_configs
        )


class MetadataImage:
    def __init__(self, node_id: int = -1) -> None:
        self.node_id = node_id  # whose per-broker dynamic configs apply
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[uuid.UUID, TopicInfo] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}  # (resource type, name) -> dynamic configs
        self.scram_credentials: dict[tuple[str, int], UserScramCredentialRecord] = {}  # (user, mechanism)
        self.acls: dict[uuid.UUID, AclBinding] = {}  # the authorizer reads these
        self.next_producer_id = -1  # first id of the next producer id block (Kafka's ProducerIdsImage)
        self.client_quotas: dict[QuotaEntity, dict[str, float]] = {}  # Kafka's ClientQuotasImage
        self.client_quotas_version = 0  # bumped by every ClientQuotaRecord: quota managers re-read on change
        # a new value whenever a topic is created or removed or gets a partition, unique across images: the
        # consumer group coordinator resolves topic regular expressions once per value
        self.topics_version = next(_TOPICS_VERSIONS)
        self.features: dict[str, int] = {}  # finalized feature levels (Kafka's FeaturesImage)
        self.replay = self.replay  # bind once: 3.11's singledispatchmethod rebuilds a wrapper per access

    @property
    def elr_enabled(self) -> bool:
        """Kafka's FeatureControlManager.isElrFeatureEnabled."""
        return (
            self.features.get(ELR_VERSION, 0) >= 1
            and self.features.get(METADATA_VERSION, 0) >= MIN_ELR_METADATA_VERSION
        )

    def topic(self, name: str) -> TopicInfo | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics.get(topic_id)

    # ---- replay: the only place the image changes ---------------------------------------------------
    @singledispatchmethod
    def replay(self, record: object, changes: Changes | None = None) -> None:
        raise TypeError(f"no replay for {type(record).__name__}")

    @replay.register
    def _(self, record: RegisterBrokerRecord, changes: Changes | None = None) -> None:
        self.brokers[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in record.end_points),
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
        )
        if changes is not None:
            changes.brokers.add(record.broker_id)

    @replay.register
    def _(self, record: FenceBrokerRecord, changes: Changes | None = None) -> None:
        self._update_broker(record.id, record.epoch, changes, {"fenced": True})

    @replay.register
    def _(self, record: UnfenceBrokerRecord, changes: Changes | None = None) -> None:
        self._update_broker(record.id, record.epoch, changes, {"fenced": False})

    @replay.register
    def _(self, record: BrokerRegistrationChangeRecord, changes: Changes | None = None) -> None:
        fields: BrokerStateChange = {}
        if record.fenced == CHANGE_FENCE:
            fields["fenced"] = True
        elif record.fenced == CHANGE_UNFENCE:
            fields["fenced"] = False
        if record.in_controlled_shutdown == 1:
            fields["in_controlled_shutdown"] = True
        self._update_broker(record.broker_id, record.broker_epoch, changes, fields)

    @replay.register
    def _(self, record: UnregisterBrokerRecord, changes: Changes | None = None) -> None:
        registration = self.brokers.get(record.broker_id)
        if registration is not None and registration.epoch == record.broker_epoch:
            del self.brokers[record.broker_id]
            if changes is not None:
                changes.brokers.add(record.broker_id)

    def _update_broker(
        self, broker_id: int, epoch: int, changes: Changes | None, fields: BrokerStateChange
    ) -> None:
        registration = self.brokers.get(broker_id)
        if registration is None or registration.epoch != epoch:
            return  # a record for an older incarnation changes nothing
        self.brokers[broker_id] = replace(registration, **fields)
        if changes is not None:
            changes.brokers.add(broker_id)

    @replay.register
    def _(self, record: TopicRecord, changes: Changes | None = None) -> None:
        self.topics[record.topic_id] = TopicInfo(record.name, record.topic_id)
        self.topic_ids[record.name] = record.topic_id
        self.topics_version = next(_TOPICS_VERSIONS)

    @replay.register
    def _(self, record: PartitionRecord, changes: Changes | None = None) -> None:
        topic = self.topics.get(record.topic_id)
        if topic is None:
            return
        if record.partition_id not in topic.partitions:
            self.topics_version = next(_TOPICS_VERSIONS)
        topic.partitions[record.partition_id] = PartitionRegistration(
            replicas=tuple(record.replicas),
            isr=tuple(record.isr),
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            leader_recovery_state=LeaderRecoveryState(record.leader_recovery_state),
            removing_replicas=tuple(record.removing_replicas),
            adding_replicas=tuple(record.adding_replicas),
            elr=tuple(record.eligible_leader_replicas or ()),
            last_known_elr=tuple(record.last_known_elr or ()),
        )
        if changes is not None:
            changes.partitions.add((topic.name, record.partition_id))

    @replay.register
    def replay_partition_change(self, record: PartitionChangeRecord, changes: Changes | None = None) -> None:
        topic = self.topics.get(record.topic_id)
        if topic is None or record.partition_id not in topic.partitions:
            return
        topic.partitions[record.partition_id] = apply_change(topic.partitions[record.partition_id], record)
        if changes is not None:
            changes.partitions.add((topic.name, record.partition_id))

    @replay.register
    def _(self, record: RemoveTopicRecord, changes: Changes | None = None) -> None:
        topic = self.topics.pop(record.topic_id, None)
        if topic is not None:
            self.topics_version = next(_TOPICS_VERSIONS)
            self.topic_ids.pop(topic.name, None)
            self.configs.pop((TOPIC, topic.name), None)  # a deleted topic's configs go with it
            if changes is not None:
                changes.deleted_topics.append(topic)

    @replay.register
    def _(self, record: ConfigRecord, changes: Changes | None = None) -> None:
        resource = (record.resource_type, record.resource_name)
        configs = self.configs.setdefault(resource, {})
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value
        if not configs:
            del self.configs[resource]
        if changes is None:
            return
        if record.resource_type == TOPIC:
            changes.topic_configs.setdefault(record.resource_name, set()).add(record.name)
        elif record.resource_type == BROKER and record.resource_name in ("", str(self.node_id)):
            changes.broker_configs.add(record.name)

    @replay.register
    def _(self, record: UserScramCredentialRecord, changes: Changes | None = None) -> None:
        self.scram_credentials[(record.name, record.mechanism)] = record

    @replay.register
    def _(self, record: RemoveUserScramCredentialRecord, changes: Changes | None = None) -> None:
        self.scram_credentials.pop((record.name, record.mechanism), None)

    @replay.register
    def _(self, record: AccessControlEntryRecord, changes: Changes | None = None) -> None:
        self.acls[record.id] = AclBinding(
            AclResourceType(record.resource_type),
            record.resource_name,
            PatternType(record.pattern_type),
            record.principal,
            record.host,
            AclOperation(record.operation),
            AclPermissionType(record.permission_type),
        )

    @replay.register
    def _(self, record: RemoveAccessControlEntryRecord, changes: Changes | None = None) -> None:
        self.acls.pop(record.id, None)

    @replay.register
    def _(self, record: ClientQuotaRecord, changes: Changes | None = None) -> None:
        entity = quota_entity((e.entity_type, e.entity_name) for e in record.entity)
        quotas = self.client_quotas.setdefault(entity, {})
        if record.remove:
            quotas.pop(record.key, None)
        else:
            quotas[record.key] = record.value
        if not quotas:
            del self.client_quotas[entity]
        self.client_quotas_version += 1

    @replay.register
    def _(self, record: ProducerIdsRecord, changes: Changes | None = None) -> None:
        self.next_producer_id = record.next_producer_id

    @replay.register
    def _(self, record: FeatureLevelRecord, changes: Changes | None = None) -> None:
        if record.feature_level == 0 and record.name != METADATA_VERSION:
            self.features.pop(record.name, None)  # level 0 removes a feature (Kafka's replay)
        else:
            self.features[record.name] = record.feature_level

    @replay.register
    def _(self, record: NoOpRecord, changes: Changes | None = None) -> None:
        pass  # carried in the log for Kafka compatibility


def apply_change(partition: PartitionRegistration, record: PartitionChangeRecord) -> PartitionRegistration:
    """The partition after a change record: partition epoch +1; leader epoch +1 only on a leader change."""
    leader_changed = record.leader != NO_LEADER_CHANGE
    return PartitionRegistration(
        replicas=partition.replicas if record.replicas is None else tuple(record.replicas),
        isr=partition.isr if record.isr is None else tuple(record.isr),
        leader=record.leader if leader_changed else partition.leader,
        leader_epoch=partition.leader_epoch + 1 if leader_changed else partition.leader_epoch,
        partition_epoch=partition.partition_epoch + 1,
        leader_recovery_state=partition.leader_recovery_state
        if record.leader_recovery_state == -1
        else LeaderRecoveryState(record.leader_recovery_state),
        removing_replicas=partition.removing_replicas
        if record.removing_replicas is None
        else tuple(record.removing_replicas),
        adding_replicas=partition.adding_replicas
        if record.adding_replicas is None
        else tuple(record.adding_replicas),
        elr=partition.elr
        if record.eligible_leader_replicas is None
        else tuple(record.eligible_leader_replicas),
        last_known_elr=partition.last_known_elr
        if record.last_known_elr is None
        else tuple(record.last_known_elr),
    )
