"""Kafka's ProducerPerformance (``org.apache.kafka.tools.ProducerPerformance``, the tool behind Kafka's
published figures) run from the peers' jars and its summary line read, and topic creation that works on
all three clusters of ``scripts/bench_peers`` (Apache Kafka, epochkraft, kfake)."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from epochkraft.harness.kio_client import MiniClient
from epochkraft.peers.fetch import java_command
from epochkraft.protocol.errors import ErrorCode

# The final summary; the interim lines printed every 5 s have no percentiles, so they never match.
RESULT = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


@dataclass(frozen=True)
class PerfResult:
    """ProducerPerformance's summary: its latencies are from ``send()`` to the acknowledgement."""

    records: int
    records_per_s: float
    mb_per_s: float
    avg_ms: float
    max_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float


def parse_producer_performance(stdout: str) -> PerfResult | None:
    match = RESULT.search(stdout)
    if match is None:
        return None
    records, *rest = match.groups()
    return PerfResult(int(records), *(float(v) for v in rest))


def producer_performance(
    bootstrap: str, topic: str, acks: str, records: int, log4j: Path, throughput: int = -1
) -> PerfResult:
    """One run of 1 KiB records; ``throughput`` records/s is the offered load (-1: as fast as it can)."""
    command = java_command(
        "org.apache.kafka.tools.ProducerPerformance",
        [
            "--topic", topic, "--num-records", str(records), "--record-size", "1024",
            "--throughput", str(throughput),
            "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}", "linger.ms=5",
            "batch.size=65536",
        ],
        heap_mb=512,
        jvm=[f"-Dlog4j2.configurationFile={log4j}"],
    )  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    parsed = parse_producer_performance(result.stdout)
    if result.returncode != 0 or parsed is None:
        raise RuntimeError(f"ProducerPerformance failed ({result.returncode}):\n{result.stdout[-2000:]}")
    return parsed


@contextmanager
def scratch_topic(bootstrap: str, topic: str) -> Iterator[str]:
    """``topic``, deleted when the block ends however it ends; a failed delete is printed, not raised,
    so that it never costs the measurement made in the block."""
    try:
        yield topic
    finally:
        try:
            delete_topic(bootstrap, topic)
        except Exception as exc:  # confluent-kafka's KafkaException, a timeout: the bench goes on
            print(f"  could not delete {topic}: {exc}", flush=True)


def delete_topic(bootstrap: str, topic: str) -> None:
    """Deletes the topic and returns once the controller has answered."""
    from confluent_kafka.admin import AdminClient

    # kept alive until the answer arrives; its informational lines (a purged queue at close) left out
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.delete_topics([topic])[topic].result(60)


async def create_topic(
    bootstrap: str, topic: str, partitions: int, replication_factor: int, min_insync: int
) -> None:
    """Creates the topic and returns once every partition has its full ISR, so no clock starts while
    replicas are still joining."""
    error = ErrorCode.not_controller
    for address in bootstrap.split(","):  # kfake takes CreateTopics on its controller broker only
        creator = MiniClient(address)
        try:
            error = await creator.create_topic(
                topic, partitions, replication_factor, {"min.insync.replicas": str(min_insync)}
            )
        finally:
            await creator.close()
        if error != ErrorCode.not_controller:
            break
    if error not in (ErrorCode.none, ErrorCode.topic_already_exists):
        raise RuntimeError(f"creating {topic} on {bootstrap}: {error!r}")
    client = MiniClient(bootstrap)
    try:
        for _ in range(600):
            response = await client.metadata(topic)
            found = response.topics[0].partitions if response.topics else ()
            if len(found) == partitions and all(len(p.isr_nodes) == replication_factor for p in found):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{topic}: no full ISR on every partition after 60 s")
    finally:
        await client.close()
