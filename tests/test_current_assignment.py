"""CurrentAssignmentBuilder: one member's reconciliation step, as Kafka's CurrentAssignmentBuilderTest."""

from __future__ import annotations

import uuid

import pytest

from epochkraft.broker import current_assignment
from epochkraft.broker.current_assignment import (
    ConsumerGroupMember,
    CurrentAssignmentBuilder,
    MemberState,
)

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def assignment(t1: tuple[int, ...] = (), t2: tuple[int, ...] = ()) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(p) for t, p in ((T1, t1), (T2, t2)) if p}


def member(state: MemberState, epoch: int, assigned, pending=None, previous: int | None = None):
    return ConsumerGroupMember(
        "member",
        state=state,
        member_epoch=epoch,
        previous_member_epoch=epoch if previous is None else previous,
        assigned=assigned,
        pending_revocation=pending or {},
    )


def build(start, target_epoch, target, partition_epoch=lambda _t, _p: -1, owned=None):
    return CurrentAssignmentBuilder(start, target_epoch, target, partition_epoch, owned).build()


def test_stable_to_stable():
    """CurrentAssignmentBuilderTest.testStableToStable"""
    start = member(MemberState.STABLE, 10, assignment((1, 2, 3), (4, 5, 6)))
    got = build(start, 11, assignment((1, 2, 3), (4, 5, 6)))
    assert got == member(MemberState.STABLE, 11, assignment((1, 2, 3), (4, 5, 6)), previous=10)


def test_stable_to_stable_with_new_partitions():
    """CurrentAssignmentBuilderTest.testStableToStableWithNewPartitions"""
    start = member(MemberState.STABLE, 10, assignment((1, 2, 3), (4, 5, 6)))
    got = build(start, 11, assignment((1, 2, 3, 4), (4, 5, 6, 7)))
    assert got == member(MemberState.STABLE, 11, assignment((1, 2, 3, 4), (4, 5, 6, 7)), previous=10)


def test_stable_to_unrevoked_partitions():
    """CurrentAssignmentBuilderTest.testStableToUnrevokedPartitions"""
    start = member(MemberState.STABLE, 10, assignment((1, 2, 3), (4, 5, 6)))
    got = build(start, 11, assignment((2, 3, 4), (5, 6, 7)))
    assert got == member(
        MemberState.UNREVOKED_PARTITIONS, 10, assignment((2, 3), (5, 6)), assignment((1,), (4,))
    )


def test_stable_to_unreleased_partitions():
    """CurrentAssignmentBuilderTest.testStableToUnreleasedPartitions"""
    start = member(MemberState.STABLE, 10, assignment((1, 2, 3), (4, 5, 6)))
    got = build(start, 11, assignment((1, 2, 3, 4), (4, 5, 6, 7)), lambda _t, _p: 10)
    assert got == member(MemberState.UNRELEASED_PARTITIONS, 11, assignment((1, 2, 3), (4, 5, 6)), previous=10)


def test_stable_to_unreleased_partitions_with_owned_partitions_not_having_revoked_partitions():
    """CurrentAssignmentBuilderTest.testStableToUnreleasedPartitionsWithOwnedPartitionsNotHavingRevokedPartitions"""
    start = member(MemberState.STABLE, 10, assignment((1, 2, 3), (4, 5, 6)))
    got = build(start, 11, assignment((1, 2, 3), (4, 5, 7)), lambda t, _p: 10 if t == T2 else -1, owned={})
    assert got == member(MemberState.UNRELEASED_PARTITIONS, 11, assignment((1, 2, 3), (4, 5)), previous=10)


def test_unrevoked_partitions_to_stable():
    """CurrentAssignmentBuilderTest.testUnrevokedPartitionsToStable"""
    start = member(MemberState.UNREVOKED_PARTITIONS, 10, assignment((2, 3), (5, 6)), assignment((1,), (4,)))
    got = build(start, 11, assignment((2, 3), (5, 6)), owned=assignment((2, 3), (5, 6)))
    assert got == member(MemberState.STABLE, 11, assignment((2, 3), (5, 6)), previous=10)


@pytest.mark.parametrize(
    "owned", [None, assignment((1, 2, 3), (5, 6)), assignment((2, 3), (4, 5, 6))], ids=["null", "t1", "t2"]
)
def test_remains_in_unrevoked_partitions(owned):
    """CurrentAssignmentBuilderTest.testRemainsInUnrevokedPartitions: while the member still reports a
    partition it must revoke (or reports nothing), it stays where it is."""
    start = member(MemberState.UNREVOKED_PARTITIONS, 10, assignment((2, 3), (5, 6)), assignment((1,), (4,)))
    assert build(start, 12, assignment((3,), (6,)), owned=owned) == start


def test_unrevoked_partitions_to_unrevoked_partitions():
    """CurrentAssignmentBuilderTest.testUnrevokedPartitionsToUnrevokedPartitions"""
    start = member(MemberState.UNREVOKED_PARTITIONS, 10, assignment((2, 3), (5, 6)), assignment((1,), (4,)))
    got = build(start, 12, assignment((3,), (6,)), owned=assignment((2, 3), (5, 6)))
    assert got == member(
        MemberState.UNREVOKED_PARTITIONS, 11, assignment((3,), (6,)), assignment((2,), (5,)), previous=10
    )


def test_unrevoked_partitions_to_unreleased_partitions():
    """CurrentAssignmentBuilderTest.testUnrevokedPartitionsToUnreleasedPartitions"""
    start = member(MemberState.UNREVOKED_PARTITIONS, 11, assignment((2, 3), (5, 6)), previous=10)
    got = build(
        start, 11, assignment((2, 3, 4), (5, 6, 7)), lambda _t, _p: 10, owned=assignment((2, 3), (5, 6))
    )
    assert got == member(MemberState.UNRELEASED_PARTITIONS, 11, assignment((2, 3), (5, 6)), previous=11)


def test_unreleased_partitions_to_stable():
    """CurrentAssignmentBuilderTest.testUnreleasedPartitionsToStable"""
    start = member(MemberState.UNRELEASED_PARTITIONS, 11, assignment((2, 3), (5, 6)), previous=11)
    got = build(start, 12, assignment((2, 3), (5, 6)), lambda _t, _p: 10)
    assert got == member(MemberState.STABLE, 12, assignment((2, 3), (5, 6)), previous=11)


def test_unreleased_partitions_to_stable_with_new_partitions():
    """CurrentAssignmentBuilderTest.testUnreleasedPartitionsToStableWithNewPartitions"""
    start = member(MemberState.UNRELEASED_PARTITIONS, 11, assignment((2, 3), (5, 6)), previous=11)
    got = build(start, 11, assignment((2, 3, 4), (5, 6, 7)))
    assert got == member(MemberState.STABLE, 11, assignment((2, 3, 4), (5, 6, 7)), previous=11)


def test_unreleased_partitions_to_unreleased_partitions():
    """CurrentAssignmentBuilderTest.testUnreleasedPartitionsToUnreleasedPartitions"""
    start = member(MemberState.UNRELEASED_PARTITIONS, 11, assignment((2, 3), (5, 6)), previous=11)
    got = build(start, 11, assignment((2, 3, 4), (5, 6, 7)), lambda _t, _p: 10)
    assert got == start


def test_unreleased_partitions_to_unrevoked_partitions():
    """CurrentAssignmentBuilderTest.testUnreleasedPartitionsToUnrevokedPartitions"""
    start = member(MemberState.UNRELEASED_PARTITIONS, 11, assignment((2, 3), (5, 6)), previous=11)
    got = build(start, 12, assignment((3,), (6,)))
    assert got == member(
        MemberState.UNREVOKED_PARTITIONS, 11, assignment((3,), (6,)), assignment((2,), (5,)), previous=11
    )


def test_unsafe_switch_hands_out_a_partition_another_member_still_owns(monkeypatch):
    """The rule the builder keeps (a partition is given only once its previous owner released it) is
    what the unsafe switch breaks: with it, the unreleased partitions are handed out at once."""
    start = member(MemberState.STABLE, 10, assignment((1,)))
    target = assignment((1, 2))
    assert build(start, 11, target, lambda _t, _p: 10).assigned == assignment((1,))
    monkeypatch.setattr(current_assignment, "UNSAFE_ASSIGN_UNRELEASED_PARTITIONS_FOR_TESTS", True)
    assert build(start, 11, target, lambda _t, _p: 10).assigned == assignment((1, 2))
