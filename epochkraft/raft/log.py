"""The replicated log as the Raft core sees it: entries with their leader epoch, and the epoch cache
(Kafka's LeaderEpochFileCache) that answers ``end_offset_for_epoch`` for divergence checks.

An entry may span several offsets (``records``): the controller daemon's entries are whole metadata
RecordBatches, one offset per record as in Kafka's ``__cluster_metadata``, and a batch is replicated,
committed and truncated whole (reads never split one, so every replica's end offset, and with it the high
watermark, falls on a batch boundary). The simulator's entries take one offset each.

The core reads and writes it through these methods only; a driver makes it durable (Kafka flushes before
a follower fetches on and before the leader counts its own end offset, so the simulator keeps the log
across crashes).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from epochkraft.raft.voter_set import (
    BOOTSTRAP_OFFSET,
    KRAFT_VERSION_1,
    KRaftVersionRecord,
    VoterSet,
    VoterSetHistory,
    VotersRecord,
)


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """The control record a new leader appends first in its epoch (Kafka's LeaderChangeMessage)."""

    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...] = ()


UNDEFINED_EPOCH = -1  # LeaderEpochFileCache's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    """Kafka's ValidOffsetAndEpoch: the kind and the (epoch, offset) that goes with it."""

    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"

    kind: str
    epoch: int
    offset: int


ControlRecord = LeaderChangeMessage | VotersRecord | KRaftVersionRecord


@dataclass(frozen=True, slots=True)
class LogEntry:
    epoch: int
    value: bytes | LeaderChangeMessage | VotersRecord | KRaftVersionRecord
    records: int = 1  # the offsets it takes
    # a control batch of several records (Kafka's new leader writes LeaderChangeMessage, KRaftVersionRecord
    # and VotersRecord in one): its bytes in ``value`` and its records decoded here, one per offset
    control: tuple[ControlRecord, ...] = ()

    @property
    def is_control(self) -> bool:
        return bool(self.control) or isinstance(self.value, ControlRecord)

    def control_records(self) -> tuple[ControlRecord, ...]:
        """The entry's control records in offset order (none for a metadata batch)."""
        if self.control:
            return self.control
        return (self.value,) if isinstance(self.value, ControlRecord) else ()


class RaftLog:
    """An in-memory log with an epoch cache; offsets start at 0."""

    def __init__(self, entries: list[LogEntry] | None = None) -> None:
        self.entries: list[LogEntry] = []
        self.bases: list[int] = []  # each entry's first offset
        self._end = 0
        # Below start_offset the log is a snapshot: entries up to there were committed and dropped
        # (trim_to), or never held (install_snapshot); snapshot_epoch is its last entry's epoch.
        self.start_offset = 0
        self.snapshot_epoch = 0
        # (epoch, start offset) in ascending order, as LeaderEpochFileCache
        self.epochs: list[tuple[int, int]] = []
        self.truncations = 0
        # the voter sets and kraft.versions its control records (and snapshot) hold
        self.voter_history = VoterSetHistory()
        for entry in entries or []:
            self.append(entry)

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def last_fetched_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else self.snapshot_epoch

    def index_of(self, offset: int) -> int:
        """The index of the entry holding ``offset`` (len(entries) at or past the end, 0 below the start)."""
        if offset >= self._end:
            return len(self.entries)
        return max(bisect.bisect_right(self.bases, offset) - 1, 0)

    def epoch_at(self, offset: int) -> int:
        return self.entries[self.index_of(offset)].epoch

    def append(self, entry: LogEntry) -> int:
        """Appends an entry; returns its last offset."""
        if self.epochs and entry.epoch < self.epochs[-1][0]:
            raise ValueError(f"epoch {entry.epoch} below the log's latest epoch {self.epochs[-1][0]}")
        # the voter set first: one it refuses (no overlapping majority) leaves the log as it was
        history = self.voter_history
        try:
            for offset, record in enumerate(entry.control_records(), self._end):
                if isinstance(record, VotersRecord):
                    history.add_voters_at(offset, record.voters)
                elif isinstance(record, KRaftVersionRecord):
                    history.add_kraft_version_at(offset, record.kraft_version)
        except ValueError:
            history.truncate_new_entries(self._end)  # a batch's earlier records go too
            raise
        if not self.epochs or entry.epoch > self.epochs[-1][0]:
            self.epochs.append((entry.epoch, self._end))
        self.entries.append(entry)
        self.bases.append(self._end)
        self._end += entry.records
        return self._end - 1

    def bootstrap(self, voters: VoterSet) -> None:
        """The bootstrap checkpoint of a disk formatted with its initial controllers (Kafka's 0-0.checkpoint
        with KRaftVersionRecord and VotersRecord): kraft.version 1 and these voters before any entry."""
        if self._end or self.voter_history.last_value() is not None:
            raise ValueError("only an empty log takes a bootstrap voter set")
        self.voter_history.add_kraft_version_at(BOOTSTRAP_OFFSET, KRAFT_VERSION_1)
        self.voter_history.add_voters_at(BOOTSTRAP_OFFSET, voters)

    def truncate_to(self, offset: int) -> None:
        """Drops every entry at ``offset`` and above (an entry holding ``offset`` goes whole)."""
        if offset >= self._end or offset < self.start_offset:
            return
        index = self.index_of(offset)
        offset = self.bases[index]
        del self.entries[index:]
        del self.bases[index:]
        self._end = offset
        self.epochs = [(epoch, start) for epoch, start in self.epochs if start < offset]
        self.voter_history.truncate_new_entries(offset)
        self.truncations += 1

    def trim_to(self, offset: int) -> None:
        """Drops the entries below ``offset``, which a snapshot now holds (KafkaRaftClient deletes the log
        below its latest snapshot): ``offset`` is an entry boundary at or below the high watermark."""
        index = self.index_of(offset)
        if offset <= self.start_offset or (index < len(self.entries) and self.bases[index] != offset):
            return
        self.snapshot_epoch = self.entries[index - 1].epoch
        del self.entries[:index]
        del self.bases[:index]
        self.start_offset = offset
        # the epoch cache from the start on (LeaderEpochFileCache.truncateFromStart)
        kept = [(e, start) for e, start in self.epochs if start >= offset]
        if not kept or kept[0][1] > offset:
            kept.insert(0, (self.snapshot_epoch, offset))
        self.epochs = kept
        self.voter_history.truncate_old_entries(offset)

    def install_snapshot(
        self, end_offset: int, epoch: int, voters: VoterSet | None = None, kraft_version: int = 0
    ) -> None:
        """Replaces the whole log by a snapshot ending at ``end_offset`` (ReplicatedLog
        .truncateToLatestSnapshot): a follower too far behind the leader's log start. ``voters`` and
        ``kraft_version``: the snapshot's control records (none in a static quorum's)."""
        self.entries.clear()
        self.bases.clear()
        self._end = self.start_offset = end_offset
        self.snapshot_epoch = epoch
        self.epochs = [(epoch, end_offset)]
        self.voter_history.reset(end_offset - 1, voters, kraft_version)
        self.truncations += 1

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as LeaderEpochFileCache.endOffsetFor: the largest epoch at or below the one
        asked for and the offset where the next epoch starts (the log end for the latest); for an epoch
        below the first known one, that epoch and the first one's start offset (what was before is gone,
        so a follower truncates to there); (-1, -1) for an undefined epoch, an empty cache or an epoch
        above the latest."""
        epochs = self.epochs
        if epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH
        if epochs[-1][0] == epoch:
            return epoch, self._end
        higher = bisect.bisect_right(epochs, epoch, key=lambda known: known[0])
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH
        if higher == 0:
            return epoch, epochs[0][1]
        return epochs[higher - 1][0], epochs[higher][1]

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as KafkaMetadataLog.endOffsetForEpoch: the epoch cache's answer, the
        snapshot's id when that answer is the log start for an epoch before it, and (last fetched epoch,
        log end) when the cache has none."""
        found_epoch, end = self.end_offset_for(epoch)
        if end == UNDEFINED_EPOCH:
            return self.last_fetched_epoch, self._end
        if self.start_offset > 0 and end == self.start_offset and found_epoch == epoch:
            return self.snapshot_epoch, self.start_offset
        return found_epoch, end

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        """Whether a follower's (fetch offset, last fetched epoch) matches this log
        (ReplicatedLog.validateOffsetAndEpoch): valid; a snapshot to fetch first (the offset is below
        the log start, or at it in another epoch than the snapshot's, or the epoch is older than the
        snapshot's); or the epoch and end offset to truncate to."""
        if self.start_offset == 0 and offset == 0:
            return ValidOffsetAndEpoch(ValidOffsetAndEpoch.VALID, 0, 0)
        if self.start_offset > 0 and (
            offset < self.start_offset
            or (offset == self.start_offset and epoch != self.snapshot_epoch)
            or epoch < self.snapshot_epoch
        ):
            return ValidOffsetAndEpoch(ValidOffsetAndEpoch.SNAPSHOT, self.snapshot_epoch, self.start_offset)
        end_epoch, end = self.end_offset_for_epoch(epoch)
        if end_epoch != epoch or end < offset:
            return ValidOffsetAndEpoch(ValidOffsetAndEpoch.DIVERGING, end_epoch, end)
        return ValidOffsetAndEpoch(ValidOffsetAndEpoch.VALID, epoch, offset)

    def read(self, offset: int, max_records: int) -> tuple[LogEntry, ...]:
        """Whole entries from the one starting at ``offset``, up to ``max_records`` offsets (at least one
        entry)."""
        index = self.index_of(offset)
        out: list[LogEntry] = []
        taken = 0
        for entry in self.entries[index:]:
            if out and taken + entry.records > max_records:
                break
            out.append(entry)
            taken += entry.records
        return tuple(out)
