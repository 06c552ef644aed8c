"""Raft entries as RecordBatches, as Kafka keeps ``__cluster_metadata``: a metadata batch is an entry of
one offset per record (its partition leader epoch the Raft epoch); a new leader's LeaderChangeMessage is a
control batch of one record (ControlRecordType 2, LeaderChangeMessage v0 with its version prefix, as
KafkaRaftClient.onBecomeLeader and ControlRecordUtils write it). A dynamic quorum's KRaftVersionRecord
(ControlRecordType 5) and VotersRecord (6, each voter with its directory id, endpoints and supported
kraft.version range) are control batches of one record each too here; Kafka puts the two a new leader writes
from the bootstrap checkpoint in its LeaderChangeMessage's batch, and such a batch of several control
records is read record by record (each at its own offset). Used for the log on disk, snapshots and
Fetch between voters.
"""

from __future__ import annotations

import struct

from kio.schema.k_raft_version_record.v0 import data as kraft_version_schema
from kio.schema.types import BrokerId
from kio.schema.voters_record.v0 import data as voters_schema
from kio.static.primitive import i16, u16

from epochkraft.protocol.errors import ProtocolError
from epochkraft.protocol.framing import decode_entity, encode_entity, read_uvarint, write_uvarint
from epochkraft.protocol.records import control_batch, decode_batch, parse_header, whole_batches
from epochkraft.raft.log import ControlRecord, LeaderChangeMessage, LogEntry
from epochkraft.raft.voter_set import (
    KRAFT_VERSION_0,
    KRAFT_VERSION_1,
    Endpoint,
    KRaftVersionRecord,
    ReplicaKey,
    VoterSet,
    VotersRecord,
)

LEADER_CHANGE = 2  # Kafka's ControlRecordType.LEADER_CHANGE
KRAFT_VERSION, KRAFT_VOTERS = 5, 6  # ControlRecordType.KRAFT_VERSION and KRAFT_VOTERS
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


def encode_voters(voters: VoterSet) -> bytes:
    """VotersRecord v0 (its version field first, as Kafka's ControlRecordUtils writes it)."""
    record = voters_schema.VotersRecord(
        version=i16(0),
        voters=tuple(
            voters_schema.Voter(
                voter_id=BrokerId(key.id),
                voter_directory_id=key.directory_id,
                endpoints=tuple(
                    voters_schema.Endpoint(name=e.name, host=e.host, port=u16(e.port))
                    for e in voters.endpoints_of(key.id)
                ),
                k_raft_version_feature=voters_schema.KRaftVersionFeature(
                    min_supported_version=i16(KRAFT_VERSION_0), max_supported_version=i16(KRAFT_VERSION_1)
                ),
            )
            for key in voters.voters
        ),
    )
    return encode_entity(record)


def decode_voters(value: bytes) -> VoterSet:
    record = decode_entity(voters_schema.VotersRecord, value)
    if record.version != 0 or not record.voters:
        raise MetadataLogError(f"VotersRecord version {record.version} with {len(record.voters)} voters")
    try:
        return VoterSet(
            tuple(ReplicaKey(v.voter_id, v.voter_directory_id) for v in record.voters),
            tuple(
                (v.voter_id, tuple(Endpoint(e.name, e.host, e.port) for e in v.endpoints))
                for v in record.voters
            ),
        )
    except ValueError as exc:  # two voters with one id
        raise MetadataLogError(str(exc)) from exc


def encode_kraft_version(version: int) -> bytes:
    return encode_entity(kraft_version_schema.KRaftVersionRecord(version=i16(0), k_raft_version=i16(version)))


def decode_kraft_version(value: bytes) -> int:
    record = decode_entity(kraft_version_schema.KRaftVersionRecord, value)
    if record.version != 0 or record.k_raft_version not in (KRAFT_VERSION_0, KRAFT_VERSION_1):
        raise MetadataLogError(
            f"KRaftVersionRecord version {record.version}, kraft.version {record.k_raft_version}"
        )
    return int(record.k_raft_version)


def membership_record(control_type: int, value: bytes) -> VotersRecord | KRaftVersionRecord | None:
    """The KRaftVersionRecord or VotersRecord a control record holds (None: another control type)."""
    if control_type == KRAFT_VOTERS:
        return VotersRecord(decode_voters(value))
    if control_type == KRAFT_VERSION:
        return KRaftVersionRecord(decode_kraft_version(value))
    return None


def membership_batch(base_offset: int, epoch: int, value: VotersRecord | KRaftVersionRecord) -> bytes:
    if isinstance(value, VotersRecord):
        return control_batch(base_offset, epoch, KRAFT_VOTERS, encode_voters(value.voters), 0)
    return control_batch(base_offset, epoch, KRAFT_VERSION, encode_kraft_version(value.kraft_version), 0)


def entry_batch(entry: LogEntry, base_offset: int) -> bytes:
    """The RecordBatch of an entry that starts at ``base_offset``."""
    if isinstance(entry.value, LeaderChangeMessage):
        # timestamp 0: every voter writes the same bytes for the same entry
        return control_batch(base_offset, entry.epoch, LEADER_CHANGE, encode_leader_change(entry.value), 0)
    if isinstance(entry.value, VotersRecord | KRaftVersionRecord):
        return membership_batch(base_offset, entry.epoch, entry.value)
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
    epoch = header.partition_leader_epoch
    if header.is_control:
        batch = decode_batch(data)
        decoded: list[ControlRecord] = []
        for record in batch.records:
            key = record.key or b""
            control_type = struct.unpack(">hh", key)[1] if len(key) == 4 else -1
            value: ControlRecord | None = None
            if control_type == LEADER_CHANGE and record.value is not None:
                value = decode_leader_change(record.value)
            else:
                value = membership_record(control_type, record.value or b"")
            if value is None:
                raise MetadataLogError(
                    f"control batch at offset {header.base_offset}: a record of control type {control_type}, "
                    "not a LeaderChangeMessage, KRaftVersionRecord or VotersRecord"
                )
            decoded.append(value)
        if not decoded or len(decoded) != header.last_offset_delta + 1:
            raise MetadataLogError(
                f"control batch at offset {header.base_offset} does not hold one record per offset"
            )
        if len(decoded) == 1:
            return LogEntry(epoch, decoded[0], 1)
        # several control records in one batch, as Kafka's new leader writes LeaderChangeMessage,
        # KRaftVersionRecord and VotersRecord: kept as the leader's bytes, each record at its offset
        return LogEntry(epoch, bytes(data), len(decoded), tuple(decoded))
    return LogEntry(epoch, bytes(data), header.last_offset_delta + 1)


def split_batches(data: bytes | memoryview) -> list[bytes]:
    """Whole, CRC-valid batches from the front of ``data`` (stops at the first bad or torn one)."""
    return [bytes(data[pos : pos + header.size]) for pos, header in whole_batches(data)]


def snapshot_membership(voters: VoterSet | None, kraft_version: int) -> tuple[tuple[int, bytes], ...]:
    """The control records a snapshot holds after its header (RecordsSnapshotWriter.Builder): the
    kraft.version and the voter set when kraft.version is 1, none in a static quorum."""
    if kraft_version < KRAFT_VERSION_1:
        return ()
    out = [(KRAFT_VERSION, encode_kraft_version(kraft_version))]
    if voters is not None:
        out.append((KRAFT_VOTERS, encode_voters(voters)))
    return tuple(out)


def read_membership(records: tuple[tuple[int, bytes], ...]) -> tuple[VoterSet | None, int]:
    """(voter set, kraft.version) from a snapshot's control records ((None, 0) when it has none)."""
    voters: VoterSet | None = None
    version = KRAFT_VERSION_0
    for control_type, value in records:
        record = membership_record(control_type, value)
        if isinstance(record, VotersRecord):
            voters = record.voters
        elif isinstance(record, KRaftVersionRecord):
            version = record.kraft_version
    return voters, version
