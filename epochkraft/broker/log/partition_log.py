"""A partition's log: segments of RecordBatch v2 bytes, the leader-epoch cache and the recovery point.

As Kafka's UnifiedLog: the leader appends produced batches after validating them and stamping offsets
and its leader epoch in place (the CRC does not cover either); followers append the leader's batches as
they are. The active segment rolls by ``segment.bytes``, ``segment.ms``, a full index, or an append
whose offsets its indexes cannot address. The log start offset only moves forward (DeleteRecords, the
leader's log start seen by a follower, retention); segments wholly below it, or past retention.ms /
retention.bytes, are deleted below the high watermark, never the active one, by renaming them
``.deleted`` for the caller to remove later. Lookups by timestamp go through the time indexes. Compaction
(``log.cleaner``) rewrites inactive segments off the event loop; ``replace_cleaned`` swaps them in.
On open, every segment from the one holding the recovery point onwards is scanned, a torn or corrupt tail
is cut off, a segment holding offsets its indexes cannot address is split, and indexes are rebuilt.
"""

from __future__ import annotations

import bisect
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypedDict

import structlog

from epochkraft.broker.log import time_lookup
from epochkraft.broker.log.cleaner import CLEANING_DIR, CleanedSegment, SegmentSnapshot
from epochkraft.broker.log.epoch_cache import LeaderEpochCache
from epochkraft.broker.log.segment import DELETED_SUFFIX, Segment
from epochkraft.broker.log.tail_cache import TailCache
from epochkraft.broker.log.txn_index import AbortedTxn
from epochkraft.broker.producer_state import CompletedTxn, ProducerStateTable
from epochkraft.protocol.records import (
    HEADER_SIZE,
    LONG_MAX,
    STAMPED_PREFIX,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    RecordRules,
    iter_batches,
    parse_header,
    stamped_prefix,
    validate,
    verify_crc,
    with_log_append_time,
)

log = structlog.get_logger()


DAY_MS = 24 * 60 * 60 * 1000
NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One log's settings: the broker's log.* defaults overridden by its topic's configs."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * DAY_MS  # -1: no limit
    retention_bytes: int = -1  # -1: no limit
    cleanup_policy: str = "delete"  # "delete", "compact" or "compact,delete"
    delete_retention_ms: int = DAY_MS  # how long a compacted log keeps tombstones
    file_delete_delay_ms: int = 60_000
    flush_messages: int | None = None  # None: never fsync on append (Kafka's default)
    drop_behind_bytes: int = 0  # page cache kept behind a segment's end (0: all of it)
    # produced records' timestamps (CreateTime) must lie within [now - before, now + after], as Kafka 4's
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.replace(" ", "").split(",")

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy.replace(" ", "").split(",")

    def with_topic_configs(self, configs: dict[str, str]) -> LogConfig:
        """These defaults overridden by a topic's configs (Kafka's names); an unparsable value keeps
        the default."""
        overrides: LogConfigChange = {}
        for name, field in TOPIC_CONFIGS.items():
            value = configs.get(name)
            if value is None:
                continue
            if field == "cleanup_policy" or field == "message_timestamp_type":
                overrides[field] = value
                continue
            try:
                overrides[field] = int(value)
            except ValueError:
                log.warning("ignored an unparsable topic config", config=name, value=value)
        return replace(self, **overrides) if overrides else self


class LogConfigChange(TypedDict, total=False):
    """The LogConfig fields a topic's configs override."""

    segment_bytes: int
    segment_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    cleanup_policy: str
    delete_retention_ms: int
    file_delete_delay_ms: int
    message_timestamp_type: str
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int


TOPIC_CONFIGS: dict[
    str,
    Literal[
        "segment_bytes",
        "segment_ms",
        "segment_index_bytes",
        "index_interval_bytes",
        "retention_ms",
        "retention_bytes",
        "cleanup_policy",
        "delete_retention_ms",
        "file_delete_delay_ms",
        "message_timestamp_type",
        "message_timestamp_before_max_ms",
        "message_timestamp_after_max_ms",
    ],
] = {  # topic config -> LogConfig field
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "cleanup.policy": "cleanup_policy",
    "delete.retention.ms": "delete_retention_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
}


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    headers: tuple[BatchHeader, ...]
    log_append_time: int = NO_TIMESTAMP  # the leader's append time on a LogAppendTime topic, else -1
    positions: tuple[int, ...] = ()  # each batch's position in the appended bytes


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        recovery_point: int = 0,
        tail: TailCache | None = None,
        log_start_offset: int = 0,
    ) -> None:
        self.dir = directory
        self.config = config
        # The broker's cache of recent leader appends; one of no bytes keeps nothing and answers no read.
        self.tail = tail if tail is not None else TailCache(0)
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset  # checkpointed value until _load reconciles it
        self.segments: list[Segment] = []
        self._base_offsets: list[int] = []
        self._unflushed_messages = 0
        self.epochs = LeaderEpochCache(directory / "leader-epoch-checkpoint", lambda: self.log_end_offset)
        # The aborted-transaction indexes of segments from here on were reset by recovery: whoever
        # rebuilds the producer state from the log writes their entries again (Kafka's LogSegment.recover
        # rebuilds them from the producer state; here the broker's rebuild pass does).
        self.txn_index_stale_from = LONG_MAX

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        recovery_point: int = 0,
        tail: TailCache | None = None,
        log_start_offset: int = 0,
    ) -> PartitionLog:
        directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, config or LogConfig(), recovery_point, tail, log_start_offset)
        plog._load()
        return plog

    # ---- loading and recovery -------------------------------------------------------------------------
    def _segment(self, base_offset: int) -> Segment:
        c = self.config
        return Segment(
            self.dir, base_offset, c.index_interval_bytes, c.drop_behind_bytes, c.segment_index_bytes
        )

    def _load(self) -> None:
        for leftover in self.dir.glob("*" + DELETED_SUFFIX):  # a deletion a restart interrupted
            leftover.unlink(missing_ok=True)
        shutil.rmtree(self.dir / CLEANING_DIR, ignore_errors=True)  # a cleaning pass never swapped in
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log") if p.stem.isdigit())
        self.segments = [self._segment(base) for base in bases]
        checkpointed_start = self.log_start_offset
        if not self.segments:
            self._base_offsets = []
            self._roll(checkpointed_start)
            return
        cut = 0
        recover_from = max(bisect.bisect_right(bases, self.recovery_point) - 1, 0)
        index = 0
        while index < len(self.segments):
            segment = self.segments[index]
            if index >= recover_from or not segment.load_index():
                cut += segment.recover()
                segment.txn_index.reset()
                self.txn_index_stale_from = min(self.txn_index_stale_from, segment.base_offset)
                if segment.overflow_position is not None:
                    split = segment.split_at_overflow(self.dir)
                    log.warning(
                        "log recovery split a segment whose offsets overflow its index",
                        dir=str(self.dir),
                        segment=segment.base_offset,
                        new_segment=split.base_offset,
                    )
                    self.segments.insert(index + 1, split)
                    recover_from = min(recover_from, index + 1)
            index += 1
        self._base_offsets = [s.base_offset for s in self.segments]
        # A segment emptied by recovery past the first one is dropped; offsets must stay contiguous.
        while len(self.segments) > 1 and self.segments[-1].size == 0:
            self.segments.pop().delete()
            self._base_offsets.pop()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        if cut:
            log.warning("log recovery truncated a torn tail", dir=str(self.dir), bytes_cut=cut)
        # Kafka's LogLoader: the log start offset is the checkpointed one or the first segment's base,
        # whichever is larger; a log ending below its checkpointed start lost segments and starts over.
        self.log_start_offset = max(checkpointed_start, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            log.warning(
                "log ends below its checkpointed log start offset; starting it empty there",
                dir=str(self.dir),
                log_start_offset=self.log_start_offset,
                log_end_offset=self.log_end_offset,
            )
            self.truncate_fully_and_start_at(self.log_start_offset)
        self.epochs.truncate_from_start(self.log_start_offset)
        if self.epochs.unreadable:
            log.warning("leader-epoch-checkpoint unreadable; rebuilding it from the log", dir=str(self.dir))
            self.epochs.rebuild(
                [(h.partition_leader_epoch, h.base_offset) for s in self.segments for h in s.headers()]
            )
            self.epochs.truncate_from_start(self.log_start_offset)

    # ---- state ---------------------------------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ---- appends -------------------------------------------------------------------------------------
    def record_rules(self, now_ms: int | None = None) -> RecordRules:
        """This log's rules for each produced record (timestamps checked only with ``now_ms``)."""
        c = self.config
        return RecordRules(
            topic_partition=self.dir.name,
            compacted=c.compact_enabled,
            now_ms=now_ms if c.message_timestamp_type == "CreateTime" else None,
            timestamp_before_max_ms=c.message_timestamp_before_max_ms,
            timestamp_after_max_ms=c.message_timestamp_after_max_ms,
            log_append_time_topic=c.message_timestamp_type == LOG_APPEND_TIME,
        )

    def append_as_leader(
        self,
        records: bytes | memoryview,
        leader_epoch: int,
        *,
        validated: bool = False,
        now_ms: int = NO_TIMESTAMP,
    ) -> AppendInfo:
        """Validates produced batches (CORRUPT_MESSAGE or INVALID_RECORD on failure) unless the caller
        already did (``validated``: the broker validates heavy batches off its event loop), assigns
        offsets, stamps the epoch, and with message.timestamp.type=LogAppendTime stamps each batch with
        ``now_ms`` (LogValidator.assignOffsetsNonCompressed and the in-place compressed path alike).

        The produced bytes are not copied: each batch is written as its stamped prefix followed by the
        rest of its bytes as they arrived (a LogAppendTime batch: its rewritten header, then its records),
        in one pwritev."""
        headers = list(iter_batches(records))
        if not headers:
            raise CorruptRecordError("no record batch in the produce request")
        if not validated:
            for pos, header in headers:
                validate(records, pos, header, rules=self.record_rules())
        append_time = now_ms if self.config.message_timestamp_type == LOG_APPEND_TIME else NO_TIMESTAMP
        offset = self.log_end_offset
        first = offset
        view = memoryview(records)
        pieces: list[list[bytes | memoryview]] = []
        stamped = []
        for pos, header in headers:
            rest: list[bytes | memoryview] = [view[pos + STAMPED_PREFIX : pos + header.size]]
            if append_time != NO_TIMESTAMP:
                head, header = with_log_append_time(records, pos, header, append_time)
                rest = [head, view[pos + HEADER_SIZE : pos + header.size]]
            pieces.append([stamped_prefix(header, offset, leader_epoch), *rest])
            stamped.append((pos, _with_offset(header, offset, leader_epoch)))
            offset += header.record_count
        self.epochs.assign(leader_epoch, first)
        self._write([piece for batch in pieces for piece in batch], stamped)
        keep = _tail_keeping(records)
        if keep is not None:
            for batch, (_, header) in zip(pieces, stamped, strict=True):
                cached: list[bytes | memoryview] = (
                    batch if keep == "as is" else [bytes(piece) for piece in batch]
                )
                self.tail.append(self, header.base_offset, header.next_offset, cached, header.size)
        return AppendInfo(
            first,
            offset - 1,
            offset - first,
            max(h.max_timestamp for _, h in stamped),
            tuple(h for _, h in stamped),
            append_time,
            tuple(pos for pos, _ in headers),
        )

    def append_as_follower(self, data: bytes | memoryview) -> AppendInfo | None:
        """Appends the leader's batches as they are; they must continue the log and pass their CRC (as
        Kafka's analyzeAndValidateRecords: a batch damaged on the leader's disk is not replicated) and no
        more records than their offset range holds."""
        headers = list(iter_batches(data))
        if not headers:
            return None
        for pos, header in headers:
            if not verify_crc(data, pos, header):
                raise CorruptRecordError(f"CRC-32C mismatch in the replicated batch at {header.base_offset}")
            if not 0 <= header.record_count <= header.last_offset_delta + 1:  # compaction may empty a batch
                raise InvalidRecordError(
                    f"replicated batch at {header.base_offset} counts {header.record_count} records "
                    f"in {header.last_offset_delta + 1} offsets"
                )
        first = headers[0][1].base_offset
        if first < self.log_end_offset:  # past it is fine: a compacted leader's log has gaps
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
            positions=tuple(pos for pos, _ in headers),
        )

    def _write(self, pieces: list[bytes | memoryview], headers: list[tuple[int, BatchHeader]]) -> None:
        active = self._maybe_roll(sum(map(len, pieces)), headers)
        active.append(pieces, headers)
        self._unflushed_messages += sum(h.record_count for _, h in headers)
        if self.config.flush_messages is not None and self._unflushed_messages >= self.config.flush_messages:
            self.flush()

    def _maybe_roll(self, size: int, headers: list[tuple[int, BatchHeader]]) -> Segment:
        """The segment to append to, rolling first as Kafka's UnifiedLog.maybeRoll / LogSegment.shouldRoll:
        the append would take the segment past segment.bytes, its timestamps are segment.ms past the
        segment's first batch, an index is full, or its last offset cannot be stored relative to the
        segment's base (the new segment starts at the append's first offset, so it always can)."""
        active = self.segments[-1]
        first, last = headers[0][1].base_offset, headers[-1][1].last_offset
        if not active.size:
            if active.can_convert_to_relative_offset(last):
                return active
            self.segments.pop().delete()  # empty: it is replaced by one the append's offsets fit
            self._base_offsets.pop()
            return self._roll(first)
        c = self.config
        max_timestamp = max(h.max_timestamp for _, h in headers)
        started = active.first_batch_timestamp
        if (
            active.size + size > c.segment_bytes
            or (started is not None and started >= 0 and max_timestamp - started > c.segment_ms)
            or active.index_full
            or not active.can_convert_to_relative_offset(last)
        ):
            return self._roll(first)
        return active

    def _roll(self, base_offset: int) -> Segment:
        if self.segments:
            self.segments[-1].on_become_inactive()
        segment = self._segment(base_offset)
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

    # ---- transactions --------------------------------------------------------------------------------
    def append_aborted_txns(self, completed: list[CompletedTxn], from_offset: int = 0) -> None:
        """Records the aborted ones ending at ``from_offset`` or later in the transaction index of the
        segment holding their marker (Kafka's LogSegment.updateTxnIndex); a rebuild from the log passes
        ``txn_index_stale_from``, the appends 0."""
        for txn in completed:
            if txn.is_aborted and txn.last_offset >= from_offset:
                segment = self.segments[self._segment_index(txn.last_offset)]
                segment.txn_index.append(
                    AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
                )

    def rebuild_producer_state(self, producers: ProducerStateTable, high_watermark: int) -> None:
        """The producer state (open transactions included) from the batches of the whole log, and the
        aborted-transaction indexes of the segments recovery reset (Kafka rebuilds from a snapshot and
        the log after it; no snapshot is kept here)."""
        position, end = self.log_start_offset, self.log_end_offset
        while position < end:
            chunk = self.read(position, 4 * 1024 * 1024)
            if not chunk:
                break
            batches = list(iter_batches(chunk))
            completed = producers.append(chunk, [h for _, h in batches], [pos for pos, _ in batches])
            if completed:
                self.append_aborted_txns(completed, self.txn_index_stale_from)
                producers.on_high_watermark_updated(high_watermark)
            position = batches[-1][1].next_offset
        self.txn_index_stale_from = LONG_MAX

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), from the segment
        holding ``fetch_offset`` on until an index says no later one can (Kafka's
        UnifiedLog.collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        for segment in self.segments[self._segment_index(fetch_offset) :]:
            txns, complete = segment.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)
            found += txns
            if complete:
                break
        return found

    # ---- truncation ----------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Drops everything at or after ``offset`` (a follower diverged from its leader)."""
        if offset >= self.log_end_offset:
            # The epoch cache is truncated all the same (Kafka's UnifiedLog.truncateTo): a broker that
            # became leader assigned its epoch at its log end and may have lost leadership before any
            # append; kept, that epoch made every fetch diverge again at the same offset, forever.
            self.epochs.truncate_from_end(self.log_end_offset)
            return
        if offset < self.log_start_offset:  # as Kafka: nothing below the start is kept
            self.truncate_fully_and_start_at(offset)
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
        self.log_start_offset = offset

    # ---- log start offset and retention --------------------------------------------------------------
    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Moves the log start offset forward to ``offset`` (never back, never past the log end); the
        caller keeps it at or below the high watermark. True if it moved."""
        offset = min(offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.epochs.truncate_from_start(offset)
        return True

    def delete_old_segments(self, now_ms: int, high_watermark: int) -> list[Path]:
        """Kafka's UnifiedLog.deleteOldSegments: deletes the segments wholly below the log start offset,
        then (with cleanup.policy delete) the oldest past retention.bytes, then those whose largest
        timestamp is older than retention.ms. Only segments below the high watermark go, never the
        active one. Returns the files renamed ``.deleted`` for the caller to remove after
        file.delete.delay.ms."""
        renamed = self._delete_segments(
            lambda seg, nxt: nxt.base_offset <= self.log_start_offset, high_watermark
        )
        c = self.config
        if not c.delete_enabled:
            return renamed
        if c.retention_bytes >= 0:
            excess = self.size_bytes - c.retention_bytes

            def over_size(seg: Segment, _next: Segment) -> bool:
                nonlocal excess
                if excess - seg.size < 0:
                    return False
                excess -= seg.size
                return True

            renamed += self._delete_segments(over_size, high_watermark)
        if c.retention_ms >= 0:
            renamed += self._delete_segments(
                lambda seg, _next: now_ms - _largest_timestamp(seg) > c.retention_ms, high_watermark
            )
        return renamed

    def _delete_segments(
        self, predicate: Callable[[Segment, Segment], bool], high_watermark: int
    ) -> list[Path]:
        count = 0
        while count + 1 < len(self.segments):
            segment, following = self.segments[count], self.segments[count + 1]
            if high_watermark < following.base_offset or not predicate(segment, following):
                break
            count += 1
        if not count:
            return []
        doomed = self.segments[:count]
        del self.segments[:count]
        del self._base_offsets[:count]
        renamed = [path for segment in doomed for path in segment.rename_to_deleted()]
        if self.segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
            self.epochs.truncate_from_start(self.log_start_offset)
        # Nothing below the first segment is left to recover (Kafka moves its recovery point along too).
        self.recovery_point = max(self.recovery_point, self.segments[0].base_offset)
        log.info(
            "deleted log segments",
            dir=str(self.dir),
            segments=[s.base_offset for s in doomed],
            log_start_offset=self.log_start_offset,
        )
        return renamed

    # ---- compaction ----------------------------------------------------------------------------------
    def cleanable_snapshots(self, high_watermark: int) -> list[SegmentSnapshot]:
        """The segments a compaction pass may rewrite: inactive and wholly below ``high_watermark``
        (the broker passes its last stable offset: no undecided transaction is cleaned, as Kafka's
        firstUncleanableOffset)."""
        return [
            SegmentSnapshot(segment.base_offset, segment.size, segment.max_timestamp, segment.log_path)
            for segment, following in zip(self.segments, self.segments[1:], strict=False)
            if following.base_offset <= high_watermark
        ]

    def replace_cleaned(self, cleaned: list[CleanedSegment]) -> bool:
        """Swaps cleaned copies in for their segments (on the event loop, between reads); False, and
        nothing changed, if any of those segments changed since the pass began."""
        work = self.dir / CLEANING_DIR
        position = {segment.base_offset: i for i, segment in enumerate(self.segments)}
        for copy in cleaned:
            i = position.get(copy.snapshot.base_offset)
            if i is None or i == len(self.segments) - 1 or self.segments[i].size != copy.snapshot.size:
                shutil.rmtree(work, ignore_errors=True)
                return False
        self.tail.drop(self)
        for copy in cleaned:
            i = position[copy.snapshot.base_offset]
            old = self.segments[i]
            old.close()
            # The indexes go first: a crash before the new ones are in place rebuilds them on open.
            old.index_path.unlink(missing_ok=True)
            old.time_index_path.unlink(missing_ok=True)
            for path in (old.log_path, old.index_path, old.time_index_path):
                os.replace(copy.directory / path.name, path)
            txn_index = copy.directory / old.txn_index.path.name  # only if it keeps an entry
            if txn_index.exists():
                os.replace(txn_index, old.txn_index.path)
            else:
                old.txn_index.path.unlink(missing_ok=True)
            new = self._segment(old.base_offset)
            if not new.load_index():
                new.recover()
            self.segments[i] = new
        # Segments the pass emptied go (never the first: it holds the log start; Kafka merges them).
        emptied = [s for s in self.segments[1:-1] if s.size == 0]
        for segment in emptied:
            self.segments.remove(segment)
            segment.delete()
        self._base_offsets = [s.base_offset for s in self.segments]
        shutil.rmtree(work, ignore_errors=True)
        return True

    # ---- lookups by timestamp ------------------------------------------------------------------------
    def fetch_offset_by_timestamp(self, target: int, max_offset: int) -> tuple[int, int] | None:
        """``time_lookup.offset_by_timestamp`` over this log's segments from its log start."""
        return time_lookup.offset_by_timestamp(self.segments, self.log_start_offset, target, max_offset)

    def fetch_max_timestamp(self, max_offset: int) -> tuple[int, int] | None:
        """``time_lookup.max_timestamp`` over this log's segments from its log start."""
        return time_lookup.max_timestamp(self.segments, self.log_start_offset, max_offset, self.read)

    def close(self) -> None:
        self.tail.drop(self)
        for segment in self.segments:
            segment.close()


def _largest_timestamp(segment: Segment) -> int:
    """Kafka's LogSegment.largestTimestamp: the largest record timestamp, else the file's mtime."""
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    try:
        return int(segment.log_path.stat().st_mtime * 1000)
    except FileNotFoundError:
        return 0


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


def _tail_keeping(records: bytes | memoryview) -> Literal["as is", "copied"] | None:
    """How the tail cache may keep batches appended from ``records``: "as is" when they cannot change and
    hold little else alive (``bytes``, or a read-only view of a ``bytes`` frame at most twice their size:
    a produced partition's records cut from its request frame, protocol/produce_request); "copied" when
    the frame around the view is larger (many partitions, or bytes after the body: a cached view would
    keep the whole frame alive while the cache's budget counts only the batch); None for a view of a
    buffer the next read overwrites."""
    if isinstance(records, bytes):
        return "as is"
    if not (records.readonly and isinstance(records.obj, bytes)):
        return None
    return "as is" if len(records.obj) <= 2 * len(records) else "copied"
