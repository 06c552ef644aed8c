"""A Flink job with Flink's exactly-once Kafka sink (``scripts/clients/java/FlinkEosCheck.java``, Flink and
its Kafka connector from Maven Central, ``peers/flink/pom.xml``) against a 3-broker cluster, with a broker or the
job's own JVM killed mid-run, and whether its output is exact (``scripts/flink_eos_check``).

Keyed input records (value ``<seq>``) go through a map (value ``<seq>:out``) to an output topic written by a
KafkaSink with DeliveryGuarantee.EXACTLY_ONCE: a transactional producer per subtask, its transaction flushed
when a checkpoint is taken and committed when the checkpoint completes. Restored from a checkpoint, the sink
commits the transactions the checkpoint holds by resuming them (producer id and epoch set into the Java
producer by reflection, then EndTxn) and aborts the later ones it left (InitProducerId on each transactional
id it may have used). Read with read_committed, the output must hold every input's output exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from epochkraft.harness.cluster import LocalCluster
from epochkraft.peers.fetch import PeerUnavailable, cache_dir, flink_libs, kafka_version
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.peers.streams_eos import QUIET_LOG4J2, app_coordinator, eos_cluster

JAVA_JOB = Path(__file__).resolve().parents[2] / "scripts" / "clients" / "java" / "FlinkEosCheck.java"
COORDINATOR = 0  # kill_broker: the broker coordinating the sink's transactions (else broker 2)


def exactly_once_problems(outputs: Iterable[str], records: int) -> list[str]:
    """What is wrong with the output values read: each of ``0:out`` .. ``<records-1>:out`` exactly once."""
    counts = Counter(outputs)
    expected = {f"{i}:out" for i in range(records)}
    problems = [f"duplicate: {value} {n} times" for value, n in sorted(counts.items()) if n > 1]
    problems += [f"unexpected: {value}" for value in sorted(set(counts) - expected)]
    missing = sorted(expected - set(counts), key=lambda value: int(value.split(":")[0]))
    if missing:
        problems.append(f"missing: {len(missing)} outputs, first {missing[:5]}")
    return problems


@dataclass
class FlinkRun:
    records: int
    job_code: int
    seconds: float
    killed_broker: int | None
    killed_coordinator: bool
    output_at_kill: int  # distinct committed outputs the job had seen when the broker was killed
    job_killed: str  # ", the job's JVM SIGKILLed after checkpoint N and restored from it", or ""
    committed: int  # output records read read_committed
    uncommitted: int  # output records read read_uncommitted (aborted ones too)
    problems: list[str] = field(default_factory=list)
    job_log: str = ""  # the job's last 60 lines
    job_output: str = ""  # all of them (kept by --keep-logs)

    def summary(self) -> str:
        fault = (
            "no broker killed"
            if self.killed_broker is None
            else f"broker {self.killed_broker} "
            f"{'(its transaction coordinator) ' if self.killed_coordinator else ''}SIGKILLed at "
            f"{self.output_at_kill} outputs and restarted"
        )
        return (
            f"Flink EXACTLY_ONCE: job exit {self.job_code} in {self.seconds:.1f} s, {fault}{self.job_killed}, "
            f"{self.records} input records, output read_committed {self.committed} "
            f"read_uncommitted {self.uncommitted}, {len(self.problems)} problems; the producers retried "
            f"{self.producer_errors('OUT_OF_ORDER_SEQUENCE_NUMBER')} OUT_OF_ORDER_SEQUENCE_NUMBER and "
            f"{self.producer_errors('CONCURRENT_TRANSACTIONS')} CONCURRENT_TRANSACTIONS answers"
            + "".join(f"\n  {p}" for p in self.problems[:20])
        )

    def producer_errors(self, error: str) -> int:
        """How many Produce answers of ``error`` the job's producers logged (the Java Sender's warning)."""
        return self.job_output.count(f"Error: {error}")


def compiled_job() -> Path:
    """FlinkEosCheck.java compiled once per source (Flink deserializes the job's functions in its tasks with
    the class path's loader, which cannot see classes of Java's source-file mode)."""
    libs = flink_libs()
    digest = hashlib.sha256(JAVA_JOB.read_bytes()).hexdigest()[:12]
    classes = cache_dir() / f"flink-eos-check-{digest}"
    if (classes / "FlinkEosCheck.class").exists():
        return classes
    partial = classes.with_suffix(".part")
    partial.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["javac", "-cp", str(libs / "*"), "-d", str(partial), str(JAVA_JOB)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if result.returncode != 0:
        raise PeerUnavailable(f"javac could not compile {JAVA_JOB.name}: {result.stderr[-2000:]}")
    partial.rename(classes)
    return classes


def produce_input(bootstrap: str, topic: str, seqs: range) -> None:
    """Keyed records numbered ``seqs``, idempotent."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in seqs:
        producer.produce(topic, key=f"k{i}".encode(), value=str(i).encode())
        producer.poll(0)
    assert producer.flush(60) == 0, "input records left unacknowledged"


def read_values(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[str]:
    """Every record value of ``topic``, partition by partition in offset order."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}-{isolation}",
         "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True}
    )  # fmt: skip
    out: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error, partition, value = msg.error(), msg.partition(), msg.value()
            assert partition is not None
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                continue
            assert value is not None
            at_end.discard(partition)
            out.append(value.decode())
    finally:
        consumer.close()
    return out


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """The newest completed checkpoint (a ``chk-N`` directory holding its ``_metadata``) of any job."""
    done = [meta.parent for meta in checkpoints.glob("*/chk-*/_metadata")]
    return max(done, key=lambda chk: int(chk.name.split("-")[1]), default=None)


class JobProcess:
    """The job's JVM, its output followed on a thread (``OUTPUT n`` lines: distinct committed outputs)."""

    def __init__(self, command: list[str]) -> None:
        self.lines: list[str] = []
        self.output_seen = 0
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._follow, daemon=True)
        self.reader.start()

    def _follow(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip())
            if line.startswith("OUTPUT "):
                self.output_seen = int(line.split()[1])

    def wait_for_output(self, at_least: int, deadline: float) -> bool:
        while self.output_seen < at_least and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.output_seen >= at_least

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.reader.join(5)


def kill_and_restore(
    job: JobProcess, checkpoints: Path, launch: Callable[[Path | None], JobProcess]
) -> tuple[JobProcess, str]:
    """The job's JVM SIGKILLed once a checkpoint newer than any before completed (its transactions
    pre-committed, their commit perhaps not yet sent), then the job started again from that checkpoint."""
    before = latest_checkpoint(checkpoints)
    give_up = time.monotonic() + 30
    while latest_checkpoint(checkpoints) == before and time.monotonic() < give_up:
        time.sleep(0.05)
    job.kill()
    restore_from = latest_checkpoint(checkpoints)
    if restore_from is None:
        raise RuntimeError(f"no completed checkpoint under {checkpoints}: {job.lines[-20:]}")
    restarted = launch(restore_from)
    restarted.lines[:0] = [*job.lines, f"JOB SIGKILLED, RESTORED FROM {restore_from.name}"]
    return restarted, f", the job's JVM SIGKILLed after {restore_from.name} and restored from it"


def run(
    cluster: LocalCluster | KafkaPeer,
    work: Path,
    *,
    records: int = 2000,
    partitions: int = 3,
    parallelism: int = 2,
    kill_broker: int | None = COORDINATOR,
    kill_job: bool = False,
    down_s: float = 3.0,
    deadline_s: int = 120,
) -> FlinkRun:
    """The job against ``cluster`` (a started LocalCluster, or Kafka's brokers with no broker killed). Half the input is produced before it starts, the
    rest once it has committed a tenth of its output; then one broker (by default the one coordinating the
    sink's transactions; never the controller) is SIGKILLed and restarted ``down_s`` later, and with
    ``kill_job`` the job's JVM is SIGKILLed after its next completed checkpoint and started again from it.
    Then the output is read both ways and checked. ``$EPOCHKRAFT_FLINK_LOG4J``: a log4j2 configuration for
    the job's JVM instead of warnings only (the connector's and the producer's DEBUG lines tell a broker
    difference)."""
    from epochkraft.peers.perf import create_topic

    if kill_broker is not None and not isinstance(cluster, LocalCluster):
        raise ValueError("only an epochkraft cluster's broker is killed")
    bootstrap = cluster.bootstrap
    source, sink, prefix = "flink-in", "flink-out", "flink-eos"
    for topic in (source, sink):
        asyncio.run(create_topic(bootstrap, topic, partitions, 3, 2))
    half = records // 2
    produce_input(bootstrap, source, range(half))
    log4j = Path(os.environ.get("EPOCHKRAFT_FLINK_LOG4J", work / "log4j2.properties"))
    if not log4j.exists():
        log4j.write_text(QUIET_LOG4J2)
    checkpoints = work / "checkpoints"
    classpath = f"{compiled_job()}:{flink_libs() / '*'}"

    def launch(restore_from: Path | None = None) -> JobProcess:
        command = [
            "java", "-Xmx512m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}",
            "-cp", classpath, "FlinkEosCheck", bootstrap, source, sink, prefix, str(parallelism),
            str(records), str(deadline_s), str(checkpoints),
        ]  # fmt: skip
        return JobProcess(command + ([str(restore_from)] if restore_from else []))

    started = time.monotonic()
    job = launch()
    killed, output_at_kill, killed_at, coordinator, job_killed = None, 0, 0.0, None, ""
    try:
        some_output = job.wait_for_output(half // 5, time.monotonic() + deadline_s)
        if kill_broker == COORDINATOR and some_output:
            assert isinstance(cluster, LocalCluster)
            coordinator = app_coordinator(cluster, prefix)
            kill_broker = coordinator or 2
        if kill_broker is not None and some_output:
            assert isinstance(cluster, LocalCluster)
            cluster.node(kill_broker).kill()
            killed_at = time.monotonic()
            killed, output_at_kill = kill_broker, job.output_seen
        produce_input(bootstrap, source, range(half, records))  # the job reads on
        if kill_job and some_output:
            job, job_killed = kill_and_restore(job, checkpoints, launch)
        if killed is not None:
            assert isinstance(cluster, LocalCluster)
            time.sleep(max(0.0, down_s - (time.monotonic() - killed_at)))
            cluster.node(killed).launch()
            cluster.node(killed).wait_ready(60)
        code = job.process.wait(deadline_s + 30)
    finally:
        job.kill()
    seconds = time.monotonic() - started
    committed = read_values(bootstrap, sink, "read_committed", partitions)
    uncommitted = read_values(bootstrap, sink, "read_uncommitted", partitions)
    return FlinkRun(
        records=records, job_code=code, seconds=seconds, killed_broker=killed,
        killed_coordinator=killed is not None and killed == coordinator, output_at_kill=output_at_kill,
        job_killed=job_killed, committed=len(committed), uncommitted=len(uncommitted),
        problems=exactly_once_problems(committed, records), job_log="\n".join(job.lines[-60:]),
        job_output="\n".join(job.lines),
    )  # fmt: skip


@contextlib.contextmanager
def kafka_cluster(keep_logs: Path | None = None) -> Iterator[tuple[KafkaPeer, Path]]:
    """Kafka's own brokers (three and a controller, the peer's version) in a temporary directory, for the
    same job with no fault: what Kafka answers its producers; stopped after, their logs copied to
    ``keep_logs``."""
    with tempfile.TemporaryDirectory(prefix="flink-eos-kafka-") as tmp:
        work = Path(tmp)
        peer = KafkaPeer(run_dir=work / "kafka", brokers=3, heap_mb=384)
        peer.start()
        try:
            yield peer, work
        finally:
            peer.stop()
            if keep_logs is not None:
                keep_logs.mkdir(parents=True, exist_ok=True)
                for node in peer.all_nodes:
                    shutil.copy(work / "kafka" / node.name / "server.log", keep_logs / f"{node.name}.log")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--no-kill", action="store_true", help="no broker is killed")
    parser.add_argument(
        "--kill", type=int, default=COORDINATOR, help="the broker to kill (default: the sink's coordinator's)"
    )
    parser.add_argument(
        "--kill-job", action="store_true", help="the job's JVM is SIGKILLed after a checkpoint and restored"
    )
    parser.add_argument(
        "--keep-logs", type=Path, help="each run's broker and controller logs and job output go to DIR/run-N"
    )
    parser.add_argument(
        "--kafka", action="store_true", help=f"Kafka {kafka_version()}'s brokers instead (no broker killed)"
    )
    args = parser.parse_args(argv)
    failures = 0
    for n in range(args.runs):
        kept = args.keep_logs / f"run-{n}" if args.keep_logs else None
        brokers = kafka_cluster(kept) if args.kafka else eos_cluster("flink-eos-", kept)
        with brokers as (cluster, work):
            result = run(
                cluster, work, records=args.records,
                kill_broker=None if args.no_kill or args.kafka else args.kill, kill_job=args.kill_job,
            )  # fmt: skip
        if kept is not None:
            (kept / "job.log").write_text(result.job_output + "\n")
        print(result.summary(), flush=True)
        if result.job_code != 0 or result.problems:
            print(result.job_log)
        failures += bool(result.problems) or result.job_code != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
