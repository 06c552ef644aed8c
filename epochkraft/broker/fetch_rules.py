"""Sans-IO rules of replication by Fetch: what a leader answers, and how a follower moves its log on the
answer. The broker's replica manager (``fetch_messages``), its fetcher and the simulator all call these, over
their own logs; ListOffsets and OffsetForLeaderEpoch take the leader-epoch check from here too.

Leader (Kafka's Partition.fetchRecords / readRecords): the leader-epoch and replica checks first; then,
when the fetch names its last fetched epoch, the end of that epoch in the leader's log: undefined ->
OFFSET_OUT_OF_RANGE, a fetch offset below the log start -> OFFSET_OUT_OF_RANGE, an older epoch or an end
below the fetch offset -> DivergingEpoch (and no data); then a read in [log start, log end], up to the log
end for a follower and the high watermark for a consumer.

A waiting fetch (Kafka's DelayedFetch.tryComplete): ``wait_mark`` is what a partition's answer can change
with; the leader reads a waiting fetch again only when a partition's mark moved since its last read.

Follower (Kafka's AbstractFetcherThread.getOffsetTruncationState and fetchOffsetAndTruncate):
``truncation_offset`` for a DivergingEpoch and ``out_of_range_reset`` for OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from epochkraft.broker.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from epochkraft.broker.partition import NO_EPOCH, BrokerView, Partition, Role
from epochkraft.protocol.errors import ErrorCode

# Test-only: re-introduces the old answer to a follower whose last fetched epoch is below the leader's first
# epoch (DivergingEpoch(-1, -1)) and the old follower that ignored it and fetched again, forever, so the
# simulator's liveness check can be shown to catch it. Never set outside tests.
LEGACY_UNDEFINED_DIVERGENCE_FOR_TESTS = False

# An enum's member read from its class costs a descriptor call on Python 3.11 (some hundred ns): the checks
# below run for every partition of every Fetch, so they compare with these.
_NONE = ErrorCode.none
_LEADER = Role.LEADER


class EpochEnds(Protocol):
    """The leader-epoch cache as these rules read it."""

    def end_offset_for(self, requested: int) -> tuple[int, int]: ...

    @property
    def first_epoch(self) -> int: ...


class ReadPlan(NamedTuple):
    """A leader's answer before any bytes are read: an error, a divergence, or a read below ``max_offset``
    (a tuple: one is made for every partition of every Fetch)."""

    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging: tuple[int, int] | None = None  # (epoch, end offset)
    max_offset: int = -1

    @property
    def reads(self) -> bool:
        return self.error == _NONE and self.diverging is None


def check_leader_epoch(partition: Partition, current_leader_epoch: int) -> ErrorCode:
    """A client's request to a partition's leader (a consumer's Fetch, ListOffsets, OffsetForLeaderEpoch),
    as Kafka's Partition.localLogWithEpochOrThrow with requireLeader: the client's leader epoch (-1: none
    given) older than ours is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH; then only the leader answers."""
    if current_leader_epoch != NO_EPOCH and current_leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    if partition.role is not _LEADER:
        return ErrorCode.not_leader_or_follower
    return _NONE


def plan_read(
    partition: Partition,
    epochs: EpochEnds,
    *,
    log_start_offset: int,
    log_end_offset: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    current_leader_epoch: int,
    replica_id: int,
    replica_epoch: int,
    brokers: BrokerView,
) -> ReadPlan:
    """What the leader answers one partition of a Fetch (``replica_id`` < 0: a consumer)."""
    if replica_id >= 0:
        error = partition.check_follower_fetch(replica_id, replica_epoch, current_leader_epoch, brokers)
    else:
        error = check_leader_epoch(partition, current_leader_epoch)
    if error != _NONE:
        return ReadPlan(error)
    hw, start = partition.high_watermark, log_start_offset
    if last_fetched_epoch >= 0:
        if LEGACY_UNDEFINED_DIVERGENCE_FOR_TESTS and last_fetched_epoch < epochs.first_epoch:
            return ReadPlan(_NONE, hw, start, (UNDEFINED_EPOCH, UNDEFINED_OFFSET))
        epoch, end = epochs.end_offset_for(last_fetched_epoch)
        if epoch == UNDEFINED_EPOCH or end == UNDEFINED_OFFSET or fetch_offset < start:
            return ReadPlan(ErrorCode.offset_out_of_range, hw, start)
        if epoch < last_fetched_epoch or end < fetch_offset:
            return ReadPlan(_NONE, hw, start, (epoch, end))
    if fetch_offset < start or fetch_offset > log_end_offset:
        return ReadPlan(ErrorCode.offset_out_of_range, hw, start)
    return ReadPlan(_NONE, hw, start, max_offset=log_end_offset if replica_id >= 0 else hw)


class WaitMark(NamedTuple):
    """What a waiting fetch's answer for one partition depends on, besides the bytes already read (a
    tuple: one is taken for every partition read by a fetch that may wait)."""

    leader_epoch: int
    role: Role
    readable_end: int  # the offset a read stops at: log end (follower), high watermark or last stable offset
    log_start_offset: int


def wait_mark(
    partition: Partition,
    *,
    log_start_offset: int,
    log_end_offset: int,
    last_stable_offset: int,
    follower: bool,
    read_committed: bool,
) -> WaitMark:
    """A partition's mark, as Kafka's DelayedFetch.tryComplete reads it: a follower's read ends at the log
    end, so a high watermark moved by another follower's fetch leaves its mark (and its answer) as it was;
    a consumer's ends at the high watermark, or the last stable offset when it reads committed records.
    A change of leader epoch or role (an error to answer) or of log start (an offset now out of range)
    moves the mark too."""
    if follower:
        end = log_end_offset
    elif read_committed:
        end = min(last_stable_offset, partition.high_watermark)
    else:
        end = partition.high_watermark
    return WaitMark(partition.leader_epoch, partition.role, end, log_start_offset)


def truncation_offset(
    epochs: EpochEnds, log_end_offset: int, high_watermark: int, diverging: tuple[int, int]
) -> int:
    """Where a follower truncates on the leader's DivergingEpoch (epoch, end offset)."""
    leader_epoch, leader_end = diverging
    if leader_end == UNDEFINED_OFFSET and LEGACY_UNDEFINED_DIVERGENCE_FOR_TESTS:
        return log_end_offset  # the old follower ignored an undefined divergence
    if leader_end == UNDEFINED_OFFSET:
        # The leader could not place our epoch: keep only what is committed, so the next fetch differs.
        return min(high_watermark, log_end_offset)
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end, log_end_offset)
    epoch, end = epochs.end_offset_for(leader_epoch)
    if end == UNDEFINED_OFFSET:
        return min(leader_end, log_end_offset)  # we hold no epoch at or below the leader's
    if epoch != leader_epoch:
        return min(end, log_end_offset)  # we do not know the leader's epoch: end of our largest below it
    return min(end, leader_end, log_end_offset)


def out_of_range_reset(log_end_offset: int, leader_log_start_offset: int, leader_high_watermark: int) -> int:
    """The offset a follower restarts from on OFFSET_OUT_OF_RANGE; a result above ``log_end_offset`` means
    truncate fully and start there (our log ends before the leader's start)."""
    if leader_log_start_offset > log_end_offset:
        return leader_log_start_offset
    if 0 <= leader_high_watermark < log_end_offset:
        return max(
            leader_high_watermark, leader_log_start_offset
        )  # ahead of the leader: back to what it holds
    return max(log_end_offset, 0)
