"""Scale in partitions, Apache Kafka and epochkraft side by side (part of ``scripts/bench_peers``,
``--parts scale``).

Each target gets a fresh cluster of a controller and three brokers (Kafka: four JVMs of
``KAFKA_HEAP_MB``; epochkraft: four Python processes), alone on the machine, and:

1. ``partitions`` partitions at RF 3 in topics of ``TOPIC_PARTITIONS`` each, created by CreateTopics
   requests of ``TOPICS_PER_REQUEST`` topics sent one after the other (both sides refuse a request of more
   than 10,000 partitions, Kafka 4.4 in ``ReplicationControlManager.validateTotalNumberOfPartitions``, and
   Kafka's ``QuorumController.MAX_RECORDS_PER_USER_OP`` bounds a request's records to 10,000). Timed until the last request is answered, and until every broker hosts every replica
   (DescribeLogDirs to each broker lists all its partitions) and every broker's Metadata shows every
   partition with a leader and its full ISR.
2. Each broker's and the controller's RSS, open file descriptors and memory maps (``/proc``).
3. Metadata propagation: ``changes`` times, a probe topic's replicas reordered (AlterPartitionReassignments
   with the same replica set: one PartitionChangeRecord), timed from the request until every broker's
   Metadata shows the new order.
4. A controlled shutdown: SIGTERM to broker 2, timed until its process exits; then it is started again,
   timed until it serves and lists itself in its own Metadata (both serve clients only once unfenced:
   Kafka's ``BrokerServer.startup`` enables request processing after ``lifecycleManager.setReadyToUnfence``)
   and until the other brokers' Metadata shows it in the ISR of every partition it hosts (the controlled
   shutdown took it out of them: Kafka's ``ReplicationControlManager.handleBrokerInControlledShutdown``).

kfake takes no part: it runs every broker and its metadata in one process, with no controller of its own,
no controlled shutdown and no broker to restart alone, and keeps its logs in memory, so none of the figures
above has a counterpart there.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import resource
import signal
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.alter_partition_reassignments.v0 import request as apr
from kio.schema.alter_partition_reassignments.v0.response import AlterPartitionReassignmentsResponse
from kio.schema.create_topics.v7 import request as ct
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.describe_log_dirs.v4 import request as dld
from kio.schema.describe_log_dirs.v4.response import DescribeLogDirsResponse
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import split
from epochkraft.harness.procfs import rss_mb
from epochkraft.net.client import KafkaClient
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.peers.latency import fmt_ratio, ratio
from epochkraft.protocol.errors import ErrorCode

TOPIC_PARTITIONS = 1_000
TOPICS_PER_REQUEST = 5
REPLICATION_FACTOR = 3
PREFIX = "scale-"
PROBE = "probe"  # no PREFIX: not counted among the scale topics
RESTARTED = 2
KAFKA_HEAP_MB = 1024
POLL_S = 0.5  # a Metadata answer of every partition is large: not too often
BIG_REQUEST_MS = 120_000
CREATE_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))


@dataclass
class Daemons:
    """What the part needs of a cluster: its brokers' addresses, its processes' pids, and stopping a
    broker cleanly and starting it again."""

    addresses: dict[int, str]
    pids: Callable[[], dict[str, int]]  # "controller", "broker-1", ...
    terminate: Callable[[int], None]  # SIGTERM: a controlled shutdown
    wait_exit: Callable[[int, float], bool]
    launch: Callable[[int], None]


@dataclass
class ProcessFigures:
    rss_mb: float
    open_fds: int
    memory_maps: int


@dataclass
class ScaleFigure:
    target: str
    partitions: int
    topics: int
    topic_partitions: int  # of each topic but perhaps the last
    created_s: float  # the first CreateTopics sent until the last answered
    settled_s: float  # until every broker hosts every replica and shows every full ISR
    processes: dict[str, ProcessFigures]
    propagation_ms: list[float]
    shutdown_s: float  # SIGTERM until the broker's process exited
    running_s: float  # its start until it serves and lists itself
    in_every_isr_s: float  # its start until the others show it in every ISR it belongs to
    load_average: list[float] = field(default_factory=list)  # 1 min, at the start and at the end

    @property
    def propagation_median_ms(self) -> float:
        return statistics.median(self.propagation_ms) if self.propagation_ms else float("nan")


# ---- pure pieces ----------------------------------------------------------------------------------------
def topic_sizes(partitions: int, per_topic: int = TOPIC_PARTITIONS) -> list[int]:
    """``partitions`` split into topics of ``per_topic``, the last one holding the rest."""
    full, rest = divmod(partitions, per_topic)
    return [per_topic] * full + ([rest] if rest else [])


def request_batches(sizes: Sequence[int], per_request: int = TOPICS_PER_REQUEST) -> list[list[int]]:
    """Topic indexes grouped into CreateTopics requests."""
    indexes = list(range(len(sizes)))
    return [indexes[i : i + per_request] for i in range(0, len(indexes), per_request)]


def full_isr_count(partitions: Iterable[tuple[int, Sequence[int], Sequence[int]]]) -> int:
    """Partitions, as (leader, replicas, ISR), with a leader and every replica in the ISR."""
    return sum(1 for leader, replicas, isr in partitions if leader >= 0 and set(replicas) <= set(isr))


def in_every_isr(partitions: Iterable[tuple[int, Sequence[int], Sequence[int]]], broker: int) -> bool:
    """The broker in the ISR of every partition (leader, replicas, ISR) that has it as a replica."""
    return all(broker in isr for _, replicas, isr in partitions if broker in replicas)


def rotated(replicas: Sequence[int]) -> list[int]:
    return [*replicas[1:], *replicas[:1]]


def limit_warnings(partitions: int, max_map_count: int, open_files: int) -> list[str]:
    """What this machine's limits say of a broker hosting every replica: Kafka mmaps the offset and time
    index of each partition's active segment and keeps its log file open; an epochkraft broker keeps one
    file open per partition as well (the margins: a JVM's or an interpreter's own maps and files)."""
    warnings = []
    if 2 * partitions + 2_000 > max_map_count:
        warnings.append(
            f"vm.max_map_count {max_map_count}: a Kafka broker needs about {2 * partitions + 2_000}"
        )
    if partitions + 1_000 > open_files:
        warnings.append(f"open files limit {open_files}: each broker needs about {partitions + 1_000}")
    return warnings


def machine_limits() -> tuple[int, int]:
    """vm.max_map_count and this process's open files limit (the daemons' too: they inherit it)."""
    max_map_count = int(Path("/proc/sys/vm/max_map_count").read_text())
    return max_map_count, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def per_partition_kib(low: tuple[int, float], high: tuple[int, float]) -> float:
    """The slope of RSS (MB) against partitions between two counts, in KiB per partition."""
    (p0, mb0), (p1, mb1) = low, high
    return (mb1 - mb0) * 1024 / (p1 - p0) if p1 != p0 else float("nan")


# ---- what a process holds -------------------------------------------------------------------------------
def process_figures(pid: int) -> ProcessFigures:
    maps = len(Path(f"/proc/{pid}/maps").read_text().splitlines())
    return ProcessFigures(round(rss_mb(pid), 1), len(os.listdir(f"/proc/{pid}/fd")), maps)


# ---- requests -------------------------------------------------------------------------------------------
def _client(address: str, timeout_ms: int = BIG_REQUEST_MS) -> KafkaClient:
    host, port = split(address)[0]
    return KafkaClient(host, port, request_timeout_ms=timeout_ms, connect_timeout_ms=2000)


def _all_topics() -> md.MetadataRequest:
    return md.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def _partition_rows(answer: MetadataResponse, prefix: str) -> list[tuple[int, Sequence[int], Sequence[int]]]:
    return [
        (p.leader_id, p.replica_nodes, p.isr_nodes)
        for t in answer.topics
        if t.name is not None and t.name.startswith(prefix)
        for p in t.partitions
    ]


async def _hosted(address: str) -> int:
    """Partitions of the scale topics this broker has a log for."""
    client = _client(address)
    try:
        answer = await client.send(dld.DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse)
    finally:
        await client.close()
    return sum(len(t.partitions) for r in answer.results for t in r.topics if t.name.startswith(PREFIX))


async def _full_isr(address: str) -> int:
    client = _client(address)
    try:
        return full_isr_count(_partition_rows(await client.send(_all_topics(), MetadataResponse), PREFIX))
    finally:
        await client.close()


async def _create(bootstrap: str, sizes: Sequence[int]) -> None:
    client = _client(bootstrap.split(",")[0])
    try:
        for batch in request_batches(sizes):
            topics = tuple(
                ct.CreatableTopic(
                    name=TopicName(f"{PREFIX}{i}"),
                    num_partitions=i32(sizes[i]),
                    replication_factor=i16(REPLICATION_FACTOR),
                    assignments=(),
                    configs=(),
                )
                for i in batch
            )
            answer = await client.send(
                ct.CreateTopicsRequest(topics=topics, timeout=CREATE_TIMEOUT, validate_only=False),
                CreateTopicsResponse,
            )
            errors = {t.name: t.error_code for t in answer.topics if t.error_code != ErrorCode.none}
            if errors:
                raise RuntimeError(f"CreateTopics refused: {errors}")
    finally:
        await client.close()


async def _wait_settled(addresses: Sequence[str], partitions: int, timeout_s: float) -> None:
    """Every broker hosting its replicas (every replica: RF 3 on 3 brokers) and showing every full ISR."""
    start = time.monotonic()
    pending = list(addresses)
    while pending:
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"brokers {pending} not settled after {timeout_s:.0f} s")
        await asyncio.sleep(POLL_S)
        with contextlib.suppress(Exception):  # a broker busy past the request timeout: ask again
            pending = [a for a in pending if await _hosted(a) < partitions or await _full_isr(a) < partitions]


# ---- metadata propagation -------------------------------------------------------------------------------
async def _probe_replicas(client: KafkaClient) -> list[int]:
    request = md.MetadataRequest(
        topics=(md.MetadataRequestTopic(topic_id=None, name=TopicName(PROBE)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    answer = await client.send(request, MetadataResponse)
    partitions = answer.topics[0].partitions if answer.topics else ()
    return list(partitions[0].replica_nodes) if partitions else []


async def _create_probe(addresses: Sequence[str]) -> list[int]:
    client = _client(addresses[0])
    try:
        topic = ct.CreatableTopic(
            name=TopicName(PROBE),
            num_partitions=i32(1),
            replication_factor=i16(REPLICATION_FACTOR),
            assignments=(),
            configs=(),
        )
        await client.send(
            ct.CreateTopicsRequest(topics=(topic,), timeout=CREATE_TIMEOUT, validate_only=False),
            CreateTopicsResponse,
        )
        replicas: list[int] = []
        while len(replicas) < REPLICATION_FACTOR:
            await asyncio.sleep(0.1)
            replicas = await _probe_replicas(client)
        return replicas
    finally:
        await client.close()


async def _reorder(address: str, replicas: Sequence[int]) -> None:
    partition = apr.ReassignablePartition(
        partition_index=i32(0), replicas=tuple(BrokerId(b) for b in replicas)
    )
    client = _client(address)
    try:
        answer = await client.send(
            apr.AlterPartitionReassignmentsRequest(
                topics=(apr.ReassignableTopic(name=TopicName(PROBE), partitions=(partition,)),)
            ),
            AlterPartitionReassignmentsResponse,
        )
    finally:
        await client.close()
    errors = [p.error_code for t in answer.responses for p in t.partitions if p.error_code != ErrorCode.none]
    if answer.error_code != ErrorCode.none or errors:
        raise RuntimeError(f"reordering {PROBE}'s replicas refused: {answer.error_code!r} {errors}")


async def _propagation_ms(addresses: Sequence[str], changes: int, timeout_s: float = 60) -> list[float]:
    """Each change timed from its request until every broker's Metadata shows the new replica order."""
    replicas = await _create_probe(addresses)
    clients = [_client(a, 15_000) for a in addresses]
    times = []
    try:
        for _ in range(changes):
            replicas = rotated(replicas)
            sent = time.monotonic()
            await _reorder(addresses[0], replicas)
            pending = list(clients)
            while pending and time.monotonic() - sent < timeout_s:
                shown = await asyncio.gather(*(_probe_replicas(c) for c in pending))
                pending = [c for c, order in zip(pending, shown, strict=True) if order != replicas]
                if pending:
                    await asyncio.sleep(0.005)
            if pending:
                raise TimeoutError(f"{PROBE}'s new replica order not on every broker after {timeout_s:.0f} s")
            times.append(round(1000 * (time.monotonic() - sent), 1))
    finally:
        for client in clients:
            await client.close()
    return times


# ---- the restarted broker -------------------------------------------------------------------------------
async def _lists_itself(address: str, broker: int) -> bool:
    client = _client(address, 5_000)
    try:
        answer = await client.send(
            md.MetadataRequest(
                topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
            ),
            MetadataResponse,
        )
        return any(b.node_id == broker for b in answer.brokers)
    except Exception:  # not listening or not serving yet
        return False
    finally:
        await client.close()


async def _back_in_every_isr(survivors: Sequence[str], broker: int) -> bool:
    for address in survivors:
        client = _client(address)
        try:
            if not in_every_isr(
                _partition_rows(await client.send(_all_topics(), MetadataResponse), PREFIX), broker
            ):
                return False
        except Exception:  # a survivor busy: ask again
            return False
        finally:
            await client.close()
    return True


async def _watch_restart(
    daemons: Daemons, broker: int, started: float, timeout_s: float
) -> tuple[float, float]:
    survivors = [a for i, a in daemons.addresses.items() if i != broker]
    running: float | None = None
    while time.monotonic() - started < timeout_s:
        if running is None and await _lists_itself(daemons.addresses[broker], broker):
            running = time.monotonic() - started
        if running is not None and await _back_in_every_isr(survivors, broker):
            return running, time.monotonic() - started
        await asyncio.sleep(0.1 if running is None else POLL_S)
    raise TimeoutError(f"broker {broker} not back in every ISR {timeout_s:.0f} s after its start")


def _restart(daemons: Daemons, broker: int, timeout_s: float) -> tuple[float, float, float]:
    start = time.monotonic()
    daemons.terminate(broker)
    if not daemons.wait_exit(broker, timeout_s):
        raise TimeoutError(f"broker {broker} still running {timeout_s:.0f} s after SIGTERM")
    shutdown = time.monotonic() - start
    started = time.monotonic()
    daemons.launch(broker)
    running, in_isr = asyncio.run(_watch_restart(daemons, broker, started, timeout_s))
    return shutdown, running, in_isr


# ---- one target -----------------------------------------------------------------------------------------
def measure_scale(
    target: str,
    daemons: Daemons,
    partitions: int,
    changes: int,
    timeout_s: float = 900,
    per_topic: int = TOPIC_PARTITIONS,
) -> ScaleFigure:
    max_map_count, open_files = machine_limits()
    print(
        f"  {target:<11} scale: vm.max_map_count {max_map_count}, open files limit {open_files}", flush=True
    )
    for warning in limit_warnings(partitions, max_map_count, open_files):
        print(f"  {target:<11} scale: warning: {warning}", flush=True)
    load = [round(os.getloadavg()[0], 1)]
    addresses = list(daemons.addresses.values())
    sizes = topic_sizes(partitions, per_topic)
    start = time.monotonic()
    asyncio.run(_create(",".join(addresses), sizes))
    created = time.monotonic() - start
    asyncio.run(_wait_settled(addresses, partitions, timeout_s))
    settled = time.monotonic() - start
    print(
        f"  {target:<11} scale: {partitions} partitions created {created:.1f} s, settled {settled:.1f} s",
        flush=True,
    )
    processes = {name: process_figures(pid) for name, pid in sorted(daemons.pids().items())}
    propagation = asyncio.run(_propagation_ms(addresses, changes))
    shutdown, running, in_isr = _restart(daemons, RESTARTED, timeout_s)
    load.append(round(os.getloadavg()[0], 1))
    figure = ScaleFigure(
        target, partitions, len(sizes), sizes[0], round(created, 2), round(settled, 2), processes, propagation,
        round(shutdown, 2), round(running, 2), round(in_isr, 2), load,
    )  # fmt: skip
    print(
        f"  {target:<11} scale: propagation median {figure.propagation_median_ms:.0f} ms, shutdown "
        f"{figure.shutdown_s:.1f} s, running {figure.running_s:.1f} s, in every ISR {figure.in_every_isr_s:.1f} s",
        flush=True,
    )
    return figure


# ---- the clusters ---------------------------------------------------------------------------------------
def kafka_daemons(peer: KafkaPeer) -> Daemons:
    def pids() -> dict[str, int]:
        return {n.name: n.pid for n in peer.all_nodes if n.pid is not None}

    def wait_exit(node_id: int, timeout_s: float) -> bool:
        proc = peer.nodes[node_id].proc
        assert proc is not None
        with contextlib.suppress(Exception):
            proc.wait(timeout_s)
        return proc.poll() is not None

    return Daemons(
        {i: f"127.0.0.1:{n.port}" for i, n in peer.nodes.items()},
        pids,
        lambda node_id: peer.signal(node_id, signal.SIGTERM),
        wait_exit,
        peer.restart_broker,
    )


def epochkraft_daemons(cluster: LocalCluster) -> Daemons:
    def pids() -> dict[str, int]:
        found = {f"broker-{i}": p.pid for i, p in cluster.nodes.items() if p.pid is not None}
        if cluster.controller is not None and cluster.controller.pid is not None:
            found["controller"] = cluster.controller.pid
        return found

    def wait_exit(node_id: int, timeout_s: float) -> bool:
        cluster.nodes[node_id].wait(timeout_s)
        return not cluster.nodes[node_id].alive

    return Daemons(
        {i: f"127.0.0.1:{p.port}" for i, p in cluster.nodes.items()},
        pids,
        lambda i: cluster.nodes[i].signal("TERM"),
        wait_exit,
        lambda i: cluster.nodes[i].launch(),
    )


@contextmanager
def kafka_scale_cluster(root: Path) -> Iterator[Daemons]:
    peer = KafkaPeer(run_dir=root / "kafka-scale", brokers=3, heap_mb=KAFKA_HEAP_MB)
    peer.start(timeout=240)
    try:
        yield kafka_daemons(peer)
    finally:
        peer.stop(timeout=60)


@contextmanager
def epochkraft_scale_cluster(root: Path) -> Iterator[Daemons]:
    cluster = LocalCluster(data_dir=root / "epochkraft-scale", brokers=3)
    cluster.start()
    try:
        yield epochkraft_daemons(cluster)
    finally:
        cluster.stop()
        cluster.kill_all()


SCALE_TARGETS: dict[str, Callable[[Path], contextlib.AbstractContextManager[Daemons]]] = {
    "kafka": kafka_scale_cluster,
    "epochkraft": epochkraft_scale_cluster,
}


# ---- the report -----------------------------------------------------------------------------------------
def _rows(figure: ScaleFigure) -> list[tuple[str, float, str]]:
    """(label, value for the ratio, value as shown)."""
    rows = [
        ("CreateTopics answered, s", figure.created_s, f"{figure.created_s:.2f}"),
        ("every replica hosted, every ISR full, s", figure.settled_s, f"{figure.settled_s:.1f}"),
    ]
    for name, p in figure.processes.items():
        rows.append((f"{name} RSS, MB", p.rss_mb, f"{p.rss_mb:.0f}"))
    brokers = [p for name, p in figure.processes.items() if name != "controller"]
    if brokers:
        fds, maps = max(p.open_fds for p in brokers), max(p.memory_maps for p in brokers)
        rows.append(("open fds, most of a broker", fds, f"{fds}"))
        rows.append(("memory maps, most of a broker", maps, f"{maps}"))
    shown = ", ".join(f"{t:.0f}" for t in figure.propagation_ms)
    rows += [
        (
            "propagation to every broker, median ms",
            figure.propagation_median_ms,
            f"{figure.propagation_median_ms:.0f} ({shown})",
        ),
        ("controlled shutdown (SIGTERM to exit), s", figure.shutdown_s, f"{figure.shutdown_s:.1f}"),
        ("restarted: serving and listed, s", figure.running_s, f"{figure.running_s:.1f}"),
        ("restarted: back in every ISR, s", figure.in_every_isr_s, f"{figure.in_every_isr_s:.1f}"),
    ]
    load = "-".join(f"{v:.1f}" for v in figure.load_average)
    rows.append(("load average (1 min), start-end", float("nan"), load))
    return rows


def side_by_side(figures: Sequence[ScaleFigure]) -> str:
    """A Markdown table: one column per target, and epochkraft/Kafka when both were measured."""
    if not figures:
        return ""
    by_target = {f.target: f for f in figures}
    targets = list(by_target)
    with_ratio = "epochkraft" in by_target and "kafka" in by_target
    header = ["figure", *targets, *(["epochkraft/kafka"] if with_ratio else [])]
    rows = {t: {label: (value, text) for label, value, text in _rows(f)} for t, f in by_target.items()}
    labels = list(dict.fromkeys(label for t in targets for label in rows[t]))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label in labels:
        cells = [rows[t].get(label, (float("nan"), ""))[1] for t in targets]
        if with_ratio:
            ours, theirs = rows["epochkraft"].get(label), rows["kafka"].get(label)
            both = ours is not None and theirs is not None and "load" not in label
            cells.append(fmt_ratio(ratio(ours[0], theirs[0])) if both and ours and theirs else "")
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


def report_scale(figures: Sequence[ScaleFigure]) -> None:
    if not figures:
        return
    first = figures[0]
    print(
        f"\nscale: {first.partitions} partitions RF {REPLICATION_FACTOR} on 3 brokers ({first.topics} topics "
        f"of {first.topic_partitions}), Kafka's JVMs at -Xmx{KAFKA_HEAP_MB}m:"
    )
    print(side_by_side(figures))
