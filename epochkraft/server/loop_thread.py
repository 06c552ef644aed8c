"""An asyncio event loop on a thread of its own, for what must not wait behind the daemon's loop: a broker's
heartbeats, as Kafka's BrokerLifecycleManager sends them from its own event queue thread. The daemon's loop
can be busy for hundreds of milliseconds applying a large metadata change (new replicas' directories and
fsync'd leader-epoch checkpoints); a heartbeat sent from there waits that long, and a few such waits in a
row expire the broker's session. Another thread gets the GIL within the interpreter's switch interval
(5 ms), and at once while the daemon's thread waits on the disk."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TypeVar

T = TypeVar("T")

JOIN_TIMEOUT_S = 5.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> None:
        self._thread.start()

    def submit(self, coro: Coroutine[object, None, T]) -> asyncio.Future[T]:
        """Runs ``coro`` on this thread's loop; the caller's loop awaits the returned future, and cancelling
        it cancels ``coro``."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def call_soon(self, callback: Callable[[], object]) -> None:
        self.loop.call_soon_threadsafe(callback)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(JOIN_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()


class LoopWatch:
    """The daemon loop's progress as another thread sees it: the loop stamps a monotonic time every
    ``TICK_S`` (a ``call_later`` chain), and ``stalled`` says whether the last stamp is older than the
    bound. A broker's heartbeat thread must not report a broker alive whose loop (serving, replicating,
    sending AlterPartition) is stuck: Kafka's broker stops heartbeating when its lifecycle manager's
    event queue stops, and the controller fences it once the session lapses."""

    TICK_S = 0.1

    def __init__(self, bound_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.bound_s = bound_s
        self._clock = clock
        self.last_tick = clock()
        self._handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._tick(loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.last_tick = self._clock()
        self._handle = loop.call_later(self.TICK_S, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def stalled_for(self) -> float | None:
        """How long the loop has not ticked, once that is past the bound; None while it progresses."""
        silent = self._clock() - self.last_tick
        return silent if silent > self.bound_s else None


def stall_bound_s(heartbeat_interval_ms: int) -> float:
    """How long the daemon's loop may go without a tick before heartbeats stop: a few heartbeat intervals,
    and never under 2 s, so a loop busy but progressing is not fenced (a CreateTopics flood held it for up
    to 0.7 s at a time). A loop that stays stuck is fenced one session after its last heartbeat, so this
    bound plus broker.session.timeout.ms after it stopped (6 s + 9 s at Kafka's defaults)."""
    return max(3 * heartbeat_interval_ms / 1000, 2.0)
