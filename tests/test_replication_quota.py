"""The follower replication throttle: Kafka's Rate measurement, its replica list format, and the fetcher
leaving throttled replicas outside the ISR out of its Fetch while the quota is exceeded."""

from __future__ import annotations

from dataclasses import dataclass, field

from epochkraft.broker.fetcher import ReplicaFetcher
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.replication_quota import WINDOWS, ReplicationQuota, is_throttled
from epochkraft.broker.settings import BrokerSettings
from epochkraft.metadata.config_schema import ResourceType
from epochkraft.protocol.metadata_records import ConfigRecord

MB = 1_000_000


def test_rate_counts_at_least_ten_windows_so_a_first_burst_is_not_throttled():
    quota = ReplicationQuota()
    quota.record(10 * MB, now=0.0)
    assert quota.rate(0.0) == MB  # 10 MB over the minimum of 10 one-second windows
    assert not quota.exceeded(MB, 0.0)
    quota.record(1, now=0.5)
    assert quota.exceeded(MB, 0.5)


def test_rate_forgets_windows_older_than_the_sample_count():
    quota = ReplicationQuota()
    quota.record(20 * MB, now=0.0)
    assert quota.exceeded(MB, now=WINDOWS - 0.5)
    assert quota.rate(now=WINDOWS) == 0.0
    quota.record(MB, now=20.0)
    quota.record(MB, now=25.0)
    assert quota.rate(now=25.0) == 2 * MB / 10


def test_throttled_replica_list_as_kafka_writes_it():
    assert is_throttled("*", 3, node_id=2)
    assert is_throttled("0:1, 3:2", 3, node_id=2)
    assert not is_throttled("0:1,3:2", 3, node_id=1)
    assert not is_throttled("0:2", 3, node_id=2)
    assert not is_throttled(None, 0, node_id=2) and not is_throttled("", 0, node_id=2)


@dataclass
class Partition:
    topic: str
    index: int
    isr: tuple[int, ...]


@dataclass
class Replica:
    partition: Partition
    key: tuple[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.partition.topic, self.partition.index)


@dataclass
class Manager:
    cache: MetadataCache
    node_id: int = 2
    settings: BrokerSettings = field(default_factory=BrokerSettings)


def configure(cache: MetadataCache, resource_type: ResourceType, name: str, key: str, value: str) -> None:
    record = ConfigRecord(resource_type=int(resource_type), resource_name=name, name=key, value=value)
    cache.apply(0, record, Changes())


async def test_fetcher_leaves_out_throttled_replicas_outside_the_isr_while_the_quota_is_exceeded():
    cache = MetadataCache(node_id=2)
    fetcher = ReplicaFetcher(1, Manager(cache), lambda: 5, unsafe_pre_kip903=False)
    try:
        copying = Replica(Partition("moving", 0, isr=(1, 3)))  # a new replica, still catching up
        in_sync = Replica(Partition("moving", 1, isr=(1, 2)))
        other = Replica(Partition("other", 0, isr=(1,)))
        fetcher.partitions = {r.key: r for r in (copying, in_sync, other)}
        fetcher.quota.record(100 * MB, now=0.0)
        everything = [copying, in_sync, other]
        assert fetcher._fetchable(now=0.0) == everything, "no rate set: nothing is throttled"

        configure(cache, ResourceType.BROKER, "2", "follower.replication.throttled.rate", str(MB))
        assert fetcher._fetchable(now=0.0) == everything, "no replica named throttled"

        configure(cache, ResourceType.TOPIC, "moving", "follower.replication.throttled.replicas", "*")
        assert fetcher._fetchable(now=0.0) == [in_sync, other], "in-sync replicas are never slowed down"
        assert fetcher._fetchable(now=WINDOWS + 1.0) == everything, "the rate fell below the bound"
    finally:
        await fetcher.stop()


async def test_only_this_brokers_named_replicas_outside_the_isr_are_throttled():
    cache = MetadataCache(node_id=2)
    configure(cache, ResourceType.TOPIC, "moving", "follower.replication.throttled.replicas", "0:2")
    fetcher = ReplicaFetcher(1, Manager(cache), lambda: 5, unsafe_pre_kip903=False)
    try:
        assert fetcher._throttled(cache.image, Replica(Partition("moving", 0, isr=(1,))))
        assert not fetcher._throttled(cache.image, Replica(Partition("moving", 0, isr=(1, 2)))), "in the ISR"
        assert not fetcher._throttled(cache.image, Replica(Partition("moving", 1, isr=(1,)))), (
            "another partition"
        )
    finally:
        await fetcher.stop()
