"""A decoder of the Produce request body (v3-v13) whose records are views into the request frame.

kio's reader copies each partition's records into a new ``bytes`` and walks the body twice (the length
pre-check of ``guard.check_lengths``, then its own read): at 100 B records that was a tenth of a broker's
work under produce load. This reader walks the body once, as Kafka's generated ProduceRequestData.read
does, and hands out each partition's records as a read-only ``memoryview`` of the frame, building kio's
own classes for the version, so the handler sees what kio would have given it. A view of an immutable
``bytes`` frame keeps it alive as long as the records are held; a frame that is not ``bytes`` (a large
frame received into a reused mapping, valid only until the next read) gets its records copied out, as
kio's reader does, so nothing outlives it.

It only reads what it is sure of: tagged fields, a null array or topic name, a negative length, a string
over Kafka's 32,767 bytes, bad UTF-8, or bytes that end too soon give None, and the caller decodes with
kio as before, whose answers (errors included) stay the word.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import struct
import uuid
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, TypeVar

from epochkraft.protocol.guard import MAX_STRING_BYTES

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from epochkraft.protocol import request_types as rt

PRODUCE_KEY = 0
FIRST_VERSION, LAST_VERSION = 3, 13
FIRST_FLEXIBLE = 9
TOPIC_IDS_FROM = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_NO_UUID = bytes(16)


class _Unsure(Exception):
    """What this reader leaves to kio."""


_Entity = TypeVar("_Entity", bound="Entity")  # a kio class: the request, a topic's or a partition's data


def _maker(cls: type[_Entity]) -> Callable[..., _Entity]:
    """Builds a kio entity from its fields' values in their order, setting its slots directly as kio's
    own reader does: the frozen dataclass's ``__init__`` (an ``object.__setattr__`` per field) took half
    of this reader's time. The two-field entities (a topic, a partition), one per partition, get a maker
    without a loop."""
    setters = tuple(getattr(cls, f.name).__set__ for f in dataclasses.fields(cls))
    new = object.__new__
    if len(setters) == 2:
        set_first, set_second = setters

        def make_pair(first: object, second: object) -> _Entity:
            entity = new(cls)
            set_first(entity, first)
            set_second(entity, second)
            return entity

        return make_pair

    def make(*values: object) -> _Entity:
        entity = new(cls)
        for setter, value in zip(setters, values, strict=True):
            setter(entity, value)
        return entity

    return make


@cache
def _makers(version: int) -> tuple[Callable[..., rt.Produce], Callable[..., Entity], Callable[..., Entity]]:
    """Makers of kio's ProduceRequest, TopicProduceData and PartitionProduceData of ``version``."""
    from epochkraft.protocol.framing import request_class

    request: type[rt.Produce] = request_class(PRODUCE_KEY, version)
    schema = importlib.import_module(request.__module__)
    topic: type[Entity] = schema.TopicProduceData
    partition: type[Entity] = schema.PartitionProduceData
    return _maker(request), _maker(topic), _maker(partition)


class _Body:
    """A cursor over one request body; any doubt raises _Unsure."""

    __slots__ = ("copy", "data", "flexible", "pos", "view")

    def __init__(self, data: bytes | memoryview, pos: int, flexible: bool) -> None:
        self.data = data
        self.view = memoryview(data).toreadonly()
        self.pos = pos
        self.flexible = flexible
        self.copy = type(data) is not bytes  # a view of a buffer that is reused: records are copied out

    def need(self, size: int) -> int:
        start = self.pos
        if size < 0 or start + size > len(self.data):
            raise _Unsure
        self.pos = start + size
        return start

    def uvarint(self) -> int:
        data, pos = self.data, self.pos
        if pos < len(data) and data[pos] < 0x80:  # most are one byte
            self.pos = pos + 1
            return data[pos]
        value, shift = 0, 0
        while True:
            if pos >= len(data) or shift > 28:
                raise _Unsure
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return value
            shift += 7

    def int16(self) -> int:
        return int(_I16.unpack_from(self.data, self.need(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.data, self.need(4))[0])

    def length(self) -> int:
        """A string's, array's or byte string's length; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.int32()

    def string(self, nullable: bool) -> str | None:
        size = self.uvarint() - 1 if self.flexible else self.int16()
        if size < 0:
            if size == -1 and nullable:
                return None
            raise _Unsure
        if size > MAX_STRING_BYTES:
            raise _Unsure
        start = self.need(size)
        try:
            return str(self.view[start : start + size], "utf-8")
        except UnicodeDecodeError:
            raise _Unsure from None

    def topic_id(self) -> uuid.UUID | None:
        start = self.need(16)
        raw = bytes(self.view[start : start + 16])
        return None if raw == _NO_UUID else uuid.UUID(bytes=raw)

    def records(self) -> bytes | memoryview | None:
        size = self.length()
        if size == -1:
            return None
        start = self.need(size)
        records = self.view[start : start + size]
        return bytes(records) if self.copy else records

    def no_tagged_fields(self) -> None:
        if self.flexible and self.uvarint() != 0:
            raise _Unsure

    def count(self) -> int:
        """An array's element count; each element takes at least one byte, as guard.check_lengths."""
        size = self.length()
        if size < 0 or size > len(self.data) - self.pos:
            raise _Unsure
        return size


def decode_produce_request(data: bytes | memoryview, version: int, body_start: int) -> rt.Produce | None:
    """kio's ProduceRequest of ``version`` read from ``data[body_start:]``, records as views of ``data``;
    None where kio is to decode it (see the module's doc). Trailing bytes are ignored, as kio's are."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    try:
        return _read(_Body(data, body_start, version >= FIRST_FLEXIBLE), version)
    except _Unsure:
        return None


def _read(body: _Body, version: int) -> rt.Produce:
    """Fields in ProduceRequest.json's order; kio's classes have them in that order too."""
    make_request, make_topic, make_partition = _makers(version)
    transactional_id = body.string(nullable=True)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(body.data, body.need(_ACKS_TIMEOUT.size))
    topics = []
    for _ in range(body.count()):
        topic = body.topic_id() if version >= TOPIC_IDS_FROM else body.string(nullable=False)
        partitions = []
        for _ in range(body.count()):
            index = body.int32()
            partitions.append(make_partition(index, body.records()))
            body.no_tagged_fields()
        body.no_tagged_fields()
        topics.append(make_topic(topic, tuple(partitions)))
    body.no_tagged_fields()
    timeout = datetime.timedelta(milliseconds=timeout_ms)
    return make_request(transactional_id, acks, timeout, tuple(topics))
