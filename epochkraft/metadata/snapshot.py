"""Metadata snapshots (KIP-630) in Kafka's checkpoint format, sans-IO: image -> records -> bytes and back.

``image_records`` is the shortest record list that rebuilds an image, in the order Kafka's
``MetadataImage.write`` emits it (features, cluster, topics, configs, client quotas, ACLs, SCRAM). ``encode_snapshot``
lays them out as Kafka's ``RecordsSnapshotWriter`` does: a control batch at offset 0 holding the
SnapshotHeaderRecord (``ControlRecordType.SNAPSHOT_HEADER`` = 3), the metadata records in RecordBatch v2
batches of at most ``KafkaRaftClient.MAX_BATCH_SIZE_BYTES`` with offsets following on, and a control
batch holding the SnapshotFooterRecord (``SNAPSHOT_FOOTER`` = 4); every batch carries the snapshot's
epoch. ``decode_snapshot`` refuses anything else (a bad CRC, a missing header or footer, offsets that do
not follow on), so a torn or corrupted file is never half loaded.

A snapshot id is Kafka's ``OffsetAndEpoch``: the end offset (the first offset NOT in the snapshot) and the
epoch of the last record in it; ``snapshot_filename`` is ``Snapshots.filenameFromSnapshotId`` + ``.checkpoint``.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from epochkraft.metadata.client_quotas import quota_entity
from epochkraft.metadata.image import MetadataImage
from epochkraft.protocol.errors import ProtocolError
from epochkraft.protocol.metadata_codec import decode_metadata_record, encode_metadata_record
from epochkraft.protocol.metadata_records import (
    AccessControlEntryRecord,
    BrokerEndpoint,
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from epochkraft.protocol.records import (
    CONTROL_KEY,
    Record,
    RecordBatch,
    control_batch,
    control_records_batch,
    decode_batch,
    encode_batch,
    iter_batches,
)
from epochkraft.security.authorizer import AclBinding

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETE_SUFFIX = ".checkpoint.deleted"
OFFSET_WIDTH, EPOCH_WIDTH = 20, 10
SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 3, 4  # Kafka's ControlRecordType
KRAFT_MEMBERSHIP = (5, 6)  # KRAFT_VERSION, KRAFT_VOTERS: follow the header in a dynamic quorum's snapshot
MAX_BATCH_SIZE_BYTES = (
    8 * 1024 * 1024
)  # KafkaRaftClient.MAX_BATCH_SIZE_BYTES, the snapshot writer's batch cap
_HEADER_VALUE = struct.Struct(">hqB")  # SnapshotHeaderRecord v0: version, last contained timestamp, no tags
_FOOTER_VALUE = struct.Struct(">hB")  # SnapshotFooterRecord v0: version, no tags


class SnapshotError(ProtocolError):
    """A snapshot file that is not a whole, valid checkpoint."""


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    end_offset: int  # the first offset not in the snapshot
    epoch: int

    @property
    def last_contained_offset(self) -> int:
        return self.end_offset - 1


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: SnapshotId
    last_contained_log_timestamp: int
    records: list[MetadataRecord]
    # a dynamic quorum's KRaftVersionRecord and VotersRecord, as (control type, value) in the order written
    membership: tuple[tuple[int, bytes], ...] = ()


def snapshot_filename(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:0{OFFSET_WIDTH}d}-{snapshot_id.epoch:0{EPOCH_WIDTH}d}{SUFFIX}"


def parse_snapshot_filename(name: str) -> tuple[SnapshotId, str] | None:
    """(id, suffix) for a snapshot file name (``.checkpoint``, ``.checkpoint.part`` or ``.deleted``)."""
    suffix = next((s for s in (PARTIAL_SUFFIX, DELETE_SUFFIX, SUFFIX) if name.endswith(s)), None)
    if suffix is None or len(name) < OFFSET_WIDTH + 1 + EPOCH_WIDTH or name[OFFSET_WIDTH] != "-":
        return None
    offset, epoch = name[:OFFSET_WIDTH], name[OFFSET_WIDTH + 1 : OFFSET_WIDTH + 1 + EPOCH_WIDTH]
    if not (offset.isdigit() and epoch.isdigit()):
        return None
    return SnapshotId(int(offset), int(epoch)), suffix


# ---- image -> records ---------------------------------------------------------------------------------
def copy_image(image: MetadataImage) -> MetadataImage:
    """A copy another thread can read while the original keeps changing: registrations, partitions,
    credentials and ACLs are immutable values, so copying the containers is enough (milliseconds for
    100,000 partitions)."""
    copy = MetadataImage(image.node_id)
    copy.brokers = dict(image.brokers)
    copy.topic_ids = dict(image.topic_ids)
    for topic_id, topic in image.topics.items():
        copy.topics[topic_id] = type(topic)(topic.name, topic.topic_id, topic.partitions)  # persistent
    copy.configs = {resource: dict(values) for resource, values in image.configs.items()}
    copy.scram_credentials = dict(image.scram_credentials)
    copy.acls = dict(image.acls)
    copy.next_producer_id = image.next_producer_id
    copy.client_quotas = {entity: dict(values) for entity, values in image.client_quotas.items()}
    copy.features = dict(image.features)
    return copy


def image_records(image: MetadataImage, metadata_version: int) -> list[MetadataRecord]:
    """The records that rebuild ``image`` from nothing: one per broker, topic, partition, config key,
    credential and ACL, each with its current state (Kafka's MetadataImage.write)."""
    features = {"metadata.version": metadata_version} | image.features
    records: list[MetadataRecord] = [
        FeatureLevelRecord(name=name, feature_level=level) for name, level in features.items()
    ]
    for broker in image.brokers.values():
        records.append(
            RegisterBrokerRecord(
                broker_id=broker.broker_id,
                incarnation_id=broker.incarnation_id,
                broker_epoch=broker.epoch,
                end_points=tuple(
                    BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in broker.endpoints
                ),
                rack=broker.rack,
                fenced=broker.fenced,
                in_controlled_shutdown=broker.in_controlled_shutdown,
            )
        )
    for topic in image.topics.values():
        records.append(TopicRecord(name=topic.name, topic_id=topic.topic_id))
        for index, partition in sorted(topic.partitions.items()):  # the map's own order is its hashes'
            records.append(
                PartitionRecord(
                    partition_id=index,
                    topic_id=topic.topic_id,
                    replicas=partition.replicas,
                    isr=partition.isr,
                    removing_replicas=partition.removing_replicas,
                    adding_replicas=partition.adding_replicas,
                    leader=partition.leader,
                    leader_recovery_state=int(partition.leader_recovery_state),
                    leader_epoch=partition.leader_epoch,
                    partition_epoch=partition.partition_epoch,
                    eligible_leader_replicas=partition.elr or None,
                    last_known_elr=partition.last_known_elr or None,
                )
            )
    for (resource_type, resource_name), values in image.configs.items():
        for name, value in values.items():
            records.append(
                ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=name, value=value)
            )
    for entity, quotas in image.client_quotas.items():  # Kafka's ClientQuotasImage.write
        entity_data = tuple(EntityData(entity_type=t, entity_name=name) for t, name in entity)
        for key, quota in quotas.items():
            records.append(ClientQuotaRecord(entity=entity_data, key=key, value=quota))
    for acl_id, acl in image.acls.items():
        records.append(acl_record(acl_id, acl))
    records.extend(image.scram_credentials.values())
    if image.next_producer_id >= 0:  # Kafka's ProducerIdsImage.write
        records.append(
            ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id)
        )
    return records


def acl_record(acl_id: uuid.UUID, acl: AclBinding) -> AccessControlEntryRecord:
    """The record that makes ``acl`` (an ACL binding) an ACL of the image under ``acl_id``."""
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=int(acl.resource_type),
        resource_name=acl.resource_name,
        pattern_type=int(acl.pattern_type),
        principal=acl.principal,
        host=acl.host,
        operation=int(acl.operation),
        permission_type=int(acl.permission_type),
    )


# ---- records <-> checkpoint bytes ---------------------------------------------------------------------
def encode_snapshot(
    snapshot_id: SnapshotId,
    records: list[MetadataRecord],
    *,
    last_contained_log_timestamp: int,
    now_ms: int,
    max_batch_bytes: int = MAX_BATCH_SIZE_BYTES,
    membership: tuple[tuple[int, bytes], ...] = (),
) -> list[bytes]:
    """The checkpoint file's batches: header control batch, record batches, footer control batch. A
    dynamic quorum's KRaftVersionRecord and VotersRecord (``membership``) go in the header's batch, after
    it (RecordsSnapshotWriter.Builder)."""
    epoch = snapshot_id.epoch
    header = _HEADER_VALUE.pack(0, last_contained_log_timestamp, 0)
    out = [control_records_batch(0, epoch, [(SNAPSHOT_HEADER, header), *membership], now_ms)]
    offset = 1 + len(membership)
    pending: list[Record] = []
    size = 0

    def flush() -> None:
        nonlocal offset, pending, size
        batch = RecordBatch(offset, epoch, 0, len(pending) - 1, now_ms, now_ms, records=pending)
        out.append(encode_batch(batch))
        offset += len(pending)
        pending, size = [], 0

    for record in records:
        value = encode_metadata_record(record)
        if pending and size + len(value) + 16 > max_batch_bytes:  # 16: a record's framing, at most
            flush()
        pending.append(Record(len(pending), 0, None, value))
        size += len(value) + 16
    if pending:
        flush()
    out.append(control_batch(offset, epoch, SNAPSHOT_FOOTER, _FOOTER_VALUE.pack(0, 0), now_ms))
    return out


def decode_snapshot(data: bytes | memoryview, snapshot_id: SnapshotId) -> Snapshot:
    """Reads a whole checkpoint (RecordsSnapshotReader with CRC validation); SnapshotError otherwise."""
    view = memoryview(data)
    records: list[MetadataRecord] = []
    timestamp: int | None = None
    footer = False
    membership: list[tuple[int, bytes]] = []
    expected_offset = 0
    end = 0
    try:
        for pos, header in iter_batches(view):
            if footer:
                raise SnapshotError("batches after the snapshot footer")
            if header.base_offset != expected_offset:
                raise SnapshotError(f"batch at offset {header.base_offset}, expected {expected_offset}")
            batch = decode_batch(view, pos)
            end = pos + header.size
            expected_offset = batch.next_offset
            if batch.is_control:
                for control_type, value in _control_records(batch):
                    if control_type == SNAPSHOT_HEADER and timestamp is None and pos == 0:
                        _version, timestamp, _tags = _HEADER_VALUE.unpack(value)
                    elif control_type == SNAPSHOT_FOOTER and timestamp is not None:
                        footer = True
                    elif control_type not in KRAFT_MEMBERSHIP or timestamp is None:
                        raise SnapshotError(f"unexpected control record type {control_type} at offset {pos}")
                    else:
                        membership.append((control_type, value))
                continue
            if timestamp is None:
                raise SnapshotError("the first batch is not a snapshot header")
            for record in batch.records:
                if record.value is None:
                    raise SnapshotError("metadata record without a value")
                records.append(decode_metadata_record(record.value))
    except (ProtocolError, struct.error) as exc:
        if isinstance(exc, SnapshotError):
            raise
        raise SnapshotError(f"corrupt snapshot: {exc}") from exc
    if timestamp is None:
        raise SnapshotError("no snapshot header")
    if not footer:
        raise SnapshotError("no snapshot footer (the snapshot is truncated)")
    if end != len(view):
        raise SnapshotError(f"{len(view) - end} bytes after the snapshot footer")
    return Snapshot(snapshot_id, timestamp, records, tuple(membership))


def _control_records(batch: RecordBatch) -> list[tuple[int, bytes]]:
    out = []
    for record in batch.records:
        if record.key is None or len(record.key) != CONTROL_KEY.size:
            raise SnapshotError("a control record without a 4-byte control key")
        version, control_type = CONTROL_KEY.unpack(record.key)
        if version != 0:
            raise SnapshotError(f"control record key version {version}")
        value = record.value or b""
        expected = {SNAPSHOT_HEADER: _HEADER_VALUE.size, SNAPSHOT_FOOTER: _FOOTER_VALUE.size}.get(
            control_type
        )
        if expected is not None and len(value) != expected:
            raise SnapshotError(f"control record {control_type} of {len(value)} bytes")
        out.append((control_type, value))
    return out


def removals_for(image: MetadataImage, records: list[MetadataRecord]) -> list[MetadataRecord]:
    """The records that take out of ``image`` what a snapshot of ``records`` no longer holds: applied
    before the snapshot's records, they turn an image that fell behind a log's start into the snapshot's
    (a broker that missed deletions while away). Partitions go with their topics, as in Kafka."""
    topics, brokers, acls, scram, configs, quotas = set(), set(), set(), set(), set(), set()
    for record in records:
        if isinstance(record, TopicRecord):
            topics.add(record.topic_id)
        elif isinstance(record, RegisterBrokerRecord):
            brokers.add(record.broker_id)
        elif isinstance(record, AccessControlEntryRecord):
            acls.add(record.id)
        elif isinstance(record, UserScramCredentialRecord):
            scram.add((record.name, record.mechanism))
        elif isinstance(record, ConfigRecord):
            configs.add((record.resource_type, record.resource_name, record.name))
        elif isinstance(record, ClientQuotaRecord) and not record.remove:
            quotas.add((quota_entity((e.entity_type, e.entity_name) for e in record.entity), record.key))
    out: list[MetadataRecord] = [RemoveTopicRecord(topic_id=t) for t in image.topics if t not in topics]
    out += [
        UnregisterBrokerRecord(broker_id=b, broker_epoch=r.epoch)
        for b, r in image.brokers.items()
        if b not in brokers
    ]
    out += [RemoveAccessControlEntryRecord(id=a) for a in image.acls if a not in acls]
    out += [
        RemoveUserScramCredentialRecord(name=u, mechanism=m)
        for u, m in image.scram_credentials
        if (u, m) not in scram
    ]
    out += [
        ConfigRecord(resource_type=kind, resource_name=name, name=key, value=None)
        for (kind, name), values in image.configs.items()
        for key in values
        if (kind, name, key) not in configs
    ]
    out += [
        ClientQuotaRecord(
            entity=tuple(EntityData(entity_type=t, entity_name=name) for t, name in entity),
            key=key,
            remove=True,
        )
        for entity, values in image.client_quotas.items()
        for key in values
        if (entity, key) not in quotas
    ]
    return out
