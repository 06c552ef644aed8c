"""The stored form of a commit in ``__consumer_offsets``: Kafka's OffsetCommit record (key type 1), written
as GroupCoordinatorRecordHelpers.newOffsetCommitRecord and read at every version, and the JSON records
commits had before Kafka's format (still read, their keys tombstoned by the next write)."""

from __future__ import annotations

import json

from epochkraft.broker import group_record_serde as serde
from epochkraft.broker.group_coordinator import CommittedOffset


def offset_record_key(group_id: str, topic: str, partition: int) -> bytes:
    """Kafka's OffsetCommitKey (record type 1)."""
    return serde.key_bytes(serde.OffsetCommitKey(group_id, topic, partition))


def offset_record_value(committed: CommittedOffset | None) -> bytes | None:
    """Kafka's OffsetCommitValue at version 4, as GroupCoordinatorRecordHelpers.newOffsetCommitRecord
    writes it (no metadata is written as the empty string, as Kafka stores it)."""
    if committed is None:
        return None
    value = serde.OffsetCommitValue(
        committed.offset, committed.leader_epoch, committed.metadata or "", committed.commit_timestamp_ms
    )
    return serde.value_bytes(value)


def parse_offset_record(
    key: bytes, value: bytes | None
) -> tuple[str, str, int, CommittedOffset | None] | None:
    """(group, topic, partition, committed or None for a tombstone); None for keys of other record kinds.
    Reads Kafka's OffsetCommit records of every version and the JSON ones written before them."""
    if serde.is_json_record(key):
        return _parse_json_offset_record(key, value)
    record_key = serde.parse_key(key)
    if not isinstance(record_key, serde.OffsetCommitKey):
        return None
    committed = None
    record_value = None if value is None else serde.parse_value(serde.RecordType.OFFSET_COMMIT, value)
    if isinstance(record_value, serde.OffsetCommitValue):
        committed = CommittedOffset(
            record_value.offset,
            record_value.leader_epoch,
            record_value.metadata,
            record_value.commit_timestamp,
        )
    return record_key.group, record_key.topic, record_key.partition, committed


def json_offset_record_key(group_id: str, topic: str, partition: int) -> bytes:
    """The key commits had before Kafka's format: what a tombstone must also cover for an offset loaded
    from such a record, or compaction would keep it and a later load bring it back."""
    return json.dumps(["offset", group_id, topic, partition], separators=(",", ":")).encode()


def _parse_json_offset_record(
    key: bytes, value: bytes | None
) -> tuple[str, str, int, CommittedOffset | None] | None:
    try:
        kind, group_id, topic, partition = json.loads(key)
    except (ValueError, TypeError):
        return None
    if kind != "offset":
        return None
    if value is None:
        return group_id, topic, partition, None
    data = json.loads(value)
    return (
        group_id,
        topic,
        partition,
        CommittedOffset(data["offset"], data["leader_epoch"], data["metadata"], data["commit_timestamp_ms"]),
    )
