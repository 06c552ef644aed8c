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
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse
from kio.schema.create_topics.v7 import request as ct
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.find_coordinator.v4 import request as fc
from kio.schema.find_coordinator.v4 import response as fc_r
from kio.schema.init_producer_id.v4 import request as ip
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_commit.v8.response import OffsetCommitResponse
from kio.schema.produce.v9 import request as pr
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.types import GroupId, ProducerId, TopicName
from kio.static.primitive import Records, f64, i8, i16, i32, i32Timedelta, i64

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient, split
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
    succeeded: int = 0  # the flood's requests (or topics) answered without an error
    flood_errors: dict[str, int] = field(default_factory=dict)  # error name -> the flood's answers
    produce_latencies_s: list[float] = field(default_factory=list)
    failed_produces: dict[str, int] = field(default_factory=dict)  # error name -> produces
    flood_seconds: float = 0.0
    fences: int | None = 0
    broker_rss_mb: list[int] = field(default_factory=list)  # each broker's after the flood

    def count(self, error: int) -> None:
        if error == ErrorCode.none:
            self.succeeded += 1
        else:
            name = ErrorCode(error).name
            self.flood_errors[name] = self.flood_errors.get(name, 0) + 1

    def summary(self) -> dict[str, Any]:
        latencies = sorted(self.produce_latencies_s)
        return {
            "succeeded": self.succeeded,
            "flood_errors": self.flood_errors,
            "fences": self.fences,
            "broker_rss_mb": self.broker_rss_mb,
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
            response = await conn.send(_create_request(names, rf), CreateTopicsResponse)
            for topic in response.topics:
                result.count(topic.error_code)


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
            response = await client._client(brokers[p.leader_id]).send(request, ProduceResponse)
            error = ErrorCode(response.responses[0].partition_responses[0].error_code)
        except NetworkError as exc:
            error = None
            result.failed_produces[type(exc).__name__] = result.failed_produces.get(type(exc).__name__, 0) + 1
        result.produce_latencies_s.append(time.monotonic() - started)
        if error is not None and error != ErrorCode.none:
            result.failed_produces[error.name] = result.failed_produces.get(error.name, 0) + 1
        number += 1
        await asyncio.sleep(0.01)


async def create_steady_topic(client: MiniClient, brokers: int = 3) -> None:
    """The other client's topic (RF 3, min.insync.replicas 2 on three brokers), with one record in it."""
    rf = min(3, brokers)
    error = await client.create_topic(STEADY_TOPIC, 1, rf, {"min.insync.replicas": str(min(2, rf))})
    assert error == ErrorCode.none, error
    await partitions_by_leader(client, STEADY_TOPIC, 1)
    assert (await client.produce(STEADY_TOPIC, 0, [b"warm"]))[0] == ErrorCode.none


async def while_steady(
    client: MiniClient,
    flood: Callable[[], Awaitable[object]],
    result: FloodResult,
    settle_s: float = SETTLE_S,
) -> None:
    """``flood`` run to its end while the other client produces to the steady topic, which goes on for
    ``settle_s`` afterwards (what the flood left to do, a cleaner pass or metadata, still counts)."""
    done = asyncio.Event()
    producer = asyncio.create_task(_steady_producer(client, done, result))
    started = time.monotonic()
    try:
        await flood()
        result.flood_seconds = time.monotonic() - started
        await asyncio.sleep(settle_s)
    finally:
        done.set()
        await producer


async def create_topics_flood(
    bootstrap: str, metrics_dir: Path, topics: int, per_request: int = 500, rf: int = 3
) -> FloodResult:
    """The flood against a running cluster whose controller writes its events to ``metrics_dir``."""
    result = FloodResult()
    client = MiniClient(bootstrap)
    try:
        await create_steady_topic(client)
        started_ms = int(time.time() * 1000)
        await while_steady(client, lambda: _flood(bootstrap, topics, per_request, rf, result), result)
        await asyncio.sleep(0.5)  # the event log's writer flushes every 0.2 s
        result.fences = count_fences(metrics_dir, since_ms=started_ms)
        return result
    finally:
        await client.close()


INIT_PRODUCER_ID = ip.InitProducerIdRequest(
    transactional_id=None,
    transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
    producer_id=ProducerId(-1),
    producer_epoch=i16(-1),
)


async def flood_init_producer_ids(
    bootstrap: str, count: int, result: FloodResult, in_flight: int = 16
) -> None:
    """Issue 2 of the floods: ``count`` InitProducerId (idempotent, no transactional id) from one connection,
    ``in_flight`` at a time."""
    host, port = split(bootstrap)[0]
    async with KafkaClient(host, port, client_id="pid-flood", request_timeout_ms=120_000) as conn:
        for first in range(0, count, in_flight):
            sends = (
                conn.send(INIT_PRODUCER_ID, InitProducerIdResponse)
                for _ in range(min(in_flight, count - first))
            )
            for response in await asyncio.gather(*sends):
                result.count(response.error_code)


PRODUCERS_TOPIC = "producers"
FIRST_FORGED_PRODUCER_ID = 1 << 40  # far above any block the controller hands out in a run


def _one_record_each(partitions: list[int], first_producer_id: int) -> pr.ProduceRequest:
    """One idempotent batch (sequence 0, epoch 0) per partition, each from a producer id of its own."""
    data = tuple(
        pr.PartitionProduceData(
            index=i32(p),
            records=Records(
                build_batch(
                    [(None, b"p", (), int(time.time() * 1000))],
                    producer_id=first_producer_id + n,
                    producer_epoch=0,
                    base_sequence=0,
                )
            ),
        )
        for n, p in enumerate(partitions)
    )
    return pr.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=PRODUCE_TIMEOUT,
        topic_data=(pr.TopicProduceData(name=TopicName(PRODUCERS_TOPIC), partition_data=data),),
    )


async def partitions_by_leader(
    client: MiniClient, topic: str, partitions: int, timeout_s: float = 60.0
) -> tuple[dict[int, tuple[str, int]], dict[int, list[int]]]:
    """The brokers' addresses and the partitions each leads, once every broker's metadata has a leader for
    every partition of a new topic, the same one (a produce to it then finds the partition)."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await client.metadata(topic)
        brokers: dict[int, tuple[str, int]] = {b.node_id: (b.host, b.port) for b in response.brokers}
        views = [response]
        for address in brokers.values():
            views.append(await client._client(address).send(metadata_request(topic), MetadataResponse))
        leaders = [{p.partition_index: p.leader_id for p in v.topics[0].partitions} for v in views]
        led = {i: node for i, node in leaders[0].items() if node in brokers}
        if len(led) == partitions and all(view == leaders[0] for view in leaders):
            by_leader: dict[int, list[int]] = {}
            for index, node in sorted(led.items()):
                by_leader.setdefault(node, []).append(index)
            return brokers, by_leader
        assert time.monotonic() < deadline, f"{topic}: {len(led)} of {partitions} partitions led"
        await asyncio.sleep(0.2)


def metadata_request(topic: str) -> md.MetadataRequest:
    return md.MetadataRequest(
        topics=(md.MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def flood_producer_ids(
    client: MiniClient, producers: int, result: FloodResult, partitions: int = 30, in_flight: int = 8
) -> None:
    """Issue 3 of the floods: one record each from ``producers`` producer ids (acks=all, RF 3), each produce
    request carrying one batch for every partition its leader leads; the leaders' and followers' producer
    state grows by one entry per id until producer.id.expiration.ms."""
    assert await client.create_topic(PRODUCERS_TOPIC, partitions, 3, {"min.insync.replicas": "2"}) == 0
    brokers, by_leader = await partitions_by_leader(client, PRODUCERS_TOPIC, partitions)
    per_round = sum(len(led) for led in by_leader.values())

    async def leader(node: int, led: list[int], share: int, first: int) -> None:
        async with KafkaClient(*brokers[node], client_id="pid-flood", request_timeout_ms=120_000) as conn:
            for start in range(0, share, in_flight):
                sends = [
                    conn.send(_one_record_each(led, first + (start + k) * per_round), ProduceResponse)
                    for k in range(min(in_flight, share - start))
                ]
                for produced in await asyncio.gather(*sends):
                    for partition in produced.responses[0].partition_responses:
                        result.count(partition.error_code)

    rounds = -(-producers // per_round)
    offsets = [0]
    for led in by_leader.values():
        offsets.append(offsets[-1] + len(led))
    await asyncio.gather(
        *(
            leader(node, led, rounds, FIRST_FORGED_PRODUCER_ID + offset)
            for (node, led), offset in zip(by_leader.items(), offsets, strict=False)
        )
    )


GROUP = "metadata-flood"


async def find_group_coordinator(client: MiniClient, group: str, timeout_s: float = 60.0) -> fc_r.Coordinator:
    """The group's coordinator, asked again while __consumer_offsets is being created (its first ask)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await client.any_send(
            fc.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)), fc_r.FindCoordinatorResponse
        )
        coordinator = found.coordinators[0]
        if coordinator.error_code == ErrorCode.none:
            return coordinator
        assert coordinator.error_code == ErrorCode.coordinator_not_available, coordinator
        assert time.monotonic() < deadline, coordinator
        await asyncio.sleep(0.2)


async def flood_offset_metadata(
    client: MiniClient, commits: int, metadata_bytes: int, result: FloodResult
) -> None:
    """Issue 4 of the floods: ``commits`` OffsetCommits, one after another, each with ``metadata_bytes`` of
    metadata on the steady topic's partition (a simple commit: generation -1, no member)."""
    coordinator = await find_group_coordinator(client, GROUP)
    metadata = "m" * metadata_bytes
    for n in range(commits):
        request = oc.OffsetCommitRequest(
            group_id=GroupId(GROUP),
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=(
                oc.OffsetCommitRequestTopic(
                    name=TopicName(STEADY_TOPIC),
                    partitions=(
                        oc.OffsetCommitRequestPartition(
                            partition_index=i32(0),
                            committed_offset=i64(n),
                            committed_leader_epoch=i32(-1),
                            committed_metadata=metadata,
                        ),
                    ),
                ),
            ),
        )
        # A connection each: a broker that closes one on a commit it will not take is counted, not fatal.
        try:
            async with KafkaClient(coordinator.host, coordinator.port, request_timeout_ms=120_000) as conn:
                response = await conn.send(request, OffsetCommitResponse)
            result.count(response.topics[0].partitions[0].error_code)
        except NetworkError as exc:
            result.flood_errors[type(exc).__name__] = result.flood_errors.get(type(exc).__name__, 0) + 1


COMPACTED_TOPIC = "compacted"
KEYS_PER_REQUEST = 1000


async def flood_compacted_keys(client: MiniClient, keys: int, result: FloodResult) -> None:
    """Issue 5 of the floods: ``keys`` distinct keys written once each to a compacted RF 3 topic of 1 MiB
    segments that are cleanable at once (min.cleanable.dirty.ratio 0.01), a thousand records a request; the
    cleaner's map of them is built while the steady client produces (``while_steady``'s settle time)."""
    configs = {"cleanup.policy": "compact", "segment.bytes": "1048576", "min.cleanable.dirty.ratio": "0.01"}
    assert await client.create_topic(COMPACTED_TOPIC, 1, 3, configs) == ErrorCode.none
    now = int(time.time() * 1000)
    for first in range(0, keys, KEYS_PER_REQUEST):
        batch = build_batch(
            [
                (b"key-%09d" % k, b"value-%d" % k, (), now)
                for k in range(first, min(keys, first + KEYS_PER_REQUEST))
            ]
        )
        error, _offset, _message = await client.produce_batch(COMPACTED_TOPIC, 0, batch, -1, 3)
        result.count(error)


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
        response = await conn.send(request, AlterClientQuotasResponse)
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
                responses = await asyncio.gather(
                    *(conn.send(request, ListOffsetsResponse) for _ in range(in_flight))
                )
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
log.cleaner.backoff.ms=1000
"""
FLOOD_CONTROLLER = "broker.session.timeout.ms=2000\n"
# The CreateTopics flood last: what it leaves the brokers to do (thousands of new replicas to catch up, ISRs
# to settle) goes on well after its last answer and would fall on the floods after it.
FLOODS = (
    "baseline",
    "init_producer_ids",
    "producer_ids",
    "offset_metadata",
    "compacted_keys",
    "list_offsets",
    "create_topics",
)


@dataclass
class FloodSizes:
    """How big each flood of the floods part is (``scripts/bench --flood-*``)."""

    topics: int = 2000  # CreateTopics, RF 3, 500 a request
    producer_id_requests: int = 5000  # InitProducerId
    producers: int = 5000  # producer ids with one record each
    commits: int = 30  # OffsetCommits of metadata_bytes each
    metadata_bytes: int = 900_000
    keys: int = 50_000  # distinct keys in a compacted topic
    list_offsets_s: float = 10.0
    list_offsets_in_flight: int = 32  # ListOffsets each of the four connections keeps in flight
    baseline_s: float = 5.0
    settle_s: float = SETTLE_S  # the other client goes on producing this long after each flood
    cleaner_settle_s: float = 10.0  # after the compacted keys: the cleaner's passes over them


async def _list_offsets_in_a_process(
    leader: str, seconds: float, in_flight: int, result: FloodResult
) -> None:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        run = asyncio.get_running_loop().run_in_executor(
            pool, flood_list_offsets, leader, seconds, 4, in_flight, 200
        )
        answered, throttled = await run
    result.succeeded = answered
    if throttled:
        result.flood_errors["throttled"] = throttled


async def run_floods(
    bootstrap: str,
    sizes: FloodSizes,
    fences: Callable[[], int | None],
    rss_mb: Callable[[], list[int]],
    only: tuple[str, ...] = FLOODS,
) -> dict[str, dict[str, Any]]:
    """Each flood of the issue's list in turn on one running three-broker cluster, the other client producing
    to its steady topic throughout: per flood, its summary (the other client's produce p99 and max, its failed
    produces, the flood's own answers, the brokers fenced meanwhile and the brokers' RSS afterwards)."""
    client = MiniClient(bootstrap)
    try:
        await create_steady_topic(client)
        steady, brokers = await client.partition_state(STEADY_TOPIC)
        host, port = brokers[steady.leader_id]
        leader = f"{host}:{port}"
        listed = [[steady.leader_id]] * 200  # every listed partition on the steady topic's leader
        assert await client.create_topic(LISTED_TOPIC, -1, -1, {}, assignment=listed) == ErrorCode.none
        floods: dict[str, Callable[[FloodResult], Awaitable[object]]] = {
            "baseline": lambda r: asyncio.sleep(sizes.baseline_s),
            "create_topics": lambda r: _flood(bootstrap, sizes.topics, 500, 3, r),
            "init_producer_ids": lambda r: flood_init_producer_ids(bootstrap, sizes.producer_id_requests, r),
            "producer_ids": lambda r: flood_producer_ids(client, sizes.producers, r),
            "offset_metadata": lambda r: flood_offset_metadata(
                client, sizes.commits, sizes.metadata_bytes, r
            ),
            "compacted_keys": lambda r: flood_compacted_keys(client, sizes.keys, r),
            "list_offsets": lambda r: _list_offsets_in_a_process(
                leader, sizes.list_offsets_s, sizes.list_offsets_in_flight, r
            ),
        }
        results: dict[str, dict[str, Any]] = {}
        for name in only:
            flood, result = floods[name], FloodResult()
            before = fences()
            settle = sizes.cleaner_settle_s if name == "compacted_keys" else sizes.settle_s
            await while_steady(client, lambda: flood(result), result, settle)  # noqa: B023 (awaited here)
            after = fences()
            result.fences = None if before is None or after is None else after - before
            result.broker_rss_mb = rss_mb()
            results[name] = result.summary()
            print(f"  {name}: {results[name]}", flush=True)
        return results
    finally:
        await client.close()


def rss_mb(pids: list[int]) -> list[int]:
    """Each process's resident set (VmRSS), MB; 0 for one that is gone."""
    sizes = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            sizes.append(0)
            continue
        kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        sizes.append(kb // 1024)
    return sizes


def _properties(text: str) -> dict[str, object]:
    return {key: value for key, _, value in (line.partition("=") for line in text.splitlines() if line)}


def _floods_on(work: Path, target: str, sizes: FloodSizes) -> dict[str, dict[str, Any]]:
    """The floods on a fresh three-broker cluster of ``target`` with the same settings (Kafka's names on
    both): 200 ms heartbeats, a 2 s session timeout, and every quota at its default (none)."""
    work.mkdir(parents=True, exist_ok=True)
    if target == "kafka":
        from epochkraft.peers.kafka import KafkaPeer

        peer = KafkaPeer(
            run_dir=work / "kafka",
            brokers=3,
            heap_mb=1024,
            broker_config=_properties(FLOOD_BROKER),
            controller_config=_properties(FLOOD_CONTROLLER),
        )
        peer.start(timeout=240)
        try:
            log = peer.controller_log
            pids = [n.pid or 0 for n in peer.nodes.values()]
            return asyncio.run(
                run_floods(peer.bootstrap, sizes, lambda: kafka_fences(log), lambda: rss_mb(pids))
            )
        finally:
            peer.stop(timeout=30)
    (work / "broker.properties").write_text(FLOOD_BROKER)
    (work / "controller.properties").write_text(FLOOD_CONTROLLER)
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
        pids = [cluster.nodes[b].pid or 0 for b in (1, 2, 3)]

        def fences() -> int:
            time.sleep(0.5)  # the event log's writer flushes every 0.2 s
            return count_fences(metrics_dir, since_ms=0)

        return asyncio.run(run_floods(cluster.bootstrap, sizes, fences, lambda: rss_mb(pids)))
    finally:
        cluster.kill_all()


def kafka_fences(controller_log: Path) -> int:
    """The brokers Kafka's controller fenced (ReplicationControlManager.maybeFenceOneStaleBroker's line)."""
    try:
        return controller_log.read_text(errors="replace").count("because its session has timed out")
    except OSError:
        return 0


def part_floods(work: Path, sizes: FloodSizes, targets: tuple[str, ...] = ("epochkraft",)) -> dict[str, Any]:
    """The floods on each target in turn, each cluster alone on the machine: epochkraft's where they always
    are, Kafka's under ``kafka``, and epochkraft's p99 over Kafka's under ``epochkraft/kafka``."""
    by_target = {t: _floods_on(work / t, t, sizes) for t in targets}
    results: dict[str, Any] = {**by_target.get("epochkraft", {}), "sizes": sizes.__dict__}
    if "kafka" in by_target:
        results["kafka"] = by_target["kafka"]
    if "kafka" in by_target and "epochkraft" in by_target:
        results["epochkraft/kafka"] = {
            name: _ratio(row["produce_p99_ms"], by_target["kafka"][name]["produce_p99_ms"])
            for name, row in by_target["epochkraft"].items()
        }
    return results


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return None if ours is None or theirs is None else round(ours / max(theirs, 0.1), 2)


def floods_side_by_side(floods: dict[str, Any]) -> str:
    """One Markdown row per flood: the other client's produce p99 / max and failed produces on each side, the
    flood's own answers, and epochkraft's p99 over Kafka's."""
    kafka, ratios = floods["kafka"], floods["epochkraft/kafka"]
    lines = [
        "| flood | epochkraft p99 / max ms | errors | flood's answers | fenced "
        "| Kafka p99 / max ms | errors | flood's answers | fenced | p99 ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cells(row: dict[str, Any]) -> str:
        answers = {"ok": row["succeeded"], **row["flood_errors"]}
        return (
            f"{row['produce_p99_ms']} / {row['produce_max_ms']} | {_errors(row['failed_produces'])} | "
            f"{_errors(answers)} | {row['fences']}"
        )

    for name, ratio in ratios.items():
        lines.append(f"| {name} | {cells(floods[name])} | {cells(kafka[name])} | {ratio} |")
    return "\n".join(lines)


def _errors(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items() if v) or "0"
