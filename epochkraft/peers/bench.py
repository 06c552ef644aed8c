"""``scripts/bench_peers``: Kafka's ProducerPerformance (the tool behind Kafka's published figures) against
Apache Kafka, epochkraft and kfake on this machine, one after the other in one run, and the ratios.

Each cluster has three brokers on loopback and runs alone while it is measured (the others are stopped), so
they share the machine's cores with the tool only. Two configurations, 1 KiB records: (a) RF 3, acks=all,
min.insync.replicas 2 and (b) RF 1, acks=1. Each figure is the median of ``--rounds`` runs. Then, for Kafka
and epochkraft at the same ``--session-timeout-ms``, the failover time after SIGKILL of a partition leader
(``epochkraft.peers.failover``; kfake runs its brokers in one process, so it has no leader to kill alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from epochkraft.chaos.cluster import LocalCluster
from epochkraft.chaos.kio_client import MiniClient
from epochkraft.peers.failover import Brokers, epochkraft_brokers, kafka_brokers, measure_failover, report
from epochkraft.peers.fetch import PeerUnavailable, java_command, kafka_version
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.peers.kfake import KfakePeer
from epochkraft.protocol.errors import ErrorCode

RESULT = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


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


def producer_performance(
    bootstrap: str, topic: str, acks: str, records: int, log4j: Path
) -> tuple[float, ...]:
    command = java_command(
        "org.apache.kafka.tools.ProducerPerformance",
        [
            "--topic", topic, "--num-records", str(records), "--record-size", "1024", "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}", "linger.ms=5",
            "batch.size=65536",
        ],
        heap_mb=512,
        jvm=[f"-Dlog4j2.configurationFile={log4j}"],
    )  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    match = RESULT.search(result.stdout)
    if result.returncode != 0 or match is None:
        raise RuntimeError(f"ProducerPerformance failed ({result.returncode}):\n{result.stdout[-2000:]}")
    _, rps, mbs, _, _, p50, _, p99 = match.groups()
    return float(rps), float(mbs), float(p50), float(p99)


async def _create(bootstrap: str, topic: str, config: Config) -> None:
    error = ErrorCode.not_controller
    for address in bootstrap.split(","):  # kfake takes CreateTopics on its controller broker only
        creator = MiniClient(address)
        try:
            error = await creator.create_topic(
                topic, 1, config.replication_factor, {"min.insync.replicas": str(config.min_insync)}
            )
        finally:
            await creator.close()
        if error != ErrorCode.not_controller:
            break
    if error not in (ErrorCode.none, ErrorCode.topic_already_exists):
        raise RuntimeError(f"creating {topic} on {bootstrap}: {error!r}")
    client = MiniClient(bootstrap)
    try:
        for _ in range(300):  # every replica in the ISR before the clock starts
            response = await client.metadata(topic)
            partitions = response.topics[0].partitions if response.topics else ()
            if partitions and len(partitions[0].isr_nodes) == config.replication_factor:
                return
            await asyncio.sleep(0.1)
    finally:
        await client.close()


def measure(target: str, bootstrap: str, records: int, rounds: int, log4j: Path) -> list[Figure]:
    figures = []
    for config in CONFIGS:
        runs = []
        for round_ in range(rounds):
            topic = f"perf-rf{config.replication_factor}-{round_}"
            asyncio.run(_create(bootstrap, topic, config))
            runs.append(producer_performance(bootstrap, topic, config.acks, records, log4j))
            print(f"  {target:<11} {config.name:<30} round {round_ + 1}: {runs[-1][1]:.1f} MB/s", flush=True)
        median = sorted(runs, key=lambda r: r[1])[len(runs) // 2]
        figures.append(
            Figure(target, config.name, median[0], median[1], median[2], median[3], [r[1] for r in runs])
        )
    return figures


@contextmanager
def kafka_cluster(root: Path, session_timeout_ms: int) -> Iterator[tuple[str, Brokers | None]]:
    peer = KafkaPeer(
        run_dir=root / "kafka",
        brokers=3,
        heap_mb=1024,
        controller_config={"broker.session.timeout.ms": session_timeout_ms},
    )
    peer.start(timeout=240)
    try:
        yield peer.bootstrap, kafka_brokers(peer)
    finally:
        peer.stop(timeout=30)


@contextmanager
def epochkraft_cluster(root: Path, session_timeout_ms: int) -> Iterator[tuple[str, Brokers | None]]:
    cluster = LocalCluster(data_dir=root / "epochkraft", brokers=3, session_timeout_ms=session_timeout_ms)
    cluster.start()
    try:
        yield cluster.bootstrap, epochkraft_brokers(cluster)
    finally:
        cluster.stop()
        cluster.kill_all()


@contextmanager
def kfake_cluster(root: Path, session_timeout_ms: int) -> Iterator[tuple[str, Brokers | None]]:
    peer = KfakePeer(run_dir=root / "kfake", brokers=3)  # one process: no leader to kill alone
    peer.start()
    try:
        yield peer.bootstrap, None
    finally:
        peer.stop()


TARGETS: dict[str, Callable[[Path, int], object]] = {
    "kafka": kafka_cluster,
    "epochkraft": epochkraft_cluster,
    "kfake": kfake_cluster,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_peers", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000, help="records per ProducerPerformance run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--targets", default="kafka,epochkraft,kfake")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--failover-rounds", type=int, default=3, help="SIGKILL-the-leader rounds per cluster (0: none)"
    )
    parser.add_argument(
        "--session-timeout-ms", type=int, default=9000, help="broker.session.timeout.ms, both clusters"
    )
    parser.add_argument("--skip-produce", action="store_true", help="only the failover rounds")
    args = parser.parse_args(argv)
    figures: list[Figure] = []
    failover: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        root = Path(tmp)
        log4j = root / "log4j2.properties"
        log4j.write_text("status = warn\nrootLogger.level = off\n")
        if not args.skip_produce:
            print(
                f"ProducerPerformance (Apache Kafka {kafka_version()}), {args.records} records of 1 KiB per run"
            )
        for target in args.targets.split(","):
            try:
                with TARGETS[target](root, args.session_timeout_ms) as (bootstrap, brokers):  # type: ignore[attr-defined]
                    if not args.skip_produce:
                        figures += measure(target, bootstrap, args.records, args.rounds, log4j)
                    if brokers is not None and args.failover_rounds > 0:
                        failover[target] = measure_failover(target, brokers, args.failover_rounds)
            except PeerUnavailable as exc:
                print(f"  {target}: unavailable ({exc})")
    if figures:
        print()
        print(
            f"{'target':<11} {'configuration':<30} {'MB/s':>8} {'records/s':>10} {'p50 ms':>7} {'p99 ms':>7}"
        )
    for f in figures:
        print(
            f"{f.target:<11} {f.config:<30} {f.mb_per_s:>8.1f} {f.records_per_s:>10.0f} "
            f"{f.p50_ms:>7.0f} {f.p99_ms:>7.0f}"
        )
    by = {(f.target, f.config): f for f in figures}
    if figures:
        print()
    for config in CONFIGS:
        kafka = by.get(("kafka", config.name))
        for target in ("epochkraft", "kfake"):
            other = by.get((target, config.name))
            if kafka and other:
                print(f"ratio {target}/kafka, {config.name}: {other.mb_per_s / kafka.mb_per_s:.2f}")
    report(failover, args.session_timeout_ms)
    if args.json:
        args.json.write_text(
            json.dumps({"produce": [asdict(f) for f in figures], "failover": failover}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
