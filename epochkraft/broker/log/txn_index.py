"""A segment's aborted-transaction index (``<base>.txnindex``), as Kafka's TransactionIndex.

One entry per transaction aborted by a marker in the segment, in Kafka's on-disk format (34 bytes,
big-endian): version i16 (0), producerId i64, firstOffset i64, lastOffset i64 (the abort marker's
offset), lastStableOffset i64 (the partition's last stable offset once the abort was written). A
read_committed fetch collects the entries overlapping what it read, so the consumer can drop the aborted
records (``collect_aborted_txns``, Kafka's collectAbortedTxns). The file is created with its first entry;
the entries are few and are kept in memory as well.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

ENTRY = struct.Struct(">hqqqq")
CURRENT_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = _load(path)

    def append(self, txn: AbortedTxn) -> None:
        """Adds an entry; its last offset must follow the last one's (Kafka's TransactionIndex.append)."""
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction ending at {txn.last_offset} not after the last one "
                f"({self.entries[-1].last_offset}) in {self.path}"
            )
        self.entries.append(txn)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, _encode(txn))
        finally:
            os.close(fd)

    def flush(self) -> None:
        """fsyncs the file (Kafka's TransactionIndex.flush, called by LogSegment.flush): a segment below
        the recovery point is not recovered after a crash, so an entry lost there would leave its
        aborted records visible to read_committed consumers for good."""
        fsync_path(self.path)

    def truncate_to(self, offset: int) -> None:
        """Drops the entries of transactions aborted at or after ``offset`` (a truncated log)."""
        kept = [txn for txn in self.entries if txn.last_offset < offset]
        if len(kept) != len(self.entries):
            self._rewrite(kept)

    def reset(self) -> None:
        """Forgets every entry (the segment is being recovered; the entries are rebuilt from the log)."""
        self._rewrite([])

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The transactions aborted here that overlap [fetch_offset, upper_bound_offset), and whether
        the search may stop: an entry whose last stable offset reaches the upper bound means no
        transaction started below the bound was still open, so none is aborted in a later segment."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        self.entries = entries
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        self.path.write_bytes(b"".join(map(_encode, entries)))


def fsync_path(path: Path) -> None:
    """fsyncs a file by its path; nothing if it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode(txn: AbortedTxn) -> bytes:
    return ENTRY.pack(
        CURRENT_VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset
    )


def _load(path: Path) -> list[AbortedTxn]:
    """The entries of an index file; a torn last entry (a crash mid-append) is ignored, as the segment's
    recovery rebuilds the index from the log."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % ENTRY.size
    entries = []
    for version, producer_id, first, last, lso in ENTRY.iter_unpack(data[:whole]):
        if version != CURRENT_VERSION:
            raise ValueError(f"unknown aborted transaction entry version {version} in {path}")
        entries.append(AbortedTxn(producer_id, first, last, lso))
    return entries
