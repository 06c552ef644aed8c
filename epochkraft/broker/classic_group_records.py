"""Classic groups as records in ``__consumer_offsets``: Kafka's GroupMetadata record (type 2), written and
replayed as GroupMetadataManager does, so a new coordinator resumes a group at its generation with its
members.

``group_metadata_value`` is GroupCoordinatorRecordHelpers.newGroupMetadataRecord: the protocol type,
generation, protocol, leader, when the group entered its state, and per member its ids, client, timeouts,
its metadata in the chosen protocol and its assignment (none for an Empty group). ``group_from_record`` is
ClassicGroup.fromRecord: Stable with the members, or Empty without (a rebalance in progress is never
stored). When the records are written is the group service's (the leader's SyncGroup, a group left Empty,
a deletion, a conversion); the sessions of the loaded members are armed by ``GroupCoordinator.on_loaded``.
"""

from __future__ import annotations

from collections.abc import Mapping

from epochkraft.broker import group_record_serde as serde
from epochkraft.broker.group_coordinator import Group, GroupState, Member


def group_metadata_key(group_id: str) -> bytes:
    """Kafka's GroupMetadataKey (record type 2)."""
    return serde.key_bytes(serde.GroupMetadataKey(group_id))


def group_metadata_value(group: Group, assignments: Mapping[str, bytes]) -> serde.GroupMetadataValue:
    """The group with each member's assignment from ``assignments`` (empty if it has none)."""
    protocol = group.protocol_name
    members = tuple(
        serde.GroupMetadataMember(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.metadata_for(protocol or ""),
            assignments.get(m.member_id, b""),
        )
        for m in group.members.values()
    )
    timestamp = -1 if group.state_timestamp_ms is None else group.state_timestamp_ms
    return serde.GroupMetadataValue(
        group.protocol_type or "", group.generation_id, protocol, group.leader_id, timestamp, members
    )


def synced_value(group: Group) -> serde.GroupMetadataValue:
    """The group with the assignments its members were last given (ClassicGroup.createClassicGroupRecords)."""
    return group_metadata_value(group, {m.member_id: m.synced_assignment for m in group.members.values()})


def parse(key: bytes, value: bytes | None) -> tuple[str, serde.GroupMetadataValue | None] | None:
    """(group, its value or None for a tombstone); None for keys of other record kinds."""
    if serde.is_json_record(key):
        return None
    record_key = serde.parse_key(key)
    if not isinstance(record_key, serde.GroupMetadataKey):
        return None
    if value is None:
        return record_key.group, None
    record_value = serde.parse_value(serde.RecordType.GROUP_METADATA, value)
    assert isinstance(record_value, serde.GroupMetadataValue)
    return record_key.group, record_value


def group_from_record(group_id: str, value: serde.GroupMetadataValue) -> Group:
    """ClassicGroup.fromRecord: an empty protocol type is none; an Empty group's state time is when it
    became empty, so its offsets expire as if it had stayed on this coordinator (without one, each from its
    commit); the static members are mapped by their instance ids again."""
    members = {m.member_id: _loaded_member(m, value.protocol or "") for m in value.members}
    timestamp = None if value.current_state_timestamp == -1 else value.current_state_timestamp
    return Group(
        group_id,
        state=GroupState.STABLE if members else GroupState.EMPTY,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader,
        members=members,
        static_members={
            m.group_instance_id: m.member_id for m in members.values() if m.group_instance_id is not None
        },
        # unknown in records of versions 0 and 1: each offset then expires from its commit, as Kafka's
        # OffsetExpirationCondition without a state timestamp, not from this load
        empty_since_ms=None if members else (timestamp or 0),
        state_timestamp_ms=timestamp,
    )


def _loaded_member(member: serde.GroupMetadataMember, protocol: str) -> Member:
    """The chosen protocol alone; a rebalance timeout of -1 (a version 0 record) is the session timeout."""
    rebalance_timeout = member.session_timeout if member.rebalance_timeout == -1 else member.rebalance_timeout
    return Member(
        member.member_id,
        member.group_instance_id,
        member.client_id,
        member.client_host,
        member.session_timeout,
        rebalance_timeout,
        ((protocol, member.subscription),),
        last_heartbeat_ms=0,
        assignment=member.assignment,
        synced_assignment=member.assignment,
    )
