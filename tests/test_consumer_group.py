"""KIP-848 consumer groups in the sans-IO coordinator, as Kafka's GroupMetadataManagerTest consumer group
cases: heartbeats, member epochs, reconciliation, static members, timeouts and topic changes."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import pytest

from epochkraft.broker import consumer_group_records, current_assignment
from epochkraft.broker.consumer_group import (
    ConsumerGroup,
    ConsumerGroupCoordinator,
    ConsumerGroupSettings,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
    TopicMetadata,
)
from epochkraft.broker.current_assignment import ConsumerGroupMember, MemberState
from epochkraft.broker.group_coordinator import GroupCoordinator, GroupSettings
from epochkraft.protocol.errors import ErrorCode
from epochkraft.server import broker_daemon

SESSION_MS, REBALANCE_MS = 45_000, 30_000


class Topics:
    """A TopicsImage the tests change: create, delete, add partitions."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicMetadata] = {}
        self.version = 0
        self.listed = 0  # calls of names()

    def create(self, name: str, partitions: int) -> uuid.UUID:
        topic_id = uuid.uuid5(uuid.NAMESPACE_OID, name)
        self.topics[name] = TopicMetadata(topic_id, name, partitions)
        self.version += 1
        return topic_id

    def delete(self, name: str) -> None:
        del self.topics[name]
        self.version += 1

    def by_name(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def names(self) -> Iterable[str]:
        self.listed += 1
        return list(self.topics)


class Context:
    """A coordinator, a clock and the topics, with verbs that assert on each answer."""

    def __init__(self, **settings) -> None:
        self.classic = GroupCoordinator(GroupSettings(initial_rebalance_delay_ms=0))
        self.coordinator = ConsumerGroupCoordinator(ConsumerGroupSettings(**settings), self.classic)
        self.topics = Topics()
        self.now = 0

    def heartbeat(self, member_id: str, epoch: int, group: str = "grp", **fields) -> HeartbeatResult:
        return self.coordinator.heartbeat(
            self.now, HeartbeatRequest(group, member_id, epoch, **fields), self.topics
        )

    def join(self, member_id: str, topics: tuple[str, ...] = ("foo",), **fields) -> HeartbeatResult:
        fields.setdefault("rebalance_timeout_ms", REBALANCE_MS)
        result = self.heartbeat(member_id, 0, subscribed_topic_names=topics, owned={}, **fields)
        assert result.error == ErrorCode.none, result
        return result

    def poll(self, member_id: str, epoch: int, owned, **fields) -> HeartbeatResult:
        result = self.heartbeat(member_id, epoch, owned=owned, **fields)
        assert result.error == ErrorCode.none, result
        return result

    def group(self, group_id: str = "grp"):
        return self.coordinator.groups[group_id]

    def advance(self, ms: int) -> list[tuple[str, str]]:
        self.now += ms
        return self.coordinator.tick(self.now)


def parts(result: HeartbeatResult | dict) -> set[int]:
    assignment = result.assignment if isinstance(result, HeartbeatResult) else result
    assert assignment is not None
    return {p for ps in assignment.values() for p in ps}


def count(result: HeartbeatResult) -> int:
    assert result.assignment is not None
    return sum(len(ps) for ps in result.assignment.values())


@pytest.fixture
def ctx() -> Context:
    c = Context()
    c.topics.create("foo", 6)
    c.topics.create("bar", 3)
    return c


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"member_id": "m", "member_epoch": 1, "group_id": ""}, "GroupId can't be empty."),
        ({"member_id": "", "member_epoch": 1}, "MemberId can't be empty."),
        ({"member_id": "m", "member_epoch": 1, "instance_id": ""}, "InstanceId can't be empty."),
        ({"member_id": "m", "member_epoch": 1, "rack_id": ""}, "RackId can't be empty."),
        (
            {"member_id": "m", "member_epoch": 0, "owned": {}, "subscribed_topic_names": ("foo",)},
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        (
            {
                "member_id": "m",
                "member_epoch": 0,
                "rebalance_timeout_ms": 5000,
                "subscribed_topic_names": ("f",),
            },
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            {"member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 5000, "owned": {}},
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
        ),
        ({"member_id": "", "member_epoch": -1, "group_id": ""}, "MemberId can't be empty."),
        ({"member_id": "m", "member_epoch": -2}, "InstanceId can't be null."),
        ({"member_id": "m", "member_epoch": -3}, "MemberEpoch is invalid."),
    ],
)
def test_consumer_heartbeat_request_validation(ctx, fields, message):
    """GroupMetadataManagerTest.testConsumerHeartbeatRequestValidation, in the order of Kafka 4.4's
    GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid (the member id first)."""
    request = {"group_id": "grp", **fields}
    result = ctx.coordinator.heartbeat(0, HeartbeatRequest(**request), ctx.topics)
    assert (result.error, result.error_message) == (ErrorCode.invalid_request, message)


def test_consumer_heartbeat_regex_validation(ctx):
    """GroupMetadataManagerTest.testConsumerHeartbeatRegexValidation"""
    result = ctx.heartbeat(
        "m", 0, rebalance_timeout_ms=5000, owned={}, subscribed_topic_regex="[", subscribed_topic_names=None
    )
    assert (result.error, result.error_message) == (
        ErrorCode.invalid_regular_expression,
        "SubscribedTopicRegex `[` is not a valid regular expression: missing ]: [.",
    )


def test_unsupported_server_assignor(ctx):
    result = ctx.heartbeat(
        "m", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",), server_assignor="sticky"
    )
    assert result.error == ErrorCode.unsupported_assignor


def test_member_id_generation(ctx):
    """GroupMetadataManagerTest.testMemberIdGeneration: v0 lets the coordinator choose the member id."""
    result = ctx.join("", api_version=0)
    assert result.member_id and result.member_epoch == 1


def test_unknown_group_id(ctx):
    """GroupMetadataManagerTest.testUnknownGroupId"""
    assert ctx.heartbeat("m", 100, owned={}).error == ErrorCode.group_id_not_found


def test_unknown_member_id_joins_consumer_group(ctx):
    """GroupMetadataManagerTest.testUnknownMemberIdJoinsConsumerGroup"""
    ctx.join("a")
    assert ctx.heartbeat("b", 1, owned={}).error == ErrorCode.unknown_member_id


def test_consumer_group_member_epoch_validation(ctx):
    """GroupMetadataManagerTest.testConsumerGroupMemberEpochValidation: a larger epoch is fenced; a
    smaller one only when it is the previous epoch with partitions the member still has (a lost response)."""
    ctx.join("a")
    assert ctx.group().members["a"].member_epoch == 1
    assert ctx.heartbeat("a", 2, owned={}).error == ErrorCode.fenced_member_epoch
    ctx.topics.create("foo", 7)  # epoch 2
    ctx.poll("a", 1, None)
    member = ctx.group().members["a"]
    assert (member.member_epoch, member.previous_member_epoch) == (2, 1)
    owned = dict(member.assigned)
    assert ctx.heartbeat("a", 1, owned=owned).error == ErrorCode.none  # the previous epoch, a subset
    assert (
        ctx.heartbeat("a", 1, owned={uuid.UUID(int=5): frozenset({0})}).error == ErrorCode.fenced_member_epoch
    )
    assert ctx.heartbeat("a", 0, owned={}, rebalance_timeout_ms=1, subscribed_topic_names=("foo",)).error == (
        ErrorCode.fenced_member_epoch
    )


def test_member_joins_empty_consumer_group(ctx):
    """GroupMetadataManagerTest.testMemberJoinsEmptyConsumerGroup"""
    result = ctx.join("a", ("foo", "bar"))
    assert result.member_epoch == 1 and result.heartbeat_interval_ms == 5000
    assert count(result) == 9
    group = ctx.group()
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, ConsumerGroupState.STABLE)


def test_updating_subscription_triggers_new_target_assignment(ctx):
    """GroupMetadataManagerTest.testUpdatingSubscriptionTriggersNewTargetAssignment"""
    first = ctx.join("a", ("foo",))
    result = ctx.poll("a", 1, first.assignment, subscribed_topic_names=("foo", "bar"))
    assert result.member_epoch == 2 and count(result) == 9


def test_new_joining_member_triggers_new_target_assignment(ctx):
    """GroupMetadataManagerTest.testNewJoiningMemberTriggersNewTargetAssignment: the new member waits for
    the partitions the first must give up (UNRELEASED), the first revokes them (UNREVOKED), then both
    reach the new epoch with disjoint halves."""
    a1 = ctx.join("a")
    assert parts(a1) == set(range(6))
    b1 = ctx.join("b")
    assert b1.member_epoch == 2 and parts(b1) == set()
    assert ctx.group().members["b"].state == MemberState.UNRELEASED_PARTITIONS
    a2 = ctx.poll("a", 1, a1.assignment)
    assert a2.member_epoch == 1 and len(parts(a2)) == 3  # revoke three first
    assert ctx.group().members["a"].state == MemberState.UNREVOKED_PARTITIONS
    b2 = ctx.poll("b", 2, {})
    assert b2.assignment is None  # nothing released yet
    a3 = ctx.poll("a", 1, a2.assignment)
    assert a3.member_epoch == 2 and a3.assignment is None
    b3 = ctx.poll("b", 2, {})
    assert parts(b3) == set(range(6)) - parts(a2)
    assert ctx.group().state == ConsumerGroupState.STABLE


def test_leaving_member_bumps_group_epoch(ctx):
    """GroupMetadataManagerTest.testLeavingMemberBumpsGroupEpoch"""
    ctx.join("a")
    ctx.join("b")
    result = ctx.heartbeat("b", -1)
    assert (result.error, result.member_epoch) == (ErrorCode.none, -1)
    group = ctx.group()
    assert "b" not in group.members and group.group_epoch == 3
    assert group.state == ConsumerGroupState.ASSIGNING


def test_group_epoch_bump_when_new_static_member_joins(ctx):
    """GroupMetadataManagerTest.testGroupEpochBumpWhenNewStaticMemberJoins"""
    ctx.join("a", instance_id="i1")
    ctx.join("b", instance_id="i2")
    assert ctx.group().group_epoch == 2 and ctx.group().static_members == {"i1": "a", "i2": "b"}


def test_static_member_gets_back_assignment_upon_rejoin(ctx):
    """GroupMetadataManagerTest.testStaticMemberGetsBackAssignmentUponRejoin and
    testNoGroupEpochBumpWhenStaticMemberTemporarilyLeaves: a static member that leaves with epoch -2 keeps
    its assignment; its successor with the same instance id gets it back without a rebalance."""
    ctx.join("a", instance_id="i1")
    ctx.join("b", instance_id="i2")
    a = ctx.poll("a", 1, ctx.group().members["a"].assigned)
    a = ctx.poll("a", 1, a.assignment)
    ctx.poll("b", 2, {})
    before = ctx.group().members["b"].assigned
    epoch = ctx.group().group_epoch
    left = ctx.heartbeat("b", -2, instance_id="i2")
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    assert ctx.group().group_epoch == epoch and ctx.group().members["b"].member_epoch == -2
    rejoined = ctx.join("b2", instance_id="i2")
    assert rejoined.member_epoch == epoch and rejoined.assignment == before
    assert ctx.group().group_epoch == epoch and "b" not in ctx.group().members


def test_static_member_rejoins_with_new_subscribed_topics(ctx):
    """GroupMetadataManagerTest.testStaticMemberRejoinsWithNewSubscribedTopics"""
    ctx.join("a", instance_id="i1")
    ctx.heartbeat("a", -2, instance_id="i1")
    result = ctx.join("a2", ("foo", "bar"), instance_id="i1")
    assert ctx.group().group_epoch == 2 and result.member_epoch == 2 and count(result) == 9


def test_leaving_static_member_bumps_group_epoch(ctx):
    """GroupMetadataManagerTest.testLeavingStaticMemberBumpsGroupEpoch"""
    ctx.join("a", instance_id="i1")
    result = ctx.heartbeat("a", -1, instance_id="i1")
    assert result.member_epoch == -1 and ctx.group().group_epoch == 2 and not ctx.group().members


def test_should_throw_unreleased_instance_id_exception_when_new_member_joins_with_in_use_instance_id(ctx):
    """GroupMetadataManagerTest.testShouldThrownUnreleasedInstanceIdExceptionWhenNewMemberJoinsWithInUseInstanceId"""
    ctx.join("a", instance_id="i1")
    result = ctx.heartbeat(
        "b", 0, instance_id="i1", rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",)
    )
    assert result.error == ErrorCode.unreleased_instance_id


def test_should_throw_unknown_member_id_exception_when_unknown_static_member_joins(ctx):
    """GroupMetadataManagerTest.testShouldThrownUnknownMemberIdExceptionWhenUnknownStaticMemberJoins"""
    ctx.join("a", instance_id="i1")
    assert ctx.heartbeat("b", 1, instance_id="i2", owned={}).error == ErrorCode.unknown_member_id


def test_should_throw_fenced_instance_id_exception_when_static_member_with_different_member_id_joins(ctx):
    """GroupMetadataManagerTest.testShouldThrowFencedInstanceIdExceptionWhenStaticMemberWithDifferentMemberIdJoins"""
    ctx.join("a", instance_id="i1")
    assert ctx.heartbeat("b", 1, instance_id="i1", owned={}).error == ErrorCode.fenced_instance_id


def test_static_member_leave_errors(ctx):
    """GroupMetadataManagerTest.testShouldThrowUnknownMemberIdExceptionWhenUnknownStaticMemberLeaves and
    testShouldThrowFencedInstanceIdExceptionWhenStaticMemberWithDifferentMemberIdLeaves"""
    ctx.join("a", instance_id="i1")
    assert ctx.heartbeat("a", -2, instance_id="i9").error == ErrorCode.unknown_member_id
    assert ctx.heartbeat("b", -2, instance_id="i1").error == ErrorCode.fenced_instance_id


def test_consumer_group_heartbeat_full_response(ctx):
    """GroupMetadataManagerTest.testConsumerGroupHeartbeatFullResponse: a full request (rebalance
    timeout, subscription and owned partitions all set) gets the assignment even when unchanged."""
    first = ctx.join("a")
    assert ctx.poll("a", 1, first.assignment).assignment is None
    full = ctx.poll(
        "a", 1, first.assignment, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=("foo",)
    )
    assert full.assignment == first.assignment


def test_reconciliation_process(ctx):
    """GroupMetadataManagerTest.testReconciliationProcess, reduced: three members converge, and at no
    step is a partition owned by two members."""
    members = {"a": ctx.join("a").assignment, "b": ctx.join("b").assignment, "c": ctx.join("c").assignment}
    epochs = {m: ctx.group().members[m].member_epoch for m in members}
    for _ in range(6):
        for m in members:
            result = ctx.poll(m, epochs[m], members[m])
            epochs[m] = result.member_epoch
            if result.assignment is not None:
                members[m] = result.assignment
            assert_no_partition_owned_twice(ctx)
    assert ctx.group().state == ConsumerGroupState.STABLE
    assert sorted(len(parts(a)) for a in members.values()) == [2, 2, 2]


def assert_no_partition_owned_twice(ctx: Context) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for member in ctx.group().members.values():
        for assignment in (member.assigned, member.pending_revocation):
            for topic, ps in assignment.items():
                for p in ps:
                    assert (topic, p) not in seen, f"partition {p} owned twice"
                    seen.add((topic, p))


def test_unsafe_switch_lets_two_members_own_a_partition(ctx, monkeypatch):
    """The check above fails with partitions handed out before their owner revoked them."""
    monkeypatch.setattr(current_assignment, "UNSAFE_ASSIGN_UNRELEASED_PARTITIONS_FOR_TESTS", True)
    ctx.join("a")
    ctx.join("b")
    with pytest.raises(AssertionError, match="owned twice"):
        assert_no_partition_owned_twice(ctx)


def test_new_member_is_rejected_with_maximum_members_is_reached():
    """GroupMetadataManagerTest.testNewMemberIsRejectedWithMaximumMembersIsReached"""
    c = Context(max_size=1)
    c.topics.create("foo", 1)
    c.join("a")
    result = c.heartbeat("b", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",))
    assert result.error == ErrorCode.group_max_size_reached


def test_a_static_members_successor_is_refused_while_the_group_is_full():
    """throwIfConsumerGroupIsFull looks at the member id alone: a static member's successor (a new member
    id with the same instance id) is refused while the member it replaces, gone with epoch -2, still
    counts; once its session has expired the successor joins."""
    c = Context(max_size=1)
    c.topics.create("foo", 1)
    c.join("a", instance_id="i1")
    assert c.heartbeat("a", -2, instance_id="i1").error == ErrorCode.none
    successor = c.heartbeat(
        "b", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",), instance_id="i1"
    )
    assert successor.error == ErrorCode.group_max_size_reached
    assert c.advance(45_000) == [("grp", "a")]
    c.join("b", instance_id="i1")


def test_consumer_group_states(ctx):
    """GroupMetadataManagerTest.testConsumerGroupStates"""
    a = ctx.join("a")
    assert ctx.group().state == ConsumerGroupState.STABLE
    ctx.join("b")
    assert ctx.group().state == ConsumerGroupState.RECONCILING
    ctx.heartbeat("b", -1)
    assert ctx.group().state == ConsumerGroupState.ASSIGNING
    ctx.poll("a", 1, a.assignment)
    assert ctx.group().state == ConsumerGroupState.STABLE
    ctx.heartbeat("a", -1)
    assert ctx.group().state == ConsumerGroupState.EMPTY


def test_on_new_metadata_image(ctx):
    """GroupMetadataManagerTest.testOnNewMetadataImage: partitions added, a topic created that a member
    subscribes to, a topic deleted: each bumps the group epoch and the assignment follows."""
    a = ctx.join("a", ("foo", "baz"))
    assert len(parts(a)) == 6
    ctx.topics.create("foo", 8)
    a = ctx.poll("a", 1, a.assignment)
    assert a.member_epoch == 2 and count(a) == 8
    ctx.topics.create("baz", 2)
    a = ctx.poll("a", 2, a.assignment)
    assert a.member_epoch == 3 and count(a) == 10
    ctx.topics.delete("foo")
    a = ctx.poll("a", 3, a.assignment)
    assert a.member_epoch == 4 and a.assignment == {ctx.topics.by_name("baz").topic_id: frozenset({0, 1})}


def test_regex_subscription_follows_topic_creation(ctx):
    a = ctx.heartbeat("a", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_regex="ba.*")
    assert a.error == ErrorCode.none and count(a) == 3
    ctx.topics.create("baz", 2)
    a = ctx.poll("a", 1, a.assignment)
    assert count(a) == 5


@pytest.mark.timeout(20)
def test_subscribed_topic_regex_is_matched_in_linear_time(ctx):
    """Kafka compiles SubscribedTopicRegex with RE2J: a pattern that backtracks exponentially in a
    backtracking engine matches a long topic name at once."""
    ctx.topics.create("a" * 40, 1)
    a = ctx.heartbeat("a", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_regex="(.+)+X")
    assert a.error == ErrorCode.none and count(a) == 0


def test_regex_resolved_once_per_metadata_version(ctx):
    """GroupMetadataManager resolves a group's regular expressions when the metadata image changes, not at
    every heartbeat of every member."""
    a = ctx.heartbeat("a", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_regex="ba.*")
    b = ctx.heartbeat("b", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_regex="ba.*")
    listed = ctx.topics.listed
    for _ in range(3):
        a = ctx.poll("a", a.member_epoch, None)
        b = ctx.poll("b", b.member_epoch, None)
    assert ctx.topics.listed == listed
    ctx.topics.create("baz", 2)
    ctx.poll("a", a.member_epoch, None)
    ctx.poll("b", b.member_epoch, None)
    assert ctx.topics.listed == listed + 1 and "baz" in ctx.group().subscription_metadata


def test_regex_matched_topics_filtered_by_describe_authorization(ctx):
    """Kafka 4.x's coordinator keeps the topics a regular expression matches only if the principal may
    DESCRIBE them."""
    a = ctx.heartbeat(
        "a",
        0,
        rebalance_timeout_ms=1,
        owned={},
        subscribed_topic_regex="foo|bar",
        topic_authorized=lambda name: name == "bar",
    )
    assert a.error == ErrorCode.none and set(a.assignment) == {ctx.topics.by_name("bar").topic_id}
    assert set(ctx.group().subscription_metadata) == {"bar"}


def test_session_timeout_expiration(ctx):
    """GroupMetadataManagerTest.testSessionTimeoutLifecycle and testSessionTimeoutExpiration"""
    ctx.join("a")
    assert ctx.advance(SESSION_MS - 1) == []
    ctx.poll("a", 1, None)
    assert ctx.advance(SESSION_MS - 1) == []
    assert ctx.advance(1) == [("grp", "a")]
    assert not ctx.group().members and ctx.group().group_epoch == 2
    assert ctx.heartbeat("a", 1, owned={}).error == ErrorCode.unknown_member_id


def test_session_timeout_expiration_static_member(ctx):
    """GroupMetadataManagerTest.testSessionTimeoutExpirationStaticMember: a static member that left with
    -2 is removed once its session expires."""
    ctx.join("a", instance_id="i1")
    ctx.heartbeat("a", -2, instance_id="i1")
    assert ctx.advance(SESSION_MS) == [("grp", "a")]
    assert ctx.group().static_members == {}


def test_rebalance_timeout_expiration(ctx):
    """GroupMetadataManagerTest.testRebalanceTimeoutLifecycle and testRebalanceTimeoutExpiration: a member
    that does not revoke within its rebalance timeout is fenced and its partitions go to the others."""
    a = ctx.join("a", rebalance_timeout_ms=12_000)
    ctx.join("b")
    ctx.poll("a", 1, a.assignment)  # asked to revoke
    assert ctx.group().members["a"].state == MemberState.UNREVOKED_PARTITIONS
    ctx.advance(11_000)
    ctx.poll("a", 1, a.assignment)  # still owns them
    ctx.poll("b", 2, {})
    assert ctx.advance(1_000) == [("grp", "a")]
    b = ctx.poll("b", 2, {})
    assert b.member_epoch == 3 and len(parts(b)) == 6


def test_rebalance_timeout_rescheduled_when_member_moves_to_another_revocation(ctx):
    """GroupMetadataManager schedules the rebalance timeout again at every change of a member revoking
    partitions: revoking one set, then asked to revoke another, it gets its full timeout for the second."""
    a = ctx.join("a", rebalance_timeout_ms=12_000)
    ctx.join("b")
    ctx.poll("a", 1, a.assignment)  # asked to revoke 3 of its 6 partitions
    first = ctx.group().members["a"]
    assert first.state == MemberState.UNREVOKED_PARTITIONS
    ctx.join("c")
    ctx.advance(10_000)
    ctx.poll("a", 1, first.assigned)  # revoked them; asked to revoke one more for c
    second = ctx.group().members["a"]
    assert second.state == MemberState.UNREVOKED_PARTITIONS and second.member_epoch == 2
    ctx.poll("b", 2, {})
    ctx.poll("c", 3, {})
    assert ctx.advance(11_000) == []
    assert ctx.advance(1_000) == [("grp", "a")]


def test_offset_commit_and_fetch_with_member_epochs(ctx):
    """ConsumerGroupTest.testValidateOffsetCommit / testValidateOffsetFetch"""
    ctx.join("a")
    validate = ctx.coordinator.validate_offset_commit
    assert validate("grp", "a", 1, 9) == ErrorCode.none
    assert validate("grp", "a", 2, 9) == ErrorCode.stale_member_epoch
    assert validate("grp", "x", 1, 9) == ErrorCode.unknown_member_id
    assert validate("grp", "", -1, 9) == ErrorCode.unknown_member_id  # a live group refuses admin commits
    assert validate("grp", "a", 1, 8) == ErrorCode.unsupported_version
    assert validate("other", "", -1, 9) is None  # not a consumer group
    fetch = ctx.coordinator.validate_offset_fetch
    assert fetch("grp", None, -1) == ErrorCode.none
    assert fetch("grp", "a", 0) == ErrorCode.stale_member_epoch
    assert fetch("grp", "x", 1) == ErrorCode.unknown_member_id
    ctx.heartbeat("a", -1)
    assert validate("grp", "", -1, 9) == ErrorCode.none


def test_range_assignor_chosen_by_members(ctx):
    a = ctx.join("a", server_assignor="range")
    b = ctx.join("b", server_assignor="range")
    assert ctx.group().preferred_assignor("uniform") == "range"
    assert ctx.group().target_assignment["a"] == {ctx.topics.by_name("foo").topic_id: frozenset({0, 1, 2})}
    assert a.assignment is not None and b.assignment is not None


class Log:
    """What the edge writes to __consumer_offsets for a group, and a coordinator rebuilt from it."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.written, self.records = ctx, {}, []  # type: ignore[var-annotated]

    def persist(self, group_id: str = "grp") -> None:
        records = consumer_group_records.records_to_write(
            self.ctx.coordinator.groups.get(group_id), self.written
        )
        self.records += records
        for key, value in records:
            if value is None:
                self.written.pop(key, None)
            else:
                self.written[key] = value

    def replayed(self) -> ConsumerGroupCoordinator:
        coordinator = ConsumerGroupCoordinator()
        for key, value in self.records:
            consumer_group_records.replay(coordinator, key, value)
        return coordinator


def test_replace_static_member_writes_tombstones_before_the_new_member(ctx):
    """GroupMetadataManager.replaceMember: the departing member's tombstones come before the new member's
    records, so a replay ends with the partitions owned by the new member, not by nobody."""
    log = Log(ctx)
    a = ctx.join("a", instance_id="i1")
    log.persist()
    ctx.heartbeat("a", -2, instance_id="i1")
    log.persist()
    ctx.join("a2", instance_id="i1")
    log.persist()
    assert ctx.group().partition_epochs and set(ctx.group().members) == {"a2"}
    replayed = log.replayed().groups["grp"]
    assert replayed.partition_epochs == ctx.group().partition_epochs
    # a later member gets nothing a2 still owns
    ctx.coordinator.groups["grp"] = replayed
    b = ctx.join("b")
    assert count(b) == 0 and len(parts(a)) == 6


def test_remove_partition_epochs_only_of_the_departing_member():
    """ConsumerGroup.removePartitionEpochs: a partition now at another member's epoch keeps it."""
    group = ConsumerGroup("grp")
    foo = uuid.uuid4()
    group.update_member(ConsumerGroupMember("a", member_epoch=3, assigned={foo: frozenset({0, 1})}))
    group.update_member(ConsumerGroupMember("b", member_epoch=4, assigned={foo: frozenset({1})}))
    group.remove_member("a")
    assert group.partition_epochs == {(foo, 1): 4}


def test_unknown_consumer_group_assignor_is_a_configuration_error(tmp_path, capsys):
    """GroupCoordinatorConfig: group.consumer.assignors names known assignors, or the broker does not
    start (before, every heartbeat of a new group raised KeyError once the group epoch was bumped)."""
    argv = ["--node-id", "1", "--controller", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--check-config"]
    argv += ["--data-dir", str(tmp_path)]
    override = ["--override", "group.consumer.assignors=uniform,sticky"]
    assert broker_daemon.main(argv + override) == 2
    assert "unknown assignor sticky (known: uniform, range)" in capsys.readouterr().err
    assert broker_daemon.main([*argv, "--override", "group.consumer.assignors=range"]) == 0
    with pytest.raises(ValueError, match="unknown assignor"):
        ConsumerGroupSettings(assignors=("sticky",))


def test_compute_preferred_server_assignor_counts_the_updated_member(ctx):
    """GroupMetadataManager.computePreferredServerAssignor(member, updatedMember): the joining member's
    server assignor counts in the assignment its own join triggers."""
    ctx.join("z")
    ctx.join("a", server_assignor="range")
    foo = ctx.topics.by_name("foo").topic_id
    assert ctx.group().target_assignment == {
        "a": {foo: frozenset({0, 1, 2})},
        "z": {foo: frozenset({3, 4, 5})},
    }


def test_group_tombstone_comes_after_its_member_tombstones(ctx):
    """GroupMetadataManager.createGroupTombstoneRecords writes the members' tombstones before the group's;
    a member tombstone replayed after its group's does not bring back an empty group either."""
    log = Log(ctx)
    ctx.join("a")
    log.persist()
    del ctx.coordinator.groups["grp"]  # the group and its member go in one write
    log.persist()
    tombstones = [key for key, value in log.records if value is None]
    assert len(tombstones) == 5 and tombstones[-1][:2] == b"\x00\x03"  # ConsumerGroupMetadataKey
    assert "grp" not in log.replayed().groups
    coordinator = ConsumerGroupCoordinator()
    for key in reversed(tombstones):  # the group's first, as they were written before
        consumer_group_records.replay(coordinator, key, None)
    assert "grp" not in coordinator.groups
