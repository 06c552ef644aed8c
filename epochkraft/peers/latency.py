"""End-to-end latency at one offered load, the same for Apache Kafka, epochkraft and kfake (part of
``scripts/bench_peers``, ``--parts e2e``).

Kafka's ProducerPerformance produces 1 KiB records at a fixed rate (``--throughput``) to a one-partition
topic with RF 3, acks=all and min.insync.replicas 2, while a consumer (librdkafka, in a thread of this
process, the partition assigned from offset 0, its fetch settings librdkafka's defaults) reads them. A
record's latency is the wall clock when ``poll()`` hands it over minus its CreateTime, which the producer
stamped at ``send()``: one machine, one clock. Records created in the first ``warm_up_s`` are left out
(the clients' connection and metadata set-up). ProducerPerformance's own send-to-acknowledgement
percentiles are reported beside.

Kafka's ``EndToEndLatency`` tool is not used: it sends one record, waits for it to come back and only then
sends the next, so its offered load is one record per round trip and differs between the clusters; a fixed
rate is the comparison asked for here.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochkraft.peers.perf import create_topic, producer_performance


@dataclass
class LatencyFigure:
    target: str
    offered_records_per_s: int
    achieved_records_per_s: float
    sent: int
    received: int
    measured: int  # received after the warm-up
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    ack_p50_ms: float  # ProducerPerformance: send() to acknowledgement
    ack_p99_ms: float


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least a fraction ``q`` of the values at or below it."""
    if not ordered:
        return math.nan
    return ordered[min(max(math.ceil(q * len(ordered)), 1), len(ordered)) - 1]


def latencies(samples: Iterable[tuple[float, float]], warm_up_ms: float) -> list[float]:
    """Sorted receipt-minus-create times (ms) of the records created ``warm_up_ms`` or more after the
    first one; ``samples`` are (create timestamp ms, receipt ms)."""
    pairs = list(samples)
    if not pairs:
        return []
    start = min(created for created, _ in pairs) + warm_up_ms
    return sorted(received - created for created, received in pairs if created >= start)


def read_samples(
    bootstrap: str,
    topic: str,
    expected: int,
    ready: threading.Event,
    stop: threading.Event,
    samples: list[tuple[float, float]],
    errors: list[BaseException],
    partitions: int = 1,
) -> None:
    """A consumer assigned ``topic``'s partitions from offset 0, one record per ``poll()``, appending each
    record's (CreateTime, receipt) ms to ``samples`` until ``expected`` or ``stop``; ``ready`` once it is
    connected to every leader (set too on an error, which goes to ``errors``)."""
    from confluent_kafka import Consumer, TopicPartition

    try:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-{topic}",  # never joined: the partitions are assigned
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            for p in range(partitions):  # connected to every leader before the producer starts
                wait_for_leader(consumer, TopicPartition(topic, p))
            ready.set()
            # One record per poll(): a batched consume() waits for its batch to fill, which would
            # add its own filling time to every record in it.
            while len(samples) < expected and not stop.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    samples.append((float(message.timestamp()[1]), time.time() * 1000))
        finally:
            consumer.close()
    except BaseException as exc:  # reported by the caller, which waits on ``ready``
        errors.append(exc)
        ready.set()


def wait_for_leader(consumer: Any, partition: Any) -> None:
    """Waits until the partition's leader answers: a new topic's leaders may not be known everywhere yet."""
    from confluent_kafka import KafkaError, KafkaException

    settling = (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            consumer.get_watermark_offsets(partition, timeout=30)
            return
        except KafkaException as exc:
            if exc.args[0].code() not in settling or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def keeps_up(offered_records_per_s: float, achieved_records_per_s: float) -> bool:
    """Below 95% of the offered rate the target did not keep up: its latencies are a queue's. (The
    achieved rate counts ProducerPerformance's start, its first metadata fetch: 1-2% of a short run.)"""
    return achieved_records_per_s >= 0.95 * offered_records_per_s


def measure_e2e(
    target: str,
    bootstrap: str,
    rate: int,
    seconds: float,
    warm_up_s: float,
    log4j: Path,
    topic: str = "e2e-latency",
) -> LatencyFigure:
    asyncio.run(create_topic(bootstrap, topic, 1, 3, 2))
    records = int(rate * (seconds + warm_up_s))
    samples: list[tuple[float, float]] = []
    errors: list[BaseException] = []
    ready, stop = threading.Event(), threading.Event()
    reader = threading.Thread(
        target=read_samples, args=(bootstrap, topic, records, ready, stop, samples, errors), daemon=True
    )
    reader.start()
    try:
        if not ready.wait(60) or errors:
            raise RuntimeError(f"{target}: the latency consumer did not start: {errors}")
        perf = producer_performance(bootstrap, topic, "all", records, log4j, throughput=rate)
        reader.join(30)  # the last records are on their way; a target that lost some ends the wait
    finally:
        stop.set()
        reader.join(30)
    if reader.is_alive():  # its samples would still change under the figure, and its topic be deleted
        raise RuntimeError(f"{target}: the latency consumer did not stop within 30 s")
    ordered = latencies(samples, warm_up_s * 1000)
    figure = LatencyFigure(
        target,
        rate,
        perf.records_per_s,
        perf.records,
        len(samples),
        len(ordered),
        percentile(ordered, 0.5),
        percentile(ordered, 0.99),
        percentile(ordered, 0.999),
        ordered[-1] if ordered else math.nan,
        perf.p50_ms,
        perf.p99_ms,
    )
    print(
        f"  {target:<11} e2e at {rate} records/s: p50 {figure.p50_ms:.0f} ms, p99 {figure.p99_ms:.0f} ms "
        f"({figure.received} of {figure.sent} records received, {figure.measured} after the warm-up), "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return figure


def report_e2e(figures: list[LatencyFigure], warm_up_s: float) -> None:
    if not figures:
        return
    print(
        f"\nend-to-end latency (create to consumer), {figures[0].offered_records_per_s} records/s of 1 KiB "
        f"offered, RF 3 acks=all min.insync 2, the first {warm_up_s:g} s left out:"
    )
    print(
        f"  {'target':<11} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'ack p50':>8} {'ack p99':>8} "
        f"{'records/s':>10} {'measured':>9}"
    )
    for f in figures:
        behind = (
            ""
            if keeps_up(f.offered_records_per_s, f.achieved_records_per_s)
            else " (behind the offered rate)"
        )
        print(
            f"  {f.target:<11} {f.p50_ms:>7.0f} {f.p99_ms:>7.0f} {f.max_ms:>7.0f} {f.ack_p50_ms:>8.0f} "
            f"{f.ack_p99_ms:>8.0f} {f.achieved_records_per_s:>10.0f} {f.measured:>9}{behind}"
        )
    by = {f.target: f for f in figures}
    kafka = by.get("kafka")
    for target in ("epochkraft", "kfake"):
        other = by.get(target)
        if kafka and other:
            print(
                f"ratio {target}/kafka, e2e latency: p50 {fmt_ratio(ratio(other.p50_ms, kafka.p50_ms))}, "
                f"p99 {fmt_ratio(ratio(other.p99_ms, kafka.p99_ms))}"
            )


def fmt_ratio(value: float) -> str:
    """Two decimals, three below 0.05 so a small ratio does not print as 0.00."""
    return f"{value:.2f}" if math.isnan(value) or value >= 0.05 else f"{value:.3f}"


def ratio(ours: float, theirs: float) -> float:
    """``ours / theirs``; NaN where either is missing or ``theirs`` is zero (a 0 ms figure rounds)."""
    if math.isnan(ours) or math.isnan(theirs) or theirs == 0:
        return math.nan
    return ours / theirs
