"""An asyncio event loop on a thread of its own, for what must not wait behind the daemon's loop: a broker's
heartbeats, as Kafka's BrokerLifecycleManager sends them from its own event queue thread. The daemon's loop
can be busy for hundreds of milliseconds applying a large metadata change (new replicas' directories and
fsync'd leader-epoch checkpoints); a heartbeat sent from there waits that long, and a few such waits in a
row expire the broker's session. Another thread gets the GIL within the interpreter's switch interval
(5 ms), and at once while the daemon's thread waits on the disk."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

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

    def submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
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
