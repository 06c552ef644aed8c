"""A Kafka Streams application (``scripts/clients/java/StreamsEosCheck.java``, kafka-streams from Maven
Central) against a 3-broker cluster, with a broker SIGKILLed mid-run, and whether its output is exact
(``scripts/streams_eos_check``).

Keyed input records (value ``<group>:<seq>``) go through selectKey(group) (a repartition topic) and
groupByKey().count() (a RocksDB store and its changelog) to an output topic of running counts. Read with
read_committed, the output must hold, for every group, the counts 1..n in order (one output per input, as
the store's cache is off), n being the group's number of input records: a duplicate (a batch written twice,
or a count replayed from a stale store) or a gap (a lost update) shows as a count out of sequence.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.peers.fetch import kafka_classpath

JAVA_APP = Path(__file__).resolve().parents[2] / "scripts" / "clients" / "java" / "StreamsEosCheck.java"
QUIET_LOG4J2 = """
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDERR
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
"""


def count_problems(output: Iterable[tuple[str, int]], expected: Mapping[str, int]) -> list[str]:
    """What is wrong with a count topic read in order: each key's counts must run 1, 2, ... expected[key]."""
    problems: list[str] = []
    last: dict[str, int] = {}
    for key, count in output:
        before = last.get(key, 0)
        if count != before + 1:
            kind = "duplicate" if count <= before else "gap"
            problems.append(f"{kind}: {key} counted {count} after {before}")
        last[key] = count
    for key in sorted(set(expected) | set(last)):
        if last.get(key, 0) != expected.get(key, 0):
            problems.append(f"final: {key} counted {last.get(key, 0)}, expected {expected.get(key, 0)}")
    return problems


async def _coordinated_ids(address: str, prefix: str) -> int:
    from kio.schema.list_transactions.v0.request import ListTransactionsRequest
    from kio.schema.list_transactions.v0.response import ListTransactionsResponse

    client = MiniClient(address)
    try:
        response = await client.any_send(ListTransactionsRequest(), ListTransactionsResponse)
    finally:
        await client.close()
    return sum(state.transactional_id.startswith(prefix) for state in response.transaction_states)


def app_coordinator(cluster: LocalCluster, app_id: str) -> int | None:
    """The broker coordinating most of the application's transactional ids (``<app id>-<process>-<thread>``
    under exactly_once_v2), by ListTransactions to each broker: killing it fails transactions over too."""
    counts = {
        node_id: asyncio.run(_coordinated_ids(f"127.0.0.1:{node.port}", app_id + "-"))
        for node_id, node in cluster.nodes.items()
    }
    best = max(counts, key=lambda node_id: counts[node_id])
    return best if counts[best] else None


COORDINATOR = 0  # kill_broker: the broker coordinating the application's transactions (else broker 2)


@dataclass
class StreamsRun:
    guarantee: str
    records: int
    app_code: int
    seconds: float
    killed_broker: int | None
    output_at_kill: int  # committed output records the application had seen when the broker was killed
    killed_coordinator: bool  # the killed broker coordinated the application's transactions
    app_killed: str  # ", the application SIGKILLed and restarted", or ""
    committed: int  # output records read read_committed
    uncommitted: int  # output records read read_uncommitted (aborted ones too)
    problems: list[str] = field(default_factory=list)
    app_log: str = ""

    def summary(self) -> str:
        fault = (
            f"no broker killed, {self.records} input records"
            if self.killed_broker is None
            else f"broker {self.killed_broker} "
            f"{'(its transaction coordinator) ' if self.killed_coordinator else ''}SIGKILLed at {self.output_at_kill} output records and restarted, {self.records} input records "
            f"(half of them produced while it was down)"
        )
        return (
            f"{self.guarantee}: app exit {self.app_code} in {self.seconds:.1f} s, {fault}"
            f"{self.app_killed}, output read_committed {self.committed} "
            f"read_uncommitted {self.uncommitted}, {len(self.problems)} problems"
            + "".join(f"\n  {p}" for p in self.problems[:20])
        )


def produce_input(bootstrap: str, topic: str, seqs: range, groups: int) -> Counter[str]:
    """Keyed records numbered ``seqs``, idempotent, spread over ``groups`` groups: their counts."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    expected: Counter[str] = Counter()
    for i in seqs:
        group = f"g{i % groups}"
        producer.produce(topic, key=f"k{i}".encode(), value=f"{group}:{i}".encode())
        expected[group] += 1
        producer.poll(0)
    assert producer.flush(60) == 0, "input records left unacknowledged"
    return expected


def read_output(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[tuple[str, int]]:
    """Every record of ``topic`` (key, count), partition by partition in offset order."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}-{isolation}",
         "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True}
    )  # fmt: skip
    out: list[tuple[str, int]] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error, partition, key, value = msg.error(), msg.partition(), msg.key(), msg.value()
            assert partition is not None
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                continue
            assert key is not None and value is not None
            at_end.discard(partition)
            out.append((key.decode(), struct.unpack(">q", value)[0]))
    finally:
        consumer.close()
    return out


def run(
    cluster: LocalCluster,
    work: Path,
    *,
    guarantee: str = "exactly_once_v2",
    records: int = 3000,
    partitions: int = 6,
    groups: int = 20,
    kill_broker: int | None = COORDINATOR,
    down_s: float = 3.0,
    deadline_s: int = 120,
    kill_app: bool = False,
) -> StreamsRun:
    """The application against ``cluster`` (a started LocalCluster), one broker (by default the one
    coordinating the application's transactions, never the controller, a process of its own) SIGKILLed once it has
    written some output and restarted ``down_s`` later (the second half of the input is produced meanwhile,
    so the application works through the failure); then the output read both ways and checked."""
    from epochkraft.peers.perf import create_topic

    bootstrap = cluster.bootstrap
    tag = guarantee.replace("_", "-")
    source, sink = f"eos-in-{tag}", f"eos-out-{tag}"
    for topic in (source, sink):
        asyncio.run(create_topic(bootstrap, topic, partitions, 3, 2))
    half = records // 2
    expected = produce_input(bootstrap, source, range(half), groups)
    log4j = work / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J2)
    per_group = records // groups
    app_id = f"eos-app-{tag}"
    command = [
        "java", "-Xmx384m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}",
        "-cp", kafka_classpath(), str(JAVA_APP), bootstrap, source, sink, app_id, guarantee,
        str(groups), str(per_group), str(deadline_s), str(work / f"state-{tag}"),
    ]  # fmt: skip
    started = time.monotonic()
    lines: list[str] = []
    some_output = threading.Event()
    output_seen = [0]

    def follow(app: subprocess.Popen[str]) -> None:
        assert app.stdout is not None
        for line in app.stdout:
            lines.append(line.rstrip())
            if line.startswith("OUTPUT "):
                output_seen.append(int(line.split()[1]))
                if output_seen[-1] >= records // 10:
                    some_output.set()

    def launch() -> tuple[subprocess.Popen[str], threading.Thread]:
        app = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reader = threading.Thread(target=follow, args=(app,), daemon=True)
        reader.start()
        return app, reader

    app, reader = launch()
    killed, output_at_kill, killed_at, coordinator = None, 0, 0.0, None
    try:
        give_up = time.monotonic() + deadline_s
        while not some_output.wait(0.5) and app.poll() is None and time.monotonic() < give_up:
            pass
        if kill_broker == COORDINATOR and some_output.is_set():
            coordinator = app_coordinator(cluster, app_id)
            kill_broker = coordinator or 2
        if kill_broker is not None and some_output.is_set():
            cluster.node(kill_broker).kill()
            killed_at = time.monotonic()
            killed, output_at_kill = kill_broker, output_seen[-1]
        expected += produce_input(bootstrap, source, range(half, records), groups)  # the app reads on
        if kill_app and some_output.is_set():  # it dies too, busy with those, and restarts on its state
            app.kill()
            app.wait(10)
            reader.join(5)
            lines.append("APPLICATION SIGKILLED AND RESTARTED")
            app, reader = launch()
        if killed is not None:
            time.sleep(max(0.0, down_s - (time.monotonic() - killed_at)))
            cluster.node(killed).launch()
            cluster.node(killed).wait_ready(60)
        code = app.wait(deadline_s + 30)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(10)
        reader.join(5)
    seconds = time.monotonic() - started
    committed = read_output(bootstrap, sink, "read_committed", partitions)
    uncommitted = read_output(bootstrap, sink, "read_uncommitted", partitions)
    return StreamsRun(
        guarantee=guarantee, records=records, app_code=code, seconds=seconds, killed_broker=killed,
        output_at_kill=output_at_kill, killed_coordinator=killed is not None and killed == coordinator,
        app_killed=", the application SIGKILLed and restarted" if kill_app else "",
        committed=len(committed), uncommitted=len(uncommitted),
        problems=count_problems(committed, expected), app_log="\n".join(lines[-60:]),
    )  # fmt: skip


@contextlib.contextmanager
def eos_cluster(prefix: str, keep_logs: Path | None = None) -> Iterator[tuple[LocalCluster, Path]]:
    """A started three-broker cluster with fast sessions in a temporary directory (and that directory, for
    the application's files), killed after: the exactly-once checks' cluster. ``keep_logs``: where the
    nodes' logs are copied once it is killed."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        config = work / "broker.properties"
        config.write_text("broker.heartbeat.interval.ms=200\nreplica.lag.time.max.ms=1500\n"
                          "group.initial.rebalance.delay.ms=0\noffsets.topic.num.partitions=3\n")  # fmt: skip
        controller = work / "controller.properties"
        controller.write_text("broker.session.timeout.ms=2000\n")
        cluster = LocalCluster(
            data_dir=work / "cluster", brokers=3, broker_config=config, controller_config=controller
        )
        cluster.start()
        try:
            yield cluster, work
        finally:
            cluster.kill_all()
            if keep_logs is not None:
                shutil.copytree(work / "cluster" / "logs", keep_logs, dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--guarantee", default="exactly_once_v2", choices=["exactly_once_v2", "at_least_once"]
    )
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--no-kill", action="store_true", help="no broker is killed")
    parser.add_argument(
        "--kill-app", action="store_true", help="the application's JVM is SIGKILLed and restarted too"
    )
    parser.add_argument(
        "--kill",
        type=int,
        default=COORDINATOR,
        help="the broker to kill (default: the transaction coordinator's)",
    )
    args = parser.parse_args(argv)
    failures = 0
    for _ in range(args.runs):
        with eos_cluster("streams-eos-") as (cluster, work):
            result = run(
                cluster, work, guarantee=args.guarantee, records=args.records,
                kill_broker=None if args.no_kill else args.kill, kill_app=args.kill_app,
            )  # fmt: skip
        print(result.summary(), flush=True)
        if result.app_code != 0:
            print(result.app_log)
        failures += bool(result.problems) or result.app_code != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
