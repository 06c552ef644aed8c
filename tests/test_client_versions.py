"""Real clients at old and new protocol versions: kafka-python pinned to each api_version the brokers serve,
from (0, 11) up, and negotiating the newest itself, producing and consuming in a group; and consumers of
confluent-kafka (librdkafka), aiokafka and kafka-python at an offset past the log end resetting per
auto.offset.reset: earliest, latest, and the error when there is no reset policy."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.protocol.errors import ErrorCode
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(120)]

# Request versions a producer and a group consumer send.
USED_KEYS = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 22)


def pinned_versions() -> list[tuple[int, ...] | None]:
    """kafka-python's api_version values from (0, 11) to its newest, one per distinct set of request
    versions a producer and a group consumer send; and None: negotiate with ApiVersions."""
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    distinct: dict[tuple[int, ...], tuple[int, ...]] = {}
    for version, table in sorted(BROKER_API_VERSIONS.items()):
        if version >= (0, 11):
            distinct.setdefault(tuple(table.get(k, (0, -1))[1] for k in USED_KEYS), version)
    return [*sorted(distinct.values()), None]


PINNED = pinned_versions()
PAST_THE_END = 1000
OLD = [f"old-{i}".encode() for i in range(5)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("versions")
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config")
    cluster = LocalCluster(
        data_dir=tmp / "cluster", brokers=1, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    yield cluster
    cluster.kill_all()


def new_topic(cluster: LocalCluster, values: list[bytes]) -> str:
    """A one-partition topic holding ``values`` at offsets 0..n-1."""
    name = f"t-{uuid.uuid4().hex[:8]}"

    async def fill() -> None:
        client = MiniClient(cluster.bootstrap)
        try:
            assert await client.create_topic(name, 1, 1) == ErrorCode.none
            if values:
                assert (await client.produce(name, 0, values))[0] == ErrorCode.none
        finally:
            await client.close()

    asyncio.run(fill())
    return name


def produce_one(cluster: LocalCluster, topic: str, value: bytes) -> None:
    async def send() -> None:
        client = MiniClient(cluster.bootstrap)
        try:
            assert (await client.produce(topic, 0, [value]))[0] == ErrorCode.none
        finally:
            await client.close()

    asyncio.run(send())


def test_pinned_versions_are_served():
    """Each api_version from (0, 11) sends request versions the broker listener serves."""
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    from epochkraft.protocol.api import BROKER
    from epochkraft.server.handlers import served

    ours = served(BROKER)
    assert PINNED[0] == (0, 11)
    for pinned, table in BROKER_API_VERSIONS.items():  # every one from (0, 11) to the newest
        if pinned >= (0, 11):
            for key in USED_KEYS:
                assert ours[key].supports(table[key][1]), (pinned, key, table[key])


@pytest.mark.parametrize("api_version", PINNED, ids=lambda v: "auto" if v is None else ".".join(map(str, v)))
def test_kafka_python_produces_and_consumes_in_a_group(cluster, api_version):
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(cluster, [])
    versioned = {} if api_version is None else {"api_version": api_version}
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", **versioned)
    try:
        for value in OLD:
            producer.send(topic, value=value, key=b"k").get(timeout=30)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=30_000,
        **versioned,
    )
    try:
        got = []
        for message in consumer:
            got.append(message.value)
            if len(got) == len(OLD):
                break
        assert got == OLD
        consumer.commit()
        assert consumer.committed(next(iter(consumer.assignment()))) == len(OLD)
    finally:
        consumer.close()


# ---- auto.offset.reset from an offset past the log end, with each client ---------------------------------
def confluent_consumer(cluster: LocalCluster, topic: str, reset: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": reset,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, PAST_THE_END)])
    return consumer


def until_new(cluster: LocalCluster, topic: str, receive) -> bytes:
    """Produces new-N records until ``receive()`` (None: nothing yet) returns a value; that value."""
    deadline = time.monotonic() + 60
    i = 0
    while time.monotonic() < deadline:
        produce_one(cluster, topic, f"new-{i}".encode())
        i += 1
        value = receive()
        if value is not None:
            return value
    raise AssertionError("nothing consumed")


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_confluent_consumer_resets_from_out_of_range(cluster, reset):
    topic = new_topic(cluster, OLD)
    consumer = confluent_consumer(cluster, topic, reset)
    try:

        def receive() -> bytes | None:
            message = consumer.poll(1.0)
            if message is None:
                return None
            assert message.error() is None, message.error()
            return message.value()

        first = receive() if reset == "earliest" else None
        first = first or until_new(cluster, topic, receive)
        # earliest: the log's first record; latest: only records produced after the reset.
        assert first == OLD[0] if reset == "earliest" else first.startswith(b"new-"), first
    finally:
        consumer.close()


def test_confluent_consumer_without_reset_policy_reports_the_error(cluster):
    topic = new_topic(cluster, OLD)
    consumer = confluent_consumer(cluster, topic, "error")
    try:
        deadline = time.monotonic() + 30
        error = None
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is not None, message.value()
                error = message.error()
        assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET, error
    finally:
        consumer.close()


@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
async def test_aiokafka_consumer_resets_from_out_of_range(cluster, reset):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import OffsetOutOfRangeError
    from aiokafka.structs import TopicPartition as AIOTopicPartition

    topic = await asyncio.to_thread(new_topic, cluster, OLD)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap, auto_offset_reset=reset, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = AIOTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, PAST_THE_END)
        if reset == "none":
            with pytest.raises(OffsetOutOfRangeError):
                await asyncio.wait_for(consumer.getone(), 30)
            return

        async def receive() -> bytes | None:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            return batch[tp][0].value if batch.get(tp) else None

        first = await receive() if reset == "earliest" else None
        deadline = time.monotonic() + 60
        i = 0
        while first is None and time.monotonic() < deadline:
            await asyncio.to_thread(produce_one, cluster, topic, f"new-{i}".encode())
            i += 1
            first = await receive()
        assert first == OLD[0] if reset == "earliest" else first.startswith(b"new-"), first
    finally:
        await consumer.stop()


@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_kafka_python_consumer_resets_from_out_of_range(cluster, reset):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KPTopicPartition
    from kafka.errors import OffsetOutOfRangeError

    topic = new_topic(cluster, OLD)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, auto_offset_reset=reset, enable_auto_commit=False
    )
    try:
        tp = KPTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, PAST_THE_END)
        if reset == "none":
            with pytest.raises(OffsetOutOfRangeError):
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    consumer.poll(timeout_ms=1000)
            return

        def receive() -> bytes | None:
            records = consumer.poll(timeout_ms=1000).get(tp)
            return records[0].value if records else None

        first = receive() if reset == "earliest" else None
        first = first or until_new(cluster, topic, receive)
        assert first == OLD[0] if reset == "earliest" else first.startswith(b"new-"), first
    finally:
        consumer.close()
