"""Kafka's DelayedFetch on the leader: when a waiting (long-polling) fetch is read again. A partition's
wait mark (``fetch_rules.wait_mark``) is what its answer can change with; ``_wait_for_change`` returns
when a mark moved or the fetch's time is up. A follower's fetch is not read again when only the high
watermark moved (another follower's fetch moved it): it has no more bytes to answer than before."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from epochkraft.broker import fetch_messages as fm
from epochkraft.broker.fetch_rules import wait_mark
from epochkraft.broker.fetch_session import PartitionData
from epochkraft.broker.partition import RECOVERED, Partition
from epochkraft.broker.replica_manager import wake

TOPIC_ID = uuid.UUID(int=7)


def leader(log_end: int = 10, hw: int = 8) -> Partition:
    p = Partition("foo", TOPIC_ID, 0, local_broker_id=1, replica_lag_time_max_ms=10_000)
    assert p.make_leader(
        0,
        leader_epoch=5,
        partition_epoch=9,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        leader_recovery_state=RECOVERED,
        log_end_offset=log_end,
        min_insync_replicas=1,
    )
    p.high_watermark = hw
    return p


def mark(p: Partition, log_end: int = 10, lso: int = 6, follower: bool = True, committed: bool = False):
    return wait_mark(
        p,
        log_start_offset=0,
        log_end_offset=log_end,
        last_stable_offset=lso,
        follower=follower,
        read_committed=committed,
    )


def test_follower_fetch_not_completed_by_high_watermark_alone():
    p = leader()
    before = mark(p)
    p.high_watermark = 10  # the other follower caught up
    assert mark(p) == before
    assert mark(p, log_end=11) != before  # an append: new bytes for this follower


@pytest.mark.parametrize(("committed", "moves_with_hw"), [(False, True), (True, False)])
def test_consumer_fetch_completed_by_what_it_may_read(committed, moves_with_hw):
    """A consumer reads to the high watermark; read_committed to the last stable offset below it."""
    p = leader()
    before = mark(p, follower=False, committed=committed)
    p.high_watermark = 10
    assert (mark(p, follower=False, committed=committed) != before) is moves_with_hw
    if committed:
        assert mark(p, lso=9, follower=False, committed=True) != before


def test_fetch_with_fenced_epoch_or_lost_leadership_is_read_again():
    """DelayedFetchTest.testFetchWithFencedEpoch and testNotLeaderOrFollower: an error to answer."""
    p = leader()
    before = mark(p)
    p.make_follower(leader=2, leader_epoch=6, partition_epoch=10, replicas=(1, 2, 3), isr=(1, 2, 3))
    assert mark(p) != before


# ---- the wait itself, over stand-ins of the replica manager's replicas ----------------------------------


@dataclass
class Log:
    log_start_offset: int = 0
    log_end_offset: int = 10


@dataclass
class StandInReplica:
    partition: Partition
    log: Log = field(default_factory=Log)
    fetch_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    last_stable_offset: int = 8


@dataclass
class Manager:
    replicas: dict[tuple[str, int], StandInReplica]

    def replica(self, topic: str, index: int) -> StandInReplica | None:
        return self.replicas.get((topic, index))


def follower_fetch(wait_ms: int) -> fm.FetchParams:
    return fm.FetchParams(2, 102, wait_ms, 1, 1 << 20, False)


async def test_waiting_follower_fetch_wakes_for_an_append_not_for_the_high_watermark():
    replica = StandInReplica(leader())
    manager: Any = Manager({("foo", 0): replica})
    params = follower_fetch(5000)
    wanted = [fm.PartitionFetch("foo", 0, PartitionData(fetch_offset=10, max_bytes=1 << 20))]
    marks = [fm._mark(manager, params, w) for w in wanted]
    waiting = asyncio.create_task(fm._wait_for_change(manager, params, wanted, marks, time.monotonic() + 5))
    await asyncio.sleep(0.01)
    replica.partition.high_watermark = 10
    wake(replica)  # what the replica manager does when the high watermark moves
    await asyncio.sleep(0.01)
    assert not waiting.done()
    replica.log.log_end_offset = 11
    wake(replica)  # an append
    await asyncio.wait_for(waiting, 1)
    assert not replica.fetch_waiters  # the fetch's future left every replica it waited on


async def test_waiting_fetch_returns_at_its_deadline():
    replica = StandInReplica(leader())
    manager: Any = Manager({("foo", 0): replica})
    params = follower_fetch(50)
    wanted = [fm.PartitionFetch("foo", 0, PartitionData(fetch_offset=10, max_bytes=1 << 20))]
    marks = [fm._mark(manager, params, w) for w in wanted]
    started = time.monotonic()
    await fm._wait_for_change(manager, params, wanted, marks, started + 0.05)
    assert 0.04 <= time.monotonic() - started < 1
    assert not replica.fetch_waiters
