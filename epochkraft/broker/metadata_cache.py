"""The broker's metadata cache: the metadata image (the same one the controller builds) and the queries the
broker asks of it.

``apply`` notes in a ``Changes`` what changed (partitions, brokers, deleted topics) so the replica manager
can react; partition changes carry the partition epoch so stale ones can be ignored downstream.
"""

from __future__ import annotations

from epochkraft.metadata.config_schema import TOPIC_CONFIGS
from epochkraft.metadata.image import BROKER, TOPIC, Changes, MetadataImage
from epochkraft.metadata.registrations import BrokerRegistration, Endpoint, PartitionRegistration

__all__ = ["Changes", "MetadataCache"]


class MetadataCache(MetadataImage):
    def __init__(self, node_id: int = -1) -> None:
        super().__init__(node_id)
        self.next_offset = 0  # offset after the last applied record
        self.cluster_id: str | None = None

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
    def apply(self, offset: int, record: object, changes: Changes) -> None:
        self.replay(record, changes)
        self.next_offset = offset + 1
