"""The classic protocol's embedded consumer protocol: a member's Subscription in its JoinGroup metadata and
its Assignment in SyncGroup, as Kafka's ConsumerProtocol (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, versions 0-3), for a classic member inside a KIP-848 consumer group.

A newer version than 3 is read as version 3 (its extra fields are ignored), as Kafka's ConsumerProtocol does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PROTOCOL_TYPE = "consumer"
LATEST_VERSION = 3


class MalformedConsumerProtocol(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: dict[str, frozenset[int]] | None = None  # topic name -> partitions (v1+)
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def take(self, fmt: str) -> int:
        try:
            (value,) = struct.unpack_from(fmt, self.data, self.position)
        except struct.error as exc:
            raise MalformedConsumerProtocol(str(exc)) from None
        self.position += struct.calcsize(fmt)
        return int(value)

    def string(self, nullable: bool = False) -> str | None:
        length = self.take(">h")
        if length < 0:
            if nullable:
                return None
            raise MalformedConsumerProtocol("null string")
        raw = self.data[self.position : self.position + length]
        if len(raw) != length:
            raise MalformedConsumerProtocol("string past the end")
        self.position += length
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise MalformedConsumerProtocol(str(exc)) from None

    def name(self) -> str:
        value = self.string()
        assert value is not None
        return value

    def bytes_(self) -> bytes | None:
        length = self.take(">i")
        if length < 0:
            return None
        raw = self.data[self.position : self.position + length]
        if len(raw) != length:
            raise MalformedConsumerProtocol("bytes past the end")
        self.position += length
        return raw

    def count(self) -> int:
        """An array's length; every array of the consumer protocol is non-nullable, so -1 is malformed
        (Kafka's generated readers refuse it)."""
        length = self.take(">i")
        if length < 0:
            raise MalformedConsumerProtocol("non-nullable array serialized as null")
        return length

    def topic_partitions(self) -> dict[str, frozenset[int]]:
        result: dict[str, frozenset[int]] = {}
        for _ in range(self.count()):
            topic = self.name()
            partitions = frozenset(self.take(">i") for _ in range(self.count()))
            result[topic] = result.get(topic, frozenset()) | partitions
        return result


def version_of(data: bytes) -> int:
    """ConsumerProtocol.deserializeVersion, capped at the latest version known here."""
    return min(_Reader(data).take(">h"), LATEST_VERSION)


def parse_subscription(data: bytes) -> Subscription:
    reader = _Reader(data)
    version = reader.take(">h")
    if version < 0:
        raise MalformedConsumerProtocol(f"negative version {version}")
    topics = tuple(reader.name() for _ in range(reader.count()))
    user_data = reader.bytes_()
    owned = reader.topic_partitions() if version >= 1 else None
    generation = reader.take(">i") if version >= 2 else -1
    rack = reader.string(nullable=True) if version >= 3 else None
    return Subscription(topics, user_data, owned, generation, rack)


def parse_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The assigned partitions by topic name (an empty assignment, b"", assigns nothing)."""
    return parse_assignment_with_user_data(data)[0]


def parse_assignment_with_user_data(data: bytes) -> tuple[dict[str, frozenset[int]], bytes | None]:
    """The assigned partitions by topic name and the assignor's user data (None when null or absent)."""
    if not data:
        return {}, None
    reader = _Reader(data)
    if reader.take(">h") < 0:
        raise MalformedConsumerProtocol("negative version")
    partitions = reader.topic_partitions()
    user_data = reader.bytes_() if reader.position < len(data) else None
    return partitions, user_data


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def serialize_assignment(partitions: dict[str, frozenset[int]], version: int) -> bytes:
    """ConsumerProtocol.serializeAssignment: the partitions in ``version`` (the member's subscription
    version), no user data."""
    out = [struct.pack(">hi", min(max(version, 0), LATEST_VERSION), len(partitions))]
    for topic in sorted(partitions):
        parts = sorted(partitions[topic])
        out.append(_string(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts))
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def serialize_subscription(
    topics: tuple[str, ...], owned: dict[str, frozenset[int]] | None = None, version: int = 1
) -> bytes:
    """A Subscription as a client writes it (tests and tools)."""
    out = [struct.pack(">hi", version, len(topics)), *(_string(t) for t in topics), struct.pack(">i", -1)]
    if version >= 1:
        owned = owned or {}
        out.append(struct.pack(">i", len(owned)))
        for topic in sorted(owned):
            parts = sorted(owned[topic])
            out.append(_string(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts))
    if version >= 2:
        out.append(struct.pack(">i", -1))
    if version >= 3:
        out.append(struct.pack(">h", -1))
    return b"".join(out)
