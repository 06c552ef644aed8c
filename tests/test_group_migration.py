"""Online migration between the classic and the consumer group protocol in the sans-IO coordinators, as
Kafka's GroupMetadataManagerTest migration cases: a consumer member converting a classic group, classic
members served inside a consumer group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), the last consumer
protocol member converting it back, the migration policy, and the records each conversion writes."""

from __future__ import annotations

import uuid

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from epochkraft.broker import consumer_group_classic as classic_ops
from epochkraft.broker.consumer_group_classic import ClassicJoin
from epochkraft.broker.consumer_protocol import (
    MalformedConsumerProtocol,
    parse_assignment,
    parse_subscription,
    serialize_assignment,
    serialize_subscription,
)
from epochkraft.broker.current_assignment import ClassicMemberMetadata, MemberState
from epochkraft.broker.group_coordinator import CommittedOffset, Group, GroupState, Member
from epochkraft.broker.group_migration import MigrationPolicy
from epochkraft.protocol.errors import ErrorCode
from tests.test_consumer_group import REBALANCE_MS, Context, Log, assert_no_partition_owned_twice, parts

SESSION_MS = 10_000


def subscription(
    owned: set[int] | None = None, topics: tuple[str, ...] = ("foo",), version: int = 1
) -> bytes:
    return serialize_subscription(topics, {"foo": frozenset(owned)} if owned else None, version)


def protocols(owned: set[int] | None = None, version: int = 1) -> tuple[tuple[str, bytes], ...]:
    return (("range", subscription(owned, version=version)), ("cooperative-sticky", subscription(owned)))


class Migration(Context):
    """A consumer group coordinator beside the classic one, with the classic verbs."""

    def __init__(self, **settings) -> None:
        super().__init__(**settings)
        self.topics.create("foo", 6)
        self.foo = self.topics.by_name("foo").topic_id  # type: ignore[union-attr]
        self.log = Log(self)

    def stable_classic_group(self, assignments: dict[str, set[int]], generation: int = 1) -> Group:
        """A Stable classic group of the consumer protocol type, each member owning its partitions of foo."""
        group = self.classic.groups.setdefault("grp", Group("grp"))  # with the offsets committed before
        group.state, group.generation_id, group.protocol_type = GroupState.STABLE, generation, "consumer"
        group.protocol_name, group.leader_id = "range", next(iter(assignments))
        for member_id, owned in assignments.items():
            assignment = serialize_assignment({"foo": frozenset(owned)}, 1)
            group.members[member_id] = Member(
                member_id, None, "client", "host", SESSION_MS, REBALANCE_MS, protocols(owned), self.now,
                assignment, synced_assignment=assignment,
            )  # fmt: skip
        return group

    def classic_join(self, member_id: str, owned: set[int] | None = None, **fields):
        fields.setdefault("require_known_member_id", False)
        request = ClassicJoin(
            "grp", member_id, fields.pop("instance_id", None), fields.pop("protocol_type", "consumer"),
            fields.pop("protocols", protocols(owned)), SESSION_MS, REBALANCE_MS, **fields,
        )  # fmt: skip
        return classic_ops.join(self.coordinator, self.now, request, self.topics)

    def classic_sync(self, member_id: str, generation: int, **fields):
        fields.setdefault("instance_id", None)
        fields.setdefault("protocol_type", "consumer")
        fields.setdefault("protocol_name", "range")
        return classic_ops.sync(
            self.coordinator, self.now, group_id="grp", member_id=member_id, generation_id=generation,
            topics=self.topics, **fields,
        )  # fmt: skip

    def classic_heartbeat(self, member_id: str, generation: int, instance_id: str | None = None) -> ErrorCode:
        return classic_ops.heartbeat(
            self.coordinator, self.now, group_id="grp", member_id=member_id, instance_id=instance_id,
            generation_id=generation,
        )  # fmt: skip

    def synced(self, member_id: str, generation: int) -> set[int]:
        result = self.classic_sync(member_id, generation)
        assert result.error == ErrorCode.none, result
        return set(parse_assignment(result.assignment).get("foo", frozenset()))

    def keep_classic_members(self) -> None:
        """Each classic member heartbeats, and rejoins (eagerly) and syncs when told to."""
        for member_id, member in list(self.group().members.items()):
            if member.classic is None:
                continue
            if self.classic_heartbeat(member_id, member.member_epoch) == ErrorCode.rebalance_in_progress:
                self.synced(member_id, self.classic_join(member_id).generation_id)

    def owned(self, member_id: str) -> dict[uuid.UUID, frozenset[int]]:
        return self.group().members[member_id].assigned


@pytest.fixture
def mig() -> Migration:
    return Migration()


# ---- the embedded consumer protocol ----------------------------------------------------------------------
def test_consumer_protocol_against_another_implementation():
    """Our Subscription and Assignment read what aiokafka writes (version 0) and write what it reads; a
    version 1 subscription carries owned partitions; trailing bytes are ignored, a cut one is malformed."""
    theirs = ConsumerProtocolMemberMetadata(0, ["foo", "bar"], b"ud").encode()
    assert parse_subscription(theirs).topics == ("foo", "bar")
    assert parse_subscription(theirs + b"\x00\x01").user_data == b"ud"
    with pytest.raises(MalformedConsumerProtocol):
        parse_subscription(theirs[:-1])
    ours = serialize_assignment({"foo": frozenset({2, 0}), "bar": frozenset({1})}, 0)
    decoded = ConsumerProtocolMemberAssignment.decode(ours)
    assert sorted((t, sorted(p)) for t, p in decoded.assignment) == [("bar", [1]), ("foo", [0, 2])]
    their_assignment = ConsumerProtocolMemberAssignment(0, [("foo", [3, 4])], b"").encode()
    assert parse_assignment(their_assignment) == {"foo": frozenset({3, 4})}
    v3 = serialize_subscription(("foo",), {"foo": frozenset({1})}, version=3)
    assert parse_subscription(v3).owned_partitions == {"foo": frozenset({1})}


def test_consumer_protocol_refuses_a_null_array():
    """Every array of the consumer protocol is non-nullable: a length of -1 is malformed, not empty."""
    null_topics = b"\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    with pytest.raises(MalformedConsumerProtocol):
        parse_subscription(null_topics)
    with pytest.raises(MalformedConsumerProtocol):
        parse_assignment(b"\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff")


def test_migration_policy_names():
    assert MigrationPolicy.parse("Bidirectional") is MigrationPolicy.BIDIRECTIONAL
    assert [p.upgrade_enabled for p in MigrationPolicy] == [True, True, False, False]
    assert [p.downgrade_enabled for p in MigrationPolicy] == [True, False, True, False]
    with pytest.raises(ValueError, match="sideways"):
        MigrationPolicy.parse("sideways")


# ---- upgrade ---------------------------------------------------------------------------------------------
def test_consumer_group_heartbeat_with_stable_classic_group(mig):
    """testConsumerGroupHeartbeatWithStableClassicGroup: the classic members become consumer group members
    at the classic generation, Stable, owning their last assignment; the joining member bumps the group
    epoch and waits for the partitions they still own. Committed offsets stay where they were."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}}, generation=5)
    offset = CommittedOffset(42, -1, None, 0)
    mig.classic.apply_offset("grp", "foo", 0, offset)
    result = mig.join("m")
    assert (result.member_epoch, result.assignment) == (6, {})
    group = mig.group()
    c1 = group.members["c1"]
    assert (c1.member_epoch, c1.previous_member_epoch, c1.state) == (5, 5, MemberState.STABLE)
    assert c1.assigned == {mig.foo: frozenset({0, 1, 2})} and c1.subscribed_topic_names == ("foo",)
    assert c1.classic == ClassicMemberMetadata(SESSION_MS, protocols({0, 1, 2}))
    assert group.members["m"].state == MemberState.UNRELEASED_PARTITIONS
    assert (group.group_epoch, group.assignment_epoch) == (6, 6)
    assert mig.classic.classic_group_of("grp") is None and mig.classic.groups["grp"].members == {}
    assert mig.classic.committed_offsets("grp") == {("foo", 0): offset}
    assert_no_partition_owned_twice(mig)


def test_consumer_group_heartbeat_with_preparing_rebalance_classic_group(mig):
    """testConsumerGroupHeartbeatWithPreparingRebalanceClassicGroup: the classic members waiting in a
    JoinGroup (or SyncGroup) are answered REBALANCE_IN_PROGRESS and rejoin, now into the consumer group."""
    group = mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    group.state = GroupState.PREPARING_REBALANCE
    group.members["c1"].join_token = "join-c1"
    group.members["c2"].sync_token = "sync-c2"
    result = mig.join("m")
    assert result.error == ErrorCode.none
    answers = {c.token: c.result.error for c in result.classic_completions}
    assert answers == {"join-c1": ErrorCode.rebalance_in_progress, "sync-c2": ErrorCode.rebalance_in_progress}


@pytest.mark.parametrize(
    ("policy", "protocol_type", "reason"),
    [
        (MigrationPolicy.DISABLED, "consumer", "because online upgrade is disabled"),
        (MigrationPolicy.DOWNGRADE, "consumer", "because online upgrade is disabled"),
        (MigrationPolicy.UPGRADE, "connect", "because the group does not use the consumer embedded protocol"),
    ],
)
def test_upgrade_refused_by_policy_or_protocol_type(policy, protocol_type, reason):
    """validateOnlineUpgrade: GROUP_ID_NOT_FOUND; the classic group keeps its members."""
    mig = Migration(migration_policy=policy)
    mig.stable_classic_group({"c1": {0, 1, 2}}).protocol_type = protocol_type
    result = mig.heartbeat("m", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",))
    assert (result.error, result.error_message) == (
        ErrorCode.group_id_not_found,
        f"Cannot upgrade classic group grp to consumer group {reason}.",
    )
    assert "grp" not in mig.coordinator.groups and set(mig.classic.groups["grp"].members) == {"c1"}


def test_upgrade_refused_with_malformed_subscription(mig):
    mig.stable_classic_group({"c1": {0}}).members["c1"].protocols = (("range", b"\x00"),)
    result = mig.heartbeat("m", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",))
    assert result.error == ErrorCode.group_id_not_found and "malformed" in (result.error_message or "")


def test_consumer_group_heartbeat_to_classic_group_from_existing_static_member(mig):
    """testConsumerGroupHeartbeatToClassicGroupFromExistingStaticMember: a static classic consumer restarted
    with group.protocol=consumer converts its group and replaces its own classic member (only a consumer
    protocol member must have left with -2 first); the replacement speaks the consumer protocol: no
    classic metadata, the consumer session timeout, consumer protocol commits."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}}).members["c1"].group_instance_id = "i1"
    result = mig.join("new", instance_id="i1")
    group = mig.group()
    assert set(group.members) == {"new", "c2"} and group.static_members == {"i1": "new"}
    member = group.members["new"]
    assert member.classic is None and not member.uses_classic_protocol
    assert member.assigned == {mig.foo: frozenset({0, 1, 2})} and parts(result) == {0, 1, 2}
    assert group.session_deadlines["new"] == mig.now + 45_000
    assert mig.coordinator.validate_offset_commit("grp", "new", member.member_epoch, 8) == (
        ErrorCode.unsupported_version
    )
    assert_no_partition_owned_twice(mig)


def test_consumer_group_heartbeat_from_existing_classic_static_member(mig):
    """testConsumerGroupHeartbeatFromExistingClassicStaticMember: inside a consumer group too, a consumer
    protocol member takes the instance id of a classic static member without waiting for a leave; m is then
    not the last consumer protocol member, and its leave keeps the consumer group."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    mig.join("m")
    c3 = mig.classic_join("", instance_id="i3").member_id
    assert mig.classic_join(c3, instance_id="i3").error == ErrorCode.none
    mig.join("new", instance_id="i3")
    assert mig.group().static_members == {"i3": "new"} and mig.group().members["new"].classic is None
    mig.heartbeat("m", -1)
    assert mig.group().members.keys() == {"c1", "c2", "new"}  # "new" is a consumer protocol member


def test_refused_upgrade_leaves_the_classic_group_and_its_waiting_joins(mig):
    """A heartbeat refused after the conversion's own checks (here the group is full) changes nothing, as
    Kafka drops the records of a failed heartbeat: the group stays classic, its waiting join still waits
    (it was answered REBALANCE_IN_PROGRESS by nobody and hung), no consumer group is installed."""
    mig = Migration(max_size=2)
    group = mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    group.state = GroupState.PREPARING_REBALANCE
    group.members["c1"].join_token = "join-c1"
    result = mig.heartbeat("m", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",))
    assert (result.error, result.classic_completions) == (ErrorCode.group_max_size_reached, ())
    assert "grp" not in mig.coordinator.groups
    assert set(mig.classic.groups["grp"].members) == {"c1", "c2"}
    assert mig.classic.groups["grp"].members["c1"].join_token == "join-c1"
    assert mig.classic.groups["grp"].state == GroupState.PREPARING_REBALANCE


def test_consumer_group_heartbeat_with_completing_rebalance_classic_group(mig):
    """testConsumerGroupHeartbeatWithCompletingRebalanceClassicGroup: while the classic group waits for its
    leader's SyncGroup, its members still own what they were last given; they are converted owning it, and
    the joining member gets none of it until they revoke."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    done = []
    for member_id in ("c1", "c2"):
        done += mig.classic.join_group(
            mig.now, member_id, group_id="grp", member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocols=protocols(), session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
        )[0]  # fmt: skip
    assert len(done) == 2 and mig.classic.groups["grp"].state == GroupState.COMPLETING_REBALANCE
    result = mig.join("m")
    assert result.assignment == {}
    assert mig.owned("c1") == {mig.foo: frozenset({0, 1, 2})}
    assert mig.owned("c2") == {mig.foo: frozenset({3, 4, 5})}
    assert mig.group().members["m"].state == MemberState.UNRELEASED_PARTITIONS
    assert_no_partition_owned_twice(mig)


def test_upgrade_refused_when_classic_assignments_overlap(mig):
    """ConsumerGroup.fromClassicGroup fails on a partition in two members' assignments (addPartitionEpochs):
    UNKNOWN_SERVER_ERROR, and the group stays classic."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {2, 3}})
    result = mig.heartbeat("m", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",))
    assert result.error == ErrorCode.unknown_server_error
    assert "still owned" in (result.error_message or "")
    assert "grp" not in mig.coordinator.groups and set(mig.classic.groups["grp"].members) == {"c1", "c2"}


def test_joining_heartbeat_goes_to_the_consumer_group_beside_a_classic_group(mig):
    """A consumer group of the id is the group a joining heartbeat names, even with a classic group of
    members beside it (a classic join that raced the consumer group's creation): it is never upgraded over
    the live consumer group."""
    mig.join("m")
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("n")
    assert set(mig.group().members) == {"m", "n"} and set(mig.classic.groups["grp"].members) == {"c1"}


@pytest.mark.parametrize(("user_data", "upgraded"), [(b"ud", False), (b"", True)])
def test_upgrade_refused_when_a_custom_assignor_left_user_data(mig, user_data, upgraded):
    """ConsumerGroup.fromClassicGroup (Kafka 4.x): an assignment with user data of a client-side assignor
    would be lost, so the upgrade is refused (GROUP_ID_NOT_FOUND); empty user data is none."""
    group = mig.stable_classic_group({"c1": {0, 1, 2}})
    assignment = ConsumerProtocolMemberAssignment(0, [("foo", [0, 1, 2])], user_data).encode()
    group.members["c1"].synced_assignment = assignment
    result = mig.heartbeat("m", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_names=("foo",))
    if upgraded:
        assert result.error == ErrorCode.none and mig.owned("c1") == {mig.foo: frozenset({0, 1, 2})}
        return
    assert (result.error, result.error_message) == (
        ErrorCode.group_id_not_found,
        "Cannot upgrade classic group grp to consumer group because an unsupported custom assignor is in "
        "use. Please refer to the documentation or switch to a default assignor before re-attempting the "
        "upgrade.",
    )
    assert "grp" not in mig.coordinator.groups and set(mig.classic.groups["grp"].members) == {"c1"}


def test_consumer_heartbeat_on_a_classic_group_that_is_not_joining(mig):
    mig.stable_classic_group({"c1": {0}})
    result = mig.heartbeat("m", 3, owned={})
    assert (result.error, result.error_message) == (
        ErrorCode.group_id_not_found,
        "Group grp is not a consumer group.",
    )


# ---- classic members inside the consumer group -------------------------------------------------------------
def test_joining_consumer_group_with_new_dynamic_member(mig):
    """testJoiningConsumerGroupWithNewDynamicMember: MEMBER_ID_REQUIRED first; the join bumps the group
    epoch, answers the member epoch as the generation and no leader; SyncGroup hands the assignment."""
    mig.join("m")
    first = mig.classic_join("", require_known_member_id=True)
    assert first.error == ErrorCode.member_id_required and first.member_id
    joined = mig.classic_join(first.member_id)
    assert (joined.error, joined.generation_id, joined.leader, joined.members) == (ErrorCode.none, 2, "", ())
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    member = mig.group().members[first.member_id]
    assert member.uses_classic_protocol and member.member_epoch == 2
    assert member.state == MemberState.UNRELEASED_PARTITIONS  # m still owns all six
    assert mig.synced(first.member_id, 2) == set()


def test_joining_consumer_group_throws_exception_if_protocol_is_not_supported(mig):
    """testJoiningConsumerGroupThrowsExceptionIfProtocolIsNotSupported: another protocol type, or no
    protocol every classic member supports."""
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    assert mig.classic_join("x", protocol_type="connect").error == ErrorCode.inconsistent_group_protocol
    other = (("roundrobin", subscription()),)
    assert mig.classic_join("x", protocols=other).error == ErrorCode.inconsistent_group_protocol


def test_joining_consumer_group_with_malformed_subscription(mig):
    """deserializeSubscription: a subscription that cannot be read fails the join with UNKNOWN_SERVER_ERROR
    (Kafka's IllegalStateException), after the member checks, and changes nothing: a static member it would
    have replaced stays."""
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m", instance_id="i1")
    malformed = (("range", b"\x00"),)
    assert mig.classic_join("x", protocols=malformed).error == ErrorCode.unknown_server_error
    assert mig.classic_join("x", instance_id="i9", protocols=malformed).error == ErrorCode.unknown_member_id
    members = dict(mig.group().members)
    assert mig.classic_join("", instance_id="i1", protocols=malformed).error == ErrorCode.unknown_server_error
    assert mig.group().members == members and mig.group().static_members == {"i1": "m"}


def test_reconciliation_in_joining_consumer_group_with_eager_protocol(mig):
    """testReconciliationInJoiningConsumerGroupWithEagerProtocol: an eager member rejoins owning nothing, so
    its revocation is done at once and it moves to the new epoch in one join."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    mig.join("m")
    assert mig.classic_heartbeat("c1", 1) == ErrorCode.rebalance_in_progress
    joined = mig.classic_join("c1", owned=None)
    member = mig.group().members["c1"]
    assert (joined.generation_id, member.state) == (2, MemberState.STABLE)
    assert mig.synced("c1", 2) == set(member.assigned[mig.foo]) and len(member.assigned[mig.foo]) == 2
    assert_no_partition_owned_twice(mig)


def test_reconciliation_in_joining_consumer_group_with_cooperative_protocol(mig):
    """testReconciliationInJoiningConsumerGroupWithCooperativeProtocol: a cooperative member rejoins with the
    partitions it owns; it keeps its epoch and syncs the partitions it keeps, is asked to rejoin once it has
    revoked the rest, and then moves to the new epoch."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    mig.join("m")
    joined = mig.classic_join("c2", owned={3, 4, 5})
    member = mig.group().members["c2"]
    assert (joined.generation_id, member.state) == (1, MemberState.UNREVOKED_PARTITIONS)
    kept = mig.synced("c2", 1)  # no REBALANCE_IN_PROGRESS: it is revoking
    assert len(kept) == 2 and kept < {3, 4, 5}
    assert mig.classic_heartbeat("c2", 1) == ErrorCode.rebalance_in_progress
    rejoined = mig.classic_join("c2", owned=kept)
    assert (rejoined.generation_id, mig.group().members["c2"].state) == (2, MemberState.STABLE)
    assert_no_partition_owned_twice(mig)


def test_classic_group_sync_to_consumer_group_rebalance_in_progress(mig):
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    mig.join("m")
    assert mig.classic_sync("c1", 1).error == ErrorCode.rebalance_in_progress
    assert "c1" in mig.group().join_deadlines


@pytest.mark.parametrize(
    ("member_id", "generation", "fields", "error"),
    [
        ("nobody", 1, {}, ErrorCode.unknown_member_id),  # ...WithUnknownMemberId
        ("m", 1, {}, ErrorCode.unknown_member_id),  # a consumer protocol member
        ("c1", 0, {}, ErrorCode.illegal_generation),  # ...WithIllegalGeneration
        ("c1", 1, {"protocol_name": "roundrobin"}, ErrorCode.inconsistent_group_protocol),
        ("c1", 1, {"protocol_type": "connect"}, ErrorCode.inconsistent_group_protocol),
        ("c1", 1, {"instance_id": "i9"}, ErrorCode.unknown_member_id),
    ],
)
def test_classic_group_sync_to_consumer_group_errors(mig, member_id, generation, fields, error):
    """testClassicGroupSyncToConsumerGroupWith{UnknownMemberId,IllegalGeneration,InconsistentGroupProtocol}."""
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    assert mig.classic_sync(member_id, generation, **fields).error == error


def test_classic_group_sync_to_consumer_group_with_all_consumer_protocol_versions():
    """testClassicGroupSyncToConsumerGroupWithAllConsumerProtocolVersions: the assignment comes back in the
    version of the member's subscription."""
    for version in range(4):
        mig = Migration()
        mig.join("m", ("bar",))
        joined = mig.classic_join("c", protocols=(("range", subscription(version=version)),))
        result = mig.classic_sync("c", joined.generation_id)
        assert result.assignment[:2] == version.to_bytes(2, "big")
        assert parse_assignment(result.assignment) == {"foo": frozenset(range(6))}


def test_classic_group_heartbeat_to_consumer_group_rebalance_in_progress(mig):
    """testClassicGroupHeartbeatToConsumerGroupRebalanceInProgress: REBALANCE_IN_PROGRESS when the group
    epoch moved past the member, while it revokes, and once partitions it waited for are released."""
    mig.stable_classic_group({"c1": set(range(6))})
    assert mig.join("m").assignment == {}
    assert mig.classic_heartbeat("c1", 1) == ErrorCode.rebalance_in_progress  # epoch 1 < 2
    mig.classic_join("c1", owned=set(range(6)))
    assert mig.classic_heartbeat("c1", 1) == ErrorCode.rebalance_in_progress  # unrevoked
    mig.classic_join("c1", owned=set(mig.owned("c1")[mig.foo]))
    assert mig.classic_heartbeat("c1", 2) == ErrorCode.none
    # c2 waits for a partition c1 still owns: no rejoin until c1 released it
    mig.classic_join("c2")
    assert mig.group().members["c2"].state == MemberState.UNRELEASED_PARTITIONS
    assert mig.classic_heartbeat("c2", 3) == ErrorCode.none
    assert mig.classic_heartbeat("c1", 2) == ErrorCode.rebalance_in_progress
    mig.classic_join("c1", owned=set(mig.owned("c1")[mig.foo]))
    mig.classic_join("c1", owned=set(mig.owned("c1")[mig.foo]))
    assert mig.group().members["c1"].member_epoch == 3
    assert mig.classic_heartbeat("c2", 3) == ErrorCode.rebalance_in_progress
    mig.classic_join("c2")
    assert mig.group().members["c2"].state == MemberState.STABLE
    assert_no_partition_owned_twice(mig)


@pytest.mark.parametrize(
    ("member_id", "generation", "instance_id", "error"),
    [
        (
            "nobody",
            1,
            None,
            ErrorCode.unknown_member_id,
        ),  # testClassicGroupHeartbeatToConsumerWithUnknownMember
        ("m", 2, None, ErrorCode.unknown_member_id),  # ...WithMemberNotUsingClassicProtocol
        ("c1", 7, None, ErrorCode.illegal_generation),  # ...WithIllegalGenerationId
        ("c1", 1, "i9", ErrorCode.unknown_member_id),
    ],
)
def test_classic_group_heartbeat_to_consumer_errors(mig, member_id, generation, instance_id, error):
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    assert mig.classic_heartbeat(member_id, generation, instance_id) == error


def test_classic_group_heartbeat_to_consumer_group_maintains_session(mig):
    """testClassicGroupHeartbeatToConsumerGroupMaintainsSession: the member's own session timeout."""
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    mig.classic_join("c1")
    mig.classic_sync("c1", 2)
    for _ in range(3):
        mig.now += SESSION_MS - 1
        mig.poll("m", 2, mig.owned("m"))
        assert mig.classic_heartbeat("c1", 2) == ErrorCode.none
        assert mig.coordinator.tick(mig.now) == []
    mig.poll("m", 2, mig.owned("m"))
    assert mig.advance(SESSION_MS) == [("grp", "c1")]


def test_consumer_group_member_using_classic_protocol_fenced_when_session_timeout(mig):
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    mig.now += SESSION_MS - 1
    mig.poll("m", 2, mig.owned("m"))
    assert mig.advance(1) == [("grp", "c1")]
    assert set(mig.group().members) == {"m"}


def test_consumer_group_member_using_classic_protocol_fenced_when_join_timeout(mig):
    """Told to rejoin, the member must within its rebalance timeout."""
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    assert mig.classic_heartbeat("c1", 1) == ErrorCode.rebalance_in_progress
    mig.now += REBALANCE_MS - 1
    mig.poll("m", 2, mig.owned("m"))
    assert mig.classic_heartbeat("c1", 1) == ErrorCode.rebalance_in_progress  # the deadline is not pushed
    assert mig.advance(1) == [("grp", "c1")]


def test_consumer_group_member_using_classic_protocol_fenced_when_sync_timeout(mig):
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    mig.classic_join("c1")
    mig.now += REBALANCE_MS - 1
    mig.poll("m", 2, mig.owned("m"))
    mig.classic_heartbeat("c1", 2)
    assert mig.advance(1) == [("grp", "c1")]


def test_consumer_group_member_using_classic_protocol_batch_leave_group(mig):
    """testConsumerGroupMemberUsingClassicProtocolBatchLeaveGroup: classic members leave by member id or by
    instance id; strangers are UNKNOWN_MEMBER_ID; the epoch is bumped once."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    mig.join("m")
    c3 = mig.classic_join("", instance_id="i3").member_id
    assert mig.classic_join(c3, instance_id="i3").error == ErrorCode.none
    epoch = mig.group().group_epoch
    top, errors = classic_ops.leave(
        mig.coordinator, mig.now, "grp", [("c1", None), ("", "i3"), ("x", None), ("c2", "i9")]
    )
    assert top == ErrorCode.none
    assert errors == [ErrorCode.none, ErrorCode.none] + [ErrorCode.unknown_member_id] * 2
    assert set(mig.group().members) == {"m", "c2"} and mig.group().group_epoch == epoch + 1


def test_classic_group_leave_to_consumer_group_fences_consumer_protocol_members(mig):
    """classicGroupLeaveToConsumerGroup (Kafka 4.x) fences any member named, as an admin's
    kafka-consumer-groups --delete-members does to a consumer protocol member; the last one going downgrades
    the group, the classic members named with it leaving too (consumerGroupFenceMembers)."""
    upgraded(mig)
    mig.join("n")
    epoch = mig.group().group_epoch
    assert classic_ops.leave(mig.coordinator, mig.now, "grp", [("n", None)]) == (
        ErrorCode.none,
        [ErrorCode.none],
    )
    assert set(mig.group().members) == {"c1", "c2", "m"} and mig.group().group_epoch == epoch + 1
    top, errors = classic_ops.leave(mig.coordinator, mig.now, "grp", [("m", None), ("c1", None)])
    assert (top, errors) == (ErrorCode.none, [ErrorCode.none, ErrorCode.none])
    assert "grp" not in mig.coordinator.groups
    classic = mig.classic.groups["grp"]
    assert set(classic.members) == {"c2"} and classic.state == GroupState.PREPARING_REBALANCE


def test_classic_group_leave_to_consumer_group_without_valid_leave_group_member(mig):
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    epoch = mig.group().group_epoch
    assert classic_ops.leave(mig.coordinator, mig.now, "grp", [("x", None)]) == (
        ErrorCode.unknown_member_id,
        [ErrorCode.unknown_member_id],
    )
    assert mig.group().group_epoch == epoch


def test_offset_commit_of_a_classic_member_in_a_consumer_group(mig):
    """ConsumerGroup.validateOffsetCommit: a classic member commits with its generation (any version; a
    stale one is ILLEGAL_GENERATION, not STALE_MEMBER_EPOCH)."""
    mig.stable_classic_group({"c1": {0, 1, 2}})
    mig.join("m")
    assert mig.coordinator.validate_offset_commit("grp", "c1", 1, 2) == ErrorCode.none
    assert mig.coordinator.validate_offset_commit("grp", "c1", 0, 8) == ErrorCode.illegal_generation
    assert mig.coordinator.validate_offset_fetch("grp", "c1", 0) == ErrorCode.illegal_generation
    assert mig.coordinator.validate_offset_commit("grp", "m", 1, 9) == ErrorCode.stale_member_epoch


# ---- downgrade ---------------------------------------------------------------------------------------------
def upgraded(mig: Migration, instance_id: str | None = None) -> None:
    """c1 and c2 classic, m a consumer protocol member, every partition owned once."""
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    mig.log.persist()
    mig.join("m", instance_id=instance_id)
    mig.log.persist()
    for member_id in ("c1", "c2"):
        mig.synced(member_id, mig.classic_join(member_id).generation_id)
        mig.log.persist()
    m = mig.group().members["m"]
    mig.poll("m", m.member_epoch, m.assigned)
    mig.log.persist()
    assert mig.group().state.value == "Stable"


def test_last_consumer_protocol_member_leaving_consumer_group(mig):
    """testLastConsumerProtocolMemberLeavingConsumerGroup: the consumer group's records are tombstoned and
    the classic members form a classic group at the group epoch, holding their target assignments, which
    rebalances; committed offsets stay."""
    offset = CommittedOffset(7, -1, "meta", 0)
    mig.classic.apply_offset("grp", "foo", 3, offset)
    upgraded(mig)
    consumer = mig.group()
    targets = {m: consumer.target_assignment[m][mig.foo] for m in ("c1", "c2")}
    result = mig.heartbeat("m", consumer.members["m"].member_epoch, owned=consumer.members["m"].assigned)
    assert result.error == ErrorCode.none
    result = mig.heartbeat("m", -1)
    assert (result.error, result.member_epoch) == (ErrorCode.none, -1)
    assert "grp" not in mig.coordinator.groups
    mig.log.persist()
    assert mig.log.written == {} and "grp" not in mig.log.replayed().groups
    classic = mig.classic.groups["grp"]
    assert (classic.generation_id, classic.state, classic.protocol_type, classic.protocol_name) == (
        consumer.group_epoch,
        GroupState.PREPARING_REBALANCE,
        "consumer",
        "range",
    )
    assert {m: parse_assignment(classic.members[m].assignment)["foo"] for m in classic.members} == targets
    assert classic.members["c1"].session_timeout_ms == SESSION_MS
    assert mig.classic.committed_offsets("grp") == {("foo", 3): offset}
    # the classic members are asked to rejoin, and the classic rebalance completes
    generation = consumer.group_epoch
    assert mig.classic.heartbeat(mig.now, group_id="grp", generation_id=generation, member_id="c1") == (
        ErrorCode.rebalance_in_progress
    )
    done = []
    for member_id in ("c1", "c2"):
        done += mig.classic.join_group(
            mig.now, member_id, group_id="grp", member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocols=protocols(), session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
        )[0]  # fmt: skip
    assert {c.token: c.result.generation_id for c in done} == {"c1": generation + 1, "c2": generation + 1}


@pytest.mark.parametrize("expiry", ["session", "rebalance"])
def test_last_consumer_protocol_member_times_out_in_consumer_group(mig, expiry):
    """testLastConsumerProtocolMember{Session,Rebalance}TimeoutInConsumerGroup: fenced by the clock, the last
    consumer protocol member converts the group too."""
    upgraded(mig)
    if expiry == "rebalance":  # m must revoke a partition for a joining classic member, and does not
        mig.synced("c3", mig.classic_join("c3").generation_id)
        m = mig.group().members["m"]
        mig.poll("m", m.member_epoch, m.assigned)
        assert mig.group().members["m"].state == MemberState.UNREVOKED_PARTITIONS
        wait = REBALANCE_MS
    else:
        wait = 45_000
    deadline = mig.now + wait
    while mig.now + 1000 < deadline:  # the classic members keep their sessions
        mig.now += 1000
        mig.keep_classic_members()
        assert mig.coordinator.tick(mig.now) == []
    assert mig.advance(deadline - mig.now) == [("grp", "m")]
    assert "grp" not in mig.coordinator.groups and mig.classic.classic_group_of("grp") is not None


@pytest.mark.parametrize("policy", [MigrationPolicy.UPGRADE, MigrationPolicy.DISABLED])
def test_no_downgrade_when_the_policy_does_not_allow_it(policy):
    mig = Migration(migration_policy=MigrationPolicy.BIDIRECTIONAL)
    upgraded(mig)
    mig.coordinator.settings = type(mig.coordinator.settings)(migration_policy=policy)
    m = mig.group().members["m"]
    mig.heartbeat("m", -1)
    assert set(mig.group().members) == {"c1", "c2"} and mig.classic.classic_group_of("grp") is None
    assert m.member_id not in mig.group().members


def test_no_downgrade_while_another_consumer_protocol_member_remains(mig):
    upgraded(mig)
    mig.join("n")
    mig.heartbeat("m", -1)
    assert set(mig.group().members) == {"c1", "c2", "n"}


def test_last_static_consumer_protocol_member_replaced_by_classic_protocol_member(mig):
    """testLastStaticConsumerProtocolMemberReplacedByClassicProtocolMember: a classic consumer restarted
    with the instance id of the last consumer protocol member takes its place and its assignment, and the
    group is a classic group again, Stable, without a rebalance; the replacement syncs its partitions."""
    upgraded(mig, instance_id="i1")
    target = set(mig.group().target_assignment["m"][mig.foo])
    epoch = mig.group().group_epoch
    joined = mig.classic_join("", instance_id="i1")
    assert joined.error == ErrorCode.none and joined.generation_id == epoch
    assert "grp" not in mig.coordinator.groups
    mig.log.persist()
    assert mig.log.written == {}
    classic = mig.classic.groups["grp"]
    assert (classic.state, classic.generation_id) == (GroupState.STABLE, epoch)
    assert set(classic.members) == {"c1", "c2", joined.member_id}
    done, store = mig.classic.sync_group(
        mig.now, "sync", group_id="grp", generation_id=epoch, member_id=joined.member_id, assignments={}
    )
    assert store is None  # Stable: the member's assignment is answered at once
    assert set(parse_assignment(done[0].result.assignment)["foo"]) == target  # type: ignore[union-attr]


def test_no_conversion_when_size_exceeds_classic_max_group_size():
    """testNoConversionWhenSizeExceedsClassicMaxGroupSize: the last consumer protocol member leaves, but
    more classic members are left than group.max.size admits: the group stays a consumer group."""
    mig = Migration(classic_max_size=1)
    upgraded(mig)
    mig.heartbeat("m", -1)
    assert set(mig.group().members) == {"c1", "c2"} and mig.classic.classic_group_of("grp") is None


def test_no_downgrade_on_static_replacement_when_size_exceeds_classic_max_group_size():
    """validateOnlineDowngradeWithReplacedMember: a classic member replacing the last consumer protocol
    member does not convert a group larger than group.max.size."""
    mig = Migration(classic_max_size=2)
    upgraded(mig, instance_id="i1")
    joined = mig.classic_join("", instance_id="i1")
    assert joined.error == ErrorCode.none and mig.classic.classic_group_of("grp") is None
    assert set(mig.group().members) == {"c1", "c2", joined.member_id}


def test_joining_consumer_group_throws_exception_if_group_over_max_size():
    """testJoiningConsumerGroupThrowsExceptionIfGroupOverMaxSize: a classic member joining a consumer
    group at group.consumer.max.size is refused with Kafka's message."""
    mig = Migration(max_size=3)
    upgraded(mig)
    refused = mig.classic_join("")
    assert (refused.error, refused.member_id) == (ErrorCode.group_max_size_reached, "")
    assert set(mig.group().members) == {"m", "c1", "c2"}


def test_static_replacement_keeps_the_consumer_group_without_downgrade():
    mig = Migration(migration_policy=MigrationPolicy.UPGRADE)
    upgraded(mig, instance_id="i1")
    joined = mig.classic_join("", instance_id="i1")
    assert joined.error == ErrorCode.none and mig.classic.classic_group_of("grp") is None
    assert set(mig.group().members) == {"c1", "c2", joined.member_id}


def test_converted_group_replays_the_same_after_a_coordinator_failover(mig):
    """The records written through the upgrade and the classic members' joins rebuild the same group (the
    classic members' protocols included), and its sessions restart with each member's own timeout."""
    upgraded(mig)
    replayed = mig.log.replayed()
    group = replayed.groups["grp"]
    assert group.members == mig.group().members
    assert group.target_assignment == mig.group().target_assignment
    assert group.partition_epochs == mig.group().partition_epochs
    replayed.on_loaded(mig.now, ["grp"])
    assert group.session_deadlines["c1"] == mig.now + SESSION_MS
    assert group.session_deadlines["m"] == mig.now + 45_000


def test_unsafe_switch_shows_the_check_for_owned_partitions_catches_it(mig, monkeypatch):
    """The rule behind the migration's safety: a classic member's partitions are not handed to the consumer
    member before it revoked them. With partition epochs ignored, the check fails."""
    from epochkraft.broker import current_assignment

    monkeypatch.setattr(current_assignment, "UNSAFE_ASSIGN_UNRELEASED_PARTITIONS_FOR_TESTS", True)
    mig.stable_classic_group({"c1": {0, 1, 2}, "c2": {3, 4, 5}})
    assert parts(mig.join("m"))
    with pytest.raises(AssertionError):
        assert_no_partition_owned_twice(mig)
