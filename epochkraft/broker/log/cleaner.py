"""Log compaction: the latest record per key, as Kafka's LogCleaner, for cleanup.policy compact.

A pass works on a log's cleanable segments: every inactive segment wholly below the high watermark
(Kafka's firstUncleanableOffset). ``compact`` runs on a worker thread and never touches the live segment
objects: it opens the files itself, builds the map of each key's last offset over those segments, then
writes a cleaned copy of each into ``.cleaning/``: a batch whose records all stay is copied as it is, one
that loses some is rewritten with its base offset, last offset delta (so offsets never move and every
batch keeps its offset range), producer fields and its remaining records; one that loses all goes.
Records without a key go, tombstones (null values) go once their segment's largest timestamp is
delete.retention.ms old, control batches stay. Reads are throttled to ``max_bytes_per_second``
(log.cleaner.io.max.bytes.per.second). ``PartitionLog.replace_cleaned`` then swaps the copies in on the
event loop, between two reads, so a follower's or consumer's fetch sees either the old segment or the
cleaned one, never a mix, and a pass whose segments changed meanwhile (deleted, truncated) is dropped.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from epochkraft.broker.log.segment import Segment
from epochkraft.protocol.records import (
    HEADER_SIZE,
    RecordBatch,
    decode_batch,
    encode_batch,
    parse_header,
)

CLEANING_DIR = ".cleaning"
READ_CHUNK = 1 << 20


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
    directory: Path  # holds <base>.log, .index and .timeindex, rebuilt for the cleaned copy
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
) -> tuple[list[CleanedSegment], CleanStats]:
    """Writes a cleaned copy of each snapshotted segment (worker thread; no live object is touched)."""
    started = time.monotonic()
    stats = CleanStats()
    throttle = Throttle(max_bytes_per_second)
    latest: dict[bytes, int] = {}
    for snapshot in snapshots:
        for _pos, raw in _batches(snapshot.log_path, throttle, stats):
            batch = decode_batch(raw)
            if batch.is_control:
                continue
            for record in batch.records:
                if record.key is not None:
                    latest[record.key] = batch.offset_of(record)
    work = directory / CLEANING_DIR
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    cleaned: list[CleanedSegment] = []
    for snapshot in snapshots:
        horizon_passed = 0 <= snapshot.max_timestamp < now_ms - delete_retention_ms
        target = work / f"{snapshot.base_offset:020d}"
        target.mkdir()
        out = Segment(target, snapshot.base_offset)
        pieces: list[bytes] = []
        for _pos, raw in _batches(snapshot.log_path, throttle, stats):
            batch = decode_batch(raw)
            stats.records_read += len(batch.records)
            if batch.is_control:
                pieces.append(raw)
                continue
            kept = [
                r
                for r in batch.records
                if r.key is not None
                and latest.get(r.key) == batch.offset_of(r)
                and not (r.value is None and horizon_passed)
            ]
            stats.records_kept += len(kept)
            if len(kept) == len(batch.records):
                pieces.append(raw)
            elif kept:
                pieces.append(_rewrite(batch, kept))
        if pieces:
            data = b"".join(pieces)
            os.pwrite(out.fd, data, 0)
            out.size = len(data)
            os.fsync(out.fd)
        out.recover()  # builds both indexes for the cleaned copy
        out.close()
        stats.bytes_written += out.size
        cleaned.append(CleanedSegment(snapshot, target, out.size))
    stats.seconds = time.monotonic() - started
    return cleaned, stats


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
