"""The metadata image: the cluster as the metadata log describes it, and the delta that builds the next one.

One image type for the controller and the brokers alike, as Kafka's MetadataImage/MetadataDelta: a
``MetadataDelta`` replays records over an image and ``apply()`` gives the next image, leaving the one it
started from as it was, so a broker publishes the image and the delta's ``Changes`` of what it fetched at
once, whole batches only (Kafka's MetadataLoader). The controller's registration, replication and configuration managers replay
into one image in place and keep their own bookkeeping (heartbeat sessions, registration offsets) beside
it; the broker's metadata cache answers its queries from the last image published. A record for an
older broker incarnation (another broker epoch) changes nothing; partition changes carry the partition
epoch, so stale ones can be ignored downstream.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import singledispatchmethod
from typing import TypedDict

from epochkraft.metadata.client_quotas import QuotaEntity, quota_entity
from epochkraft.metadata.config_schema import TOPIC_CONFIGS, ResourceType
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
    """The cluster at one offset of the metadata log. A broker's published images are never changed: a
    ``MetadataDelta`` builds the next one beside it, sharing what did not change. (The controller's own
    image is the exception: its managers replay into it in place, see ``MetadataDelta``'s ``in_place``.)"""

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

    # ---- queries (a broker's handlers ask them of one image per request, as Kafka's KRaftMetadataCache
    # reads its _currentImage once per method and hands that image to its helpers) ----------------------
    def partition(self, name: str, index: int) -> PartitionRegistration | None:
        topic = self.topic(name)
        return None if topic is None else topic.partitions.get(index)

    def endpoint(self, broker_id: int, listener_name: str | None = None) -> Endpoint | None:
        """The broker's endpoint on the named listener (None: its first), or None if it has none."""
        reg = self.brokers.get(broker_id)
        if reg is None or not reg.endpoints:
            return None
        if listener_name is None:
            return reg.endpoints[0]
        return next((e for e in reg.endpoints if e.name == listener_name), None)

    def alive_brokers(self) -> list[BrokerRegistration]:
        return [r for r in sorted(self.brokers.values(), key=lambda r: r.broker_id) if not r.fenced]

    # the partition core's BrokerView
    def is_fenced(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is None or reg.fenced

    def in_controlled_shutdown(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and reg.in_controlled_shutdown

    def broker_epoch(self, broker_id: int) -> int | None:
        reg = self.brokers.get(broker_id)
        return None if reg is None else reg.epoch

    def dynamic_config(self, resource_type: int, name: str) -> dict[str, str]:
        return self.configs.get((resource_type, name), {})

    def topic_config(self, topic: str, key: str) -> str | None:
        """The topic's own value, else this broker's dynamic value, else the cluster-wide dynamic default
        (None: the static setting applies), in Kafka's precedence; at the broker levels under the topic
        config's broker synonyms (retention.ms: log.retention.ms; LogConfig.TopicConfigSynonyms)."""
        value = self.configs.get((TOPIC, topic), {}).get(key)
        if value is not None:
            return value
        definition = TOPIC_CONFIGS.get(key)
        synonyms = definition.synonyms if definition is not None and definition.synonyms else (key,)
        for resource in ((BROKER, str(self.node_id)), (BROKER, "")):
            configs = self.configs.get(resource, {})
            for synonym in synonyms:
                if (value := configs.get(synonym)) is not None:
                    return value
        return None

    def min_insync(self, topic: str, default: int) -> int:
        value = self.topic_config(topic, "min.insync.replicas")
        return int(value) if value is not None else default


class MetadataDelta:
    """Records replayed over an image (Kafka's MetadataDelta): ``apply()`` returns the next image, which
    shares every container, topic and config the records did not touch with the one it started from;
    that one is left as it was. ``changes`` (when given) collects what the records changed, for a
    broker's replicas. A delta copies the dicts it writes once (the topics dict, a config's entries) and
    sets a changed topic's partitions in its persistent map, so a broker replays a whole fetch response
    into one delta.

    ``in_place`` writes straight into ``image`` instead: the controller's managers keep their state in
    one image they replay every record into, written and read at once, as Kafka's controller keeps its
    own (timeline) structures rather than images: such a delta never copies, so what the managers hold
    of that image stays live."""

    def __init__(
        self, image: MetadataImage, changes: Changes | None = None, *, in_place: bool = False
    ) -> None:
        self.image = image  # the image the records are replayed over
        self.changes = changes
        self._in_place = in_place
        self._next = image if in_place else copy.copy(image)
        self._owned: set[str] = set()  # containers already copied
        self._owned_topics: set[uuid.UUID] = set()  # topics already copied into the next image
        self._owned_entries: set[tuple[str, object]] = set()  # (container, key): inner dicts copied
        self._applied = False
        self.replay = self.replay  # bind once: 3.11's singledispatchmethod rebuilds a wrapper per access

    def apply(self) -> MetadataImage:
        """The next image; the delta takes no more records."""
        if self._in_place:
            raise TypeError("an in-place delta has no next image: its image is the result")
        self._applied = True
        return self._next

    # ---- copy on write ------------------------------------------------------------------------------
    def _open(self) -> MetadataImage:
        """The next image, to be written: refused once applied (it is published then)."""
        if self._applied:
            raise RuntimeError("records replayed into a delta already applied")
        return self._next

    def _writable(self, name: str) -> dict:
        self._open()
        if not self._in_place and name not in self._owned:
            setattr(self._next, name, dict(getattr(self._next, name)))
            self._owned.add(name)
        return getattr(self._next, name)

    def _writable_topic(self, topic_id: uuid.UUID) -> TopicInfo:
        topics: dict[uuid.UUID, TopicInfo] = self._writable("topics")
        topic = topics[topic_id]
        if not self._in_place and topic_id not in self._owned_topics:
            topic = topics[topic_id] = TopicInfo(topic.name, topic.topic_id, topic.partitions)
            self._owned_topics.add(topic_id)
        return topic

    def _writable_entry(self, name: str, key: object) -> dict:
        """The inner dict at ``key`` of a dict of dicts (configs, client quotas), made if missing."""
        outer = self._writable(name)
        inner = outer.get(key)
        if inner is None:
            inner = outer[key] = {}
            if not self._in_place:
                self._owned_entries.add((name, key))
        elif not self._in_place and (name, key) not in self._owned_entries:
            inner = outer[key] = dict(inner)
            self._owned_entries.add((name, key))
        return inner

    # ---- replay: the only place an image changes ----------------------------------------------------
    @singledispatchmethod
    def replay(self, record: object) -> None:
        raise TypeError(f"no replay for {type(record).__name__}")

    @replay.register
    def _(self, record: RegisterBrokerRecord) -> None:
        self._writable("brokers")[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in record.end_points),
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
        )
        if self.changes is not None:
            self.changes.brokers.add(record.broker_id)

    @replay.register
    def _(self, record: FenceBrokerRecord) -> None:
        self._update_broker(record.id, record.epoch, {"fenced": True})

    @replay.register
    def _(self, record: UnfenceBrokerRecord) -> None:
        self._update_broker(record.id, record.epoch, {"fenced": False})

    @replay.register
    def _(self, record: BrokerRegistrationChangeRecord) -> None:
        fields: BrokerStateChange = {}
        if record.fenced == CHANGE_FENCE:
            fields["fenced"] = True
        elif record.fenced == CHANGE_UNFENCE:
            fields["fenced"] = False
        if record.in_controlled_shutdown == 1:
            fields["in_controlled_shutdown"] = True
        self._update_broker(record.broker_id, record.broker_epoch, fields)

    @replay.register
    def _(self, record: UnregisterBrokerRecord) -> None:
        registration = self._next.brokers.get(record.broker_id)
        if registration is not None and registration.epoch == record.broker_epoch:
            del self._writable("brokers")[record.broker_id]
            if self.changes is not None:
                self.changes.brokers.add(record.broker_id)

    def _update_broker(self, broker_id: int, epoch: int, fields: BrokerStateChange) -> None:
        registration = self._next.brokers.get(broker_id)
        if registration is None or registration.epoch != epoch:
            return  # a record for an older incarnation changes nothing
        self._writable("brokers")[broker_id] = replace(registration, **fields)
        if self.changes is not None:
            self.changes.brokers.add(broker_id)

    @replay.register
    def _(self, record: TopicRecord) -> None:
        self._writable("topics")[record.topic_id] = TopicInfo(record.name, record.topic_id)
        if not self._in_place:
            self._owned_topics.add(record.topic_id)
        self._writable("topic_ids")[record.name] = record.topic_id
        self._next.topics_version = next(_TOPICS_VERSIONS)

    @replay.register
    def _(self, record: PartitionRecord) -> None:
        if record.topic_id not in self._next.topics:
            return
        topic = self._writable_topic(record.topic_id)
        if record.partition_id not in topic.partitions:
            self._next.topics_version = next(_TOPICS_VERSIONS)
        topic.partitions = topic.partitions.set(
            record.partition_id,
            PartitionRegistration(
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
            ),
        )
        if self.changes is not None:
            self.changes.partitions.add((topic.name, record.partition_id))

    @replay.register
    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        topic = self._next.topics.get(record.topic_id)
        if topic is None or record.partition_id not in topic.partitions:
            return
        topic = self._writable_topic(record.topic_id)
        topic.partitions = topic.partitions.set(
            record.partition_id, apply_change(topic.partitions[record.partition_id], record)
        )
        if self.changes is not None:
            self.changes.partitions.add((topic.name, record.partition_id))

    @replay.register
    def _(self, record: RemoveTopicRecord) -> None:
        topic = self._next.topics.get(record.topic_id)
        if topic is None:
            return
        del self._writable("topics")[record.topic_id]
        self._next.topics_version = next(_TOPICS_VERSIONS)
        self._writable("topic_ids").pop(topic.name, None)
        if (TOPIC, topic.name) in self._next.configs:  # a deleted topic's configs go with it
            del self._writable("configs")[(TOPIC, topic.name)]
            self._owned_entries.discard(("configs", (TOPIC, topic.name)))
        if self.changes is not None:
            self.changes.deleted_topics.append(topic)

    @replay.register
    def _(self, record: ConfigRecord) -> None:
        resource = (record.resource_type, record.resource_name)
        configs = self._writable_entry("configs", resource)
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value
        if not configs:
            del self._next.configs[resource]
            self._owned_entries.discard(("configs", resource))
        if self.changes is None:
            return
        if record.resource_type == TOPIC:
            self.changes.topic_configs.setdefault(record.resource_name, set()).add(record.name)
        elif record.resource_type == BROKER and record.resource_name in ("", str(self._next.node_id)):
            self.changes.broker_configs.add(record.name)

    @replay.register
    def _(self, record: UserScramCredentialRecord) -> None:
        self._writable("scram_credentials")[(record.name, record.mechanism)] = record

    @replay.register
    def _(self, record: RemoveUserScramCredentialRecord) -> None:
        self._writable("scram_credentials").pop((record.name, record.mechanism), None)

    @replay.register
    def _(self, record: AccessControlEntryRecord) -> None:
        self._writable("acls")[record.id] = AclBinding(
            AclResourceType(record.resource_type),
            record.resource_name,
            PatternType(record.pattern_type),
            record.principal,
            record.host,
            AclOperation(record.operation),
            AclPermissionType(record.permission_type),
        )

    @replay.register
    def _(self, record: RemoveAccessControlEntryRecord) -> None:
        self._writable("acls").pop(record.id, None)

    @replay.register
    def _(self, record: ClientQuotaRecord) -> None:
        entity = quota_entity((e.entity_type, e.entity_name) for e in record.entity)
        quotas = self._writable_entry("client_quotas", entity)
        if record.remove:
            quotas.pop(record.key, None)
        else:
            quotas[record.key] = record.value
        if not quotas:
            del self._next.client_quotas[entity]
            self._owned_entries.discard(("client_quotas", entity))
        self._next.client_quotas_version += 1

    @replay.register
    def _(self, record: ProducerIdsRecord) -> None:
        self._open().next_producer_id = record.next_producer_id

    @replay.register
    def _(self, record: FeatureLevelRecord) -> None:
        if record.feature_level == 0 and record.name != METADATA_VERSION:
            self._writable("features").pop(record.name, None)  # level 0 removes a feature (Kafka's replay)
        else:
            self._writable("features")[record.name] = record.feature_level

    @replay.register
    def _(self, record: NoOpRecord) -> None:
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


def image_after(image: MetadataImage, records: Iterable[object]) -> MetadataImage:
    """The image ``records`` make of ``image`` (which stays as it was), as one delta."""
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply()
