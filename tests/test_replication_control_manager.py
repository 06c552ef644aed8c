"""Partition-count and replica changes on the controller core, after Kafka's ReplicationControlManagerTest
(testCreatePartitions..., testReassignPartitions..., testCancelReassignPartitions...)."""

from __future__ import annotations

import uuid

import pytest

from epochkraft.controller.configuration_control import OpType
from epochkraft.protocol.errors import ErrorCode
from tests.controller_context import ControllerContext

OK = (ErrorCode.none, None)


def test_create_partitions():
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1, 3)
    for name, partitions in (("foo", 3), ("bar", 4), ("quux", 2), ("foo2", 2)):
        ctx.create_topic(name, partitions=partitions, rf=2)
    assert ctx.create_partitions(("foo", 5, None), ("bar", 3, None), ("baz", 3, None), ("quux", 2, None)) == [
        OK,
        (
            ErrorCode.invalid_partitions,
            "The topic bar currently has 4 partition(s); 3 would not be an increase.",
        ),
        (ErrorCode.unknown_topic_or_partition, None),
        (ErrorCode.invalid_partitions, "Topic already has 2 partition(s)."),
    ]
    assert sorted(ctx.controller.replication.topic("foo").partitions) == [0, 1, 2, 3, 4]
    assert all(len(ctx.partition("foo", i).replicas) == 2 for i in (3, 4))
    assert ctx.create_partitions(
        ("foo", 6, [[1, 3]]), ("bar", 5, [[1]]), ("quux", 4, [[1, 0]]), ("foo2", 3, [[2, 0]])
    ) == [
        OK,
        (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes a partition with 1 replica(s), but this is not "
            "consistent with previous partitions, which have 2 replica(s).",
        ),
        (
            ErrorCode.invalid_replica_assignment,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        ),
        (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes broker 2, but no such broker is registered.",
        ),
    ]
    new = ctx.partition("foo", 5)
    assert (new.replicas, new.isr, new.leader, new.leader_epoch, new.partition_epoch) == (
        (1, 3),
        (1, 3),
        1,
        0,
        0,
    )
    assert len(ctx.controller.replication.topic("bar").partitions) == 4, "a refused topic gains nothing"


def test_create_partitions_validate_only_writes_nothing():
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1)
    ctx.create_topic("foo", partitions=1, rf=2)
    since = ctx.controller.log.next_offset
    assert ctx.create_partitions(("foo", 3, None), validate_only=True) == [OK]
    assert ctx.controller.log.next_offset == since
    assert len(ctx.controller.replication.topic("foo").partitions) == 1


def test_create_partitions_fails_when_all_brokers_are_fenced_or_in_controlled_shutdown():
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1)
    ctx.create_topic("foo", partitions=1, rf=2)
    ctx.fence_brokers(1)
    ctx.shut_down_brokers(0)
    assert ctx.create_partitions(("foo", 2, None)) == [
        (
            ErrorCode.invalid_replication_factor,
            "Unable to replicate the partition 2 time(s): All brokers are currently fenced or in "
            "controlled shutdown.",
        )
    ]


def test_create_partitions_isr_invariants():
    """A new partition's ISR holds neither fenced brokers nor brokers in controlled shutdown."""
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1, 2)
    ctx.create_topic("foo", [[0, 1, 2]])
    ctx.fence_brokers(2)
    ctx.shut_down_brokers(1)
    assert ctx.create_partitions(("foo", 2, [[0, 1, 2]])) == [OK]
    new = ctx.partition("foo", 1)
    assert (new.replicas, new.isr, new.leader, new.leader_epoch) == ((0, 1, 2), (0,), 0, 0)


def test_create_partitions_fails_with_manual_assignment_with_all_fenced():
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1, 2, 3, 4, 5)
    ctx.create_topic("foo", [[0, 1, 2]])
    ctx.fence_brokers(3, 4, 5)
    assert ctx.create_partitions(("foo", 2, [[3, 4, 5]])) == [
        (
            ErrorCode.invalid_replica_assignment,
            "All brokers specified in the manual partition assignment for partition 1 are fenced or in "
            "controlled shutdown.",
        )
    ]
    assert ctx.create_partitions(("foo", 2, [[0, 0, 1]]))[0][1] == (
        "The manual partition assignment includes the broker 0 more than once."
    )


# ---- reassignment (KIP-455) -------------------------------------------------------------------------
def reassigning_context() -> ControllerContext:
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3], [3, 2, 1]])
    ctx.create_topic("bar", [[1, 2, 3]])
    return ctx


def test_reassign_partitions():
    """testReassignPartitions: a reorder completes at once; adding 0 and removing 3 waits for the ISR; the
    leader's AlterPartition that brings 0 into the ISR completes it and moves leadership off 3
    (NEW_LEADER_ELECTED, v2+; FENCED_LEADER_EPOCH before)."""
    ctx = reassigning_context()
    assert ctx.reassignments() == {}
    assert ctx.reassign("foo", {0: [3, 2, 1], 1: [0, 2, 1], 2: [0, 2, 1]}) == {
        0: OK,
        1: OK,
        2: (ErrorCode.unknown_topic_or_partition, "Unable to find partition foo:2."),
    }
    assert (ctx.partition("foo", 0).replicas, ctx.partition("foo", 0).leader_epoch) == ((3, 2, 1), 0)
    ongoing = {("foo", 1): ((0, 2, 1, 3), (0,), (3,))}
    assert ctx.reassignments() == ongoing
    assert ctx.reassignments({"bar": [0, 1, 2]}) == {}
    assert ctx.reassignments({"foo": [0, 1, 2]}) == ongoing
    moving = ctx.partition("foo", 1)
    assert (moving.isr, moving.leader, moving.leader_epoch, moving.partition_epoch) == ((3, 2, 1), 3, 0, 1)

    _top, answer = ctx.alter_partition(3, "foo", [3, 0, 2, 1], index=1)
    assert answer.error_code == ErrorCode.new_leader_elected
    done = ctx.partition("foo", 1)
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((0, 2, 1), (0, 2, 1), 0, 1)
    assert (done.adding_replicas, done.removing_replicas) == ((), ())
    assert ctx.reassignments() == {}


def test_reassign_partitions_completion_waits_for_every_target_replica_in_the_isr():
    """Until every target replica is in the ISR nothing is removed, and an ineligible (fenced) adding
    replica cannot join the ISR (KIP-841), so the reassignment cannot complete through it."""
    ctx = reassigning_context()
    ctx.brokers_ready(4)
    assert ctx.reassign("bar", {0: [1, 2, 3, 4, 0]}) == {0: OK}
    assert ctx.reassignments() == {("bar", 0): ((1, 2, 3, 4, 0), (0, 4), ())}
    ctx.alter_partition(1, "bar", [1, 2, 3, 4])
    assert ctx.partition("bar", 0).adding_replicas == (0, 4), "0 is not in the ISR yet"
    ctx.fence_brokers(0)
    _top, answer = ctx.alter_partition(1, "bar", [1, 2, 3, 4, 0])
    assert answer.error_code == ErrorCode.ineligible_replica
    assert ctx.reassignments() == {("bar", 0): ((1, 2, 3, 4, 0), (0, 4), ())}
    ctx.unfence_brokers(0)
    _top, answer = ctx.alter_partition(1, "bar", [1, 2, 3, 4, 0])
    assert answer.error_code == ErrorCode.none
    assert ctx.reassignments() == {}
    assert ctx.partition("bar", 0).replicas == (1, 2, 3, 4, 0)


def test_reassign_partitions_that_only_removes_replicas_completes_at_once():
    ctx = reassigning_context()
    assert ctx.reassign("bar", {0: [2, 3]}) == {0: OK}
    p = ctx.partition("bar", 0)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((2, 3), (2, 3), 2, 1)
    assert ctx.reassignments() == {}


def test_cancel_reassign_partitions():
    """testCancelReassignPartitions: cancelling drops the adding replicas and keeps the removing ones;
    NO_REASSIGNMENT_IN_PROGRESS where none runs; a revert that would need an unclean election is refused
    unless the topic allows one."""
    ctx = reassigning_context()
    ctx.reassign("foo", {1: [0, 2, 1]})
    assert ctx.reassign("foo", {0: None, 1: None}) == {
        0: (ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."),
        1: OK,
    }
    p = ctx.partition("foo", 1)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((2, 1, 3), (3, 2, 1), 3, 1)
    assert ctx.reassignments() == {}

    ctx.brokers_ready(4)
    ctx.reassign("bar", {0: [0, 4]})
    ctx.alter_partition(1, "bar", [1, 2, 3, 0])
    ctx.fence_brokers(1, 2, 3)  # the ISR is down to 0, a replica being added
    assert (ctx.partition("bar", 0).isr, ctx.partition("bar", 0).leader) == ((0,), 0)
    assert ctx.reassign("bar", {0: None}) == {
        0: (
            ErrorCode.invalid_replica_assignment,
            "Unable to revert partition assignment for bar:0 because it would require an unclean leader election.",
        )
    }
    ctx.incremental_alter_configs({(2, "bar"): {"unclean.leader.election.enable": (OpType.SET, "true")}})
    assert ctx.reassign("bar", {0: None}) == {0: OK}
    p = ctx.partition("bar", 0)
    assert (p.replicas, p.isr, p.leader, p.leader_recovery_state) == ((1, 2, 3), (1,), -1, 0)


def test_reassign_partitions_handles_new_reassignment_that_removes_previously_adding_replicas():
    ctx = reassigning_context()
    ctx.reassign("bar", {0: [0, 1, 2]})
    assert ctx.reassignments() == {("bar", 0): ((0, 1, 2, 3), (0,), (3,))}
    ctx.reassign("bar", {0: [1, 2, 3]})
    p = ctx.partition("bar", 0)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ((1, 2, 3), (1, 2, 3), (), ())


@pytest.mark.parametrize(
    ("target", "error", "message"),
    [
        (
            [],
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        ),
        (
            [1, 1],
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes the broker 1 more than once.",
        ),
        (
            [1, 9],
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        ),
    ],
)
def test_reassign_partitions_refuses_invalid_assignments(target, error, message):
    ctx = reassigning_context()
    assert ctx.reassign("bar", {0: target}) == {0: (error, message)}
    assert ctx.reassign("missing", {0: [1]}) == {
        0: (ErrorCode.unknown_topic_or_partition, "Unable to find a topic named missing.")
    }


def test_reassign_partitions_replication_factor_change_needs_permission():
    """AlterPartitionReassignments v1 (KIP-860): allowReplicationFactorChange=false refuses 3 -> 4."""
    ctx = reassigning_context()
    assert ctx.reassign("bar", {0: [1, 2, 3, 0]}, allow_rf_change=False) == {
        0: (
            ErrorCode.invalid_replication_factor,
            "The replication factor is changed from 3 to 4 but allowReplicationFactorChange is false.",
        )
    }


def test_reassign_partitions_adding_replica_with_a_stale_broker_epoch_cannot_join_the_isr():
    """KIP-903 during a reassignment: an adding replica that re-registered (new broker epoch) after its
    leader last saw it is INELIGIBLE_REPLICA, so the reassignment cannot complete on a stale incarnation."""
    ctx = reassigning_context()
    assert ctx.reassign("bar", {0: [1, 2, 3, 0]}) == {0: OK}
    stale = ctx.epoch(0)
    ctx.registration(0, incarnation=uuid.uuid4(), previous_broker_epoch=stale)  # a restart
    assert ctx.epoch(0) != stale
    ctx.unfence_brokers(0)
    _top, answer = ctx.alter_partition(1, "bar", [1, 2, 3, (0, stale)])
    assert answer.error_code == ErrorCode.ineligible_replica
    assert ctx.reassignments() == {("bar", 0): ((1, 2, 3, 0), (0,), ())}
    _top, answer = ctx.alter_partition(1, "bar", [1, 2, 3, 0])
    assert answer.error_code == ErrorCode.none
    assert ctx.reassignments() == {}
