"""The leader's side of a Fetch, as Kafka's ReplicaManager.fetchMessages with its DelayedFetch: every
partition read by the rules of ``fetch_rules.plan_read`` within the response's byte budget, a follower's
position recorded (which may grow the ISR and move the high watermark, completing acks=all produces), and
the long poll: read again whenever a partition's wait mark moves (``fetch_rules.wait_mark``: new data for
this reader, a change of leader epoch, role or log start), until ``min_bytes`` are there, an error or a
divergence is found, or ``max_wait_ms`` is up.

The handler decodes the request, resolves topic ids and checks rights; what it may read comes here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from epochkraft.broker.fetch_rules import WaitMark, plan_read, wait_mark
from epochkraft.broker.slices import Slicer
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.fetch_response import Answer
from epochkraft.protocol.records import iter_batches

if TYPE_CHECKING:
    from epochkraft.broker.fetch_session import PartitionData
    from epochkraft.broker.log import PartitionLog
    from epochkraft.broker.replica_manager import Replica, ReplicaManager


@dataclass(frozen=True, slots=True)
class FetchParams:
    """What holds for the whole request (Kafka's FetchParams)."""

    replica_id: int  # -1: a consumer
    replica_epoch: int  # the follower's broker epoch (KIP-903); -1 when unknown
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    read_committed: bool

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0


class PartitionFetch(NamedTuple):
    """One partition asked for: its name and what the request (or its fetch session) asks of it (a tuple:
    one is made for every partition of every Fetch)."""

    topic: str
    partition: int
    data: PartitionData


async def fetch_messages(
    manager: ReplicaManager, params: FetchParams, partitions: Sequence[PartitionFetch]
) -> list[Answer]:
    """One answer per partition asked for, in order, once the fetch may be answered."""
    deadline = time.monotonic() + params.max_wait_ms / 1000
    may_wait = params.max_wait_ms > 0  # else no mark is ever compared: none is taken
    # A fetch of thousands of partitions (a follower's, after a CreateTopics flood) lets heartbeats and
    # other requests run between partitions once a slice's time is up.
    slicer = Slicer()
    min_bytes = max(min(params.min_bytes, params.max_bytes), 1)
    while True:
        budget = params.max_bytes
        total = 0
        answers: list[Answer] = []
        marks: list[Mark] = []
        for wanted in partitions:
            answer, used = read_partition(manager, params, wanted, budget, min_one=total == 0)
            budget = max(budget - used, 0)
            total += used
            answers.append(answer)
            if may_wait:
                marks.append(_mark(manager, params, wanted))  # before the slice's turn lets an append in
            if slicer.due():
                await slicer.pause()
        if total >= min_bytes or not may_wait or deadline <= time.monotonic() or not any(marks):
            return answers
        if any(a.error != _NONE or a.diverging for a in answers):
            return answers
        await _wait_for_change(manager, params, partitions, marks, deadline)


# A partition's replica as a read found it and its wait mark; None: no replica here.
Mark = tuple["Replica", WaitMark] | None

_NONE = ErrorCode.none  # not ErrorCode.none per partition: an enum member's lookup is slow on Python 3.11

# Test-only: a caught-up partition is read from its log as any other, so that a test can compare what the
# skipped read answers with what the log's read answers. Never set outside tests.
CAUGHT_UP_READS_THE_LOG_FOR_TESTS = False


def _mark(manager: ReplicaManager, params: FetchParams, wanted: PartitionFetch) -> Mark:
    replica = manager.replicas.get((wanted.topic, wanted.partition))
    if replica is None:
        return None
    plog = replica.log
    committed_only = params.read_committed and not params.is_follower
    mark = wait_mark(
        replica.partition,
        log_start_offset=plog.log_start_offset,
        log_end_offset=plog.log_end_offset,
        last_stable_offset=replica.last_stable_offset if committed_only else -1,
        follower=params.is_follower,
        read_committed=committed_only,
    )
    return replica, mark


def _moved(
    manager: ReplicaManager, params: FetchParams, partitions: Sequence[PartitionFetch], marks: list[Mark]
) -> bool:
    """Whether a read now could answer differently: a partition's replica or mark changed since it was read."""
    for wanted, seen in zip(partitions, marks, strict=True):
        now = _mark(manager, params, wanted)
        if (now is None) != (seen is None):
            return True
        if now is not None and seen is not None and (now[0] is not seen[0] or now[1] != seen[1]):
            return True
    return False


async def _wait_for_change(
    manager: ReplicaManager,
    params: FetchParams,
    partitions: Sequence[PartitionFetch],
    marks: list[Mark],
    deadline: float,
) -> None:
    """Waits until a partition's mark moves or the deadline passes (Kafka's DelayedFetch: each wakeup of
    the partitions, an append or a high watermark's move, checks the fetch, which completes only when a
    read could answer differently; a follower's fetch is not read again for the high watermark another
    follower moved). One future, woken by any of the partitions."""
    loop = asyncio.get_running_loop()
    while (remaining := deadline - time.monotonic()) > 0:
        if _moved(manager, params, partitions, marks):
            return
        woken: asyncio.Future[None] = loop.create_future()
        replicas = [mark[0] for mark in marks if mark is not None]
        for replica in replicas:
            replica.fetch_waiters.add(woken)
        try:
            await asyncio.wait((woken,), timeout=remaining)
        finally:
            for replica in replicas:
                replica.fetch_waiters.discard(woken)


def read_partition(
    manager: ReplicaManager, params: FetchParams, wanted: PartitionFetch, budget: int, min_one: bool
) -> tuple[Answer, int]:
    """One partition's answer (and the bytes it used): at most ``budget`` bytes, or one whole batch over
    it while ``min_one`` (no partition before it returned data), as Kafka's ReplicaManager
    .readFromLocalLog; a read_committed consumer reads to the last stable offset, with the aborted
    transactions of the range read."""
    index = wanted.partition
    replica = manager.replicas.get((wanted.topic, index))
    if replica is None:
        return Answer(index, manager.missing_partition_error(wanted.topic, index)), 0
    data = wanted.data
    plog = replica.log
    end = plog.log_end_offset
    plan = plan_read(
        replica.partition,
        plog.epochs,
        log_start_offset=plog.log_start_offset,
        log_end_offset=end,
        fetch_offset=data.fetch_offset,
        last_fetched_epoch=data.last_fetched_epoch,
        current_leader_epoch=data.current_leader_epoch,
        replica_id=params.replica_id,
        replica_epoch=params.replica_epoch,
        brokers=manager.cache.image,
    )
    if plan.error != _NONE:
        return Answer(index, plan.error, plan.high_watermark, plan.log_start_offset), 0
    if plan.diverging is not None:
        return Answer(index, _NONE, plan.high_watermark, plan.log_start_offset, [], plan.diverging), 0
    follower = params.replica_id >= 0
    lso = replica.last_stable_offset
    committed_only = params.read_committed and not follower
    max_offset = min(plan.max_offset, lso) if committed_only else plan.max_offset
    if data.fetch_offset >= max_offset and not CAUGHT_UP_READS_THE_LOG_FOR_TESTS:
        # Caught up: the log read would stop before its first batch (max_offset is never past the log
        # end), so no bytes, no aborted transactions, nothing used of the budget. The empty tuple is
        # not a new object: thousands of partitions a Fetch allocate nothing for the collector here.
        chunks: Sequence[bytes | memoryview] = ()
    else:
        chunks = _read(plog, data, max_offset, min(data.max_bytes, budget), min_one) or ()
    hw = plan.high_watermark
    if follower:
        manager.on_follower_fetch(
            replica, params.replica_id, params.replica_epoch, data.fetch_offset, end, data.log_start_offset
        )
        hw = replica.partition.high_watermark
        lso = replica.last_stable_offset
    aborted = _aborted_transactions(plog, data.fetch_offset, chunks) if committed_only and chunks else ()
    answer = Answer(
        index, _NONE, hw, plan.log_start_offset, chunks, last_stable_offset=lso, aborted_transactions=aborted
    )
    return answer, sum(map(len, chunks)) if chunks else 0


def _read(
    plog: PartitionLog, data: PartitionData, max_offset: int, max_bytes: int, min_one: bool
) -> Sequence[bytes | memoryview]:
    """Whole batches from the fetch offset below ``max_offset``, within ``max_bytes`` unless ``min_one``."""
    chunks: Sequence[bytes | memoryview] = (
        plog.read_chunks(data.fetch_offset, max_bytes, max_offset=max_offset)
        if max_bytes > 0 or min_one
        else []
    )
    if not min_one and sum(map(len, chunks)) > max_bytes:
        return []  # only a first batch over the budget came back: that allowance is the first partition's
    return chunks


def _aborted_transactions(
    plog: PartitionLog, fetch_offset: int, chunks: Sequence[bytes | memoryview]
) -> list[tuple[int, int]]:
    """(producer id, first offset) of the transactions aborted within what was read: up to the offset
    after its last batch (Kafka's UnifiedLog.addAbortedTransactions)."""
    upper = fetch_offset
    # pieces from the tail cache split batches (a stamped prefix, then the rest): walk them joined
    for _pos, header in iter_batches(chunks[0] if len(chunks) == 1 else b"".join(chunks)):
        upper = header.next_offset
    return [(t.producer_id, t.first_offset) for t in plog.collect_aborted_txns(fetch_offset, upper)]
