"""The batches a leader appended last, kept in memory so the Fetch that follows is served without a read.

Under acks=all every follower fetches what the leader appended a few milliseconds earlier. Read back from
the log, each follower's copy costs a pread into a freshly allocated buffer; kept here, it costs nothing:
the entries hold the very buffers the leader wrote (the produced records and each batch's stamped prefix),
so a Fetch answered from here sends the bytes the segment holds. An entry is one batch.

One cache serves a whole broker under one byte budget, oldest entries evicted first. Each log's entries
are a contiguous run of offsets; the log drops its run when the bytes at those offsets could change
(truncation) or when something other than a leader append extends it. A read starting inside the run
is answered exactly as the log's own read would answer it; an older offset is left to the log. Sans-IO:
no files, no clock.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(slots=True)
class _Entry:
    base_offset: int
    next_offset: int
    pieces: list[bytes | memoryview]
    size: int


class TailCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0  # held by entries not yet evicted, including runs already dropped by their log
        self._runs: dict[Hashable, list[_Entry]] = {}  # by owner (a log)
        self._fifo: deque[tuple[Hashable, _Entry]] = deque()

    def append(
        self, owner: Hashable, base_offset: int, next_offset: int, pieces: list[bytes | memoryview], size: int
    ) -> None:
        """Records one batch ``owner`` (a log) just appended at ``base_offset``; the pieces must not change."""
        if size > self.max_bytes:
            self.drop(owner)
            return
        run = self._runs.get(owner)
        if run is None or run[-1].next_offset != base_offset:
            run = self._runs[owner] = []
        entry = _Entry(base_offset, next_offset, pieces, size)
        run.append(entry)
        self._fifo.append((owner, entry))
        self.bytes += size
        while self.bytes > self.max_bytes:
            self._evict_oldest()

    def drop(self, owner: Hashable) -> None:
        """Forgets ``owner``'s run; its bytes leave the budget as the entries reach the eviction end."""
        self._runs.pop(owner, None)

    def read(
        self, owner: Hashable, offset: int, max_bytes: int, limit: int
    ) -> list[bytes | memoryview] | None:
        """What the log's own read returns, when ``offset`` lies in ``owner``'s run: whole batches from the
        one holding ``offset``, none starting at or past offset ``limit``, within ``max_bytes`` but at
        least one. None when the log must be read instead."""
        run = self._runs.get(owner)
        if not run or offset < run[0].base_offset or offset >= run[-1].next_offset:
            return None
        out: list[bytes | memoryview] = []
        total = 0
        for j in range(bisect.bisect_right(run, offset, key=_base_offset) - 1, len(run)):
            entry = run[j]
            if entry.base_offset >= limit or (total and total + entry.size > max_bytes):
                break
            out += entry.pieces
            total += entry.size
        return out

    def _evict_oldest(self) -> None:
        owner, entry = self._fifo.popleft()
        self.bytes -= entry.size
        run = self._runs.get(owner)
        if run and run[0] is entry:
            del run[0]
            if not run:
                del self._runs[owner]


def _base_offset(entry: _Entry) -> int:
    return entry.base_offset
