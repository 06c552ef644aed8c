"""Floods of legitimate requests (``epochkraft bench --parts floods``).

create_topics: one client creates thousands of single-partition RF 3 topics in big CreateTopics requests,
one after another, while another client produces one record at a time (acks=all, min.insync.replicas 2)
to a topic of its own: that client's produce latency (p99, max), its failed produces, the failed
creations, and how often the controller fenced a broker meanwhile (its event log's broker_fenced).

list_offsets: four connections of one client id keep 32 ListOffsets requests of 200 partitions each in flight
(issue 6 of the floods: cheap requests starving others) while the other client produces as above, without a
quota and with a default client-id request_percentage (KIP-124): the other client's produce latency, the
flooder's requests answered and how many came back throttled.
"""

from __future__ import annotations

import asyncio
import datetime
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.create_topics.v7 import request as ct
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.produce.v9 import request as pr
from kio.schema.types import TopicName
from kio.static.primitive import Records, f64, i8, i16, i32, i32Timedelta, i64

from epochkraft.chaos.cluster import LocalCluster
from epochkraft.chaos.kio_client import MiniClient, split
from epochkraft.metrics.events import read_events
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import build_batch

STEADY_TOPIC = "steady"
PRODUCE_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))
CREATE_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))
SETTLE_S = 3.0  # the other client keeps producing this long after the flood


@dataclass
class FloodResult:
    created: int = 0
    failed_creations: dict[str, int] = field(default_factory=dict)  # error name -> topics
    produce_latencies_s: list[float] = field(default_factory=list)
    failed_produces: dict[str, int] = field(default_factory=dict)  # error name -> produces
    flood_seconds: float = 0.0
    fences: int = 0

    def summary(self) -> dict[str, Any]:
        latencies = sorted(self.produce_latencies_s)
        return {
            "created": self.created,
            "failed_creations": self.failed_creations,
            "fences": self.fences,
            "flood_s": round(self.flood_seconds, 1),
            "produces": len(latencies),
            "failed_produces": self.failed_produces,
            "produce_p99_ms": round(1000 * percentile(latencies, 0.99), 1) if latencies else None,
            "produce_max_ms": round(1000 * latencies[-1], 1) if latencies else None,
        }


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _create_request(names: list[str], rf: int) -> ct.CreateTopicsRequest:
    topics = tuple(
        ct.CreatableTopic(
            name=TopicName(n), num_partitions=i32(1), replication_factor=i16(rf), assignments=(), configs=()
        )
        for n in names
    )
    return ct.CreateTopicsRequest(topics=topics, timeout=CREATE_TIMEOUT, validate_only=False)


async def _flood(bootstrap: str, topics: int, per_request: int, rf: int, result: FloodResult) -> None:
    host, port = split(bootstrap)[0]
    async with KafkaClient(host, port, request_timeout_ms=120_000) as conn:
        for first in range(0, topics, per_request):
            names = [f"flood-{i}" for i in range(first, min(topics, first + per_request))]
            response = await conn.send(_create_request(names, rf))
            for topic in response.topics:
                if topic.error_code == ErrorCode.none:
                    result.created += 1
                else:
                    name = ErrorCode(topic.error_code).name
                    result.failed_creations[name] = result.failed_creations.get(name, 0) + 1


async def _steady_producer(client: MiniClient, done: asyncio.Event, result: FloodResult) -> None:
    """One record at a time to the steady topic's leader, as a client with one in flight."""
    number = 0
    while not done.is_set():
        p, brokers = await client.partition_state(STEADY_TOPIC)
        if p.leader_id not in brokers:
            result.failed_produces["no_leader"] = result.failed_produces.get("no_leader", 0) + 1
            await asyncio.sleep(0.1)
            continue
        batch = build_batch([(None, b"steady-%d" % number, (), int(time.time() * 1000))])
        request = pr.ProduceRequest(
            transactional_id=None,
            acks=i16(-1),
            timeout=PRODUCE_TIMEOUT,
            topic_data=(
                pr.TopicProduceData(
                    name=TopicName(STEADY_TOPIC),
                    partition_data=(pr.PartitionProduceData(index=i32(0), records=Records(batch)),),
                ),
            ),
        )
        started = time.monotonic()
        try:
            response = await client._client(brokers[p.leader_id]).send(request)
            error = ErrorCode(response.responses[0].partition_responses[0].error_code)
        except NetworkError as exc:
            error = None
            result.failed_produces[type(exc).__name__] = result.failed_produces.get(type(exc).__name__, 0) + 1
        result.produce_latencies_s.append(time.monotonic() - started)
        if error is not None and error != ErrorCode.none:
            result.failed_produces[error.name] = result.failed_produces.get(error.name, 0) + 1
        number += 1
        await asyncio.sleep(0.01)


async def create_topics_flood(
    bootstrap: str, metrics_dir: Path, topics: int, per_request: int = 500, rf: int = 3
) -> FloodResult:
    """The flood against a running cluster whose controller writes its events to ``metrics_dir``."""
    result = FloodResult()
    client = MiniClient(bootstrap)
    try:
        error = await client.create_topic(STEADY_TOPIC, 1, 3, {"min.insync.replicas": "2"})
        assert error == ErrorCode.none, error
        assert (await client.produce(STEADY_TOPIC, 0, [b"warm"]))[0] == ErrorCode.none
        done = asyncio.Event()
        producer = asyncio.create_task(_steady_producer(client, done, result))
        started_ms = int(time.time() * 1000)
        started = time.monotonic()
        try:
            await _flood(bootstrap, topics, per_request, rf, result)
            result.flood_seconds = time.monotonic() - started
            await asyncio.sleep(SETTLE_S)
        finally:
            done.set()
            await producer
        await asyncio.sleep(0.5)  # the event log's writer flushes every 0.2 s
        result.fences = count_fences(metrics_dir, since_ms=started_ms)
        return result
    finally:
        await client.close()


LISTED_TOPIC = "listed"
FLOODER = "flooder"


@dataclass
class RequestFloodResult:
    answered: int = 0  # the flooder's requests answered
    throttled: int = 0  # of them, answered with a throttle time
    produce: FloodResult = field(default_factory=FloodResult)  # the other client's produces

    def produce_p50_ms(self) -> float | None:
        latencies = sorted(self.produce.produce_latencies_s)
        return round(1000 * percentile(latencies, 0.5), 1) if latencies else None

    def summary(self) -> dict[str, Any]:
        produce = self.produce.summary()
        return {
            "flood_requests_answered": self.answered,
            "flood_requests_throttled": self.throttled,
            "produces": produce["produces"],
            "failed_produces": produce["failed_produces"],
            "produce_p50_ms": self.produce_p50_ms(),
            "produce_p99_ms": produce["produce_p99_ms"],
            "produce_max_ms": produce["produce_max_ms"],
        }


def _list_offsets_request(partitions: int) -> lo.ListOffsetsRequest:
    parts = tuple(
        lo.ListOffsetsPartition(partition_index=i32(i), timestamp=i64(-1)) for i in range(partitions)
    )
    return lo.ListOffsetsRequest(
        replica_id=i32(-1),  # type: ignore[arg-type]
        isolation_level=i8(0),
        topics=(lo.ListOffsetsTopic(name=TopicName(LISTED_TOPIC), partitions=parts),),
    )


async def set_default_request_percentage(bootstrap: str, percentage: float) -> None:
    """request_percentage for the default client id (kafka-configs --entity-type clients --entity-default)."""
    request = acq.AlterClientQuotasRequest(
        entries=(
            acq.EntryData(
                entity=(acq.EntityData(entity_type="client-id", entity_name=None),),
                ops=(acq.OpData(key="request_percentage", value=f64(percentage), remove=False),),
            ),
        ),
        validate_only=False,
    )
    host, port = split(bootstrap)[0]
    async with KafkaClient(host, port) as conn:
        response = await conn.send(request)
    assert [e.error_code for e in response.entries] == [ErrorCode.none], response


def flood_list_offsets(
    bootstrap: str, seconds: float, connections: int, in_flight: int, partitions: int
) -> tuple[int, int]:
    """The flooder, run in a process of its own (decoding its answers must not hold back the measuring
    client): (requests answered, of them throttled)."""
    host, port = split(bootstrap)[0]
    request = _list_offsets_request(partitions)
    counts = [0, 0]

    async def connection(deadline: float) -> None:
        async with KafkaClient(host, port, client_id=FLOODER, request_timeout_ms=120_000) as conn:
            while time.monotonic() < deadline:
                responses = await asyncio.gather(*(conn.send(request) for _ in range(in_flight)))
                counts[0] += len(responses)
                counts[1] += sum(1 for r in responses if r.throttle_time > datetime.timedelta(0))

    async def flood() -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(connection(deadline) for _ in range(connections)))

    asyncio.run(flood())
    return counts[0], counts[1]


async def list_offsets_flood(
    bootstrap: str,
    seconds: float,
    request_percentage: float | None,
    brokers: int = 1,
    connections: int = 4,
    in_flight: int = 32,
    partitions: int = 200,
) -> RequestFloodResult:
    """Pipelined ListOffsets from ``connections`` connections of one client id for ``seconds`` while another
    client produces one record at a time; with a default client-id ``request_percentage`` when given."""
    result = RequestFloodResult()
    client = MiniClient(bootstrap)
    try:
        rf = min(3, brokers)
        assert await client.create_topic(STEADY_TOPIC, 1, rf, {"min.insync.replicas": str(min(2, rf))}) == 0
        assert await client.create_topic(LISTED_TOPIC, partitions, 1, {}) == ErrorCode.none
        assert (await client.produce(STEADY_TOPIC, 0, [b"warm"]))[0] == ErrorCode.none
        if request_percentage is not None:
            await set_default_request_percentage(bootstrap, request_percentage)
        done = asyncio.Event()
        producer = asyncio.create_task(_steady_producer(client, done, result.produce))
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            flood = asyncio.get_running_loop().run_in_executor(
                pool, flood_list_offsets, bootstrap, seconds, connections, in_flight, partitions
            )
            result.answered, result.throttled = await flood
        done.set()
        await producer
        return result
    finally:
        await client.close()


def part_request_floods(work: Path, seconds: float = 10.0, percentage: float = 25.0) -> dict[str, Any]:
    """The ListOffsets flood on a fresh one-broker cluster (Kafka's default quota windows), without a quota
    and with one."""
    results: dict[str, Any] = {}
    for name, quota in (("no_quota", None), (f"request_percentage_{percentage:g}", percentage)):
        cluster = LocalCluster(data_dir=work / name, brokers=1)
        cluster.start()
        try:
            flood = asyncio.run(list_offsets_flood(cluster.bootstrap, seconds, quota))
            results[name] = flood.summary()
        finally:
            cluster.kill_all()
    return {"list_offsets": results}


def count_fences(metrics_dir: Path, since_ms: int) -> int:
    """The brokers the controller fenced (session expiry) since ``since_ms``."""
    return sum(
        1
        for e in read_events(metrics_dir, "controller*")
        if e["event"] == "broker_fenced" and e["ts_ms"] >= since_ms
    )


FLOOD_BROKER = """broker.heartbeat.interval.ms=200
replica.lag.time.max.ms=1500
replica.fetch.wait.max.ms=200
group.initial.rebalance.delay.ms=0
offsets.topic.num.partitions=3
"""


def part_floods(work: Path, topics: int = 2000, per_request: int = 500) -> dict[str, Any]:
    """The CreateTopics flood on a fresh three-broker cluster with a 2 s session timeout."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "broker.properties").write_text(FLOOD_BROKER)
    (work / "controller.properties").write_text("broker.session.timeout.ms=2000\n")
    metrics_dir = work / "metrics"
    cluster = LocalCluster(
        data_dir=work / "cluster",
        brokers=3,
        broker_config=work / "broker.properties",
        controller_config=work / "controller.properties",
        metrics_dir=metrics_dir,
    )
    cluster.start()
    try:
        result = asyncio.run(create_topics_flood(cluster.bootstrap, metrics_dir, topics, per_request))
        return {"create_topics": {"topics": topics, "per_request": per_request, **result.summary()}}
    finally:
        cluster.kill_all()
