"""Incremental fetch sessions (KIP-227) on a running broker: a raw Fetch session step by step (full, then
incremental fetches answering only the partition with new data, session errors, closing), with the
broker's session gauges; and Kafka's own Java consumer reading partitions while records arrive, its
FetchSessionHandler logging the sessions it used and no session errors; and a throttled full fetch, which
opens no session."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.fetch.v16 import request as f16
from kio.static.primitive import f64

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.net.client import KafkaClient
from epochkraft.peers.fetch import PeerUnavailable, kafka_classpath
from epochkraft.protocol.errors import ErrorCode
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(180)]

CHECK = Path(__file__).resolve().parents[1] / "scripts" / "clients" / "java" / "FetchSessionCheck.java"
BROKER = 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tmp = tmp_path_factory.mktemp("fetch-sessions")
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config")
    cluster = LocalCluster(
        data_dir=tmp / "cluster",
        brokers=1,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        admin_ports=True,
    )
    cluster.start()
    yield cluster
    cluster.kill_all()


def session_gauges(cluster: LocalCluster) -> tuple[int, int]:
    """(NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached) from the broker's /metrics."""
    with urllib.request.urlopen(cluster.admin_url(BROKER, "/metrics"), timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("kafka_NumIncrementalFetchSessions", "kafka_NumIncrementalFetchPartitionsCached"):
            values[name] = int(float(value))
    return values["kafka_NumIncrementalFetchSessions"], values["kafka_NumIncrementalFetchPartitionsCached"]


def fetch(
    topic_id: uuid.UUID,
    session_id: int,
    epoch: int,
    offsets: dict[int, int],
    forget: tuple[int, ...] = (),
) -> f16.FetchRequest:
    partitions = tuple(
        f16.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1 << 20)
        for p, offset in offsets.items()
    )
    return f16.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=300),
        min_bytes=1,
        session_id=session_id,
        session_epoch=epoch,
        topics=(f16.FetchTopic(topic_id=topic_id, partitions=partitions),) if partitions else (),
        forgotten_topics_data=(f16.ForgottenTopic(topic_id=topic_id, partitions=forget),) if forget else (),
    )


def answered(response) -> dict[int, int]:
    """{partition: record bytes} of the partitions a response carries."""
    return {p.partition_index: len(p.records or b"") for t in response.responses for p in t.partitions}


async def test_incremental_fetch_answers_only_the_partition_with_new_data(cluster: LocalCluster) -> None:
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("raw-sessions", 3, 1) == ErrorCode.none
        for p in range(3):
            assert (await client.produce("raw-sessions", p, [b"first"]))[0] == ErrorCode.none
        metadata = await client.metadata("raw-sessions")
        topic_id = metadata.topics[0].topic_id
        host, port = next((b.host, b.port) for b in metadata.brokers)
    finally:
        await client.close()
    sessions, cached = await asyncio.to_thread(session_gauges, cluster)
    async with KafkaClient(host, port) as broker:
        full = await broker.send(fetch(topic_id, 0, 0, {0: 0, 1: 0, 2: 0}))
        assert full.error_code == ErrorCode.none and full.session_id != 0
        assert sorted(answered(full)) == [0, 1, 2] and all(answered(full).values())
        session_id = full.session_id
        assert await asyncio.to_thread(session_gauges, cluster) == (sessions + 1, cached + 3)
        # The client took the records: the new positions go in, nothing has changed, nothing is answered.
        quiet = await broker.send(fetch(topic_id, session_id, 1, {0: 1, 1: 1, 2: 1}))
        assert (quiet.error_code, quiet.session_id, answered(quiet)) == (ErrorCode.none, session_id, {})
        assert (await client_produce(cluster, "raw-sessions", 1))[0] == ErrorCode.none
        # An incremental fetch naming no partition reads all three and answers only the one with data.
        new_data = await broker.send(fetch(topic_id, session_id, 2, {}))
        assert (new_data.error_code, new_data.session_id) == (ErrorCode.none, session_id)
        assert list(answered(new_data)) == [1] and answered(new_data)[1] > 0
        wrong_epoch = await broker.send(fetch(topic_id, session_id, 9, {}))
        assert (wrong_epoch.error_code, wrong_epoch.session_id, answered(wrong_epoch)) == (
            ErrorCode.invalid_fetch_session_epoch,
            0,
            {},
        )
        forgot = await broker.send(fetch(topic_id, session_id, 3, {1: 2}, forget=(0,)))
        assert (forgot.error_code, answered(forgot)) == (ErrorCode.none, {})
        assert await asyncio.to_thread(session_gauges, cluster) == (sessions + 1, cached + 2)
        closed = await broker.send(fetch(topic_id, session_id, -1, {2: 1}))
        assert (closed.error_code, closed.session_id, answered(closed)) == (ErrorCode.none, 0, {2: 0})
        assert await asyncio.to_thread(session_gauges, cluster) == (sessions, cached)
        gone = await broker.send(fetch(topic_id, session_id, 4, {}))
        assert (gone.error_code, gone.session_id) == (ErrorCode.fetch_session_id_not_found, 0)


async def test_a_throttled_full_fetch_opens_no_session(cluster: LocalCluster) -> None:
    """KafkaApis.handleFetchRequest: a full fetch throttled by the client's request quota is answered empty
    with a throttle time and session id 0, and the broker keeps no session for it (so throttled consumers
    cannot fill the session cache)."""
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("throttled-sessions", 1, 1) == ErrorCode.none
        assert (await client.produce("throttled-sessions", 0, [b"first"]))[0] == ErrorCode.none
        metadata = await client.metadata("throttled-sessions")
        topic_id = metadata.topics[0].topic_id
        host, port = next((b.host, b.port) for b in metadata.brokers)
    finally:
        await client.close()
    quota = acq.AlterClientQuotasRequest(
        entries=(
            acq.EntryData(
                entity=(acq.EntityData(entity_type="client-id", entity_name="throttled-consumer"),),
                ops=(acq.OpData(key="request_percentage", value=f64(1e-6), remove=False),),
            ),
        ),
        validate_only=False,
    )
    async with KafkaClient(host, port) as admin:
        assert [e.error_code for e in (await admin.send(quota)).entries] == [ErrorCode.none]
    await asyncio.sleep(1.0)  # the quota reaches the broker's metadata
    sessions, cached = await asyncio.to_thread(session_gauges, cluster)
    async with KafkaClient(host, port, client_id="throttled-consumer") as consumer:
        throttled = await consumer.send(fetch(topic_id, 0, 0, {0: 0}))
    assert throttled.throttle_time > datetime.timedelta(0)
    assert (throttled.error_code, throttled.session_id, answered(throttled)) == (ErrorCode.none, 0, {})
    assert await asyncio.to_thread(session_gauges, cluster) == (sessions, cached)


async def client_produce(cluster: LocalCluster, topic: str, partition: int):
    client = MiniClient(cluster.bootstrap)
    try:
        return await client.produce(topic, partition, [b"second"])
    finally:
        await client.close()


@pytest.mark.peers  # Kafka's jars
def test_java_consumer_reads_partitions_over_incremental_sessions(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    try:
        classpath = kafka_classpath()
    except PeerUnavailable as exc:
        pytest.skip(f"kafka-clients unavailable: {exc}")
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(
        "status = warn\nrootLogger.level = off\n"
        "appender.out.type = Console\nappender.out.name = out\n"
        "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = %m%n\n"
        "logger.session.name = org.apache.kafka.clients.FetchSessionHandler\n"
        "logger.session.level = debug\nlogger.session.appenderRef.out.ref = out\n"
    )
    result = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath,
         str(CHECK), cluster.bootstrap, "java-sessions", "4", "400"],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, f"{out[-3000:]}\n{result.stderr[-3000:]}"
    assert "OK read=400 partitions=4" in out
    assert "created a new incremental fetch session" in out, out[-3000:]
    assert out.count("sent an incremental fetch response with throttleTimeMs") >= 10, out[-3000:]
    for problem in ("unable to process the fetch request", "sent an invalid", "Error sending fetch request"):
        assert problem not in out, out[-3000:]
