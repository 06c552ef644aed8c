"""A classic group's membership in ``__consumer_offsets``, as Kafka's GroupMetadataManagerTest: the leader's
SyncGroup writes the GroupMetadata record before anyone is answered (its failure answered as Kafka's), a
group left Empty and a deleted or converted group are written, and a new coordinator replays the record into
the same group, Stable with its members, whose sessions run from the load."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from epochkraft.broker import classic_group_records
from epochkraft.broker import group_record_serde as serde
from epochkraft.broker.classic_group_records import group_from_record, group_metadata_key
from epochkraft.broker.consumer_group import HeartbeatRequest
from epochkraft.broker.consumer_group_classic import ClassicJoin
from epochkraft.broker.consumer_protocol import serialize_assignment
from epochkraft.broker.group_coordinator import (
    CommittedOffset,
    GroupCoordinator,
    GroupSettings,
    GroupState,
    JoinResult,
    SyncResult,
)
from epochkraft.broker.group_record_serde import RecordType
from epochkraft.broker.group_service import (
    EMPTY_WRITE_RETRY_MS,
    GroupService,
    LoggedOffsetRecord,
    OffsetCommitEntry,
)
from epochkraft.protocol.errors import ErrorCode
from tests.test_consumer_group import Topics
from tests.test_group_coordinator import MemoryOffsetsTopic
from tests.test_group_migration import subscription

SUBSCRIPTION = subscription()
PROTOCOLS = (("range", SUBSCRIPTION), ("cooperative-sticky", SUBSCRIPTION))
GROUP_KEY = group_metadata_key("g")
FOO_0, FOO_1 = (serialize_assignment({"foo": frozenset({p})}, 1) for p in (0, 1))


class GatedOffsetsTopic(MemoryOffsetsTopic):
    """Appends wait for ``gate`` (when set), then raise ``raises`` or answer ``error`` (a failed one appends
    nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.error = ErrorCode.none
        self.raises: Exception | None = None
        self.asked: list[list[tuple[bytes, bytes | None]]] = []  # every append asked for, in order

    async def append(self, partition, entries, producer=None) -> ErrorCode:
        self.asked.append(entries)
        if self.gate is not None:
            await self.gate.wait()
        if self.raises is not None:
            raise self.raises
        if self.error != ErrorCode.none:
            return self.error
        return await super().append(partition, entries, producer)


class Classic:
    """A group service over an in-memory __consumer_offsets, with a classic consumer's verbs on group g."""

    def __init__(self, max_size: int = 2**31 - 1) -> None:
        self.topic = GatedOffsetsTopic()
        settings = GroupSettings(initial_rebalance_delay_ms=0, max_size=max_size)
        self.service = GroupService(self.topic, GroupCoordinator(settings))
        self.service.load_partition(0, [])  # this broker coordinates the group
        self.topics = Topics()
        self.topics.create("foo", 2)

    async def join(
        self, member_id: str = "", client_id: str = "client", instance_id: str | None = None
    ) -> JoinResult:
        request = ClassicJoin(
            "g", member_id, instance_id, "consumer", PROTOCOLS, 10_000, 20_000, client_id, "/127.0.0.1",
            require_known_member_id=False, skip_assignment_supported=True,
        )  # fmt: skip
        return await self.service.join(request, self.topics)

    async def sync(self, member_id: str, generation: int, assignments=None) -> SyncResult:
        return await self.service.sync(
            self.topics, group_id="g", generation_id=generation, member_id=member_id,
            assignments=assignments or {},
        )  # fmt: skip

    async def stable_group_of_two(self) -> tuple[str, str]:
        """a, then b joining: generation 2, a the leader; both synced (a owns foo-0, b foo-1)."""
        a = await self.join(client_id="a")
        assert (await self.sync(a.member_id, 1, {a.member_id: b"a-1"})).error == ErrorCode.none
        b_join = asyncio.create_task(self.join(client_id="b"))
        await asyncio.sleep(0)  # b waits in its join for a to rejoin
        await self.join(a.member_id, client_id="a")
        b = await b_join
        assert b.generation_id == 2 and b.leader == a.member_id
        synced = await asyncio.gather(
            self.sync(b.member_id, 2), self.sync(a.member_id, 2, {a.member_id: FOO_0, b.member_id: FOO_1})
        )
        assert [s.error for s in synced] == [ErrorCode.none, ErrorCode.none]
        return a.member_id, b.member_id

    async def written(self) -> None:
        """Until the writes under way in the background (a new group's empty record) are done."""
        while self.service._stores:
            await asyncio.sleep(0)

    def group_records(self) -> list[tuple[str, serde.GroupMetadataValue | None]]:
        return [
            parsed
            for key, value in self.topic.records
            if (parsed := classic_group_records.parse(key, value)) is not None
        ]

    def successor(self) -> GroupService:
        """A new coordinator loading the records written so far."""
        successor = GroupService(MemoryOffsetsTopic())
        successor.load_partition(
            0, [LoggedOffsetRecord(k, v, offset=i) for i, (k, v) in enumerate(self.topic.records)]
        )
        return successor


def member_value(i: int, rebalance_timeout: int) -> serde.GroupMetadataMember:
    return serde.GroupMetadataMember(
        f"member-{i}", f"group-instance-id-{i}", f"client-{i}", f"host-{i}", rebalance_timeout, 4000,
        SUBSCRIPTION, b"\x02",
    )  # fmt: skip


def loaded(max_size: int = 2**31 - 1, rebalance_timeout: int = 9000) -> GroupCoordinator:
    coordinator = GroupCoordinator(GroupSettings(max_size=max_size))
    members = tuple(member_value(i, rebalance_timeout) for i in range(2))
    value = serde.GroupMetadataValue("consumer", 1, "range", "member-0", 1234, members)
    coordinator.replay_group_metadata("group-id", group_from_record("group-id", value))
    return coordinator


# ---- replay and load (sans-IO) ----------------------------------------------------------------------
@pytest.mark.parametrize("use_default_rebalance_timeout", [True, False])
def test_replay_group_metadata_records(use_default_rebalance_timeout):
    """GroupMetadataManagerTest.testReplayGroupMetadataRecords: the group is Stable at the record's
    generation, protocol, leader and state timestamp; each member has the chosen protocol alone, its
    subscription and assignment, and a rebalance timeout of -1 (a version 0 record) taken as its session's."""
    coordinator = loaded(rebalance_timeout=-1 if use_default_rebalance_timeout else 9000)
    group = coordinator.groups["group-id"]
    assert (group.state, group.generation_id, group.protocol_type, group.protocol_name, group.leader_id) == (
        GroupState.STABLE, 1, "consumer", "range", "member-0",
    )  # fmt: skip
    assert group.state_timestamp_ms == 1234
    for i, member in enumerate(group.members.values()):
        assert (member.member_id, member.group_instance_id, member.client_id, member.client_host) == (
            f"member-{i}", f"group-instance-id-{i}", f"client-{i}", f"host-{i}",
        )  # fmt: skip
        assert (member.session_timeout_ms, member.rebalance_timeout_ms) == (
            4000,
            4000 if use_default_rebalance_timeout else 9000,
        )
        assert member.protocols == (("range", SUBSCRIPTION),)
        assert member.assignment == member.synced_assignment == b"\x02"


def test_replay_group_metadata_tombstone_keeps_the_offsets():
    """A GroupMetadata tombstone removes the group (GroupMetadataManager.replay: removeGroup); its offsets,
    kept apart in Kafka's OffsetMetadataManager, stay for a group that still has some."""
    coordinator = loaded()
    coordinator.groups["group-id"].offsets[("t", 0)] = object()  # type: ignore[assignment]
    coordinator.replay_group_metadata("group-id", None)
    group = coordinator.groups["group-id"]
    assert (group.state, group.members, list(group.offsets)) == (GroupState.EMPTY, {}, [("t", 0)])
    empty = serde.GroupMetadataValue("", 0, None, None, -1, ())
    coordinator.replay_group_metadata("group-id", group_from_record("group-id", empty))
    assert coordinator.groups["group-id"].state == GroupState.EMPTY
    coordinator.groups["group-id"].offsets.clear()
    coordinator.replay_group_metadata("group-id", None)
    assert "group-id" not in coordinator.groups


def test_on_loaded_exceed_group_max_size_triggers_rebalance():
    """GroupMetadataManagerTest.testOnLoadedExceedGroupMaxSizeTriggersRebalance: a group loaded with more
    members than group.max.size (lowered since) prepares a rebalance, its members kept until then."""
    coordinator = loaded(max_size=1)
    coordinator.on_loaded(5000, ["group-id"])
    group = coordinator.groups["group-id"]
    assert (group.state, len(group.members)) == (GroupState.PREPARING_REBALANCE, 2)


def test_on_loaded_schedules_classic_group_member_heartbeats():
    """GroupMetadataManagerTest.testOnLoadedSchedulesClassicGroupMemberHeartbeats: each loaded member's
    session (4000 ms) runs from the load, so members that never come back are removed."""
    coordinator = loaded()
    coordinator.on_loaded(5000, ["group-id"])
    coordinator.tick(9000)
    assert len(coordinator.groups["group-id"].members) == 2
    coordinator.tick(9001)
    group = coordinator.groups["group-id"]
    assert (group.state, group.members, group.generation_id) == (GroupState.EMPTY, {}, 2)


# ---- writing (through the group service) -------------------------------------------------------------
async def test_sync_group_leader_after_follower():
    """GroupMetadataManagerTest.testSyncGroupLeaderAfterFollower: the follower's sync waits; the leader's
    writes one GroupMetadata record (generation, protocol, leader, every member with its subscription and
    assignment) and only once it is written is the group Stable and each sync answered."""
    c = Classic()
    a = await c.join(client_id="a")
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    b_join = asyncio.create_task(c.join(client_id="b"))
    await asyncio.sleep(0)
    await c.join(a.member_id, client_id="a")
    b = await b_join
    c.topic.records.clear()
    follower = asyncio.create_task(c.sync(b.member_id, 2))
    await asyncio.sleep(0)
    c.topic.gate = asyncio.Event()
    leader = asyncio.create_task(c.sync(a.member_id, 2, {a.member_id: b"a-2", b.member_id: b"b-2"}))
    await asyncio.sleep(0.01)
    group = c.service.coordinator.groups["g"]
    assert not follower.done() and not leader.done() and c.topic.records == []
    assert group.state == GroupState.COMPLETING_REBALANCE
    c.topic.gate.set()
    assert (await follower).assignment == b"b-2" and (await leader).assignment == b"a-2"
    assert group.state == GroupState.STABLE
    ((group_id, value),) = c.group_records()
    assert group_id == "g" and value is not None
    assert (value.protocol_type, value.generation, value.protocol, value.leader) == (
        "consumer", 2, "range", a.member_id,
    )  # fmt: skip
    assert [(m.member_id, m.client_id, m.session_timeout, m.rebalance_timeout) for m in value.members] == [
        (a.member_id, "a", 10_000, 20_000),
        (b.member_id, "b", 10_000, 20_000),
    ]
    assert [(m.subscription, m.assignment) for m in value.members] == [
        (SUBSCRIPTION, b"a-2"),
        (SUBSCRIPTION, b"b-2"),
    ]


@pytest.mark.parametrize(
    ("append_error", "answered"),
    [
        (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
        (ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
        (ErrorCode.message_too_large, ErrorCode.unknown_server_error),
    ],
)
async def test_sync_group_as_leader_append_failure_transforms_error(append_error, answered):
    """GroupMetadataManagerTest.testSyncGroupAsLeaderAppendFailureTransformsError: the leader's record is
    not written; the syncs are answered the error as clients know it (appendGroupMetadataErrorToResponseError)
    and the group rebalances, holding no assignment."""
    c = Classic()
    a = await c.join()
    c.topic.error = append_error
    assert (await c.sync(a.member_id, 1, {a.member_id: b"a-1"})).error == answered
    group = c.service.coordinator.groups["g"]
    assert group.state == GroupState.PREPARING_REBALANCE
    assert group.members[a.member_id].assignment == b""
    assert c.group_records() == []


async def test_heartbeat_expiration_should_remove_member():
    """GroupMetadataManagerTest.testHeartbeatExpirationShouldRemoveMember (and testNewMemberTimeoutCompletion):
    the last member's session expires, and the group's next generation is written without members."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    later = c.service.now_ms() + 60_000
    c.service.coordinator.tick(later)
    await asyncio.gather(*c.service.store_empty_groups(["g"], later))
    assert c.group_records()[-1] == ("g", serde.GroupMetadataValue("consumer", 2, None, None, later, ()))
    assert c.service.store_empty_groups(["g"], later) == []  # written once
    assert [value.generation for _, value in c.group_records() if value is not None] == [0, 1, 2]


@pytest.mark.parametrize(
    ("failure", "answered"),
    [("error", ErrorCode.coordinator_not_available), ("exception", ErrorCode.unknown_server_error)],
)
async def test_empty_group_write_failure_is_tried_again(failure, answered):
    """The last member's LeaveGroup is answered by the Empty record's write, as Kafka's: its failure as
    clients know it, the member removed all the same. The failed write is logged (Kafka only warns) and
    tried again by the ticks, not before EMPTY_WRITE_RETRY_MS, once the topic takes it."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    if failure == "error":
        c.topic.error = ErrorCode.not_enough_replicas
    else:
        c.topic.raises = OSError("the log is gone")
    left = await c.service.leave(group_id="g", members=[(a.member_id, None)])
    assert left == (answered, [answered])
    assert c.service.coordinator.groups["g"].members == {}
    now = c.service.now_ms()
    assert c.service.store_empty_groups(["g"], now) == []  # backing off
    assert len(c.group_records()) == 2  # the new group's and the leader's
    c.topic.error, c.topic.raises = ErrorCode.none, None
    assert c.service.store_empty_groups(["g"], now + EMPTY_WRITE_RETRY_MS)
    await asyncio.gather(*c.service.store_empty_groups(["g"], now + EMPTY_WRITE_RETRY_MS))
    _, value = c.group_records()[-1]
    assert value is not None and (value.generation, value.members) == (2, ())


async def test_last_member_leaving_writes_the_empty_group():
    """LeaveGroup of the last member completes the rebalance with nobody: the Empty generation is written,
    and a new coordinator loads the group Empty at it, the time it became empty kept for its offsets'
    expiry."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    assert await c.service.leave(group_id="g", members=[(a.member_id, None)]) == (
        ErrorCode.none,
        [ErrorCode.none],
    )
    _, value = c.group_records()[-1]
    assert value is not None and (value.generation, value.members) == (2, ())
    group = c.successor().coordinator.groups["g"]
    assert (group.state, group.generation_id, group.members) == (GroupState.EMPTY, 2, {})
    assert group.empty_since_ms == value.current_state_timestamp


async def test_classic_group_resumed_by_a_new_coordinator():
    """The coordinator fails over: the new one loads the group Stable at the same generation with the same
    members, protocol, leader and assignments, so the members go on heartbeating and committing with their
    generation, without rejoining."""
    c = Classic()
    a, b = await c.stable_group_of_two()
    before = c.service.coordinator.groups["g"]
    successor = c.successor()
    after = successor.coordinator.groups["g"]
    assert (after.state, after.generation_id, after.protocol_name, after.leader_id) == (
        GroupState.STABLE, 2, "range", a,
    )  # fmt: skip
    assert [(m.member_id, m.client_id, m.assignment) for m in after.members.values()] == [
        (m.member_id, m.client_id, m.assignment) for m in before.members.values()
    ]
    for member_id in (a, b):
        assert successor.heartbeat(group_id="g", generation_id=2, member_id=member_id) == ErrorCode.none
    entry = OffsetCommitEntry("foo", 0, 5, -1, "")
    assert await successor.commit(group_id="g", generation_id=2, member_id=b, entries=[entry]) == [
        ErrorCode.none
    ]


async def test_classic_group_delete():
    """GroupMetadataManagerTest.testClassicGroupDelete: DeleteGroups of an Empty classic group writes its
    offsets' tombstones, then its GroupMetadata tombstone; a new coordinator has no group."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    await c.service.commit(
        group_id="g", generation_id=1, member_id=a.member_id, entries=[OffsetCommitEntry("foo", 0, 5, -1, "")]
    )
    await c.service.leave(group_id="g", members=[(a.member_id, None)])
    assert await c.service.delete_group("g") == ErrorCode.none
    assert c.topic.records[-1] == (GROUP_KEY, None)
    assert c.topic.records[-2][1] is None  # the offset's tombstone before it
    assert "g" not in c.successor().coordinator.groups


async def test_classic_group_maybe_delete():
    """GroupMetadataManagerTest.testClassicGroupMaybeDelete (through cleanupGroupMetadata): an Empty group
    without offsets is deleted with a GroupMetadata tombstone; one preparing a rebalance is not."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    c.service.coordinator.groups["g"].state = GroupState.PREPARING_REBALANCE
    await c.service.expire_offsets(c.service.now_ms())
    assert "g" in c.service.coordinator.groups
    await c.service.leave(group_id="g", members=[(a.member_id, None)])
    await c.service.expire_offsets(c.service.now_ms())
    assert c.topic.records[-1] == (GROUP_KEY, None)
    assert "g" not in c.service.coordinator.groups and "g" not in c.successor().coordinator.groups


async def test_consumer_group_heartbeat_with_stable_classic_group():
    """GroupMetadataManagerTest.testConsumerGroupHeartbeatWithStableClassicGroup: a consumer protocol
    member converts the classic group; its GroupMetadata tombstone comes first in the write, so a new
    coordinator loads the consumer group alone, the classic members in it."""
    c = Classic()
    a, b = await c.stable_group_of_two()
    c.topic.records.clear()
    request = HeartbeatRequest(
        "g", "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("foo",), owned={}
    )
    assert (await c.service.consumer_heartbeat(request, c.topics)).error == ErrorCode.none
    assert c.topic.records[0] == (GROUP_KEY, None)
    assert len(c.group_records()) == 1
    c.topic.records[:0] = c.topic.records  # the classic group's earlier records come before
    successor = c.successor()
    assert successor.coordinator.classic_group_of("g") is None
    assert set(successor.consumer_groups.groups["g"].members) == {a, b, "m"}


def dynamic_join(member_id: str = "") -> ClassicJoin:
    """A JoinGroup v4+ of a dynamic member: MEMBER_ID_REQUIRED first."""
    return ClassicJoin("g", member_id, None, "consumer", PROTOCOLS, 10_000, 20_000, "client", "/127.0.0.1")


async def test_join_of_a_new_group_writes_it_empty():
    """classicGroupJoinToClassicGroup: a JoinGroup that creates the group writes it at once with
    newEmptyGroupMetadataRecord (generation 0, no members, no protocol or leader; the protocol type empty
    while the member is only pending), answered MEMBER_ID_REQUIRED without waiting for it; a new
    coordinator loads the group Empty."""
    c = Classic()
    before = c.service.now_ms()
    c.topic.gate = asyncio.Event()
    joined = await c.service.join(dynamic_join(), c.topics)
    assert joined.error == ErrorCode.member_id_required and c.group_records() == []
    c.topic.gate.set()
    await c.written()
    [(group_id, value)] = c.group_records()
    assert value is not None and before <= value.current_state_timestamp <= c.service.now_ms()
    assert (group_id, value) == (
        "g",
        serde.GroupMetadataValue("", 0, None, None, value.current_state_timestamp, ()),
    )
    loaded = c.successor().coordinator.groups["g"]
    assert (loaded.state, loaded.generation_id, loaded.members) == (GroupState.EMPTY, 0, {})


async def test_join_of_a_new_group_with_its_member_writes_it_empty_before_the_leaders_record():
    """A member added by the join that creates the group (JoinGroup v0-3, or a static member): the empty
    record still has no protocol type (newEmptyGroupMetadataRecord sets ""), and precedes the leader's."""
    c = Classic()
    a = await c.join()
    await c.written()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    values = [value for _, value in c.group_records()]
    assert [(v.protocol_type, v.generation, len(v.members)) for v in values if v is not None] == [
        ("", 0, 0),
        ("consumer", 1, 1),
    ]


async def test_a_new_groups_empty_record_never_follows_the_tombstone_of_an_upgrade_made_first():
    """A JoinGroup creating the group and a ConsumerGroupHeartbeat upgrading it, sent together: the
    upgrade's GroupMetadata tombstone is asked for before the empty record's turn comes, so the empty
    record is left out (Kafka writes it in the join's own batch, before anything else can); a new
    coordinator loads the consumer group only."""
    c = Classic()
    c.service.coordinator.settings = dataclasses.replace(
        c.service.coordinator.settings, initial_rebalance_delay_ms=3000
    )
    request = HeartbeatRequest(
        "g", "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("foo",), owned={}
    )
    join = asyncio.create_task(c.join())
    heartbeat = await asyncio.create_task(c.service.consumer_heartbeat(request, c.topics))
    assert heartbeat.error == ErrorCode.none
    await c.written()
    join.cancel()
    assert [value for _, value in c.group_records()] == [None]  # the tombstone, and nothing after it
    successor = c.successor()
    assert "g" not in successor.coordinator.groups and "g" in successor.consumer_groups.groups


async def test_a_new_group_whose_empty_record_may_be_written_is_kept():
    """A write that timed out may be in the log (Kafka's runtime reverts only an append that failed, not
    one whose commit it stopped waiting for): the group stays, as a new coordinator may load it."""
    c = Classic()
    c.topic.error = ErrorCode.request_timed_out
    joined = await c.service.join(dynamic_join(), c.topics)
    assert joined.error == ErrorCode.member_id_required
    await c.written()
    assert "g" in c.service.coordinator.groups


async def test_new_group_whose_empty_record_cannot_be_written_is_dropped():
    """The append of newEmptyGroupMetadataRecord failing reverts the join (Kafka's runtime drops the
    uncommitted group): the pending member's rejoin with its id finds no group, UNKNOWN_MEMBER_ID."""
    c = Classic()
    c.topic.error = ErrorCode.not_enough_replicas
    joined = await c.service.join(dynamic_join(), c.topics)
    assert joined.error == ErrorCode.member_id_required
    await c.written()
    assert "g" not in c.service.coordinator.groups and c.group_records() == []
    c.topic.error = ErrorCode.none
    again = await c.service.join(dynamic_join(joined.member_id), c.topics)
    assert again.error == ErrorCode.unknown_member_id


async def test_consumer_group_heartbeat_during_the_first_rebalance_tombstones_the_classic_group():
    """convertToConsumerGroup writes the classic group's tombstone (createGroupTombstoneRecords) even before
    its first rebalance completed: its empty record is live, and without the tombstone a new coordinator
    would load both groups."""
    c = Classic()
    a = await c.join()  # generation 1, awaiting the leader's SyncGroup: no record of the leader's yet
    await c.written()
    request = HeartbeatRequest(
        "g", "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("foo",), owned={}
    )
    assert (await c.service.consumer_heartbeat(request, c.topics)).error == ErrorCode.none
    assert (await c.sync(a.member_id, 1, {a.member_id: b"a-1"})).error != ErrorCode.none
    upgrade = c.topic.asked[1]
    assert upgrade[0] == (GROUP_KEY, None)
    successor = c.successor()
    assert "g" not in successor.coordinator.groups or not successor.coordinator.groups["g"].members
    assert set(successor.consumer_groups.groups["g"].members) == {a.member_id, "m"}


async def test_upgrade_of_a_group_first_made_by_a_commit_tombstones_it():
    """convertToConsumerGroup writes the classic group's tombstone whether or not a GroupMetadata record of
    it was ever written: here a simple consumer's commit made the group (no record), so the join found it
    and wrote none, and the upgrade during its first rebalance still begins with the tombstone."""
    c = Classic()
    entry = OffsetCommitEntry("foo", 0, 5, -1, "")
    assert await c.service.commit(group_id="g", generation_id=-1, member_id="", entries=[entry]) == [
        ErrorCode.none
    ]
    a = await c.join()
    await c.written()
    assert c.group_records() == []
    request = HeartbeatRequest(
        "g", "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("foo",), owned={}
    )
    assert (await c.service.consumer_heartbeat(request, c.topics)).error == ErrorCode.none
    assert c.topic.asked[-1][0] == (GROUP_KEY, None)
    assert set(c.successor().consumer_groups.groups["g"].members) == {a.member_id, "m"}


async def test_last_consumer_protocol_member_leaving_consumer_group():
    """GroupMetadataManagerTest.testLastConsumerProtocolMemberLeavingConsumerGroup: the consumer group's
    tombstones, then the classic group it became (createClassicGroupRecords: each member with its
    assignment), so a new coordinator loads the classic group."""
    c = Classic()
    a, b = await c.stable_group_of_two()
    join = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("foo",), owned={})
    joined = await c.service.consumer_heartbeat(join, c.topics)
    assert joined.error == ErrorCode.none
    leave = HeartbeatRequest("g", "m", -1)
    assert (await c.service.consumer_heartbeat(leave, c.topics)).error == ErrorCode.none
    assert c.topic.records[-1][0] == GROUP_KEY
    tombstones = [k for k, v in c.topic.records[:-1] if v is None]
    assert tombstones and all(k[:2] != GROUP_KEY[:2] for k in tombstones[1:])
    _, value = c.group_records()[-1]
    assert value is not None and {m.member_id for m in value.members} == {a, b}
    successor = c.successor()
    assert "g" not in successor.consumer_groups.groups
    classic = successor.coordinator.classic_group_of("g")
    assert classic is not None and set(classic.members) == {a, b}


def test_group_metadata_record_type():
    """The key of a classic group's record is Kafka's GroupMetadataKey (type 2)."""
    assert serde.parse_key(GROUP_KEY) == serde.GroupMetadataKey("g")
    assert int.from_bytes(GROUP_KEY[:2], "big") == RecordType.GROUP_METADATA


async def test_static_member_replacement_writes_the_group_before_answering():
    """updateStaticMemberThenRebalanceOrCompleteJoin's append: a static member restarted with a new member id
    into the Stable group is answered once the group's record names it in the old id's place, with the old
    id's assignment; a new coordinator loads it as that instance's member."""
    classic = Classic()
    first = await classic.join(instance_id="instance-a")
    assert (await classic.sync(first.member_id, 1, {first.member_id: FOO_0})).error == ErrorCode.none
    classic.topic.gate = asyncio.Event()
    rejoin = asyncio.create_task(classic.join(instance_id="instance-a"))
    await asyncio.sleep(0)
    assert not rejoin.done(), "answered only once the group is written"
    classic.topic.gate.set()
    result = await rejoin
    assert (result.error, result.generation_id, result.skip_assignment) == (ErrorCode.none, 1, True)
    _, value = classic.group_records()[-1]
    assert value is not None and value.generation == 1 and value.leader == result.member_id
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in value.members] == [
        (result.member_id, "instance-a", FOO_0)
    ]
    loaded_group = classic.successor().coordinator.groups["g"]
    assert loaded_group.static_members == {"instance-a": result.member_id}


async def test_static_member_replacement_whose_write_fails_puts_the_old_member_back():
    """testReplaceStaticMemberInStableStateErrors through the service: NOT_ENOUGH_REPLICAS is answered
    COORDINATOR_NOT_AVAILABLE (appendGroupMetadataErrorToResponseError) and the old member id stays."""
    classic = Classic()
    first = await classic.join(instance_id="instance-a")
    await classic.sync(first.member_id, 1, {first.member_id: FOO_0})
    written = len(classic.topic.records)
    classic.topic.error = ErrorCode.not_enough_replicas
    result = await classic.join(instance_id="instance-a")
    assert (result.error, result.member_id) == (ErrorCode.coordinator_not_available, "")
    group = classic.service.coordinator.groups["g"]
    assert group.static_members == {"instance-a": first.member_id} and group.state == GroupState.STABLE
    assert len(classic.topic.records) == written


async def test_empty_group_write_does_not_hold_the_ticks():
    """Kafka's timers never wait on appends: an Empty record's slow acks=all write (a follower gone but
    still in the ISR) goes on in the background while the ticks expire sessions and complete joins, and
    is asked for once however many ticks pass."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    c.service.coordinator.tick(c.service.now_ms() + 60_000)  # a's session expired: the group is Empty
    ticks = 0
    tick = c.service.coordinator.tick

    def counted(now_ms):
        nonlocal ticks
        ticks += 1
        return tick(now_ms)

    c.service.coordinator.tick = counted  # type: ignore[method-assign]
    c.topic.gate = asyncio.Event()
    written = len(c.topic.asked)
    c.service.start()
    try:
        for _ in range(40):  # a tick every TICK_INTERVAL_S (0.1 s): three within 2 s even on a busy machine
            await asyncio.sleep(0.05)
            if ticks >= 3:
                break
        assert ticks >= 3, "the ticks go on while the write waits"
        assert len(c.topic.asked) == written + 1, "one write of the group at a time"
    finally:
        c.topic.gate.set()
        await c.service.stop()


async def test_leader_sync_answered_by_a_rebalance_while_its_assignment_is_written():
    """The leader's SyncGroup waits for its own answer, not for the write: a member joining meanwhile
    answers it REBALANCE_IN_PROGRESS at once (the write may take APPEND_TIMEOUT_MS)."""
    c = Classic()
    a = await c.join(client_id="a")
    c.topic.gate = asyncio.Event()
    leader_sync = asyncio.create_task(c.sync(a.member_id, 1, {a.member_id: b"a-1"}))
    await asyncio.sleep(0)
    b_join = asyncio.create_task(c.join(client_id="b"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert leader_sync.done() and leader_sync.result().error == ErrorCode.rebalance_in_progress
    c.topic.gate.set()
    await c.join(a.member_id, client_id="a")
    assert (await b_join).generation_id == 2


async def test_join_group_while_the_group_is_deleted():
    """Kafka deletes a group at once: while DeleteGroups' tombstones are written the group is Dead, so a
    JoinGroup is answered COORDINATOR_NOT_AVAILABLE and no Empty record is written after the tombstone
    (which would bring the group back on a new coordinator); the deletion failing puts it back Empty."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    await c.service.leave(group_id="g", members=[(a.member_id, None)])
    c.topic.gate, c.topic.error = asyncio.Event(), ErrorCode.not_enough_replicas
    delete = asyncio.create_task(c.service.delete_group("g"))
    await asyncio.sleep(0)
    assert (await c.join()).error == ErrorCode.coordinator_not_available
    c.service._classic_written.pop("g")  # as if the Empty record's write had failed: it would be due
    assert c.service.store_empty_groups(["g"], c.service.now_ms()) == []
    c.topic.gate.set()
    assert await delete == ErrorCode.coordinator_not_available
    assert c.service.coordinator.groups["g"].state == GroupState.EMPTY


async def test_classic_group_records_follow_the_order_the_appends_were_asked_for():
    """Appends complete in any order: the leader's Stable record asked for before the Empty record of its
    leaving is not taken as the group's live record when it completes last, so the Empty one is not
    written again."""
    c = Classic()
    a = await c.join()
    await c.written()
    stable_gate = c.topic.gate = asyncio.Event()
    leader_sync = asyncio.create_task(c.sync(a.member_id, 1, {a.member_id: b"a-1"}))
    while len(c.topic.asked) < 2:
        await asyncio.sleep(0)
    c.topic.gate = None  # the Empty record's append completes first
    left = await c.service.leave(group_id="g", members=[(a.member_id, None)])
    assert left == (ErrorCode.none, [ErrorCode.none])
    assert (await leader_sync).error == ErrorCode.unknown_member_id
    stable_gate.set()
    while c.service._stores:
        await asyncio.sleep(0)
    assert [value for _, value in c.group_records()][-1].generation == 1, (
        "the Stable record's append completed last"
    )
    assert c.service.store_empty_groups(["g"], c.service.now_ms()) == []


async def test_consumer_group_heartbeat_while_the_leader_assignment_is_written():
    """convertToConsumerGroup always writes the classic group's tombstone: an upgrade while the leader's
    SyncGroup record is still being written (or timed out, maybe appended) tombstones it first, so a new
    coordinator does not load both groups."""
    c = Classic()
    a = await c.join()
    await c.written()
    c.topic.gate = asyncio.Event()
    leader_sync = asyncio.create_task(c.sync(a.member_id, 1, {a.member_id: b"a-1"}))
    while len(c.topic.asked) < 2:
        await asyncio.sleep(0)
    request = HeartbeatRequest(
        "g", "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("foo",), owned={}
    )
    heartbeat = asyncio.create_task(c.service.consumer_heartbeat(request, c.topics))
    while len(c.topic.asked) < 3:
        await asyncio.sleep(0)
    c.topic.gate.set()
    assert (await heartbeat).error == ErrorCode.none
    assert (await leader_sync).error == ErrorCode.rebalance_in_progress
    assert c.topic.asked[2][0] == (GROUP_KEY, None)
    assert c.successor().coordinator.classic_group_of("g") is None


async def test_downgrade_after_an_upgrade_that_timed_out_writes_the_classic_group():
    """convertToClassicGroup always writes createClassicGroupRecords: after an upgrade whose write timed
    out (its records maybe in the log, the consumer group kept), the consumer member leaving converts the
    group back and the classic group's record is written, so a new coordinator loads it."""
    c = Classic()
    a, b = await c.stable_group_of_two()
    join = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("foo",), owned={})
    c.topic.error = ErrorCode.request_timed_out
    assert (await c.service.consumer_heartbeat(join, c.topics)).error == ErrorCode.coordinator_not_available
    c.topic.error = ErrorCode.none
    written = len(c.topic.records)
    leave = HeartbeatRequest("g", "m", -1)
    assert (await c.service.consumer_heartbeat(leave, c.topics)).error == ErrorCode.none
    assert c.topic.records[-1][0] == GROUP_KEY and len(c.topic.records) > written
    _, value = c.group_records()[-1]
    assert value is not None and {m.member_id for m in value.members} == {a, b}
    assert value.generation > 2, "the consumer group's epoch, not the classic generation written before"


async def test_cleanup_expired_offsets_with_pending_transactional_offsets():
    """OffsetMetadataManagerTest.testCleanupExpiredOffsetsWithPendingTransactionalOffsets: the expired
    offsets go, but a group an open transaction commits to is not deleted (cleanupExpiredOffsets returns
    allOffsetsExpired && !openTransactionsByGroup.containsKey(groupId))."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    entry = OffsetCommitEntry("foo", 0, 5, -1, "")
    await c.service.commit(group_id="g", generation_id=1, member_id=a.member_id, entries=[entry])
    await c.service.leave(group_id="g", members=[(a.member_id, None)])
    await c.service.txn_commit(
        group_id="g", producer=(7, 0), generation_id=-1, member_id="", entries=[OffsetCommitEntry("foo", 1, 9, -1, "")]
    )  # fmt: skip
    now = c.service.now_ms()
    c.service.coordinator.tick(now)  # empty since now
    await c.service.expire_offsets(now + c.service.coordinator.settings.offsets_retention_ms + 1)
    assert c.service.coordinator.committed_offsets("g") == {}
    assert "g" in c.service.coordinator.groups and c.topic.records[-1][0] != GROUP_KEY


def test_loaded_empty_group_without_state_timestamp_expires_offsets_from_their_commits():
    """A GroupMetadata record of version 0 or 1 (old Kafka) has no state timestamp: the loaded Empty group's
    offsets expire from their commits (OffsetExpirationCondition without currentStateTimestamp), not from
    the load, which would restart their retention at every failover."""
    value = serde.GroupMetadataValue("consumer", 3, None, None, -1, ())
    group = group_from_record("g", value)
    coordinator = GroupCoordinator(GroupSettings(offsets_retention_ms=1000))
    coordinator.replay_group_metadata("g", group)
    coordinator.apply_offset("g", "foo", 0, CommittedOffset(5, -1, "", commit_timestamp_ms=10_000))
    coordinator.tick(50_000)  # loaded long after the commit
    assert coordinator.decide_expired_offsets(50_000) == {"g": [("foo", 0)]}


async def test_delete_consumer_group_with_a_classic_group_record_left():
    """DeleteGroups of an empty consumer group writes the GroupMetadata tombstone too when a classic
    group's record of that id may be live (here one a consumer group took the id over, its tombstone
    missing from the log): a new coordinator then loads neither group."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    await c.service.leave(group_id="g", members=[(a.member_id, None)])
    join = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("foo",), owned={})
    assert (await c.service.consumer_heartbeat(join, c.topics)).error == ErrorCode.none
    assert (await c.service.consumer_heartbeat(HeartbeatRequest("g", "m", -1), c.topics)).error == (
        ErrorCode.none
    )
    c.topic.records = [record for record in c.topic.records if record != (GROUP_KEY, None)]
    loaded = c.successor()
    assert "g" in loaded.consumer_groups.groups and "g" in loaded.coordinator.groups
    loaded.offsets_topic = c.topic
    assert await loaded.delete_group("g") == ErrorCode.none
    assert c.topic.records[-1] == (GROUP_KEY, None)
    gone = c.successor()
    assert "g" not in gone.coordinator.groups and "g" not in gone.consumer_groups.groups


async def empty_group_with_an_offset_commit_in_flight(c: Classic) -> asyncio.Task[list[ErrorCode]]:
    """Group g Empty (its member left, no offset) and an admin's commit to foo-1 validated, its append held
    by ``c.topic.gate`` with every append after it."""
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    await c.service.leave(group_id="g", members=[(a.member_id, None)])
    c.topic.gate = asyncio.Event()
    commit = asyncio.create_task(
        c.service.commit(
            group_id="g", generation_id=-1, member_id="", entries=[OffsetCommitEntry("foo", 1, 7, -1, "")]
        )
    )
    await asyncio.sleep(0)
    return commit


def assert_kept_as_a_new_coordinator_would(c: Classic) -> None:
    """The group as its log replays: Empty with the offset committed while it was deleted."""
    group = c.service.coordinator.groups["g"]
    assert group.state == GroupState.EMPTY and set(group.offsets) == {("foo", 1)}
    assert set(c.successor().coordinator.committed_offsets("g")) == {("foo", 1)}


async def test_offset_committed_while_the_group_expires_is_kept():
    """cleanupGroupMetadata deleting an Empty group while a commit to it is written: the commit lands
    before the GroupMetadata tombstone, so the group is left as a load replays it (Empty, with the offset)
    rather than Dead for good or forgotten with its offset."""
    c = Classic()
    commit = await empty_group_with_an_offset_commit_in_flight(c)
    expire = asyncio.create_task(c.service.expire_offsets(c.service.now_ms()))
    await asyncio.sleep(0)
    assert c.service.coordinator.groups["g"].state == GroupState.DEAD
    c.topic.gate.set()
    await commit, await expire
    assert c.topic.records[-1] == (GROUP_KEY, None)
    assert_kept_as_a_new_coordinator_would(c)


async def test_offset_committed_while_the_group_is_deleted_is_kept():
    """DeleteGroups while a commit to a partition it does not tombstone is written: the offset stays, in
    memory as on a new coordinator."""
    c = Classic()
    commit = await empty_group_with_an_offset_commit_in_flight(c)
    delete = asyncio.create_task(c.service.delete_group("g"))
    await asyncio.sleep(0)
    c.topic.gate.set()
    await commit
    assert await delete == ErrorCode.none
    assert_kept_as_a_new_coordinator_would(c)


async def test_deletion_whose_append_raises_puts_the_group_back():
    """An append that raises (or is cancelled) leaves the group as it was, not Dead."""
    c = Classic()
    a = await c.join()
    await c.sync(a.member_id, 1, {a.member_id: b"a-1"})
    await c.service.leave(group_id="g", members=[(a.member_id, None)])
    c.topic.raises = RuntimeError("the log is gone")
    with pytest.raises(RuntimeError):
        await c.service.expire_offsets(c.service.now_ms())
    assert c.service.coordinator.groups["g"].state == GroupState.EMPTY


async def test_ticks_survive_a_step_that_raises():
    """A tick step that raises (the deadlines, an expiry's append) is logged and the ticks go on, as
    persist_ticked_consumer_groups' writes: the sessions and retention of every group depend on them."""
    c = Classic()
    c.service.offsets_retention_check_interval_ms = 0
    expiries = 0

    async def failing_expiry(now_ms):
        nonlocal expiries
        expiries += 1
        raise RuntimeError("the log is gone")

    def failing_tick(now_ms):
        raise RuntimeError("a broken group")

    c.service.expire_offsets = failing_expiry  # type: ignore[method-assign]
    c.service.coordinator.tick = failing_tick  # type: ignore[method-assign]
    c.service.start()
    try:
        for _ in range(40):  # a tick every TICK_INTERVAL_S (0.1 s): three within 2 s even on a busy machine
            await asyncio.sleep(0.05)
            if expiries >= 3:
                break
        assert expiries >= 3, "the ticks go on"
    finally:
        await c.service.stop()


class HeldAppends(MemoryOffsetsTopic):
    """Appends land in the log at once; the one after ``hold`` is set is acknowledged when it is released."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: asyncio.Event | None = None

    async def append(self, partition, entries, producer=None) -> ErrorCode:
        self.records.extend(entries)
        hold, self.hold = self.hold, None
        if hold is not None:
            await hold.wait()
        return ErrorCode.none


def _simple_groups_with_expired_offsets() -> tuple[GroupService, HeldAppends, int]:
    topic = HeldAppends()
    service = GroupService(topic, GroupCoordinator())
    service.load_partition(0, [])
    committed_at = 1_000_000
    service.now_ms = lambda: committed_at  # type: ignore[method-assign]
    for group_id in ("a", "b"):
        entries = [OffsetCommitEntry("foo", 0, 5, -1, None)]
        assert asyncio.run(
            service.commit(group_id=group_id, generation_id=-1, member_id="", entries=entries)
        ) == [ErrorCode.none]
    return service, topic, committed_at + service.coordinator.settings.offsets_retention_ms + 1


@pytest.mark.parametrize("while_written", ["the commit lands", "the commit is written"])
def test_a_commit_made_while_expiry_writes_another_groups_tombstones_is_kept(while_written):
    """OffsetMetadataManager.cleanupExpiredOffsets decides and writes each group's tombstones in one step:
    group b committed afresh while group a's tombstones are written, or while b's commit is still being
    written when b's turn comes, keeps its offset, in memory and in what a new coordinator replays."""
    service, topic, later = _simple_groups_with_expired_offsets()
    service.now_ms = lambda: later  # type: ignore[method-assign]

    async def run() -> None:
        held = topic.hold = asyncio.Event()
        expiry = asyncio.create_task(service.expire_offsets(later))  # a's tombstones held
        await asyncio.sleep(0)
        entries = [OffsetCommitEntry("foo", 0, 9, -1, None)]
        if while_written == "the commit is written":
            commit_held = topic.hold = asyncio.Event()
            commit = asyncio.create_task(
                service.commit(group_id="b", generation_id=-1, member_id="", entries=entries)
            )
            await asyncio.sleep(0)
            held.set()
            await expiry
            commit_held.set()
            assert await commit == [ErrorCode.none]
        else:
            assert await service.commit(group_id="b", generation_id=-1, member_id="", entries=entries) == [
                ErrorCode.none
            ]
            held.set()
            await expiry

    asyncio.run(run())
    assert service.coordinator.committed_offsets("b")[("foo", 0)].offset == 9
    assert "a" not in service.coordinator.groups
    replayed = GroupService(MemoryOffsetsTopic(), GroupCoordinator())
    replayed.load_partition(0, [LoggedOffsetRecord(key, value) for key, value in topic.records])
    assert replayed.coordinator.committed_offsets("b")[("foo", 0)].offset == 9


def test_a_tombstone_acknowledged_after_a_later_commit_keeps_that_commit():
    """A group's offset tombstoned, then committed again behind the tombstone: the log replays the commit,
    so memory keeps it whichever acknowledgement comes first."""
    service, topic, later = _simple_groups_with_expired_offsets()
    service.now_ms = lambda: later  # type: ignore[method-assign]

    async def run() -> None:
        held = topic.hold = asyncio.Event()
        deleting = asyncio.create_task(service._tombstone("a", [("foo", 0)]))
        await asyncio.sleep(0)
        entries = [OffsetCommitEntry("foo", 0, 9, -1, None)]
        assert await service.commit(group_id="a", generation_id=-1, member_id="", entries=entries) == [
            ErrorCode.none
        ]
        held.set()
        assert await deleting == ErrorCode.none

    asyncio.run(run())
    assert service.coordinator.committed_offsets("a")[("foo", 0)].offset == 9
