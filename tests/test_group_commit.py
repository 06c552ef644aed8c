"""A single controller's metadata log made durable in groups (controller/group_commit.py): requests answered
only once what they wrote is on disk, one fsync for all the appends made while the previous one ran."""

from __future__ import annotations

import asyncio
import threading

from epochkraft.controller.group_commit import GroupCommit
from epochkraft.controller.metadata_log import MetadataLog
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ConfigRecord


class Disk:
    """fsyncs that finish when the test lets them, each noting how far the log had been written."""

    def __init__(self, log: MetadataLog) -> None:
        self.log = log
        self.synced: list[int] = []
        self.release = threading.Semaphore(0)  # one fsync finishes per release()

    def syncer(self):
        written = self.log.next_offset

        def sync() -> None:
            assert self.release.acquire(timeout=5)
            self.synced.append(written)

        return sync


def _append(log: MetadataLog) -> int:
    record = ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value="1000")
    return log.append([record], now_ms=0)


async def test_requests_are_answered_once_what_they_wrote_is_on_disk_one_fsync_per_group():
    log = MetadataLog()
    disk = Disk(log)
    commit = GroupCommit(log, disk.syncer)
    log.listeners.append(commit.on_append)

    async def write() -> str:
        _append(log)
        return "answer"

    def refuse(code: ErrorCode) -> str:
        return code.name

    first = asyncio.create_task(commit.write(write, refuse))
    await asyncio.sleep(0.05)
    assert not first.done()  # written, its fsync under way
    rest = [asyncio.create_task(commit.write(write, refuse)) for _ in range(20)]
    await asyncio.sleep(0.05)
    assert not any(t.done() for t in rest)
    disk.release.release()
    assert await first == "answer"
    assert not any(t.done() for t in rest)  # the second fsync, for the twenty made meanwhile, under way
    later = [asyncio.create_task(commit.write(write, refuse)) for _ in range(5)]
    await asyncio.sleep(0.05)
    disk.release.release()
    assert await asyncio.gather(*rest) == ["answer"] * 20  # answered at once, while the next fsync runs
    assert not any(t.done() for t in later)
    disk.release.release()
    assert await asyncio.gather(*later) == ["answer"] * 5
    assert disk.synced == [1, 21, 26]  # one fsync per group
    assert commit.synced_offset == log.next_offset == 26
    reading = asyncio.create_task(commit.write(lambda: asyncio.sleep(0, "read"), refuse))
    assert await reading == "read" and commit.syncs == 3  # nothing new written: no fsync waited for


def test_a_brokers_fetch_of_the_metadata_log_passes_the_single_controllers_gate():
    """Fetch is one of the requests any voter of a quorum answers itself, outside the quorum's write gate;
    a single controller's gate holds it too, so no broker is sent a record the controller's disk lacks."""
    from types import SimpleNamespace

    from epochkraft.server.socket_server import _Connection

    commit = GroupCommit(MetadataLog(), lambda: lambda: None)
    connection = SimpleNamespace(server=SimpleNamespace(node=SimpleNamespace(write_gate=lambda: commit)))
    for key in (1, 18, 44):  # Fetch, ApiVersions, IncrementalAlterConfigs
        assert _Connection._write_gate(connection, SimpleNamespace(key=key)) is commit
    quorum = SimpleNamespace(gates_reads=False)
    connection.server.node.write_gate = lambda: quorum
    assert _Connection._write_gate(connection, SimpleNamespace(key=1)) is None
    assert _Connection._write_gate(connection, SimpleNamespace(key=44)) is quorum
