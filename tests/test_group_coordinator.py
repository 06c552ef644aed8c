"""The sans-IO group coordinator: Kafka's classic rebalance protocol, step by step."""

import pytest

from epochkraft.broker.group_coordinator import (
    CommittedOffset,
    GroupCoordinator,
    GroupSettings,
    GroupState,
    JoinResult,
    StoreGroup,
    StoreStaticMember,
    SyncResult,
    coordinator_partition,
    java_string_hash,
)
from epochkraft.broker.group_service import GroupService, OffsetCommitEntry
from epochkraft.broker.offset_records import offset_record_key, offset_record_value, parse_offset_record
from epochkraft.protocol.errors import ErrorCode

PROTOCOLS = (("range", b"meta-range"), ("roundrobin", b"meta-rr"))


class Ctx:
    """A coordinator with helpers that speak the protocol's verbs."""

    def __init__(self, delay_ms: int = 0, max_size: int = 2**31 - 1) -> None:
        self.c = GroupCoordinator(GroupSettings(initial_rebalance_delay_ms=delay_ms, max_size=max_size))
        self.now = 1000
        self.results: dict[object, JoinResult | SyncResult] = {}
        self._tokens = 0
        self.stores: list[StoreGroup] = []  # leaders' assignments not yet written
        self.static_stores: list[StoreStaticMember] = []  # static members' replacements not yet written
        self.store_error: ErrorCode | None = ErrorCode.none

    def _token(self) -> int:
        self._tokens += 1
        return self._tokens

    def _collect(self, completions) -> None:
        for c in completions:  # the first answer counts, as GroupService._complete's
            self.results.setdefault(c.token, c.result)

    def join(
        self,
        member_id: str = "",
        protocols=PROTOCOLS,
        session=10_000,
        group="g",
        rebalance=None,
        require_known_member_id=True,
        instance_id=None,
        skip_assignment_supported=True,
    ) -> int:
        """A JoinGroup; a static member's replacement in a Stable group is written at once as ``sync``
        writes the leader's assignment (``store_error``), or waits in ``static_stores``."""
        token = self._token()
        done, store = self.c.join_group(
            self.now,
            token,
            group_id=group,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocols=protocols,
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance or session,
            client_id="c",
            require_known_member_id=require_known_member_id,
            skip_assignment_supported=skip_assignment_supported,
        )
        self._collect(done)
        if store is not None:
            self.static_stores.append(store)
            if self.store_error is not None:
                self.write_static_store(self.store_error)
        return token

    def write_static_store(self, error: ErrorCode = ErrorCode.none) -> None:
        self._collect(self.c.complete_static_store(self.now, self.static_stores.pop(0), error))

    def join_with_id(self, **kw) -> tuple[str, int]:
        """First join gets MEMBER_ID_REQUIRED; the second join carries the id (KIP-394)."""
        first = self.join(**kw)
        result = self.results[first]
        assert result.error == ErrorCode.member_id_required
        return result.member_id, self.join(member_id=result.member_id, **kw)

    def sync(self, member_id: str, generation: int, assignments=None, group="g", instance_id=None) -> int:
        """A SyncGroup; the leader's assignment is written at once (``store_error`` NONE) or its write fails
        with that error, or with None it waits in ``stores`` for ``complete_store``."""
        token = self._token()
        done, store = self.c.sync_group(
            self.now,
            token,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            assignments=assignments or {},
            group_instance_id=instance_id,
        )
        self._collect(done)
        if store is not None:
            self.stores.append(store)
            if self.store_error is not None:
                self.write_store(self.store_error)
        return token

    def write_store(self, error: ErrorCode = ErrorCode.none) -> None:
        self._collect(self.c.complete_store(self.now, self.stores.pop(0), error))

    def tick(self, advance_ms: int) -> None:
        self.now += advance_ms
        self._collect(self.c.tick(self.now))


def test_first_join_requires_member_id():
    ctx = Ctx()
    token = ctx.join()
    result = ctx.results[token]
    assert result.error == ErrorCode.member_id_required
    assert result.member_id.startswith("c-")


def test_single_member_join_sync_becomes_stable():
    ctx = Ctx()
    member, token = ctx.join_with_id()
    join = ctx.results[token]
    assert (join.error, join.generation_id, join.leader, join.protocol_name) == (
        ErrorCode.none,
        1,
        member,
        "range",
    )
    assert join.members == ((member, None, b"meta-range"),)
    sync = ctx.sync(member, 1, {member: b"assignment-1"})
    assert ctx.results[sync] == SyncResult(ErrorCode.none, "consumer", "range", b"assignment-1")
    assert ctx.c.groups["g"].state == GroupState.STABLE


def test_second_member_triggers_rebalance_and_both_get_assignments():
    ctx = Ctx()
    a, _ta = ctx.join_with_id()
    ctx.sync(a, 1, {a: b"all"})
    b, tb = ctx.join_with_id()
    assert tb not in ctx.results  # waits for the existing member to rejoin
    assert (
        ctx.c.heartbeat(ctx.now, group_id="g", generation_id=1, member_id=a)
        == ErrorCode.rebalance_in_progress
    )
    ta2 = ctx.join(member_id=a)
    ja, jb = ctx.results[ta2], ctx.results[tb]
    assert ja.generation_id == jb.generation_id == 2
    assert ja.leader == a and len(ja.members) == 2 and jb.members == ()
    sb = ctx.sync(b, 2)
    assert sb not in ctx.results  # the follower waits for the leader's assignments
    sa = ctx.sync(a, 2, {a: b"p0", b: b"p1"})
    assert ctx.results[sa].assignment == b"p0"
    assert ctx.results[sb].assignment == b"p1"
    assert ctx.c.heartbeat(ctx.now, group_id="g", generation_id=2, member_id=b) == ErrorCode.none


def test_member_leaving_rebalances_the_rest():
    ctx = Ctx()
    a, _ = ctx.join_with_id()
    ctx.sync(a, 1, {a: b"x"})
    b, _tb = ctx.join_with_id()
    ctx.join(member_id=a)
    ctx.sync(b, 2)
    ctx.sync(a, 2, {a: b"x", b: b"y"})
    top, errors, _ = ctx.c.leave_group(ctx.now, group_id="g", members=[(b, None)])
    assert (top, errors) == (ErrorCode.none, [ErrorCode.none])
    assert ctx.c.groups["g"].state == GroupState.PREPARING_REBALANCE
    ta = ctx.join(member_id=a)
    assert ctx.results[ta].generation_id == 3 and len(ctx.results[ta].members) == 1


def test_session_expiry_removes_member_and_rebalances():
    ctx = Ctx()
    a, _ = ctx.join_with_id(session=6000)
    ctx.sync(a, 1, {a: b"x"})
    ctx.tick(7000)
    group = ctx.c.groups["g"]
    assert a not in group.members
    assert group.state == GroupState.EMPTY


def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_deadline():
    ctx = Ctx()
    a, _ = ctx.join_with_id(session=6000)
    ctx.sync(a, 1, {a: b"x"})
    b, tb = ctx.join_with_id(session=6000)
    ctx.tick(6001)
    assert ctx.results[tb].generation_id == 2
    assert set(ctx.c.groups["g"].members) == {b}


def test_session_timeout_during_rebalance():
    """Kafka's GroupMetadataManagerTest.testSessionTimeoutDuringRebalance: a member that died while the group
    prepares a rebalance is removed when its session expires (heartbeats still expire then), so the join
    completes then, not at the rebalance timeout (Kafka Streams': max.poll.interval.ms, 5 minutes)."""
    ctx = Ctx()
    a, _ = ctx.join_with_id(session=6000, rebalance=300_000)
    ctx.sync(a, 1, {a: b"x"})
    b, tb = ctx.join_with_id(session=6000, rebalance=300_000)
    ctx.tick(5000)
    assert tb not in ctx.results, "a's session is still alive"
    ctx.tick(1001)
    assert ctx.results[tb].generation_id == 2
    assert set(ctx.c.groups["g"].members) == {b}
    assert ctx.c.groups["g"].state == GroupState.COMPLETING_REBALANCE


def test_a_member_awaiting_sync_is_not_expired_while_the_leader_assigns():
    """ClassicGroupMember.hasSatisfiedHeartbeat: a follower parked in SyncGroup while the leader computes the
    assignment longer than the follower's session (within the rebalance timeout) is not expired (its
    SyncGroup would go unanswered); it gets its assignment when the leader syncs."""
    ctx = Ctx()
    a, _ = ctx.join_with_id(session=6000, rebalance=60_000)
    ctx.sync(a, 1, {a: b"x"})
    b, tb = ctx.join_with_id(session=6000, rebalance=60_000)
    ctx.join(member_id=a, session=6000, rebalance=60_000)
    assert ctx.results[tb].generation_id == 2
    sb = ctx.sync(b, 2)
    ctx.tick(3000)
    ctx.c.heartbeat(ctx.now, group_id="g", generation_id=2, member_id=a)
    ctx.tick(4000)  # b's session is past, but it awaits its SyncGroup answer
    assert b in ctx.c.groups["g"].members
    sa = ctx.sync(a, 2, {a: b"p0", b: b"p1"})
    assert ctx.results[sa].assignment == b"p0" and ctx.results[sb].assignment == b"p1"


@pytest.mark.parametrize(
    ("generation", "member", "expected"),
    [
        (1, "ghost", ErrorCode.unknown_member_id),
        (7, None, ErrorCode.illegal_generation),
        (1, None, ErrorCode.none),
    ],
)
def test_heartbeat_errors(generation, member, expected):
    ctx = Ctx()
    a, _ = ctx.join_with_id()
    ctx.sync(a, 1, {a: b"x"})
    assert ctx.c.heartbeat(ctx.now, group_id="g", generation_id=generation, member_id=member or a) == expected


def test_join_with_unknown_member_id_is_rejected():
    ctx = Ctx()
    assert ctx.results[ctx.join(member_id="nobody")].error == ErrorCode.unknown_member_id


def test_inconsistent_protocols_rejected():
    ctx = Ctx()
    _a, _ = ctx.join_with_id()
    token = ctx.join(protocols=(("sticky", b""),))
    assert ctx.results[token].error == ErrorCode.inconsistent_group_protocol


def test_invalid_session_timeout():
    ctx = Ctx()
    assert ctx.results[ctx.join(session=10)].error == ErrorCode.invalid_session_timeout


def test_initial_rebalance_delay_collects_members():
    ctx = Ctx(delay_ms=3000)
    _a, ta = ctx.join_with_id()
    assert ta not in ctx.results
    _b, tb = ctx.join_with_id()
    ctx.tick(3000)
    assert ctx.results[ta].generation_id == ctx.results[tb].generation_id == 1


def test_sync_during_rebalance_fails_and_pending_sync_is_released():
    ctx = Ctx()
    a, _ = ctx.join_with_id()
    ctx.sync(a, 1, {a: b"x"})
    _b, _ = ctx.join_with_id()
    assert ctx.results[ctx.sync(a, 1)].error == ErrorCode.rebalance_in_progress


def test_offset_commit_validation_and_apply():
    ctx = Ctx()
    a, _ = ctx.join_with_id()
    ctx.sync(a, 1, {a: b"x"})
    c = ctx.c
    assert c.validate_offset_commit(group_id="g", generation_id=1, member_id=a) == ErrorCode.none
    assert (
        c.validate_offset_commit(group_id="g", generation_id=0, member_id=a) == ErrorCode.illegal_generation
    )
    assert (
        c.validate_offset_commit(group_id="g", generation_id=1, member_id="x") == ErrorCode.unknown_member_id
    )
    assert c.validate_offset_commit(group_id="solo", generation_id=-1, member_id="") == ErrorCode.none
    c.apply_offset("g", "t", 0, CommittedOffset(42, 3, None, 5))
    assert c.committed_offsets("g")[("t", 0)].offset == 42


def test_offset_records_round_trip_and_replay():
    committed = CommittedOffset(10, 2, "meta", 123)
    key = offset_record_key("g", "topic", 4)
    assert parse_offset_record(key, offset_record_value(committed)) == ("g", "topic", 4, committed)
    assert parse_offset_record(key, None) == ("g", "topic", 4, None)
    fresh = GroupCoordinator()
    for k, v in [
        (key, offset_record_value(committed)),
        (key, offset_record_value(CommittedOffset(11, 2, None, 9))),
    ]:
        group, topic, part, value = parse_offset_record(k, v)
        fresh.apply_offset(group, topic, part, value)
    assert fresh.committed_offsets("g")[("topic", 4)].offset == 11


@pytest.mark.parametrize(
    ("value", "expected"), [("", 0), ("hello", 99162322), ("polygenelubricants", -(2**31))]
)
def test_java_string_hash(value, expected):
    assert java_string_hash(value) == expected


def test_coordinator_partition_in_range():
    assert 0 <= coordinator_partition("polygenelubricants", 50) < 50
    assert coordinator_partition("hello", 50) == 99162322 % 50


def subscription(*topics: str) -> bytes:
    """A consumer protocol Subscription v0: version, topics, no user data."""
    body = b"".join(len(t).to_bytes(2, "big") + t.encode() for t in topics)
    return b"\x00\x00" + len(topics).to_bytes(4, "big") + body + b"\xff\xff\xff\xff"


def committed(ctx: Ctx, group: str, *partitions: tuple[str, int]) -> None:
    for topic, partition in partitions:
        ctx.c.apply_offset(group, topic, partition, CommittedOffset(5, 0, None, ctx.now))


def test_delete_groups_of_empty_non_empty_and_unknown_groups():
    """GroupCoordinatorTest.testDeleteGroups / testDeleteNonEmptyGroup / testDeleteGroupsUnknownGroup."""
    ctx = Ctx()
    committed(ctx, "standalone", ("t", 0), ("t", 1))
    ctx.join_with_id(group="busy")
    assert ctx.c.decide_delete_group("standalone") == (ErrorCode.none, [("t", 0), ("t", 1)])
    assert ctx.c.decide_delete_group("busy") == (ErrorCode.non_empty_group, [])
    assert ctx.c.decide_delete_group("nobody") == (ErrorCode.group_id_not_found, [])
    ctx.c.remove_group("standalone")
    ctx.c.remove_group("busy")
    assert "standalone" not in ctx.c.groups and "busy" in ctx.c.groups, "a group with members stays"


@pytest.mark.parametrize(
    ("members_subscribe", "expected"),
    [
        (None, {("t", 0): ErrorCode.none, ("u", 0): ErrorCode.none}),
        (("t",), {("t", 0): ErrorCode.group_subscribed_to_topic, ("u", 0): ErrorCode.none}),
    ],
)
def test_delete_offsets_of_empty_and_stable_consumer_groups(members_subscribe, expected):
    """GroupCoordinatorTest.testDeleteOffsetOfEmptyConsumerGroup / ...OfStableConsumerGroup: offsets of
    topics the members subscribe to stay."""
    ctx = Ctx()
    committed(ctx, "g", ("t", 0), ("u", 0))
    if members_subscribe is not None:
        member, token = ctx.join_with_id(protocols=(("range", subscription(*members_subscribe)),))
        ctx.sync(member, ctx.results[token].generation_id, {member: b""})
    assert ctx.c.decide_delete_offsets("g", [("t", 0), ("u", 0)]) == (ErrorCode.none, expected)
    assert ctx.c.decide_delete_offsets("other", [("t", 0)]) == (ErrorCode.group_id_not_found, {})


def test_offsets_of_a_group_expire_only_once_it_has_been_empty_for_the_retention():
    """GroupMetadataManagerTest.testOffsetExpirationOfActiveGroupSemantics / testExpireOffset (KIP-211):
    a group with members keeps its offsets however old; once empty, each offset goes retention after the
    later of its commit and the moment the group became empty; simple consumers' groups alike."""
    ctx = Ctx()
    ctx.c.settings = GroupSettings(initial_rebalance_delay_ms=0, offsets_retention_ms=10_000)
    a, _ = ctx.join_with_id()
    ctx.sync(a, 1, {a: b"x"})
    ctx.c.apply_offset("g", "t", 0, CommittedOffset(5, 0, None, ctx.now))
    ctx.c.apply_offset("solo", "t", 1, CommittedOffset(7, 0, None, ctx.now))
    ctx.tick(50_000)
    assert "g" not in ctx.c.decide_expired_offsets(ctx.now), "a group with members keeps its offsets"
    assert ctx.c.decide_expired_offsets(ctx.now) == {"solo": [("t", 1)]}
    ctx.c.leave_group(ctx.now, group_id="g", members=[(a, None)])
    ctx.tick(100)
    left_at = ctx.now
    ctx.c.apply_offset("g", "t", 2, CommittedOffset(9, 0, None, left_at + 5_000))
    ctx.tick(9_000)
    assert "g" not in ctx.c.decide_expired_offsets(ctx.now)
    ctx.tick(1_000)
    assert ctx.c.decide_expired_offsets(ctx.now)["g"] == [("t", 0)]
    ctx.tick(5_000)
    assert ctx.c.decide_expired_offsets(ctx.now)["g"] == [("t", 0), ("t", 2)]


class MemoryOffsetsTopic:
    """__consumer_offsets as a list: every append is committed at once."""

    num_partitions = 1

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def leader_of(self, partition: int, listener_name: str | None = None) -> tuple[int, str, int] | None:
        return (0, "127.0.0.1", 9092)

    def is_local_leader(self, partition: int) -> bool:
        return True

    async def ensure(self) -> None:
        return None

    async def append(
        self,
        partition: int,
        entries: list[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        self.records.extend(entries)
        return ErrorCode.none


@pytest.mark.parametrize(
    ("metadata", "too_large"),
    [(None, False), ("", False), ("m" * 4096, False), ("m" * 4097, True), ("\U0001f600" * 2049, True)],
)
def test_offset_metadata_too_large(metadata, too_large):
    """GroupMetadataManagerTest.testOffsetMetadataTooLarge: the limit is offset.metadata.max.bytes (4096)
    counted as Java's String.length(), so a character outside the BMP counts twice."""
    assert GroupCoordinator().offset_metadata_too_large(metadata) is too_large


async def test_generic_group_offset_commit_with_offset_metadata_too_large():
    """OffsetMetadataManagerTest.testGenericGroupOffsetCommitWithOffsetMetadataTooLarge: the partition with
    too much metadata gets OFFSET_METADATA_TOO_LARGE and nothing is stored for it; the others commit."""
    topic = MemoryOffsetsTopic()
    service = GroupService(topic, GroupCoordinator(GroupSettings(offset_metadata_max_bytes=10)))
    errors = await service.commit(
        group_id="g",
        generation_id=-1,
        member_id="",
        entries=[
            OffsetCommitEntry("t", 0, 5, -1, "x" * 11),
            OffsetCommitEntry("t", 1, 6, -1, "x" * 10),
        ],
    )
    assert errors == [ErrorCode.offset_metadata_too_large, ErrorCode.none]
    assert [key for key, _ in topic.records] == [offset_record_key("g", "t", 1)]
    assert list(service.fetch_offsets("g", None)) == [("t", 1)]


async def test_offset_commit_with_only_too_large_metadata_writes_nothing():
    topic = MemoryOffsetsTopic()
    service = GroupService(topic, GroupCoordinator(GroupSettings(offset_metadata_max_bytes=0)))
    entry = OffsetCommitEntry("t", 0, 5, -1, "x")
    errors = await service.commit(group_id="g", generation_id=-1, member_id="", entries=[entry])
    assert errors == [ErrorCode.offset_metadata_too_large]
    assert topic.records == []
    assert service.fetch_offsets("g", None) == {}


# ---- group.max.size (GroupMetadataManagerTest) ------------------------------------------------------------
MAX = 10


def errors(ctx: Ctx, tokens) -> list[ErrorCode]:
    return [ctx.results[t].error for t in tokens]


def test_join_group_should_receive_error_if_group_over_max_size():
    """testJoinGroupShouldReceiveErrorIfGroupOverMaxSize"""
    ctx = Ctx(delay_ms=50, max_size=MAX)
    waiting = [ctx.join(require_known_member_id=False) for _ in range(MAX)]
    assert not any(t in ctx.results for t in waiting)
    refused = ctx.join(require_known_member_id=False)
    assert (ctx.results[refused].error, ctx.results[refused].member_id) == (
        ErrorCode.group_max_size_reached,
        "",
    )


def test_dynamic_members_join_group_with_max_size_and_required_known_member():
    """testDynamicMembersJoinGroupWithMaxSizeAndRequiredKnownMember: an Empty group hands out ids to all;
    of the joins with them, the one past the maximum is refused and its id forgotten; in
    CompletingRebalance the members may rejoin, the refused one may not."""
    ctx = Ctx(delay_ms=50, max_size=MAX)
    first = [ctx.join() for _ in range(MAX + 1)]
    assert errors(ctx, first) == [ErrorCode.member_id_required] * (MAX + 1)
    ids = [ctx.results[t].member_id for t in first]
    assert ctx.c.groups["g"].state == GroupState.EMPTY and len(ctx.c.groups["g"].pending_members) == MAX + 1
    second = [ctx.join(member_id=i) for i in ids]
    ctx.tick(50)
    assert errors(ctx, second) == [ErrorCode.none] * MAX + [ErrorCode.group_max_size_reached]
    group = ctx.c.groups["g"]
    assert (len(group.members), len(group.pending_members), group.state) == (
        MAX,
        0,
        GroupState.COMPLETING_REBALANCE,
    )
    third = [ctx.join(member_id=i) for i in ids]
    assert ctx.results[third[-1]].error == ErrorCode.group_max_size_reached
    assert ids[-1] not in group.members and len(group.members) == MAX


def test_dynamic_members_join_group_with_max_size_and_not_required_known_member():
    """testDynamicMembersJoinGroupWithMaxSizeAndNotRequiredKnownMember"""
    ctx = Ctx(delay_ms=50, max_size=MAX)
    first = [ctx.join(require_known_member_id=False) for _ in range(MAX + 1)]
    group = ctx.c.groups["g"]
    assert (len(group.members), group.state) == (MAX, GroupState.PREPARING_REBALANCE)
    ctx.tick(50)
    assert errors(ctx, first) == [ErrorCode.none] * MAX + [ErrorCode.group_max_size_reached]
    ids = [ctx.results[t].member_id for t in first]
    second = [ctx.join(member_id=i, require_known_member_id=False) for i in ids]
    assert ctx.results[second[-1]].error == ErrorCode.group_max_size_reached
    assert len(group.members) == MAX


def test_dynamic_members_can_rejoin_group_with_max_size_while_rebalancing():
    """testDynamicMembersCanRejoinGroupWithMaxSizeWhileRebalancing: a member already waiting in its join
    is taken again while the group prepares a rebalance; the one past the maximum is not."""
    ctx = Ctx(delay_ms=50, max_size=MAX)
    ids = [ctx.results[ctx.join()].member_id for _ in range(MAX + 1)]
    for member_id in ids:
        ctx.join(member_id=member_id)
    group = ctx.c.groups["g"]
    assert (len(group.members), group.state) == (MAX, GroupState.PREPARING_REBALANCE)
    third = [ctx.join(member_id=i) for i in ids]
    ctx.tick(50)
    assert errors(ctx, third) == [ErrorCode.none] * MAX + [ErrorCode.group_max_size_reached]
    assert (len(group.members), group.state) == (MAX, GroupState.COMPLETING_REBALANCE)


def test_last_joining_members_are_kicked_out_when_rejoining_group_with_max_size():
    """testLastJoiningMembersAreKickedOutWhenRejoiningGroupWithMaxSize: a group holding more members than
    group.max.size now admits (the setting was lowered) rebalances; the first ones to rejoin are taken up
    to the maximum, the last are refused and leave the group."""
    ctx = Ctx(delay_ms=50, max_size=MAX + 2)
    ids = [ctx.results[ctx.join()].member_id for _ in range(MAX + 2)]
    joins = [ctx.join(member_id=i, rebalance=10_000) for i in ids]
    ctx.tick(50)
    generation = ctx.results[joins[0]].generation_id
    for member_id in ids:
        ctx.sync(member_id, generation)
    group = ctx.c.groups["g"]
    assert (len(group.members), group.state) == (MAX + 2, GroupState.STABLE)
    ctx.c.settings = GroupSettings(initial_rebalance_delay_ms=50, max_size=MAX)
    rejoins = [ctx.join(member_id=i, protocols=PROTOCOLS[::-1], rebalance=10_000) for i in ids]
    assert errors(ctx, rejoins[MAX:]) == [ErrorCode.group_max_size_reached] * 2
    ctx.tick(10_000)
    assert errors(ctx, rejoins[:MAX]) == [ErrorCode.none] * MAX
    assert (len(group.members), group.state) == (MAX, GroupState.COMPLETING_REBALANCE)
    assert set(group.members) == set(ids[:MAX])


def test_leader_leaving_while_its_assignment_is_written():
    """removeMemberAndUpdateClassicGroup completes the removed member's waiting requests: the leader
    leaving while its assignment is written is answered UNKNOWN_MEMBER_ID (else its SyncGroup hangs),
    and the follower's sync REBALANCE_IN_PROGRESS as the group rebalances."""
    ctx = Ctx()
    a, _ = ctx.join_with_id()
    ctx.sync(a, 1, {a: b"a-1"})
    b, b_join = ctx.join_with_id()
    ctx.join(member_id=a)
    assert ctx.results[b_join].generation_id == 2
    ctx.store_error = None  # the leader's assignment waits
    leader_sync, follower_sync = ctx.sync(a, 2, {a: b"a", b: b"b"}), ctx.sync(b, 2)
    _, _, done = ctx.c.leave_group(ctx.now, group_id="g", members=[(a, None)])
    ctx._collect(done)
    assert ctx.results[leader_sync].error == ErrorCode.unknown_member_id
    assert ctx.results[follower_sync].error == ErrorCode.rebalance_in_progress


def test_new_member_join_dead_group():
    """GroupMetadataManagerTest.testNewMemberJoinDeadGroup / testExistingMemberJoinDeadGroup: a group being
    deleted (Dead until its tombstones are written) answers JoinGroup COORDINATOR_NOT_AVAILABLE, and
    takes no commit or heartbeat; put back as it was when the deletion's write fails."""
    ctx = Ctx()
    committed(ctx, "g", ("t", 0))
    assert ctx.c.mark_dead("g") == GroupState.EMPTY
    assert ctx.results[ctx.join()].error == ErrorCode.coordinator_not_available
    assert ctx.results[ctx.join(member_id="m")].error == ErrorCode.coordinator_not_available
    assert ctx.c.validate_offset_commit(group_id="g", generation_id=-1, member_id="") == (
        ErrorCode.coordinator_not_available
    )
    assert ctx.c.heartbeat(ctx.now, group_id="g", generation_id=0, member_id="m") == (
        ErrorCode.coordinator_not_available
    )
    assert ctx.c.decide_delete_group("g") == (ErrorCode.group_id_not_found, [])
    ctx.c.revive("g", GroupState.EMPTY)
    assert ctx.results[ctx.join()].error == ErrorCode.member_id_required


def test_failed_deletion_keeps_the_retention_clock():
    """A group Dead while a deletion is written, put back when it fails, is Empty since when it was, not
    since the failure: its offsets expire when they would have (Kafka's group never left Empty)."""
    ctx = Ctx()
    committed(ctx, "g", ("t", 0))
    ctx.tick(1)
    since = ctx.c.groups["g"].empty_since_ms
    assert since is not None
    before = ctx.c.mark_dead("g")
    ctx.tick(5000)  # the deletion's write is slow, then fails
    ctx.c.revive("g", before)
    ctx.tick(1)
    assert ctx.c.groups["g"].empty_since_ms == since


def test_heartbeat_illegal_generation():
    """testHeartbeatIllegalGeneration: a heartbeat of another generation is ILLEGAL_GENERATION and does not
    renew the member's session (validateClassicGroupHeartbeat fails before the heartbeat is rescheduled)."""
    ctx = Ctx()
    a, _ = ctx.join_with_id(session=6000)
    ctx.sync(a, 1, {a: b"x"})
    ctx.now += 5000
    assert (
        ctx.c.heartbeat(ctx.now, group_id="g", generation_id=2, member_id=a) == ErrorCode.illegal_generation
    )
    ctx.tick(1001)
    assert a not in ctx.c.groups["g"].members


@pytest.mark.parametrize("rejoining", ["leader", "follower"])
def test_rejoin_with_the_same_metadata_while_completing_rebalance_gets_the_current_generation(rejoining):
    """classicGroupJoinExistingMember in CompletingRebalance: a member whose JoinGroup answer was lost
    rejoins with the same metadata and is answered the current generation (the leader with the members);
    the group does not rebalance. Changed metadata still rebalances."""
    ctx = Ctx()
    a, _ = ctx.join_with_id()
    ctx.sync(a, 1, {a: b"x"})
    b, _ = ctx.join_with_id()
    ctx.join(member_id=a)
    group = ctx.c.groups["g"]
    assert group.state == GroupState.COMPLETING_REBALANCE and group.generation_id == 2
    member = a if rejoining == "leader" else b
    session_renewed_at = group.members[member].last_heartbeat_ms
    ctx.now += 500
    result = ctx.results[ctx.join(member_id=member, session=20_000)]
    assert (result.error, result.generation_id, result.leader) == (ErrorCode.none, 2, a)
    assert len(result.members) == (2 if member == a else 0)
    assert group.state == GroupState.COMPLETING_REBALANCE and group.generation_id == 2
    unchanged = group.members[member]  # the answer only: no session renewed, no timeout taken
    assert (unchanged.last_heartbeat_ms, unchanged.session_timeout_ms) == (session_renewed_at, 10_000)
    ctx.join(member_id=member, protocols=(("range", b"changed"),))
    assert group.state == GroupState.PREPARING_REBALANCE


def group_in_state(state: str) -> tuple[Ctx, str]:
    """Group "g" with no record ("none"), without members ("empty"), or member "m" at generation 1 of a
    Stable group ("stable") or of one completing its rebalance ("completing"). Returns (ctx, member id)."""
    ctx = Ctx()
    if state == "none":
        return ctx, ""
    a, _ = ctx.join_with_id()
    if state == "completing":
        ctx.c.groups["g"].state = GroupState.COMPLETING_REBALANCE
    else:
        ctx.sync(a, 1, {a: b"x"})
    if state == "empty":
        ctx.c.leave_group(ctx.now, group_id="g", members=[(a, None)])
        assert ctx.c.groups["g"].state == GroupState.EMPTY
    return ctx, a


# (group, generation, member id given, instance id, version, transactional, expected)
OFFSET_COMMIT_RULES = [
    # testSimpleGroupOffsetCommit / testSimpleGroupOffsetCommitWithInstanceId: a simple group is made
    ("none", -1, False, None, 9, False, ErrorCode.none),
    ("none", -1, True, "instance", 9, False, ErrorCode.none),
    ("none", -1, True, None, 0, True, ErrorCode.none),
    # testOffsetCommitWithUnknownGroup: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before
    ("none", 1, True, None, 9, False, ErrorCode.group_id_not_found),
    ("none", 1, True, None, 8, False, ErrorCode.illegal_generation),
    ("none", 1, True, None, 0, True, ErrorCode.illegal_generation),
    # an admin's reset of an Empty group's offsets
    ("empty", -1, False, None, 9, False, ErrorCode.none),
    ("empty", 1, False, None, 9, False, ErrorCode.unknown_member_id),
    # testGenericGroupOffsetCommitWithoutMemberIdAndGeneration: a live group's offsets are its members'
    ("stable", -1, False, None, 9, False, ErrorCode.unknown_member_id),
    ("stable", -1, False, None, 0, True, ErrorCode.none),
    ("stable", 1, True, None, 9, False, ErrorCode.none),
    ("stable", 2, True, None, 9, False, ErrorCode.illegal_generation),
    # testGenericGroupOffsetCommitWhileInCompletingRebalanceState; a transaction's commit goes on
    ("completing", 1, True, None, 9, False, ErrorCode.rebalance_in_progress),
    ("completing", 1, True, None, 0, True, ErrorCode.none),
]


@pytest.mark.parametrize(
    ("state", "generation", "with_member", "instance_id", "version", "transactional", "expected"),
    OFFSET_COMMIT_RULES,
)
def test_classic_group_offset_commit_validation(
    state, generation, with_member, instance_id, version, transactional, expected
):
    """OffsetMetadataManager.validateOffsetCommit / validateTransactionalOffsetCommit, then
    ClassicGroup.validateOffsetCommit, after OffsetMetadataManagerTest's classic and simple group cases."""
    ctx, member = group_in_state(state)
    error = ctx.c.validate_offset_commit(
        group_id="g",
        generation_id=generation,
        member_id=(member or "member") if with_member else "",
        group_instance_id=instance_id,
        transactional=transactional,
        api_version=version,
    )
    assert error == expected


async def test_offset_commits_carry_their_version_and_kind_to_the_validation():
    """The service hands OffsetCommit's version and TxnOffsetCommit's kind to the validation: a commit with a
    generation to no group is GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before it and in a transaction."""
    service = GroupService(MemoryOffsetsTopic())
    service.load_partition(0, [])
    entry = OffsetCommitEntry("t", 0, 5, -1, "")
    commit = {"group_id": "gone", "generation_id": 3, "member_id": "m", "entries": [entry]}
    assert await service.commit(**commit, api_version=9) == [ErrorCode.group_id_not_found]
    assert await service.commit(**commit, api_version=8) == [ErrorCode.illegal_generation]
    assert await service.txn_commit(**commit, producer=(7, 0)) == [ErrorCode.illegal_generation]


def test_rebalance_times_out_when_sync_request_is_not_received_from_followers():
    """testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromFollowers (expirePendingSync): a follower that
    never sends SyncGroup is removed a rebalance timeout after the join completed, though its session
    would still run; the group rebalances without it."""
    ctx = Ctx()
    a, _ = ctx.join_with_id(session=30_000, rebalance=5000)
    ctx.sync(a, 1, {a: b"x"})
    b, _ = ctx.join_with_id(session=30_000, rebalance=5000)
    ta = ctx.join(member_id=a, session=30_000, rebalance=5000)
    assert ctx.results[ta].generation_id == 2
    ctx.store_error = None
    ctx.sync(a, 2, {a: b"p0", b: b"p1"})
    ctx.tick(4999)
    assert b in ctx.c.groups["g"].members
    ctx.tick(1)
    group = ctx.c.groups["g"]
    assert set(group.members) == {a} and group.state == GroupState.PREPARING_REBALANCE


def test_rebalance_does_not_time_out_when_all_sync_are_received():
    """testRebalanceDoesNotTimeOutWhenAllSyncAreReceived: every member synced, so nobody is removed at the
    rebalance timeout."""
    ctx = Ctx()
    a, _ = ctx.join_with_id(session=30_000, rebalance=5000)
    ctx.sync(a, 1, {a: b"x"})
    b, _ = ctx.join_with_id(session=30_000, rebalance=5000)
    ctx.join(member_id=a, session=30_000, rebalance=5000)
    ctx.sync(b, 2)
    ctx.sync(a, 2, {a: b"p0", b: b"p1"})
    ctx.tick(5000)
    group = ctx.c.groups["g"]
    assert set(group.members) == {a, b} and group.state == GroupState.STABLE
