"""``__consumer_offsets`` records in Kafka's format, as Kafka's GroupCoordinatorRecordSerdeTest and
GroupCoordinatorRecordHelpersTest: bytes laid out as the JSON schemas say, every record type round trips,
older versions read, and consumer groups rebuilt from the finer-grained records in any order (and from the
JSON records written before)."""

from __future__ import annotations

import json
import random
import struct
import uuid

import pytest

from epochkraft.broker import consumer_group_records
from epochkraft.broker import group_record_serde as serde
from epochkraft.broker.consumer_group import ConsumerGroupCoordinator, ResolvedRegularExpression
from epochkraft.broker.group_coordinator import (
    CommittedOffset,
)
from epochkraft.broker.group_record_serde import RecordType
from epochkraft.broker.group_service import GroupService, LoggedOffsetRecord, OffsetCommitEntry, TxnOutcome
from epochkraft.broker.offset_records import offset_record_key, offset_record_value, parse_offset_record
from epochkraft.protocol.errors import ErrorCode
from tests.test_consumer_group import Context
from tests.test_group_coordinator import MemoryOffsetsTopic

FOO = uuid.UUID("0b4b51a4-3c12-4e8d-9e54-6d0f8a8a0a01")


def s16(value: str) -> bytes:
    return struct.pack(">h", len(value)) + value.encode()


def compact(value: str) -> bytes:
    return bytes([len(value) + 1]) + value.encode()


def test_serialize_key():
    """GroupCoordinatorRecordSerdeTest.testSerializeKey: int16 record type, then the key's fields."""
    key = offset_record_key("group", "foo", 1)
    assert key == b"\x00\x01" + s16("group") + s16("foo") + b"\x00\x00\x00\x01"
    member_key = serde.ConsumerGroupMemberKey(RecordType.CONSUMER_GROUP_MEMBER_METADATA, "g", "m")
    assert serde.key_bytes(member_key) == b"\x00\x05" + s16("g") + s16("m")


def test_new_offset_commit_record_bytes():
    """GroupCoordinatorRecordHelpersTest.testNewOffsetCommitRecord: version 4 (flexible: a compact string,
    an empty tagged fields section), the leader epoch kept and no topic id tag."""
    value = offset_record_value(CommittedOffset(100, 10, "metadata", 1234))
    assert value == (
        struct.pack(">hqi", 4, 100, 10) + compact("metadata") + struct.pack(">q", 1234) + b"\x00"
    )


def test_offset_commit_value_version():
    """GroupCoordinatorRecordHelpersTest.testOffsetCommitValueVersion: 1 with an expire timestamp, else 4;
    version 1 carries expireTimestamp after commitTimestamp."""
    committed = serde.OffsetCommitValue(5, -1, "", 7, expire_timestamp=9)
    assert serde.value_bytes(committed, 1) == struct.pack(">hq", 1, 5) + s16("") + struct.pack(">qq", 7, 9)
    assert serde.value_bytes(committed)[:2] == b"\x00\x04"


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_deserialize_every_offset_commit_value_version(version):
    """Values Kafka wrote before 4.3: the leader epoch is -1 before version 3, the expire time only in 1."""
    value = serde.OffsetCommitValue(42, 3 if version >= 3 else -1, "m", 1000, 2000 if version == 1 else -1)
    data = serde.value_bytes(value, version)
    assert serde.parse_value(RecordType.OFFSET_COMMIT, data) == value
    assert serde.parse_value(RecordType.LEGACY_OFFSET_COMMIT, data) == value


def test_offset_commit_topic_id_tag():
    value = serde.OffsetCommitValue(1, 0, "", 2, topic_id=FOO)
    data = serde.value_bytes(value)
    assert data.endswith(b"\x01\x00\x10" + FOO.bytes)  # one tagged field: tag 0, 16 bytes
    assert serde.parse_value(RecordType.OFFSET_COMMIT, data) == value


def test_offset_records_parse_tombstones_and_legacy_key_type():
    committed = CommittedOffset(10, 2, "meta", 123)
    key = offset_record_key("g", "topic", 4)
    assert parse_offset_record(key, offset_record_value(committed)) == ("g", "topic", 4, committed)
    assert parse_offset_record(key, None) == ("g", "topic", 4, None)
    legacy_key = b"\x00\x00" + key[2:]  # LegacyOffsetCommitKey, type 0
    assert parse_offset_record(legacy_key, offset_record_value(committed)) == ("g", "topic", 4, committed)
    consumer_group_key = serde.key_bytes(serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_METADATA, "g"))
    assert parse_offset_record(consumer_group_key, None) is None


def test_json_offset_records_still_read():
    key = json.dumps(["offset", "g", "t", 3], separators=(",", ":")).encode()
    value = b'{"offset":7,"leader_epoch":1,"metadata":null,"commit_timestamp_ms":5}'
    assert parse_offset_record(key, value) == ("g", "t", 3, CommittedOffset(7, 1, None, 5))


def test_new_group_metadata_record_bytes():
    """GroupCoordinatorRecordHelpersTest.testNewGroupMetadataRecord: version 3 as Kafka 4.3 writes it."""
    member = serde.GroupMetadataMember("m1", "i1", "c", "h", 30_000, 10_000, b"sub", b"asg")
    value = serde.GroupMetadataValue("consumer", 2, "range", "m1", 99, (member,))
    data = serde.value_bytes(value)
    expected = struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 2) + s16("range") + s16("m1")
    expected += struct.pack(">qi", 99, 1) + s16("m1") + s16("i1") + s16("c") + s16("h")
    expected += struct.pack(">iii", 30_000, 10_000, 3) + b"sub" + struct.pack(">i", 3) + b"asg"
    assert data == expected
    for version in range(5):
        older = serde.value_bytes(value, version)
        read = serde.parse_value(RecordType.GROUP_METADATA, older)
        assert isinstance(read, serde.GroupMetadataValue) and read.members[0].subscription == b"sub"
        assert read.current_state_timestamp == (99 if version >= 2 else -1)


def test_new_consumer_group_current_assignment_record_bytes():
    """ConsumerGroupCurrentMemberAssignmentValue version 0 (flexible): epochs, the state byte, compact
    arrays of (uuid, compact int32 array, tagged fields); AssignmentEpochs as tag 0 when written."""
    value = serde.ConsumerGroupCurrentMemberAssignmentValue(
        10, 9, 1, (serde.AssignedTopicPartitions(FOO, (0, 1), (10, 10)),), ()
    )
    data = serde.value_bytes(value)
    epochs = b"\x03" + struct.pack(">ii", 10, 10)
    topic = FOO.bytes + b"\x03" + struct.pack(">ii", 0, 1) + b"\x01\x00" + bytes([len(epochs)]) + epochs
    assert data == struct.pack(">hiib", 0, 10, 9, 1) + b"\x02" + topic + b"\x01" + b"\x00"
    assert serde.parse_value(RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, data) == value


def test_new_consumer_group_epoch_record_bytes():
    """ConsumerGroupMetadataValue: the epoch, then MetadataHash as tag 0 unless 0 (KIP-1101)."""
    assert (
        serde.value_bytes(serde.ConsumerGroupMetadataValue(10))
        == b"\x00\x00" + struct.pack(">i", 10) + b"\x00"
    )
    data = serde.value_bytes(serde.ConsumerGroupMetadataValue(10, -2))
    assert data == b"\x00\x00" + struct.pack(">i", 10) + b"\x01\x00\x08" + struct.pack(">q", -2)


# ConsumerGroupMemberMetadataValue as Kafka 4.3.1's generated class writes it (MessageUtil.toVersionPrefixedBytes):
# ClassicMemberMetadata (tag 0) always written, a presence byte inside it
KAFKA_CONSUMER_MEMBER = "000001010263026802027401000003e80101000100"
KAFKA_CLASSIC_MEMBER = "000001010263026802027401000003e801010011010000afc8020672616e67650301020000"
CLASSIC = serde.ClassicMemberMetadata(45_000, (("range", b"\x01\x02"),))


@pytest.mark.parametrize(
    ("kafka_hex", "classic"), [(KAFKA_CONSUMER_MEMBER, None), (KAFKA_CLASSIC_MEMBER, CLASSIC)]
)
def test_new_consumer_group_member_subscription_record_bytes(kafka_hex, classic):
    """GroupCoordinatorRecordHelpersTest.testNewConsumerGroupMemberSubscriptionRecord: a consumer-protocol
    member's tag 0 holds a null ClassicMemberMetadata (`01 00 01 00`), a classic member's a 1 then the
    struct; read back from Kafka's bytes."""
    value = serde.ConsumerGroupMemberMetadataValue("", "", "c", "h", ("t",), "", 1000, "", classic)
    assert serde.value_bytes(value).hex() == kafka_hex
    assert serde.parse_value(RecordType.CONSUMER_GROUP_MEMBER_METADATA, bytes.fromhex(kafka_hex)) == value


@pytest.mark.parametrize(
    ("old_hex", "classic"),
    [
        ("000000000263026802027400000003e80000", None),
        ("000000000263026802027400000003e8000100100000afc8020672616e67650301020000", CLASSIC),
    ],
)
def test_member_metadata_written_before_the_presence_byte_still_read(old_hex, classic):
    """No tag for a consumer-protocol member, the bare struct for a classic one: what this coordinator
    wrote before it wrote Kafka's presence byte."""
    value = serde.parse_value(RecordType.CONSUMER_GROUP_MEMBER_METADATA, bytes.fromhex(old_hex))
    assert isinstance(value, serde.ConsumerGroupMemberMetadataValue)
    assert value.classic_member_metadata == classic


ALL_RECORDS: list[tuple[serde.Key, serde.Value]] = [
    (serde.OffsetCommitKey("g", "t", 0), serde.OffsetCommitValue(1, 2, "x", 3)),
    (
        serde.GroupMetadataKey("g"),
        serde.GroupMetadataValue("consumer", 1, None, None, 5, ()),
    ),
    (
        serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_METADATA, "g"),
        serde.ConsumerGroupMetadataValue(3, 77),
    ),
    (
        serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_PARTITION_METADATA, "g"),
        serde.ConsumerGroupPartitionMetadataValue((serde.PartitionMetadataTopic(FOO, "foo", 6),)),
    ),
    (
        serde.ConsumerGroupMemberKey(RecordType.CONSUMER_GROUP_MEMBER_METADATA, "g", "m"),
        serde.ConsumerGroupMemberMetadataValue(
            "i",
            None,
            "c",
            "/h",
            ("foo", "bar"),
            None,
            5000,
            "range",
            serde.ClassicMemberMetadata(45_000, (("range", b"\x00\x01"),)),
        ),
    ),
    (
        serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, "g"),
        serde.ConsumerGroupTargetAssignmentMetadataValue(3, 1234),
    ),
    (
        serde.ConsumerGroupMemberKey(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, "g", "m"),
        serde.ConsumerGroupTargetAssignmentMemberValue(((FOO, (0, 2)),)),
    ),
    (
        serde.ConsumerGroupMemberKey(RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m"),
        serde.ConsumerGroupCurrentMemberAssignmentValue(
            3, 2, 0, (), (serde.AssignedTopicPartitions(FOO, (1,)),)
        ),
    ),
    (
        serde.ConsumerGroupRegularExpressionKey("g", "fo.*"),
        serde.ConsumerGroupRegularExpressionValue(("foo",), 12, 34),
    ),
]


@pytest.mark.parametrize(("key", "value"), ALL_RECORDS, ids=lambda r: type(r).__name__)
def test_deserialize_all_record_types(key, value):
    """GroupCoordinatorRecordSerdeTest.testDeserializeAllRecordTypes: each record's round trip, its
    tombstone, and the decoder fed the whole buffer, one with a byte more, and one a byte short."""
    key_data, value_data = serde.key_bytes(key), serde.value_bytes(value)
    assert serde.parse_record(key_data, value_data) == (key, value)
    assert serde.parse_record(key_data, None) == (key, None)
    with pytest.raises(serde.RecordError):
        serde.parse_record(key_data, value_data + b"\x00")
    with pytest.raises(serde.RecordError):
        serde.parse_record(key_data, value_data[:-1])
    with pytest.raises(serde.RecordError):
        serde.parse_record(key_data + b"\x00", value_data)


def test_deserialize_with_invalid_record_type_or_version():
    """GroupCoordinatorRecordSerdeTest: an unknown record type is another coordinator's (share or streams
    groups), not an error; an unknown value version or an empty value is."""
    assert serde.parse_record(b"\x00\x0a" + s16("g"), b"\x00\x00") is None
    key = serde.key_bytes(serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_METADATA, "g"))
    with pytest.raises(serde.RecordError, match="unknown version 1"):
        serde.parse_record(key, b"\x00\x01" + struct.pack(">i", 3) + b"\x00")
    with pytest.raises(serde.RecordError):
        serde.parse_record(key, b"")


def test_unknown_tagged_fields_are_skipped():
    data = b"\x00\x00" + struct.pack(">i", 4) + b"\x01\x07\x02ab"  # tag 7, 2 bytes
    assert serde.parse_value(RecordType.CONSUMER_GROUP_METADATA, data) == serde.ConsumerGroupMetadataValue(4)


# ---- consumer groups: what the coordinator writes and replays -------------------------------------
def written_group(ctx: Context) -> dict[bytes, bytes]:
    return consumer_group_records.group_records(ctx.group())


def record_types(records) -> list[RecordType]:
    return [RecordType(int.from_bytes(key[:2], "big")) for key, _ in records]


@pytest.fixture
def ctx() -> Context:
    c = Context()
    c.topics.create("foo", 6)
    return c


def test_consumer_group_written_as_kafkas_records(ctx):
    """GroupMetadataManager's heartbeat of a new member: its subscription, the group epoch, the target
    assignment, its metadata and the member's current assignment, in that order."""
    ctx.join("a", server_assignor="range")
    records = list(written_group(ctx).items())
    assert record_types(records) == [
        RecordType.CONSUMER_GROUP_MEMBER_METADATA,
        RecordType.CONSUMER_GROUP_METADATA,
        RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
        RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
        RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    ]
    parsed = [serde.parse_record(k, v) for k, v in records]
    metadata = parsed[0][1]
    assert isinstance(metadata, serde.ConsumerGroupMemberMetadataValue)
    assert metadata.subscribed_topic_names == ("foo",) and metadata.server_assignor == "range"
    epoch = parsed[1][1]
    assert (
        isinstance(epoch, serde.ConsumerGroupMetadataValue) and epoch.epoch == 1 and epoch.metadata_hash != 0
    )
    current = parsed[4][1]
    assert isinstance(current, serde.ConsumerGroupCurrentMemberAssignmentValue)
    assert current.assigned_partitions, "the member owns partitions"
    for topic in current.assigned_partitions:  # AssignmentEpochs: the member epoch once per partition
        assert topic.assignment_epochs == (current.member_epoch,) * len(topic.partitions)


def test_subscribed_topic_names_written_sorted(ctx):
    """GroupCoordinatorRecordHelpers.newConsumerGroupMemberSubscriptionRecord sorts the topic names."""
    ctx.topics.create("bar", 2)
    ctx.join("a", ("foo", "bar"))
    key = consumer_group_records._member_key(RecordType.CONSUMER_GROUP_MEMBER_METADATA, "grp", "a")
    metadata = serde.parse_value(RecordType.CONSUMER_GROUP_MEMBER_METADATA, written_group(ctx)[key])
    assert isinstance(metadata, serde.ConsumerGroupMemberMetadataValue)
    assert metadata.subscribed_topic_names == ("bar", "foo")


def test_member_leaving_writes_kafkas_tombstones(ctx):
    """GroupMetadataManager.removeMember: current assignment, target assignment, then subscription."""
    ctx.join("a")
    ctx.join("b")
    written = written_group(ctx)
    ctx.heartbeat("b", -1)
    records = consumer_group_records.records_to_write(ctx.group(), written)
    tombstones = [(k, v) for k, v in records if v is None]
    assert record_types(tombstones) == [
        RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
        RecordType.CONSUMER_GROUP_MEMBER_METADATA,
    ]
    assert all(serde.parse_record(k, None)[0].member_id == "b" for k, _ in tombstones)  # type: ignore[union-attr]


def test_deleted_group_tombstones_its_metadata_last(ctx):
    """createGroupTombstoneRecords: the members' records, the target assignment metadata, the group's."""
    ctx.join("a")
    written = written_group(ctx)
    records = consumer_group_records.records_to_write(None, written)
    assert all(v is None for _, v in records)
    assert record_types(records)[-2:] == [
        RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
        RecordType.CONSUMER_GROUP_METADATA,
    ]


# ---- regular expressions: ConsumerGroupRegularExpression -------------------------------------------
def regex_records(records) -> dict[str, serde.ConsumerGroupRegularExpressionValue | None]:
    """The ConsumerGroupRegularExpression records among ``records``, by regex (None: a tombstone)."""
    found: dict[str, serde.ConsumerGroupRegularExpressionValue | None] = {}
    for key, value in records:
        parsed = serde.parse_record(key, value)
        if parsed is not None and isinstance(parsed[0], serde.ConsumerGroupRegularExpressionKey):
            assert parsed[1] is None or isinstance(parsed[1], serde.ConsumerGroupRegularExpressionValue)
            found[parsed[0].regular_expression] = parsed[1]
    return found


def join_regex(ctx: Context, member_id: str, regex: str):
    result = ctx.heartbeat(member_id, 0, rebalance_timeout_ms=30_000, owned={}, subscribed_topic_regex=regex)
    assert result.error == ErrorCode.none, result
    return result


def test_consumer_group_member_joins_with_new_regex(ctx):
    """GroupMetadataManagerTest.testConsumerGroupMemberJoinsWithNewRegex: the regex resolved is written as
    ConsumerGroupRegularExpression (its topics, the topics version, the time: handleRegularExpressionsResult)
    after the member's subscription and before the group epoch it bumps."""
    ctx.topics.create("bar", 2)
    ctx.now = 1234
    join_regex(ctx, "a", "fo.*")
    records = list(written_group(ctx).items())
    assert record_types(records)[:3] == [
        RecordType.CONSUMER_GROUP_MEMBER_METADATA,
        RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION,
        RecordType.CONSUMER_GROUP_METADATA,
    ]
    version = ctx.topics.version
    assert regex_records(records) == {
        "fo.*": serde.ConsumerGroupRegularExpressionValue(("foo",), version, 1234)
    }


def test_consumer_group_member_joins_with_updated_regex(ctx):
    """GroupMetadataManagerTest.testConsumerGroupMemberJoinsWithUpdatedRegex: the member's old regex, no
    longer used, is tombstoned (maybeUpdateRegularExpressions) and the new one written."""
    ctx.topics.create("bar", 2)
    a = join_regex(ctx, "a", "fo.*")
    written = written_group(ctx)
    ctx.heartbeat("a", a.member_epoch, subscribed_topic_regex="ba.*")
    records = consumer_group_records.records_to_write(ctx.group(), written)
    assert regex_records(records) == {
        "fo.*": None,
        "ba.*": serde.ConsumerGroupRegularExpressionValue(("bar",), ctx.topics.version, 0),
    }
    assert set(ctx.group().subscription_metadata) == {"bar"}


def test_last_member_of_a_regex_leaving_tombstones_it(ctx):
    """consumerGroupFenceMember's maybeDeleteResolvedRegularExpression: the regex goes with the last member
    that used it, its tombstone after the member's three; while another member uses it, it stays."""
    join_regex(ctx, "a", "fo.*")
    join_regex(ctx, "b", "fo.*")
    written = written_group(ctx)
    ctx.heartbeat("b", -1)
    assert regex_records(consumer_group_records.records_to_write(ctx.group(), written)) == {}
    written = written_group(ctx)
    ctx.heartbeat("a", -1)
    tombstones = [
        (k, v) for k, v in consumer_group_records.records_to_write(ctx.group(), written) if v is None
    ]
    assert record_types(tombstones) == [
        RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
        RecordType.CONSUMER_GROUP_MEMBER_METADATA,
        RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION,
    ]
    assert ctx.group().resolved_regexes == {}


def test_regex_written_again_only_when_it_matches_other_topics(ctx):
    """A topic the regex matches, once created, is written with the new topics version and time, and
    bumps the group epoch as handleRegularExpressionsResult does; a topic it does not match writes nothing."""
    a = join_regex(ctx, "a", "fo.*")
    written, epoch = written_group(ctx), ctx.group().group_epoch
    ctx.topics.create("bar", 2)
    a = ctx.poll("a", a.member_epoch, a.assignment)
    assert regex_records(consumer_group_records.records_to_write(ctx.group(), written)) == {}
    ctx.topics.create("fob", 1)
    ctx.now = 99
    ctx.poll("a", a.member_epoch, a.assignment)
    records = consumer_group_records.records_to_write(ctx.group(), written)
    value = serde.ConsumerGroupRegularExpressionValue(("fob", "foo"), ctx.topics.version, 99)
    assert regex_records(records) == {"fo.*": value}
    assert ctx.group().group_epoch == epoch + 1


def test_regex_resolved_to_other_topics_bumps_the_group_epoch(ctx):
    """handleRegularExpressionsResult bumps the group epoch when a regex matches other topics, even if the
    group's topics stay the same: here another member names them all, and the regex member, first allowed
    to DESCRIBE only foo, gets bar's partitions once the regex is resolved again without that limit."""
    ctx.topics.create("bar", 1)
    ctx.join("a", ("foo", "bar"))
    b = ctx.heartbeat(
        "b",
        0,
        rebalance_timeout_ms=1,
        owned={},
        subscribed_topic_regex="foo|bar",
        topic_authorized=lambda name: name == "foo",
    )
    epoch = ctx.group().group_epoch
    ctx.topics.create("other", 1)  # a new topics version: the regex is resolved again
    ctx.poll("b", b.member_epoch, b.assignment)
    assert ctx.group().resolved_regexes["foo|bar"].topics == {"foo", "bar"}
    assert ctx.group().group_epoch == epoch + 1
    assert set(ctx.group().subscription_metadata) == {"foo", "bar"}
    assert ctx.group().assignment_epoch == epoch + 1  # the target computed again with b's new topics


def test_replay_consumer_group_regular_expression():
    """GroupMetadataManagerTest.testReplayConsumerGroupRegularExpression: the group is created if need be
    and holds the resolution (ConsumerGroup.updateResolvedRegularExpression)."""
    key = serde.key_bytes(serde.ConsumerGroupRegularExpressionKey("foo", "abc*"))
    value = serde.value_bytes(serde.ConsumerGroupRegularExpressionValue(("abc", "abcd"), 10, 12345))
    group = replayed([(key, value)]).groups["foo"]
    assert group.resolved_regexes == {
        "abc*": ResolvedRegularExpression(frozenset({"abc", "abcd"}), 10, 12345)
    }
    assert replayed([(key, value), (key, None)]).groups["foo"].resolved_regexes == {}


def test_replay_consumer_group_regular_expression_tombstone():
    """GroupMetadataManagerTest.testReplayConsumerGroupRegularExpressionTombstone: a tombstone of a group
    that does not exist creates none."""
    key = serde.key_bytes(serde.ConsumerGroupRegularExpressionKey("foo", "abc*"))
    assert "foo" not in replayed([(key, None)]).groups


def test_regex_group_loaded_has_its_topics_from_the_records(ctx):
    """A coordinator that loads a regex group knows its topics from ConsumerGroupRegularExpression at once
    (onLoaded), without resolving the regex: a matching topic created since is not among them until the
    next heartbeat resolves the regex again."""
    a = join_regex(ctx, "a", "fo.*")
    records = list(written_group(ctx).items())
    ctx.topics.create("fob", 1)
    successor = replayed(records)
    successor.regexes.resolve = lambda pattern, topics: pytest.fail(f"{pattern} resolved again")  # type: ignore[method-assign]
    successor.on_loaded(0, ["grp"], ctx.topics)
    group = successor.groups["grp"]
    assert set(group.subscription_metadata) == {"foo"}
    assert group.resolved_regexes == ctx.group().resolved_regexes
    del successor.regexes.resolve
    ctx.coordinator = successor
    ctx.poll("a", a.member_epoch, a.assignment)
    assert set(ctx.group().subscription_metadata) == {"fob", "foo"}


def replayed(records) -> ConsumerGroupCoordinator:
    coordinator = ConsumerGroupCoordinator()
    for key, value in records:
        assert consumer_group_records.replay(coordinator, key, value)
    return coordinator


def same_group(a, b) -> None:
    assert (a.group_epoch, a.assignment_epoch, a.metadata_hash) == (
        b.group_epoch,
        b.assignment_epoch,
        b.metadata_hash,
    )
    assert a.members == b.members
    assert a.target_assignment == b.target_assignment
    assert a.partition_epochs == b.partition_epochs
    assert a.static_members == b.static_members
    assert a.resolved_regexes == b.resolved_regexes


@pytest.mark.parametrize("seed", range(5))
def test_replay_in_any_order_within_a_write(ctx, seed):
    """A member's current assignment may be replayed before its subscription (GroupMetadataManager.replay
    creates the member from whichever record comes first): the group rebuilt is the same."""
    ctx.join("a", instance_id="i1")
    b = ctx.join("b")
    ctx.poll("b", b.member_epoch, b.assignment)
    records = list(written_group(ctx).items())
    random.Random(seed).shuffle(records)
    same_group(replayed(records).groups["grp"], ctx.group())


def test_replayed_group_does_not_rebalance_on_its_next_heartbeat(ctx):
    """The group epoch stays: the subscribed topics' hash came back with the group, so the first
    heartbeat after a failover finds nothing changed."""
    a = ctx.join("a")
    epoch = ctx.group().group_epoch
    ctx.coordinator.groups["grp"] = replayed(written_group(ctx).items()).groups["grp"]
    again = ctx.poll("a", a.member_epoch, a.assignment)
    assert ctx.group().group_epoch == epoch and again.member_epoch == a.member_epoch


def test_member_tombstones_replayed_remove_the_member(ctx):
    ctx.join("a")
    ctx.join("b")
    written = written_group(ctx)
    ctx.heartbeat("b", -1)
    records = list(written.items()) + consumer_group_records.records_to_write(ctx.group(), written)
    same_group(replayed(records).groups["grp"], ctx.group())


def test_json_records_still_replayed_and_tombstoned_by_the_next_write(ctx):
    """A data directory written before Kafka's format loads; the group's next write tombstones the JSON
    keys, which compaction would otherwise keep and a later load bring back."""
    a = ctx.join("a")
    group = ctx.group()
    foo = ctx.topics.by_name("foo")
    assert foo is not None
    group_key = json.dumps(["consumer-group", "grp"], separators=(",", ":")).encode()
    member_key = json.dumps(["consumer-group-member", "grp", "a"], separators=(",", ":")).encode()
    assigned = {str(foo.topic_id): sorted(parts) for parts in a.assignment.values()}  # type: ignore[union-attr]
    group_value = {
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "subscription_metadata": {"foo": [str(foo.topic_id), 6]},
    }
    member_value = {
        "instance_id": None,
        "rack_id": None,
        "client_id": "",
        "client_host": "",
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": ["foo"],
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "state": "stable",
        "member_epoch": a.member_epoch,
        "previous_member_epoch": 0,
        "assigned": assigned,
        "pending_revocation": {},
        "target": assigned,
    }
    legacy = [(group_key, json.dumps(group_value).encode()), (member_key, json.dumps(member_value).encode())]
    loaded = replayed(legacy).groups["grp"]
    assert loaded.members["a"].assigned == group.members["a"].assigned
    assert loaded.metadata_hash == group.metadata_hash and loaded.group_epoch == group.group_epoch
    records = consumer_group_records.records_to_write(loaded, dict(legacy))
    assert [(k, v) for k, v in records if v is None] == [(member_key, None), (group_key, None)]
    assert not any(serde.is_json_record(k) for k, v in records if v is not None)


# ---- loading: a record that cannot be read, a load that fails -------------------------------------
def test_load_skips_a_record_that_cannot_be_read():
    """CoordinatorLoaderImpl: a record the serde cannot read is logged and skipped; the partition's
    other records load and its coordinator serves them."""

    good = [
        (offset_record_key("g", "t", 0), offset_record_value(CommittedOffset(5, -1, "", 1))),
        (offset_record_key("g", "t", 1), offset_record_value(CommittedOffset(6, -1, "", 1))),
    ]
    member_key = serde.key_bytes(
        serde.ConsumerGroupMemberKey(RecordType.CONSUMER_GROUP_MEMBER_METADATA, "g", "m")
    )
    broken = [(member_key, b"\x00\x00\x05"), (offset_record_key("g", "t", 2), b"\x00\x09")]
    service = GroupService(MemoryOffsetsTopic())
    records = [good[0], *broken, good[1]]
    service.load_partition(0, [LoggedOffsetRecord(k, v, offset=i) for i, (k, v) in enumerate(records)])
    assert service.coordinator_error("g") == ErrorCode.none
    assert sorted(service.fetch_offsets("g", None)) == [("t", 0), ("t", 1)]


def test_failed_load_leaves_the_partition_not_coordinated_without_raising():
    """A load that fails (here its records cannot be read at all) does not raise into the leadership
    change (ReplicaManager's other transitions go on): the partition answers NOT_COORDINATOR, not
    COORDINATOR_LOAD_IN_PROGRESS forever, and the next leadership loads it again."""

    def unreadable():
        yield LoggedOffsetRecord(
            offset_record_key("g", "t", 0), offset_record_value(CommittedOffset(5, -1, "", 1))
        )
        raise OSError("the segment cannot be read")

    service = GroupService(MemoryOffsetsTopic())
    service.load_partition(0, unreadable())
    assert service.coordinator_error("g") == ErrorCode.not_coordinator
    assert service.fetch_offsets("g", None) == {}
    service.load_partition(0, [])
    assert service.coordinator_error("g") == ErrorCode.none


async def test_deleted_group_tombstones_the_kafka_records_it_only_reads():
    """A group loaded from a log Kafka wrote carries ConsumerGroupPartitionMetadata (Kafka <= 4.0), which
    this coordinator reads and never writes, and ConsumerGroupRegularExpression records (here one no member
    uses): deleting the group tombstones them before its metadata (createGroupTombstoneRecords), so once
    compaction has dropped the tombstones no record is left to bring the group back."""
    group_key = serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_METADATA, "g")
    partition_metadata_key = serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_PARTITION_METADATA, "g")
    target_key = serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, "g")
    regex_key = serde.ConsumerGroupRegularExpressionKey("g", "fo.*")
    kafka_written = [
        (serde.key_bytes(group_key), serde.value_bytes(serde.ConsumerGroupMetadataValue(3))),
        (
            serde.key_bytes(partition_metadata_key),
            serde.value_bytes(
                serde.ConsumerGroupPartitionMetadataValue((serde.PartitionMetadataTopic(FOO, "foo", 6),))
            ),
        ),
        (
            serde.key_bytes(regex_key),
            serde.value_bytes(serde.ConsumerGroupRegularExpressionValue(("foo",), 1, 2)),
        ),
        (serde.key_bytes(target_key), serde.value_bytes(serde.ConsumerGroupTargetAssignmentMetadataValue(3))),
    ]
    topic = MemoryOffsetsTopic()
    service = GroupService(topic)
    service.load_partition(0, [LoggedOffsetRecord(k, v) for k, v in kafka_written])
    assert "g" in service.consumer_groups.groups
    assert await service.delete_group("g") == ErrorCode.none
    assert [k for k, v in topic.records if v is None] == [
        serde.key_bytes(target_key),
        serde.key_bytes(regex_key),
        serde.key_bytes(partition_metadata_key),
        serde.key_bytes(group_key),
    ]
    compacted = {k: v for k, v in [*kafka_written, *topic.records]}  # the latest value of each key
    successor = GroupService(MemoryOffsetsTopic())
    successor.load_partition(0, [LoggedOffsetRecord(k, v) for k, v in compacted.items() if v is not None])
    assert "g" not in successor.consumer_groups.groups


async def test_commit_without_metadata_is_stored_as_the_empty_string():
    """OffsetAndMetadata.fromRequest: a null metadata is kept as "", so OffsetFetch answers the same
    before and after the commit is loaded again by another coordinator."""
    topic = MemoryOffsetsTopic()
    service = GroupService(topic)
    entry = OffsetCommitEntry("t", 0, 5, -1, None)
    assert await service.commit(group_id="g", generation_id=-1, member_id="", entries=[entry]) == [
        ErrorCode.none
    ]
    assert service.fetch_offsets("g", None)[("t", 0)].metadata == ""  # type: ignore[union-attr]
    successor = GroupService(MemoryOffsetsTopic())
    successor.load_partition(0, [LoggedOffsetRecord(k, v) for k, v in topic.records])
    assert successor.fetch_offsets("g", None)[("t", 0)].metadata == ""  # type: ignore[union-attr]


async def test_commit_over_an_offset_loaded_from_json_tombstones_its_json_key():
    """The JSON key of an offset written before Kafka's format is tombstoned by the next commit of that
    partition, once: compaction would otherwise keep it for good."""
    json_key = json.dumps(["offset", "g", "t", 0], separators=(",", ":")).encode()
    json_value = b'{"offset":7,"leader_epoch":1,"metadata":"","commit_timestamp_ms":5}'
    topic = MemoryOffsetsTopic()
    service = GroupService(topic)
    service.load_partition(0, [LoggedOffsetRecord(json_key, json_value)])
    for offset in (8, 9):
        entry = OffsetCommitEntry("t", 0, offset, -1, "")
        assert await service.commit(group_id="g", generation_id=-1, member_id="", entries=[entry]) == [
            ErrorCode.none
        ]
    new_key = offset_record_key("g", "t", 0)
    assert [(k, v is None) for k, v in topic.records] == [
        (json_key, True),
        (new_key, False),
        (new_key, False),
    ]


def test_offset_tombstone_drops_the_pending_transactional_offset():
    """OffsetMetadataManager.replay of a tombstone removes the partition's pending transactional offsets:
    an offset deleted while a transaction held it stays deleted when the transaction commits."""
    key = offset_record_key("g", "t", 0)
    records = [
        LoggedOffsetRecord(key, offset_record_value(CommittedOffset(5, -1, "", 1)), producer_id=7),
        LoggedOffsetRecord(
            offset_record_key("g", "t", 1), offset_record_value(CommittedOffset(6, -1, "", 1)), producer_id=7
        ),
        LoggedOffsetRecord(key, None),  # OffsetDelete
        LoggedOffsetRecord(None, None, producer_id=7, outcome=TxnOutcome.COMMIT),
    ]
    service = GroupService(MemoryOffsetsTopic())
    service.load_partition(0, records)
    assert list(service.fetch_offsets("g", None)) == [("t", 1)]


def test_replay_transaction_end_marker_keeps_a_later_regular_commit():
    """OffsetMetadataManager.replayEndTransactionMarker: a committed transaction's offset is applied only
    if its record is later than the partition's committed one; a regular commit written after the
    transactional one stays, on load and as the coordinator runs."""
    key = offset_record_key("g", "t", 0)
    records = [
        LoggedOffsetRecord(key, offset_record_value(CommittedOffset(5, -1, "", 1)), producer_id=7, offset=0),
        LoggedOffsetRecord(key, offset_record_value(CommittedOffset(6, -1, "", 1)), offset=1),
        LoggedOffsetRecord(None, None, producer_id=7, outcome=TxnOutcome.COMMIT, offset=2),
    ]
    service = GroupService(MemoryOffsetsTopic())
    service.load_partition(0, records)
    assert service.fetch_offsets("g", None)[("t", 0)].offset == 6  # type: ignore[union-attr]


async def test_transaction_commit_keeps_a_regular_commit_written_after_it():
    service = GroupService(MemoryOffsetsTopic())
    service.load_partition(0, [])
    txn = OffsetCommitEntry("t", 0, 5, -1, "")
    assert await service.txn_commit(
        group_id="g", producer=(7, 0), generation_id=-1, member_id="", entries=[txn]
    ) == [ErrorCode.none]
    regular = OffsetCommitEntry("t", 0, 6, -1, "")
    assert await service.commit(group_id="g", generation_id=-1, member_id="", entries=[regular]) == [
        ErrorCode.none
    ]
    service.coordinator.complete_transactional_offsets(0, 7, 0, committed=True)
    assert service.fetch_offsets("g", None)[("t", 0)].offset == 6  # type: ignore[union-attr]
