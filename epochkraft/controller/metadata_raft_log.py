"""The Raft log of a controller in a quorum, on disk as Kafka keeps ``__cluster_metadata``-0.

Each Raft entry is one RecordBatch in ``<data-dir>/__cluster_metadata-0/00000000000000000000.log``: a
metadata batch (one offset per record, the batch's partition leader epoch the Raft epoch) or, first in each
epoch, a control batch holding the new leader's LeaderChangeMessage (ControlRecordType 2, as Kafka's
KafkaRaftClient.onBecomeLeader writes it). Offsets are Kafka's: brokers fetch the committed part by them.

Appends are buffered; ``flush`` makes them durable and the daemon calls it before it sends what the Raft
core produced (Kafka flushes before a follower fetches on and before the leader counts its own end
offset). Truncation (a follower whose uncommitted tail diverged) cuts the file at once. A torn tail left
by a crash is cut off when the log is opened.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from epochkraft.metadata.segment import find_segment, rewrite_segment
from epochkraft.metadata.snapshot import SnapshotError, SnapshotId
from epochkraft.metadata.snapshot_file import read_snapshot_file, snapshot_ids
from epochkraft.protocol.records import parse_header
from epochkraft.raft.batches import (
    MetadataLogError,
    batch_entry,
    entry_batch,
    read_membership,
    split_batches,
)
from epochkraft.raft.log import LogEntry, RaftLog
from epochkraft.raft.voter_set import VoterSet

LOG_DIR_NAME = "__cluster_metadata-0"


class MetadataRaftLog(RaftLog):
    def __init__(self, data_dir: Path | None = None, *, fsync: bool = True) -> None:
        super().__init__()
        self.raw: list[bytes] = []  # each entry's batch
        self._positions: list[int] = []  # each entry's file position
        self._size = 0
        self._dirty = False
        self.fsync = fsync
        self.path: Path | None = None
        self._file: BinaryIO | None = None
        self.torn_tail_bytes = 0
        if data_dir is not None:
            directory = data_dir / LOG_DIR_NAME
            directory.mkdir(parents=True, exist_ok=True)
            self.path, base = find_segment(directory)
            ends = [s for s in snapshot_ids(directory) if s.end_offset == base]
            if base > 0:  # the records before it are in the snapshot that ends there
                self._end = self.start_offset = base
                self.snapshot_epoch = ends[-1].epoch if ends else 0
                self.epochs = [(self.snapshot_epoch, base)]
            if ends:
                # the voter set and kraft.version below the log (KRaftControlRecordStateMachine reads
                # the snapshot, or the bootstrap checkpoint 0-0, before the log's records)
                self._load_membership(directory, ends[-1])
            self._open()

    def _load_membership(self, directory: Path, snapshot_id: SnapshotId) -> None:
        try:
            snapshot = read_snapshot_file(directory, snapshot_id)
        except (OSError, SnapshotError):
            return  # the daemon refuses to start from a log without a readable snapshot below it
        voters, version = read_membership(snapshot.membership)
        if voters is not None or version:
            self.voter_history.reset(snapshot_id.end_offset - 1, voters, version)

    @property
    def directory(self) -> Path | None:
        return None if self.path is None else self.path.parent

    def _open(self) -> None:
        assert self.path is not None
        data = self.path.read_bytes() if self.path.exists() else b""
        for batch in split_batches(data):
            entry = batch_entry(batch)
            self._record(entry, batch)
        self.torn_tail_bytes = len(data) - self._size
        self._file = open(self.path, "r+b" if self.path.exists() else "w+b")  # noqa: SIM115 - daemon's life
        if self.torn_tail_bytes:
            self._file.truncate(self._size)
        self._file.seek(self._size)

    def _record(self, entry: LogEntry, batch: bytes) -> None:
        base = self.end_offset
        if parse_header(batch).base_offset != base:
            raise MetadataLogError(f"metadata log gap: expected offset {base}, found a batch at another")
        super().append(entry)
        self.raw.append(batch)
        self._positions.append(self._size)
        self._size += len(batch)

    def append(self, entry: LogEntry) -> int:
        batch = entry_batch(entry, self.end_offset)
        self._record(entry, batch)
        if self._file is not None:
            self._file.write(batch)
            self._dirty = True
        return self.end_offset - 1

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        index = self.index_of(offset)
        super().truncate_to(offset)
        del self.raw[index:]
        size = self._positions[index]
        del self._positions[index:]
        self._size = size
        if self._file is not None:
            self._file.flush()
            self._file.truncate(size)
            self._file.seek(size)
            self._sync()

    def trim_to(self, offset: int) -> None:
        """Drops the entries below a snapshot's end, in memory and on disk (the file rewritten from there)."""
        index = self.index_of(offset)
        before = self.start_offset
        super().trim_to(offset)
        if self.start_offset == before:
            return
        del self.raw[:index]
        self._rewrite()

    def install_snapshot(
        self, end_offset: int, epoch: int, voters: VoterSet | None = None, kraft_version: int = 0
    ) -> None:
        super().install_snapshot(end_offset, epoch, voters, kraft_version)
        self.raw.clear()
        self._rewrite()

    def _rewrite(self) -> None:
        self._positions = []
        self._size = 0
        for batch in self.raw:
            self._positions.append(self._size)
            self._size += len(batch)
        if self._file is None or self.path is None:
            return
        self._file.close()
        self.path = rewrite_segment(self.path.parent, self.path, self.start_offset, self.raw, self.fsync)
        self._file = open(self.path, "r+b")  # noqa: SIM115 - held open for the daemon's life
        self._file.seek(self._size)
        self._dirty = False

    def flush(self) -> None:
        """Makes every append durable (before anything that counts on them is sent)."""
        if self._file is not None and self._dirty:
            self._file.flush()
            self._sync()
            self._dirty = False

    def _sync(self) -> None:
        if self.fsync and self._file is not None:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None

    def batches_from(self, index: int) -> list[tuple[int, bytes]]:
        """(base offset, batch) of each entry from index ``index`` on."""
        return list(zip(self.bases[index:], self.raw[index:], strict=True))
