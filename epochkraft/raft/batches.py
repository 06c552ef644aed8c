"""Raft entries as RecordBatches, as Kafka keeps ``__cluster_metadata``: a metadata batch is an entry of
one offset per record (its partition leader epoch the Raft epoch); a new leader's LeaderChangeMessage is a
control batch of one record (ControlRecordType 2, LeaderChangeMessage v0 with its version prefix, as
KafkaRaftClient.onBecomeLeader and ControlRecordUtils write it). Used for the log on disk and for Fetch
between voters.
"""

from __future__ import annotations

import struct

from epochkraft.metadata.snapshot import control_batch
from epochkraft.protocol.errors import ProtocolError
from epochkraft.protocol.framing import read_uvarint, write_uvarint
from epochkraft.protocol.records import decode_batch, parse_header, whole_batches
from epochkraft.raft.log import LeaderChangeMessage, LogEntry

LEADER_CHANGE = 2  # Kafka's ControlRecordType.LEADER_CHANGE
_VERSION = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class MetadataLogError(ProtocolError):
    """Bytes that are not a Raft entry of the metadata log."""


def encode_leader_change(message: LeaderChangeMessage) -> bytes:
    """LeaderChangeMessage v0 (flexible) with its version prefix, as MessageUtil.toVersionPrefixedBytes."""
    out = bytearray(_VERSION.pack(0))
    out += _INT32.pack(message.leader_id)
    for voters in (message.voters, message.granting_voters):
        write_uvarint(out, len(voters) + 1)
        for voter in voters:
            out += _INT32.pack(voter)
            out.append(0)  # Voter's tagged fields
    out.append(0)  # tagged fields
    return bytes(out)


def decode_leader_change(value: bytes) -> LeaderChangeMessage:
    view = memoryview(value)
    if len(view) < 6 or _VERSION.unpack_from(view)[0] != 0:
        raise MetadataLogError("not a LeaderChangeMessage v0")
    leader_id = _INT32.unpack_from(view, 2)[0]
    pos = 6
    lists: list[tuple[int, ...]] = []
    for _ in range(2):
        count, pos = read_uvarint(view, pos)
        ids = []
        for _ in range(count - 1):
            ids.append(_INT32.unpack_from(view, pos)[0])
            pos += 5  # the id and an empty tagged-field section
        lists.append(tuple(ids))
    return LeaderChangeMessage(leader_id, lists[0], lists[1])


def entry_batch(entry: LogEntry, base_offset: int) -> bytes:
    """The RecordBatch of an entry that starts at ``base_offset``."""
    if isinstance(entry.value, LeaderChangeMessage):
        # timestamp 0: every voter writes the same bytes for the same entry
        return control_batch(base_offset, entry.epoch, LEADER_CHANGE, encode_leader_change(entry.value), 0)
    if not isinstance(entry.value, bytes):
        # VotersRecord and KRaftVersionRecord: only a dynamic quorum writes them, which the daemon does not run
        raise MetadataLogError(f"no batch encoding for {type(entry.value).__name__} yet")
    header = parse_header(entry.value)
    if header.base_offset != base_offset or header.partition_leader_epoch != entry.epoch:
        raise MetadataLogError(
            f"batch at offset {header.base_offset} epoch {header.partition_leader_epoch} appended at "
            f"offset {base_offset} epoch {entry.epoch}"
        )
    return entry.value


def batch_entry(data: bytes) -> LogEntry:
    """A RecordBatch (as read from disk or a Fetch answer) as a Raft entry."""
    header = parse_header(data)
    if header.is_control:
        batch = decode_batch(data)
        for record in batch.records:
            key = record.key or b""
            if len(key) == 4 and struct.unpack(">hh", key)[1] == LEADER_CHANGE and record.value is not None:
                return LogEntry(header.partition_leader_epoch, decode_leader_change(record.value), 1)
        raise MetadataLogError(f"control batch at offset {header.base_offset} is not a LeaderChangeMessage")
    return LogEntry(header.partition_leader_epoch, bytes(data), header.last_offset_delta + 1)


def split_batches(data: bytes | memoryview) -> list[bytes]:
    """Whole, CRC-valid batches from the front of ``data`` (stops at the first bad or torn one)."""
    return [bytes(data[pos : pos + header.size]) for pos, header in whole_batches(data)]
