"""The broker's metadata cache: the last metadata image published (the same image type the controller
builds) and the queries the broker asks of it.

The loader replays what it fetched (whole batches) into a ``MetadataDelta`` over the published image and
publishes the next image (``publish``, which hands it to the cache's publishers too) before the delta's
``Changes`` reach the replica manager, as Kafka's KRaftMetadataCache.setImage before
ReplicaManager.applyDelta: what a handler reads is always an image the controller wrote, whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from epochkraft.metadata.client_quotas import QuotaEntity
from epochkraft.metadata.config_schema import TOPIC_CONFIGS
from epochkraft.metadata.image import BROKER, TOPIC, Changes, MetadataDelta, MetadataImage
from epochkraft.metadata.registrations import BrokerRegistration, Endpoint, PartitionRegistration, TopicInfo
from epochkraft.protocol.metadata_records import UserScramCredentialRecord
from epochkraft.security.authorizer import AclBinding

__all__ = ["Changes", "MetadataCache"]


class MetadataCache:
    def __init__(self, node_id: int = -1) -> None:
        self.image = MetadataImage(node_id)
        self.next_offset = 0  # offset after the last record in the published image
        self.cluster_id: str | None = None
        # told of each image as it is published, before its changes reach the replica manager (Kafka's
        # metadata publishers: the authorizer's AclPublisher)
        self.publishers: list[Callable[[MetadataImage], None]] = []

    def publish(self, image: MetadataImage, next_offset: int) -> None:
        self.image = image
        self.next_offset = next_offset
        for publisher in self.publishers:
            publisher(image)

    # ---- the published image's parts (read only) -----------------------------------------------------
    @property
    def node_id(self) -> int:
        return self.image.node_id

    @property
    def brokers(self) -> dict[int, BrokerRegistration]:
        return self.image.brokers

    @property
    def topics(self) -> dict[uuid.UUID, TopicInfo]:
        return self.image.topics

    @property
    def topic_ids(self) -> dict[str, uuid.UUID]:
        return self.image.topic_ids

    @property
    def configs(self) -> dict[tuple[int, str], dict[str, str]]:
        return self.image.configs

    @property
    def scram_credentials(self) -> dict[tuple[str, int], UserScramCredentialRecord]:
        return self.image.scram_credentials

    @property
    def acls(self) -> dict[uuid.UUID, AclBinding]:
        return self.image.acls

    @property
    def next_producer_id(self) -> int:
        return self.image.next_producer_id

    @property
    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return self.image.client_quotas

    @property
    def client_quotas_version(self) -> int:
        return self.image.client_quotas_version

    @property
    def topics_version(self) -> int:
        return self.image.topics_version

    @property
    def features(self) -> dict[str, int]:
        return self.image.features

    @property
    def elr_enabled(self) -> bool:
        return self.image.elr_enabled

    def topic(self, name: str) -> TopicInfo | None:
        return self.image.topic(name)

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

    def partition(self, name: str, index: int) -> PartitionRegistration | None:
        topic = self.topic(name)
        return None if topic is None else topic.partitions.get(index)

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

    def alive_brokers(self) -> list[BrokerRegistration]:
        return [r for r in sorted(self.brokers.values(), key=lambda r: r.broker_id) if not r.fenced]

    # ---- applying records ----------------------------------------------------------------------------
    def load(self, records: Iterable[tuple[int, object]], changes: Changes) -> None:
        """(offset, record) pairs replayed over the published image into one delta, the next image
        published with ``changes`` filled. A record that fails leaves the published image as it was."""
        delta = MetadataDelta(self.image, changes)
        next_offset = self.next_offset
        for offset, record in records:
            delta.replay(record)
            next_offset = max(next_offset, offset + 1)
        self.publish(delta.apply(), next_offset)

    def apply(self, offset: int, record: object, changes: Changes) -> None:
        """One record as a batch of its own (tools and tests)."""
        self.load([(offset, record)], changes)
