"""The leader-epoch cache: the start offset of every leader epoch seen in a partition's log.

Answers OffsetForLeaderEpoch and fetch divergence checks as Kafka's LeaderEpochFileCache: the end offset
of an epoch is the start offset of the next higher epoch, or the log end for the latest one.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from pathlib import Path

from epochkraft.broker.log.checkpoints import read_epochs, write_epochs

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: Path | None, log_end_offset: Callable[[], int]) -> None:
        self.path = path
        self._log_end_offset = log_end_offset
        self.unreadable = False  # the checkpoint file could not be read: the log rebuilds the cache
        try:
            self.entries: list[tuple[int, int]] = read_epochs(path) if path is not None else []
        except (ValueError, UnicodeDecodeError):
            self.entries, self.unreadable = [], True

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    @property
    def first_epoch(self) -> int:
        return self.entries[0][0] if self.entries else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        return next((start for e, start in self.entries if e == epoch), None)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Records that ``epoch`` starts at ``start_offset`` (only a new, higher epoch is added)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries.append((epoch, start_offset))
        self._save()

    def end_offset_for(self, requested: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch and fetch divergence, as Kafka's
        LeaderEpochFileCache.endOffsetFor: the latest epoch ends at the log end; an older one where the
        next higher epoch starts, answered with the largest known epoch <= requested; below the first
        known epoch, the requested epoch and the first epoch's start offset (the log before it is gone, so
        a follower truncates there and replicates from it); undefined (-1, -1) for no epoch, an empty
        cache, or an epoch above the latest."""
        if requested == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested == self.entries[-1][0]:
            return requested, self._log_end_offset()
        higher = bisect.bisect_right(self.entries, requested, key=lambda entry: entry[0])
        if higher == len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return requested, self.entries[0][1]
        return self.entries[higher - 1][0], self.entries[higher][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drops epochs starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: epochs that ended before it go, and the one holding it
        starts there (Kafka's LeaderEpochFileCache.truncateFromStart)."""
        holding = bisect.bisect_right(self.entries, start_offset, key=lambda entry: entry[1]) - 1
        if holding < 0:
            return
        kept = [(self.entries[holding][0], start_offset), *self.entries[holding + 1 :]]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def rebuild(self, epochs_and_starts: list[tuple[int, int]]) -> None:
        """Replaces the entries with those read back from the log's batches, and saves them."""
        self.entries = []
        for epoch, start in epochs_and_starts:
            if epoch >= 0 and (not self.entries or epoch > self.entries[-1][0]):
                self.entries.append((epoch, start))
        self.unreadable = False
        self._save()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._save()

    def _save(self) -> None:
        if self.path is not None:
            write_epochs(self.path, self.entries)
