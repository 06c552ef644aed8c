"""A single controller's metadata log made durable in groups, as Kafka's Raft leader does: it appends each
batch to the log at once, flushes once for everything appended since the last flush, and only then moves
the high watermark that answers wait for and brokers read up to (KafkaRaftClient.flushLeaderLog).

Appends are written to the file as they are made; an fsync runs on a worker thread, one for all the appends
made while the previous one ran, so the event loop serves other requests meanwhile and a hundred writes a
second cost a few fsyncs, not a hundred in a row. A request is answered once every record appended before
its answer is on disk: the records it wrote, and for a broker's Fetch of the metadata log the records it
read, so no broker applies a record a crash of the controller's machine could take back.

A failed fsync is fatal, as KafkaRaftClientDriver hands any error of the Raft client to the fatal fault
handler: after a failed fsync the kernel may have dropped the dirty pages, so a later fsync that succeeds
proves nothing about the records before it. The GroupCommit is marked failed (no fsync ever again, every
waiter and every later append refused) and ``on_failure`` stops the daemon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from epochkraft.controller.metadata_log import MetadataLog
from epochkraft.metadata.snapshot import SnapshotId
from epochkraft.protocol.errors import ErrorCode

log = structlog.get_logger()

T = TypeVar("T")

# An fsync of what was written so far, made on the event loop and run on a worker thread.
Syncer = Callable[[], Callable[[], None]]


class GroupCommitFailed(RuntimeError):
    """The metadata log can no longer be made durable (an fsync or a rewrite of the file failed)."""


class GroupCommit:
    """The write gate of a single controller with a data directory (a quorum's is its QuorumDriver)."""

    gates_reads = True  # Fetch and the other requests any voter of a quorum answers wait too

    def __init__(self, log: MetadataLog, syncer: Syncer) -> None:
        self.log = log
        self.syncer = syncer
        self.synced_offset = log.next_offset  # every record below it is on disk
        self.syncs = 0
        self._syncing: asyncio.Task[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # (offset, released once synced past it)
        self.failure: BaseException | None = None  # set once: nothing is made durable from then on
        self.on_failure: list[Callable[[BaseException], None]] = []  # the daemon's: log, stop, exit non-zero

    def on_append(self, _base_offset: int, _data: bytes) -> None:
        """A metadata log listener, after the file's: starts an fsync unless one runs (the running one
        starts another for what it does not cover)."""
        self._refuse_if_failed()
        if self._syncing is None:
            self._syncing = asyncio.get_running_loop().create_task(self._sync_all(), name="group-commit")

    def snapshot_point(self) -> SnapshotId | None:
        """The id of a snapshot of the image taken now (None once an fsync failed). Its file must be written
        only once ``durable(end_offset)`` returns (as KafkaMetadataLog.createNewSnapshot refuses one past
        the high watermark): a snapshot must never hold what a crash could take back from the log it is
        loaded with. The image is copied now rather than at a moment with nothing unsynced, which a
        steady stream of writes may never leave."""
        if self.failure is not None:
            return None
        return SnapshotId(self.log.next_offset, 0)

    async def _sync_all(self) -> None:
        try:
            while self.synced_offset < self.log.next_offset and self.failure is None:
                covered = self.log.next_offset
                await asyncio.to_thread(self.syncer())
                self.syncs += 1
                self.synced_offset = covered
                self._release()  # each round's waiters now, not when the appends stop coming
        except asyncio.CancelledError:
            self._fail(GroupCommitFailed("an fsync of the metadata log was cancelled"))
            raise
        except BaseException as exc:  # the task is nobody's to await: the failure is reported, not raised
            self.fail(exc)
        finally:
            self._syncing = None

    def fail(self, exc: BaseException) -> None:
        """Marks the log failed (an fsync, or a rewrite of the file, raised ``exc``): every waiter and every
        later append is refused, no fsync runs again, and ``on_failure`` is told once."""
        if self.failure is not None:
            return
        self.failure = exc
        self._fail(GroupCommitFailed(f"the metadata log could not be made durable: {exc!r}"))
        for callback in self.on_failure:
            callback(exc)

    def _refuse_if_failed(self) -> None:
        if self.failure is not None:
            raise GroupCommitFailed("the metadata log could not be made durable") from self.failure

    def _release(self) -> None:
        waiting = []
        for offset, waiter in self._waiters:
            if offset <= self.synced_offset:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                waiting.append((offset, waiter))
        self._waiters = waiting

    def _fail(self, exc: BaseException) -> None:
        for _, waiter in self._waiters:
            if waiter.done():
                continue
            if isinstance(exc, Exception):
                waiter.set_exception(exc)
            else:
                waiter.cancel()
        self._waiters = []

    async def durable(self, offset: int) -> None:
        """Returns once every record below ``offset`` is on disk."""
        self._refuse_if_failed()
        if self.synced_offset >= offset:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, waiter))
        if self._syncing is None:  # appended outside the loop's listeners: start one now
            self.on_append(0, b"")
        await waiter

    async def write(
        self,
        call: Callable[[], Awaitable[T]],
        _refuse: Callable[[ErrorCode], T],
        decided: Callable[[], None] = lambda: None,
    ) -> T:
        """Runs ``call`` (a request's handler) and answers once what was appended before it returned is on
        disk (the server's write gate, as QuorumDriver.write). ``decided`` is called in between: the
        request has made its records, and the next request of its connection may be decided while these
        wait for the disk, so a broker's forwarded requests share fsyncs instead of taking one each."""
        answer = await call()
        try:
            decided()
        except Exception:  # the records are appended and will be durable: the answer must still be given
            log.exception("releasing the connection's next request failed")
        await self.durable(self.log.next_offset)
        return answer

    async def close(self) -> None:
        """Waits for the fsyncs under way."""
        if self._syncing is not None:
            await asyncio.shield(self._syncing)
