"""``__transaction_state``'s records in Kafka's format (TransactionLogKey, TransactionLogValue) and the
transaction states (Kafka's TransactionState), with the partition a transactional id maps to.

Key: int16 version 0, then TransactionalId (int16-length string). Value version 0 (written, as Kafka with
``transaction.version`` below 2): ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
TransactionStatus int8, TransactionPartitions (nullable array of topic + int32 partitions),
TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64. Version 1 (flexible: compact
strings and arrays), written from ``transaction.version`` 1 on as Kafka's
TransactionVersion.transactionLogValueVersion, adds tagged fields PreviousProducerId (0), NextProducerId
(1) and ClientTransactionVersion (2), each written only when not its default. A null value (tombstone)
forgets the transactional id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from epochkraft.broker.group_coordinator import coordinator_partition

TRANSACTION_STATE_TOPIC = "__transaction_state"
TopicPartition = tuple[str, int]


class TransactionState(IntEnum):
    """Kafka's TransactionState, by the id stored as TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_last_update_timestamp_ms: int
    txn_start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def transaction_partition(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``."""
    return coordinator_partition(transactional_id, num_partitions)


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def key_bytes(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def value_bytes(value: TransactionLogValue | None, version: int = 0) -> bytes | None:
    """Version 0 or 1 (flexible, with the tagged fields); Kafka writes a null partition list for Empty,
    as here."""
    if value is None:
        return None
    flexible = version >= 1
    out = bytearray(
        struct.pack(
            ">hqhib", version, value.producer_id, value.producer_epoch, value.txn_timeout_ms, value.state
        )
    )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    if value.state == TransactionState.EMPTY:
        out += _varint(0) if flexible else struct.pack(">i", -1)
    else:
        out += _varint(len(by_topic) + 1) if flexible else struct.pack(">i", len(by_topic))
        for topic, indexes in by_topic.items():
            out += _compact_string(topic) if flexible else _string(topic)
            out += _varint(len(indexes) + 1) if flexible else struct.pack(">i", len(indexes))
            out += struct.pack(f">{len(indexes)}i", *indexes)
            out += _varint(0) if flexible else b""  # the element's tagged fields
    out += struct.pack(">qq", value.txn_last_update_timestamp_ms, value.txn_start_timestamp_ms)
    if flexible:
        out += _tagged_fields(value)
    return bytes(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(value: str) -> bytes:
    data = value.encode()
    return _varint(len(data) + 1) + data


def _tagged_fields(value: TransactionLogValue) -> bytes:
    """PreviousProducerId (tag 0), NextProducerId (1), ClientTransactionVersion (2), when not default."""
    fields = [
        (tag, data)
        for tag, data, default in (
            (0, struct.pack(">q", value.previous_producer_id), value.previous_producer_id == -1),
            (1, struct.pack(">q", value.next_producer_id), value.next_producer_id == -1),
            (2, struct.pack(">h", value.client_transaction_version), value.client_transaction_version == 0),
        )
        if not default
    ]
    out = bytearray(_varint(len(fields)))
    for tag, data in fields:
        out += _varint(tag) + _varint(len(data)) + data
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data, self.pos, self.flexible = data, 0, flexible

    def unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def length(self) -> int:
        """An array's or string's length; -1 for null."""
        return self.varint() - 1 if self.flexible else self.unpack(">i")

    def string(self) -> str:
        size = self.varint() - 1 if self.flexible else self.unpack(">h")
        text = self.data[self.pos : self.pos + size].decode()
        self.pos += size
        return text

    def skip_tags(self) -> None:
        self.tags()

    def tags(self) -> dict[int, bytes]:
        """A tagged-field section: tag -> its bytes (none before the flexible versions)."""
        found: dict[int, bytes] = {}
        if self.flexible:
            for _ in range(self.varint()):
                tag, size = self.varint(), self.varint()
                found[tag] = self.data[self.pos : self.pos + size]
                self.pos += size
        return found


def parse_key(key: bytes) -> str | None:
    """The transactional id of a TransactionLogKey; None for a key of another version."""
    reader = _Reader(key)
    if reader.unpack(">h") != 0:
        return None
    return reader.string()


def parse_value(value: bytes | None) -> TransactionLogValue | None:
    if value is None:
        return None
    version = struct.unpack_from(">h", value)[0]
    reader = _Reader(value, flexible=version >= 1)
    reader.pos = 2
    producer_id, epoch = reader.unpack(">q"), reader.unpack(">h")
    timeout, status = reader.unpack(">i"), reader.unpack(">b")
    partitions: set[TopicPartition] = set()
    for _ in range(max(0, reader.length())):
        topic = reader.string()
        partitions |= {(topic, reader.unpack(">i")) for _ in range(reader.length())}
        reader.skip_tags()
    last_update, start = reader.unpack(">q"), reader.unpack(">q")
    tags = reader.tags()
    return TransactionLogValue(
        producer_id,
        epoch,
        timeout,
        TransactionState(status),
        frozenset(partitions),
        last_update,
        start,
        _tagged_int(tags, 0, ">q", -1),
        _tagged_int(tags, 1, ">q", -1),
        _tagged_int(tags, 2, ">h", 0),
    )


def _tagged_int(tags: dict[int, bytes], tag: int, fmt: str, default: int) -> int:
    return int(struct.unpack(fmt, tags[tag])[0]) if tag in tags else default
