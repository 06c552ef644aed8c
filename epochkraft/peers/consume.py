"""Consumer throughput from the page cache, Apache Kafka, epochkraft and kfake side by side (part of
``scripts/bench_peers``, ``--parts consume``).

A topic of 6 partitions with RF 1 (their leaders spread over the three brokers) is filled with ``--consume-mb``
(300) MB of 1 KiB records by Kafka's ProducerPerformance (acks=1, as fast as it goes). Every log file of the
topic is then read once by this process, so the whole topic is in the page cache whatever the broker
did with it while appending (epochkraft drops the page cache behind its appends,
``log.page.cache.drop.behind.bytes``; Kafka keeps it); nothing is dropped afterwards, and the share of
the topic's log bytes resident is printed (``fincore``). kfake keeps its logs in memory.

- catching-up reader: one consumer from offset 0 of every partition reading everything as fast as it can,
  after one unmeasured read (a JVM's JIT warms up), ``--rounds`` times with each client: librdkafka
  (confluent-kafka, the partitions assigned, in this process) and Kafka's ConsumerPerformance
  (``org.apache.kafka.tools.ConsumerPerformance`` from the peers' jars, a new group each round). The figures: MB/s of record values, and the brokers' CPU seconds
  (user + system, from /proc, every broker process) per GB served over the read. For librdkafka the read
  runs from ``assign()`` to the last record; for ConsumerPerformance it is the tool's own fetch window
  (``fetch.time.ms``, after the group join), the brokers' CPU sampled every 100 ms meanwhile.
- caught-up readers: ``--consume-live-readers`` librdkafka consumers at the end of a new empty topic (6
  partitions, RF 1) while ProducerPerformance writes ``--consume-live-rate`` records/s of 1 KiB for
  ``--consume-live-seconds``; the brokers' CPU per GB delivered to the readers (their appends of the
  produced records included, the same work on every cluster) and the end-to-end delay, the wall clock at
  ``poll()`` minus the record's CreateTime, the first second left out.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from epochkraft.harness.procfs import cpu_seconds
from epochkraft.peers.fetch import java_command
from epochkraft.peers.latency import fmt_ratio, latencies, percentile, ratio, read_samples
from epochkraft.peers.perf import create_topic, producer_performance

PARTITIONS = 6
RECORD_BYTES = 1024
SAMPLE_INTERVAL_S = 0.1

BrokerPids = Callable[[], list[int]]


@dataclass
class ReadFigure:
    """One client's catching-up reads of the whole topic on one cluster: the median round and each."""

    target: str
    client: str
    mb_per_s: float
    broker_cpu_s_per_gb: float
    rounds_mb_per_s: list[float]
    rounds_cpu_s_per_gb: list[float]


@dataclass
class LiveFigure:
    target: str
    rate: int
    readers: int
    delivered_mb: float
    broker_cpu_s_per_gb: float
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass
class ConsumeFigures:
    target: str
    fill_mb: float
    fill_mb_per_s: float
    resident: float  # the share of the topic's log bytes in the page cache before the reads (NaN: none)
    load_average: tuple[float, float, float]
    reads: list[ReadFigure] = field(default_factory=list)
    live: LiveFigure | None = None


def per_gb(cpu_s: float, nbytes: int) -> float:
    return cpu_s / (nbytes / 1e9) if nbytes else float("nan")


# ---- the fill and the page cache --------------------------------------------------------------------


def topic_logs(root: Path, topic: str) -> list[Path]:
    """The topic's segment files under a cluster's directory: ``<topic>-<partition>/<offset>.log``."""
    pattern = re.compile(rf"{re.escape(topic)}-\d+")
    return [p for p in root.rglob("*.log") if pattern.fullmatch(p.parent.name)]


def read_into_page_cache(files: Sequence[Path]) -> None:
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while f.read(8 << 20):
                pass


def resident_share(files: Sequence[Path]) -> float:
    """Resident bytes over file bytes, from util-linux's ``fincore`` (NaN without files or the tool)."""
    if not files:
        return float("nan")
    try:
        result = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", *map(str, files)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return float("nan")
    resident = size = 0
    for line in result.stdout.splitlines():
        res, total = line.split()
        resident, size = resident + int(res), size + int(total)
    return resident / size if size else float("nan")


# ---- catching-up readers ------------------------------------------------------------------------------


def librdkafka_read(bootstrap: str, topic: str, records: int, pids: Sequence[int]) -> tuple[float, float]:
    """(MB/s, broker CPU s/GB) of one confluent-kafka consumer reading ``records`` from offset 0."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4()}",  # never joined: the partitions are assigned
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        start, cpu = time.monotonic(), cpu_seconds(pids)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        count = nbytes = 0
        deadline = start + 300
        while count < records and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                if message.error() is None:
                    count += 1
                    nbytes += len(message)
        elapsed, cpu = time.monotonic() - start, cpu_seconds(pids) - cpu
    finally:
        consumer.close()
    if count < records:
        raise RuntimeError(f"librdkafka read {count} of {records} records in 300 s")
    return nbytes / elapsed / 1e6, per_gb(cpu, nbytes)


class CpuSampler:
    """The brokers' CPU seconds every ``SAMPLE_INTERVAL_S``, with the wall clock (epoch seconds)."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), cpu_seconds(self.pids)))
            if self._stop.wait(SAMPLE_INTERVAL_S):
                self.samples.append((time.time(), cpu_seconds(self.pids)))
                return


def cpu_between(samples: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds used from ``start`` to ``end`` by (time, CPU seconds) samples in time order: from the
    last sample at or before the start to the first at or after the end, so the window is covered whole
    (by up to a sampling interval more at each side)."""
    before = [cpu for at, cpu in samples if at <= start] or [samples[0][1]]
    after = [cpu for at, cpu in samples if at >= end] or [samples[-1][1]]
    return after[0] - before[-1]


# start.time, end.time, MB, MB.sec, nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, ...
CONSUMER_PERFORMANCE = re.compile(
    r"^(\d{17}), (\d{17}), ([\d.]+), ([\d.]+), (\d+), ([\d.]+), (-?\d+), (\d+), ([\d.]+), ([\d.]+)$", re.M
)
DATE_FORMAT = "yyyyMMddHHmmssSSS"  # the tool's SimpleDateFormat, in UTC (the JVM's zone is set)


@dataclass(frozen=True)
class ConsumerPerfResult:
    """ConsumerPerformance's summary: the bytes read, and its fetch window, which ends at ``end_s`` (epoch
    seconds) and excludes the group join (Kafka's ConsumerPerformance: ``fetchTimeInMs``)."""

    nbytes: int
    end_s: float
    fetch_ms: int

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / 1e6 / (self.fetch_ms / 1000) if self.fetch_ms else float("nan")


def parse_consumer_performance(stdout: str) -> ConsumerPerfResult | None:
    match = CONSUMER_PERFORMANCE.search(stdout)
    if match is None:
        return None
    mebibytes = float(match.group(3))  # the tool's MB are MiB; these figures' are 10^6 bytes
    return ConsumerPerfResult(
        round(mebibytes * 1024 * 1024), epoch_seconds(match.group(2)), int(match.group(8))
    )


def epoch_seconds(stamp: str) -> float:
    """``DATE_FORMAT`` in UTC as seconds since the epoch."""
    moment = datetime.strptime(stamp, "%Y%m%d%H%M%S%f").replace(tzinfo=UTC)
    return moment.timestamp()


def consumer_performance(
    bootstrap: str, topic: str, records: int, pids: Sequence[int], log4j: Path
) -> tuple[float, float]:
    """(MB/s over its fetch window, broker CPU s/GB over that window) of one ConsumerPerformance run."""
    command = java_command(
        "org.apache.kafka.tools.ConsumerPerformance",
        [
            "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records),
            "--group", f"perf-{uuid.uuid4()}", "--timeout", "30000", "--hide-header",
            "--date-format", DATE_FORMAT,
        ],
        heap_mb=512,
        jvm=[f"-Dlog4j2.configurationFile={log4j}", "-Duser.timezone=UTC"],
    )  # fmt: skip
    with CpuSampler(pids) as sampler:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    parsed = parse_consumer_performance(result.stdout)
    if result.returncode != 0 or parsed is None:
        raise RuntimeError(f"ConsumerPerformance failed ({result.returncode}):\n{result.stdout[-2000:]}")
    cpu = cpu_between(sampler.samples, parsed.end_s - parsed.fetch_ms / 1000, parsed.end_s)
    return parsed.mb_per_s, per_gb(cpu, parsed.nbytes)


def measure_reads(
    target: str, bootstrap: str, topic: str, records: int, pids: BrokerPids, rounds: int, log4j: Path
) -> list[ReadFigure]:
    clients: dict[str, Callable[[], tuple[float, float]]] = {
        "librdkafka": lambda: librdkafka_read(bootstrap, topic, records, pids()),
        "ConsumerPerformance": lambda: consumer_performance(bootstrap, topic, records, pids(), log4j),
    }
    clients["librdkafka"]()  # unmeasured: the brokers' first read of the topic (a JVM's JIT) is not counted
    figures = []
    for client, read in clients.items():
        runs = []
        for round_ in range(rounds):
            runs.append(read())
            print(
                f"  {target:<11} catching up, {client:<19} round {round_ + 1}: {runs[-1][0]:.1f} MB/s, "
                f"broker CPU {runs[-1][1]:.2f} s/GB",
                flush=True,
            )
        median = sorted(runs)[len(runs) // 2]
        figures.append(ReadFigure(target, client, *median, [r[0] for r in runs], [r[1] for r in runs]))
    return figures


# ---- caught-up readers ----------------------------------------------------------------------------------


def measure_live(
    target: str, bootstrap: str, pids: BrokerPids, readers: int, rate: int, seconds: float, log4j: Path
) -> LiveFigure:
    topic = "consume-live"
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS, 1, 1))
    records = int(rate * seconds)
    samples: list[list[tuple[float, float]]] = [[] for _ in range(readers)]
    errors: list[BaseException] = []
    stop = threading.Event()
    readies = [threading.Event() for _ in range(readers)]
    threads = [
        threading.Thread(
            target=read_samples,
            args=(bootstrap, topic, records, r, stop, s, errors, PARTITIONS),
            daemon=True,
        )
        for r, s in zip(readies, samples, strict=True)
    ]
    for thread in threads:
        thread.start()
    try:
        if not all(r.wait(60) for r in readies) or errors:
            raise RuntimeError(f"{target}: the caught-up readers did not start: {errors}")
        broker_pids = pids()
        cpu = cpu_seconds(broker_pids)
        producer_performance(bootstrap, topic, "1", records, log4j, throughput=rate)
        for thread in threads:  # the last records are on their way
            thread.join(30)
        cpu = cpu_seconds(broker_pids) - cpu
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    delivered = sum(map(len, samples))
    ordered = sorted(lat for s in samples for lat in latencies(s, 1000))
    figure = LiveFigure(
        target,
        rate,
        readers,
        delivered * RECORD_BYTES / 1e6,
        per_gb(cpu, delivered * RECORD_BYTES),
        percentile(ordered, 0.5),
        percentile(ordered, 0.99),
        ordered[-1] if ordered else float("nan"),
    )
    print(
        f"  {target:<11} caught up, {readers} readers at {rate} records/s: {delivered} of "
        f"{records * readers} records, broker CPU {figure.broker_cpu_s_per_gb:.2f} s/GB, "
        f"delay p50 {figure.p50_ms:.0f} ms p99 {figure.p99_ms:.0f} ms",
        flush=True,
    )
    return figure


# ---- the part ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsumeSettings:
    megabytes: int
    rounds: int
    live_readers: int
    live_rate: int
    live_seconds: float


def measure_consume(
    target: str, bootstrap: str, root: Path, pids: BrokerPids, settings: ConsumeSettings, log4j: Path
) -> ConsumeFigures:
    topic = "consume-read"
    load = os.getloadavg()
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS, 1, 1))
    records = settings.megabytes * 1_000_000 // RECORD_BYTES
    fill = producer_performance(bootstrap, topic, "1", records, log4j)
    logs = topic_logs(root, topic)
    read_into_page_cache(logs)
    resident = resident_share(logs)
    cached = (
        "its logs in memory" if math.isnan(resident) else f"{resident:.0%} of its log bytes in the page cache"
    )
    print(
        f"  {target:<11} filled {records} records of 1 KiB at {fill.mb_per_s:.1f} MB/s; {cached}", flush=True
    )
    figures = ConsumeFigures(target, records * RECORD_BYTES / 1e6, fill.mb_per_s, resident, load)
    figures.reads = measure_reads(target, bootstrap, topic, records, pids, settings.rounds, log4j)
    figures.live = measure_live(
        target, bootstrap, pids, settings.live_readers, settings.live_rate, settings.live_seconds, log4j
    )
    return figures


def report_consume(figures: list[ConsumeFigures]) -> None:
    if not figures:
        return
    first = figures[0]
    print(
        f"\nconsumers, a topic of {PARTITIONS} partitions RF 1, {first.fill_mb:.0f} MB of 1 KiB records "
        f"in the page cache; median of the rounds (MB/s, broker CPU s per GB served):"
    )
    print(f"  {'target':<11} {'client':<20} {'MB/s':>8} {'CPU s/GB':>9}  {'load average':<16} rounds MB/s")
    for f in figures:
        loads = " ".join(f"{v:.1f}" for v in f.load_average)
        for r in f.reads:
            rounds = ", ".join(f"{v:.1f}" for v in r.rounds_mb_per_s)
            print(
                f"  {f.target:<11} {r.client:<20} {r.mb_per_s:>8.1f} {r.broker_cpu_s_per_gb:>9.2f}  "
                f"{loads:<16} {rounds}"
            )
    lives = [f.live for f in figures if f.live is not None]
    if lives:
        print(
            f"caught up: {lives[0].readers} readers, {lives[0].rate} records/s of 1 KiB produced (acks=1) "
            "for the measured seconds; broker CPU s per GB delivered (appends included), delay ms:"
        )
        print(f"  {'target':<11} {'CPU s/GB':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'MB':>7}")
        for live in lives:
            print(
                f"  {live.target:<11} {live.broker_cpu_s_per_gb:>9.2f} {live.p50_ms:>7.0f} "
                f"{live.p99_ms:>7.0f} {live.max_ms:>7.0f} {live.delivered_mb:>7.1f}"
            )
    for line in consume_ratios(figures):
        print(line)


def consume_ratios(figures: list[ConsumeFigures]) -> list[str]:
    """Each other target's figures over Kafka's: MB/s and CPU per GB by client, CPU and delay caught up."""
    by = {f.target: f for f in figures}
    kafka = by.get("kafka")
    if kafka is None:
        return []
    lines = []
    for other in (f for f in figures if f.target != "kafka"):
        theirs = {r.client: r for r in kafka.reads}
        for r in other.reads:
            if (k := theirs.get(r.client)) is not None:
                lines.append(
                    f"ratio {other.target}/kafka, {r.client}: MB/s {fmt_ratio(ratio(r.mb_per_s, k.mb_per_s))}, "
                    f"CPU per GB {fmt_ratio(ratio(r.broker_cpu_s_per_gb, k.broker_cpu_s_per_gb))}"
                )
        if other.live is not None and kafka.live is not None:
            lines.append(
                f"ratio {other.target}/kafka, caught up: CPU per GB "
                f"{fmt_ratio(ratio(other.live.broker_cpu_s_per_gb, kafka.live.broker_cpu_s_per_gb))}, delay p50 "
                f"{fmt_ratio(ratio(other.live.p50_ms, kafka.live.p50_ms))}, p99 "
                f"{fmt_ratio(ratio(other.live.p99_ms, kafka.live.p99_ms))}"
            )
    return lines
