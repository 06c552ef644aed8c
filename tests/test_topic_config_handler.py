"""A topic config change on the broker, as Kafka's TopicConfigHandler.processConfigChanges ->
LogManager.updateTopicConfig: the topic's LogConfig is built once and given to that topic's logs only."""

from __future__ import annotations

import uuid

from epochkraft.broker.log import LogManager
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.replica_manager import ReplicaManager, log_config
from epochkraft.broker.settings import BrokerSettings
from epochkraft.protocol.metadata_records import (
    BrokerEndpoint,
    ConfigRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)

TOPIC, BROKER = 2, 4


class Broker:
    """Broker 1's replica manager over real logs in ``tmp_path``, fed metadata records."""

    def __init__(self, tmp_path) -> None:
        settings = BrokerSettings()
        self.cache = MetadataCache(1)
        self.logs = LogManager(tmp_path, log_config(settings))
        self.manager = ReplicaManager(1, settings, self.logs, self.cache, lambda: 10, lambda request: None)
        self.offset = 0

    async def apply(self, *records: object) -> None:
        changes = Changes()
        for record in records:
            self.cache.apply(self.offset, record, changes)
            self.offset += 1
        await self.manager.on_metadata(changes)

    async def create(self, name: str, partitions: int) -> None:
        topic_id = uuid.uuid4()
        await self.apply(
            TopicRecord(name=name, topic_id=topic_id),
            *(
                PartitionRecord(partition_id=i, topic_id=topic_id, replicas=(1,), isr=(1,), leader=1)
                for i in range(partitions)
            ),
        )

    def retention_ms(self, topic: str, index: int) -> int:
        plog = self.logs.get(topic, index)
        assert plog is not None
        return plog.config.retention_ms


async def registered(broker: Broker) -> Broker:
    """Broker 1 registered and unfenced in ``broker``'s metadata."""
    endpoint = BrokerEndpoint(name="P", host="h", port=1, security_protocol=0)
    register = RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=uuid.UUID(int=1),
        broker_epoch=10,
        end_points=(endpoint,),
        rack=None,
        fenced=True,
        in_controlled_shutdown=False,
    )
    await broker.apply(register, UnfenceBrokerRecord(id=1, epoch=10))
    return broker


async def started(tmp_path) -> Broker:
    broker = await registered(Broker(tmp_path))
    await broker.create("foo", 3)
    await broker.create("bar", 1)
    return broker


async def test_topic_config_change_updates_log_config(tmp_path):
    """LogManagerTest.testTopicConfigChangeUpdatesLogConfig: foo's logs take the new retention, one
    LogConfig among them; bar's log keeps the config it had."""
    broker = await started(tmp_path)
    bar_config = broker.logs.get("bar", 0).config  # type: ignore[union-attr]
    await broker.apply(
        ConfigRecord(resource_type=TOPIC, resource_name="foo", name="retention.ms", value="1000")
    )
    assert [broker.retention_ms("foo", i) for i in range(3)] == [1000] * 3
    assert len({id(broker.logs.get("foo", i).config) for i in range(3)}) == 1  # type: ignore[union-attr]
    assert broker.logs.get("bar", 0).config is bar_config  # type: ignore[union-attr]
    await broker.apply(
        ConfigRecord(resource_type=TOPIC, resource_name="foo", name="retention.ms", value=None)
    )
    assert broker.retention_ms("foo", 0) == log_config(BrokerSettings()).retention_ms


async def test_broker_level_log_config_change_reaches_every_topic_without_its_own(tmp_path):
    """A dynamic cluster default (log.retention.ms, the broker synonym of retention.ms) reaches the logs
    of every topic that has no value of its own, as Kafka's DynamicLogConfig."""
    broker = await started(tmp_path)
    await broker.apply(
        ConfigRecord(resource_type=TOPIC, resource_name="bar", name="retention.ms", value="5000")
    )
    await broker.apply(
        ConfigRecord(resource_type=BROKER, resource_name="", name="log.retention.ms", value="2000")
    )
    assert [broker.retention_ms("foo", i) for i in range(3)] == [2000] * 3
    assert broker.retention_ms("bar", 0) == 5000


async def test_a_topic_created_again_does_not_keep_the_old_topics_config(tmp_path):
    broker = await started(tmp_path)
    await broker.apply(
        ConfigRecord(resource_type=TOPIC, resource_name="bar", name="retention.ms", value="5000")
    )
    from epochkraft.protocol.metadata_records import RemoveTopicRecord

    await broker.apply(RemoveTopicRecord(topic_id=broker.cache.image.topic_ids["bar"]))
    await broker.create("bar", 1)
    assert broker.retention_ms("bar", 0) == log_config(BrokerSettings()).retention_ms


async def test_logs_opened_at_start_up_take_the_dynamic_broker_default(tmp_path):
    """LogManager.startup is given the topics' configs: a log opened from disk at start-up with the static
    defaults takes the cluster-wide log.retention.ms its topic inherits once the metadata names the
    partition, even when that config came in an earlier batch than the topic (before, it kept the static
    7 days: a shortened retention, or a compacted topic's policy, was lost across a restart)."""
    cluster_default = ConfigRecord(
        resource_type=BROKER, resource_name="", name="log.retention.ms", value="2000"
    )
    before = await started(tmp_path)
    await before.apply(cluster_default)
    await before.create("baz", 1)
    assert before.retention_ms("baz", 0) == 2000
    before.logs.flush_all()

    after = Broker(tmp_path)  # the restarted broker: its logs loaded first, then the metadata log replayed
    after.logs.load_all()
    await registered(after)
    await after.apply(cluster_default)
    topic_id = before.cache.image.topic_ids["baz"]
    await after.apply(
        TopicRecord(name="baz", topic_id=topic_id),
        PartitionRecord(partition_id=0, topic_id=topic_id, replicas=(1,), isr=(1,), leader=1),
    )
    assert after.retention_ms("baz", 0) == 2000
