"""Lookups by timestamp over a log's segments (ListOffsets by timestamp and -3), through their time indexes.

As Kafka's UnifiedLog.fetchOffsetByTimestamp and LogSegment.findOffsetByTimestamp: segments are skipped by
their largest timestamp (held in memory), then one time index bisect, a short header scan and one decoded
batch answer, so the work does not grow with the log's size.
"""

from __future__ import annotations

from collections.abc import Callable

from epochkraft.broker.log.segment import Segment
from epochkraft.protocol.records import HEADER_SIZE, decode_batch, iter_batches, parse_header


def offset_by_timestamp(
    segments: list[Segment], log_start_offset: int, target: int, max_offset: int
) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record from the log start whose timestamp is at least
    ``target``, or None if there is none below ``max_offset`` (the high watermark). Segments are
    skipped by their largest timestamp (held in memory), then one time index lookup and a short
    header scan find it: the work does not grow with the log's size."""
    for segment in segments:
        if segment.base_offset >= max_offset:
            return None
        if segment.max_timestamp < target or segment.next_offset <= log_start_offset:
            continue
        found = segment.find_offset_by_timestamp(target, log_start_offset)
        if found is not None:
            return found if found[1] < max_offset else None
    return None


def max_timestamp(
    segments: list[Segment],
    log_start_offset: int,
    max_offset: int,
    read: Callable[[int, int, int], bytes | memoryview],
) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record holding the log's largest timestamp (ListOffsets -3,
    KIP-734), or None if the log holds no timestamp or that record is at or past ``max_offset``
    (as Kafka's Partition.fetchOffsetForTimestamp). Each segment's largest timestamp is held in
    memory; one batch is decoded."""
    best: tuple[int, int] | None = None  # (timestamp, offset of the record)
    best_segment: Segment | None = None
    for segment in segments:
        if segment.next_offset <= log_start_offset or segment.max_timestamp <= (best[0] if best else -1):
            continue
        if (
            segment.base_offset < log_start_offset
            and _batch_base(segment, segment.offset_of_max_timestamp) < log_start_offset
        ):
            # Its largest timestamp may lie below the log start (DeleteRecords inside this
            # segment): only what remains counts, found by reading it.
            top = _max_timestamp_record(segment, log_start_offset, read)
            if top is not None and top[0] > (best[0] if best else -1):
                best, best_segment = top, None
        else:
            best, best_segment = (segment.max_timestamp, segment.offset_of_max_timestamp), segment
    if best is None:
        return None
    if best_segment is not None:  # the offset is that of the batch: find the record in it
        position = best_segment.position_of(best[1])
        if position is None:
            return None
        header = parse_header(best_segment.read_at(position, HEADER_SIZE))
        batch = decode_batch(best_segment.read_at(position, header.size))
        best = next(
            ((best[0], batch.offset_of(r)) for r in batch.records if batch.timestamp_of(r) == best[0]),
            None,
        )
    return best if best is not None and best[1] < max_offset else None


def _batch_base(segment: Segment, offset: int) -> int:
    position = segment.position_of(offset)
    if position is None:
        return -1
    return parse_header(segment.read_at(position, HEADER_SIZE)).base_offset


def _max_timestamp_record(
    segment: Segment, log_start_offset: int, read: Callable[[int, int, int], bytes | memoryview]
) -> tuple[int, int] | None:
    top: tuple[int, int] | None = None
    data = read(log_start_offset, segment.size, segment.next_offset)
    for pos, _header in iter_batches(data):
        batch = decode_batch(data, pos)
        for record in batch.records:
            offset, timestamp = batch.offset_of(record), batch.timestamp_of(record)
            if offset >= log_start_offset and timestamp > (top[0] if top else -1):
                top = (timestamp, offset)
    return top
