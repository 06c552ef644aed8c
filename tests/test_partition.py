"""Kafka's PartitionTest scenarios on the sans-IO broker core (AlterPartitionManagerTest is in
test_alter_partition_manager.py)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from epochkraft.broker.fetch_rules import check_leader_epoch
from epochkraft.broker.partition import RECOVERED, RECOVERING, Partition, Role
from epochkraft.protocol.errors import ErrorCode

TOPIC_ID = uuid.UUID(int=7)
LAG_MS = 10_000


@dataclass
class Brokers:
    """A metadata cache's view: epochs, fenced and shutting-down brokers."""

    epochs: dict[int, int] = field(default_factory=lambda: {1: 101, 2: 102, 3: 103})
    fenced: set[int] = field(default_factory=set)
    shutting_down: set[int] = field(default_factory=set)

    def is_fenced(self, b: int) -> bool:
        return b in self.fenced

    def in_controlled_shutdown(self, b: int) -> bool:
        return b in self.shutting_down

    def broker_epoch(self, b: int) -> int | None:
        return self.epochs.get(b)


def leader(isr=(1, 2), replicas=(1, 2, 3), log_end=10, min_isr=1, now=0, recovery=RECOVERED, unsafe=False):
    p = Partition(
        "foo", TOPIC_ID, 0, local_broker_id=1, replica_lag_time_max_ms=LAG_MS, unsafe_pre_kip903=unsafe
    )
    assert p.make_leader(
        now,
        leader_epoch=5,
        partition_epoch=9,
        replicas=replicas,
        isr=isr,
        leader_recovery_state=recovery,
        log_end_offset=log_end,
        min_insync_replicas=min_isr,
    )
    return p


def test_isr_expansion():
    brokers = Brokers()
    p = leader(isr=(1, 2))
    item = p.update_follower_fetch(
        1, 3, 103, fetch_offset=10, leader_log_end=10, brokers=brokers, local_broker_epoch=101
    )
    assert item is not None and item.kind == "expand"
    assert item.new_isr == ((1, 101), (2, -1), (3, 103))
    assert p.maximal_isr == (1, 2, 3) and p.isr == (1, 2)
    assert p.on_alter_partition_result(
        item, ErrorCode.none, leader_epoch=5, isr=(1, 2, 3), partition_epoch=10
    )
    assert p.isr == (1, 2, 3) and p.pending is None and p.partition_epoch == 10


def test_follower_does_not_join_isr_until_caught_up_to_offset_within_current_leader_epoch():
    brokers = Brokers()
    p = leader(isr=(1, 2), log_end=10)  # the leader epoch starts at offset 10
    p.high_watermark = 5
    assert p.update_follower_fetch(1, 3, 103, 7, 12, brokers, 101) is None, (
        "past the HW but not the epoch start"
    )
    assert p.update_follower_fetch(2, 3, 103, 10, 12, brokers, 101) is not None


@pytest.mark.parametrize("condition", ["fenced", "shutting_down"])
def test_isr_not_expanded_if_replica_is_fenced_or_shutdown(condition):
    brokers = Brokers()
    getattr(brokers, condition).add(3)
    p = leader()
    assert p.update_follower_fetch(1, 3, 103, 10, 10, brokers, 101) is None
    getattr(brokers, condition).discard(3)
    assert p.update_follower_fetch(2, 3, 103, 10, 10, brokers, 101) is not None


@pytest.mark.parametrize(
    ("fetch_epoch", "cache_epoch", "expands"),
    [(103, 103, True), (103, 200, False), (-1, 103, False), (103, None, False)],
)
def test_isr_can_expand_if_broker_epochs_match_with_kraft_metadata_cache(fetch_epoch, cache_epoch, expands):
    brokers = Brokers()
    if cache_epoch is None:
        brokers.epochs.pop(3)
    else:
        brokers.epochs[3] = cache_epoch
    p = leader()
    assert (p.update_follower_fetch(1, 3, fetch_epoch, 10, 10, brokers, 101) is not None) == expands


def test_unsafe_pre_kip903_mode_skips_the_epoch_comparison_and_sends_no_epochs():
    brokers = Brokers()
    brokers.epochs[3] = 200
    p = leader(unsafe=True)
    item = p.update_follower_fetch(1, 3, -1, 10, 10, brokers, 101)
    assert item is not None and all(e == -1 for _, e in item.new_isr)


@pytest.mark.parametrize(
    ("fetch_epoch", "expected"),
    [
        (103, ErrorCode.none),
        (90, ErrorCode.not_leader_or_follower),
        (-1, ErrorCode.none),
        # made up: a broker epoch the metadata does not hold is no incarnation of the replica
        (10**9, ErrorCode.not_leader_or_follower),
    ],
)
def test_fence_follower_fetch_with_stale_broker_epoch(fetch_epoch, expected):
    p = leader()
    assert p.check_follower_fetch(3, fetch_epoch, 5, Brokers()) == expected


@pytest.mark.parametrize(
    ("current_leader_epoch", "expected"),
    [
        (5, ErrorCode.none),
        (4, ErrorCode.fenced_leader_epoch),
        (6, ErrorCode.unknown_leader_epoch),
        (-1, ErrorCode.none),
    ],
)
def test_leader_epoch_checks_on_fetch(current_leader_epoch, expected):
    assert leader().check_follower_fetch(2, 102, current_leader_epoch, Brokers()) == expected


def test_fetch_to_a_follower_or_from_an_unknown_replica():
    p = leader()
    assert p.check_follower_fetch(9, -1, 5, Brokers()) == ErrorCode.unknown_leader_epoch
    # Without a leader epoch (Fetch before v9 style): NOT_LEADER_OR_FOLLOWER, as followerReplicaOrThrow
    assert p.check_follower_fetch(9, -1, -1, Brokers()) == ErrorCode.not_leader_or_follower
    p.make_follower(leader=2, leader_epoch=6, partition_epoch=10, replicas=(1, 2, 3), isr=(1, 2))
    assert p.check_follower_fetch(3, 103, 6, Brokers()) == ErrorCode.not_leader_or_follower


def test_high_watermark_advance_should_not_advance_when_under_min_isr():
    brokers = Brokers()
    p = leader(isr=(1,), replicas=(1, 2, 3), min_isr=2, log_end=0)
    assert p.maybe_increment_high_watermark(0, 10, brokers) is None
    assert p.high_watermark == 0
    p2 = leader(isr=(1, 2), min_isr=2, log_end=0)
    p2.update_follower_fetch(1, 2, 102, 6, 10, brokers, 101)
    assert p2.maybe_increment_high_watermark(1, 10, brokers) == 6


def test_high_watermark_uses_the_maximal_isr_and_never_goes_back():
    brokers = Brokers()
    p = leader(isr=(1, 2), log_end=0)
    p.update_follower_fetch(1, 2, 102, 8, 10, brokers, 101)
    assert p.maybe_increment_high_watermark(1, 10, brokers) == 8
    # Broker 3 is being added (PendingExpandIsr): it now holds the HW back.
    item = p.update_follower_fetch(2, 3, 103, 8, 10, brokers, 101)
    assert item is not None and p.maximal_isr == (1, 2, 3)
    p.update_follower_fetch(3, 2, 102, 10, 10, brokers, 101)
    assert p.maybe_increment_high_watermark(3, 10, brokers) is None
    assert p.high_watermark == 8


def test_maybe_shrink_isr():
    brokers = Brokers()
    p = leader(isr=(1, 2, 3), now=0)
    p.update_follower_fetch(1, 2, 102, 10, 10, brokers, 101)
    assert p.maybe_shrink_isr(LAG_MS, 20, brokers, 101) is None, "within the lag window"
    p.update_follower_fetch(LAG_MS + 1, 2, 102, 20, 20, brokers, 101)
    item = p.maybe_shrink_isr(LAG_MS + 2, 20, brokers, 101)
    assert item is not None and item.kind == "shrink" and item.isr_ids == (1, 2)
    assert p.maximal_isr == (1, 2, 3), "PendingShrinkIsr keeps the committed ISR as the maximal one"


def test_retry_shrink_isr():
    """A shrink that fails with a non-revert error stays pending until metadata says otherwise."""
    brokers = Brokers()
    p = leader(isr=(1, 2, 3))
    item = p.maybe_shrink_isr(LAG_MS + 1, 20, brokers, 101)
    assert item is not None
    assert not p.on_alter_partition_result(item, ErrorCode.invalid_update_version)
    assert p.pending == item
    assert p.maybe_shrink_isr(LAG_MS + 2, 20, brokers, 101) is None, "one change at a time"
    p.make_leader(
        LAG_MS + 3,
        leader_epoch=5,
        partition_epoch=10,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        leader_recovery_state=0,
        log_end_offset=20,
    )
    assert p.pending is None
    assert p.maybe_shrink_isr(LAG_MS * 3, 20, brokers, 101) is not None


def test_single_in_flight_alter_isr():
    brokers = Brokers()
    p = leader(isr=(1,), replicas=(1, 2, 3))
    first = p.update_follower_fetch(1, 2, 102, 10, 10, brokers, 101)
    assert first is not None
    assert p.update_follower_fetch(2, 3, 103, 10, 10, brokers, 101) is None


def test_ineligible_replica_reverts_to_the_committed_isr():
    brokers = Brokers()
    p = leader(isr=(1, 2))
    item = p.update_follower_fetch(1, 3, 103, 10, 10, brokers, 101)
    p.on_alter_partition_result(item, ErrorCode.ineligible_replica)
    assert p.pending is None and p.isr == (1, 2) and p.maximal_isr == (1, 2)
    assert p.update_follower_fetch(2, 3, 103, 10, 10, brokers, 101) is not None, "a later fetch may try again"


def test_alter_isr_new_leader_elected():
    brokers = Brokers()
    p = leader(isr=(1, 2))
    item = p.update_follower_fetch(1, 3, 103, 10, 10, brokers, 101)
    p.on_alter_partition_result(item, ErrorCode.new_leader_elected)
    assert p.pending == item, "waits for the metadata update"
    p.make_follower(leader=2, leader_epoch=6, partition_epoch=11, replicas=(1, 2, 3), isr=(2, 3))
    assert p.role == Role.FOLLOWER and p.pending is None


def test_stale_metadata_is_ignored():
    p = leader()
    assert not p.make_follower(leader=2, leader_epoch=6, partition_epoch=8, replicas=(1, 2, 3), isr=(2,))
    assert p.role == Role.LEADER


def test_success_for_an_older_leader_epoch_is_ignored():
    brokers = Brokers()
    p = leader(isr=(1, 2))
    item = p.update_follower_fetch(1, 3, 103, 10, 10, brokers, 101)
    assert not p.on_alter_partition_result(
        item, ErrorCode.none, leader_epoch=4, isr=(1, 2, 3), partition_epoch=10
    )
    assert p.isr == (1, 2)


def test_last_fetched_offset_validation_and_caught_up_time():
    """lastCaughtUpTime moves to this fetch when it reaches the log end, else to the previous fetch's time
    when that one reached the end as of then."""
    brokers = Brokers()
    p = leader(isr=(1, 2, 3), now=0)
    state = p.remote[2]
    p.update_follower_fetch(100, 2, 102, 10, 10, brokers, 101)
    assert state.last_caught_up_ms == 100
    p.update_follower_fetch(200, 2, 102, 10, 15, brokers, 101)  # behind: the previous fetch was caught up
    assert state.last_caught_up_ms == 100
    p.update_follower_fetch(300, 2, 102, 15, 20, brokers, 101)  # reached the end as of the previous fetch
    assert state.last_caught_up_ms == 200


def test_acks_all_min_insync():
    brokers = Brokers()
    p = leader(isr=(1,), min_isr=2, log_end=0)
    assert p.check_enough_replicas_before_append(-1) == ErrorCode.not_enough_replicas
    assert p.check_enough_replicas_before_append(1) == ErrorCode.none
    p = leader(isr=(1, 2), min_isr=2, log_end=0)
    assert p.check_enough_replicas_before_append(-1) == ErrorCode.none
    assert p.acks_all_result(5) is None
    p.update_follower_fetch(1, 2, 102, 5, 5, brokers, 101)
    p.maybe_increment_high_watermark(1, 5, brokers)
    assert p.acks_all_result(5) == ErrorCode.none
    p.isr = (1,)
    assert p.acks_all_result(5) == ErrorCode.not_enough_replicas_after_append


def test_kip704_unclean_leader_reports_recovered_before_expanding():
    brokers = Brokers()
    p = leader(isr=(1,), recovery=RECOVERING)
    item = p.update_follower_fetch(1, 2, 102, 10, 10, brokers, 101)
    assert item is not None and item.kind == "recovered", "no expansion while RECOVERING: report first"
    assert item.leader_recovery_state == RECOVERED and item.isr_ids == (1,)
    p.on_alter_partition_result(
        item, ErrorCode.none, leader_epoch=5, isr=(1,), partition_epoch=10, leader_recovery_state=RECOVERED
    )
    assert p.update_follower_fetch(2, 2, 102, 10, 10, brokers, 101) is not None


def test_follower_fetch_from_an_unregistered_broker_with_an_epoch_is_refused():
    brokers = Brokers()
    brokers.epochs.pop(3)
    assert leader().check_follower_fetch(3, 103, 5, brokers) == ErrorCode.not_leader_or_follower


@pytest.mark.parametrize(
    ("current_leader_epoch", "expected"),
    [
        (5, ErrorCode.none),
        (-1, ErrorCode.none),  # no epoch given (older request versions)
        (4, ErrorCode.fenced_leader_epoch),
        (-2, ErrorCode.fenced_leader_epoch),  # a negative epoch other than "none" is older than any
        (6, ErrorCode.unknown_leader_epoch),
    ],
)
def test_read_record_epoch_validation_for_leader(current_leader_epoch, expected):
    """PartitionTest.testReadRecordEpochValidationForLeader and
    testFetchOffsetForTimestampEpochValidationForLeader: one check for a consumer's Fetch, ListOffsets and
    OffsetForLeaderEpoch (Partition.localLogWithEpochOrThrow with requireLeader)."""
    assert check_leader_epoch(leader(), current_leader_epoch) == expected


@pytest.mark.parametrize(
    ("current_leader_epoch", "expected"),
    [
        (6, ErrorCode.not_leader_or_follower),
        (-1, ErrorCode.not_leader_or_follower),
        (5, ErrorCode.fenced_leader_epoch),
        (7, ErrorCode.unknown_leader_epoch),
    ],
)
def test_read_record_epoch_validation_for_follower(current_leader_epoch, expected):
    """PartitionTest.testReadRecordEpochValidationForFollower: a follower answers no client, and a stale
    or future epoch is told so first."""
    p = leader()
    p.make_follower(leader=2, leader_epoch=6, partition_epoch=10, replicas=(1, 2, 3), isr=(1, 2))
    assert check_leader_epoch(p, current_leader_epoch) == expected
