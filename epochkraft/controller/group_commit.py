"""A single controller's metadata log made durable in groups, as Kafka's Raft leader does: it appends each
batch to the log at once, flushes once for everything appended since the last flush, and only then moves
the high watermark that answers wait for and brokers read up to (KafkaRaftClient.flushLeaderLog).

Appends are written to the file as they are made; an fsync runs on a worker thread, one for all the appends
made while the previous one ran, so the event loop serves other requests meanwhile and a hundred writes a
second cost a few fsyncs, not a hundred in a row. A request is answered once every record appended before
its answer is on disk: the records it wrote, and for a broker's Fetch of the metadata log the records it
read, so no broker applies a record a crash of the controller's machine could take back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from epochkraft.controller.metadata_log import MetadataLog
from epochkraft.protocol.errors import ErrorCode

T = TypeVar("T")

# An fsync of what was written so far, made on the event loop and run on a worker thread.
Syncer = Callable[[], Callable[[], None]]


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

    def on_append(self, _base_offset: int, _data: bytes) -> None:
        """A metadata log listener, after the file's: starts an fsync unless one runs (the running one
        starts another for what it does not cover)."""
        if self._syncing is None:
            self._syncing = asyncio.get_running_loop().create_task(self._sync_all(), name="group-commit")

    async def _sync_all(self) -> None:
        try:
            while self.synced_offset < self.log.next_offset:
                covered = self.log.next_offset
                await asyncio.to_thread(self.syncer())
                self.syncs += 1
                self.synced_offset = covered
                self._release()  # each round's waiters now, not when the appends stop coming
        except BaseException as exc:
            self._fail(exc)
            raise
        finally:
            self._syncing = None

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
        if self.synced_offset >= offset:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, waiter))
        if self._syncing is None:  # appended outside the loop's listeners: start one now
            self.on_append(0, b"")
        await waiter

    async def write(self, call: Callable[[], Awaitable[T]], _refuse: Callable[[ErrorCode], T]) -> T:
        """Runs ``call`` (a request's handler) and answers once what was appended before it returned is on
        disk (the server's write gate, as QuorumDriver.write)."""
        answer = await call()
        await self.durable(self.log.next_offset)
        return answer

    async def close(self) -> None:
        """Waits for the fsyncs under way."""
        if self._syncing is not None:
            await asyncio.shield(self._syncing)
