"""The metadata log: offset-numbered batches of metadata records, kept encoded for Fetch.

Sans-IO: ``append`` encodes a batch (RecordBatch v2, as ``__cluster_metadata`` holds in Kafka) and tells
its listeners, one of which the daemon uses to write the batch to disk; ``load`` rebuilds the log from
those bytes at startup. With a single controller every batch is committed once appended; in a Raft quorum
(controller/quorum.py) this log holds only what the quorum committed, added by ``add_committed``, and is
what brokers fetch.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import Protocol

from epochkraft.protocol.metadata_codec import metadata_batch, read_metadata_batches
from epochkraft.protocol.metadata_records import MetadataRecord
from epochkraft.protocol.records import iter_batches, parse_header

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID_INT = 1  # 00000000-0000-0000-0000-000000000001, as in Kafka


class ControllerLog(Protocol):
    """What the Controller asks of its log: its end, and appends. A MetadataLog with one controller; in a
    quorum the Raft leader's log (controller/quorum.py's RaftBackedLog)."""

    @property
    def next_offset(self) -> int: ...

    def append(self, records: list[MetadataRecord], now_ms: int, leader_epoch: int = 0) -> int: ...


class MetadataLog:
    def __init__(self, start_offset: int = 0) -> None:
        self._base_offsets: list[int] = []
        self._batches: list[bytes] = []
        # Below start_offset the records are in a snapshot only: a fetch from there gets the snapshot's id.
        self.start_offset = start_offset
        self.snapshot_epoch = 0  # the epoch of the snapshot at start_offset
        self.next_offset = start_offset
        self.listeners: list[Callable[[int, bytes], None]] = []

    def __len__(self) -> int:
        return self.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(len(b) for b in self._batches)

    def append(self, records: list[MetadataRecord], now_ms: int, leader_epoch: int = 0) -> int:
        """Appends one batch; returns its base offset."""
        base = self.next_offset
        data = metadata_batch(base, records, leader_epoch=leader_epoch, timestamp_ms=now_ms)
        self._base_offsets.append(base)
        self._batches.append(data)
        self.next_offset = base + len(records)
        for listener in self.listeners:
            listener(base, data)
        return base

    def add_committed(self, base_offset: int, data: bytes) -> None:
        """Adds a batch the Raft quorum committed (a controller in a quorum publishes only those)."""
        if base_offset != self.next_offset:
            raise ValueError(f"metadata log gap: expected offset {self.next_offset}, found {base_offset}")
        self._base_offsets.append(base_offset)
        self._batches.append(data)
        self.next_offset = parse_header(data).next_offset
        for listener in self.listeners:
            listener(base_offset, data)

    def load(self, data: bytes, replay_from: int = 0) -> Iterator[tuple[int, MetadataRecord]]:
        """Adds batches read from disk (offsets must continue the log) and yields their records to replay,
        those from ``replay_from`` on (the ones before it come from a snapshot; their batches are kept,
        not decoded, for the brokers that fetch the log from its start)."""
        for pos, header in iter_batches(data):
            if header.base_offset != self.next_offset:
                raise ValueError(
                    f"metadata log gap: expected offset {self.next_offset}, found {header.base_offset}"
                )
            raw = bytes(data[pos : pos + header.size])
            self._base_offsets.append(header.base_offset)
            self._batches.append(raw)
            self.next_offset = header.next_offset
            if header.next_offset > replay_from:
                for offset, record in read_metadata_batches(raw):
                    if offset >= replay_from:
                        yield offset, record

    def trim_to(self, offset: int, snapshot_epoch: int) -> list[bytes]:
        """Drops the batches below ``offset`` (a batch boundary a snapshot ends at); returns the batches
        kept, for the file to be rewritten from them."""
        index = bisect.bisect_left(self._base_offsets, offset)
        if offset <= self.start_offset or (
            index < len(self._base_offsets) and self._base_offsets[index] != offset
        ):
            return self._batches
        if index == len(self._base_offsets) and offset != self.next_offset:
            return self._batches
        del self._base_offsets[:index]
        del self._batches[:index]
        self.start_offset = offset
        self.snapshot_epoch = snapshot_epoch
        return self._batches

    def reset_to(self, offset: int, snapshot_epoch: int) -> None:
        """Empties the log, which then starts at a snapshot's end (a voter that installed one)."""
        self._base_offsets.clear()
        self._batches.clear()
        self.start_offset = self.next_offset = offset
        self.snapshot_epoch = snapshot_epoch

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``; at least one batch even if over ``max_bytes``."""
        if offset >= self.next_offset or not self._batches:
            return b""
        index = max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)
        out: list[bytes] = []
        size = 0
        for data in self._batches[index:]:
            if out and size + len(data) > max_bytes:
                break
            out.append(data)
            size += len(data)
        return b"".join(out)

    def records(self) -> Iterator[tuple[int, MetadataRecord]]:
        for data in self._batches:
            yield from read_metadata_batches(data)
