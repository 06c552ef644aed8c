"""ConsumerGroupHeartbeat, ConsumerGroupDescribe and the group APIs that meet KIP-848 consumer groups
(ListGroups, DescribeGroups, OffsetCommit, OffsetFetch, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DeleteGroups), handler by handler on an in-memory broker: no sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest, TopicPartitions
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v9 import request as oc
from kio.schema.offset_fetch.v9 import request as of
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.static.primitive import i32Timedelta

from epochkraft.broker import topics_image
from epochkraft.broker.consumer_protocol import parse_assignment, serialize_assignment, serialize_subscription
from epochkraft.broker.group_coordinator import GroupCoordinator, GroupSettings
from epochkraft.broker.group_service import GroupService, LoggedOffsetRecord, OffsetCommitEntry
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.topics_image import CacheTopics
from epochkraft.metadata.image import MetadataImage, image_after
from epochkraft.metadata.registrations import TopicInfo
from epochkraft.protocol import metadata_records as mr
from epochkraft.protocol.errors import ErrorCode
from epochkraft.security.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
)
from epochkraft.security.principal import KafkaPrincipal, parse_super_users
from epochkraft.server import request_rules
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers import (
    k08_offset_commit,
    k09_offset_fetch,
    k11_join_group,
    k12_heartbeat,
    k13_leave_group,
    k14_sync_group,
    k15_describe_groups,
    k16_list_groups,
    k68_consumer_group_heartbeat,
    k69_consumer_group_describe,
)
from tests.test_group_coordinator import MemoryOffsetsTopic

FOO = uuid.UUID(int=7)


def broker() -> SimpleNamespace:
    image = MetadataImage()
    image.topics[FOO] = TopicInfo("foo", FOO, dict.fromkeys(range(4)))  # type: ignore[arg-type]
    image.topic_ids["foo"] = FOO
    service = GroupService(MemoryOffsetsTopic(), GroupCoordinator())
    service.load_partition(0, [])
    cache = MetadataCache()
    cache.publish(image, 0)
    return SimpleNamespace(groups=service, cache=cache)


def ctx(node: SimpleNamespace, version: int) -> RequestContext:
    return RequestContext("broker", SimpleNamespace(client_id="cli"), version, node, ("127.0.0.1", 1), None)  # type: ignore[arg-type]


def timeout(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


async def heartbeat(node, member_id: str, epoch: int, version: int = 1, **fields):
    request = ConsumerGroupHeartbeatRequest(
        group_id="grp",
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout=timeout(fields.pop("rebalance_timeout_ms", -1)),
        topic_partitions=fields.pop("topic_partitions", None),
        **fields,
    )
    return await k68_consumer_group_heartbeat.handle(request, ctx(node, version))


async def join(node, member_id: str = "m1"):
    return await heartbeat(
        node, member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("foo",), topic_partitions=()
    )


async def test_heartbeat_joins_and_describe_shows_the_group():
    node = broker()
    joined = await join(node)
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (ErrorCode.none, "m1", 1)
    assert joined.heartbeat_interval == datetime.timedelta(seconds=5)
    assert [(tp.topic_id, tp.partitions) for tp in joined.assignment.topic_partitions] == [
        (FOO, (0, 1, 2, 3))
    ]
    described = await k69_consumer_group_describe.handle(
        ConsumerGroupDescribeRequest(group_ids=("grp", "nope"), include_authorized_operations=False),
        ctx(node, 1),
    )
    group, missing = described.groups
    assert (group.error_code, group.group_state, group.group_epoch, group.assignor_name) == (
        ErrorCode.none,
        "Stable",
        1,
        "uniform",
    )
    (member,) = group.members
    assert member.member_id == "m1" and member.client_id == "cli" and member.member_type == 1
    assert member.client_host == "/127.0.0.1"  # as Kafka keeps it: context.clientAddress.toString()
    assert member.assignment.topic_partitions[0].topic_name == "foo"
    assert (missing.error_code, missing.error_message) == (
        ErrorCode.group_id_not_found,
        "Group nope not found.",
    )


@pytest.mark.parametrize(
    ("peer", "kept"),
    [(("127.0.0.1", 1), "/127.0.0.1"), (("::1", 1, 0, 0), "/0:0:0:0:0:0:0:1"), (None, "")],
)
def test_members_keep_the_client_host_as_kafka_writes_it(peer, kept):
    """GroupMetadataManager keeps a member's host as InetAddress.toString(): a slash, then the address."""
    context = RequestContext("broker", SimpleNamespace(client_id="cli"), 1, broker(), peer, None)  # type: ignore[arg-type]
    assert context.group_client_host == kept


async def test_v0_heartbeat_gets_a_member_id_from_the_coordinator():
    node = broker()
    joined = await heartbeat(
        node,
        "",
        0,
        version=0,
        rebalance_timeout_ms=1000,
        subscribed_topic_names=("foo",),
        topic_partitions=(),
    )
    assert joined.error_code == ErrorCode.none and joined.member_id


async def test_consumer_group_member_epoch_validation_with_a_zero_topic_id_owned():
    """Kafka's testConsumerGroupMemberEpochValidation with owned partitions of the zero topic id, which kio
    reads as None: Kafka takes the request (no INVALID_REQUEST), its reconciliation ignores a topic no
    assignment holds, and at the previous epoch such a partition is no subset of the member's (isSubset):
    FENCED_MEMBER_EPOCH, while the same heartbeat without it is accepted."""
    node = broker()
    await join(node, "m1")
    unknown = TopicPartitions(topic_id=None, partitions=(0,))
    at_epoch = await heartbeat(node, "m1", 1, topic_partitions=(owned_of(node, "m1"), unknown))
    assert (at_epoch.error_code, at_epoch.member_epoch) == (ErrorCode.none, 1)
    await join(node, "m2")  # group epoch 2: m1 revokes half, then moves to epoch 2 (previous 1)
    await heartbeat(node, "m1", 1, topic_partitions=(owned_of(node, "m1"),))
    moved = await heartbeat(node, "m1", 1, topic_partitions=(owned_of(node, "m1"),))
    assert moved.member_epoch == 2
    fenced = await heartbeat(node, "m1", 1, topic_partitions=(owned_of(node, "m1"), unknown))
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    accepted = await heartbeat(node, "m1", 1, topic_partitions=(owned_of(node, "m1"),))
    assert (accepted.error_code, accepted.member_epoch) == (ErrorCode.none, 2)


async def test_a_topic_listed_twice_in_the_owned_partitions_counts_every_entry():
    """A member still holding a partition it must revoke, listed in one entry of its topic while a second
    entry of the same topic omits it, still owns it (Kafka reads every entry): it stays at its epoch rather
    than being taken as having released the partition, which another member would then be given."""
    node = broker()
    await join(node, "m1")
    before = owned_of(node, "m1")
    await join(node, "m2")
    await heartbeat(node, "m1", 1, topic_partitions=(before,))  # told to revoke half
    kept = owned_of(node, "m1")
    assert set(kept.partitions) < set(before.partitions)
    answer = await heartbeat(node, "m1", 1, topic_partitions=(before, kept))
    assert (answer.error_code, answer.member_epoch) == (ErrorCode.none, 1)


def owned_of(node: SimpleNamespace, member_id: str) -> TopicPartitions:
    member = node.groups.consumer_groups.groups["grp"].members[member_id]
    return TopicPartitions(topic_id=FOO, partitions=tuple(sorted(member.assigned[FOO])))


async def test_list_groups_by_type_and_state_and_describe_groups():
    """ListGroups v5 lists the group as a "consumer" one; DescribeGroups answers as Kafka 4.3 does for a
    group that is not classic (Dead; GROUP_ID_NOT_FOUND from v6)."""
    node = broker()
    await join(node)

    async def listed(**filters):
        response = await k16_list_groups.handle(ListGroupsRequest(**filters), ctx(node, 5))
        return [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in response.groups]

    assert await listed() == [("grp", "consumer", "Stable", "consumer")]
    assert await listed(types_filter=("classic",)) == []
    assert await listed(states_filter=("stable",), types_filter=("consumer",)) == [
        ("grp", "consumer", "Stable", "consumer")
    ]
    for version, error in ((5, ErrorCode.none), (6, ErrorCode.group_id_not_found)):
        response = await k15_describe_groups.handle(
            DescribeGroupsRequest(groups=("grp",), include_authorized_operations=False), ctx(node, version)
        )
        (group,) = response.groups
        assert (group.error_code, group.group_state, group.members) == (error, "Dead", ())


async def commit(node, member_id: str, epoch: int, version: int = 9):
    request = oc.OffsetCommitRequest(
        group_id="grp",
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        topics=(
            oc.OffsetCommitRequestTopic(
                name="foo",
                partitions=(
                    oc.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=42, committed_metadata=""
                    ),
                ),
            ),
        ),
    )
    response = await k08_offset_commit.handle(request, ctx(node, version))
    return response.topics[0].partitions[0].error_code


async def fetch(node, member_id: str | None, epoch: int):
    request = of.OffsetFetchRequest(
        groups=(
            of.OffsetFetchRequestGroup(
                group_id="grp",
                member_id=member_id,
                member_epoch=epoch,
                topics=(of.OffsetFetchRequestTopics(name="foo", partition_indexes=(0,)),),
            ),
        )
    )
    (group,) = (await k09_offset_fetch.handle(request, ctx(node, 9))).groups
    return group.error_code, [p.committed_offset for t in group.topics for p in t.partitions]


@pytest.mark.parametrize(
    ("member_id", "epoch", "version", "expected"),
    [
        ("m1", 1, 9, ErrorCode.none),
        ("m1", 2, 9, ErrorCode.stale_member_epoch),
        ("m9", 1, 9, ErrorCode.unknown_member_id),
        ("", -1, 9, ErrorCode.unknown_member_id),
        ("m1", 1, 8, ErrorCode.unsupported_version),
    ],
)
async def test_offset_commit_with_member_epochs(member_id, epoch, version, expected):
    """OffsetMetadataManagerTest consumer group commit cases: the member epoch must be the member's."""
    node = broker()
    await join(node)
    assert await commit(node, member_id, epoch, version) == expected


@pytest.mark.parametrize(
    ("member_id", "epoch", "expected"),
    [
        ("m1", 1, ErrorCode.none),
        ("m1", 2, ErrorCode.illegal_generation),  # a stale member epoch, as a transactional commit says it
        ("m9", 1, ErrorCode.unknown_member_id),
        ("", -1, ErrorCode.unknown_member_id),
    ],
)
async def test_validate_transactional_offset_commit(member_id, epoch, expected):
    """OffsetMetadataManagerTest / ConsumerGroupTest.testValidateTransactionalOffsetCommit: a TxnOffsetCommit
    to a consumer group (KIP-848) is checked against its member and member epoch, with no version floor;
    before, it was checked as a classic group's generation, refused, and a consume-transform-produce loop
    on the new protocol (franz-go's TestTxnEtl/848) never committed."""
    node = broker()
    await join(node)
    entry = OffsetCommitEntry("foo", 0, 5, -1, None)
    errors = await node.groups.txn_commit(
        group_id="grp", producer=(1000, 0), generation_id=epoch, member_id=member_id, entries=[entry]
    )
    assert errors == [expected]


async def test_offset_fetch_with_member_epochs():
    node = broker()
    await join(node)
    assert await commit(node, "m1", 1) == ErrorCode.none
    assert await fetch(node, "m1", 1) == (ErrorCode.none, [42])
    assert await fetch(node, None, -1) == (ErrorCode.none, [42])
    assert await fetch(node, "m1", 0) == (ErrorCode.stale_member_epoch, [])
    assert await fetch(node, "m9", 1) == (ErrorCode.unknown_member_id, [])


async def classic_join(
    node, member_id: str = "", owned: tuple[int, ...] = (), version: int = 9, instance_id: str | None = None
):
    request = JoinGroupRequest(
        group_id="grp",
        session_timeout=timeout(10_000),
        rebalance_timeout=timeout(10_000),
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=(
            JoinGroupRequestProtocol(
                name="range",
                metadata=serialize_subscription(("foo",), {"foo": frozenset(owned)} if owned else None),
            ),
        ),
    )
    return await k11_join_group.handle(request, ctx(node, version))


async def classic_sync(node, member_id: str, generation: int):
    request = SyncGroupRequest(
        group_id="grp",
        generation_id=generation,
        member_id=member_id,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )
    return await k14_sync_group.handle(request, ctx(node, 5))


async def classic_heartbeat(node, member_id: str, generation: int) -> ErrorCode:
    request = HeartbeatRequest(group_id="grp", generation_id=generation, member_id=member_id)
    return (await k12_heartbeat.handle(request, ctx(node, 4))).error_code


async def test_classic_members_inside_a_consumer_group():
    """A classic member joins a consumer group with members through JoinGroup (MEMBER_ID_REQUIRED first,
    then its member epoch as the generation), gets its partitions in SyncGroup, is told to rejoin by
    Heartbeat once the group moves on, commits with its generation, is described as a classic member and
    leaves through LeaveGroup; the group's records replay to the same group after each step."""
    node = broker()
    await join(node, "m1")
    first = await classic_join(node)
    assert first.error_code == ErrorCode.member_id_required
    joined = await classic_join(node, first.member_id)
    assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 2, "")
    c1 = first.member_id
    synced = await classic_sync(node, c1, 2)
    assert synced.error_code == ErrorCode.none and parse_assignment(synced.assignment) == {}  # m1 owns all
    assert await classic_heartbeat(node, c1, 2) == ErrorCode.none
    m1 = node.groups.consumer_groups.groups["grp"].members["m1"]
    owned = (TopicPartitions(topic_id=FOO, partitions=tuple(sorted(m1.assigned[FOO]))),)
    await heartbeat(node, "m1", m1.member_epoch, topic_partitions=owned)  # m1 revokes, then releases
    m1 = node.groups.consumer_groups.groups["grp"].members["m1"]
    owned = (TopicPartitions(topic_id=FOO, partitions=tuple(sorted(m1.assigned[FOO]))),)
    await heartbeat(node, "m1", m1.member_epoch, topic_partitions=owned)
    assert await classic_heartbeat(node, c1, 2) == ErrorCode.rebalance_in_progress  # released: rejoin
    assert (await classic_join(node, c1)).generation_id == 2
    assert len(parse_assignment((await classic_sync(node, c1, 2)).assignment)["foo"]) == 2
    assert await commit(node, c1, 2, version=8) == ErrorCode.none
    assert await commit(node, c1, 1, version=8) == ErrorCode.illegal_generation

    request = ConsumerGroupDescribeRequest(group_ids=("grp",), include_authorized_operations=False)
    (described,) = (await k69_consumer_group_describe.handle(request, ctx(node, 1))).groups
    assert sorted(m.member_type for m in described.members) == [0, 1]
    records = node.groups.offsets_topic.records
    successor = broker()
    successor.groups.load_partition(0, [LoggedOffsetRecord(key, value) for key, value in records])
    assert (
        successor.groups.consumer_groups.groups["grp"].members
        == node.groups.consumer_groups.groups["grp"].members
    )

    leave = LeaveGroupRequest(group_id="grp", members=(MemberIdentity(member_id=c1, group_instance_id=None),))
    left = await k13_leave_group.handle(leave, ctx(node, 5))
    assert [m.error_code for m in left.members] == [ErrorCode.none]
    assert set(node.groups.consumer_groups.groups["grp"].members) == {"m1"}


async def test_classic_group_upgraded_and_downgraded_through_the_handlers():
    """A classic group of one member is converted by a consumer member's heartbeat (its records written),
    keeps its committed offset, and becomes a classic group again when that member leaves: the records are
    tombstoned and the classic member is told to rebalance. An empty consumer group is taken over by a
    classic join, as Kafka's classicGroupJoinToClassicGroup deletes it."""
    node = broker()
    node.groups.coordinator.settings = GroupSettings(initial_rebalance_delay_ms=0)
    first = await classic_join(node)
    c1 = first.member_id
    joined = await classic_join(node, c1)
    assert (joined.error_code, joined.leader) == (ErrorCode.none, c1)
    assignment = serialize_assignment({"foo": frozenset(range(4))}, 1)
    sync = SyncGroupRequest(
        group_id="grp", generation_id=1, member_id=c1, protocol_type="consumer", protocol_name="range",
        assignments=(SyncGroupRequestAssignment(member_id=c1, assignment=assignment),),
    )  # fmt: skip
    assert (await k14_sync_group.handle(sync, ctx(node, 5))).error_code == ErrorCode.none
    assert await commit(node, c1, 1, version=8) == ErrorCode.none

    upgraded = await join(node, "m1")
    assert (upgraded.error_code, upgraded.member_epoch) == (ErrorCode.none, 2)
    group = node.groups.consumer_groups.groups["grp"]
    assert group.members[c1].assigned == {FOO: frozenset(range(4))} and group.members[c1].member_epoch == 1
    assert not node.groups.coordinator.has_members("grp")
    assert await fetch(node, None, -1) == (ErrorCode.none, [42])
    records = node.groups.offsets_topic.records
    successor = broker()
    successor.groups.load_partition(0, [LoggedOffsetRecord(key, value) for key, value in records])
    assert successor.groups.consumer_groups.groups["grp"].members == group.members

    assert (await heartbeat(node, "m1", -1)).error_code == ErrorCode.none
    assert "grp" not in node.groups.consumer_groups.groups
    assert await classic_heartbeat(node, c1, 2) == ErrorCode.rebalance_in_progress
    assert await fetch(node, None, -1) == (ErrorCode.none, [42])
    successor = broker()
    successor.groups.load_partition(0, [LoggedOffsetRecord(key, value) for key, value in records])
    assert "grp" not in successor.groups.consumer_groups.groups

    node = broker()
    await join(node, "m3")
    assert (await heartbeat(node, "m3", -1)).error_code == ErrorCode.none
    assert (await classic_join(node)).error_code == ErrorCode.member_id_required
    assert "grp" not in node.groups.consumer_groups.groups


async def test_delete_group_and_offsets_of_a_consumer_group():
    """DeleteGroups: NON_EMPTY_GROUP while members are in it; OffsetDelete keeps subscribed topics'
    offsets (GROUP_SUBSCRIBED_TO_TOPIC); once empty the group and its offsets go."""
    node = broker()
    await join(node)
    assert await commit(node, "m1", 1) == ErrorCode.none
    service = node.groups
    assert await service.delete_group("grp") == ErrorCode.non_empty_group
    _, results = await service.delete_offsets("grp", [("foo", 0)])
    assert results == {("foo", 0): ErrorCode.group_subscribed_to_topic}
    await heartbeat(node, "m1", -1)
    assert await service.delete_group("grp") == ErrorCode.none
    assert "grp" not in service.consumer_groups.groups and service.fetch_offsets("grp", None) == {}
    await join(node)
    await heartbeat(node, "m1", -1)
    assert await service.delete_group("grp") == ErrorCode.none  # no offsets ever committed


async def test_a_new_coordinator_resumes_the_group_from_its_records():
    """GroupMetadataManagerTest.testOnLoaded / the ConsumerGroup* records' replay: a broker that becomes
    coordinator rebuilds the group from __consumer_offsets; its members carry on with their epochs and
    partitions instead of being fenced, and members gone (left) stay gone."""
    node = broker()
    await join(node, "m1")
    await join(node, "m2")
    await heartbeat(node, "m2", -1)
    before = node.groups.consumer_groups.groups["grp"]
    member = before.members["m1"]
    records = node.groups.offsets_topic.records
    assert records and all(3 <= int.from_bytes(key[:2], "big") <= 8 for key, _ in records)  # ConsumerGroup*

    successor = broker()
    successor.groups.offsets_topic.records = list(records)
    loaded = [LoggedOffsetRecord(key, value) for key, value in records]
    successor.groups.load_partition(0, loaded, CacheTopics(successor.cache))
    after = successor.groups.consumer_groups.groups["grp"]
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.subscription_metadata == before.subscription_metadata  # from the metadata, by name
    assert after.metadata_hash == before.metadata_hash != 0
    assert set(after.members) == {"m1"} and after.members["m1"] == member
    assert after.target_assignment == before.target_assignment
    owned = tuple(
        TopicPartitions(topic_id=topic, partitions=tuple(sorted(parts)))
        for topic, parts in member.assigned.items()
    )
    resumed = await heartbeat(successor, "m1", member.member_epoch, topic_partitions=owned)
    assert resumed.error_code == ErrorCode.none and resumed.member_epoch >= member.member_epoch
    assert (await heartbeat(successor, "m2", 1)).error_code == ErrorCode.unknown_member_id


async def test_a_new_coordinator_has_a_regex_groups_topics_from_its_records(monkeypatch):
    """Kafka 4.1+: a coordinator replaced, its successor replays ConsumerGroupRegularExpression
    (ConsumerGroup.updateResolvedRegularExpression) and knows the group's topics without resolving the
    regex; the member's next heartbeat, the topics unchanged, writes nothing and rebalances nothing."""
    node = broker()
    joined = await heartbeat(
        node, "m1", 0, rebalance_timeout_ms=30_000, subscribed_topic_regex="fo.*", topic_partitions=()
    )
    before = node.groups.consumer_groups.groups["grp"]
    assert set(before.resolved_regexes) == {"fo.*"} and set(before.subscription_metadata) == {"foo"}
    records = list(node.groups.offsets_topic.records)

    successor = broker()
    successor.groups.offsets_topic.records = list(records)
    resolver = successor.groups.consumer_groups.regexes
    monkeypatch.setattr(resolver, "resolve", lambda pattern, _topics: pytest.fail(f"{pattern} resolved"))
    loaded = [LoggedOffsetRecord(key, value) for key, value in records]
    successor.groups.load_partition(0, loaded, CacheTopics(successor.cache))
    after = successor.groups.consumer_groups.groups["grp"]
    assert after.resolved_regexes == before.resolved_regexes
    assert after.subscription_metadata == before.subscription_metadata
    monkeypatch.undo()
    owned = tuple(
        TopicPartitions(topic_id=topic, partitions=tuple(sorted(parts)))
        for topic, parts in before.members["m1"].assigned.items()
    )
    resumed = await heartbeat(successor, "m1", joined.member_epoch, topic_partitions=owned)
    assert resumed.error_code == ErrorCode.none and resumed.member_epoch == joined.member_epoch
    assert successor.groups.offsets_topic.records == records


async def test_deleting_a_consumer_group_tombstones_its_records():
    node = broker()
    await join(node)
    await heartbeat(node, "m1", -1)
    assert await node.groups.delete_group("grp") == ErrorCode.none
    records = node.groups.offsets_topic.records
    successor = broker()
    successor.groups.load_partition(0, [LoggedOffsetRecord(key, value) for key, value in records])
    assert "grp" not in successor.groups.consumer_groups.groups


def json_records(group) -> list[tuple[bytes, bytes]]:
    """The group as the two JSON record kinds written before Kafka's format."""

    def dumps(value) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

    def assignment(a) -> dict[str, list[int]]:
        return {str(topic): sorted(parts) for topic, parts in a.items()}

    metadata = {name: [str(t.topic_id), t.num_partitions] for name, t in group.subscription_metadata.items()}
    epochs = {"group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch}
    records = [
        (dumps(["consumer-group", group.group_id]), dumps({**epochs, "subscription_metadata": metadata}))
    ]
    for member_id, m in group.members.items():
        value = {
            "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
            "client_host": m.client_host, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "subscribed_topic_names": list(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex, "server_assignor": m.server_assignor,
            "state": str(m.state), "member_epoch": m.member_epoch,
            "previous_member_epoch": m.previous_member_epoch, "assigned": assignment(m.assigned),
            "pending_revocation": assignment(m.pending_revocation),
            "target": assignment(group.target_assignment.get(member_id, {})),
        }  # fmt: skip
        records.append((dumps(["consumer-group-member", group.group_id, member_id]), dumps(value)))
    return records


async def test_an_older_data_directorys_json_records_are_loaded_and_tombstoned_by_the_next_write():
    """A __consumer_offsets written before Kafka's format loads; a member leaving and an offset deleted
    tombstone the JSON keys too, or compaction would keep them and the next coordinator bring them back."""
    node = broker()
    await join(node, "m1")
    await join(node, "m2")
    group = node.groups.consumer_groups.groups["grp"]
    offset = (
        b'["offset","grp","old",0]',
        b'{"offset":5,"leader_epoch":-1,"metadata":"","commit_timestamp_ms":1}',
    )
    legacy = [*json_records(group), offset]
    successor = broker()
    successor.groups.offsets_topic.records = list(legacy)
    successor.groups.load_partition(0, [LoggedOffsetRecord(key, value) for key, value in legacy])
    loaded = successor.groups.consumer_groups.groups["grp"]
    assert loaded.members == group.members and loaded.group_epoch == group.group_epoch
    assert successor.groups.coordinator.committed_offsets("grp")[("old", 0)].offset == 5
    assert (await heartbeat(successor, "m2", -1)).error_code == ErrorCode.none
    error, results = await successor.groups.delete_offsets("grp", [("old", 0)])
    assert error == ErrorCode.none and results == {("old", 0): ErrorCode.none}
    written = successor.groups.offsets_topic.records[len(legacy) :]
    assert {key for key, value in written if value is None} >= {legacy[0][0], legacy[2][0], offset[0]}
    third = broker()
    records = successor.groups.offsets_topic.records
    third.groups.load_partition(0, [LoggedOffsetRecord(key, value) for key, value in records])
    assert set(third.groups.consumer_groups.groups["grp"].members) == {"m1"}
    assert ("old", 0) not in third.groups.coordinator.committed_offsets("grp")


async def test_authorization_of_heartbeat_and_describe():
    """KafkaApis.handleConsumerGroupHeartbeatRequest: READ on the group (checked before the handler),
    then DESCRIBE on every subscribed topic name; ConsumerGroupDescribe needs DESCRIBE on the group."""
    node = broker()
    alice = KafkaPrincipal("User", "alice")
    authorizer = StandardAuthorizer(parse_super_users(""), False)
    authorizer.add(
        uuid.uuid4(),
        AclBinding(
            ResourceType.GROUP,
            "grp",
            PatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
    )
    secured = dataclasses.replace(ctx(node, 1), principal=alice, authorizer=authorizer)
    request = ConsumerGroupHeartbeatRequest(
        group_id="grp",
        member_id="m1",
        member_epoch=0,
        rebalance_timeout=timeout(1000),
        subscribed_topic_names=("foo",),
        topic_partitions=(),
    )
    assert request_rules.refusal(68, request, secured) is None
    answer = await k68_consumer_group_heartbeat.handle(request, secured)
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.topic_authorization_failed,
        "The following topics are not authorized: foo.",
    )
    describe = ConsumerGroupDescribeRequest(group_ids=("grp",), include_authorized_operations=False)
    assert request_rules.refusal(69, describe, secured) is None  # READ implies DESCRIBE, as in Kafka
    describe_other = ConsumerGroupDescribeRequest(
        group_ids=("grp", "other"), include_authorized_operations=False
    )
    assert request_rules.refusal(69, describe_other, secured) == ErrorCode.group_authorization_failed
    other = dataclasses.replace(request, group_id="other")
    assert request_rules.refusal(68, other, secured) == ErrorCode.group_authorization_failed


async def test_regex_subscription_gets_only_topics_the_principal_may_describe():
    """Kafka 4.x: the topics a SubscribedTopicRegex matches are filtered by DESCRIBE for the principal."""
    node = broker()
    bar = uuid.UUID(int=8)
    node.cache.image.topics[bar] = TopicInfo("bar", bar, dict.fromkeys(range(2)))  # type: ignore[arg-type]
    node.cache.image.topic_ids["bar"] = bar
    authorizer = StandardAuthorizer(parse_super_users(""), False)
    for resource_type, name, operation in (
        (ResourceType.GROUP, "grp", AclOperation.READ),
        (ResourceType.TOPIC, "bar", AclOperation.DESCRIBE),
    ):
        authorizer.add(
            uuid.uuid4(),
            AclBinding(
                resource_type,
                name,
                PatternType.LITERAL,
                "User:alice",
                "*",
                operation,
                AclPermissionType.ALLOW,
            ),
        )
    secured = dataclasses.replace(
        ctx(node, 1), principal=KafkaPrincipal("User", "alice"), authorizer=authorizer
    )
    request = ConsumerGroupHeartbeatRequest(
        group_id="grp",
        member_id="m1",
        member_epoch=0,
        rebalance_timeout=timeout(1000),
        subscribed_topic_regex=".*",
        topic_partitions=(),
    )
    answer = await k68_consumer_group_heartbeat.handle(request, secured)
    assert answer.error_code == ErrorCode.none
    assert [tp.topic_id for tp in answer.assignment.topic_partitions] == [bar]


class FailingOffsetsTopic(MemoryOffsetsTopic):
    def __init__(self) -> None:
        super().__init__()
        self.error = ErrorCode.none

    async def append(self, partition: int, entries: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        if self.error != ErrorCode.none:
            return self.error
        return await super().append(partition, entries)


@pytest.mark.parametrize(
    ("append_error", "expected"),
    [
        (ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
        (ErrorCode.request_timed_out, ErrorCode.coordinator_not_available),
        (ErrorCode.unknown_topic_or_partition, ErrorCode.coordinator_not_available),
        (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
        (ErrorCode.kafka_storage_error, ErrorCode.not_coordinator),
        (ErrorCode.record_list_too_large, ErrorCode.unknown_server_error),
        (ErrorCode.message_too_large, ErrorCode.unknown_server_error),
    ],
)
async def test_consumer_group_heartbeat_with_exception(append_error, expected):
    """GroupCoordinatorServiceTest.testConsumerGroupHeartbeatWithException: a failed write of the group's
    records answers the normalized error; a write surely not appended leaves the group as it was."""
    node = broker()
    offsets = FailingOffsetsTopic()
    node.groups.offsets_topic = offsets
    await join(node, "m1")
    groups = node.groups.consumer_groups.groups
    before = groups["grp"].copy()
    offsets.error = append_error
    answer = await join(node, "m2")
    assert answer.error_code == expected
    if append_error == ErrorCode.request_timed_out:  # maybe appended: the coordinator keeps the change
        assert set(groups["grp"].members) == {"m1", "m2"}
    else:
        assert groups["grp"] == before
    offsets.error = ErrorCode.none
    assert (await join(node, "m2")).error_code == ErrorCode.none


def test_topics_version_changes_with_the_topics_a_regex_may_match():
    """The coordinator resolves regular expressions once per topics version: a topic created, a partition
    added and a topic removed each give a new version; a leader change does not."""
    cache = MetadataCache()
    topics = CacheTopics(cache)
    versions = [topics.version]
    bar = uuid.UUID(int=9)
    partition = {"topic_id": bar, "replicas": (1,), "isr": (1,), "leader": 1, "leader_epoch": 0}
    for record in (
        mr.TopicRecord(name="bar", topic_id=bar),
        mr.PartitionRecord(partition_id=0, partition_epoch=0, **partition),  # type: ignore[arg-type]
        mr.PartitionChangeRecord(partition_id=0, topic_id=bar, leader=1),
        mr.RemoveTopicRecord(topic_id=bar),
    ):
        cache.apply(cache.next_offset, record, Changes())
        versions.append(topics.version)
    assert versions[0] != versions[1] != versions[2] == versions[3] != versions[4]
    assert versions[0] != MetadataImage().topics_version != versions[4]


@pytest.mark.parametrize("exclude_internal", [False, True])
def test_regex_may_match_internal_topics(monkeypatch, exclude_internal):
    """As Kafka's GroupMetadataManager.refreshRegularExpressions (every name in the image; franz-go's
    Test848RegexBrokerResolves adopts ``__consumer_offsets`` when the broker assigns it): the names a
    regex is matched against include the internal topics. The switch that leaves them out is caught."""
    monkeypatch.setattr(topics_image, "EXCLUDE_INTERNAL_FOR_TESTS", exclude_internal)
    image = image_after(
        MetadataImage(),
        [
            mr.TopicRecord(name=name, topic_id=uuid.UUID(int=n + 1))
            for n, name in enumerate(("orders", "__consumer_offsets"))
        ],
    )
    names = set(CacheTopics(image).names())
    assert (names == {"orders", "__consumer_offsets"}) is not exclude_internal


async def test_upgrade_whose_records_cannot_be_written_leaves_the_classic_group():
    """The conversion's records fail to be written: the heartbeat answers the normalized error, no consumer
    group is left behind and the classic group keeps its members (Kafka applies nothing of a failed
    write); written later, the upgrade goes through."""
    node = broker()
    offsets = FailingOffsetsTopic()
    node.groups.offsets_topic = offsets
    node.groups.coordinator.settings = GroupSettings(initial_rebalance_delay_ms=0)
    c1 = (await classic_join(node)).member_id
    assert (await classic_join(node, c1)).error_code == ErrorCode.none
    offsets.error = ErrorCode.not_enough_replicas
    assert (await join(node, "m1")).error_code == ErrorCode.coordinator_not_available
    assert "grp" not in node.groups.consumer_groups.groups
    assert set(node.groups.coordinator.groups["grp"].members) == {c1}
    offsets.error = ErrorCode.none
    assert (await join(node, "m1")).error_code == ErrorCode.none
    assert set(node.groups.consumer_groups.groups["grp"].members) == {c1, "m1"}


class GatedOffsetsTopic(FailingOffsetsTopic):
    """Holds the next append until ``release`` is set, so another request can run meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.release = asyncio.Event()

    async def append(self, partition: int, entries: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.set()
            await self.release.wait()
        return await super().append(partition, entries)


async def test_classic_join_rechecks_the_consumer_group_after_writing_its_tombstones():
    """A classic join takes the id of an empty consumer group once its tombstones are written; a consumer
    member that created the group again meanwhile wins it, and the join goes into that consumer group
    instead of making a classic group of members beside it."""
    node = broker()
    offsets = GatedOffsetsTopic()
    node.groups.offsets_topic = offsets
    node.groups.coordinator.settings = GroupSettings(initial_rebalance_delay_ms=0)
    await join(node, "m1")
    await heartbeat(node, "m1", -1)
    assert not node.groups.consumer_groups.groups["grp"].members
    offsets.gate = asyncio.Event()
    joining = asyncio.create_task(classic_join(node, version=3))
    await offsets.gate.wait()  # the join's tombstones are being written
    offsets.release.set()
    assert (await join(node, "m2")).error_code == ErrorCode.none
    joined = await joining
    assert (joined.error_code, joined.leader) == (ErrorCode.none, "")
    assert set(node.groups.consumer_groups.groups["grp"].members) == {"m2", joined.member_id}
    assert node.groups.coordinator.classic_group_of("grp") is None


@pytest.mark.parametrize("version", [5, 9])
async def test_static_leader_replaced_through_join_group(version):
    """testReplaceStaticMemberInStableStateSucceeds through the handler: the restarted static leader of a
    Stable group is answered from v9 as the leader with the members and SkipAssignment, before v9 with the
    old leader id (it syncs as a follower and gets the assignment kept)."""
    node = broker()
    node.groups.coordinator.settings = GroupSettings(initial_rebalance_delay_ms=0)
    old = (await classic_join(node, instance_id="i1")).member_id
    sync = SyncGroupRequest(
        group_id="grp", generation_id=1, member_id=old, protocol_type="consumer", protocol_name="range",
        assignments=(SyncGroupRequestAssignment(member_id=old, assignment=b"kept"),),
    )  # fmt: skip
    assert (await k14_sync_group.handle(sync, ctx(node, 5))).error_code == ErrorCode.none
    rejoined = await classic_join(node, instance_id="i1", version=version)
    assert (rejoined.error_code, rejoined.generation_id) == (ErrorCode.none, 1)
    assert rejoined.member_id != old
    if version >= 9:
        assert (rejoined.leader, rejoined.skip_assignment) == (rejoined.member_id, True)
        assert [m.group_instance_id for m in rejoined.members] == ["i1"]
    else:
        assert (rejoined.leader, rejoined.members) == (old, ())
    sync = SyncGroupRequest(
        group_id="grp", generation_id=1, member_id=rejoined.member_id, group_instance_id="i1",
        protocol_type="consumer", protocol_name="range", assignments=(),
    )  # fmt: skip
    synced = await k14_sync_group.handle(sync, ctx(node, 5))
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"kept")


@pytest.mark.parametrize("session_ms", [5_999, 1_800_001])
async def test_join_group_invalid_session_timeout(session_ms):
    """GroupCoordinatorServiceTest.testJoinGroupInvalidSessionTimeout: checked before the join is routed,
    so a join into a consumer group is refused too."""
    node = broker()
    await join(node, "m1")
    request = JoinGroupRequest(
        group_id="grp",
        session_timeout=timeout(session_ms),
        rebalance_timeout=timeout(10_000),
        member_id="",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=serialize_subscription(("foo",))),),
    )
    answer = await k11_join_group.handle(request, ctx(node, 3))
    assert answer.error_code == ErrorCode.invalid_session_timeout
    assert set(node.groups.consumer_groups.groups["grp"].members) == {"m1"}


async def test_tombstones_of_a_downgrade_by_the_clock_are_written_again_until_they_are():
    """The last consumer protocol member's session expires and the group becomes classic; its tombstones
    fail to be written, so the next ticks write them: a new coordinator then replays no consumer group."""
    node = broker()
    offsets = FailingOffsetsTopic()
    node.groups.offsets_topic = offsets
    node.groups.coordinator.settings = GroupSettings(initial_rebalance_delay_ms=0)
    c1 = (await classic_join(node, version=3)).member_id
    await join(node, "m1")
    group = node.groups.consumer_groups.groups["grp"]
    now = node.groups.now_ms() + 46_000
    group.session_deadlines[c1] = now + 60_000  # c1 keeps its session
    offsets.error = ErrorCode.not_enough_replicas
    await node.groups.persist_ticked_consumer_groups(now)
    assert "grp" not in node.groups.consumer_groups.groups and node.groups.coordinator.has_members("grp")
    offsets.error = ErrorCode.none
    await node.groups.persist_ticked_consumer_groups(now + 100)
    replayed = _replayed(offsets.records)
    assert "grp" not in replayed.consumer_groups.groups


class HeldAcks(MemoryOffsetsTopic):
    """Appends land in the log at once, in the order asked for; their acknowledgements wait until
    ``released`` (a write waits for the offsets partition's replicas, acks=all)."""

    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()
        self.stalled = 0

    async def append(
        self, partition: int, entries: list[tuple[bytes, bytes | None]], producer=None
    ) -> ErrorCode:
        self.records.extend(entries)
        self.stalled += 1
        await self.released.wait()
        self.stalled -= 1
        return ErrorCode.none


async def _two_members_then_held_acks() -> tuple[SimpleNamespace, HeldAcks]:
    """Group "grp" with members m1 and m2, its records so far in an offsets topic whose acknowledgements
    wait from now on."""
    node = broker()
    await join(node, "m1")
    await join(node, "m2")
    offsets = HeldAcks()
    offsets.records = list(node.groups.offsets_topic.records)
    node.groups.offsets_topic = offsets
    return node, offsets


def _replayed(records: list[tuple[bytes, bytes | None]]) -> GroupService:
    """A new coordinator's view: the records loaded as it loads them."""
    replayed = GroupService(MemoryOffsetsTopic(), GroupCoordinator())
    replayed.load_partition(0, [LoggedOffsetRecord(key, value) for key, value in records])
    return replayed


async def test_a_stalled_write_of_a_fenced_member_holds_back_no_later_deadline():
    """The ticks fence members whose sessions ended and their groups are written beside the ticks: while one
    write waits, the next deadline still expires, no second write starts, and the group changed meanwhile
    is written once the first write is done, so a new coordinator replays neither member."""
    node, offsets = await _two_members_then_held_acks()
    group = node.groups.consumer_groups.groups["grp"]
    now = node.groups.now_ms()
    group.session_deadlines["m1"], group.session_deadlines["m2"] = now + 1, now + 2
    node.groups.tick(now + 1)
    await asyncio.sleep(0)
    assert set(group.members) == {"m2"} and offsets.stalled == 1
    node.groups.tick(now + 2)
    await asyncio.sleep(0)
    writers = [task for task in asyncio.all_tasks() if task.get_name() == "consumer-group-writes"]
    assert not group.members and len(writers) == 1, "fenced while the first write waits; no second writer"
    offsets.released.set()
    while offsets.stalled or not node.groups._consumer_group_writer.done():
        await asyncio.sleep(0)
    node.groups.tick(now + 3)  # the group changed during the write: written again
    await node.groups._consumer_group_writer
    replayed = _replayed(offsets.records)
    assert not replayed.consumer_groups.groups["grp"].members


async def test_a_fenced_member_rejoining_while_its_fencing_is_written_is_replayed_with_its_subscription():
    """A group's writes run in turn: the fencing's tombstones, then the rejoin's records compared with what
    the fencing wrote (a member record the same as before the fencing is written again), so a new
    coordinator replays the member as it is in memory."""
    node, offsets = await _two_members_then_held_acks()
    group = node.groups.consumer_groups.groups["grp"]
    now = node.groups.now_ms()
    group.session_deadlines["m1"] = now + 1
    node.groups.tick(now + 1)  # m1 fenced; the tombstones' write waits for its acknowledgement
    await asyncio.sleep(0)
    assert "m1" not in group.members and offsets.stalled == 1
    rejoin = asyncio.create_task(join(node, "m1"))  # epoch 0, the same member id
    await asyncio.sleep(0)
    offsets.released.set()
    assert (await rejoin).error_code == ErrorCode.none
    await node.groups._consumer_group_writer
    replayed = _replayed(offsets.records)
    live = replayed.consumer_groups.groups["grp"]
    assert live.members["m1"].subscribed_topic_names == group.members["m1"].subscribed_topic_names == ("foo",)
