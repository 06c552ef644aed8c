"""A partition's log: segments of RecordBatch v2 bytes, the leader-epoch cache and the recovery point.

As Kafka's UnifiedLog, minus retention and compaction: the leader appends produced batches after
validating them and stamping offsets and its leader epoch in place (the CRC does not cover either);
followers append the leader's batches as they are. On open, every segment from the one holding the
recovery point onwards is scanned, a torn or corrupt tail is cut off and indexes are rebuilt.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from epochkraft.broker.log.epoch_cache import LeaderEpochCache
from epochkraft.broker.log.segment import Segment
from epochkraft.broker.log.tail_cache import TailCache
from epochkraft.protocol.records import (
    HEADER_SIZE,
    STAMPED_PREFIX,
    BatchHeader,
    CorruptRecordError,
    iter_batches,
    parse_header,
    stamped_prefix,
    validate,
    verify_crc,
)

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int | None = None  # None: never fsync on append (Kafka's default)
    drop_behind_bytes: int = 0  # page cache kept behind a segment's end (0: all of it)


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    headers: tuple[BatchHeader, ...]


class PartitionLog:
    def __init__(
        self, directory: Path, config: LogConfig, recovery_point: int = 0, tail: TailCache | None = None
    ) -> None:
        self.dir = directory
        self.config = config
        # The broker's cache of recent leader appends; one of no bytes keeps nothing and answers no read.
        self.tail = tail if tail is not None else TailCache(0)
        self.recovery_point = recovery_point
        self.segments: list[Segment] = []
        self._base_offsets: list[int] = []
        self._unflushed_messages = 0
        self.epochs = LeaderEpochCache(directory / "leader-epoch-checkpoint", lambda: self.log_end_offset)

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        recovery_point: int = 0,
        tail: TailCache | None = None,
    ) -> PartitionLog:
        directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, config or LogConfig(), recovery_point, tail)
        plog._load()
        return plog

    # ---- loading and recovery -------------------------------------------------------------------------
    def _load(self) -> None:
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log"))
        for base in bases:
            self.segments.append(
                Segment(self.dir, base, self.config.index_interval_bytes, self.config.drop_behind_bytes)
            )
        self._base_offsets = [s.base_offset for s in self.segments]
        if not self.segments:
            self._roll(0)
            return
        cut = 0
        recover_from = max(bisect.bisect_right(self._base_offsets, self.recovery_point) - 1, 0)
        for index, segment in enumerate(self.segments):
            if index >= recover_from or not segment.load_index():
                cut += segment.recover()
            else:
                segment.next_offset = segment.last_batch_next_offset()
        # A segment emptied by recovery past the first one is dropped; offsets must stay contiguous.
        while len(self.segments) > 1 and self.segments[-1].size == 0:
            self.segments.pop().delete()
            self._base_offsets.pop()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        if cut:
            log.warning("log recovery truncated a torn tail", dir=str(self.dir), bytes_cut=cut)

    # ---- state ---------------------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ---- appends -------------------------------------------------------------------------------------
    def append_as_leader(self, records: bytes, leader_epoch: int) -> AppendInfo:
        """Validates produced batches (CORRUPT_MESSAGE on failure), assigns offsets, stamps the epoch.

        The produced bytes are not copied: each batch is written as its stamped prefix followed by the
        rest of its bytes as they arrived, in one pwritev."""
        headers = list(iter_batches(records))
        if not headers:
            raise CorruptRecordError("no record batch in the produce request")
        for pos, header in headers:
            validate(records, pos, header)
        offset = self.log_end_offset
        first = offset
        view = memoryview(records)
        parts: list[bytes | memoryview] = []
        stamped = []
        for pos, header in headers:
            parts += (
                stamped_prefix(header, offset, leader_epoch),
                view[pos + STAMPED_PREFIX : pos + header.size],
            )
            stamped.append((pos, _with_offset(header, offset, leader_epoch)))
            offset += header.record_count
        self.epochs.assign(leader_epoch, first)
        self._write(parts, stamped)
        if isinstance(records, bytes):  # kept only if it cannot change
            for i, (_, header) in enumerate(stamped):
                self.tail.append(
                    self, header.base_offset, header.next_offset, parts[2 * i : 2 * i + 2], header.size
                )
        return AppendInfo(
            first,
            offset - 1,
            offset - first,
            max(h.max_timestamp for _, h in headers),
            tuple(h for _, h in stamped),
        )

    def append_as_follower(self, data: bytes | memoryview) -> AppendInfo | None:
        """Appends the leader's batches as they are; they must continue the log and pass their CRC (as
        Kafka's analyzeAndValidateRecords: a batch damaged on the leader's disk is not replicated)."""
        headers = list(iter_batches(data))
        if not headers:
            return None
        for pos, header in headers:
            if not verify_crc(data, pos, header):
                raise CorruptRecordError(f"CRC-32C mismatch in the replicated batch at {header.base_offset}")
        first = headers[0][1].base_offset
        if first != self.log_end_offset:
            raise CorruptRecordError(
                f"follower append at {first} does not continue the log at {self.log_end_offset}"
            )
        for _, header in headers:
            self.epochs.assign(header.partition_leader_epoch, header.base_offset)
        self.tail.drop(self)  # ``data`` is a view of a receive buffer: it is not kept
        self._write([data], headers)
        last = headers[-1][1]
        return AppendInfo(
            first,
            last.last_offset,
            last.next_offset - first,
            max(h.max_timestamp for _, h in headers),
            tuple(h for _, h in headers),
        )

    def _write(self, pieces: list[bytes | memoryview], headers: list[tuple[int, BatchHeader]]) -> None:
        active = self.segments[-1]
        if active.size and active.size + sum(map(len, pieces)) > self.config.segment_bytes:
            active = self._roll(headers[0][1].base_offset)
        active.append(pieces, headers)
        self._unflushed_messages += sum(h.record_count for _, h in headers)
        if self.config.flush_messages is not None and self._unflushed_messages >= self.config.flush_messages:
            self.flush()

    def _roll(self, base_offset: int) -> Segment:
        if self.segments:
            self.segments[-1].release_reserved()
        segment = Segment(
            self.dir, base_offset, self.config.index_interval_bytes, self.config.drop_behind_bytes
        )
        segment.next_offset = base_offset
        self.segments.append(segment)
        self._base_offsets.append(base_offset)
        return segment

    def flush(self) -> None:
        """fsyncs unflushed segments and advances the recovery point to the log end."""
        for segment in self.segments[self._segment_index(self.recovery_point) :]:
            segment.flush()
        self.recovery_point = self.log_end_offset
        self._unflushed_messages = 0

    # ---- reads ---------------------------------------------------------------------------------------
    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes | memoryview:
        """``read_chunks`` as one buffer."""
        chunks = self.read_chunks(offset, max_bytes, max_offset)
        if not chunks:
            return b""
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_chunks(
        self, offset: int, max_bytes: int, max_offset: int | None = None
    ) -> list[bytes | memoryview]:
        """Whole batches from the one holding ``offset``, stopping before ``max_offset`` (e.g. the high
        watermark) and after ``max_bytes`` (at least one batch is returned even if larger, as Kafka), as
        one buffer per segment read: a Fetch response sends them to the socket as they are.

        Each segment is read with one pread of the byte budget; batch boundaries are found in memory, and
        a partial batch read past the last whole one is cut off with a view, not a copy."""
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if offset >= limit:
            return []
        if (cached := self.tail.read(self, offset, max_bytes, limit)) is not None:
            return cached
        out: list[bytes | memoryview] = []
        total = 0
        for segment in self.segments[self._segment_index(offset) :]:
            position = segment.position_of(offset)
            if position is None:
                continue
            chunk = segment.read_at(
                position, min(max(max_bytes - total, HEADER_SIZE), segment.size - position)
            )
            end, first_size, stopped = _whole_batches(chunk, limit)
            if end == 0 and total == 0 and first_size:
                chunk, end = segment.read_at(position, first_size), first_size  # one batch over the budget
            if end:
                out.append(chunk if end == len(chunk) else memoryview(chunk)[:end])
                total += end
            if stopped or position + end < segment.size:
                break  # stopped by the limit or the byte budget, not by the segment's end
            offset = segment.next_offset
        return out

    # ---- truncation ----------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Drops everything at or after ``offset`` (a follower diverged from its leader)."""
        if offset >= self.log_end_offset:
            return
        self.tail.drop(self)
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._base_offsets.pop()
        self.segments[-1].truncate_to(offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.tail.drop(self)
        for segment in self.segments:
            segment.delete()
        self.segments.clear()
        self._base_offsets.clear()
        self._roll(offset)
        self.epochs.clear()
        self.recovery_point = offset

    def close(self) -> None:
        self.tail.drop(self)
        for segment in self.segments:
            segment.close()


def _whole_batches(chunk: bytes, limit: int) -> tuple[int, int, bool]:
    """How many leading bytes of ``chunk`` are whole batches below offset ``limit``; the size of the
    first batch if it did not fit; whether a batch at or past ``limit`` was reached."""
    end = 0
    while end + HEADER_SIZE <= len(chunk):
        header = parse_header(chunk, end)
        if header.base_offset >= limit:
            return end, 0, True
        if end + header.size > len(chunk):
            return end, header.size if end == 0 else 0, False
        end += header.size
    return end, 0, False


def _with_offset(header: BatchHeader, base_offset: int, leader_epoch: int) -> BatchHeader:
    return replace(header, base_offset=base_offset, partition_leader_epoch=leader_epoch)
