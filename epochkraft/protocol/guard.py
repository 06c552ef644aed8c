"""A length pre-check of request bodies before kio decodes them.

kio's native reader reserves memory for an array from its declared element count before reading the
elements; a hostile count (say 2^31) makes that reservation fail and aborts the whole process. This pass
walks a body by the same schema, checking only lengths and counts: every string, byte string, record set
and array must fit in the bytes that remain (each array element takes at least one byte), so an
impossible length becomes a ProtocolError on that connection instead of a dead daemon.

In a request it also refuses a string longer than 32,767 bytes, as Kafka's generated parsers do (``string
field X had invalid length N``): a compact string's varint length could say more, a Kafka broker closes the
connection. Responses are not held to it: our own daemons may answer longer strings (an error message
echoing a long config value), and their clients must read them.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from functools import cache
from typing import Any

from epochkraft.protocol.errors import ProtocolError

FIXED = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint16": 2,
    "uint32": 4,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_I16 = struct.Struct(">h")
MAX_STRING_BYTES = 0x7FFF  # Kafka's generated readers: a string's length is at most a short's
_I32 = struct.Struct(">i")


# Steps of a compiled plan: consecutive fixed-size fields fold into one FIXED step, so a body is checked
# with a few calls per entity rather than one per field.
FIXED_STEP, VALUE_STEP, ENTITY_STEP, ARRAY_STEP, NULLABLE_ENTITY_STEP = range(5)


@cache
def _plan(cls: type) -> tuple[tuple[int, Any, Any], ...]:
    """(step kind, argument, element argument or a value's field name) for the fields a version's body
    carries outside tags."""
    hints = typing.get_type_hints(cls)
    flexible = bool(getattr(cls, "__flexible__", False))
    plan: list[tuple[int, Any, Any]] = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata and flexible:
            continue  # tagged fields live in the tagged section
        hint = hints[f.name]
        nullable = typing.get_origin(hint) in (typing.Union, types.UnionType)
        if nullable:
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        is_array = typing.get_origin(hint) is tuple
        inner = typing.get_args(hint)[0] if is_array else hint
        if typing.get_origin(inner) in (typing.Union, types.UnionType):
            inner = next(a for a in typing.get_args(inner) if a is not type(None))
        nested = inner if dataclasses.is_dataclass(inner) else None
        kafka_type = f.metadata.get("kafka_type")
        if is_array:
            plan.append((ARRAY_STEP, nested, (kafka_type, f.name)))
        elif nested is not None:
            # A nullable struct (DescribeTopicPartitions' cursor) is prefixed by an int8: -1 null, 1 present.
            plan.append((NULLABLE_ENTITY_STEP if nullable else ENTITY_STEP, nested, None))
        elif kafka_type in FIXED:
            if plan and plan[-1][0] == FIXED_STEP:
                plan[-1] = (FIXED_STEP, plan[-1][1] + FIXED[kafka_type], None)
            else:
                plan.append((FIXED_STEP, FIXED[kafka_type], None))
        else:
            plan.append((VALUE_STEP, kafka_type, f.name))
    return tuple(plan)


class _Reader:
    def __init__(self, data: bytes | memoryview, pos: int, flexible: bool, max_string_bytes: int) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible
        self.max_string_bytes = max_string_bytes

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"declared length {n} exceeds the {len(self.data) - self.pos} bytes left")
        self.pos += n

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise ProtocolError("truncated varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise ProtocolError("varint too long")

    def length(self, legacy: struct.Struct) -> int:
        """A string/bytes length or array count; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        if self.pos + legacy.size > len(self.data):
            raise ProtocolError("truncated length")
        (value,) = legacy.unpack_from(self.data, self.pos)
        self.pos += legacy.size
        return value

    def value(self, kafka_type: str | None, name: str) -> None:
        if kafka_type in FIXED:
            self.need(FIXED[kafka_type])
        elif kafka_type == "string":
            size = self.length(_I16)
            if size > self.max_string_bytes:
                raise ProtocolError(f"string field {name} had invalid length {size}")
            if size > 0:
                self.need(size)
        elif kafka_type in ("bytes", "records"):
            size = self.length(_I32)
            if size > 0:
                self.need(size)
        else:
            raise ProtocolError(f"unknown field type {kafka_type}")

    def entity(self, cls: type) -> None:
        for kind, arg, element in _plan(cls):
            if kind == FIXED_STEP:
                self.need(arg)
            elif kind == ARRAY_STEP:
                count = self.length(_I32)
                if count > len(self.data) - self.pos:
                    raise ProtocolError(
                        f"array of {count} elements cannot fit in {len(self.data) - self.pos} bytes"
                    )
                if count <= 0:
                    continue
                kafka_type, name = element
                if arg is not None:
                    for _ in range(count):
                        self.entity(arg)
                elif kafka_type in FIXED:
                    self.need(count * FIXED[kafka_type])
                else:
                    for _ in range(count):
                        self.value(kafka_type, name)
            elif kind == ENTITY_STEP:
                self.entity(arg)
            elif kind == NULLABLE_ENTITY_STEP:
                if self.pos >= len(self.data):
                    raise ProtocolError("truncated nullable struct marker")
                present = self.data[self.pos] != 0xFF
                self.pos += 1
                if present:
                    self.entity(arg)
            else:
                self.value(arg, element)
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.need(self.uvarint())


def check_lengths(cls: type, data: bytes | memoryview, offset: int = 0, *, request: bool = False) -> None:
    """ProtocolError if any declared length or count in the body cannot fit in the bytes present, or, in a
    ``request``, if a string is longer than Kafka's parsers take."""
    max_string_bytes = MAX_STRING_BYTES if request else len(data)
    _Reader(data, offset, bool(getattr(cls, "__flexible__", False)), max_string_bytes).entity(cls)
