"""``__consumer_offsets``'s records in Kafka's format (GroupCoordinatorRecordSerde), so Kafka's tools read
our log (``kafka-dump-log --offsets-decoder``) and our coordinator reads what Kafka wrote.

A key is int16 record type (CoordinatorRecordType: 0 and 1 OffsetCommit, 2 GroupMetadata, 3
ConsumerGroupMetadata, 4 ConsumerGroupPartitionMetadata, 5 ConsumerGroupMemberMetadata, 6
ConsumerGroupTargetAssignmentMetadata, 7 ConsumerGroupTargetAssignmentMember, 8
ConsumerGroupCurrentMemberAssignment, 16 ConsumerGroupRegularExpression), then the key's fields (version 0,
not flexible). A value is int16 version, then its fields; a null value is a tombstone. The versions written
are Kafka 4.3's (GroupCoordinatorRecordHelpers): OffsetCommitValue 4 (flexible), GroupMetadataValue 3, and
version 0 (flexible, with tagged fields) of every consumer group value; every version Kafka may have
written is read. Each dataclass below is one of Kafka's
group-coordinator/src/main/resources/common/message/*.json schemas, its fields in the schema's order,
written and read by hand (kio has no schemas for coordinator records) with ``coordinator_codec``'s
primitives.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from epochkraft.broker.coordinator_codec import Reader, RecordError, Writer

__all__ = [
    "RecordError",
    "RecordType",
    "key_bytes",
    "parse_key",
    "parse_record",
    "parse_value",
    "value_bytes",
]

ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: no topic id


class RecordType(IntEnum):
    """Kafka's CoordinatorRecordType for the group coordinator: the key's first two bytes."""

    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16


# ---- keys ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of ConsumerGroupMetadata, ConsumerGroupPartitionMetadata and
    ConsumerGroupTargetAssignmentMetadata: the group id alone."""

    type: RecordType
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberKey:
    """The key of ConsumerGroupMemberMetadata, ConsumerGroupTargetAssignmentMember and
    ConsumerGroupCurrentMemberAssignment."""

    type: RecordType
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regular_expression: str


Key = (
    OffsetCommitKey
    | GroupMetadataKey
    | ConsumerGroupKey
    | ConsumerGroupMemberKey
    | ConsumerGroupRegularExpressionKey
)
GROUP_KEYED = (
    RecordType.CONSUMER_GROUP_METADATA,
    RecordType.CONSUMER_GROUP_PARTITION_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
)
MEMBER_KEYED = (
    RecordType.CONSUMER_GROUP_MEMBER_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
)


def key_bytes(key: Key) -> bytes:
    w = Writer(flexible=False)
    match key:
        case OffsetCommitKey(group, topic, partition):
            w.pack("h", RecordType.OFFSET_COMMIT)
            w.string(group)
            w.string(topic)
            w.pack("i", partition)
        case GroupMetadataKey(group):
            w.pack("h", RecordType.GROUP_METADATA)
            w.string(group)
        case ConsumerGroupKey(record_type, group_id):
            w.pack("h", record_type)
            w.string(group_id)
        case ConsumerGroupMemberKey(record_type, group_id, member_id):
            w.pack("h", record_type)
            w.string(group_id)
            w.string(member_id)
        case ConsumerGroupRegularExpressionKey(group_id, regex):
            w.pack("h", RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION)
            w.string(group_id)
            w.string(regex)
    return bytes(w.out)


def parse_key(data: bytes) -> Key | None:
    """The key, or None for a record type this coordinator does not own (share and streams groups)."""
    r = Reader(data)
    record_type = r.unpack("h")
    key: Key
    if record_type in (RecordType.LEGACY_OFFSET_COMMIT, RecordType.OFFSET_COMMIT):
        key = OffsetCommitKey(r.string(), r.string(), r.unpack("i"))
    elif record_type == RecordType.GROUP_METADATA:
        key = GroupMetadataKey(r.string())
    elif record_type in GROUP_KEYED:
        key = ConsumerGroupKey(RecordType(record_type), r.string())
    elif record_type in MEMBER_KEYED:
        key = ConsumerGroupMemberKey(RecordType(record_type), r.string(), r.string())
    elif record_type == RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION:
        key = ConsumerGroupRegularExpressionKey(r.string(), r.string())
    else:
        return None
    r.end()
    return key


# ---- values ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # version 3+, -1 before
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # version 1 only
    topic_id: uuid.UUID = ZERO_UUID  # version 4+, tag 0


@dataclass(frozen=True, slots=True)
class GroupMetadataMember:
    member_id: str
    group_instance_id: str | None  # version 3+
    client_id: str
    client_host: str
    rebalance_timeout: int  # version 1+, -1 before
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # version 2+, -1 before
    members: tuple[GroupMetadataMember, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # tag 0 (KIP-1101)


@dataclass(frozen=True, slots=True)
class PartitionMetadataTopic:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Read only: Kafka 4.1 on writes the metadata hash instead (its per-partition racks are skipped)."""

    topics: tuple[PartitionMetadataTopic, ...]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tag 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0  # tag 0 (KIP-1263)


TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class AssignedTopicPartitions:
    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = None  # tag 0, one per partition


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState: 0 stable, 1 unrevoked, 2 unreleased partitions
    assigned_partitions: tuple[AssignedTopicPartitions, ...]
    partitions_pending_revocation: tuple[AssignedTopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]
    version: int
    timestamp: int


Value = (
    OffsetCommitValue
    | GroupMetadataValue
    | ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)
OFFSET_COMMIT_VALUE_VERSION = 4  # GroupCoordinatorRecordHelpers.offsetCommitValueVersion, no expire time
GROUP_METADATA_VALUE_VERSION = 3  # GroupCoordinatorRecordHelpers.GROUP_METADATA_VALUE_VERSION


def value_bytes(value: Value, version: int | None = None) -> bytes:
    """The value at the version Kafka 4.3 writes (or ``version``, for OffsetCommit and GroupMetadata)."""
    match value:
        case OffsetCommitValue():
            return _offset_commit_bytes(value, OFFSET_COMMIT_VALUE_VERSION if version is None else version)
        case GroupMetadataValue():
            return _group_metadata_bytes(value, GROUP_METADATA_VALUE_VERSION if version is None else version)
    w = Writer(flexible=True)
    w.pack("h", 0)
    match value:
        case ConsumerGroupMetadataValue(epoch, metadata_hash):
            w.pack("i", epoch)
            w.tagged([(0, struct.pack(">q", metadata_hash))] if metadata_hash != 0 else [])
        case ConsumerGroupPartitionMetadataValue(topics):
            w.array(list(topics), lambda t: _write_partition_metadata_topic(w, t))
            w.tagged([])
        case ConsumerGroupMemberMetadataValue():
            _write_member_metadata(w, value)
        case ConsumerGroupTargetAssignmentMetadataValue(epoch, timestamp):
            w.pack("i", epoch)
            w.tagged([(0, struct.pack(">q", timestamp))] if timestamp != 0 else [])
        case ConsumerGroupTargetAssignmentMemberValue(topic_partitions):
            w.array(list(topic_partitions), lambda tp: _write_target_topic(w, tp))
            w.tagged([])
        case ConsumerGroupCurrentMemberAssignmentValue():
            w.pack("iib", value.member_epoch, value.previous_member_epoch, value.state)
            w.array(list(value.assigned_partitions), lambda tp: _write_assigned_topic(w, tp))
            w.array(list(value.partitions_pending_revocation), lambda tp: _write_assigned_topic(w, tp))
            w.tagged([])
        case ConsumerGroupRegularExpressionValue(topics, regex_version, timestamp):
            w.array(list(topics), w.string)
            w.pack("qq", regex_version, timestamp)
            w.tagged([])
    return bytes(w.out)


def _offset_commit_bytes(value: OffsetCommitValue, version: int) -> bytes:
    w = Writer(flexible=version >= 4)
    w.pack("hq", version, value.offset)
    if version >= 3:
        w.pack("i", value.leader_epoch)
    w.string(value.metadata)
    w.pack("q", value.commit_timestamp)
    if version == 1:
        w.pack("q", value.expire_timestamp)
    w.tagged([(0, value.topic_id.bytes)] if value.topic_id.int != 0 else [])
    return bytes(w.out)


def _group_metadata_bytes(value: GroupMetadataValue, version: int) -> bytes:
    w = Writer(flexible=version >= 4)
    w.pack("h", version)
    w.string(value.protocol_type)
    w.pack("i", value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.pack("q", value.current_state_timestamp)

    def member(m: GroupMetadataMember) -> None:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.pack("i", m.rebalance_timeout)
        w.pack("i", m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tagged([])

    w.array(list(value.members), member)
    w.tagged([])
    return bytes(w.out)


def _write_partition_metadata_topic(w: Writer, topic: PartitionMetadataTopic) -> None:
    w.uuid(topic.topic_id)
    w.string(topic.topic_name)
    w.pack("i", topic.num_partitions)
    w.array([], w.string)  # PartitionMetadata: unused after 4.0
    w.tagged([])


def _write_member_metadata(w: Writer, value: ConsumerGroupMemberMetadataValue) -> None:
    w.string(value.instance_id)
    w.string(value.rack_id)
    w.string(value.client_id)
    w.string(value.client_host)
    w.array(list(value.subscribed_topic_names), w.string)
    w.string(value.subscribed_topic_regex)
    w.pack("i", value.rebalance_timeout_ms)
    w.string(value.server_assignor)
    w.tagged([(0, _classic_bytes(value.classic_member_metadata))])


def _classic_bytes(classic: ClassicMemberMetadata | None) -> bytes:
    """Tag 0, nullable and always written by Kafka: a presence byte (0 null, a consumer-protocol member;
    1 the struct follows)."""
    inner = Writer(flexible=True)
    if classic is None:
        inner.pack("b", 0)
        return bytes(inner.out)
    inner.pack("b", 1)
    inner.pack("i", classic.session_timeout_ms)

    def protocol(p: tuple[str, bytes]) -> None:
        inner.string(p[0])
        inner.bytes_(p[1])
        inner.tagged([])

    inner.array(list(classic.supported_protocols), protocol)
    inner.tagged([])
    return bytes(inner.out)


def _write_target_topic(w: Writer, topic: tuple[uuid.UUID, tuple[int, ...]]) -> None:
    w.uuid(topic[0])
    w.array(list(topic[1]), lambda p: w.pack("i", p))
    w.tagged([])


def _write_assigned_topic(w: Writer, topic: AssignedTopicPartitions) -> None:
    w.uuid(topic.topic_id)
    w.array(list(topic.partitions), lambda p: w.pack("i", p))
    if topic.assignment_epochs is None:
        w.tagged([])
        return
    epochs = Writer(flexible=True)
    epochs.array(list(topic.assignment_epochs), lambda e: epochs.pack("i", e))
    w.tagged([(0, bytes(epochs.out))])


# ---- reading values --------------------------------------------------------------------------------
VALUE_VERSIONS = {  # record type -> (highest version read, first flexible version)
    RecordType.LEGACY_OFFSET_COMMIT: (4, 4),
    RecordType.OFFSET_COMMIT: (4, 4),
    RecordType.GROUP_METADATA: (4, 4),
    RecordType.CONSUMER_GROUP_METADATA: (0, 0),
    RecordType.CONSUMER_GROUP_PARTITION_METADATA: (0, 0),
    RecordType.CONSUMER_GROUP_MEMBER_METADATA: (0, 0),
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (0, 0),
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (0, 0),
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (0, 0),
    RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION: (0, 0),
}


def parse_value(record_type: RecordType, data: bytes) -> Value:
    highest, first_flexible = VALUE_VERSIONS[record_type]
    version = Reader(data).unpack("h")
    if not 0 <= version <= highest:
        raise RecordError(f"unknown version {version} of a {record_type.name} value")
    r = Reader(data, flexible=version >= first_flexible)
    r.pos = 2
    value = _VALUE_READERS[record_type](r, version)
    r.end()
    return value


def _read_offset_commit(r: Reader, version: int) -> OffsetCommitValue:
    offset = r.unpack("q")
    leader_epoch = r.unpack("i") if version >= 3 else -1
    metadata, commit_timestamp = r.string(), r.unpack("q")
    expire_timestamp = r.unpack("q") if version == 1 else -1
    tags = r.tagged()
    topic_id = uuid.UUID(bytes=tags[0]) if 0 in tags else ZERO_UUID
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp, topic_id)


def _read_group_metadata(r: Reader, version: int) -> GroupMetadataValue:
    protocol_type, generation = r.string(), r.unpack("i")
    protocol, leader = r.nullable_string(), r.nullable_string()
    current_state_timestamp = r.unpack("q") if version >= 2 else -1

    def member() -> GroupMetadataMember:
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance_timeout = r.unpack("i") if version >= 1 else -1
        m = GroupMetadataMember(
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout,
            r.unpack("i"),
            r.bytes_(),
            r.bytes_(),
        )
        r.tagged()
        return m

    members = tuple(r.array(member))
    r.tagged()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, members)


def _read_consumer_group_metadata(r: Reader, _version: int) -> ConsumerGroupMetadataValue:
    epoch = r.unpack("i")
    tags = r.tagged()
    return ConsumerGroupMetadataValue(epoch, struct.unpack(">q", tags[0])[0] if 0 in tags else 0)


def _read_partition_metadata(r: Reader, _version: int) -> ConsumerGroupPartitionMetadataValue:
    def partition() -> None:
        r.unpack("i")
        r.array(r.string)
        r.tagged()

    def topic() -> PartitionMetadataTopic:
        t = PartitionMetadataTopic(r.uuid(), r.string(), r.unpack("i"))
        r.array(partition)
        r.tagged()
        return t

    topics = tuple(r.array(topic))
    r.tagged()
    return ConsumerGroupPartitionMetadataValue(topics)


def _read_member_metadata(r: Reader, _version: int) -> ConsumerGroupMemberMetadataValue:
    instance_id, rack_id, client_id, client_host = (
        r.nullable_string(),
        r.nullable_string(),
        r.string(),
        r.string(),
    )
    topics = tuple(r.array(r.string))
    regex, rebalance_timeout_ms, assignor = r.nullable_string(), r.unpack("i"), r.nullable_string()
    tags = r.tagged()
    classic = _read_classic(Reader(tags[0], flexible=True)) if 0 in tags else None
    return ConsumerGroupMemberMetadataValue(
        instance_id, rack_id, client_id, client_host, topics, regex, rebalance_timeout_ms, assignor, classic
    )


def _read_classic(r: Reader) -> ClassicMemberMetadata | None:
    """The tagged ClassicMemberMetadata: a presence byte, then the struct. What this coordinator wrote
    before it wrote Kafka's presence byte reads too: the struct alone (its session timeout's first
    byte is 0), and no tag at all for a consumer-protocol member."""
    present = r.data[:1]
    if present == b"\x00" and len(r.data) == 1:
        return None
    if present == b"\x01":
        r.pos = 1
    elif present != b"\x00":
        raise RecordError(f"ClassicMemberMetadata starting {r.data[:1].hex()}")
    session_timeout_ms = r.unpack("i")

    def protocol() -> tuple[str, bytes]:
        p = (r.string(), r.bytes_())
        r.tagged()
        return p

    protocols = tuple(r.array(protocol))
    r.tagged()
    r.end()
    return ClassicMemberMetadata(session_timeout_ms, protocols)


def _read_target_assignment_metadata(r: Reader, _version: int) -> ConsumerGroupTargetAssignmentMetadataValue:
    epoch = r.unpack("i")
    tags = r.tagged()
    return ConsumerGroupTargetAssignmentMetadataValue(
        epoch, struct.unpack(">q", tags[0])[0] if 0 in tags else 0
    )


def _read_target_assignment_member(r: Reader, _version: int) -> ConsumerGroupTargetAssignmentMemberValue:
    def topic() -> tuple[uuid.UUID, tuple[int, ...]]:
        t = (r.uuid(), tuple(r.array(lambda: r.unpack("i"))))
        r.tagged()
        return t

    topics = tuple(r.array(topic))
    r.tagged()
    return ConsumerGroupTargetAssignmentMemberValue(topics)


def _read_assigned_topic(r: Reader) -> AssignedTopicPartitions:
    topic_id, partitions = r.uuid(), tuple(r.array(lambda: r.unpack("i")))
    tags = r.tagged()
    epochs = None
    if 0 in tags:
        inner = Reader(tags[0], flexible=True)
        read = inner.nullable_array(lambda: inner.unpack("i"))
        epochs = None if read is None else tuple(read)
    return AssignedTopicPartitions(topic_id, partitions, epochs)


def _read_current_assignment(r: Reader, _version: int) -> ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch, previous_member_epoch, state = r.unpack("i"), r.unpack("i"), r.unpack("b")
    assigned = tuple(r.array(lambda: _read_assigned_topic(r)))
    pending = tuple(r.array(lambda: _read_assigned_topic(r)))
    r.tagged()
    return ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch, previous_member_epoch, state, assigned, pending
    )


def _read_regular_expression(r: Reader, _version: int) -> ConsumerGroupRegularExpressionValue:
    topics = tuple(r.array(r.string))
    value = ConsumerGroupRegularExpressionValue(topics, r.unpack("q"), r.unpack("q"))
    r.tagged()
    return value


_VALUE_READERS: dict[RecordType, Callable[[Reader, int], Value]] = {
    RecordType.LEGACY_OFFSET_COMMIT: _read_offset_commit,
    RecordType.OFFSET_COMMIT: _read_offset_commit,
    RecordType.GROUP_METADATA: _read_group_metadata,
    RecordType.CONSUMER_GROUP_METADATA: _read_consumer_group_metadata,
    RecordType.CONSUMER_GROUP_PARTITION_METADATA: _read_partition_metadata,
    RecordType.CONSUMER_GROUP_MEMBER_METADATA: _read_member_metadata,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: _read_target_assignment_metadata,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: _read_target_assignment_member,
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: _read_current_assignment,
    RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION: _read_regular_expression,
}


def parse_record(key: bytes, value: bytes | None) -> tuple[Key, Value | None] | None:
    """A stored record: its key and value (None for a tombstone); None for a type not the group
    coordinator's. Raises RecordError for bytes no version of the schemas reads."""
    parsed = parse_key(key)
    if parsed is None:
        return None
    record_type = RecordType(Reader(key).unpack("h"))
    return parsed, None if value is None else parse_value(record_type, value)


def is_json_record(key: bytes) -> bool:
    """A record written before this format: a JSON array, where Kafka's key starts with its int16 type."""
    return key[:1] == b"["
