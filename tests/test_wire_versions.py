"""Wire conformance. The version sweep: every API key and version each listener advertises (read from the
registry, so new APIs are swept), with realistic values and the error paths (unknown topic, offset out of
range, unknown partition), and then with drawn values, answered by running daemons with a response kio
decodes at that version, no handler failure, and the connection kept. Also: error partitions of Fetch
carry empty records (never null), as Kafka's brokers write them, and a request whose handler fails gets its
error response (UNKNOWN_SERVER_ERROR, as Kafka's getErrorResponse), logged once per kind."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib
import uuid
from collections.abc import Iterator

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochkraft.controller.metadata_log import METADATA_TOPIC, METADATA_TOPIC_ID_INT
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.net.client import KafkaClient
from epochkraft.net.failure_log import FailureLog
from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import API_VERSIONS_KEY, request_class
from epochkraft.protocol.records import build_batch
from epochkraft.server.handlers import served
from epochkraft.server.handlers._util import build
from epochkraft.server.socket_server import KafkaServer
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


@pytest.mark.slow
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


# Responses with nowhere to put an error for a request naming nothing: DescribeLogDirs v1-2 asking for
# every log dir (Kafka's error response is then empty too; the top-level error code arrived in v3).
NO_ERROR_FIELD = {(35, 1), (35, 2)}
# Refused before the handler reaches the node: DeleteTopics v6 naming a topic by both name and id is
# INVALID_REQUEST (Kafka's ControllerApis.deleteTopics), and the sweep's scenario gives both.
REFUSED_BEFORE_NODE = {(20, 6)}
# An Envelope whose principal is not DefaultPrincipalData (the sweep's bytes): refused before it is opened.
ENVELOPE_REFUSED = {(58, 0)}
# DescribeQuorum for another topic: UNKNOWN_TOPIC_OR_PARTITION in the partition, before the node is asked.
UNKNOWN_BEFORE_NODE = {(55, 0), (55, 1), (55, 2)}


# Answered without a node: ApiVersions (from the registry); SASL outside a SASL listener
# (ILLEGAL_SASL_STATE) and the ACL APIs without an authorizer (SECURITY_DISABLED), as Kafka answers them.
NO_NODE_NEEDED = {API_VERSIONS_KEY, 17, 36, 29, 30, 31}


def every_version(listener: str) -> list[tuple[int, int]]:
    return [(k, v) for k, s in served(listener).items() for v in range(s.min_version, s.max_version + 1)]


@pytest.mark.net
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
                    if key in NO_NODE_NEEDED:
                        continue
                    for _ in range(3):  # identical failures: one log line
                        response = await client.send(request_for(key, version, scenario))
                        codes = error_codes(response)
                        if (key, version) in NO_ERROR_FIELD:
                            assert not codes and client.connected
                            continue
                        if (key, version) in REFUSED_BEFORE_NODE:
                            assert set(codes) == {ErrorCode.invalid_request} and client.connected
                            continue
                        if (key, version) in ENVELOPE_REFUSED:
                            assert response.error_code == ErrorCode.principal_deserialization_failure
                            continue
                        if (key, version) in UNKNOWN_BEFORE_NODE:
                            assert ErrorCode.unknown_topic_or_partition in codes and client.connected
                            continue
                        assert codes, (key, version, response)
                        assert set(codes) == {ErrorCode.unknown_server_error}, (key, version, response)
                        assert client.connected
        failures = [e for e in logs if e["event"].startswith("request failed")]
        refused = sum(
            1
            for case in every_version(listener)
            if case in REFUSED_BEFORE_NODE | UNKNOWN_BEFORE_NODE | ENVELOPE_REFUSED
        )
        assert (
            len(failures) == len([k for k, _ in every_version(listener) if k not in NO_NODE_NEEDED]) - refused
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


# ---- the version sweep: every API, every advertised version, against running daemons -----------------
UNKNOWN_TOPIC = "sweep-no-such-topic"
DELETE_TOPICS_KEY = 20
SPARE_BROKER = 99  # controller-listener requests name a broker that is not the cluster's


@dataclasses.dataclass(frozen=True)
class Daemons:
    broker: tuple[str, int]
    controller: tuple[str, int]
    topic_id: uuid.UUID
    cluster_id: str


@pytest.fixture(scope="module")
def daemons(cluster: LocalCluster, broker: tuple[str, int]) -> Daemons:
    async def topic_id() -> uuid.UUID:
        client = MiniClient(cluster.bootstrap)
        try:
            return (await client.metadata(TOPIC)).topics[0].topic_id
        finally:
            await client.close()

    host, _, port = cluster.controller_address.rpartition(":")
    return Daemons(broker, (host, int(port)), asyncio.run(topic_id()), cluster.cluster_id)


def scenarios(listener: str, key: int, d: Daemons) -> list[Scenario]:
    """The realistic case and the error paths every API is swept with."""
    records = build_batch([(b"k", b"sweep", (), 1_700_000_000_000)])
    common = {"records": records, "cluster_id": d.cluster_id}
    if listener == CONTROLLER:
        common["broker_id"] = SPARE_BROKER
    topic, topic_id = TOPIC, d.topic_id
    if listener == CONTROLLER and key == 1:  # the controller serves Fetch of the metadata log only
        topic, topic_id = METADATA_TOPIC, uuid.UUID(int=METADATA_TOPIC_ID_INT)
    cases = [
        Scenario("existing", topic, topic_id, **common),
        Scenario("unknown-topic", UNKNOWN_TOPIC, uuid.uuid4(), **common),
        Scenario("out-of-range", topic, topic_id, offset=10**12, **common),
        Scenario("unknown-partition", topic, topic_id, partition=7, **common),
    ]
    if key == DELETE_TOPICS_KEY:  # the swept topic must survive: deletion is swept on unknown topics
        cases = [c for c in cases if c.topic == UNKNOWN_TOPIC]
    return cases


def sweep_cases() -> list[tuple[str, int, int]]:
    return [(listener, k, v) for listener in (BROKER, CONTROLLER) for k, v in every_version(listener)]


def sweep_id(case: tuple[str, int, int]) -> str:
    listener, key, version = case
    return f"{listener}-{served(listener)[key].name}-v{version}"


def address(d: Daemons, listener: str) -> tuple[str, int]:
    return d.broker if listener == BROKER else d.controller


def check_answer(response) -> None:
    """Decoded at the request's version already; no handler failed and nothing is null that Kafka
    writes empty."""
    assert ErrorCode.unknown_server_error not in error_codes(response), response
    assert all(r is not None for r in records_fields(response)), response


def records_fields(entity) -> list:
    found = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "records":
            found.append(value)
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                found += records_fields(item)
    return found


async def send_and_check(client: KafkaClient, request) -> object:
    response = await client.send(request)
    check_answer(response)
    assert client.connected
    assert (await client.api_versions(0)).error_code == ErrorCode.none  # the connection still serves
    return response


@pytest.mark.slow
@pytest.mark.parametrize("case", sweep_cases(), ids=sweep_id)
async def test_version_sweep(daemons, case):
    listener, key, version = case
    async with KafkaClient(*address(daemons, listener)) as client:
        for scenario in scenarios(listener, key, daemons):
            group = f"sweep-{listener}-{key}-v{version}-{scenario.label}"  # no rebalance waits on others
            scenario = dataclasses.replace(scenario, group=group)
            response = await send_and_check(client, request_for(key, version, scenario))
            if listener == BROKER and key == 1:
                (partition,) = response.responses[0].partitions
                expected = {
                    "existing": ErrorCode.none,
                    "unknown-topic": ErrorCode.unknown_topic_id
                    if version >= 13
                    else ErrorCode.unknown_topic_or_partition,
                    "out-of-range": ErrorCode.offset_out_of_range,
                    "unknown-partition": ErrorCode.unknown_topic_or_partition,
                }[scenario.label]
                assert partition.error_code == expected, (scenario.label, partition)
                assert (partition.records != b"") == (scenario.label == "existing")


def test_sweep_covers_every_advertised_version():
    """The sweep's size, and that it reads the registry rather than a list of its own."""
    cases = sweep_cases()
    for listener in (BROKER, CONTROLLER):
        for key, spec in served(listener).items():
            assert {v for lst, k, v in cases if (lst, k) == (listener, key)} == set(
                range(spec.min_version, spec.max_version + 1)
            )


int32 = st.integers(-(2**31), 2**31 - 1)
swept_scenarios = st.builds(
    Scenario,
    label=st.just("drawn"),
    topic=st.sampled_from([TOPIC, UNKNOWN_TOPIC]) | st.text(max_size=40),
    topic_id=st.none() | st.uuids(),
    partition=int32,
    offset=st.integers(-(2**63), 2**63 - 1),
    group=st.text(max_size=30),
    member=st.sampled_from(["", "member-1"]) | st.text(max_size=30),
    broker_id=st.integers(SPARE_BROKER + 1, 2**31 - 1) | st.integers(-(2**31), -1),
    records=st.sampled_from([b"", build_batch([(b"k", b"v", (), 1_700_000_000_000)])])
    | st.binary(max_size=120),
)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(sweep_cases()), scenario=swept_scenarios)
def test_version_sweep_over_drawn_field_values(daemons, case, scenario):
    """Any values in the fields a client fills (topics, partitions, offsets, groups, members, brokers):
    an answer kio decodes, no handler failure, the connection kept."""
    listener, key, version = case
    if key == DELETE_TOPICS_KEY and scenario.topic == TOPIC:
        scenario = dataclasses.replace(scenario, topic=UNKNOWN_TOPIC)
    # A group of its own: a JoinGroup never waits for another example's member to rejoin.
    scenario = dataclasses.replace(
        scenario, group=f"{scenario.group}-{uuid.uuid4().hex[:8]}", cluster_id=daemons.cluster_id
    )

    async def exchange() -> None:
        async with KafkaClient(*address(daemons, listener)) as client:
            await send_and_check(client, request_for(key, version, scenario))

    asyncio.run(exchange())
