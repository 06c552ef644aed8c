"""The server-side assignors, as Kafka's RangeAssignorTest and UniformAssignorTest
(OptimizedUniformAssignmentBuilderTest, UniformHeterogeneousAssignmentBuilderTest) cases."""

from __future__ import annotations

import random
import uuid

from epochkraft.broker.assignors import MemberSubscription, RangeAssignor, UniformAssignor

T1, T2, T3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
MISSING = uuid.UUID(int=99)


def sub(*topics: uuid.UUID, assignment=None, instance_id=None) -> MemberSubscription:
    return MemberSubscription(frozenset(topics), instance_id, None, assignment or {})


def a(**topics: tuple[int, ...]) -> dict[uuid.UUID, frozenset[int]]:
    ids = {"t1": T1, "t2": T2, "t3": T3}
    return {ids[name]: frozenset(parts) for name, parts in topics.items() if parts}


def flat(result) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for assignment in result.values() for t, parts in assignment.items() for p in parts}


def sizes(result) -> list[int]:
    return sorted(sum(len(p) for p in assignment.values()) for assignment in result.values())


def assert_valid(result, counts) -> None:
    owned = [(t, p) for assignment in result.values() for t, parts in assignment.items() for p in parts]
    assert len(owned) == len(set(owned)), "a partition given to two members"
    assert set(owned) == {(t, p) for t, n in counts.items() for p in range(n)}


# ---- RangeAssignorTest ---------------------------------------------------------------------------------
def test_range_one_member_no_topic():
    """RangeAssignorTest.testOneMemberNoTopic"""
    assert RangeAssignor().assign({"A": sub()}, {T1: 3}) == {"A": {}}


def test_range_one_member_subscribed_to_non_existent_topic():
    """RangeAssignorTest.testOneMemberSubscribedToNonExistentTopic: here the topic is left out (the
    coordinator only subscribes members to topics that exist) rather than failing the assignment."""
    assert RangeAssignor().assign({"A": sub(MISSING)}, {T1: 3}) == {"A": {}}


def test_first_assignment_two_members_two_topics_same_subscriptions():
    """RangeAssignorTest.testFirstAssignmentTwoMembersTwoTopicsSameSubscriptions"""
    got = RangeAssignor().assign({"A": sub(T1, T3), "B": sub(T1, T3)}, {T1: 3, T3: 2})
    assert got == {"A": a(t1=(0, 1), t3=(0,)), "B": a(t1=(2,), t3=(1,))}


def test_first_assignment_three_members_three_topics_different_subscriptions():
    """RangeAssignorTest.testFirstAssignmentThreeMembersThreeTopicsDifferentSubscriptions"""
    got = RangeAssignor().assign({"A": sub(T1, T2), "B": sub(T3), "C": sub(T2, T3)}, {T1: 3, T2: 3, T3: 2})
    assert got == {"A": a(t1=(0, 1, 2), t2=(0, 1)), "B": a(t3=(0,)), "C": a(t2=(2,), t3=(1,))}


def test_first_assignment_num_members_greater_than_num_partitions():
    """RangeAssignorTest.testFirstAssignmentNumMembersGreaterThanNumPartitions"""
    got = RangeAssignor().assign({m: sub(T1, T3) for m in "ABC"}, {T1: 3, T3: 2})
    assert got == {"A": a(t1=(0,), t3=(0,)), "B": a(t1=(1,), t3=(1,)), "C": a(t1=(2,))}


def test_range_static_membership():
    """RangeAssignorTest.testStaticMembership: static members are ordered by instance id, so a restarted
    instance with a new member id gets the same ranges."""
    before = RangeAssignor().assign({"A": sub(T1, instance_id="i2"), "B": sub(T1, instance_id="i1")}, {T1: 4})
    after = RangeAssignor().assign({"Z": sub(T1, instance_id="i2"), "B": sub(T1, instance_id="i1")}, {T1: 4})
    assert before["B"] == after["B"] == a(t1=(0, 1)) and before["A"] == after["Z"] == a(t1=(2, 3))


def test_range_reassignment_when_one_member_added_after_initial_assignment_with_two_members_two_topics():
    """RangeAssignorTest.testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics"""
    members = {
        "A": sub(T1, T2, assignment=a(t1=(0, 1), t2=(0, 1))),
        "B": sub(T1, T2, assignment=a(t1=(2,), t2=(2,))),
        "C": sub(T1, T2),
    }
    got = RangeAssignor().assign(members, {T1: 3, T2: 3})
    assert got == {"A": a(t1=(0,), t2=(0,)), "B": a(t1=(1,), t2=(1,)), "C": a(t1=(2,), t2=(2,))}


# ---- UniformAssignorTest -------------------------------------------------------------------------------
def test_one_member_no_topic_subscription():
    """OptimizedUniformAssignmentBuilderTest.testOneMemberNoTopicSubscription"""
    assert UniformAssignor().assign({"A": sub()}, {T1: 3}) == {"A": {}}


def test_one_member_subscribed_to_nonexistent_topic():
    """OptimizedUniformAssignmentBuilderTest.testOneMemberSubscribedToNonexistentTopic (left out here)"""
    assert UniformAssignor().assign({"A": sub(MISSING)}, {T1: 3}) == {"A": {}}


def test_first_assignment_two_members_two_topics_no_member_racks():
    """OptimizedUniformAssignmentBuilderTest.testFirstAssignmentTwoMembersTwoTopicsNoMemberRacks"""
    got = UniformAssignor().assign({"A": sub(T1, T3), "B": sub(T1, T3)}, {T1: 3, T3: 2})
    assert_valid(got, {T1: 3, T3: 2})
    assert sizes(got) == [2, 3]


def test_first_assignment_num_members_greater_than_total_num_partitions():
    """OptimizedUniformAssignmentBuilderTest.testFirstAssignmentNumMembersGreaterThanTotalNumPartitions"""
    got = UniformAssignor().assign({m: sub(T3, T1) for m in "ABCDEFGHIJ"}, {T1: 3, T3: 3})
    assert_valid(got, {T1: 3, T3: 3})
    assert sizes(got) == [0] * 4 + [1] * 6


def test_validity_and_balance_for_large_sample_set():
    """OptimizedUniformAssignmentBuilderTest.testValidityAndBalanceForLargeSampleSet"""
    counts = {uuid.UUID(int=i + 1): 50 for i in range(10)}
    got = UniformAssignor().assign({f"m{i}": sub(*counts) for i in range(30)}, counts)
    assert_valid(got, counts)
    assert max(sizes(got)) - min(sizes(got)) <= 1


def test_reassignment_for_two_members_two_topics_given_unbalanced_prev_assignment():
    """OptimizedUniformAssignmentBuilderTest.testReassignmentForTwoMembersTwoTopicsGivenUnbalancedPrevAssignment:
    the member over its quota gives up partitions, each keeps what it can."""
    members = {
        "A": sub(T1, T2, assignment=a(t1=(0, 1, 2), t2=(0, 1))),
        "B": sub(T1, T2, assignment=a(t2=(2,))),
    }
    got = UniformAssignor().assign(members, {T1: 3, T2: 3})
    assert_valid(got, {T1: 3, T2: 3})
    assert sizes(got) == [3, 3]
    assert got["B"][T2] >= {2}


def test_reassignment_when_partitions_are_added_for_two_members_two_topics():
    """OptimizedUniformAssignmentBuilderTest.testReassignmentWhenPartitionsAreAddedForTwoMembersTwoTopics"""
    members = {
        "A": sub(T1, T2, assignment=a(t1=(0, 2), t2=(0,))),
        "B": sub(T1, T2, assignment=a(t1=(1,), t2=(1, 2))),
    }
    got = UniformAssignor().assign(members, {T1: 6, T2: 5})
    assert_valid(got, {T1: 6, T2: 5})
    assert sizes(got) == [5, 6]
    for m in "AB":  # sticky: nobody loses a partition
        for t, parts in members[m].assignment.items():
            assert parts <= got[m][t]


def test_reassignment_when_one_member_added_after_initial_assignment_with_two_members_two_topics():
    """OptimizedUniformAssignmentBuilderTest.testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics"""
    members = {
        "A": sub(T1, T2, assignment=a(t1=(0, 2), t2=(0,))),
        "B": sub(T1, T2, assignment=a(t1=(1,), t2=(1, 2))),
        "C": sub(T1, T2),
    }
    got = UniformAssignor().assign(members, {T1: 3, T2: 3})
    assert_valid(got, {T1: 3, T2: 3})
    assert sizes(got) == [2, 2, 2]
    moved = sum(len(got["C"].get(t, frozenset())) for t in (T1, T2))
    assert moved == 2  # only what the new member needs moves


def test_reassignment_when_one_member_removed_after_initial_assignment_with_three_members_two_topics():
    """OptimizedUniformAssignmentBuilderTest.testReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithThreeMembersTwoTopics"""
    members = {
        "A": sub(T1, T2, assignment=a(t1=(0,), t2=(0,))),
        "B": sub(T1, T2, assignment=a(t1=(1,), t2=(1,))),
    }
    got = UniformAssignor().assign(members, {T1: 3, T2: 3})
    assert_valid(got, {T1: 3, T2: 3})
    assert sizes(got) == [3, 3]
    assert got["A"][T1] >= {0} and got["B"][T1] >= {1}


def test_reassignment_when_one_subscription_removed_after_initial_assignment_with_two_members_two_topics():
    """OptimizedUniformAssignmentBuilderTest.testReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics"""
    members = {
        "A": sub(T2, assignment=a(t1=(0,), t2=(0,))),
        "B": sub(T2, assignment=a(t1=(1,), t2=(1,))),
    }
    got = UniformAssignor().assign(members, {T2: 2})
    assert got == {"A": a(t2=(0,)), "B": a(t2=(1,))}


def test_heterogeneous_subscriptions_are_valid_and_balanced_where_they_can_be():
    """UniformHeterogeneousAssignmentBuilderTest: a member only gets topics it subscribes to; members
    sharing topics end within one partition of each other."""
    rng = random.Random(7)
    counts = {T1: 7, T2: 5, T3: 3}
    for _ in range(50):
        members = {
            f"m{i}": sub(*rng.sample([T1, T2, T3], rng.randint(1, 3))) for i in range(rng.randint(1, 6))
        }
        subscribed = {t for m in members.values() for t in m.subscribed_topic_ids}
        got = UniformAssignor().assign(members, counts)
        assert_valid(got, {t: counts[t] for t in subscribed})
        for m, assignment in got.items():
            assert set(assignment) <= members[m].subscribed_topic_ids
        everyone = [m for m in members if members[m].subscribed_topic_ids == {T1, T2, T3}]
        if len(everyone) == len(members):
            assert max(sizes(got)) - min(sizes(got)) <= 1
