"""The leader's side of a Fetch, as Kafka's ReplicaManager.fetchMessages with its DelayedFetch: every
partition read by the rules of ``fetch_rules.plan_read`` within the response's byte budget, a follower's
position recorded (which may grow the ISR and move the high watermark, completing acks=all produces), and
the long poll: read again whenever a partition read gets data, until ``min_bytes`` are there, an error or
a divergence is found, or ``max_wait_ms`` is up.

The handler decodes the request, resolves topic ids and checks rights; what it may read comes here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epochkraft.broker.fetch_rules import plan_read
from epochkraft.broker.slices import Slicer
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.fetch_response import Answer
from epochkraft.protocol.records import iter_batches

if TYPE_CHECKING:
    from epochkraft.broker.log import PartitionLog
    from epochkraft.broker.replica_manager import ReplicaManager


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


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition asked for (Kafka's FetchRequest.PartitionData)."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1  # v9+ (KIP-320)
    last_fetched_epoch: int = -1  # v12+
    log_start_offset: int = -1  # a follower's (v5+)


async def fetch_messages(
    manager: ReplicaManager, params: FetchParams, partitions: Sequence[PartitionFetch]
) -> list[Answer]:
    """One answer per partition asked for, in order, once the fetch may be answered."""
    deadline = time.monotonic() + params.max_wait_ms / 1000
    # A fetch of thousands of partitions (a follower's, after a CreateTopics flood) lets heartbeats and
    # other requests run between partitions once a slice's time is up.
    slicer = Slicer()
    min_bytes = max(min(params.min_bytes, params.max_bytes), 1)
    while True:
        budget = params.max_bytes
        total = 0
        answers: list[Answer] = []
        waits: list[asyncio.Event] = []
        for wanted in partitions:
            answer, used = read_partition(manager, params, wanted, budget, min_one=total == 0)
            budget = max(budget - used, 0)
            total += used
            answers.append(answer)
            replica = manager.replica(wanted.topic, wanted.partition)
            if replica is not None:
                waits.append(replica.data_event)
            await slicer.turn()
        remaining = deadline - time.monotonic()
        errors = any(a.error != ErrorCode.none or a.diverging for a in answers)
        if total >= min_bytes or errors or remaining <= 0 or not waits:
            return answers
        await _wait_any(waits, remaining)


def read_partition(
    manager: ReplicaManager, params: FetchParams, wanted: PartitionFetch, budget: int, min_one: bool
) -> tuple[Answer, int]:
    """One partition's answer (and the bytes it used): at most ``budget`` bytes, or one whole batch over
    it while ``min_one`` (no partition before it returned data), as Kafka's ReplicaManager
    .readFromLocalLog; a read_committed consumer reads to the last stable offset, with the aborted
    transactions of the range read."""
    index = wanted.partition
    replica = manager.replica(wanted.topic, index)
    if replica is None:
        return Answer(index, manager.missing_partition_error(wanted.topic, index)), 0
    plog = replica.log
    end = plog.log_end_offset
    plan = plan_read(
        replica.partition,
        plog.epochs,
        log_start_offset=plog.log_start_offset,
        log_end_offset=end,
        fetch_offset=wanted.fetch_offset,
        last_fetched_epoch=wanted.last_fetched_epoch,
        current_leader_epoch=wanted.current_leader_epoch,
        replica_id=params.replica_id,
        replica_epoch=params.replica_epoch,
        brokers=manager.cache,
    )
    if plan.error != ErrorCode.none:
        return Answer(index, plan.error, plan.high_watermark, plan.log_start_offset), 0
    if plan.diverging is not None:
        return Answer(
            index, ErrorCode.none, plan.high_watermark, plan.log_start_offset, [], plan.diverging
        ), 0
    max_bytes = min(wanted.max_bytes, budget)
    lso = replica.last_stable_offset
    committed_only = params.read_committed and not params.is_follower
    max_offset = min(plan.max_offset, lso) if committed_only else plan.max_offset
    chunks: Sequence[bytes | memoryview] = (
        plog.read_chunks(wanted.fetch_offset, max_bytes, max_offset=max_offset)
        if max_bytes > 0 or min_one
        else []
    )
    if not min_one and sum(map(len, chunks)) > max_bytes:
        chunks = []  # only a first batch over the budget came back: that allowance is the first partition's
    hw = plan.high_watermark
    if params.is_follower:
        manager.on_follower_fetch(
            replica,
            params.replica_id,
            params.replica_epoch,
            wanted.fetch_offset,
            end,
            wanted.log_start_offset,
        )
        hw = replica.partition.high_watermark
        lso = replica.last_stable_offset
    aborted = _aborted_transactions(plog, wanted.fetch_offset, chunks) if committed_only and chunks else ()
    answer = Answer(
        index,
        ErrorCode.none,
        hw,
        plan.log_start_offset,
        chunks,
        last_stable_offset=lso,
        aborted_transactions=aborted,
    )
    return answer, sum(map(len, chunks))


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


async def _wait_any(events: list[asyncio.Event], timeout: float) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
