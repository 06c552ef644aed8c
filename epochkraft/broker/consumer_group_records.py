"""Consumer groups (KIP-848) as records in ``__consumer_offsets``, in Kafka's format, so a new coordinator
resumes them (GroupMetadataManager's replay).

As Kafka 4.3 writes them (GroupCoordinatorRecordHelpers): per member ConsumerGroupMemberMetadata (its
subscription), ConsumerGroupTargetAssignmentMember (its target) and ConsumerGroupCurrentMemberAssignment
(its epochs, state and partitions); per group ConsumerGroupMetadata (the group epoch and the subscribed
topics' hash; ConsumerGroupPartitionMetadata is no longer written since KIP-1101, only read),
ConsumerGroupTargetAssignmentMetadata (the assignment epoch) and, per regular expression a member subscribes
to, ConsumerGroupRegularExpression (the topics it resolved to, the topics version and the time:
newConsumerGroupRegularExpressionRecord), so a new coordinator knows the group's topics without resolving
it again. A member leaving tombstones its current assignment, target and metadata, in that order
(removeMember), then the regular expressions no member uses any more (maybeDeleteResolvedRegularExpression);
a group deleted tombstones its members', then its target assignment metadata, its regular expressions, the
ConsumerGroupPartitionMetadata record replayed from a log Kafka wrote (read, never written here) and its
metadata (createGroupTombstoneRecords); a live group's next write tombstones that partition metadata as
well. The topic is compacted, so only each key's latest value is kept.

``records_to_write`` compares a group with what was last written for it and returns only the changed
keys; ``replay`` rebuilds groups from the stored records, in order, when a broker becomes coordinator. The
records of a group may come in any order within a write (a member's current assignment before its metadata),
as in Kafka each record updates the member it names, created if need be. The two JSON record kinds written
before this format (``["consumer-group", group]`` and ``["consumer-group-member", group, member]``) are
still replayed, so an existing data directory loads; the first write of such a group tombstones them.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from typing import NotRequired, TypedDict

from epochkraft.broker import group_record_serde as serde
from epochkraft.broker.assignors import Assignment
from epochkraft.broker.consumer_group import (
    ConsumerGroup,
    ConsumerGroupCoordinator,
    ResolvedRegularExpression,
    TopicMetadata,
)
from epochkraft.broker.current_assignment import ClassicMemberMetadata, ConsumerGroupMember, MemberState
from epochkraft.broker.group_record_serde import RecordType

GROUP, MEMBER = "consumer-group", "consumer-group-member"  # the JSON records' kinds


class LegacyGroupValue(TypedDict):
    """The value of a ``["consumer-group", group]`` JSON record."""

    group_epoch: int
    assignment_epoch: int
    subscription_metadata: dict[str, tuple[str, int]]  # topic name -> [topic id, partitions] (a JSON array)


class LegacyClassicMetadata(TypedDict):
    session_timeout_ms: int
    protocols: list[tuple[str, str]]  # [name, metadata in base64] arrays


class LegacyMemberValue(TypedDict):
    """The value of a ``["consumer-group-member", group, member]`` JSON record."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    state: str
    member_epoch: int
    previous_member_epoch: int
    assigned: dict[str, list[int]]  # topic id -> partitions
    pending_revocation: dict[str, list[int]]
    target: dict[str, list[int]]
    classic: NotRequired[LegacyClassicMetadata | None]  # absent from records written before migration


Record = tuple[bytes, bytes | None]
# Kafka's MemberState, by the byte ConsumerGroupCurrentMemberAssignmentValue stores
MEMBER_STATE_IDS = {
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
}
MEMBER_STATES = {value: state for state, value in MEMBER_STATE_IDS.items()}
# the order tombstones are written in: a member's current assignment, target, metadata; then the group's
# (its partition metadata only when replayed from Kafka's log)
TOMBSTONE_ORDER = {
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: 0,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: 1,
    RecordType.CONSUMER_GROUP_MEMBER_METADATA: 2,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: 3,
    RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION: 4,
    RecordType.CONSUMER_GROUP_PARTITION_METADATA: 5,
    RecordType.CONSUMER_GROUP_METADATA: 6,
}


def _member_key(record_type: RecordType, group_id: str, member_id: str) -> bytes:
    return serde.key_bytes(serde.ConsumerGroupMemberKey(record_type, group_id, member_id))


def _group_key(record_type: RecordType, group_id: str) -> bytes:
    return serde.key_bytes(serde.ConsumerGroupKey(record_type, group_id))


def _regex_key(group_id: str, regex: str) -> bytes:
    return serde.key_bytes(serde.ConsumerGroupRegularExpressionKey(group_id, regex))


def _topic_partitions(assignment: Assignment) -> serde.TopicPartitions:
    return tuple((topic, tuple(sorted(parts))) for topic, parts in sorted(assignment.items()))


def _assigned(
    assignment: Assignment, member_epoch: int | None = None
) -> tuple[serde.AssignedTopicPartitions, ...]:
    """With ``member_epoch``, AssignmentEpochs holding it once per partition: this coordinator keeps a
    partition's epoch as its owner's member epoch, and Kafka's reader logs an error for an assigned
    partition without one (partitions pending revocation have none)."""
    return tuple(
        serde.AssignedTopicPartitions(t, p, None if member_epoch is None else (member_epoch,) * len(p))
        for t, p in _topic_partitions(assignment)
    )


def _member_metadata(member: ConsumerGroupMember) -> serde.ConsumerGroupMemberMetadataValue:
    classic = member.classic
    return serde.ConsumerGroupMemberMetadataValue(
        member.instance_id,
        member.rack_id,
        member.client_id,
        member.client_host,
        tuple(sorted(member.subscribed_topic_names)),  # as Kafka: the same subscription, the same bytes
        member.subscribed_topic_regex,
        member.rebalance_timeout_ms,
        member.server_assignor,
        None
        if classic is None
        else serde.ClassicMemberMetadata(classic.session_timeout_ms, classic.protocols),
    )


def _current_assignment(member: ConsumerGroupMember) -> serde.ConsumerGroupCurrentMemberAssignmentValue:
    return serde.ConsumerGroupCurrentMemberAssignmentValue(
        member.member_epoch,
        member.previous_member_epoch,
        MEMBER_STATE_IDS[member.state],
        _assigned(member.assigned, member.member_epoch),
        _assigned(member.pending_revocation),
    )


def group_records(group: ConsumerGroup) -> dict[bytes, bytes]:
    """Every record that describes the group as it is now, in the order Kafka writes them."""
    gid = group.group_id
    records = {
        _member_key(RecordType.CONSUMER_GROUP_MEMBER_METADATA, gid, member_id): serde.value_bytes(
            _member_metadata(member)
        )
        for member_id, member in group.members.items()
    }
    for regex, resolved in sorted(group.resolved_regexes.items()):
        resolution = serde.ConsumerGroupRegularExpressionValue(
            tuple(sorted(resolved.topics)), resolved.version, resolved.timestamp_ms
        )
        records[_regex_key(gid, regex)] = serde.value_bytes(resolution)
    records[_group_key(RecordType.CONSUMER_GROUP_METADATA, gid)] = serde.value_bytes(
        serde.ConsumerGroupMetadataValue(group.group_epoch, group.metadata_hash)
    )
    for member_id, target in group.target_assignment.items():
        value = serde.ConsumerGroupTargetAssignmentMemberValue(_topic_partitions(target))
        records[_member_key(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, member_id)] = (
            serde.value_bytes(value)
        )
    records[_group_key(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gid)] = serde.value_bytes(
        serde.ConsumerGroupTargetAssignmentMetadataValue(group.assignment_epoch)
    )
    for member_id, member in group.members.items():
        records[_member_key(RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, member_id)] = (
            serde.value_bytes(_current_assignment(member))
        )
    return records


def _tombstone_rank(key: bytes) -> int:
    if serde.is_json_record(key):
        return TOMBSTONE_ORDER[RecordType.CONSUMER_GROUP_METADATA] if json.loads(key)[0] == GROUP else 0
    return TOMBSTONE_ORDER.get(RecordType(int.from_bytes(key[:2], "big")), 0)


def records_to_write(group: ConsumerGroup | None, written: dict[bytes, bytes]) -> list[Record]:
    """What changed since ``written`` (a group of None: every key tombstoned). Tombstones come first, as
    Kafka's replaceMember writes them: on replay a member removed after its successor was stored would
    take the successor's partition epochs with it. They go in Kafka's order: each member's current
    assignment, target and metadata, then the group's target assignment metadata and its metadata."""
    current = group_records(group) if group is not None else {}
    gone = sorted((k for k in written if k not in current), key=_tombstone_rank)
    changed: list[Record] = [(k, None) for k in gone]
    changed += [(k, v) for k, v in current.items() if written.get(k) != v]
    return changed


def read_only_record_group(key: bytes) -> str | None:
    """The group of a record Kafka writes and this coordinator only reads (ConsumerGroupPartitionMetadata);
    None otherwise. A replayed one is counted as written, so the group's next write tombstones it, before
    the group's metadata as Kafka does: compaction would otherwise keep it after the group's tombstones are
    gone, and a later load bring the deleted group back."""
    if serde.is_json_record(key):
        return None
    match serde.parse_key(key):
        case serde.ConsumerGroupKey(RecordType.CONSUMER_GROUP_PARTITION_METADATA, group_id):
            return group_id
    return None


def json_record_group(key: bytes) -> str | None:
    """The group of a consumer group record in the JSON form written before Kafka's; None otherwise."""
    if not serde.is_json_record(key):
        return None
    try:
        kind, group_id, *_ = json.loads(key)
    except (ValueError, TypeError):
        return None
    return group_id if kind in (GROUP, MEMBER) else None


def replay(coordinator: ConsumerGroupCoordinator, key: bytes, value: bytes | None) -> bool:
    """Applies one stored record; False for keys of other kinds (offset commits, classic groups)."""
    if serde.is_json_record(key):
        return _replay_json(coordinator, key, value)
    parsed = serde.parse_record(key, value)
    if parsed is None:
        return False
    record_key, record_value = parsed
    match record_key:
        case serde.ConsumerGroupKey(record_type, group_id):
            _replay_group_record(coordinator, record_type, group_id, record_value)
        case serde.ConsumerGroupMemberKey(record_type, group_id, member_id):
            _replay_member_record(coordinator, record_type, group_id, member_id, record_value)
        case serde.ConsumerGroupRegularExpressionKey(group_id, regex):
            _replay_regex(coordinator, group_id, regex, record_value)
        case _:
            return False
    return True


def _replay_group_record(
    coordinator: ConsumerGroupCoordinator, record_type: RecordType, group_id: str, value: serde.Value | None
) -> None:
    if value is None:
        if record_type == RecordType.CONSUMER_GROUP_METADATA:  # the last of a group's tombstones
            coordinator.groups.pop(group_id, None)
        return
    group = coordinator.groups.setdefault(group_id, ConsumerGroup(group_id))
    match value:
        case serde.ConsumerGroupMetadataValue(epoch, metadata_hash):
            group.group_epoch, group.metadata_hash = epoch, metadata_hash
        case serde.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch):
            group.assignment_epoch = assignment_epoch
        case serde.ConsumerGroupPartitionMetadataValue():
            pass  # before KIP-1101; the hash (0 for such a group) is computed again at the next heartbeat


def _replay_regex(
    coordinator: ConsumerGroupCoordinator, group_id: str, regex: str, value: serde.Value | None
) -> None:
    """ConsumerGroup.updateResolvedRegularExpression, the group created if need be; a tombstone removes
    the resolution and creates no group (replay of ConsumerGroupRegularExpression)."""
    if value is None:
        if (group := coordinator.groups.get(group_id)) is not None:
            group.resolved_regexes.pop(regex, None)
        return
    if isinstance(value, serde.ConsumerGroupRegularExpressionValue):
        group = coordinator.groups.setdefault(group_id, ConsumerGroup(group_id))
        group.resolved_regexes[regex] = ResolvedRegularExpression(
            frozenset(value.topics), value.version, value.timestamp
        )


def _replay_member_record(
    coordinator: ConsumerGroupCoordinator,
    record_type: RecordType,
    group_id: str,
    member_id: str,
    value: serde.Value | None,
) -> None:
    if value is None:  # a member of a group already gone (tombstoned before it) stays gone
        if (group := coordinator.groups.get(group_id)) is not None:
            _replay_member_tombstone(group, record_type, member_id)
        return
    group = coordinator.groups.setdefault(group_id, ConsumerGroup(group_id))
    member = group.members.get(member_id) or ConsumerGroupMember(member_id)
    match value:
        case serde.ConsumerGroupMemberMetadataValue():
            group.update_member(_with_metadata(member, value))
        case serde.ConsumerGroupCurrentMemberAssignmentValue():
            group.update_member(
                dataclasses.replace(
                    member,
                    member_epoch=value.member_epoch,
                    previous_member_epoch=value.previous_member_epoch,
                    state=MEMBER_STATES.get(value.state, MemberState.STABLE),
                    assigned=_assignment_of(value.assigned_partitions),
                    pending_revocation=_assignment_of(value.partitions_pending_revocation),
                )
            )
        case serde.ConsumerGroupTargetAssignmentMemberValue(topic_partitions):
            group.target_assignment[member_id] = {t: frozenset(p) for t, p in topic_partitions}


def _replay_member_tombstone(group: ConsumerGroup, record_type: RecordType, member_id: str) -> None:
    """As Kafka: the current assignment's tombstone leaves the member without partitions (epoch -1), the
    target's drops its target, the metadata's removes the member."""
    if record_type == RecordType.CONSUMER_GROUP_MEMBER_METADATA:
        group.remove_member(member_id)
    elif record_type == RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        group.target_assignment.pop(member_id, None)
    elif (member := group.members.get(member_id)) is not None:
        group.update_member(
            dataclasses.replace(
                member, member_epoch=-1, previous_member_epoch=-1, assigned={}, pending_revocation={}
            )
        )


def _with_metadata(
    member: ConsumerGroupMember, value: serde.ConsumerGroupMemberMetadataValue
) -> ConsumerGroupMember:
    classic = value.classic_member_metadata
    return dataclasses.replace(
        member,
        instance_id=value.instance_id,
        rack_id=value.rack_id,
        client_id=value.client_id,
        client_host=value.client_host,
        rebalance_timeout_ms=value.rebalance_timeout_ms,
        subscribed_topic_names=value.subscribed_topic_names,
        subscribed_topic_regex=value.subscribed_topic_regex,
        server_assignor=value.server_assignor,
        classic=None
        if classic is None
        else ClassicMemberMetadata(classic.session_timeout_ms, classic.supported_protocols),
    )


def _assignment_of(topics: tuple[serde.AssignedTopicPartitions, ...]) -> Assignment:
    return {t.topic_id: frozenset(t.partitions) for t in topics if t.partitions}


# ---- the JSON records written before Kafka's format, still replayed ---------------------------------
def _replay_json(coordinator: ConsumerGroupCoordinator, key: bytes, value: bytes | None) -> bool:
    try:
        kind, group_id, *rest = json.loads(key)
    except (ValueError, TypeError):
        return False
    if kind == GROUP:
        _replay_group(coordinator, group_id, None if value is None else json.loads(value))
    elif kind == MEMBER and len(rest) == 1:
        _replay_member(coordinator, group_id, rest[0], None if value is None else json.loads(value))
    else:
        return False
    return True


def _parse_assignment(data: dict[str, list[int]]) -> Assignment:
    return {uuid.UUID(topic): frozenset(parts) for topic, parts in data.items()}


def _parse_classic(data: LegacyClassicMetadata | None) -> ClassicMemberMetadata | None:
    if data is None:
        return None
    protocols = tuple((name, base64.b64decode(metadata)) for name, metadata in data["protocols"])
    return ClassicMemberMetadata(data["session_timeout_ms"], protocols)


def _replay_group(
    coordinator: ConsumerGroupCoordinator, group_id: str, data: LegacyGroupValue | None
) -> None:
    if data is None:
        coordinator.groups.pop(group_id, None)
        return
    group = coordinator.groups.setdefault(group_id, ConsumerGroup(group_id))
    group.group_epoch, group.assignment_epoch = data["group_epoch"], data["assignment_epoch"]
    group.update_subscription_metadata(
        {
            name: TopicMetadata(uuid.UUID(topic_id), name, partitions)
            for name, (topic_id, partitions) in data["subscription_metadata"].items()
        }
    )


def _replay_member(
    coordinator: ConsumerGroupCoordinator, group_id: str, member_id: str, data: LegacyMemberValue | None
) -> None:
    if data is None:  # a member of a group already gone (tombstoned before it) stays gone
        if (existing := coordinator.groups.get(group_id)) is not None:
            existing.remove_member(member_id)
        return
    group = coordinator.groups.setdefault(group_id, ConsumerGroup(group_id))
    member = ConsumerGroupMember(
        member_id,
        instance_id=data["instance_id"],
        rack_id=data["rack_id"],
        client_id=data["client_id"],
        client_host=data["client_host"],
        rebalance_timeout_ms=data["rebalance_timeout_ms"],
        subscribed_topic_names=tuple(data["subscribed_topic_names"]),
        subscribed_topic_regex=data["subscribed_topic_regex"],
        server_assignor=data["server_assignor"],
        state=MemberState(data["state"]),
        member_epoch=data["member_epoch"],
        previous_member_epoch=data["previous_member_epoch"],
        assigned=_parse_assignment(data["assigned"]),
        pending_revocation=_parse_assignment(data["pending_revocation"]),
        classic=_parse_classic(data.get("classic")),  # absent from records written before migration
    )
    group.update_member(member)
    group.target_assignment[member_id] = _parse_assignment(data["target"])
