"""Real Kafka clients against a real epochkraft cluster: librdkafka (confluent-kafka), aiokafka and
kafka-python produce, consume, join groups, commit offsets and manage topics, unchanged."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.protocol.records import build_batch
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clients")
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config")
    cluster = LocalCluster(
        data_dir=tmp / "cluster", brokers=3, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    yield cluster
    cluster.kill_all()


def create_topic(bootstrap: str, name: str, partitions: int = 3, rf: int = 3, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config)]
    )
    futures[name].result(15)


def produce(bootstrap: str, topic: str, count: int, **conf) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every acknowledged message."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            errors.append(str(err))

    for i in range(count):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("h", f"{i}".encode())],
            timestamp=1_700_000_000_000 + i,
            on_delivery=on_delivery,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    return acked


def consume(bootstrap: str, topic: str, count: int, group: str, timeout: float = 30, **conf) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **conf,
        }
    )
    consumer.subscribe([topic])
    messages = []
    deadline = time.monotonic() + timeout
    while len(messages) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
        if msg.error() is None:
            messages.append(msg)
    consumer.close()
    return messages


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_producer_acks_all_each_codec_round_trips_exactly(cluster, codec):
    topic = f"codec-{codec}"
    create_topic(cluster.bootstrap, topic, **{"min.insync.replicas": "2"})
    acked = produce(cluster.bootstrap, topic, 200, acks="all", **{"compression.type": codec})
    assert len(acked) == 200
    messages = consume(cluster.bootstrap, topic, 200, group=f"g-{codec}")
    got = sorted((int(m.key()[1:]), m.value(), m.headers(), m.timestamp()[1]) for m in messages)
    assert got == [
        (i, f"v{i}".encode(), [("h", f"{i}".encode())], 1_700_000_000_000 + i) for i in range(200)
    ], "keys, values, headers and timestamps come back exactly"


def now_ms() -> int:
    return int(time.time() * 1000)


def segments_of(cluster: LocalCluster, topic: str) -> list[bytes]:
    """Each broker's log of ``topic``-0, its segment files' bytes."""
    dirs = sorted(cluster.data_dir.glob(f"broker-*/**/{topic}-0"))
    return [b"".join(f.read_bytes() for f in sorted(d.glob("*.log"))) for d in dirs]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_log_append_time_topic_stamps_each_batch_with_the_leaders_time(cluster, codec):
    """message.timestamp.type=LogAppendTime: consumers see the leader's append time with its type, not
    the producer's create time (Kafka's LogValidator, compressed or not); followers keep the leader's
    bytes as they are."""
    topic = f"log-append-time-{codec}"
    create_topic(cluster.bootstrap, topic, partitions=1, **{"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    produce(cluster.bootstrap, topic, 50, acks="all", **{"compression.type": codec})
    after = now_ms()
    messages = consume(cluster.bootstrap, topic, 50, group=f"g-lat-{codec}")
    assert len(messages) == 50
    for m in messages:
        kind, timestamp = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= timestamp <= after, (kind, timestamp)
    logs = segments_of(cluster, topic)
    assert len(logs) == 3 and logs[0] and logs[0] == logs[1] == logs[2]


def test_produce_response_carries_the_log_append_time(cluster):
    """ProduceResponse.log_append_time_ms: the leader's append time on a LogAppendTime topic, -1
    (None) on a CreateTime one (UnifiedLog.append sets it only for LogAppendTime)."""
    create_topic(
        cluster.bootstrap, "lat-response", partitions=1, **{"message.timestamp.type": "LogAppendTime"}
    )
    create_topic(cluster.bootstrap, "ct-response", partitions=1)
    batch = build_batch([(b"k", b"v", (), 1_700_000_000_000)])

    async def produce_both():
        client = MiniClient(cluster.bootstrap)
        try:
            return [await client.produce_response(t, 0, batch) for t in ("lat-response", "ct-response")]
        finally:
            await client.close()

    before = now_ms()
    stamped, create_time = asyncio.run(produce_both())
    assert stamped.error_code == 0 and create_time.error_code == 0
    assert before <= stamped.log_append_time.timestamp() * 1000 <= now_ms()
    assert create_time.log_append_time is None


def test_confluent_idempotent_producer(cluster):
    create_topic(cluster.bootstrap, "idempotent")
    acked = produce(cluster.bootstrap, "idempotent", 500, **{"enable.idempotence": True, "acks": "all"})
    offsets = {(p, o) for p, o, _ in acked}
    assert len(offsets) == 500, "no duplicates"
    assert len(consume(cluster.bootstrap, "idempotent", 500, group="g-idem")) == 500


def test_confluent_group_of_two_rebalances_when_one_leaves(cluster):
    create_topic(cluster.bootstrap, "grouped", partitions=4)
    produce(cluster.bootstrap, "grouped", 100, acks="all")
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "pair",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    first, second = Consumer(conf), Consumer(conf)
    first.subscribe(["grouped"])
    second.subscribe(["grouped"])
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        first.poll(0.2)
        second.poll(0.2)
        if first.assignment() and second.assignment():
            break
    a, b = {tp.partition for tp in first.assignment()}, {tp.partition for tp in second.assignment()}
    assert a and b and not a & b and a | b == {0, 1, 2, 3}, (a, b)
    second.close()  # LeaveGroup: the remaining member takes every partition
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and len(first.assignment()) != 4:
        first.poll(0.2)
    assert {tp.partition for tp in first.assignment()} == {0, 1, 2, 3}
    first.close()


def test_confluent_offsets_committed_and_resumed(cluster):
    create_topic(cluster.bootstrap, "resume", partitions=1)
    produce(cluster.bootstrap, "resume", 50, acks="all")
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "resumers",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumer = Consumer(conf)
    consumer.subscribe(["resume"])
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.offset())
    consumer.commit(offsets=[TopicPartition("resume", 0, seen[19] + 1)], asynchronous=False)
    consumer.close()
    again = Consumer(conf)
    again.subscribe(["resume"])
    deadline = time.monotonic() + 30
    first = None
    while first is None and time.monotonic() < deadline:
        msg = again.poll(0.5)
        if msg is not None and msg.error() is None:
            first = msg.offset()
    committed = again.committed([TopicPartition("resume", 0)], timeout=10)
    again.close()
    assert first == 20, "the restarted consumer resumes from the committed offset"
    assert committed[0].offset == 20


def test_aiokafka_producer_and_group_consumer(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    create_topic(cluster.bootstrap, "aio", partitions=2)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(100):
                await producer.send_and_wait(
                    "aio", f"a{i}".encode(), key=f"{i}".encode(), headers=[("n", f"{i}".encode())]
                )
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio", bootstrap_servers=cluster.bootstrap, group_id="aio-group", auto_offset_reset="earliest"
        )
        await consumer.start()
        values = set()
        try:
            async with asyncio.timeout(40):
                async for msg in consumer:
                    values.add(msg.value)
                    if len(values) == 100:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == {f"a{i}".encode() for i in range(100)}


def test_kafka_python_admin_producer_consumer(cluster):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    topic = f"kp-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    admin.create_topics([KpNewTopic(topic, num_partitions=2, replication_factor=3)])
    assert topic in admin.list_topics()
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap)  # defaults: idempotent, acks=all
    for i in range(50):
        producer.send(topic, key=f"{i}".encode(), value=f"kp{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id="kp-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
    )
    values = set()
    for msg in consumer:
        values.add(msg.value)
        if len(values) == 50:
            break
    consumer.close()
    assert values == {f"kp{i}".encode() for i in range(50)}
    admin.delete_topics([topic])
    deadline = time.monotonic() + 15
    while topic in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in admin.list_topics()
    admin.close()


def test_leader_killed_while_confluent_producer_runs(tmp_path):
    broker_cfg, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(
        data_dir=tmp_path / "failover", brokers=3, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    try:
        create_topic(cluster.bootstrap, "failover", partitions=1, **{"min.insync.replicas": "2"})
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        leader = admin.list_topics("failover", timeout=10).topics["failover"].partitions[0].leader
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 30000,
            }
        )
        acked: list[bytes] = []

        def on_delivery(err, msg):
            if err is None:
                acked.append(msg.value())

        killed = False
        for i in range(3000):
            producer.produce("failover", value=f"m{i}".encode(), on_delivery=on_delivery)
            producer.poll(0)
            if i == 1000:
                producer.flush(10)
                cluster.node(leader).kill()
                killed = True
            if i % 100 == 0:
                time.sleep(0.01)
        assert producer.flush(40) == 0
        assert killed and len(acked) == 3000
        new_leader = admin.list_topics("failover", timeout=10).topics["failover"].partitions[0].leader
        assert new_leader not in (-1, leader)
        values = {m.value() for m in consume(cluster.bootstrap, "failover", len(acked), group="after")}
        assert set(acked) <= values, f"{len(set(acked) - values)} acknowledged messages lost"
    finally:
        cluster.kill_all()


def test_committed_offsets_survive_broker_restarts(tmp_path):
    broker_cfg, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(
        data_dir=tmp_path / "restarts", brokers=3, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    try:
        create_topic(cluster.bootstrap, "durable", partitions=1)
        produce(cluster.bootstrap, "durable", 30, acks="all")
        conf = {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "durable-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        consumer = Consumer(conf)
        consumer.subscribe(["durable"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition("durable", 0, 17)], asynchronous=False)
        consumer.close()
        for node in cluster.nodes.values():  # every broker dies at once, then comes back on its disk
            node.kill()
        for node in cluster.nodes.values():
            node.launch()
        for node in cluster.nodes.values():
            node.wait_ready(60)
        again = Consumer(conf)
        deadline = time.monotonic() + 40
        committed = None
        while time.monotonic() < deadline:
            result = again.committed([TopicPartition("durable", 0)], timeout=5)
            if result and result[0].offset == 17:
                committed = result[0].offset
                break
            time.sleep(0.5)
        again.close()
        assert committed == 17, "the committed offset was read back from __consumer_offsets after the restart"
    finally:
        cluster.kill_all()
