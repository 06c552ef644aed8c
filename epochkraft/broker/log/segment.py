"""One log segment: a file of RecordBatch v2 bytes plus a sparse offset index and a time index.

The ``.log`` file holds whole batches; the ``.index`` file holds 8-byte entries (offset relative to the
segment's base, byte position), one every ``index_interval_bytes``, so a read seeks close to its offset
and scans headers from there. The ``.timeindex`` file holds Kafka's 12-byte entries (the largest
timestamp so far, the relative offset of the batch that first reached it), added with the offset index
entries whenever the largest timestamp grew, plus a last one when the segment stops being active: a
lookup by timestamp seeks to the last entry not above it and scans a few headers from there. The
``.txnindex`` file (``txn_index.py``) lists the transactions aborted by markers in the segment. Reads use
``os.pread`` on a file descriptor kept open.

Appends reserve disk blocks ahead of the end of the file (``fallocate`` with FALLOC_FL_KEEP_SIZE, like
Kafka's log.preallocate but without changing the file's size, so recovery is unchanged): writing into
reserved blocks costs the kernel a quarter to a third less than allocating them page by page. The reservation
past the end is given back when the segment stops being the active one.

Appends also drop what lies well behind the end from the page cache (``posix_fadvise`` DONTNEED; the
kernel writes dirty pages back first and never discards them), so the next appends take memory the
kernel has just freed instead of fresh pages. On a VM that hands freed memory back to its host, a
fresh page costs several times a recycled one: dropping behind cut the brokers' CPU per GB acknowledged
by about a fifth under RF 3 and by more than half under RF 1. Reads further behind come from the disk.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import queue
import struct
import threading
from collections.abc import Callable
from pathlib import Path

from epochkraft.broker.log.txn_index import TransactionIndex, fsync_path
from epochkraft.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    decode_batch,
    iter_batches,
    parse_header,
    verify_crc,
)

INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
INT32_MAX = 2**31 - 1  # the largest offset relative to a segment's base that its indexes can hold
NO_TIMESTAMP = -1
DELETED_SUFFIX = ".deleted"
IOV_MAX = 1024  # pieces per pwritev (Linux's limit)
RESERVE_BYTES = 8 * 1024 * 1024  # at most this much reserved ahead of the end of the active segment
_FALLOC_FL_KEEP_SIZE = 1


def _load_fallocate() -> Callable[..., int] | None:
    # The os module has posix_fallocate, which grows the file; reserving past the end needs the flag.
    # The process's own symbols hold libc's (dlopen(NULL)), without find_library's ldconfig process.
    try:
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None  # not Linux: appends allocate as they go
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return fallocate


_fallocate = _load_fallocate()


def reserve_blocks(fd: int, start: int, end: int) -> bool:
    """Reserves disk blocks for bytes [start, end) without changing the file's size; False where this
    system cannot (no fallocate, or e.g. EOPNOTSUPP from the file system)."""
    return _fallocate is not None and _fallocate(fd, _FALLOC_FL_KEEP_SIZE, start, end - start) == 0


def reservation_end(end: int) -> int:
    """How far to reserve when an append reaches ``end``: ahead by as much as the segment holds, up to
    RESERVE_BYTES, so a quiet partition reserves little."""
    return end + min(end, RESERVE_BYTES)


class _PageCacheDropper:
    """One thread for the whole process that asks the kernel to drop page-cache ranges: the call starts
    writeback of dirty pages and can wait tens of milliseconds for the disk's queue, which must not stall
    the event loop. Each request carries a duplicate of the segment's descriptor, so a segment closed
    meanwhile is no concern."""

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[int, int, int]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    MAX_PENDING = 256  # beyond this the disk is far behind: those pages stay cached, nothing else

    def drop(self, fd: int, start: int, length: int) -> None:
        if self._requests.qsize() >= self.MAX_PENDING:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="page-cache-drops", daemon=True)
                self._thread.start()
        self._requests.put((os.dup(fd), start, length))

    def wait(self) -> None:
        """Returns once every request so far has been made (for tests and benchmarks)."""
        self._requests.join()

    def _run(self) -> None:
        while True:
            fd, start, length = self._requests.get()
            try:
                os.posix_fadvise(fd, start, length, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass  # a file system without it keeps its pages cached: nothing is lost
            finally:
                os.close(fd)
                self._requests.task_done()


page_cache_drops = _PageCacheDropper()


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int = 4096,
        drop_behind_bytes: int = 0,
        index_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        self.base_offset = base_offset
        self.log_path = directory / f"{segment_name(base_offset)}.log"
        self.index_path = directory / f"{segment_name(base_offset)}.index"
        self.time_index_path = directory / f"{segment_name(base_offset)}.timeindex"
        self.txn_index = TransactionIndex(directory / f"{segment_name(base_offset)}.txnindex")
        self.index_interval_bytes = index_interval_bytes
        # segment.index.bytes: how many entries each index may hold before the segment rolls
        self.max_index_entries = max(index_bytes // INDEX_ENTRY.size, 1)
        self.max_time_index_entries = max(index_bytes // TIME_INDEX_ENTRY.size, 1)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._index_fd: int | None = None  # opened on the first append that adds an index entry
        self._time_index_fd: int | None = None
        stat = os.fstat(self.fd)
        self.size = stat.st_size
        if stat.st_blocks * 512 > self.size + 65536:
            os.ftruncate(self.fd, self.size)  # blocks a crash left reserved past the end
        self._reserved_to = self.size  # blocks are reserved up to here
        self.drop_behind_bytes = drop_behind_bytes  # 0: the page cache keeps everything
        # The page cache was last told to drop the pages in [_drop_from, _dropped_to).
        self._drop_from = self._dropped_to = self.size
        self._reserve = _fallocate is not None
        self.index_offsets: list[int] = []  # absolute offsets
        self.index_positions: list[int] = []
        self.time_index_timestamps: list[int] = []
        self.time_index_offsets: list[int] = []  # absolute offsets
        self._bytes_since_index = 0
        self.next_offset = base_offset  # set by recover() / load_index()
        # The largest timestamp in the segment and the last offset of the batch that first holds it.
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = (
            None  # segment.ms counts from here (Kafka's rollingBasedTimestamp)
        )
        self.overflow_position: int | None = None  # set by recover(): a batch its indexes cannot address

    # ---- loading -------------------------------------------------------------------------------------
    def load_index(self) -> bool:
        """Loads the .index and .timeindex files and reads the batches after the last offset index entry
        (cheap on open); False if an index is missing or inconsistent (then recover() rebuilds both)."""
        try:
            data = self.index_path.read_bytes() if self.size else b""
            times = self.time_index_path.read_bytes() if self.size else b""
        except FileNotFoundError:
            return False
        if len(data) % INDEX_ENTRY.size or len(times) % TIME_INDEX_ENTRY.size:
            return False
        last = -1
        for rel, pos in INDEX_ENTRY.iter_unpack(data):
            if pos <= last or pos >= self.size or rel < 0:
                return False
            self.index_offsets.append(self.base_offset + rel)
            self.index_positions.append(pos)
            last = pos
        last_ts = NO_TIMESTAMP
        for timestamp, rel in TIME_INDEX_ENTRY.iter_unpack(times):
            if timestamp <= last_ts or rel < 0:
                return False
            self.time_index_timestamps.append(timestamp)
            self.time_index_offsets.append(self.base_offset + rel)
            last_ts = timestamp
        if self.time_index_offsets:
            self.max_timestamp = self.time_index_timestamps[-1]
            self.offset_of_max_timestamp = self.time_index_offsets[-1]
        try:
            self._scan_tail()
        except CorruptRecordError:
            return False
        return True

    def recover(self) -> int:
        """Scans every batch, truncating a torn or corrupt tail; rebuilds both indexes. Returns bytes cut.

        A batch whose offsets lie beyond what the indexes can address (more than 2^31 - 1 past the base)
        is not cut: ``overflow_position`` tells the log where to split the segment (Kafka's
        LogSegmentOffsetOverflowException and splitOverflowedSegment)."""
        data = self.read_at(0, self.size)
        valid_end = 0
        self._clear_indexes()
        self.overflow_position = None
        next_offset = self.base_offset
        try:
            for pos, header in iter_batches(data):
                if header.base_offset < next_offset or not verify_crc(data, pos, header):
                    break
                if header.last_offset - self.base_offset > INT32_MAX:
                    self.overflow_position = pos
                    break
                self._maybe_index(header, pos)
                valid_end = pos + header.size
                next_offset = header.next_offset
        except CorruptRecordError:
            pass
        end = self.size if self.overflow_position is not None else valid_end
        cut = self.size - end
        if cut:
            os.ftruncate(self.fd, end)
            self.size = end
        self.next_offset = next_offset
        self._maybe_time_index()  # as Kafka's LogSegment.recover: the largest timestamp gets an entry
        self._write_indexes()
        return cut

    def split_at_overflow(self, directory: Path) -> Segment:
        """Moves the batches from ``overflow_position`` on into a new segment based at the first of them
        (which the caller recovers in turn); this segment keeps the batches before."""
        position = self.overflow_position
        assert position is not None
        header = parse_header(self.read_at(position, HEADER_SIZE))
        tail = Segment(directory, header.base_offset, self.index_interval_bytes, self.drop_behind_bytes)
        tail.size = 0
        remaining, src = self.size - position, position
        while remaining > 0:
            copied = os.copy_file_range(self.fd, tail.fd, min(remaining, 1 << 30), src, tail.size)
            if copied <= 0:
                raise OSError(f"could not copy {self.log_path} past offset overflow")
            src += copied
            tail.size += copied
            remaining -= copied
        os.fsync(tail.fd)
        os.ftruncate(self.fd, position)
        self.size = self._reserved_to = position
        self._drop_from = min(self._drop_from, position)
        self._dropped_to = min(self._dropped_to, position)
        self.overflow_position = None
        return tail

    def _clear_indexes(self) -> None:
        self.index_offsets.clear()
        self.index_positions.clear()
        self.time_index_timestamps.clear()
        self.time_index_offsets.clear()
        self._bytes_since_index = 0
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None

    def _scan_tail(self) -> None:
        """Sets the next offset and the largest timestamp from the batches after the last offset index
        entry (the time index already covers every batch before)."""
        start = self.index_positions[-1] if self.index_positions else 0
        self.next_offset = self.base_offset
        for _pos, header in iter_batches(self.read_at(start, self.size - start)):
            self.next_offset = header.next_offset
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
        if self.size and self.first_batch_timestamp is None:
            self.first_batch_timestamp = parse_header(self.read_at(0, HEADER_SIZE)).max_timestamp

    def last_batch_next_offset(self) -> int:
        """The offset after the last batch, found from the last index entry (cheap on open)."""
        self._scan_tail()
        return self.next_offset

    @property
    def index_full(self) -> bool:
        return (
            len(self.index_offsets) >= self.max_index_entries
            or len(self.time_index_offsets) >= self.max_time_index_entries
        )

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        """Kafka's LogSegment.canConvertToRelativeOffset: the indexes store offsets as int32 deltas."""
        return 0 <= offset - self.base_offset <= INT32_MAX

    # ---- writing -------------------------------------------------------------------------------------
    def _maybe_index(self, header: BatchHeader, position: int) -> bytes | None:
        """Updates the largest timestamp; adds index entries when due, returning their bytes for
        the .timeindex (empty if the largest timestamp did not grow), or None when none was due."""
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if not self.index_positions or self._bytes_since_index >= self.index_interval_bytes:
            self.index_offsets.append(header.base_offset)
            self.index_positions.append(position)
            self._bytes_since_index = 0
            return self._maybe_time_index()
        self._bytes_since_index += header.size
        return None

    def _maybe_time_index(self) -> bytes:
        """Kafka's TimeIndex.maybeAppend: an entry only when the largest timestamp grew."""
        if self.max_timestamp <= (self.time_index_timestamps[-1] if self.time_index_timestamps else -1):
            return b""
        self.time_index_timestamps.append(self.max_timestamp)
        self.time_index_offsets.append(self.offset_of_max_timestamp)
        return TIME_INDEX_ENTRY.pack(self.max_timestamp, self.offset_of_max_timestamp - self.base_offset)

    def append(self, pieces: list[bytes | memoryview], headers: list[tuple[int, BatchHeader]]) -> None:
        """Appends whole batches given as consecutive pieces, written with pwritev (``headers``: the
        batches' positions within the pieces joined)."""
        start = position = self.size
        end = start + sum(map(len, pieces))
        if self._reserve and end > self._reserved_to:
            target = reservation_end(end)
            if reserve_blocks(self.fd, self._reserved_to, target):
                self._reserved_to = target
            else:
                self._reserve = False  # this file system allocates as writes come
        for i in range(0, len(pieces), IOV_MAX):
            chunk = pieces[i : i + IOV_MAX]
            size = sum(map(len, chunk))
            if os.pwritev(self.fd, chunk, position) != size:
                raise OSError(f"short write to {self.log_path}")
            position += size
        new_entries = []
        new_time_entries = []
        for pos, header in headers:
            time_entry = self._maybe_index(header, start + pos)
            if time_entry is not None:
                new_entries.append(INDEX_ENTRY.pack(header.base_offset - self.base_offset, start + pos))
                new_time_entries.append(time_entry)
        if new_entries:
            if self._index_fd is None:
                self._index_fd = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._index_fd, b"".join(new_entries))
            self._append_time_entries(b"".join(new_time_entries))
        self.size = position
        self.next_offset = headers[-1][1].next_offset
        behind = self.drop_behind_bytes
        if behind and position - self._dropped_to >= 2 * behind:
            self._drop_behind(position - behind)

    def _drop_behind(self, end: int) -> None:
        """Has the kernel drop the cached pages before ``end``. It starts writing back the dirty ones and
        skips them, so the range starts where the last one started: those are clean by now."""
        start, self._drop_from, self._dropped_to = self._drop_from, self._dropped_to, end
        page_cache_drops.drop(self.fd, start, end - start)

    def _append_time_entries(self, data: bytes) -> None:
        if self._time_index_fd is None:  # created with the .index, even while it stays empty
            self._time_index_fd = os.open(self.time_index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if data:
            os.write(self._time_index_fd, data)

    def on_become_inactive(self) -> None:
        """The segment stops being appended to: its time index gets a last entry for its largest
        timestamp (Kafka's onBecomeInactiveSegment), and reserved blocks are given back."""
        self._append_time_entries(self._maybe_time_index())
        self.release_reserved()

    def release_reserved(self) -> None:
        """Gives back the blocks reserved past the end (the segment is no longer appended to)."""
        if self._reserved_to > self.size:
            os.ftruncate(self.fd, self.size)
        self._reserved_to = self.size

    def _write_indexes(self) -> None:
        if self._time_index_fd is not None:
            os.close(self._time_index_fd)
            self._time_index_fd = None
        with open(self.index_path, "wb") as f:
            f.write(
                b"".join(
                    INDEX_ENTRY.pack(o - self.base_offset, p)
                    for o, p in zip(self.index_offsets, self.index_positions, strict=True)
                )
            )
        with open(self.time_index_path, "wb") as f:
            f.write(
                b"".join(
                    TIME_INDEX_ENTRY.pack(t, o - self.base_offset)
                    for t, o in zip(self.time_index_timestamps, self.time_index_offsets, strict=True)
                )
            )

    def flush(self) -> None:
        """fsyncs the log and its indexes (Kafka's LogSegment.flush): recovery skips the segments below
        the recovery point, so their indexes must be on disk as much as their batches."""
        os.fsync(self.fd)
        for fd, path in ((self._index_fd, self.index_path), (self._time_index_fd, self.time_index_path)):
            if fd is not None:
                os.fsync(fd)
            else:
                fsync_path(path)
        self.txn_index.flush()

    # ---- reading -------------------------------------------------------------------------------------
    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position) if size > 0 else b""

    def position_of(self, offset: int) -> int | None:
        """Byte position of the batch holding ``offset`` (or the first batch after it); None past the end."""
        i = bisect.bisect_right(self.index_offsets, offset) - 1
        position = self.index_positions[i] if i >= 0 else 0
        while position < self.size:
            header = parse_header(self.read_at(position, HEADER_SIZE))
            if header.last_offset >= offset:
                return position
            position += header.size
        return None

    def headers(self) -> list[BatchHeader]:
        """Every batch header, one read per batch (for rebuilding what the log does not checkpoint)."""
        out = []
        position = 0
        while position + HEADER_SIZE <= self.size:
            header = parse_header(self.read_at(position, HEADER_SIZE))
            out.append(header)
            position += header.size
        return out

    def find_offset_by_timestamp(self, target: int, starting_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after ``starting_offset`` whose timestamp is
        at least ``target``, or None (Kafka's LogSegment.findOffsetByTimestamp): the time index gives the
        last entry below or at the target (every batch before its offset is below it), the offset index
        a position at or before that batch, and headers are scanned from there; one batch is decoded."""
        i = bisect.bisect_right(self.time_index_timestamps, target) - 1
        start = max(self.time_index_offsets[i] if i >= 0 else self.base_offset, starting_offset)
        j = bisect.bisect_right(self.index_offsets, start) - 1
        position = self.index_positions[j] if j >= 0 else 0
        while position < self.size:
            header = parse_header(self.read_at(position, HEADER_SIZE))
            if header.max_timestamp >= target and header.last_offset >= starting_offset:
                batch = decode_batch(self.read_at(position, header.size))
                for record in batch.records:
                    offset, timestamp = batch.offset_of(record), batch.timestamp_of(record)
                    if timestamp >= target and offset >= starting_offset:
                        return timestamp, offset
            position += header.size
        return None

    def truncate_to(self, offset: int) -> None:
        """Removes batches whose last offset is at or after ``offset``."""
        position = self.position_of(offset)
        if position is None:
            return
        os.ftruncate(self.fd, position)
        self.size = self._reserved_to = position
        self._drop_from = min(self._drop_from, position)
        self._dropped_to = min(self._dropped_to, position)
        keep = bisect.bisect_left(self.index_positions, position)
        del self.index_offsets[keep:]
        del self.index_positions[keep:]
        keep = bisect.bisect_left(self.time_index_offsets, offset)
        del self.time_index_timestamps[keep:]
        del self.time_index_offsets[keep:]
        self._write_indexes()
        self.txn_index.truncate_to(offset)
        self.max_timestamp = self.time_index_timestamps[-1] if self.time_index_timestamps else NO_TIMESTAMP
        self.offset_of_max_timestamp = (
            self.time_index_offsets[-1] if self.time_index_offsets else self.base_offset
        )
        if position == 0:
            self.first_batch_timestamp = None
        self._scan_tail()

    def close(self) -> None:
        self.release_reserved()
        os.close(self.fd)
        for fd in (self._index_fd, self._time_index_fd):
            if fd is not None:
                os.close(fd)
        self._index_fd = self._time_index_fd = None

    @property
    def paths(self) -> tuple[Path, Path, Path, Path]:
        return self.log_path, self.index_path, self.time_index_path, self.txn_index.path

    def delete(self) -> None:
        self._reserved_to = self.size  # the file goes; nothing to give back
        self.close()
        for path in self.paths:
            path.unlink(missing_ok=True)

    def rename_to_deleted(self) -> list[Path]:
        """Closes the segment and renames its files with the ``.deleted`` suffix, for removal later (as
        Kafka's asynchronous segment deletion: a reader holding the files is never cut short)."""
        self._reserved_to = self.size
        self.close()
        renamed = []
        for path in self.paths:
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                path.rename(target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        return renamed
