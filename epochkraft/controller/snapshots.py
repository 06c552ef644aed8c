"""The controller daemon's metadata snapshots: written every N bytes of records, loaded at restart.

As Kafka's SnapshotGenerator: the bytes of appended batches are counted, and once
``metadata.log.max.record.bytes.between.snapshots`` is reached a snapshot of the image at the log's end is
written. The image is copied on the event loop (between two controller operations, so it matches the log's
end offset exactly); turning it into records, encoding and the file IO run on a worker thread. One
snapshot is written at a time; a failed one is logged and the next threshold tries again.

Once a new snapshot is written, the daemon drops the log below the older of the two kept (``on_written``):
brokers and voters behind that point fetch the snapshot (FetchSnapshot) and the log after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Protocol

from epochkraft.controller.controller import METADATA_VERSION, Controller
from epochkraft.controller.metadata_log import MetadataLog
from epochkraft.metadata.image import MetadataImage
from epochkraft.metadata.snapshot import SnapshotId, copy_image, encode_snapshot, image_records
from epochkraft.metadata.snapshot_file import delete_old_snapshots, write_snapshot_file
from epochkraft.protocol.records import parse_header

KEEP_SNAPSHOTS = 2  # the newest, and one to fall back on should it be unreadable


def write_image_snapshot(
    log_dir: Path,
    snapshot_id: SnapshotId,
    image: MetadataImage,
    last_contained_log_timestamp: int,
    now_ms: int,
    fsync: bool = True,
    membership: tuple[tuple[int, bytes], ...] = (),
) -> tuple[Path, int]:
    """Image -> records -> checkpoint file (worker thread: touches only its own copy of the image).
    ``membership``: a dynamic quorum's KRaftVersionRecord and VotersRecord at the snapshot's offset."""
    with _collector_paused():
        records = image_records(image, METADATA_VERSION)
        batches = encode_snapshot(
            snapshot_id,
            records,
            last_contained_log_timestamp=last_contained_log_timestamp,
            now_ms=now_ms,
            membership=membership,
        )
        del records
    path = write_snapshot_file(log_dir, snapshot_id, batches, fsync)
    return path, sum(len(b) for b in batches)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a snapshot's records are made: they hold no cycles (refcounts
    free them), and the full collections their allocation triggers would scan the whole heap holding the
    GIL, stalling the event loop for up to a second at 100,000 partitions."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class SnapshotLog(Protocol):
    """What the snapshotter logs through (a structlog logger; a benchmark's own that raises on errors)."""

    def info(self, event: str, **fields: object) -> object: ...

    def error(self, event: str, **fields: object) -> object: ...


class MetadataSnapshotter:
    def __init__(
        self,
        controller: Controller,
        log_dir: Path,
        max_bytes_between: int,
        log: SnapshotLog,
        latest: SnapshotId | None = None,
        fsync: bool = True,
        *,
        published: MetadataLog | None = None,
        snapshot_point: Callable[[], SnapshotId | None] | None = None,
        on_written: Callable[[SnapshotId], None] | None = None,
        membership: Callable[[SnapshotId], tuple[tuple[int, bytes], ...]] | None = None,
        durable: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        """``published``: the log whose appends are counted (the controller's own by default; a quorum
        controller's committed log); ``snapshot_point``: the id a snapshot of the image taken now would
        have, None while the image holds records not yet committed (the log's end, epoch 0, by
        default: a single controller's); ``durable``: returns once the log below an offset is on disk (a
        single controller's group commit), awaited before a snapshot file is written."""
        self.controller = controller
        self.durable = durable
        # told the older of the two snapshots kept once a new one is written: the log below it may go
        self.on_written = on_written
        # a dynamic quorum's voter set and kraft.version at a snapshot's offset, as its control records
        self.membership = membership or (lambda _snapshot_id: ())
        self.snapshot_point = snapshot_point or (lambda: SnapshotId(controller.log.next_offset, 0))
        self.log_dir = log_dir
        self.max_bytes_between = max_bytes_between
        self.log = log
        self.fsync = fsync
        self.latest = latest
        self.bytes_since_snapshot = 0
        self.last_timestamp_ms = -1
        self.written = 0
        self._task: asyncio.Task[None] | None = None
        self._scheduled = False
        (published if published is not None else controller.standalone_log).listeners.append(self._on_append)

    def _on_append(self, _base_offset: int, data: bytes) -> None:
        self.bytes_since_snapshot += len(data)
        self.last_timestamp_ms = parse_header(data).max_timestamp
        if self.bytes_since_snapshot >= self.max_bytes_between and not self._scheduled and self._task is None:
            # Not now: the controller replays the batch only after appending it; once the operation
            # under way is done, the image matches the log's end.
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.start)

    def start(self) -> asyncio.Task[None] | None:
        """Copies the image and writes its snapshot on a worker thread (None: nothing new, or busy)."""
        self._scheduled = False
        snapshot_id = self.snapshot_point()
        if snapshot_id is None:  # a write in flight: once it commits
            self._scheduled = True
            asyncio.get_running_loop().call_later(0.05, self.start)
            return None
        if self._task is not None or (self.latest is not None and snapshot_id <= self.latest):
            return None
        started = time.monotonic()
        image = copy_image(self.controller.image)
        copy_ms = (time.monotonic() - started) * 1000
        self.bytes_since_snapshot = 0
        membership = self.membership(snapshot_id)
        self._task = asyncio.create_task(
            self._write(snapshot_id, image, copy_ms, membership), name="metadata-snapshot"
        )
        return self._task

    async def _write(
        self,
        snapshot_id: SnapshotId,
        image: MetadataImage,
        copy_ms: float,
        membership: tuple[tuple[int, bytes], ...],
    ) -> None:
        try:
            if self.durable is not None:
                await self.durable(snapshot_id.end_offset)
            started = time.monotonic()
            path, size = await asyncio.to_thread(
                write_image_snapshot,
                self.log_dir,
                snapshot_id,
                image,
                self.last_timestamp_ms,
                int(time.time() * 1000),
                self.fsync,
                membership,
            )
            previous, self.latest = self.latest, snapshot_id
            self.written += 1
            if previous is not None and self.on_written is not None:
                self.on_written(previous)  # the log below the older kept snapshot, before it may go
            deleted = await asyncio.to_thread(delete_old_snapshots, self.log_dir, KEEP_SNAPSHOTS)
            self.controller.outbox.append(
                (
                    "metadata_snapshot_written",
                    {"end_offset": snapshot_id.end_offset, "epoch": snapshot_id.epoch, "bytes": size},
                )
            )
            self.log.info(
                "metadata snapshot written",
                file=path.name,
                bytes=size,
                image_copy_ms=round(copy_ms, 1),
                seconds=round(time.monotonic() - started, 3),
                deleted=[d.end_offset for d in deleted],
            )
        except Exception as exc:  # logged; the next threshold tries again
            self.log.error("metadata snapshot failed", offset=snapshot_id.end_offset, error=repr(exc))
        finally:
            self._task = None
            if self.bytes_since_snapshot >= self.max_bytes_between and not self._scheduled:
                # the threshold was passed while this one was written: the next starts now, rather than
                # at an append that may not come
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self.start)

    async def wait(self) -> None:
        """Waits for a snapshot being written (at shutdown, so no .part file is left behind)."""
        task = self._task
        if task is not None:
            await asyncio.shield(task)
