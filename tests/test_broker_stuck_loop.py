"""A broker whose event loop is stuck is fenced, though its heartbeats run on a thread of their own: the
heartbeat thread stops once the loop has not run for a few heartbeat intervals (server/loop_thread.py),
the session lapses, and the controller fences the broker; it comes back once the loop runs again. A
real controller and brokers, the loop blocked behind a test switch (SIGUSR1)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from epochkraft.harness.kio_client import MiniClient
from epochkraft.protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

STALL_S = 7  # past the watch's 2 s bound and the test cluster's 2 s session


async def alive_brokers(client: MiniClient) -> set[int]:
    return {b.node_id for b in (await client.metadata("stall")).brokers}


async def test_a_broker_whose_event_loop_is_stuck_is_fenced(make_cluster, monkeypatch):
    monkeypatch.setenv("UNSAFE_STALL_LOOP_ON_SIGUSR1_FOR_TESTS", str(STALL_S))
    cluster = make_cluster(2)
    client = MiniClient(cluster.bootstrap)  # broker 1 first: it answers while broker 2 is stuck
    try:
        assert await client.create_topic("stall", 1, 1) == ErrorCode.none
        assert await alive_brokers(client) == {1, 2}
        stuck = cluster.node(2)
        assert stuck.pid is not None
        os.kill(stuck.pid, signal.SIGUSR1)
        stalled_at, fenced_after = time.monotonic(), None
        while fenced_after is None and time.monotonic() - stalled_at < STALL_S - 0.5:
            if 2 not in await alive_brokers(client):
                fenced_after = time.monotonic() - stalled_at
            await asyncio.sleep(0.2)
        assert fenced_after is not None, "the stuck broker was not fenced while stuck"
        deadline = time.monotonic() + 30
        while await alive_brokers(client) != {1, 2}:  # its loop runs again: unfenced
            assert time.monotonic() < deadline, "the broker did not come back"
            await asyncio.sleep(0.2)
    finally:
        await client.close()
