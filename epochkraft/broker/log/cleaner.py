"""Log compaction: the latest record per key, as Kafka's LogCleaner, for cleanup.policy compact.

A pass works on a log's cleanable segments: every inactive segment wholly below the high watermark
(Kafka's firstUncleanableOffset). ``compact`` runs on a worker thread and never touches the live segment
objects: it opens the files itself, builds the map of each key's last offset (a SkimpyOffsetMap of
log.cleaner.dedupe.buffer.size bytes) from the first dirty offset until the map is full, then writes a
cleaned copy of each segment below where the map stopped into ``.cleaning/``; records past that point
stay, and the next pass maps on from there (Kafka's Cleaner.doClean): a batch whose records all stay is copied as it is, one
that loses some is rewritten with its base offset, last offset delta (so offsets never move and every
batch keeps its offset range), producer fields and its remaining records; one that loses all goes.
Records without a key go, tombstones (null values) go once their segment's largest timestamp is
delete.retention.ms old. Transactions follow Kafka's CleanedTransactionMetadata: the cleanable range ends
at the last stable offset (the caller's snapshots), the batches of aborted transactions (from the
aborted-transaction indexes) go and never enter the offset map, so they cannot shadow a committed value;
a marker stays while any batch of its transaction remains, then goes like a tombstone once its segment is
delete.retention.ms old; an aborted transaction keeps its index entry while its marker and some of its
batches stay (the cleaned copy gets an index of those). Each producer's last entry stays, as Kafka's
checkBatchRetention with isBatchLastRecordOfProducer (RETAIN_EMPTY): its last data batch, emptied of its
records if they go (aborted or compacted away), keeps its offsets, epoch and sequences; its last marker,
if one with its current epoch came after its last batch, keeps its record too (Kafka keeps that marker's
coordinator epoch in a producer-state snapshot; here the state is rebuilt from the log). Reads are
throttled to ``max_bytes_per_second`` (log.cleaner.io.max.bytes.per.second). ``PartitionLog.replace_cleaned`` then swaps the copies in on the
event loop, between two reads, so a follower's or consumer's fetch sees either the old segment or the
cleaned one, never a mix, and a pass whose segments changed meanwhile (deleted, truncated) is dropped.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from epochkraft.broker.log.offset_map import SkimpyOffsetMap
from epochkraft.broker.log.segment import Segment
from epochkraft.broker.log.txn_index import AbortedTxn, TransactionIndex, fsync_path
from epochkraft.broker.producer_state import ABORT, COMMIT, CONTROL_KEY, LastRecord
from epochkraft.protocol.records import (
    HEADER_SIZE,
    Compression,
    RecordBatch,
    decode_batch,
    encode_batch,
    parse_header,
)

# Breaks the rule that aborted records never enter the offset map: an aborted value then shadows the
# committed one before it, which compaction removes (tests show the checks catch it).
UNSAFE_CLEANER_MAPS_ABORTED_RECORDS_FOR_TESTS = False

CLEANING_DIR = ".cleaning"
READ_CHUNK = 1 << 20
DEDUPE_BUFFER_SIZE = 134217728  # log.cleaner.dedupe.buffer.size
LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """What the event loop saw of a segment when the pass began (checked again before the swap)."""

    base_offset: int
    size: int
    max_timestamp: int
    log_path: Path


@dataclass(frozen=True, slots=True)
class CleanedSegment:
    snapshot: SegmentSnapshot
    directory: Path  # holds <base>.log, .index, .timeindex (and .txnindex), rebuilt for the cleaned copy
    size: int


@dataclass(slots=True)
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    seconds: float = 0.0


class Throttle:
    """Sleeps so that reads stay under ``max_bytes_per_second`` (Kafka's cleaner Throttler)."""

    def __init__(self, max_bytes_per_second: float) -> None:
        self.rate = max_bytes_per_second
        self.started = time.monotonic()
        self.done = 0

    def charge(self, nbytes: int) -> None:
        self.done += nbytes
        if self.rate <= 0 or self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (time.monotonic() - self.started)
        if ahead > 0:
            time.sleep(ahead)


class CleanedTransactionMetadata:
    """Kafka's CleanedTransactionMetadata: which batches of a pass belong to aborted transactions, and
    which markers may go. ``aborted``: the aborted transactions (from the transaction indexes) that may
    overlap the pass, taken in by first offset as the batches are read in log order."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._aborted = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        # producer id -> (its aborted transaction under way, whether a batch of it was seen)
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: list[AbortedTxn] = []  # entries the cleaned segment's index keeps

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0].first_offset <= offset:
            txn = self._aborted.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """A data batch: True if it belongs to an aborted transaction (its records go)."""
        self._consume_aborted_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            self._ongoing_aborted[batch.producer_id] = (ongoing[0], True)
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """A marker: True if it may go (none of its transaction's batches was seen in this pass, so
        none remains), once past delete.retention.ms."""
        self._consume_aborted_up_to(batch.last_offset)
        if not batch.records:
            return True  # emptied by an earlier pass
        key = batch.records[0].key
        kind = CONTROL_KEY.unpack_from(key)[1] if key is not None and len(key) >= CONTROL_KEY.size else -1
        if kind == ABORT:
            ongoing = self._ongoing_aborted.pop(batch.producer_id, None)
            if ongoing is not None and ongoing[1]:
                self.cleaned_index.append(ongoing[0])
                return False
            return True
        if kind == COMMIT:
            if batch.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(batch.producer_id)
                return False
            return True
        return False


def _batches(path: Path, throttle: Throttle, stats: CleanStats) -> Iterator[tuple[int, bytes]]:
    """(position, whole batch bytes) of each batch in a segment file, read in chunks from a descriptor
    of the cleaner's own (a segment deleted meanwhile is still readable through it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            chunk = os.pread(fd, min(READ_CHUNK, size - position), position)
            throttle.charge(len(chunk))
            stats.bytes_read += len(chunk)
            offset = 0
            while offset + HEADER_SIZE <= len(chunk):
                header = parse_header(chunk, offset)
                if offset + header.size > len(chunk):
                    break
                yield position + offset, chunk[offset : offset + header.size]
                offset += header.size
            if offset == 0:  # one batch larger than the chunk
                header = parse_header(chunk, 0)
                whole = os.pread(fd, header.size, position)
                throttle.charge(len(whole))
                yield position, whole
                offset = header.size
            position += offset
    finally:
        os.close(fd)


def compact(
    directory: Path,
    snapshots: list[SegmentSnapshot],
    now_ms: int,
    delete_retention_ms: int,
    max_bytes_per_second: float = float("inf"),
    *,
    dedupe_buffer_size: int = DEDUPE_BUFFER_SIZE,
    load_factor: float = LOAD_FACTOR,
    first_dirty_offset: int = 0,
    aborted: list[AbortedTxn] | None = None,
    last_records: dict[int, LastRecord] | None = None,
) -> tuple[list[CleanedSegment], CleanStats, int | None]:
    """Writes a cleaned copy of the snapshotted segments (worker thread; no live object is touched), as
    Kafka's Cleaner.doClean: the offset map is built from ``first_dirty_offset`` until it is full, and the
    cleaned range ends there. Returns the copies, the stats, and the offset the range ended at (None: the
    map held every key, so every segment was cleaned). ``aborted``: the log's aborted transactions from
    the first snapshot on (``PartitionLog.collect_aborted_txns``); ``last_records``: each producer's last
    entry when the pass began (``ProducerStateTable.last_records_of_active_producers``), kept."""
    started = time.monotonic()
    stats = CleanStats()
    throttle = Throttle(max_bytes_per_second)
    offset_map = SkimpyOffsetMap(dedupe_buffer_size)
    try:
        full = build_offset_map(
            snapshots,
            offset_map,
            first_dirty_offset,
            load_factor,
            throttle,
            stats,
            CleanedTransactionMetadata(aborted or []),
        )
        end_offset = offset_map.latest_offset + 1 if full else None
        work = directory / CLEANING_DIR
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        transactions = CleanedTransactionMetadata(aborted or [])
        cleaned = [
            _clean_segment(
                work,
                snapshot,
                offset_map,
                end_offset,
                now_ms,
                delete_retention_ms,
                throttle,
                stats,
                transactions,
                last_records or {},
            )
            for snapshot in snapshots
            if end_offset is None or snapshot.base_offset < end_offset
        ]
    finally:
        offset_map.close()
    stats.seconds = time.monotonic() - started
    return cleaned, stats, end_offset


def build_offset_map(
    snapshots: list[SegmentSnapshot],
    offset_map: SkimpyOffsetMap,
    start_offset: int,
    load_factor: float,
    throttle: Throttle,
    stats: CleanStats,
    transactions: CleanedTransactionMetadata | None = None,
) -> bool:
    """Kafka's buildOffsetMap / buildOffsetMapForSegment: each key's last offset from ``start_offset`` on,
    until the map holds ``load_factor`` of its slots; True if it filled before the last segment's end.
    The records of aborted transactions are left out."""
    transactions = transactions or CleanedTransactionMetadata([])
    # One slot always stays empty, so a probe always ends (a load factor of 1 or more would fill them all).
    max_desired_map_size = min(int(offset_map.slots * load_factor), offset_map.slots - 1)
    following: list[int | None] = [s.base_offset for s in snapshots[1:]]
    for snapshot, next_base in zip(snapshots, [*following, None], strict=False):
        if next_base is not None and next_base <= start_offset:
            continue  # wholly below the dirty section
        for _pos, raw in _batches(snapshot.log_path, throttle, stats):
            batch = decode_batch(raw)
            if batch.is_control:
                transactions.on_control_batch_read(batch)
            elif not transactions.on_batch_read(batch) or UNSAFE_CLEANER_MAPS_ABORTED_RECORDS_FOR_TESTS:
                for record in batch.records:
                    offset = batch.offset_of(record)
                    if record.key is not None and offset >= start_offset:
                        if offset_map.size >= max_desired_map_size:
                            return True
                        offset_map.put(record.key, offset)
            if batch.last_offset >= start_offset:
                offset_map.update_latest_offset(batch.last_offset)
    return False


def _clean_segment(
    work: Path,
    snapshot: SegmentSnapshot,
    offset_map: SkimpyOffsetMap,
    end_offset: int | None,
    now_ms: int,
    delete_retention_ms: int,
    throttle: Throttle,
    stats: CleanStats,
    transactions: CleanedTransactionMetadata,
    last_records: dict[int, LastRecord],
) -> CleanedSegment:
    horizon_passed = 0 <= snapshot.max_timestamp < now_ms - delete_retention_ms
    target = work / f"{snapshot.base_offset:020d}"
    target.mkdir()
    out = Segment(target, snapshot.base_offset)
    pieces: list[bytes] = []
    transactions.cleaned_index = []
    for _pos, raw in _batches(snapshot.log_path, throttle, stats):
        batch = decode_batch(raw)
        stats.records_read += len(batch.records)
        last = _is_last_record_of_producer(batch, last_records)
        if batch.is_control:
            discard = transactions.on_control_batch_read(batch) and horizon_passed
            if last or not discard:
                pieces.append(raw)
            continue
        if transactions.on_batch_read(batch):  # an aborted transaction's batch
            if last:
                pieces.append(_empty(batch))
            continue

        kept = [
            r
            for r in batch.records
            if _retained(
                offset_map, end_offset, batch.offset_of(r), r.key, r.value is None and horizon_passed
            )
        ]
        stats.records_kept += len(kept)
        if not kept:
            if last:
                pieces.append(_empty(batch))
        elif len(kept) == len(batch.records):
            pieces.append(raw)
        else:
            pieces.append(_rewrite(batch, kept))
    if pieces:
        data = b"".join(pieces)
        os.pwrite(out.fd, data, 0)
        out.size = len(data)
        os.fsync(out.fd)
    out.recover()  # builds both indexes for the cleaned copy
    out.close()
    index = TransactionIndex(out.txn_index.path)
    for txn in transactions.cleaned_index:
        index.append(txn)
    # On disk before the copy is swapped in, below the recovery point: it is not recovered after a crash.
    for path in (out.index_path, out.time_index_path, out.txn_index.path):
        fsync_path(path)
    stats.bytes_written += out.size
    return CleanedSegment(snapshot, target, out.size)


def _retained(
    offset_map: SkimpyOffsetMap, end_offset: int | None, offset: int, key: bytes | None, deletable: bool
) -> bool:
    """Kafka's shouldRetainRecord: past the cleaned range, kept; else a record with a key kept if no later
    offset of its key is mapped, unless it is a tombstone past delete.retention.ms."""
    if end_offset is not None and offset >= end_offset:
        return True
    if key is None:
        return False
    return offset >= offset_map.get(key) and not deletable


def _is_last_record_of_producer(batch: RecordBatch, last_records: dict[int, LastRecord]) -> bool:
    """Kafka's isBatchLastRecordOfProducer: the producer's last data batch, or, when a marker that
    bumped its epoch came after it, a marker of that epoch."""
    last = last_records.get(batch.producer_id) if batch.producer_id >= 0 else None
    if last is None:
        return False
    if last.last_data_offset is not None:
        return batch.last_offset == last.last_data_offset
    return batch.is_control and batch.producer_epoch == last.producer_epoch


def _empty(batch: RecordBatch) -> bytes:
    """The batch's header with no records (Kafka's RETAIN_EMPTY, writeEmptyHeader): same offsets,
    producer id, epoch and base sequence, uncompressed, timestamped with its max timestamp."""
    return encode_batch(
        RecordBatch(
            batch.base_offset,
            batch.partition_leader_epoch,
            batch.attributes,
            batch.last_offset_delta,
            batch.max_timestamp,
            batch.max_timestamp,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            [],
        ),
        Compression.NONE,
    )


def _rewrite(batch: RecordBatch, kept: list) -> bytes:
    """The batch with only ``kept`` records: same base offset and last offset delta (the offsets of the
    records and the batch's range do not move), same producer fields, timestamps as they were."""
    return encode_batch(
        RecordBatch(
            batch.base_offset,
            batch.partition_leader_epoch,
            batch.attributes,
            batch.last_offset_delta,
            batch.base_timestamp,
            max(batch.timestamp_of(r) for r in kept),
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            list(kept),
        )
    )
