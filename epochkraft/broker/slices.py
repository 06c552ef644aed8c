"""Long work on the event loop in slices: heartbeats, replica fetches and clients get their turn at least
every SLICE_SECONDS while a broker applies a large metadata change (Kafka applies it on a metadata thread
of its own, apart from its heartbeat and fetcher threads)."""

from __future__ import annotations

import asyncio
import time

SLICE_SECONDS = 0.02  # a tenth of the fastest heartbeat interval the tests use


class Slicer:
    """``await slicer.turn()`` between steps of a long piece of work: it lets the event loop run once the
    steps since the last turn took SLICE_SECONDS, and costs a clock read otherwise."""

    def __init__(self, seconds: float = SLICE_SECONDS) -> None:
        self.seconds = seconds
        self._since = time.monotonic()

    async def turn(self) -> None:
        if self.due():
            await self.pause()

    def due(self) -> bool:
        """Whether the slice's time is up (``turn`` in two steps, for a loop so short per step that
        creating a coroutine each time would be a good part of it)."""
        return time.monotonic() - self._since >= self.seconds

    async def pause(self) -> None:
        """Lets the event loop run; the next slice starts now."""
        await asyncio.sleep(0)
        self._since = time.monotonic()
