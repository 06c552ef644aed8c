"""Kafka's defaults as a new user meets them: topics auto-created on first use (INVALID_TOPIC_EXCEPTION at
once for names no topic can have), message.max.bytes with MESSAGE_TOO_LARGE, fetch.max.bytes capping a
Fetch response whatever it asks for."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.fetch.v12 import request as f12
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12.response import MetadataResponse

from epochkraft.broker.settings import BrokerSettings
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(120)]

FETCH_MAX_BYTES = 64 * 1024  # set on this cluster's broker, so the cap is seen without 55 MB of data


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("defaults")
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config", f"fetch.max.bytes={FETCH_MAX_BYTES}\n")
    cluster = LocalCluster(
        data_dir=tmp / "cluster", brokers=1, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    yield cluster
    cluster.kill_all()


def deliver(bootstrap: str, topic: str, value: bytes, **conf) -> KafkaError | None:
    """The delivery report's error for one message (None: delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 60_000, **conf})
    reports: list[KafkaError | None] = []
    producer.produce(topic, value=value, on_delivery=lambda err, _msg: reports.append(err))
    deadline = time.monotonic() + 90
    while not reports and time.monotonic() < deadline:
        producer.poll(0.1)
    assert reports, "no delivery report"
    return reports[0]


def test_auto_create_topics_enable_is_kafka_default():
    assert BrokerSettings().auto_create_topics_enable is True
    assert BrokerSettings().message_max_bytes == 1048588
    assert BrokerSettings().fetch_max_bytes == 55 * 1024 * 1024


def test_producer_creates_a_topic_on_first_use(cluster):
    assert deliver(cluster.bootstrap, "created-on-first-use", b"hello") is None


def test_auto_creating_producer_gets_invalid_topic_at_once(cluster):
    # Not _MSG_TIMED_OUT after message.timeout.ms: the broker names the topic invalid.
    error = deliver(cluster.bootstrap, "no spaces allowed!", b"hello")
    assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION, error


async def test_metadata_answers_invalid_topic_exception_with_and_without_auto_creation(cluster):
    client = MiniClient(cluster.bootstrap)
    try:
        for allow in (True, False):
            response = await client.any_send(
                md.MetadataRequest(
                    topics=(md.MetadataRequestTopic(topic_id=None, name="bad/name"),),
                    allow_auto_topic_creation=allow,
                    include_topic_authorized_operations=False,
                ),
                MetadataResponse,
            )
            assert response.topics[0].error_code == ErrorCode.invalid_topic_exception
    finally:
        await client.close()


async def test_message_max_bytes_refuses_a_larger_batch(cluster):
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("big", 1, 1) == ErrorCode.none
        error, _ = await client.produce("big", 0, [b"x" * (BrokerSettings().message_max_bytes + 1)])
        assert error == ErrorCode.message_too_large
        error, _ = await client.produce("big", 0, [b"x" * 1_000_000])  # just under the limit
        assert error == ErrorCode.none
    finally:
        await client.close()


def test_confluent_producer_sees_message_too_large(cluster):
    # The client's own limit raised, so the broker's is the one met.
    error = deliver(cluster.bootstrap, "big-client", b"x" * 1_500_000, **{"message.max.bytes": 4_000_000})
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error


async def test_fetch_max_bytes_caps_a_response_asking_for_2_gib(cluster):
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("capped", 2, 1) == ErrorCode.none
        value = b"v" * 10_000
        for partition in (0, 1):
            for _ in range(20):  # 20 batches of ~10 kB per partition: 400 kB in all
                assert (await client.produce("capped", partition, [value]))[0] == ErrorCode.none
        p, brokers = await client.partition_state("capped")
        unlimited = 2**31 - 1
        request = f12.FetchRequest(
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=10),
            min_bytes=1,
            max_bytes=unlimited,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                f12.FetchTopic(
                    topic="capped",
                    partitions=tuple(
                        f12.FetchPartition(
                            partition=i,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=unlimited,
                        )
                        for i in (0, 1)
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        async with KafkaClient(*brokers[p.leader_id]) as leader:
            response = await leader.send(request)
        sizes = [len(part.records) for part in response.responses[0].partitions]
        assert 0 < sum(sizes) <= FETCH_MAX_BYTES, sizes
        assert sizes[0] > FETCH_MAX_BYTES - 11_000  # filled up to the cap, not one batch
    finally:
        await client.close()
