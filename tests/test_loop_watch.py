"""The daemon loop's watch (server/loop_thread.py): a broker's heartbeat thread stops heartbeating once the
daemon's loop has not run for longer than the bound, as Kafka's broker stops when its lifecycle manager's
event queue stops, and goes on while the loop is busy but progressing."""

from __future__ import annotations

import asyncio
import time

import pytest

from epochkraft.server.loop_thread import LoopWatch, stall_bound_s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("interval_ms", "bound_s"),
    [(2000, 6.0), (500, 2.0), (100, 2.0)],  # Kafka's 2 s interval; short ones as tests use
)
def test_stall_bound(interval_ms, bound_s):
    assert stall_bound_s(interval_ms) == bound_s


def test_a_busy_loop_is_not_stalled_a_stuck_one_is():
    clock = Clock()
    watch = LoopWatch(2.0, clock)
    clock.now += 0.7  # a CreateTopics flood's longest hold of the loop
    assert watch.stalled_for() is None
    watch.last_tick = clock.now  # the loop ran again
    clock.now += 2.5
    assert watch.stalled_for() == pytest.approx(2.5)


def test_the_watch_ticks_while_the_loop_runs_and_not_while_it_is_blocked():
    async def run() -> tuple[float | None, float | None]:
        watch = LoopWatch(0.2)
        watch.start(asyncio.get_running_loop())
        await asyncio.sleep(0.35)  # the loop runs: the watch ticks
        running = watch.stalled_for()
        time.sleep(0.3)  # the loop is blocked
        blocked = watch.stalled_for()
        watch.stop()
        return running, blocked

    running, blocked = asyncio.run(run())
    assert running is None
    assert blocked is not None and blocked > 0.2
