"""Static membership (KIP-345) in the classic group coordinator, after GroupMetadataManagerTest's static
member cases."""

import pytest

from epochkraft.broker import classic_group_records
from epochkraft.broker.group_coordinator import GroupCoordinator, GroupState, JoinResult, SyncResult
from epochkraft.protocol.errors import ErrorCode
from tests.test_group_coordinator import PROTOCOLS, Ctx

LEADER, FOLLOWER = "leader-instance-id", "follower-instance-id"
DELAY_MS = 100  # group.initial.rebalance.delay.ms: both members join the first generation


def joined(ctx: Ctx, token: int) -> JoinResult:
    result = ctx.results[token]
    assert isinstance(result, JoinResult)
    return result


def synced(ctx: Ctx, token: int) -> SyncResult:
    result = ctx.results[token]
    assert isinstance(result, SyncResult)
    return result


def static_members_join_and_rebalance(
    ctx: Ctx, session: int = 10_000, rebalance: int | None = None
) -> tuple[str, str]:
    """GroupMetadataManagerTestContext.staticMembersJoinAndRebalance: a leader and a follower, both static,
    joined and synced: the group Stable at generation 1. Returns (leader id, follower id)."""
    leader_join = ctx.join(instance_id=LEADER, session=session, rebalance=rebalance)
    follower_join = ctx.join(instance_id=FOLLOWER, session=session, rebalance=rebalance)
    ctx.tick(DELAY_MS)
    leader, follower = joined(ctx, leader_join), joined(ctx, follower_join)
    assert leader.leader == leader.member_id and follower.generation_id == 1
    ctx.sync(leader.member_id, 1, {leader.member_id: b"a-leader", follower.member_id: b"a-follower"})
    ctx.sync(follower.member_id, 1)
    assert ctx.c.groups["g"].state == GroupState.STABLE
    return leader.member_id, follower.member_id


def test_static_member_join_as_first_member():
    """testStaticMemberJoinAsFirstMember: no MEMBER_ID_REQUIRED round trip; the member id is its instance's."""
    ctx = Ctx()
    result = joined(ctx, ctx.join(instance_id="group-instance-id"))
    assert result.error == ErrorCode.none and result.generation_id == 1
    assert result.member_id.startswith("group-instance-id-")
    assert ctx.c.groups["g"].static_members == {"group-instance-id": result.member_id}


@pytest.mark.parametrize("skip_assignment_supported", [True, False])
def test_replace_static_member_in_stable_state_succeeds(skip_assignment_supported):
    """testReplaceStaticMemberInStableStateSucceeds / testStaticMemberRejoinWithLeaderIdAndUnknownMemberId:
    the restarted leader takes its old id's place once the group is written; no rebalance, the same
    generation, the assignment kept; from v9 it is the leader and skips the assignment, before it is
    answered the old leader id."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx)
    ctx.store_error = None  # the write waits
    token = ctx.join(
        instance_id=LEADER,
        protocols=(("range", b"new-range"), ("roundrobin", b"meta-rr")),
        session=6000,
        rebalance=7000,
        skip_assignment_supported=skip_assignment_supported,
    )
    assert token not in ctx.results, "answered only once the group is written"
    store = ctx.static_stores[0]
    group = ctx.c.groups["g"]
    new_id = group.static_members[LEADER]
    assert new_id != leader and store.assignments == {new_id: b"a-leader", follower: b"a-follower"}
    value = classic_group_records.group_metadata_value(group, store.assignments)
    assert [(m.member_id, m.group_instance_id, m.subscription) for m in value.members] == [
        (follower, FOLLOWER, b"meta-range"),
        (new_id, LEADER, b"new-range"),
    ]
    assert value.leader == new_id and value.generation == 1

    ctx.write_static_store(ErrorCode.none)
    result = joined(ctx, token)
    assert (result.error, result.member_id, result.generation_id) == (ErrorCode.none, new_id, 1)
    assert result.skip_assignment == skip_assignment_supported
    assert result.leader == (new_id if skip_assignment_supported else leader)
    assert len(result.members) == (2 if skip_assignment_supported else 0)
    assert group.state == GroupState.STABLE and group.generation_id == 1
    member = group.members[new_id]
    assert (member.session_timeout_ms, member.rebalance_timeout_ms) == (6000, 7000)
    assert synced(ctx, ctx.sync(new_id, 1, instance_id=LEADER)).assignment == b"a-leader"
    assert ctx.c.heartbeat(ctx.now, group_id="g", generation_id=1, member_id=follower) == ErrorCode.none


def test_replace_static_member_in_stable_state_errors():
    """testReplaceStaticMemberInStableStateErrors: the write fails; the old member is put back, with its
    protocols and timeouts, and the join answered the error without a member id."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, _ = static_members_join_and_rebalance(ctx)
    ctx.store_error = ErrorCode.coordinator_not_available
    result = joined(ctx, ctx.join(instance_id=LEADER, session=6000, rebalance=7000))
    assert (result.error, result.member_id, result.leader, result.generation_id) == (
        ErrorCode.coordinator_not_available,
        "",
        leader,
        1,
    )
    group = ctx.c.groups["g"]
    assert group.static_members[LEADER] == leader and group.leader_id == leader
    assert group.members[leader].session_timeout_ms == 10_000 and len(group.members) == 2
    assert group.state == GroupState.STABLE and group.generation_id == 1


def test_replace_static_member_in_stable_state_with_updated_protocol_triggers_rebalance():
    """testReplaceStaticMemberInStableStateWithUpdatedProtocolTriggersRebalance (and
    testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWithSelectedProtocolChanged): a protocol the
    group cannot keep selecting rebalances it, nothing written first."""
    ctx = Ctx()
    token = ctx.join(instance_id="group-instance-id")
    old = joined(ctx, token).member_id
    ctx.sync(old, 1, {old: b"a"})
    token = ctx.join(instance_id="group-instance-id", protocols=(("roundrobin", b"meta-rr"),))
    result = joined(ctx, token)
    assert not ctx.static_stores
    assert (result.error, result.generation_id) == (ErrorCode.none, 2) and result.member_id != old
    assert ctx.c.groups["g"].protocol_name == "roundrobin"
    assert ctx.c.groups["g"].state == GroupState.COMPLETING_REBALANCE


def test_replace_static_member_in_completing_rebalance_state_triggers_rebalance():
    """testReplaceStaticMemberInCompletingRebalanceStateTriggersRebalance: the leader may have been given the
    old id, so the group rebalances; the old id's waiting sync is fenced."""
    ctx = Ctx()
    old = joined(ctx, ctx.join(instance_id="group-instance-id")).member_id
    ctx.store_error = None
    waiting_sync = ctx.sync(old, 1, {old: b"a"})
    rejoin = ctx.join(instance_id="group-instance-id")
    assert synced(ctx, waiting_sync).error == ErrorCode.fenced_instance_id
    result = joined(ctx, rejoin)
    assert (result.error, result.generation_id) == (ErrorCode.none, 2)
    assert ctx.c.groups["g"].state == GroupState.COMPLETING_REBALANCE


def test_static_member_fence_duplicate_rejoined_follower():
    """testStaticMemberFenceDuplicateRejoinedFollower: while a rebalance is prepared, the follower waiting in
    its join under the old id is answered FENCED_INSTANCE_ID when a duplicate joins with its instance id."""
    ctx = Ctx(delay_ms=DELAY_MS)
    _, follower = static_members_join_and_rebalance(ctx)
    ctx.join()  # a third, dynamic member: MEMBER_ID_REQUIRED
    third = next(iter(ctx.c.groups["g"].pending_members))
    ctx.join(member_id=third)
    assert ctx.c.groups["g"].state == GroupState.PREPARING_REBALANCE
    old_join = ctx.join(member_id=follower, instance_id=FOLLOWER)
    assert old_join not in ctx.results
    ctx.join(instance_id=FOLLOWER)
    result = joined(ctx, old_join)
    assert (result.error, result.member_id, result.generation_id, result.leader) == (
        ErrorCode.fenced_instance_id,
        follower,
        -1,
        "",
    )
    assert ctx.c.groups["g"].state == GroupState.PREPARING_REBALANCE


def test_static_member_rejoin_with_known_member_id():
    """testStaticMemberRejoinWithKnownMemberId: a static follower rejoining with its own id and the same
    protocols gets the current generation back."""
    ctx = Ctx(delay_ms=DELAY_MS)
    _, follower = static_members_join_and_rebalance(ctx)
    result = joined(ctx, ctx.join(member_id=follower, instance_id=FOLLOWER))
    assert (result.error, result.member_id, result.generation_id) == (ErrorCode.none, follower, 1)
    assert ctx.c.groups["g"].state == GroupState.STABLE


@pytest.mark.parametrize(
    ("member", "instance_id", "expected"),
    [
        # testStaticMemberRejoinAsFollowerWithMismatchedInstanceId
        ("follower", LEADER, ErrorCode.fenced_instance_id),
        # testStaticMemberRejoinAsLeaderWithMismatchedInstanceId
        ("leader", FOLLOWER, ErrorCode.fenced_instance_id),
        # testStaticMemberJoinWithUnknownInstanceIdAndKnownMemberId
        ("leader", "unknown-instance-id", ErrorCode.unknown_member_id),
        # testStaticMemberRejoinWithExplicitUnknownMemberId
        ("unknown-member-id", LEADER, ErrorCode.fenced_instance_id),
    ],
)
def test_static_member_join_validation(member, instance_id, expected):
    """ClassicGroup.validateMember on a join with a member id: the instance id must map to it."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx)
    member_id = {"leader": leader, "follower": follower}.get(member, member)
    assert joined(ctx, ctx.join(member_id=member_id, instance_id=instance_id)).error == expected


def test_static_member_heartbeat_leader_with_invalid_member_id():
    """testStaticMemberHeartbeatLeaderWithInvalidMemberId."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, _ = static_members_join_and_rebalance(ctx)
    beat = ctx.c.heartbeat
    assert beat(ctx.now, group_id="g", generation_id=1, member_id=leader) == ErrorCode.none
    assert beat(ctx.now, group_id="g", generation_id=1, member_id=leader, group_instance_id=LEADER) == (
        ErrorCode.none
    )
    assert beat(ctx.now, group_id="g", generation_id=1, member_id="invalid", group_instance_id=LEADER) == (
        ErrorCode.fenced_instance_id
    )
    assert beat(ctx.now, group_id="g", generation_id=1, member_id=leader, group_instance_id="other") == (
        ErrorCode.unknown_member_id
    )


def test_static_member_sync_as_leader_with_invalid_member_id():
    """testStaticMemberSyncAsLeaderWithInvalidMemberId."""
    ctx = Ctx(delay_ms=DELAY_MS)
    static_members_join_and_rebalance(ctx)
    result = synced(ctx, ctx.sync("invalid-member-id", 1, instance_id=FOLLOWER))
    assert result.error == ErrorCode.fenced_instance_id


def test_leave_group_with_fenced_instance_id():
    """testLeaveGroupWithFencedInstanceId / testLeaveGroupStaticMemberWithUnknownMemberId /
    testStaticMembersUnknownInstanceBatchLeaveGroup: per-member errors, nobody leaves."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, _ = static_members_join_and_rebalance(ctx)
    top, errors, done = ctx.c.leave_group(
        ctx.now,
        group_id="g",
        members=[("some-member-id", LEADER), (leader, "unknown-instance-id"), ("", "unknown-instance-id")],
    )
    assert top == ErrorCode.none and not done
    assert errors == [ErrorCode.fenced_instance_id, ErrorCode.unknown_member_id, ErrorCode.unknown_member_id]
    assert len(ctx.c.groups["g"].members) == 2 and ctx.c.groups["g"].state == GroupState.STABLE


def test_static_members_valid_batch_leave_group():
    """testStaticMembersValidBatchLeaveGroup: by instance id alone (an admin's removal) or with the member
    id; the group is left Empty."""
    ctx = Ctx(delay_ms=DELAY_MS)
    _, follower = static_members_join_and_rebalance(ctx)
    top, errors, _ = ctx.c.leave_group(ctx.now, group_id="g", members=[("", LEADER), (follower, FOLLOWER)])
    assert top == ErrorCode.none and errors == [ErrorCode.none, ErrorCode.none]
    group = ctx.c.groups["g"]
    assert not group.members and not group.static_members and group.state == GroupState.EMPTY


def test_static_member_left_by_instance_id_rebalances_the_rest():
    """An admin's removal of one static member (kafka-consumer-groups --delete ... --members) rebalances
    the others."""
    ctx = Ctx(delay_ms=DELAY_MS)
    _, follower = static_members_join_and_rebalance(ctx)
    top, errors, _ = ctx.c.leave_group(ctx.now, group_id="g", members=[("", FOLLOWER)])
    assert (top, errors) == (ErrorCode.none, [ErrorCode.none])
    group = ctx.c.groups["g"]
    assert follower not in group.members and FOLLOWER not in group.static_members
    assert group.state == GroupState.PREPARING_REBALANCE


def test_static_member_session_expiry_removes_it():
    """A static member that does not heartbeat within its session is removed as any other, its instance id
    with it (expireClassicGroupMemberHeartbeat)."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx)
    ctx.now += 6000
    ctx.c.heartbeat(ctx.now, group_id="g", generation_id=1, member_id=leader)
    ctx.tick(5000)
    group = ctx.c.groups["g"]
    assert follower not in group.members and group.static_members == {LEADER: leader}
    assert group.state == GroupState.PREPARING_REBALANCE


@pytest.mark.parametrize(
    ("member", "instance_id", "generation", "expected"),
    [
        ("follower", FOLLOWER, 1, ErrorCode.none),
        # testGenericGroupOffsetCommitWithFencedInstanceId
        ("other", FOLLOWER, 1, ErrorCode.fenced_instance_id),
        ("follower", "unknown-instance-id", 1, ErrorCode.unknown_member_id),
        ("follower", FOLLOWER, 0, ErrorCode.illegal_generation),
        ("", FOLLOWER, -1, ErrorCode.fenced_instance_id),
    ],
)
def test_offset_commit_with_group_instance_id(member, instance_id, generation, expected):
    """ClassicGroup.validateOffsetCommit for OffsetCommit and TxnOffsetCommit with a group instance id."""
    ctx = Ctx(delay_ms=DELAY_MS)
    _, follower = static_members_join_and_rebalance(ctx)
    member_id = follower if member == "follower" else member
    error = ctx.c.validate_offset_commit(
        group_id="g", generation_id=generation, member_id=member_id, group_instance_id=instance_id
    )
    assert error == expected


def test_static_members_join_group_with_max_size():
    """testStaticMembersJoinGroupWithMaxSize: static members join at once, the last refused at the maximum;
    the instance of a refused join is not kept."""
    ctx = Ctx(delay_ms=50, max_size=2)
    tokens = [ctx.join(instance_id=f"instance-id-{i}") for i in range(3)]
    assert joined(ctx, tokens[2]).error == ErrorCode.group_max_size_reached
    ctx.tick(50)
    assert [joined(ctx, t).error for t in tokens[:2]] == [ErrorCode.none, ErrorCode.none]
    assert sorted(ctx.c.groups["g"].static_members) == ["instance-id-0", "instance-id-1"]


def test_join_group_existing_pending_member_with_group_instance_id_throws_exception():
    """testJoinGroupExistingPendingMemberWithGroupInstanceIdThrowsException: a pending (dynamic) member id
    coming back with an instance id is Kafka's IllegalStateException, UNKNOWN_SERVER_ERROR to the client;
    nothing joins."""
    ctx = Ctx()
    pending = joined(ctx, ctx.join()).member_id
    result = joined(ctx, ctx.join(member_id=pending, instance_id="group-instance-id"))
    assert result.error == ErrorCode.unknown_server_error
    assert not ctx.c.groups["g"].members and not ctx.c.groups["g"].static_members


def test_static_member_successor_refused_by_a_full_stable_group():
    """acceptJoiningMember looks at the member id: a static member's successor comes without one, so a
    Stable group at group.max.size refuses it (and keeps the member it would have replaced)."""
    ctx = Ctx(delay_ms=DELAY_MS, max_size=2)
    leader, follower = static_members_join_and_rebalance(ctx)
    assert joined(ctx, ctx.join(instance_id=FOLLOWER)).error == ErrorCode.group_max_size_reached
    assert ctx.c.groups["g"].static_members == {LEADER: leader, FOLLOWER: follower}


def test_static_members_rebuilt_from_the_group_metadata_record():
    """ClassicGroup.fromRecord: a new coordinator maps the loaded static members by instance id, so the
    restarted member takes its old id's place without a rebalance."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx)
    group = ctx.c.groups["g"]
    value = classic_group_records.synced_value(group)
    loaded = classic_group_records.group_from_record("g", value)
    assert loaded.static_members == {LEADER: leader, FOLLOWER: follower}

    successor = Ctx(delay_ms=DELAY_MS)
    successor.c = GroupCoordinator(ctx.c.settings)
    successor.c.replay_group_metadata("g", loaded)
    successor.c.on_loaded(successor.now, ["g"])
    result = joined(successor, successor.join(instance_id=FOLLOWER, protocols=PROTOCOLS))
    assert (result.error, result.generation_id) == (ErrorCode.none, 1)
    assert successor.c.groups["g"].state == GroupState.STABLE
    new_id = successor.c.groups["g"].static_members[FOLLOWER]
    assert synced(successor, successor.sync(new_id, 1)).assignment == b"a-follower"


def test_replace_static_member_whose_write_fails_after_a_rebalance_answered_its_join():
    """updateStaticMemberThenRebalanceOrCompleteJoin reverts on a failed write in every case: a rebalance
    that answered the replacement's join meanwhile does not keep the new member id in the instance's
    place; its waiting sync is fenced."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx)
    ctx.store_error = None  # the replacement's write waits
    rejoin = ctx.join(instance_id=LEADER)
    new_id = ctx.c.groups["g"].static_members[LEADER]
    ctx.join(member_id=follower, instance_id=FOLLOWER, protocols=(("range", b"other"),))  # a rebalance
    assert joined(ctx, rejoin).generation_id == 2, "the rebalance answered the replacement's join"
    waiting_sync = ctx.sync(new_id, 2, {new_id: b"a", follower: b"b"}, instance_id=LEADER)
    ctx.write_static_store(ErrorCode.coordinator_not_available)
    assert ctx.c.groups["g"].static_members[LEADER] == leader
    assert synced(ctx, waiting_sync).error == ErrorCode.fenced_instance_id


REBALANCE_MS, SESSION_MS = 10_000, 15_000  # sessions outlast the rebalance: no one is expired by it


def test_static_member_follower_fail_to_rejoin_before_rebalance_timeout():
    """testStaticMemberFollowerFailToRejoinBeforeRebalanceTimeout: a static follower that does not rejoin
    stays in the next generation (completeClassicGroupJoin removes only dynamic members); the leader is
    given all three members."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx, SESSION_MS, REBALANCE_MS)
    new_join = ctx.join(instance_id="new-member-instance-id", session=SESSION_MS, rebalance=REBALANCE_MS)
    group = ctx.c.groups["g"]
    assert group.state == GroupState.PREPARING_REBALANCE
    leader_join = ctx.join(leader, instance_id=LEADER, session=SESSION_MS, rebalance=REBALANCE_MS)
    ctx.tick(REBALANCE_MS)
    leader_result, new_result = joined(ctx, leader_join), joined(ctx, new_join)
    assert (leader_result.error, leader_result.generation_id, leader_result.leader) == (
        ErrorCode.none,
        2,
        leader,
    )
    assert {instance for _, instance, _ in leader_result.members} == {
        LEADER,
        FOLLOWER,
        "new-member-instance-id",
    }
    assert (new_result.generation_id, new_result.leader, new_result.members) == (2, leader, ())
    assert group.state == GroupState.COMPLETING_REBALANCE and follower in group.members


def test_static_member_leader_fail_to_rejoin_before_rebalance_timeout():
    """testStaticMemberLeaderFailToRejoinBeforeRebalanceTimeout: a static leader that does not rejoin stays,
    but a member that rejoined leads the next generation (maybeElectNewJoinedLeader)."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx, SESSION_MS, REBALANCE_MS)
    new_join = ctx.join(instance_id="new-member-instance-id", session=SESSION_MS, rebalance=REBALANCE_MS)
    follower_join = ctx.join(follower, instance_id=FOLLOWER, session=SESSION_MS, rebalance=REBALANCE_MS)
    ctx.tick(REBALANCE_MS)
    follower_result, new_result = joined(ctx, follower_join), joined(ctx, new_join)
    assert (follower_result.generation_id, follower_result.leader) == (2, follower)
    assert {instance for _, instance, _ in follower_result.members} == {
        LEADER,
        FOLLOWER,
        "new-member-instance-id",
    }
    assert (new_result.leader, new_result.members) == (follower, ())
    group = ctx.c.groups["g"]
    assert group.leader_id == follower and leader in group.members


def test_static_members_that_do_not_rejoin_extend_the_join_until_their_sessions_expire():
    """completeClassicGroupJoin when no member rejoined but static members remain: the join phase waits
    another rebalance timeout; once their sessions expire the group is Empty."""
    ctx = Ctx(delay_ms=DELAY_MS)
    static_members_join_and_rebalance(ctx, SESSION_MS, REBALANCE_MS)
    group = ctx.c.groups["g"]
    ctx.join(require_known_member_id=False, session=SESSION_MS, rebalance=REBALANCE_MS)
    dynamic = next(m for m in group.members if m not in group.static_members.values())
    ctx.c.leave_group(ctx.now, group_id="g", members=[(dynamic, None)])  # a rebalance no one answers
    ctx.tick(REBALANCE_MS)
    assert group.state == GroupState.PREPARING_REBALANCE and group.generation_id == 1
    assert len(group.members) == 2
    ctx.tick(SESSION_MS - REBALANCE_MS + 1)
    assert group.state == GroupState.EMPTY and not group.members and group.generation_id == 2


@pytest.mark.parametrize("error", [ErrorCode.none, ErrorCode.coordinator_not_available])
def test_replaced_static_member_removed_while_the_group_is_written_is_answered_unknown_member_id(error):
    """A LeaveGroup by instance id while the restarted member's group is written removes the new member:
    its join is answered UNKNOWN_MEMBER_ID (removeMemberAndUpdateClassicGroup completes a waiting join),
    whatever the write's outcome, and the old member is not put back."""
    ctx = Ctx(delay_ms=DELAY_MS)
    static_members_join_and_rebalance(ctx)
    ctx.store_error = None
    token = ctx.join(instance_id=LEADER)
    _, _, done = ctx.c.leave_group(ctx.now, group_id="g", members=[("", LEADER)])
    ctx._collect(done)  # the removal answers the waiting join
    ctx.write_static_store(error)
    result = joined(ctx, token)
    assert (result.error, result.member_id) == (ErrorCode.unknown_member_id, "")
    assert LEADER not in ctx.c.groups["g"].static_members


def test_replaced_static_member_session_runs_from_its_answer():
    """updateStaticMemberThenRebalanceOrCompleteJoin: the restarted member's session is rescheduled when its
    join is answered, not only when it asked (a slow write would otherwise eat into it)."""
    ctx = Ctx(delay_ms=DELAY_MS)
    _, follower = static_members_join_and_rebalance(ctx)
    ctx.store_error = None
    ctx.join(instance_id=LEADER)
    ctx.now += 8000  # the write is slow
    ctx.write_static_store(ErrorCode.none)
    ctx.c.heartbeat(ctx.now, group_id="g", generation_id=1, member_id=follower)
    ctx.tick(5000)
    assert LEADER in ctx.c.groups["g"].static_members, "its session ran from its answer"


def test_static_member_that_did_not_rejoin_is_removed_when_it_does_not_sync():
    """A static follower kept in the generation though it did not rejoin (completeClassicGroupJoin) is
    removed at the rebalance timeout if it does not sync either (expirePendingSync), before its session."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx, SESSION_MS, REBALANCE_MS)
    changed = (("range", b"changed"),)
    ctx.join(leader, instance_id=LEADER, protocols=changed, session=SESSION_MS, rebalance=REBALANCE_MS)
    ctx.tick(REBALANCE_MS)
    group = ctx.c.groups["g"]
    assert group.state == GroupState.COMPLETING_REBALANCE and follower in group.members
    ctx.sync(leader, 2, {leader: b"a"}, instance_id=LEADER)
    ctx.tick(REBALANCE_MS)
    assert follower not in group.members and group.static_members == {LEADER: leader}
    assert group.state == GroupState.PREPARING_REBALANCE


@pytest.mark.parametrize("error", [ErrorCode.none, ErrorCode.not_enough_replicas])
def test_replaced_static_member_removed_by_the_sync_deadline_is_answered(error):
    """A restarted follower that takes the place of one still owing its SyncGroup is removed at the
    pending-sync deadline while its group is written: the removal answers its join UNKNOWN_MEMBER_ID
    (expirePendingSync, removeMemberAndUpdateClassicGroup), and so does the write's completion (its error
    if it failed), never leaving the join unanswered."""
    ctx = Ctx(delay_ms=DELAY_MS)
    leader, follower = static_members_join_and_rebalance(ctx, SESSION_MS, REBALANCE_MS)
    ctx.join(leader, instance_id=LEADER, session=SESSION_MS, rebalance=REBALANCE_MS)
    ctx.tick(REBALANCE_MS)  # the follower did not rejoin: kept, owing its sync
    group = ctx.c.groups["g"]
    ctx.sync(leader, 2, {leader: b"a", follower: b"b"}, instance_id=LEADER)
    assert group.state == GroupState.STABLE and group.pending_sync == {follower}
    ctx.store_error = None  # the restarted follower's write waits
    token = ctx.join(instance_id=FOLLOWER, session=SESSION_MS, rebalance=REBALANCE_MS)
    store = ctx.static_stores[0]
    ctx.tick(REBALANCE_MS)
    assert FOLLOWER not in group.static_members
    result = joined(ctx, token)
    assert (result.error, result.member_id) == (ErrorCode.unknown_member_id, "")
    late = ctx.c.complete_static_store(ctx.now, store, error)
    expected = ErrorCode.unknown_member_id if error == ErrorCode.none else error
    assert [(c.token, c.result.error) for c in late] == [(token, expected)]


def test_replace_static_member_whose_write_fails_after_a_rebalance_keeps_its_protocols():
    """A failed write after a rebalance took the replacement's join puts the old id back with the protocols
    the rebalance chose from (the old ones may have none in common with the others: INCONSISTENT_GROUP_PROTOCOL
    for everyone); the replacement's newer join is answered UNKNOWN_MEMBER_ID, not the fatal
    FENCED_INSTANCE_ID (Kafka drops that join's future)."""
    ctx = Ctx(delay_ms=DELAY_MS)
    both = (("range", b"r"), ("roundrobin", b"q"))
    x_join = ctx.join(instance_id=LEADER, protocols=(("range", b"r"),))
    b_join = ctx.join(instance_id=FOLLOWER, protocols=both)
    ctx.tick(DELAY_MS)
    x, b = joined(ctx, x_join).member_id, joined(ctx, b_join).member_id
    ctx.sync(x, 1, {x: b"a", b: b"b"})
    ctx.store_error = None  # the restarted leader's write waits
    restarted = ctx.join(instance_id=LEADER, protocols=both)
    group = ctx.c.groups["g"]
    new_x = group.static_members[LEADER]
    ctx.join(member_id=b, instance_id=FOLLOWER, protocols=(("roundrobin", b"q"),))  # a rebalance
    assert joined(ctx, restarted).protocol_name == "roundrobin"
    changed = (("roundrobin", b"q2"), ("range", b"r"))
    rejoin = ctx.join(member_id=new_x, instance_id=LEADER, protocols=changed)  # waits for a new generation
    assert group.state == GroupState.PREPARING_REBALANCE and rejoin not in ctx.results
    ctx.write_static_store(ErrorCode.not_enough_replicas)
    assert group.static_members[LEADER] == x and group.members[x].protocols == changed, "as it rejoined"
    assert (joined(ctx, rejoin).error, joined(ctx, rejoin).member_id) == (ErrorCode.unknown_member_id, "")
