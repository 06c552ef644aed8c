"""Wire conformance against a running broker: every advertised Fetch version answers, and error
partitions carry empty records (length 0), never null, as Kafka's brokers write them."""

from __future__ import annotations

import asyncio
import datetime
import importlib
from collections.abc import Iterator

import pytest

from epochkraft.chaos.cluster import LocalCluster
from epochkraft.chaos.kio_client import MiniClient
from epochkraft.net.client import KafkaClient
from epochkraft.net.handlers._util import build
from epochkraft.protocol.api import BROKER, served
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import request_class
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.timeout(120)]

TOPIC = "wire"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("wire")
    broker_cfg, controller_cfg = write_fast_configs(root / "config")
    started = LocalCluster(
        data_dir=root / "data", brokers=1, broker_config=broker_cfg, controller_config=controller_cfg
    )
    started.start()
    yield started
    started.kill_all()


@pytest.fixture(scope="module")
def broker(cluster: LocalCluster) -> tuple[str, int]:
    """The broker's address, with TOPIC holding three records."""

    async def setup() -> None:
        client = MiniClient(cluster.bootstrap)
        try:
            assert await client.create_topic(TOPIC, 1, 1) == ErrorCode.none
            error, _ = await client.produce(TOPIC, 0, [b"a", b"b", b"c"])
            assert error == ErrorCode.none
        finally:
            await client.close()

    asyncio.run(setup())
    host, _, port = cluster.bootstrap.partition(",")[0].rpartition(":")
    return host, int(port)


def fetch_request(version: int, offset: int, topic_id=None):
    cls = request_class(1, version)
    module = importlib.import_module(cls.__module__)
    partition = build(
        module.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    topic = build(module.FetchTopic, topic=TOPIC, topic_id=topic_id, partitions=(partition,))
    return build(
        cls,
        cluster_id=None,
        replica_id=-1,
        replica_state=build(module.ReplicaState, replica_id=-1, replica_epoch=-1)
        if hasattr(module, "ReplicaState")
        else None,
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
    )


async def test_every_fetch_version_reads_and_answers_out_of_range_with_empty_records(broker):
    host, port = broker
    spec = served(BROKER)[1]
    async with KafkaClient(host, port) as client:
        metadata = await MiniClient(f"{host}:{port}").metadata(TOPIC)
        topic_id = metadata.topics[0].topic_id
        for version in range(spec.min_version, spec.max_version + 1):
            data = (await client.send(fetch_request(version, 0, topic_id))).responses[0].partitions[0]
            assert data.error_code == ErrorCode.none, version
            assert data.records, version
            data = (await client.send(fetch_request(version, 99, topic_id))).responses[0].partitions[0]
            assert data.error_code == ErrorCode.offset_out_of_range, version
            assert data.records == b"", (version, data.records)
