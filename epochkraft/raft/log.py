"""The replicated log as the Raft core sees it: entries with their leader epoch, and the epoch cache
(Kafka's LeaderEpochFileCache) that answers ``end_offset_for_epoch`` for divergence checks.

The core reads and writes it through these methods only; a driver makes it durable (Kafka flushes before
a follower fetches on and before the leader counts its own end offset, so the simulator keeps the log
across crashes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """The control record a new leader appends first in its epoch (Kafka's LeaderChangeMessage)."""

    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class LogEntry:
    epoch: int
    value: bytes | LeaderChangeMessage

    @property
    def is_control(self) -> bool:
        return isinstance(self.value, LeaderChangeMessage)


class RaftLog:
    """An in-memory log with an epoch cache; offsets start at 0."""

    def __init__(self, entries: list[LogEntry] | None = None) -> None:
        self.entries: list[LogEntry] = []
        # (epoch, start offset) in ascending order, as LeaderEpochFileCache
        self.epochs: list[tuple[int, int]] = []
        self.truncations = 0
        for entry in entries or []:
            self.append(entry)

    @property
    def end_offset(self) -> int:
        return len(self.entries)

    @property
    def last_fetched_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def epoch_at(self, offset: int) -> int:
        return self.entries[offset].epoch

    def append(self, entry: LogEntry) -> int:
        if self.epochs and entry.epoch < self.epochs[-1][0]:
            raise ValueError(f"epoch {entry.epoch} below the log's latest epoch {self.epochs[-1][0]}")
        if not self.epochs or entry.epoch > self.epochs[-1][0]:
            self.epochs.append((entry.epoch, len(self.entries)))
        self.entries.append(entry)
        return len(self.entries) - 1

    def truncate_to(self, offset: int) -> None:
        """Drops every entry at ``offset`` and above."""
        if offset >= len(self.entries):
            return
        del self.entries[offset:]
        self.epochs = [(epoch, start) for epoch, start in self.epochs if start < offset]
        self.truncations += 1

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as LeaderEpochFileCache.endOffsetFor: the largest epoch at or below the one
        asked for and the offset where the next epoch starts (the log end for the latest); (-1, -1) when
        the log holds no epoch at or below it."""
        found = -1
        for index, (known, _start) in enumerate(self.epochs):
            if known > epoch:
                break
            found = index
        if found < 0:
            return -1, -1
        known = self.epochs[found][0]
        end = self.epochs[found + 1][1] if found + 1 < len(self.epochs) else len(self.entries)
        return known, end

    def read(self, offset: int, max_records: int) -> tuple[LogEntry, ...]:
        return tuple(self.entries[offset : offset + max_records])
