"""What a client can make a cluster hold or use up is bounded, against real daemons on loopback: offset
metadata (offset.metadata.max.bytes), producer ids (blocks from the controller), idle producers' state
(producer.id.expiration.ms), the cleaner's map (log.cleaner.dedupe.buffer.size)."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from epochkraft.harness.cluster import LocalCluster
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def create_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)]
    )
    futures[name].result(30)


def test_offset_commit_with_5_kb_metadata_is_refused(make_cluster):
    """confluent-kafka commits 5 KB of metadata on one partition and 4,000 bytes on another: the first gets
    OFFSET_METADATA_TOO_LARGE and is not stored, the second is committed (librdkafka sends a string's
    terminating NUL too, so 4,096 characters from it are 4,097)."""
    cluster = make_cluster(brokers=1)
    create_topic(cluster.bootstrap, "meta", partitions=2)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "meta-group"})
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.commit(
                offsets=[
                    TopicPartition("meta", 0, 7, metadata="x" * 5000),
                    TopicPartition("meta", 1, 8, metadata="y" * 4000),
                ],
                asynchronous=False,
            )
        assert refused.value.args[0].code() == KafkaError.OFFSET_METADATA_TOO_LARGE
        committed = consumer.committed([TopicPartition("meta", 0), TopicPartition("meta", 1)], timeout=15)
        assert [tp.offset for tp in committed] == [-1001, 8]
    finally:
        consumer.close()


INIT_PRODUCER_ID = InitProducerIdRequest(
    transactional_id=None,
    transaction_timeout=datetime.timedelta(seconds=60),
    producer_id=-1,
    producer_epoch=-1,
)


async def init_producer_ids(cluster: LocalCluster, count: int, deadline: float) -> tuple[list[int], set[str]]:
    """``count`` producer ids from the brokers in turn; COORDINATOR_LOAD_IN_PROGRESS and a broker that is
    down are retried, as clients do. Returns the ids and the errors seen."""
    ids: list[int] = []
    errors: set[str] = set()
    clients = {n: KafkaClient("127.0.0.1", p.port, client_id="pid-flood") for n, p in cluster.nodes.items()}
    try:
        while len(ids) < count and time.monotonic() < deadline:
            for client in clients.values():
                try:
                    response = await client.send(INIT_PRODUCER_ID)
                except NetworkError:
                    await asyncio.sleep(0.1)
                    continue
                if response.error_code == ErrorCode.none:
                    ids.append(response.producer_id)
                else:
                    errors.add(ErrorCode(response.error_code).name)
                    await asyncio.sleep(0.01)
    finally:
        for client in clients.values():
            await client.close()
    return ids, errors


def test_init_producer_ids_across_blocks_failover_and_restart_stay_unique(tmp_path: Path):
    """Two brokers draw 6,000 producer ids (several blocks of 1,000 each) from a quorum of three
    controllers while the active controller is killed and a broker restarts: no id is handed out twice
    and the only error is the retriable COORDINATOR_LOAD_IN_PROGRESS."""
    broker_cfg, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(
        data_dir=tmp_path / "cluster",
        brokers=2,
        controllers=3,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
    )
    deadline = time.monotonic() + 150
    try:
        cluster.start()
        first, errors = asyncio.run(init_producer_ids(cluster, 2500, deadline))
        cluster.node("controller-active").kill()
        second, more = asyncio.run(init_producer_ids(cluster, 2000, deadline))
        cluster.nodes[1].restart()
        third, most = asyncio.run(init_producer_ids(cluster, 1500, deadline))
    finally:
        cluster.kill_all()
    ids = first + second + third
    assert len(ids) >= 6000
    assert len(set(ids)) == len(ids), "a producer id was handed out twice"
    assert max(ids) > 5000  # more than the first block of each broker
    assert errors | more | most <= {"coordinator_load_in_progress"}


def produce_idempotent(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=b"v")
    assert producer.flush(30) == 0


def producer_ids(cluster: LocalCluster, topic: str) -> list[int]:
    """DescribeProducers of the topic's partition 0 on broker 1 (its leader)."""

    async def describe() -> list[int]:
        async with KafkaClient("127.0.0.1", cluster.nodes[1].port) as client:
            request = DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0,)),))
            response = await client.send(request)
        partition = response.topics[0].partitions[0]
        assert partition.error_code == ErrorCode.none
        return [p.producer_id for p in partition.active_producers]

    return asyncio.run(describe())


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_idle_producer_ids_expire_and_stay_expired_across_a_restart(make_cluster):
    """producer.id.expiration.ms=3000: an idle idempotent producer leaves the partition's producer state at
    the periodic check; one that went idle while the broker was down does not come back when the broker
    rebuilds its state from the log (the check is then too rare to be what removes it)."""
    config = "producer.id.expiration.ms=3000\nproducer.id.expiration.check.interval.ms=500\n"
    cluster = make_cluster(brokers=1, broker_extra=config)
    create_topic(cluster.bootstrap, "idle")
    produce_idempotent(cluster.bootstrap, "idle", 10)
    assert len(producer_ids(cluster, "idle")) == 1
    assert wait_for(lambda: producer_ids(cluster, "idle") == [], 20)

    produce_idempotent(cluster.bootstrap, "idle", 10)
    assert len(producer_ids(cluster, "idle")) == 1
    broker = cluster.nodes[1]
    broker.kill()
    config_file = cluster.broker_config
    config_file.write_text(
        config_file.read_text().replace("check.interval.ms=500", "check.interval.ms=600000")
    )
    time.sleep(3.5)
    broker.start(60)
    assert wait_for(lambda: _leads(cluster, "idle"), 30)
    assert producer_ids(cluster, "idle") == []


def _leads(cluster: LocalCluster, topic: str) -> bool:
    try:
        producer_ids(cluster, topic)
    except (AssertionError, NetworkError, OSError):
        return False
    return True


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record of partition 0, up to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-all", "enable.auto.commit": False})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + 30
        while (not records or records[-1][0] < high - 1) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                if message.error() is None:
                    records.append((message.offset(), message.key(), message.value()))
        return records
    finally:
        consumer.close()


def test_compaction_with_a_small_dedupe_buffer_keeps_only_the_latest_value_per_key(make_cluster):
    """log.cleaner.dedupe.buffer.size=24576 holds 921 keys (1,024 entries of 24 bytes, load factor 0.9);
    5,000 keys written twice are compacted in several passes, and the cleaned log holds each key once,
    with its latest value."""
    cluster = make_cluster(
        brokers=1, broker_extra="log.cleaner.dedupe.buffer.size=24576\nlog.cleaner.backoff.ms=200\n"
    )
    create_topic(cluster.bootstrap, "compacted", **{"cleanup.policy": "compact", "segment.bytes": "16384"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
    for value in (b"old", b"new"):
        for i in range(5000):
            producer.produce("compacted", key=f"key-{i:05d}".encode(), value=value)
            producer.poll(0)
    assert producer.flush(30) == 0
    for i in range(3):  # batches of 20 KB: the segments the keys are in roll, so all of them are cleanable
        for _ in range(40):
            producer.produce("compacted", key=b"filler", value=f"{i}".encode().ljust(500, b"."))
        assert producer.flush(30) == 0
    directory = cluster.data_dir / "broker-1" / "compacted-0"

    def cleaned() -> list[tuple[int, bytes, bytes]] | None:
        active_base = max(int(p.stem) for p in directory.glob("*.log"))
        records = [r for r in read_all(cluster.bootstrap, "compacted") if r[0] < active_base]
        keys = [key for _, key, _ in records]
        return records if len(keys) == len(set(keys)) and len(records) > 4000 else None

    assert wait_for(lambda: cleaned() is not None, 90), "the log was never compacted whole"
    records = cleaned()
    assert records is not None
    assert {value for _, key, value in records if key != b"filler"} == {b"new"}
    assert len({key for _, key, _ in records if key != b"filler"}) == 5000
    broker_log = (cluster.data_dir / "logs" / "broker-1.log").read_text()
    partial = [
        line
        for line in broker_log.splitlines()
        if "log compacted" in line and "cleaned_up_to=None" not in line
    ]
    assert len(partial) >= 5, "a map of 921 keys needs several passes over 5,000"
