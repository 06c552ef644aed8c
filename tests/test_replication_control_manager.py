"""Partition-count and replica changes on the controller core, after Kafka's ReplicationControlManagerTest
(testCreatePartitions..., testReassignPartitions..., testCancelReassignPartitions...)."""

from __future__ import annotations

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
