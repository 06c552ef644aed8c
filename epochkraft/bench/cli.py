"""``epochkraft bench [--parts produce,latency,failover,rejoin,reassign,controller,scale,...,view]``: figures as a table and JSON.

1. produce: librdkafka (confluent-kafka) throughput, 1 KiB and 100 B records, against (a) RF 3 acks=all
   min.insync.replicas 2, (b) RF 1 acks=1, (c) the null broker, (d) librdkafka's mock cluster, in
   ``--rounds`` rounds of the four in turn; each reports its median round. ``--targets epochkraft,kafka``
   runs the same measurement against Apache Kafka too (``scripts/peers``' jars, three broker JVMs and a
   controller with the same broker settings), each cluster alone, and reports epochkraft/Kafka ratios.
2. latency: end-to-end produce (acks=all) to consumer receipt at about half of the measured maximum.
3. failover: leader SIGKILLed under acks=all load (RF 3, min.insync.replicas 2), 2 s session timeout, on
   a fresh cluster per run: time to fence and to elect (the controller's event log), to the next
   acknowledged produce, and acknowledged records lost (the partition is read back in full).
4. rejoin: a follower restarted N MB behind: time to catch up and be back in the ISR.
5. controller: AlterPartition partition changes per second through one connection (1 and 1,000
   partitions per request) and registration + heartbeats of 100 simulated brokers.
6. scale: 10,000 partitions (RF 3) on 3 brokers: create time (answered, and until every broker hosts every
   replica), topic config changes and one-partition changes on that cluster (epochkraft/bench/
   metadata_changes.py), restarted broker to RUNNING, RSS, replay.
7. bombs: a small client's latency while others send record bombs, validated on the event loop and on
   worker threads (epochkraft/bench/hostile.py).
8. idle: broker RSS per 1,000 idle connections.
9. tls: produce throughput with TLS on the client and inter-broker listeners against plaintext
   (epochkraft/bench/tls.py).
10. floods: another client's acks=all produce latency (p99, max) during each flood of legitimate requests
   in turn on one 3-broker cluster (none, ``--flood-topics`` RF 3 topics in CreateTopics of 500, InitProducerId,
   one record from each of many producer ids, 900 kB offset metadata, many keys in a compacted topic,
   pipelined ListOffsets), with the flood's own answers, the brokers fenced and the brokers' RSS;
   ``--targets epochkraft,kafka`` runs the same on Kafka and prints both side by side
   (epochkraft/bench/floods.py).
11. request_floods: another client's acks=all produce latency while four connections of one client keep 32
   ListOffsets of 200 partitions each in flight for ``--seconds``, without a quota and with a default
   client-id request_percentage of 25 (KIP-124), on one broker (epochkraft/bench/floods.py).
12. txn: transactions of 100 records of 1 KiB against the idempotent producer at the same settings (RF 3
   acks=all), the ratio transactional/idempotent of records/s; ``--targets epochkraft,kafka`` measures
   Kafka's ratio too (epochkraft/bench/txn.py).
13. acks: single 100 B batches produced one at a time with acks=all (RF 3): a replication round trip's
   latency, p50 / p90 / p99 (``--acks-count`` of them), and the brokers' CPU per batch, alone and with
   ``--acks-idle-partitions`` more partitions on the brokers; ``--targets epochkraft,kafka`` measures
   Kafka's too (epochkraft/bench/acks.py).
14. warmup (only when named): ``--rounds`` back-to-back rounds of (a) at 1 KiB on one new cluster per
   target, a line per round: how long a target's throughput keeps rising after its start (Kafka's JIT).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.ports import free_port
from epochkraft.harness.procfs import cpu_seconds
from epochkraft.metrics.events import read_events
from epochkraft.peers.perf import delete_topic

PARTS = (
    "produce",
    "latency",
    "failover",
    "rejoin",
    "reassign",
    "controller",
    "scale",
    "bombs",
    "idle",
    "tls",
    "floods",
    "view",
    "request_floods",
    "txn",
    "acks",
)
FAST = """broker.heartbeat.interval.ms=500
replica.fetch.wait.max.ms=100
replica.lag.time.max.ms=5000
group.initial.rebalance.delay.ms=0
offsets.topic.num.partitions=3
"""


def _cluster(
    work: Path,
    brokers: int = 3,
    session_ms: int = 2000,
    extra: str = "",
    metrics_dir: Path | None = None,
    admin_ports: bool = False,
) -> LocalCluster:
    work.mkdir(parents=True, exist_ok=True)
    (work / "broker.properties").write_text(FAST + extra)
    (work / "controller.properties").write_text(f"broker.session.timeout.ms={session_ms}\n")
    cluster = LocalCluster(
        data_dir=work / "cluster",
        brokers=brokers,
        broker_config=work / "broker.properties",
        controller_config=work / "controller.properties",
        metrics_dir=metrics_dir,
        admin_ports=admin_ports,
    )
    cluster.start()
    return cluster


def _create(bootstrap: str, name: str, partitions: int, rf: int, min_isr: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf, config={"min.insync.replicas": str(min_isr)})])[
        name
    ].result(60)


# The producer settings of the throughput, latency and rejoin parts (batching on).
PRODUCER = {"linger.ms": 5, "batch.size": 1_000_000, "log_level": 0}
# Unmeasured produce on Kafka's cluster before its rounds: on this 2-core machine its (a) throughput kept
# rising for about four minutes of load (docs/benchmarks.md, "How long Kafka warms up").
KAFKA_WARM_UP_S = 240.0


def _produce_rate(conf: dict[str, Any], topic: str, size: int, seconds: float) -> dict[str, float]:
    """Produces for ``seconds`` as fast as librdkafka takes records; MB/s and records/s acknowledged.

    librdkafka's queue keeps its default bound of 100,000 records: raised to 1,000,000, a client waiting
    on acks=all buffered up to 1 GB, and writing into that much fresh memory doubled its kernel time per
    GB acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({**PRODUCER, **conf})
    payload = os.urandom(size)
    acked = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += 1

    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for _ in range(1000):
            try:
                producer.produce(topic, payload, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.monotonic() - start
    return {
        "records_per_s": round(acked[0] / elapsed),
        "mb_per_s": round(acked[0] * size / elapsed / 1e6, 2),
        "seconds": round(elapsed, 2),
    }


def _warm_page_cache(work: Path, gigabytes: float) -> float:
    """Writes and deletes a scratch file so the page cache the measurements write into is memory the
    machine has already handed out. On a VM a first touch of guest memory is far dearer than a reused page
    (about 8x the kernel time per MB written here), and RF 3 writes three times the bytes of RF 1. This
    only partly helps on a VM that hands freed memory back to its host: memory freed 20 s before costs
    about 5x memory freed just before (``scripts/bench_paths``). Returns the seconds it took."""
    start = time.monotonic()
    scratch = work / "page-cache-warm-up"
    chunk = bytes(64 * 1024 * 1024)
    with open(scratch, "wb") as f:
        for _ in range(int(gigabytes * 1024 / 64)):
            f.write(chunk)
    scratch.unlink()
    return round(time.monotonic() - start, 1)


def _median_round(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """The round with the median MB/s (the lower middle one of an even count), with every round's MB/s."""
    ordered = sorted(rounds, key=lambda r: r["mb_per_s"])
    return {
        **ordered[(len(ordered) - 1) // 2],
        "mb_per_s_rounds": [r["mb_per_s"] for r in rounds],
        "load_average_1m_rounds": [r["load_average_1m"] for r in rounds if "load_average_1m" in r],
    }


PRODUCE_TARGETS = ("epochkraft", "kafka")


@contextmanager
def _produce_cluster(work: Path, target: str, name: str = "produce") -> Iterator[tuple[str, list[int]]]:
    """Three brokers of ``target`` with the FAST broker settings (Kafka's names on both) and a 2 s session
    timeout, in ``work / name``: the bootstrap and the brokers' pids, whose CPU time is counted."""
    if target == "epochkraft":
        cluster = _cluster(work / name)
        try:
            yield cluster.bootstrap, [p.pid for p in cluster.nodes.values() if p.pid]
        finally:
            cluster.kill_all()
        return
    from epochkraft.peers.kafka import KafkaPeer

    broker_config: dict[str, object] = {
        key: value for key, value in (line.split("=", 1) for line in FAST.splitlines() if line)
    }
    # A deleted topic's files go within a second, as epochkraft's do, not a minute later (Kafka's
    # default): at Kafka's steady state the warm-up's and rounds' deleted topics would otherwise hold
    # tens of GB at once (three replicas of 12 s at 140 MB/s each), filling this machine's disk.
    broker_config["log.segment.delete.delay.ms"] = 1000
    peer = KafkaPeer(
        run_dir=work / f"{name}-kafka",
        brokers=3,
        heap_mb=1024,
        broker_config=broker_config,
        controller_config={"broker.session.timeout.ms": 2000},
    )
    peer.start(timeout=240)
    try:
        yield peer.bootstrap, [n.pid for n in peer.nodes.values() if n.pid]
    finally:
        peer.stop(timeout=30)


def produce_ratios(ours: dict[str, Any], kafka: dict[str, Any]) -> dict[str, dict[str, float]]:
    """epochkraft/Kafka for the cluster configurations (a) and (b) of each record size both measured:
    MB/s (above 1: epochkraft faster) and broker CPU seconds per GB (below 1: epochkraft cheaper)."""
    ratios: dict[str, dict[str, float]] = {}
    for size in ("1024B", "100B"):
        if size not in ours or size not in kafka:
            continue
        row = {}
        for config, short in (("a_rf3_acks_all", "a"), ("b_rf1_acks_1", "b")):
            mine, theirs = ours[size][config], kafka[size][config]
            row[f"{short}_mb_per_s"] = round(mine["mb_per_s"] / max(theirs["mb_per_s"], 1e-9), 2)
            row[f"{short}_broker_cpu_s_per_gb"] = round(
                mine["broker_cpu_s_per_gb"] / max(theirs["broker_cpu_s_per_gb"], 1e-9), 2
            )
        ratios[size] = row
    return ratios


def _loads(figure: dict[str, Any]) -> str:
    """The 1-minute load averages after each round of a figure, as "3.1/4.0/2.2"."""
    return "/".join(str(load) for load in figure.get("load_average_1m_rounds", [])) or "-"


def side_by_side(produce: dict[str, Any]) -> str:
    """epochkraft's and Kafka's produce figures for (a) and (b), one line each, with the ratios."""
    kafka, ratios = produce.get("kafka", {}), produce.get("epochkraft/kafka", {})
    lines = ["produce: epochkraft | Kafka | epochkraft/Kafka"]
    for size, row in ratios.items():
        for config, short in (("a_rf3_acks_all", "a"), ("b_rf1_acks_1", "b")):
            ours, theirs = produce[size][config], kafka[size][config]
            lines.append(
                f"  {size:<5} {config:<15} MB/s {ours['mb_per_s']:>7} | {theirs['mb_per_s']:>7} | "
                f"{row[f'{short}_mb_per_s']:<5}  broker CPU s/GB {ours['broker_cpu_s_per_gb']:>5} | "
                f"{theirs['broker_cpu_s_per_gb']:>5} | {row[f'{short}_broker_cpu_s_per_gb']}  "
                f"load {_loads(ours)} | {_loads(theirs)}"
            )
    return "\n".join(lines)


def part_produce_targets(
    work: Path,
    seconds: float,
    warm_gb: float,
    rounds: int,
    targets: list[str],
    kafka_warm_up_s: float = 0.0,
) -> dict[str, Any]:
    """The produce part against each target in turn, each cluster alone on the machine: epochkraft's
    figures where they always are, Kafka's under ``kafka``, and the ratios under ``epochkraft/kafka``."""
    warm = _warm_page_cache(work, warm_gb) if warm_gb else 0
    by_target = {
        t: part_produce(work, seconds, 0, rounds, target=t, kafka_warm_up_s=kafka_warm_up_s) for t in targets
    }
    results: dict[str, Any] = {**by_target.get("epochkraft", {}), "page_cache_warm_up_s": warm}
    if "kafka" in by_target:
        results["kafka"] = by_target["kafka"]
    if "kafka" in by_target and "epochkraft" in by_target:
        results["epochkraft/kafka"] = produce_ratios(by_target["epochkraft"], by_target["kafka"])
    return results


def part_produce(
    work: Path,
    seconds: float,
    warm_gb: float,
    rounds: int = 3,
    target: str = "epochkraft",
    kafka_warm_up_s: float = 0.0,
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "rounds": rounds,
        "page_cache_warm_up_s": _warm_page_cache(work, warm_gb) if warm_gb else 0,
    }
    with _produce_cluster(work, target) as (bootstrap, pids):
        port = free_port()
        null = subprocess.Popen(
            [sys.executable, "-m", "epochkraft.bench.null_broker", "--port", str(port), "--partitions", "6"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert "ready" in (null.stdout.readline() if null.stdout else "")

        def on_cluster(topic: str, rf: int, min_isr: int, acks: str, size: int) -> dict[str, float]:
            return _produce_on_topic(bootstrap, pids, topic, rf, min_isr, acks, size, seconds)

        configurations: dict[str, Callable[[int, int], dict[str, float]]] = {
            "a_rf3_acks_all": lambda size, n: on_cluster(f"rf3-{size}-{n}", 3, 2, "all", size),
            "b_rf1_acks_1": lambda size, n: on_cluster(f"rf1-{size}-{n}", 1, 1, "1", size),
            "c_null_broker": lambda size, n: _produce_rate(
                {"bootstrap.servers": f"127.0.0.1:{port}", "acks": "1"}, "bench", size, seconds
            ),
            "d_librdkafka_mock": lambda size, n: _produce_rate(
                {"test.mock.num.brokers": 3, "acks": "all"}, "mock", size, seconds
            ),
        }
        try:
            if target == "kafka":  # unmeasured runs first, for ``kafka_warm_up_s``: the JIT compiles
                warm_up: list[float] = []  # the hot paths (each run's MB/s kept, to see it level off)
                deadline = time.monotonic() + kafka_warm_up_s
                while not warm_up or time.monotonic() < deadline:
                    run = configurations["a_rf3_acks_all"](1024, rounds + len(warm_up))
                    warm_up.append(run["mb_per_s"])
                results["unmeasured_warm_up_mb_per_s"] = warm_up
            for size in (1024, 100):
                # Rounds of a, b, c, d in turn, so a slow spell of the VM does not fall on one
                # configuration only; each configuration reports its median round.
                runs: dict[str, list[dict[str, float]]] = {name: [] for name in configurations}
                for n in range(rounds):
                    for name, measure in configurations.items():
                        measured = measure(size, n)  # the machine's load beside each figure
                        runs[name].append({**measured, "load_average_1m": round(os.getloadavg()[0], 1)})
                row: dict[str, Any] = {name: _median_round(r) for name, r in runs.items()}
                a = row["a_rf3_acks_all"]["mb_per_s"]
                for other, key in (
                    ("b_rf1_acks_1", "a/b"),
                    ("c_null_broker", "a/c"),
                    ("d_librdkafka_mock", "a/d"),
                ):
                    row[key] = round(a / max(row[other]["mb_per_s"], 1e-9), 3)
                results[f"{size}B"] = row
        finally:
            null.kill()
    return results


def _produce_on_topic(
    bootstrap: str, pids: list[int], topic: str, rf: int, min_isr: int, acks: str, size: int, seconds: float
) -> dict[str, float]:
    """``_produce_rate`` on a new topic of six partitions, with the brokers' CPU seconds per GB."""
    # A topic of its own, deleted afterwards: its pages go back to the cache for the next one.
    # Dirty pages left by the previous configuration are written out first, so the kernel's
    # writeback of one configuration's data does not run during the next one's measurement.
    os.sync()
    _create(bootstrap, topic, 6, rf, min_isr)
    try:
        before = cpu_seconds(pids)
        result = _produce_rate({"bootstrap.servers": bootstrap, "acks": acks}, topic, size, seconds)
        # CPU the brokers spent per GB acknowledged: steadier than MB/s on a VM whose speed moves.
        gigabytes = result["mb_per_s"] * result["seconds"] / 1000
        cpu = cpu_seconds(pids) - before  # nothing acknowledged (a broker down): NaN, not a crash
        result["broker_cpu_s_per_gb"] = round(cpu / gigabytes, 2) if gigabytes else math.nan
        return result
    finally:
        delete_topic(bootstrap, topic)


def part_warmup(work: Path, seconds: float, rounds: int, targets: list[str]) -> dict[str, Any]:
    """How long each target's throughput keeps rising after its start (a JVM's JIT): ``rounds`` back-to-back
    rounds of the (a) load at 1 KiB on one new cluster per target, each on a topic of its own, with the
    brokers' CPU per GB and the load average; a line per round as it ends."""
    results: dict[str, Any] = {}
    for target in targets:
        rows: list[dict[str, float]] = []
        with _produce_cluster(work, target, "warmup") as (bootstrap, pids):
            started = time.monotonic()
            for n in range(rounds):
                run = _produce_on_topic(bootstrap, pids, f"warmup-{n}", 3, 2, "all", 1024, seconds)
                row = {
                    "round": n,
                    "since_start_s": round(time.monotonic() - started, 1),
                    "mb_per_s": run["mb_per_s"],
                    "broker_cpu_s_per_gb": run["broker_cpu_s_per_gb"],
                    "load_average_1m": round(os.getloadavg()[0], 1),
                }
                print(f"  {target} {json.dumps(row)}", flush=True)
                rows.append(row)
        results[target] = rows
    return results


def part_txn(work: Path, seconds: float, rounds: int, targets: list[str]) -> dict[str, Any]:
    """Transactional against idempotent records/s on each target in turn (epochkraft/bench/txn.py), each
    cluster alone on the machine; with both targets, epochkraft's ratio over Kafka's."""
    from epochkraft.bench.txn import PARTITIONS, measure_txn, side_by_side
    from epochkraft.peers.perf import create_topic

    figures = []
    for target in targets:
        with _produce_cluster(work, target, "txn") as (bootstrap, _pids):

            def create(topic: str, bootstrap: str = bootstrap) -> None:
                asyncio.run(create_topic(bootstrap, topic, PARTITIONS, 3, 2))

            figures.append(measure_txn(target, bootstrap, rounds, seconds, create))
    print(side_by_side(figures), flush=True)
    results: dict[str, Any] = {f.target: f.to_json() for f in figures}
    by = {f.target: f for f in figures}
    if "epochkraft" in by and "kafka" in by:
        results["epochkraft/kafka"] = round(by["epochkraft"].ratio / max(by["kafka"].ratio, 1e-9), 2)
    return results


def part_acks(work: Path, count: int, idle_partitions: int, targets: list[str]) -> dict[str, Any]:
    """acks=all latency of single small batches, one at a time, on each target in turn: alone, then with
    ``idle_partitions`` more partitions (RF 3) led across the brokers, as a transaction's cluster has its
    ``__transaction_state`` and ``__consumer_offsets`` partitions; with the brokers' CPU per batch."""
    from epochkraft.bench.acks import acks_all_latencies, summary
    from epochkraft.peers.perf import create_topic

    results: dict[str, Any] = {}
    for target in targets:
        with _produce_cluster(work, target, "acks") as (bootstrap, pids):
            asyncio.run(create_topic(bootstrap, "acks", 1, 3, 2))
            figures = {}
            for label, idle in (("alone", 0), (f"with_{idle_partitions}_idle_partitions", idle_partitions)):
                if idle:
                    asyncio.run(create_topic(bootstrap, "acks-idle", idle, 3, 2))
                cpu = cpu_seconds(pids)
                latencies = acks_all_latencies(bootstrap, "acks", count)
                cpu_ms = (cpu_seconds(pids) - cpu) * 1000 / count
                figures[label] = {**summary(latencies), "broker_cpu_ms_per_batch": round(cpu_ms, 2)}
            results[target] = figures
    return results


def _consume_latencies(
    bootstrap: str, topic: str, ready: Any, stop: Any, samples: list[tuple[float, float]]
) -> None:
    """Appends (send time, seconds to receipt) for each record. Records are taken up to 100 at a time: a
    call waits until its batch is full, so a large batch would add its own filling time (1,000 records:
    11 ms at 90,000/s)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "lat",
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 10,
            "log_level": 0,
        }
    )
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(0.1)
    ready.set()
    while not stop.is_set():
        messages = consumer.consume(num_messages=100, timeout=0.01)
        now = time.time()
        sent = (float(v[:20]) for m in messages if m.error() is None and (v := m.value()) is not None)
        samples += [(t, now - t) for t in sent]
    consumer.close()


def _latency_reader(bootstrap: str, topic: str, ready: Any, stop: Any, results: Any) -> None:
    """The latency consumer in a process of its own, so it never waits for the producer's GIL; sends
    back (send time, latency) pairs as one flat array of doubles."""
    samples: list[tuple[float, float]] = []
    _consume_latencies(bootstrap, topic, ready, stop, samples)
    results.send_bytes(array("d", (value for pair in samples for value in pair)).tobytes())


LATENCY_WARM_UP_S = 1.0


def part_latency(work: Path, seconds: float, max_rate: float) -> dict[str, Any]:
    """Produces at half of (a)'s maximum rate for ``seconds`` after a warm-up second at the same rate, whose
    records are not counted: they include the producer's and consumer's connection and metadata set-up
    (up to 150 ms), which is no steady-state latency."""
    from confluent_kafka import Producer

    os.sync()  # the produce part's data is written out before, not during, this measurement
    cluster = _cluster(work / "latency")
    try:
        _create(cluster.bootstrap, "lat", 3, 3, 2)
        rate = max(int(max_rate / 2), 100)
        processes = multiprocessing.get_context("spawn")  # no fork of a process running librdkafka threads
        ready, stop = processes.Event(), processes.Event()
        receiver, sender = processes.Pipe(duplex=False)
        reader = processes.Process(
            target=_latency_reader, args=(cluster.bootstrap, "lat", ready, stop, sender), daemon=True
        )
        reader.start()
        if not ready.wait(60):
            raise RuntimeError("the latency consumer got no partitions within 60 s")
        producer = Producer({**PRODUCER, "bootstrap.servers": cluster.bootstrap, "acks": "all"})
        start = time.monotonic()
        measured_from = time.time() + LATENCY_WARM_UP_S
        sent = 0
        while time.monotonic() - start < LATENCY_WARM_UP_S + seconds:
            target = int((time.monotonic() - start) * rate)
            while sent < target:
                try:
                    producer.produce("lat", f"{time.time():<20.6f}".encode() + b"x" * 1000)
                except BufferError:  # librdkafka's queue is full: the cluster is behind the rate
                    producer.poll(0.001)
                    continue
                sent += 1
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(30)
        time.sleep(1)
        stop.set()
        if not receiver.poll(60):
            raise RuntimeError("the latency consumer sent no samples within 60 s")
        flat = array("d")
        flat.frombytes(receiver.recv_bytes())
        reader.join(30)
        ordered = sorted(
            latency
            for sent_at, latency in zip(flat[::2], flat[1::2], strict=True)
            if sent_at >= measured_from
        )

        def pct(q: float) -> float:
            return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000, 2) if ordered else -1

        return {
            "rate_records_per_s": rate,
            "samples": len(ordered),
            "p50_ms": pct(0.5),
            "p99_ms": pct(0.99),
            "p999_ms": pct(0.999),
        }
    finally:
        cluster.kill_all()


FAILOVER_SESSION_MS = 2000
FAILOVER_FLOOR_S = FAILOVER_SESSION_MS / 1000 + 1.0  # session timeout + 1 s
FAILOVER_HEARTBEAT_S = 0.5  # broker.heartbeat.interval.ms in FAST
# librdkafka settings for finding the new leader quickly: short retry and reconnect backoffs, fast
# metadata refresh while a leader is unavailable. A leader that is down but not yet fenced is still the
# leader in Metadata, which ends librdkafka's fast leader query; it then looks again only on its 1 s
# "refresh unavailable topics" scan, and when that refresh drops the fenced broker, decommissioning it
# resets the partition to no leader until the next scan (librdkafka 2.16). A 100 ms periodic metadata
# refresh bounds both waits.
FAILOVER_PRODUCER = {
    "acks": "all",
    "linger.ms": 1,
    "log_level": 0,
    "message.timeout.ms": 30000,
    "retry.backoff.ms": 20,
    "retry.backoff.max.ms": 100,
    "reconnect.backoff.max.ms": 200,
    "topic.metadata.refresh.fast.interval.ms": 50,
    "topic.metadata.refresh.interval.ms": 100,
}


def _controller_evidence(metrics_dir: Path, broker: int, topic: str) -> tuple[float, float, int] | None:
    """(fenced at, new leader elected at, new leader) from the controller's event log, wall-clock seconds."""
    fenced = elected = None
    for event in read_events(metrics_dir, "controller-0"):
        if event["event"] == "broker_fenced" and event["broker"] == broker and fenced is None:
            fenced = event["ts_ms"] / 1000
        if (
            event["event"] == "leader_elected"
            and event["topic"] == topic
            and event["partition"] == 0
            and event["previous_leader"] == broker
            and event["leader"] >= 0
            and elected is None
        ):
            elected = (event["ts_ms"] / 1000, event["leader"])
    if fenced is None or elected is None:
        return None
    return fenced, elected[0], elected[1]


def _consume_all(bootstrap: str, topic: str) -> list[bytes]:
    """Every record of partition 0 up to its high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"failover-check-{time.time_ns()}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        position = 0
        deadline = time.monotonic() + 30
        while position < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                value, offset = msg.value(), msg.offset()
                assert value is not None and offset is not None  # no tombstones here; a record has an offset
                values.append(value)
                position = offset + 1
        return values
    finally:
        consumer.close()


def _failover_once(work: Path) -> dict[str, Any]:
    """One failover: SIGKILL the leader of an RF 3, min.insync.replicas 2 partition under acks=all load."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    metrics_dir = work / "metrics"
    cluster = _cluster(work, session_ms=FAILOVER_SESSION_MS, metrics_dir=metrics_dir)
    try:
        _create(cluster.bootstrap, "fo", 1, 3, 2)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        leader = admin.list_topics("fo", timeout=10).topics["fo"].partitions[0].leader
        producer = Producer({"bootstrap.servers": cluster.bootstrap, **FAILOVER_PRODUCER})
        produced_at: dict[bytes, float] = {}
        acked: set[bytes] = set()
        failed = [0]
        killed = float("inf")
        # The next acknowledged produce: the first ack of a record produced after the kill (only the new
        # leader can acknowledge it).
        next_ack: list[float] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                failed[0] += 1
                return
            acked.add(msg.value())
            if not next_ack and produced_at[msg.value()] > killed:
                next_ack.append(time.time())

        counter = 0

        def produce_for(seconds: float, stop_at_next_ack: bool = False) -> None:
            nonlocal counter
            end = time.monotonic() + seconds
            while time.monotonic() < end and not (stop_at_next_ack and next_ack):
                value = str(counter).encode()
                counter += 1
                produced_at[value] = time.time()
                producer.produce("fo", value, on_delivery=on_delivery)
                producer.poll(0.005)

        # Warm up (connections, metadata, followers in the ISR), then kill at a random point of the
        # leader's heartbeat cycle: how long before its session expires depends on it.
        produce_for(1.0 + random.uniform(0, FAILOVER_HEARTBEAT_S))
        killed = time.time()
        cluster.node(leader).kill()
        produce_for(20.0, stop_at_next_ack=True)
        produce_for(0.5)  # keep the new leader under load for a moment
        producer.flush(30)
        consumed = set(_consume_all(cluster.bootstrap, "fo"))
        lost = len(acked - consumed)
        evidence = None
        deadline = time.monotonic() + 3  # the event log is written off the loop, every 0.2 s
        while evidence is None and time.monotonic() < deadline:
            evidence = _controller_evidence(metrics_dir, leader, "fo")
            time.sleep(0.1)
        fenced_at, elected_at, new_leader = evidence if evidence else (None, None, -1)

        def since_kill(t: float | None) -> float | None:
            return round(t - killed, 3) if t is not None else None

        return {
            "killed_leader": leader,
            "new_leader": new_leader,
            "fenced_s": since_kill(fenced_at),
            "elected_s": since_kill(elected_at),
            "next_ack_s": since_kill(next_ack[0] if next_ack else None),
            "next_ack_after_elected_s": (
                round(next_ack[0] - elected_at, 3) if next_ack and elected_at is not None else None
            ),
            "produced": counter,
            "acknowledged": len(acked),
            "failed_deliveries": failed[0],
            "lost": lost,
        }
    finally:
        cluster.kill_all()


def part_failover(work: Path, runs: int) -> dict[str, Any]:
    """``runs`` failovers, each on a fresh cluster; each run's figures, then median and worst."""
    results: dict[str, Any] = {
        "session_timeout_ms": FAILOVER_SESSION_MS,
        "floor_next_ack_s": FAILOVER_FLOOR_S,
        "producer": {k: v for k, v in FAILOVER_PRODUCER.items() if k != "log_level"},
    }
    runs_out = [_failover_once(work / f"failover-{i + 1}") for i in range(runs)]
    for i, run in enumerate(runs_out, start=1):
        results[f"run{i}"] = run
    for key in ("fenced_s", "elected_s", "next_ack_s"):
        values = sorted(r[key] for r in runs_out if r[key] is not None)
        missing = len(runs_out) - len(values)
        results[key] = {
            "median": values[len(values) // 2] if values else None,
            "worst": None if missing or not values else values[-1],
        }
    results["lost_total"] = sum(r["lost"] for r in runs_out)
    results["floor_held"] = results["lost_total"] == 0 and all(
        r["next_ack_s"] is not None and r["next_ack_s"] <= FAILOVER_FLOOR_S for r in runs_out
    )
    return results


def part_rejoin(work: Path, megabytes: int) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    cluster = _cluster(work / "rejoin")
    try:
        _create(cluster.bootstrap, "rj", 1, 3, 2)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        md = admin.list_topics("rj", timeout=10).topics["rj"].partitions[0]
        follower = next(b for b in md.replicas if b != md.leader)
        cluster.node(follower).stop()
        producer = Producer({**PRODUCER, "bootstrap.servers": cluster.bootstrap, "acks": "all"})
        payload = b"z" * 1024
        for _ in range(megabytes * 1024):
            while True:
                try:
                    producer.produce("rj", payload)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush(120)
        start = time.monotonic()
        cluster.node(follower).start()
        running = time.monotonic() - start
        while time.monotonic() - start < 120:
            md = admin.list_topics("rj", timeout=5).topics["rj"].partitions[0]
            if follower in md.isrs:
                break
            time.sleep(0.05)
        return {
            "megabytes_behind": megabytes,
            "seconds_to_running": round(running, 2),
            "seconds_to_rejoin_isr": round(time.monotonic() - start, 2),
        }
    finally:
        cluster.kill_all()


def part_reassign(work: Path, megabytes: int) -> dict[str, Any]:
    """A partition of ``megabytes`` MB reassigned from 3 replicas to 4 (KIP-455): seconds from the
    AlterPartitionReassignments answer until the controller lists it no more (the new replica caught up
    and joined the ISR) and Metadata shows the 4 replicas in the ISR."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    cluster = _cluster(work / "reassign", brokers=4)
    try:
        _create(cluster.bootstrap, "ra", 1, 3, 2)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        replicas = list(admin.list_topics("ra", timeout=10).topics["ra"].partitions[0].replicas)
        spare = next(b for b in range(1, 5) if b not in replicas)
        producer = Producer({**PRODUCER, "bootstrap.servers": cluster.bootstrap, "acks": "all"})
        payload = b"z" * 1024
        for _ in range(megabytes * 1024):
            while True:
                try:
                    producer.produce("ra", payload)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush(120)
        client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
        try:
            start = time.monotonic()
            client.alter_partition_reassignments({TopicPartition("ra", 0): [*replicas, spare]})
            while client.list_partition_reassignments() and time.monotonic() - start < 300:
                time.sleep(0.05)
            completed = time.monotonic() - start
            while time.monotonic() - start < 300:
                md = admin.list_topics("ra", timeout=5).topics["ra"].partitions[0]
                if len(md.isrs) == 4:
                    break
                time.sleep(0.05)
            in_metadata = time.monotonic() - start
        finally:
            client.close()
        return {
            "megabytes": megabytes,
            "seconds_to_complete": round(completed, 2),
            "seconds_to_four_in_isr_in_metadata": round(in_metadata, 2),
            "megabytes_per_s": round(megabytes / completed, 1),
        }
    finally:
        cluster.kill_all()


def part_controller(work: Path) -> dict[str, Any]:
    from epochkraft.bench.controller_load import run as run_controller

    return asyncio.run(run_controller(work / "controller"))


def part_scale(work: Path, partitions: int, changes: int) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    from epochkraft.bench import metadata_changes

    cluster = _cluster(work / "scale", session_ms=9000, admin_ports=True)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        start = time.monotonic()
        admin.create_topics([NewTopic("scale", partitions, 3)], operation_timeout=120)["scale"].result(180)
        created = time.monotonic() - start
        settled = created + metadata_changes.wait_settled(cluster, partitions)
        config_changes = metadata_changes.config_changes(cluster, "scale", changes)
        one_partition_changes = metadata_changes.one_partition_changes(cluster, 10)

        def rss(pid: int | None) -> float:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS"):
                    return round(int(line.split()[1]) / 1024, 1)
            return -1.0

        memory = {"controller": rss(cluster.controller.pid if cluster.controller else None)}
        memory |= {f"broker-{n}": rss(p.pid) for n, p in cluster.nodes.items()}
        node = cluster.node(2)
        node.stop()
        start = time.monotonic()
        node.start(timeout=180)
        restarted = time.monotonic() - start
        controller = cluster.node("controller")
        controller.stop()
        controller.start(timeout=180)
        replay = [line for line in controller.log_text().splitlines() if "metadata log replayed" in line][-1]
        seconds = replay.split("seconds=")[1].split()[0]
        return {
            "partitions": partitions,
            "replication_factor": 3,
            "seconds_to_create": round(created, 2),
            "seconds_to_every_replica_on_its_broker": round(settled, 1),
            "topic_config_changes": config_changes,
            "one_partition_changes_to_every_broker": one_partition_changes,
            "seconds_restarted_broker_to_running": round(restarted, 2),
            "rss_mb": memory,
            "metadata_replay_seconds": float(seconds),
        }
    finally:
        cluster.kill_all()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="epochkraft bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each throughput measurement")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of the produce configurations (median reported)"
    )
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions for the scale part")
    parser.add_argument(
        "--scale-changes", type=int, default=30, help="topic config changes timed in the scale part"
    )
    parser.add_argument("--rejoin-mb", type=int, default=50)
    parser.add_argument("--reassign-mb", type=int, default=100, help="size of the reassigned partition")
    parser.add_argument(
        "--warm-page-cache-gb",
        type=float,
        default=8.0,
        help="write and delete this much scratch data before the produce part (0: skip); see _warm_page_cache",
    )
    parser.add_argument(
        "--kafka-warm-up-s",
        type=float,
        default=KAFKA_WARM_UP_S,
        help="unmeasured (a) runs on Kafka's cluster before its produce rounds, until its JIT has settled",
    )
    parser.add_argument("--failover-runs", type=int, default=3, help="failovers, each on a fresh cluster")
    parser.add_argument(
        "--max-rate",
        type=float,
        default=5000.0,
        help="records/s taken as (a)'s maximum when the latency part runs without the produce part",
    )
    parser.add_argument(
        "--targets",
        default="epochkraft",
        help="clusters the produce, floods and txn parts measure, in turn: epochkraft, kafka (Apache Kafka, "
        "scripts/peers' jars)",
    )
    parser.add_argument(
        "--flood-topics", type=int, default=2000, help="topics (RF 3) the floods part creates, 500 a request"
    )
    parser.add_argument("--flood-init-producer-ids", type=int, default=5000, help="InitProducerId requests")
    parser.add_argument(
        "--flood-producers", type=int, default=5000, help="producer ids writing one record each"
    )
    parser.add_argument(
        "--flood-keys", type=int, default=50_000, help="distinct keys written to a compacted topic"
    )
    parser.add_argument("--view-partitions", type=int, default=10_000, help="partitions for the view part")
    parser.add_argument(
        "--view-changes", type=float, default=100.0, help="metadata changes/s in the view part"
    )
    parser.add_argument("--view-browsers", type=int, default=3, help="browsers attached in the view part")
    parser.add_argument(
        "--acks-count", type=int, default=500, help="single acks=all batches timed in the acks part"
    )
    parser.add_argument(
        "--acks-idle-partitions",
        type=int,
        default=60,
        help="idle partitions added for the acks part's second run",
    )
    parser.add_argument("--json", default="bench-results.json")
    parser.add_argument("--work-dir")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not targets or set(targets) - set(PRODUCE_TARGETS):
        parser.error(f"--targets: any of {','.join(PRODUCE_TARGETS)}")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="epochkraft-bench-"))
    try:
        results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
        max_rate = args.max_rate
        for part in parts:
            started = time.monotonic()
            print(f"== {part} ...", flush=True)
            if part == "produce" and targets == ["epochkraft"]:
                results[part] = part_produce(work, args.seconds, args.warm_page_cache_gb, args.rounds)
                max_rate = results[part]["1024B"]["a_rf3_acks_all"]["records_per_s"]
            elif part == "produce":
                results[part] = part_produce_targets(
                    work, args.seconds, args.warm_page_cache_gb, args.rounds, targets, args.kafka_warm_up_s
                )
                if "1024B" in results[part]:
                    max_rate = results[part]["1024B"]["a_rf3_acks_all"]["records_per_s"]
            elif part == "latency":
                results[part] = part_latency(work, args.seconds, max_rate)
            elif part == "failover":
                results[part] = part_failover(work, args.failover_runs)
            elif part == "rejoin":
                results[part] = part_rejoin(work, args.rejoin_mb)
            elif part == "reassign":
                results[part] = part_reassign(work, args.reassign_mb)
            elif part == "controller":
                results[part] = part_controller(work)
            elif part == "scale":
                results[part] = part_scale(work, args.partitions, args.scale_changes)
            elif part == "bombs":
                from epochkraft.bench.hostile import part_bombs

                results[part] = part_bombs(work, args.seconds)
            elif part == "idle":
                from epochkraft.bench.hostile import part_idle

                results[part] = part_idle(work)
            elif part == "floods":
                from epochkraft.bench.floods import FloodSizes, part_floods

                sizes = FloodSizes(
                    topics=args.flood_topics,
                    producer_id_requests=args.flood_init_producer_ids,
                    producers=args.flood_producers,
                    keys=args.flood_keys,
                    list_offsets_s=args.seconds,
                )
                results[part] = part_floods(work / "floods", sizes, tuple(targets))
            elif part == "view":
                from epochkraft.bench.live_view import part_view

                results[part] = part_view(
                    work / "view",
                    FAST,
                    args.view_partitions,
                    args.view_changes,
                    args.seconds,
                    args.view_browsers,
                )
            elif part == "request_floods":
                from epochkraft.bench.floods import part_request_floods

                results[part] = part_request_floods(work / "request-floods", args.seconds)
            elif part == "txn":
                results[part] = part_txn(work, args.seconds, args.rounds, targets)
            elif part == "warmup":  # only when named: minutes per target
                results[part] = part_warmup(work, args.seconds, args.rounds, targets)
            elif part == "acks":
                results[part] = part_acks(work, args.acks_count, args.acks_idle_partitions, targets)
            elif part == "tls":
                from epochkraft.bench.tls import part_tls

                results[part] = part_tls(work, args.seconds, args.rounds, FAST)
            else:
                print(f"unknown part {part}", file=sys.stderr)
                return 2
            results[part]["bench_seconds"] = round(time.monotonic() - started, 1)
            print(json.dumps(results[part], indent=2), flush=True)
    finally:
        if not args.work_dir:  # a work directory of our own (GBs after the scale part) goes
            shutil.rmtree(work, ignore_errors=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    print("\n" + table(results))
    if "epochkraft/kafka" in results.get("produce", {}):
        print("\n" + side_by_side(results["produce"]))
    if "epochkraft/kafka" in results.get("floods", {}):
        from epochkraft.bench.floods import floods_side_by_side

        print("\nfloods: the other client's acks=all produces\n" + floods_side_by_side(results["floods"]))
    print(f"results: {args.json}")
    return 0


def _flatten(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [
            row
            for key, inner in value.items()
            for row in _flatten(f"{prefix}.{key}" if prefix else key, inner)
        ]
    return [(prefix, value)]


def table(results: dict[str, Any]) -> str:
    """Every figure of every part, one per line."""
    rows = [row for part in PARTS if part in results for row in _flatten(part, results[part])]
    width = max((len(name) for name, _ in rows), default=10)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
