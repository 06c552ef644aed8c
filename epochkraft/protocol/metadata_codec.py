"""Encodes and decodes KRaft metadata records, interpreting Kafka's JSON schemas field by field.

A record value is: unsigned varint frame version (1), unsigned varint apiKey, unsigned varint record
version, then the record in the flexible encoding of that version (compact strings and arrays, tagged
fields written only when they differ from their default). Records travel in ordinary RecordBatch v2
batches of ``__cluster_metadata``.
"""

from __future__ import annotations

import dataclasses
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING, TypeAlias, cast

from epochkraft.protocol import metadata_records as records_module
from epochkraft.protocol.errors import ProtocolError
from epochkraft.protocol.framing import read_uvarint as _read_uvarint
from epochkraft.protocol.framing import write_uvarint as _write_uvarint
from epochkraft.protocol.metadata_records import RECORD_TYPES, MetadataRecord
from epochkraft.protocol.metadata_schema import FieldSpec, RecordSchema, StructSpec, all_schemas
from epochkraft.protocol.records import Record, RecordBatch, decode_batch, encode_batch, iter_batches

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# A field's value in a record: a scalar of the field's schema type, a nested struct (a generated dataclass) or a
# tuple of either; which one is known only from the schema at run time.
FieldValue: TypeAlias = (
    "int | float | bool | str | bytes | uuid.UUID | DataclassInstance | tuple[FieldValue, ...] | None"
)
FRAME_VERSION = 1
_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "float64": struct.Struct(">d"),
}


class MetadataRecordError(ProtocolError):
    """A metadata record that does not decode under its schema."""


# ---- schema helpers -------------------------------------------------------------------------------
@cache
def _schema_by_key(api_key: int) -> RecordSchema:
    for schema in all_schemas().values():
        if schema.api_key == api_key:
            return schema
    raise MetadataRecordError(f"unknown metadata record type {api_key}")


_TYPE_DEFAULTS: dict[str, FieldValue] = {
    "bool": False,
    "string": "",
    "uuid": records_module.ZERO_UUID,
    "bytes": b"",
    "float64": 0.0,
}


def _default(field: FieldSpec) -> FieldValue:
    if field.default == "null":
        return None
    if field.is_array:
        return ()
    if field.default is not None:
        if field.type == "bool":
            return field.default.lower() == "true"
        if field.type == "string":
            return field.default
        return int(field.default, 0)
    return _TYPE_DEFAULTS.get(field.type, 0)


def _struct_class(struct_spec: StructSpec) -> type:
    return getattr(records_module, struct_spec.name)


# ---- encoding -------------------------------------------------------------------------------------
def _wrong_type(kind: str, value: object) -> TypeError:
    return TypeError(f"a {type(value).__name__} in a {kind} field")


# Writers are compiled once per (struct, version) into closures: the controller encodes a record for every
# partition change, and walking the schema per record was most of its AlterPartition time.
Writer: TypeAlias = Callable[[bytearray, FieldValue], None]
_STRUCT_WRITERS: dict[tuple[int, int], Writer] = {}  # by (id of an immortal StructSpec, version)


def _scalar_writer(kind: str, struct_spec: StructSpec | None, version: int, nullable: bool) -> Writer:
    fixed = _FIXED.get(kind)
    if fixed is not None:
        pack = fixed.pack

        def write_fixed(out: bytearray, value: FieldValue) -> None:
            out += pack(value)

        return write_fixed
    if kind == "bool":
        return lambda out, value: out.append(1 if value else 0)
    if kind == "string":

        def write_string(out: bytearray, value: FieldValue) -> None:
            if value is None:
                if not nullable:
                    raise ValueError("null in a non-nullable string field")
                out.append(0)
                return
            if not isinstance(value, str):
                raise _wrong_type("string", value)
            data = value.encode()
            _write_uvarint(out, len(data) + 1)
            out += data

        return write_string
    if kind == "bytes":

        def write_bytes(out: bytearray, value: FieldValue) -> None:
            if value is None:
                out.append(0)
                return
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise _wrong_type("bytes", value)
            _write_uvarint(out, len(value) + 1)
            out += value

        return write_bytes
    if kind == "uuid":

        def write_uuid(out: bytearray, value: FieldValue) -> None:
            if not isinstance(value, uuid.UUID):
                raise _wrong_type("uuid", value)
            out += value.bytes

        return write_uuid
    if struct_spec is not None:
        return _struct_writer(struct_spec, version)
    raise ValueError(f"unsupported field type {kind}")


def _field_writer(field: FieldSpec, version: int) -> Writer:
    if not field.is_array:
        return _scalar_writer(field.type, field.struct, version, version in field.nullable)
    fixed = _FIXED.get(field.element_type)
    if fixed is not None:
        code = fixed.format[1:]

        def write_fixed_array(out: bytearray, value: FieldValue) -> None:
            if value is None:
                out.append(0)
                return
            if not isinstance(value, (tuple, list)):
                raise _wrong_type("array", value)
            _write_uvarint(out, len(value) + 1)
            out += struct.pack(f">{len(value)}{code}", *value)

        return write_fixed_array
    write_item = _scalar_writer(field.element_type, field.struct, version, False)

    def write_array(out: bytearray, value: FieldValue) -> None:
        if value is None:
            out.append(0)
            return
        if not isinstance(value, (tuple, list)):
            raise _wrong_type("array", value)
        _write_uvarint(out, len(value) + 1)
        for item in value:
            write_item(out, item)

    return write_array


def _struct_writer(spec: StructSpec, version: int) -> Writer:
    key = (id(spec), version)
    writer = _STRUCT_WRITERS.get(key)
    if writer is not None:
        return writer
    regular: list[tuple[str, Writer]] = []
    tagged: list[tuple[int, str, FieldValue, Writer]] = []
    for field in spec.fields:
        if version not in field.versions:
            continue
        if version in field.tagged:
            tagged.append((int(field.tag or 0), field.name, _default(field), _field_writer(field, version)))
        else:
            regular.append((field.name, _field_writer(field, version)))
    tagged.sort(key=lambda entry: entry[0])

    def write_struct(out: bytearray, obj: FieldValue) -> None:
        for name, write in regular:
            write(out, getattr(obj, name))
        present = []
        for tag, name, default, write in tagged:
            value = getattr(obj, name)
            if value is not default and value != default:
                present.append((tag, write, value))
        _write_uvarint(out, len(present))
        for tag, write, value in present:
            buf = bytearray()
            write(buf, value)
            _write_uvarint(out, tag)
            _write_uvarint(out, len(buf))
            out += buf

    _STRUCT_WRITERS[key] = write_struct
    return write_struct


@cache
def _record_writer(api_key: int, version: int | None) -> tuple[bytes, Writer]:
    """(frame version, api key and version as varints; the struct writer) for one record version."""
    schema = _schema_by_key(api_key)
    version = schema.valid.high if version is None else version
    if version is None or version not in schema.valid:
        raise ValueError(f"{schema.name} has no version {version}")
    prefix = bytearray()
    for value in (FRAME_VERSION, schema.api_key, version):
        _write_uvarint(prefix, value)
    return bytes(prefix), _struct_writer(schema.struct, version)


def encode_metadata_record(record: MetadataRecord, version: int | None = None) -> bytes:
    prefix, write = _record_writer(record.API_KEY, version)
    out = bytearray(prefix)
    write(out, record)
    return bytes(out)


# ---- decoding -------------------------------------------------------------------------------------
def _read_scalar(
    data: memoryview, pos: int, kind: str, struct_spec: StructSpec | None, version: int
) -> tuple[FieldValue, int]:
    fixed = _FIXED.get(kind)
    if fixed is not None:
        if pos + fixed.size > len(data):
            raise MetadataRecordError(f"truncated {kind}")
        return fixed.unpack_from(data, pos)[0], pos + fixed.size
    if kind == "bool":
        if pos >= len(data):
            raise MetadataRecordError("truncated bool")
        return data[pos] != 0, pos + 1
    if kind in ("string", "bytes"):
        length, pos = _read_uvarint(data, pos)
        if length == 0:
            return None, pos
        end = pos + length - 1
        if end > len(data):
            raise MetadataRecordError(f"{kind} runs past the end of the record")
        raw = bytes(data[pos:end])
        if kind == "bytes":
            return raw, end
        try:
            return raw.decode(), end
        except UnicodeDecodeError as exc:
            raise MetadataRecordError("string is not UTF-8") from exc
    if kind == "uuid":
        if pos + 16 > len(data):
            raise MetadataRecordError("truncated uuid")
        return uuid.UUID(bytes=bytes(data[pos : pos + 16])), pos + 16
    raise MetadataRecordError(f"unsupported field type {kind}")


# Readers are compiled once per (struct, version) too: replaying a log or loading a snapshot decodes a
# record per partition change, and walking the schema per record was most of that time.
Reader: TypeAlias = Callable[[memoryview, int], tuple[FieldValue, int]]
_STRUCT_READERS: dict[tuple[int, int], Reader] = {}  # by (id of an immortal StructSpec, version)


def _scalar_reader(kind: str, struct_spec: StructSpec | None, version: int) -> Reader:
    fixed = _FIXED.get(kind)
    if fixed is not None:
        size, unpack = fixed.size, fixed.unpack_from

        def read_fixed(data: memoryview, pos: int) -> tuple[FieldValue, int]:
            if pos + size > len(data):
                raise MetadataRecordError(f"truncated {kind}")
            return unpack(data, pos)[0], pos + size

        return read_fixed
    if kind in ("bool", "string", "bytes", "uuid"):
        return lambda data, pos: _read_scalar(data, pos, kind, None, version)
    if struct_spec is not None:
        return _struct_reader(struct_spec, version)
    raise MetadataRecordError(f"unsupported field type {kind}")


def _field_reader(field: FieldSpec, version: int) -> Reader:
    if not field.is_array:
        return _scalar_reader(field.type, field.struct, version)
    fixed = _FIXED.get(field.element_type)
    read_item = _scalar_reader(field.element_type, field.struct, version)

    def read_array(data: memoryview, pos: int) -> tuple[FieldValue, int]:
        count, pos = _read_uvarint(data, pos)
        if count == 0:
            return None, pos
        n = count - 1
        if n > len(data) - pos:
            raise MetadataRecordError(f"array of {n} items cannot fit in {len(data) - pos} bytes")
        if fixed is not None:
            end = pos + n * fixed.size
            if end > len(data):
                raise MetadataRecordError(f"truncated {field.element_type}")
            return struct.unpack_from(f">{n}{fixed.format[1:]}", data, pos), end
        items = []
        for _ in range(n):
            item, pos = read_item(data, pos)
            items.append(item)
        return tuple(items), pos

    return read_array


def _struct_reader(spec: StructSpec, version: int) -> Reader:
    key = (id(spec), version)
    reader = _STRUCT_READERS.get(key)
    if reader is not None:
        return reader
    regular: list[tuple[str, Reader]] = []
    by_tag: dict[int, tuple[FieldSpec, Reader]] = {}
    for field in spec.fields:
        if version not in field.versions:
            continue
        if version in field.tagged:
            by_tag[int(field.tag or 0)] = (field, _field_reader(field, version))
        else:
            regular.append((field.name, _field_reader(field, version)))
    cls = _struct_class(spec)

    def read_struct(data: memoryview, pos: int) -> tuple[FieldValue, int]:
        values: dict[str, FieldValue] = {}
        for name, read in regular:
            values[name], pos = read(data, pos)
        count, pos = _read_uvarint(data, pos)
        for _ in range(count):
            tag, pos = _read_uvarint(data, pos)
            size, pos = _read_uvarint(data, pos)
            end = pos + size
            if end > len(data):
                raise MetadataRecordError("tagged field runs past the end of the record")
            known = by_tag.get(tag)
            if known is not None:  # unknown tags are skipped, as the flexible format requires
                field, read = known
                values[field.name], used = read(data[:end], pos)
                if used != end:
                    raise MetadataRecordError(f"tagged field {field.kafka_name} has {end - used} extra bytes")
            pos = end
        try:
            return cls(**values), pos
        except TypeError as exc:
            raise MetadataRecordError(f"cannot build {spec.name}: {exc}") from exc

    _STRUCT_READERS[key] = read_struct
    return read_struct


def decode_metadata_record_with_version(data: bytes | memoryview) -> tuple[MetadataRecord, int]:
    view = memoryview(data)
    frame_version, pos = _read_uvarint(view, 0)
    if frame_version != FRAME_VERSION:
        raise MetadataRecordError(f"unsupported frame version {frame_version}")
    api_key, pos = _read_uvarint(view, pos)
    version, pos = _read_uvarint(view, pos)
    if api_key not in RECORD_TYPES:
        raise MetadataRecordError(f"unknown metadata record type {api_key}")
    schema = _schema_by_key(api_key)
    if version not in schema.valid:
        raise MetadataRecordError(f"{schema.name} has no version {version}")
    record, pos = _struct_reader(schema.struct, version)(view, pos)
    if pos != len(view):
        raise MetadataRecordError(f"{len(view) - pos} trailing bytes after {schema.name}")
    # a record schema's struct builds its generated record class (an identity check: isinstance against
    # the 18-class union costs a replayed record up to 0.4 us)
    if type(record) is not RECORD_TYPES[api_key]:
        raise MetadataRecordError(f"{schema.name} decoded as a {type(record).__name__}")
    return cast(MetadataRecord, record), version


def decode_metadata_record(data: bytes | memoryview) -> MetadataRecord:
    return decode_metadata_record_with_version(data)[0]


# ---- batches --------------------------------------------------------------------------------------
def metadata_batch(
    base_offset: int, records: list[MetadataRecord], *, leader_epoch: int = 0, timestamp_ms: int | None = None
) -> bytes:
    """A RecordBatch v2 holding ``records`` (keys null) starting at ``base_offset``."""
    if not records:
        raise ValueError("a metadata batch needs at least one record")
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    batch = RecordBatch(
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        attributes=0,
        last_offset_delta=len(records) - 1,
        base_timestamp=ts,
        max_timestamp=ts,
        records=[Record(i, 0, None, encode_metadata_record(r)) for i, r in enumerate(records)],
    )
    return encode_batch(batch)


def read_metadata_batches(buf: bytes | memoryview) -> Iterator[tuple[int, MetadataRecord]]:
    """(offset, record) for every record of every batch in ``buf``; control batches (a Raft leader's
    LeaderChangeMessage) hold no metadata records and are skipped, as Kafka's MetadataLoader does."""
    for batch in metadata_batches(buf):
        yield from batch


def metadata_batches(buf: bytes | memoryview) -> Iterator[list[tuple[int, MetadataRecord]]]:
    """The (offset, record) pairs of ``buf`` batch by batch: a batch is one controller write, the unit
    Kafka's MetadataLoader publishes."""
    for pos, header in iter_batches(buf):
        if header.is_control:
            continue
        batch = decode_batch(buf, pos)
        records = []
        for record in batch.records:
            if record.value is None:
                raise MetadataRecordError("metadata record without a value")
            records.append((batch.offset_of(record), decode_metadata_record(record.value)))
        yield records


def record_fields(record: MetadataRecord) -> dict[str, FieldValue]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
