"""Consumer groups (KIP-848) as records in ``__consumer_offsets``, so a new coordinator resumes them.

Kafka writes ConsumerGroupMetadata (the group epoch), ConsumerGroupPartitionMetadata (the subscribed
topics' metadata), ConsumerGroupTargetAssignmentMetadata (the assignment epoch), and per member
ConsumerGroupMemberMetadata (its subscription), ConsumerGroupTargetAssignmentMember and
ConsumerGroupCurrentMemberAssignment (its epochs, state and partitions). Here the same facts go in two
record kinds, JSON like the offset commits: one per group (``["consumer-group", group]``: the epochs and
the subscription metadata) and one per member (``["consumer-group-member", group, member]``: its
subscription, epochs, state, partitions and target). A tombstone removes a member or the group; the topic
is compacted, so only each key's latest value is kept.

``records_to_write`` compares a group with what was last written for it and returns only the changed
keys; ``replay`` rebuilds groups from the stored records, in order, when a broker becomes coordinator.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from epochkraft.broker.assignors import Assignment
from epochkraft.broker.consumer_group import ConsumerGroup, ConsumerGroupCoordinator, TopicMetadata
from epochkraft.broker.current_assignment import ClassicMemberMetadata, ConsumerGroupMember, MemberState

GROUP, MEMBER = "consumer-group", "consumer-group-member"
Record = tuple[bytes, bytes | None]


def _key(*parts: str) -> bytes:
    return json.dumps(list(parts), separators=(",", ":")).encode()


def _assignment(assignment: Assignment) -> dict[str, list[int]]:
    return {str(topic): sorted(parts) for topic, parts in sorted(assignment.items())}


def _parse_assignment(data: dict[str, list[int]]) -> Assignment:
    return {uuid.UUID(topic): frozenset(parts) for topic, parts in data.items()}


def _group_value(group: ConsumerGroup) -> bytes:
    return json.dumps(
        {
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "subscription_metadata": {
                name: [str(t.topic_id), t.num_partitions]
                for name, t in sorted(group.subscription_metadata.items())
            },
        },
        separators=(",", ":"),
    ).encode()


def _member_value(member: ConsumerGroupMember, target: Assignment) -> bytes:
    return json.dumps(
        {
            "instance_id": member.instance_id,
            "rack_id": member.rack_id,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "rebalance_timeout_ms": member.rebalance_timeout_ms,
            "subscribed_topic_names": list(member.subscribed_topic_names),
            "subscribed_topic_regex": member.subscribed_topic_regex,
            "server_assignor": member.server_assignor,
            "state": str(member.state),
            "member_epoch": member.member_epoch,
            "previous_member_epoch": member.previous_member_epoch,
            "assigned": _assignment(member.assigned),
            "pending_revocation": _assignment(member.pending_revocation),
            "target": _assignment(target),
            "classic": _classic_value(member.classic),
        },
        separators=(",", ":"),
    ).encode()


def _classic_value(classic: ClassicMemberMetadata | None) -> dict[str, Any] | None:
    """A classic protocol member's session timeout and JoinGroup protocols (Kafka's ClassicMemberMetadata)."""
    if classic is None:
        return None
    return {
        "session_timeout_ms": classic.session_timeout_ms,
        "protocols": [[name, base64.b64encode(metadata).decode()] for name, metadata in classic.protocols],
    }


def _parse_classic(data: dict[str, Any] | None) -> ClassicMemberMetadata | None:
    if data is None:
        return None
    protocols = tuple((name, base64.b64decode(metadata)) for name, metadata in data["protocols"])
    return ClassicMemberMetadata(data["session_timeout_ms"], protocols)


def group_records(group: ConsumerGroup) -> dict[bytes, bytes]:
    """Every record that describes the group as it is now."""
    records = {_key(GROUP, group.group_id): _group_value(group)}
    for member_id, member in group.members.items():
        target = group.target_assignment.get(member_id, {})
        records[_key(MEMBER, group.group_id, member_id)] = _member_value(member, target)
    return records


def records_to_write(group: ConsumerGroup | None, written: dict[bytes, bytes]) -> list[Record]:
    """What changed since ``written`` (a group of None: every key tombstoned). Tombstones come first, as
    Kafka's replaceMember writes them: on replay a member removed after its successor was stored would
    take the successor's partition epochs with it. A group's own tombstone comes after its members' (as
    Kafka's createGroupTombstoneRecords)."""
    current = group_records(group) if group is not None else {}
    gone = sorted((k for k in written if k not in current), key=lambda k: json.loads(k)[0] == GROUP)
    changed: list[Record] = [(k, None) for k in gone]
    changed += [(k, v) for k, v in current.items() if written.get(k) != v]
    return changed


def replay(coordinator: ConsumerGroupCoordinator, key: bytes, value: bytes | None) -> bool:
    """Applies one stored record; False for keys of other kinds (offset commits)."""
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


def _replay_group(coordinator: ConsumerGroupCoordinator, group_id: str, data: dict[str, Any] | None) -> None:
    if data is None:
        coordinator.groups.pop(group_id, None)
        return
    group = coordinator.groups.setdefault(group_id, ConsumerGroup(group_id))
    group.group_epoch, group.assignment_epoch = data["group_epoch"], data["assignment_epoch"]
    group.subscription_metadata = {
        name: TopicMetadata(uuid.UUID(topic_id), name, partitions)
        for name, (topic_id, partitions) in data["subscription_metadata"].items()
    }


def _replay_member(
    coordinator: ConsumerGroupCoordinator, group_id: str, member_id: str, data: dict[str, Any] | None
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
