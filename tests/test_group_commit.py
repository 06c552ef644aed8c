"""A single controller's metadata log made durable in groups (controller/group_commit.py): requests answered
only once what they wrote is on disk, one fsync for all the appends made while the previous one ran."""

from __future__ import annotations

import asyncio
import datetime
import errno
import os
import threading
from types import SimpleNamespace

import pytest
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
from kio.static.primitive import i8

from epochkraft.controller.group_commit import GroupCommit, GroupCommitFailed
from epochkraft.controller.metadata_log import MetadataLog
from epochkraft.metadata.snapshot import SnapshotId
from epochkraft.protocol.api import CONTROLLER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import encode_entity, encode_request
from epochkraft.protocol.metadata_records import ConfigRecord
from epochkraft.server.socket_server import KafkaServer, _Connection
from tests.test_request_turns import StandInTransport, _with_handler, receive, turns


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


async def test_a_brokers_pipelined_forwarded_requests_are_decided_in_turn_and_share_fsyncs():
    """A broker forwards many clients' IncrementalAlterConfigs on its one connection, pipelined. Each is
    decided in turn (a handler starts once the one before it has appended), but none waits for the one before
    it to reach the disk: the five decided while the first fsync runs share the next, and the answers go out
    in request order, each once what it wrote is on disk. (One at a time to the disk, five writes took five
    fsyncs in a row and the controller's answers to one broker ran at one per fsync.)"""
    log = MetadataLog()
    disk = Disk(log)
    commit = GroupCommit(log, disk.syncer)
    log.listeners.append(commit.on_append)
    server = KafkaServer(CONTROLLER, SimpleNamespace(write_gate=lambda: commit), "127.0.0.1", 0)  # type: ignore[arg-type]
    decided: list[int] = []  # correlation ids whose handler ran, in order

    async def handle(_request: object, ctx: SimpleNamespace) -> IncrementalAlterConfigsResponse:
        decided.append(ctx.header.correlation_id)
        _append(log)
        return IncrementalAlterConfigsResponse(throttle_time=datetime.timedelta(0), responses=())

    server.apis[44] = _with_handler(server.apis[44], handle)
    connection, transport = _Connection(server), StandInTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    change = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(2),
                resource_name="orders",
                configs=(AlterableConfig(name="retention.ms", config_operation=i8(0), value="1000"),),
            ),
        ),
        validate_only=False,
    )
    receive(connection, *(encode_request(44, 1, i, "broker-1", encode_entity(change)) for i in range(1, 7)))
    await turns(20)
    assert decided == [1, 2, 3, 4, 5, 6], "every request decided while the first fsync runs"
    assert transport.correlation_ids() == []
    disk.release.release()
    await asyncio.sleep(0.05)
    assert transport.correlation_ids() == [1]  # the first fsync covered the first write only
    disk.release.release()
    await asyncio.sleep(0.05)
    assert transport.correlation_ids() == [1, 2, 3, 4, 5, 6]
    assert disk.synced == [1, 6]


class FailingDisk:
    """fsyncs that fail with EIO from the ``fail_from``-th on, each attempt counted."""

    def __init__(self, fail_from: int = 0) -> None:
        self.fail_from = fail_from
        self.attempts = 0

    def syncer(self):
        def sync() -> None:
            self.attempts += 1
            if self.attempts > self.fail_from:
                raise OSError(errno.EIO, "Input/output error")

        return sync


async def test_a_failed_fsync_is_fatal_and_no_fsync_follows_it():
    """As KafkaRaftClientDriver hands a failed poll to the fatal fault handler: after a failed fsync the kernel
    may have dropped the dirty pages, so a later fsync that succeeds would let synced_offset pass records that
    are lost. The waiters are refused, the daemon is told once, later appends and waits are refused, and no
    fsync runs again."""
    log = MetadataLog()
    disk = FailingDisk(fail_from=1)
    commit = GroupCommit(log, disk.syncer)
    log.listeners.append(commit.on_append)
    told: list[BaseException] = []
    commit.on_failure.append(told.append)

    async def write() -> str:
        _append(log)
        return "answer"

    assert await commit.write(write, lambda code: code.name) == "answer"  # the first fsync succeeds
    with pytest.raises(GroupCommitFailed):
        await commit.write(write, lambda code: code.name)
    assert [type(e) for e in told] == [OSError] and commit.failure is told[0]
    assert commit.synced_offset == 1 < log.next_offset == 2
    with pytest.raises(GroupCommitFailed):
        _append(log)  # refused by the listener: nothing appended is ever called durable again
    with pytest.raises(GroupCommitFailed):
        await commit.durable(1)
    await asyncio.sleep(0.05)
    assert disk.attempts == 2 and commit.synced_offset == 1 and commit.snapshot_point() is None
    await commit.close()
    assert len(told) == 1


async def test_a_snapshot_point_at_the_logs_end_even_with_records_not_on_disk():
    """The image is copied at the log's end whatever is still being synced (a steady stream of writes may
    never leave a moment with nothing unsynced); the snapshotter writes the file only once ``durable``
    covers it (tests/test_metadata_snapshot.py), as KafkaMetadataLog.createNewSnapshot refuses an id past
    the high watermark."""
    log = MetadataLog()
    disk = Disk(log)
    commit = GroupCommit(log, disk.syncer)
    log.listeners.append(commit.on_append)
    assert commit.snapshot_point() == SnapshotId(0, 0)
    _append(log)
    await asyncio.sleep(0)
    assert commit.snapshot_point() == SnapshotId(1, 0) and commit.synced_offset == 0
    disk.release.release()
    await commit.durable(1)
    assert commit.snapshot_point() == SnapshotId(1, 0)


def _batches(count: int) -> bytes:
    log = MetadataLog()
    written: list[bytes] = []
    log.listeners.append(lambda _base, data: written.append(data))
    for _ in range(count):
        _append(log)
    return b"".join(written)


def test_a_log_tail_found_at_start_is_fsynced_before_it_is_served(tmp_path, monkeypatch):
    """A tail written but never fsynced (the process killed before the fsync) counts as durable once served:
    the file is fsynced when it is opened for appends, and after a torn tail is cut (else the cut could be
    undone by a crash, under later appends)."""
    from epochkraft.server import controller_daemon
    from epochkraft.server.controller_daemon import MetadataLogFile

    synced: list[int] = []
    monkeypatch.setattr(controller_daemon.os, "fsync", lambda fd: synced.append(os.fstat(fd).st_size))
    log_file = MetadataLogFile(tmp_path)
    whole = _batches(2)
    log_file.path.write_bytes(whole + whole[:30])  # a torn third batch
    data, cut = log_file.read_valid()
    assert (data, cut) == (whole, 30) and synced == [len(whole)]
    log_file.open()
    assert synced == [len(whole)] * 2
    log_file.close()


def test_a_closed_log_file_cannot_be_synced_unless_fsync_is_off(tmp_path):
    """A log file closed (a trim whose rewrite failed) has nothing that can be made durable: its syncer
    raises, which the group commit makes fatal, rather than an fsync that does nothing."""
    from epochkraft.server.controller_daemon import MetadataLogFile

    log_file = MetadataLogFile(tmp_path)
    with pytest.raises(OSError):
        log_file.syncer()
    log_file.fsync = False
    log_file.syncer()()


def test_a_closed_log_file_takes_no_append(tmp_path):
    """An append to a log file closed (a trim whose rewrite failed) is refused as the file not being open."""
    from epochkraft.server.controller_daemon import MetadataLogFile

    log_file = MetadataLogFile(tmp_path)
    with pytest.raises(OSError, match="is not open"):
        log_file.append(0, b"batch")


async def test_a_failed_trim_is_fatal_and_the_old_file_is_held_open_again(tmp_path, monkeypatch):
    """ENOSPC (or EIO) while the log file is rewritten below a snapshot: the group commit fails (the daemon
    stops), and the old file is open again rather than left closed."""
    import structlog

    from epochkraft.server import controller_daemon
    from epochkraft.server.controller_daemon import MetadataLogFile, trim_log_file

    log_file = MetadataLogFile(tmp_path)
    log_file.open()
    log = MetadataLog()
    log.listeners.append(log_file.append)
    commit = GroupCommit(log, log_file.syncer)
    log.listeners.append(commit.on_append)
    for _ in range(3):
        _append(log)
    await commit.durable(log.next_offset)

    def no_space(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(controller_daemon, "rewrite_segment", no_space)
    with pytest.raises(OSError):
        trim_log_file(log, log_file, commit, structlog.get_logger())(SnapshotId(2, 0))
    assert isinstance(commit.failure, OSError) and commit.failure.errno == errno.ENOSPC
    assert log_file.path.read_bytes() == _batches(3)  # the old file, whole
    log_file.syncer()()  # open again
    log_file.close(sync=False)


@pytest.mark.net
@pytest.mark.timeout(30)
def test_a_single_controller_whose_fsync_fails_stops_with_the_internal_error_code(tmp_path, monkeypatch):
    """The daemon itself: its bootstrap records' fsync fails on the worker thread (EIO), and it stops at once,
    non-zero, as Kafka's controller halts on a fatal fault."""
    import threading

    from epochkraft.server import controller_daemon

    real_fsync = os.fsync

    def eio_off_the_event_loop(fd: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(controller_daemon.os, "fsync", eio_off_the_event_loop)
    argv = ["--node-id", "1", "--listen", "127.0.0.1:0", "--cluster-id", "c", "--data-dir", str(tmp_path)]
    assert controller_daemon.main(argv) == controller_daemon.EXIT_INTERNAL_ERROR
