"""``scripts/bench_peers``: Kafka's ProducerPerformance (the tool behind Kafka's published figures) against
Apache Kafka, epochkraft and kfake on this machine, one after the other in one run, and the ratios.

Each cluster has three brokers on loopback and runs alone while it is measured (the others are stopped), so
they share the machine's cores with the tool only. Two configurations, 1 KiB records: (a) RF 3, acks=all,
min.insync.replicas 2 and (b) RF 1, acks=1. Each figure is the median of ``--rounds`` runs. The parts
(``--parts``, all by default), each reporting its figures and their ratios to Kafka's:

- produce: ProducerPerformance as fast as it goes, (a) and (b);
- e2e: end-to-end latency at one offered load (``--e2e-rate``) the same for all three
  (``epochkraft.peers.latency``);
- e2e-curve: end-to-end latency against offered load: each target's (a) maximum (measured, or
  ``--e2e-max``), then ``--e2e-fractions`` of it, p99 plotted against load with ``--plot``
  (``epochkraft.peers.latency_curve``);
- failover: Kafka and epochkraft at the same ``--session-timeout-ms``, the time after SIGKILL of a
  partition leader until a new one is named (``epochkraft.peers.failover``);
- rejoin: Kafka and epochkraft, a broker SIGKILLed under light load, fenced, and started again: the time
  until it is unfenced and back in every ISR (``epochkraft.peers.rejoin``);
- groupjoin: Kafka and epochkraft, one more confluent-kafka consumer joining a stable group of 10, classic
  against consumer protocol: the time until every partition is owned once again (``epochkraft.peers.groupjoin``);
- txn: confluent-kafka's transactional producer (transactions of 100 records of 1 KiB) against its
  idempotent producer at the same settings (RF 3, acks=all, min.insync.replicas 2): the ratio
  transactional/idempotent of records/s on each cluster (``epochkraft.bench.txn``);
- consume: a topic of 6 partitions, RF 1, filled with ``--consume-mb`` MB of 1 KiB records and held in the
  page cache, read from offset 0 as fast as it goes by librdkafka and by Kafka's ConsumerPerformance (MB/s,
  the brokers' CPU per GB served), and caught-up readers while a producer writes at a fixed rate (broker
  CPU per GB delivered, end-to-end delay) (``epochkraft.peers.consume``).
- scale (only when named in ``--parts``): Kafka and epochkraft, each on a fresh cluster,
  ``--scale-partitions`` partitions at RF 3: creation, every replica hosted, each daemon's RSS, metadata
  propagation, a controlled shutdown and the restarted broker's return (``epochkraft.peers.scale``).

kfake runs its brokers in one process, so it has no broker to kill alone: it takes no part in failover,
rejoin and scale.

Kafka's JIT compiles its hot paths over minutes of load: a fresh cluster serves about 40% of its steady
throughput at about three times its steady CPU per GB in its first minute (docs/benchmarks.md, "How long
Kafka warms up"). Before its parts, Kafka's cluster is given ``--kafka-warm-up-s`` of unmeasured (a) runs
(each into a topic of its own, deleted after it). The machine's load average is printed as each cluster
comes up, with each warm-up run, produce round and e2e run (the consume and scale parts print their own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from epochkraft.bench.txn import PARTITIONS as TXN_PARTITIONS
from epochkraft.bench.txn import TxnFigure, measure_txn, side_by_side
from epochkraft.harness.cluster import LocalCluster
from epochkraft.peers.consume import (
    BrokerPids,
    ConsumeFigures,
    ConsumeSettings,
    measure_consume,
    report_consume,
)
from epochkraft.peers.failover import Brokers, epochkraft_brokers, kafka_brokers, measure_failover, report
from epochkraft.peers.fetch import PeerUnavailable, kafka_version
from epochkraft.peers.groupjoin import measure_group_join, report_group_join
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.peers.kfake import KfakePeer
from epochkraft.peers.latency import LatencyFigure, measure_e2e, report_e2e
from epochkraft.peers.latency_curve import (
    DEFAULT_FRACTIONS,
    CurvePoint,
    CurveSettings,
    measure_curve,
    parse_fractions,
    report_curve,
    write_plot,
)
from epochkraft.peers.perf import create_topic, producer_performance, scratch_topic
from epochkraft.peers.rejoin import RejoinRound, measure_rejoin, report_rejoin
from epochkraft.peers.scale import SCALE_TARGETS, TOPIC_PARTITIONS, ScaleFigure, measure_scale, report_scale


@dataclass(frozen=True)
class Config:
    name: str
    replication_factor: int
    acks: str
    min_insync: int


CONFIGS = (Config("a: RF 3 acks=all min.insync 2", 3, "all", 2), Config("b: RF 1 acks=1", 1, "1", 1))


@dataclass
class Figure:
    target: str
    config: str
    records_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    rounds: list[float]


def measure(target: str, bootstrap: str, records: int, rounds: int, log4j: Path) -> list[Figure]:
    figures = []
    for config in CONFIGS:
        runs = []
        for round_ in range(rounds):
            topic = f"perf-rf{config.replication_factor}-{round_}"
            asyncio.run(create_topic(bootstrap, topic, 1, config.replication_factor, config.min_insync))
            runs.append(producer_performance(bootstrap, topic, config.acks, records, log4j))
            print(
                f"  {target:<11} {config.name:<30} round {round_ + 1}: {runs[-1].mb_per_s:.1f} MB/s, "
                f"{load_average()}",
                flush=True,
            )
        median = sorted(runs, key=lambda r: r.mb_per_s)[len(runs) // 2]
        figures.append(
            Figure(
                target,
                config.name,
                median.records_per_s,
                median.mb_per_s,
                median.p50_ms,
                median.p99_ms,
                [r.mb_per_s for r in runs],
            )
        )
    return figures


# What a part gets of a running cluster: its bootstrap, its brokers to kill (None: kfake's one process) and
# the pids of its broker processes now (a restarted broker has a new one), whose CPU the parts measure.
Running = tuple[str, Brokers | None, BrokerPids]


@contextmanager
def kafka_cluster(root: Path, session_timeout_ms: int) -> Iterator[Running]:
    peer = KafkaPeer(
        run_dir=root / "kafka",
        brokers=3,
        heap_mb=1024,
        # A deleted topic's files go within a second, as epochkraft's do, not a minute later (Kafka's
        # default): the warm-up's deleted topics would otherwise fill this machine's disk.
        broker_config={"log.segment.delete.delay.ms": 1000},
        controller_config={"broker.session.timeout.ms": session_timeout_ms},
    )
    peer.start(timeout=240)
    try:
        yield peer.bootstrap, kafka_brokers(peer), lambda: [n.pid for n in peer.nodes.values() if n.pid]
    finally:
        peer.stop(timeout=30)


@contextmanager
def epochkraft_cluster(root: Path, session_timeout_ms: int) -> Iterator[Running]:
    cluster = LocalCluster(data_dir=root / "epochkraft", brokers=3, session_timeout_ms=session_timeout_ms)
    cluster.start()
    try:
        yield (
            cluster.bootstrap,
            epochkraft_brokers(cluster),
            lambda: [p.pid for p in cluster.nodes.values() if p.pid],
        )
    finally:
        cluster.stop()
        cluster.kill_all()


@contextmanager
def kfake_cluster(root: Path, session_timeout_ms: int) -> Iterator[Running]:
    peer = KfakePeer(run_dir=root / "kfake", brokers=3)  # one process: no leader to kill alone
    peer.start()
    try:
        yield peer.bootstrap, None, lambda: [peer.pid] if peer.pid else []
    finally:
        peer.stop()


TARGETS: dict[str, Callable[[Path, int], AbstractContextManager[Running]]] = {
    "kafka": kafka_cluster,
    "epochkraft": epochkraft_cluster,
    "kfake": kfake_cluster,
}


PARTS = ("produce", "e2e", "e2e-curve", "failover", "rejoin", "groupjoin", "txn", "consume")
ON_REQUEST = ("scale",)  # minutes per target: run only when named


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages, for the line of each part."""
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def warm_up_kafka(bootstrap: str, seconds: float, records: int, log4j: Path) -> list[dict[str, float]]:
    """Unmeasured ProducerPerformance runs of configuration (a) for ``seconds`` (none for 0), each into a
    new topic deleted after it; each run's end (s from the start) and MB/s, to see where Kafka's throughput
    levelled off."""
    runs: list[dict[str, float]] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        with scratch_topic(bootstrap, f"warm-up-{len(runs)}") as topic:
            asyncio.run(create_topic(bootstrap, topic, 1, 3, 2))
            mb_per_s = producer_performance(bootstrap, topic, "all", records, log4j).mb_per_s
        at_s = round(time.monotonic() - start, 1)
        runs.append({"at_s": at_s, "mb_per_s": mb_per_s})
        print(
            f"  kafka       warm-up run {len(runs)} (ended {at_s:.0f} s in): {mb_per_s:.1f} MB/s, "
            f"{load_average()}",
            flush=True,
        )
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench_peers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default=",".join(PARTS), help=f"any of {','.join(PARTS + ON_REQUEST)}")
    parser.add_argument("--records", type=int, default=50_000, help="records per ProducerPerformance run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--targets", default="kafka,epochkraft,kfake")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--e2e-rate", type=int, default=2000, help="offered load, records/s of 1 KiB")
    parser.add_argument("--e2e-seconds", type=float, default=10.0, help="measured seconds at that load")
    parser.add_argument("--e2e-warm-up", type=float, default=5.0, help="seconds produced, not measured")
    parser.add_argument(
        "--e2e-fractions",
        default=",".join(f"{f:g}" for f in DEFAULT_FRACTIONS),
        help="e2e-curve: loads as fractions of each target's (a) maximum",
    )
    parser.add_argument("--e2e-max", type=float, help="e2e-curve: the (a) maximum in records/s, not measured")
    parser.add_argument(
        "--e2e-max-records", type=int, default=100_000, help="e2e-curve: records of the maximum's run"
    )
    parser.add_argument(
        "--e2e-curve-seconds", type=float, default=6.0, help="e2e-curve: measured seconds per load"
    )
    parser.add_argument(
        "--e2e-runs", type=int, default=1, help="e2e-curve: runs per load (the median p99's run reported)"
    )
    parser.add_argument("--plot", type=Path, help="e2e-curve: write the p99 against load plot here (PNG)")
    parser.add_argument(
        "--failover-rounds", type=int, default=2, help="SIGKILL-the-leader rounds per cluster (0: none)"
    )
    parser.add_argument(
        "--session-timeout-ms", type=int, default=9000, help="broker.session.timeout.ms, both clusters"
    )
    parser.add_argument("--rejoin-rounds", type=int, default=2, help="restarted-broker rounds per cluster")
    parser.add_argument("--rejoin-partitions", type=int, default=6)
    parser.add_argument("--rejoin-rate", type=int, default=200, help="records/s of 1 KiB during a round")
    parser.add_argument("--groupjoin-rounds", type=int, default=2, help="rounds per protocol and cluster")
    parser.add_argument("--groupjoin-members", type=int, default=10, help="members of the stable group")
    parser.add_argument("--groupjoin-partitions", type=int, default=30)
    parser.add_argument("--txn-seconds", type=float, default=8.0, help="seconds of each txn part round")
    parser.add_argument(
        "--consume-mb", type=int, default=300, help="MB of 1 KiB records the consume part reads"
    )
    parser.add_argument("--consume-live-readers", type=int, default=2, help="caught-up consumers")
    parser.add_argument("--consume-live-rate", type=int, default=5000, help="records/s of 1 KiB, caught up")
    parser.add_argument(
        "--consume-live-seconds", type=float, default=10.0, help="seconds produced, caught up"
    )
    parser.add_argument("--scale-partitions", type=int, default=10_000, help="partitions of the scale part")
    parser.add_argument(
        "--scale-changes", type=int, default=5, help="metadata changes timed to every broker (median)"
    )
    parser.add_argument(
        "--scale-topic-partitions",
        type=int,
        default=TOPIC_PARTITIONS,
        help="partitions per topic of the scale part",
    )
    parser.add_argument("--skip-produce", action="store_true", help="leave the produce part out")
    parser.add_argument(
        "--kafka-warm-up-s",
        type=float,
        default=240.0,
        help="unmeasured (a) runs on Kafka's cluster before its parts, seconds (0: none)",
    )
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p and not (args.skip_produce and p == "produce")]
    if unknown := set(parts) - set(PARTS) - set(ON_REQUEST):
        parser.error(f"unknown parts {sorted(unknown)}")
    try:
        curve_settings = CurveSettings(
            parse_fractions(args.e2e_fractions),
            args.e2e_max,
            args.e2e_max_records,
            args.e2e_curve_seconds,
            args.e2e_warm_up,
            args.e2e_runs,
        )
    except ValueError as exc:
        parser.error(str(exc))
    figures: list[Figure] = []
    latency: list[LatencyFigure] = []
    curve: list[CurvePoint] = []
    failover: dict[str, list[float]] = {}
    rejoin: dict[str, list[RejoinRound]] = {}
    group_join: dict[str, dict[str, list[float]]] = {}
    txn: list[TxnFigure] = []
    consume: list[ConsumeFigures] = []
    settings = ConsumeSettings(
        args.consume_mb,
        args.rounds,
        args.consume_live_readers,
        args.consume_live_rate,
        args.consume_live_seconds,
    )
    scale: list[ScaleFigure] = []
    kafka_warm_up: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        root = Path(tmp)
        log4j = root / "log4j2.properties"
        log4j.write_text("status = warn\nrootLogger.level = off\n")
        print(f"Apache Kafka {kafka_version()}'s ProducerPerformance; parts {','.join(parts)}")
        for target in args.targets.split(","):
            if "scale" in parts and target in SCALE_TARGETS:
                with SCALE_TARGETS[target](root / "scale") as daemons:
                    scale.append(
                        measure_scale(
                            target,
                            daemons,
                            args.scale_partitions,
                            args.scale_changes,
                            per_topic=args.scale_topic_partitions,
                        )
                    )
            elif "scale" in parts:
                print(f"  {target}: no scale part (see epochkraft.peers.scale)")
            if not set(parts) - set(ON_REQUEST):
                continue
            try:
                with TARGETS[target](root, args.session_timeout_ms) as (bootstrap, brokers, pids):
                    print(f"  {target:<11} cluster up, {load_average()}", flush=True)
                    if target == "kafka":
                        kafka_warm_up = warm_up_kafka(bootstrap, args.kafka_warm_up_s, args.records, log4j)
                    if "produce" in parts:
                        figures += measure(target, bootstrap, args.records, args.rounds, log4j)
                    if "e2e" in parts:
                        latency.append(
                            measure_e2e(
                                target, bootstrap, args.e2e_rate, args.e2e_seconds, args.e2e_warm_up, log4j
                            )
                        )
                    if "e2e-curve" in parts:
                        curve += measure_curve(target, bootstrap, curve_settings, log4j)
                    if brokers is None and {"failover", "rejoin"} & set(parts):
                        print(f"  {target}: brokers in one process, no failover or rejoin rounds")
                    if brokers is not None and "failover" in parts and args.failover_rounds > 0:
                        failover[target] = measure_failover(target, brokers, args.failover_rounds)
                    if brokers is not None and "rejoin" in parts and args.rejoin_rounds > 0:
                        rejoin[target] = measure_rejoin(
                            target, brokers, args.rejoin_rounds, args.rejoin_partitions, args.rejoin_rate
                        )
                    if target != "kfake" and "groupjoin" in parts and args.groupjoin_rounds > 0:
                        group_join[target] = measure_group_join(
                            target,
                            bootstrap,
                            args.groupjoin_rounds,
                            args.groupjoin_members,
                            args.groupjoin_partitions,
                        )
                    if "txn" in parts:
                        txn.append(
                            measure_txn(target, bootstrap, args.rounds, args.txn_seconds, _creator(bootstrap))
                        )
                    if "consume" in parts:
                        consume.append(
                            measure_consume(target, bootstrap, root / target, pids, settings, log4j)
                        )
            except PeerUnavailable as exc:
                print(f"  {target}: unavailable ({exc})")
    report_produce(figures, args.records)
    report_e2e(latency, args.e2e_warm_up)
    report_curve(curve, args.e2e_warm_up)
    if args.plot and curve:
        write_plot(curve, args.plot)
        print(f"plot: {args.plot}")
    report(failover, args.session_timeout_ms)
    report_rejoin(rejoin, args.rejoin_partitions, args.rejoin_rate)
    report_group_join(group_join, args.groupjoin_members, args.groupjoin_partitions)
    if txn:
        print("\n" + side_by_side(txn))
    report_consume(consume)
    report_scale(scale)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "produce": [asdict(f) for f in figures],
                    "e2e": [asdict(f) for f in latency],
                    "e2e-curve": [asdict(p) for p in curve],
                    "failover": failover,
                    "rejoin": {t: [asdict(r) for r in rounds] for t, rounds in rejoin.items()},
                    "groupjoin": group_join,
                    "txn": [f.to_json() for f in txn],
                    "consume": [asdict(f) for f in consume],
                    "scale": [asdict(f) for f in scale],
                    "kafka_unmeasured_warm_up": kafka_warm_up,
                },
                indent=2,
            )
        )
    return 0


def _creator(bootstrap: str) -> Callable[[str], None]:
    """Topics of the txn part: 6 partitions, RF 3, min.insync.replicas 2, on any of the clusters."""

    def create(topic: str) -> None:
        asyncio.run(create_topic(bootstrap, topic, TXN_PARTITIONS, 3, 2))

    return create


def report_produce(figures: list[Figure], records: int) -> None:
    if not figures:
        return
    print(f"\nProducerPerformance, {records} records of 1 KiB per run, median of the rounds:")
    print(f"{'target':<11} {'configuration':<30} {'MB/s':>8} {'records/s':>10} {'p50 ms':>7} {'p99 ms':>7}")
    for f in figures:
        print(
            f"{f.target:<11} {f.config:<30} {f.mb_per_s:>8.1f} {f.records_per_s:>10.0f} "
            f"{f.p50_ms:>7.0f} {f.p99_ms:>7.0f}"
        )
    by = {(f.target, f.config): f for f in figures}
    for config in CONFIGS:
        kafka = by.get(("kafka", config.name))
        for target in ("epochkraft", "kfake"):
            other = by.get((target, config.name))
            if kafka and other:
                print(f"ratio {target}/kafka, {config.name}: {other.mb_per_s / kafka.mb_per_s:.2f}")


if __name__ == "__main__":
    sys.exit(main())
