"""Wire conformance: every advertised Fetch version answers and error partitions carry empty records
(never null), as Kafka's brokers write them; a request whose handler fails gets its error response
(UNKNOWN_SERVER_ERROR, as Kafka's getErrorResponse) on a connection that stays open, logged once."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib
import uuid
from collections.abc import Iterator

import pytest
import structlog

from epochkraft.chaos.cluster import LocalCluster
from epochkraft.chaos.kio_client import MiniClient
from epochkraft.net.client import KafkaClient
from epochkraft.net.failure_log import FailureLog
from epochkraft.net.handlers._util import build
from epochkraft.net.server import KafkaServer
from epochkraft.protocol.api import BROKER, CONTROLLER, served
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import API_VERSIONS_KEY, request_class
from epochkraft.protocol.records import build_batch
from tests.conftest import write_fast_configs
from tests.support.kio_requests import Scenario, request_for

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


# ---- handler failures: Kafka's error response, the connection kept -----------------------------------
def error_codes(entity) -> list[int]:
    """Every error code in a decoded response."""
    found = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            found.append(value)
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                found += error_codes(item)
    return found


def every_version(listener: str) -> list[tuple[int, int]]:
    return [(k, v) for k, s in served(listener).items() for v in range(s.min_version, s.max_version + 1)]


@pytest.mark.parametrize("listener", [BROKER, CONTROLLER])
async def test_a_failing_handler_gets_its_error_response_and_the_connection_stays_open(listener):
    # No node behind the server: every handler that touches it raises.
    server = KafkaServer(listener, node=None, host="127.0.0.1", port=0)
    await server.start()
    scenario = Scenario("failing", TOPIC, uuid.uuid4(), records=build_batch([(None, b"v", (), 0)]))
    try:
        with structlog.testing.capture_logs() as logs:
            async with KafkaClient("127.0.0.1", server.port) as client:
                for key, version in every_version(listener):
                    if key == API_VERSIONS_KEY:
                        continue  # answered from the registry, no node needed
                    for _ in range(3):  # identical failures: one log line
                        response = await client.send(request_for(key, version, scenario))
                        codes = error_codes(response)
                        assert codes, (key, version, response)
                        assert set(codes) == {ErrorCode.unknown_server_error}, (key, version, response)
                        assert client.connected
        failures = [e for e in logs if e["event"].startswith("request failed")]
        assert len(failures) == len(every_version(listener)) - (
            served(listener)[API_VERSIONS_KEY].max_version + 1
        )
        assert all(e["api"] and e["api_version"] is not None for e in failures)
    finally:
        await server.stop()


def test_failure_log_admits_one_line_per_kind_per_interval():
    log = FailureLog(interval_s=60, max_kinds=2)
    key = ("Fetch", 4, "AttributeError", "k01_fetch.py:49")
    assert log.admit(key, 0.0) == 0
    assert [log.admit(key, t) for t in (1.0, 2.0, 59.0)] == [None, None, None]
    assert log.admit(key, 60.5) == 3  # logged again, with the count it held back
    assert log.admit(("Produce", 9, "KeyError", "x:1"), 61.0) == 0
    assert log.admit(("Metadata", 12, "KeyError", "x:1"), 61.0) == 0  # bounded: the oldest kind goes
    assert log.admit(key, 62.0) == 0
