"""Disk errors outside the produce path take the log dir offline as a failed write does (Kafka's
LogDirFailureChannel): a retention pass that cannot delete a segment, and a cleaner pass that cannot write
its cleaned segments. The broker, left with no online log dir, halts and its leaderships move. The errors
are real: a segment or a partition directory made immutable (``chattr +i``), which stops root as well."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from epochkraft.harness.kio_client import MiniClient
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import build_batch
from tests.test_broker_cluster import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FAST_LIFECYCLE = "log.retention.check.interval.ms=200\nlog.cleaner.backoff.ms=200\n"


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``path`` cannot be renamed, removed or (a directory) gain entries while this lasts, even for root."""
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make {path} immutable: {made.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


async def _fill_segments(client: MiniClient, topic: str, count: int, keyed: bool = False) -> None:
    now_ms = int(time.time() * 1000)  # not older than retention.ms: only the test's own retention deletes
    for i in range(count):
        key = f"key-{i % 3}".encode() if keyed else None
        batch = build_batch([(key, f"{i:04d}".encode() + bytes(300), (), now_ms + i)])
        error, _, message = await client.produce_batch(topic, 0, batch)
        assert error == ErrorCode.none, (error, message)


async def _halted_and_moved(cluster, client: MiniClient, topic: str, reason: str) -> None:
    """Broker 1 halts with the log dir offline for ``reason``, its leadership moves and produce goes on."""
    broker = cluster.node(1)

    async def halted():
        return not broker.alive

    try:
        await wait_for(halted, timeout=60)
    except AssertionError:
        raise AssertionError(f"broker 1 did not halt; its log ends:\n{broker.log_text()[-4000:]}") from None
    text = broker.log_text()
    assert "log dir offline" in text and reason in text, text[-3000:]
    assert "have failed" in text and "Traceback" not in text

    async def moved():
        state, _ = await client.partition_state(topic)
        return state.leader_id in (2, 3) and state

    try:
        await wait_for(moved, timeout=60)
    except AssertionError:
        state, _ = await client.partition_state(topic)
        raise AssertionError(f"leadership did not move from broker 1: {state}") from None
    error, _, _ = await client.produce_batch(topic, 0, build_batch([(b"key", b"after", (), 0)]))
    assert error == ErrorCode.none


async def test_retention_error_takes_the_log_dir_offline(make_cluster):
    """Retention cannot delete a segment (its file is immutable): as Kafka's UnifiedLog.deleteOldSegments
    under maybeHandleIOException, the log dir goes offline and the broker halts; before, the error was
    logged and retried forever while the broker went on leading with a log it could not trim."""
    cluster = make_cluster(3, broker_extra=FAST_LIFECYCLE)
    client = MiniClient(cluster.bootstrap)
    try:
        configs = {"segment.bytes": "1024", "min.insync.replicas": "2"}
        assert await client.create_topic("aging", configs=configs, assignment=[[1, 2, 3]]) == 0
        await _fill_segments(client, "aging", 12)
        directory = cluster.node(1).data_dir / "aging-0"
        oldest = sorted(directory.glob("*.log"))[0]
        with immutable(oldest):
            resource = ConfigResource(
                "topic",
                "aging",
                incremental_configs=[
                    ConfigEntry("retention.bytes", "1024", incremental_operation=AlterConfigOpType.SET)
                ],
            )
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            await asyncio.to_thread(admin.incremental_alter_configs([resource])[resource].result, 15)
            await _halted_and_moved(cluster, client, "aging", "error deleting old segments")
    finally:
        await client.close()
        cluster.kill_all()


async def test_cleaner_error_takes_the_log_dir_offline(make_cluster):
    """The cleaner cannot write its cleaned segments (the partition directory is immutable): as Kafka's
    LogCleaner.cleanLog on an IOException, the log dir goes offline and the broker halts; before, the
    error was logged and the log stayed uncompacted for good."""
    cluster = make_cluster(3, broker_extra=FAST_LIFECYCLE)
    client = MiniClient(cluster.bootstrap)
    try:
        configs = {
            "segment.bytes": "1024",
            "cleanup.policy": "compact",
            "delete.retention.ms": "0",  # every pass cleans again
            "min.insync.replicas": "2",
        }
        assert await client.create_topic("keyed", configs=configs, assignment=[[1, 2, 3]]) == 0
        await _fill_segments(client, "keyed", 12, keyed=True)
        with immutable(cluster.node(1).data_dir / "keyed-0"):
            await _halted_and_moved(cluster, client, "keyed", "error cleaning keyed-0")
    finally:
        await client.close()
        cluster.kill_all()
