"""Fetch responses (key 1) encoded and decoded here rather than by kio, because they carry the records.

- ``encode_response`` (the broker answering, v4-v18) returns pieces: encoded fields and each partition's
  record buffers as the log read them, which the server writes to the socket without joining. kio's
  single-buffer encoding took about an eighth of a broker's time under RF 3 produce load.
- ``decode_partitions`` (a follower reading its leader's answer, v13-v16) yields the top level (error,
  fetch session id) and each partition with its records as a view into the received frame, so they reach
  the follower's log without a copy.
Tests compare both with kio at every version.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.protocol.framing import read_uvarint, skip_tagged_fields, write_uvarint

TopicKey: TypeAlias = uuid.UUID | str | None  # the topic id (v13+; None for the zero id) or the name (older)


class Answer(NamedTuple):
    """One partition of the response."""

    index: int  # type: ignore[assignment]  # the partition's index (it hides tuple.index, never called)
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: Sequence[bytes | memoryview] = ()  # never null: Kafka answers an error with empty records
    diverging: tuple[int, int] | None = None  # (epoch, end offset) for a diverging follower, v12+
    current_leader: tuple[int, int] | None = None  # (leader, epoch): KIP-951's hint, v12+ (sent from v16)
    last_stable_offset: int | None = None  # None: the high watermark (no transaction open)
    # (producer id, first offset) of each aborted transaction in a read_committed answer's range
    aborted_transactions: Sequence[tuple[int, int]] = ()


_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_TOP = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id (v7+)
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable offset, log start (v5+)
_PARTITION_V4 = struct.Struct(">ihqq")
_EPOCH_END = struct.Struct(">iq")  # DivergingEpoch: epoch, end offset
_ABORTED = struct.Struct(">qq")  # AbortedTransaction: producer id, first offset


# Errors Kafka answers before reading a log (KafkaApis.handleFetchRequest's ``erroneous`` partitions, from
# FetchResponse.partitionResponse): aborted transactions keep their default (empty, not null).
UNREAD_ERRORS = frozenset(
    {ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id, ErrorCode.topic_authorization_failed}
)


def _tagged(out: bytearray, fields: list[tuple[int, bytes]]) -> None:
    """A tagged-field section: the count, then each field's tag, size and bytes, tags in order."""
    write_uvarint(out, len(fields))
    for tag, payload in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(payload))
        out += payload


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = bytearray()
    write_uvarint(data, len(value.encode()) + 1)
    return bytes(data) + value.encode()


def _node_endpoints(nodes: Sequence[tuple[int, str, int, str | None]]) -> bytes:
    """NodeEndpoints (v16+, KIP-951): node id, host, port, rack, each with no tagged fields."""
    data = bytearray()
    write_uvarint(data, len(nodes) + 1)
    for node_id, host, port, rack in nodes:
        data += _I32.pack(node_id) + _compact_string(host) + _I32.pack(port) + _compact_string(rack) + b"\x00"
    return bytes(data)


def _topic_id(topic: TopicKey) -> bytes:
    """A topic as v13+ names it; the zero id (decoded as None) is echoed back, with UNKNOWN_TOPIC_ID."""
    if isinstance(topic, uuid.UUID):
        return topic.bytes
    if topic is None:
        return bytes(16)
    raise TypeError(f"topic {topic!r} by name in a version that names topics by id")


def _topic_name(topic: TopicKey) -> str:
    if isinstance(topic, uuid.UUID):
        raise TypeError(f"topic {topic} by id in a version that names topics by name")
    return topic or ""


def encode_response(
    version: int,
    topics: Sequence[tuple[TopicKey, list[Answer]]],
    read_committed: bool = False,
    node_endpoints: Sequence[tuple[int, str, int, str | None]] = (),
    error_code: int = ErrorCode.none,
    session_id: int = 0,
) -> list[bytes | memoryview]:
    """The response body as pieces: encoded fields, and each partition's record buffers as the log read
    them, which the server writes to the socket without joining. ``topics`` holds (topic id for v13+,
    else name; answers). Tests compare the joined bytes with kio's at every version. Aborted
    transactions are null unless the fetch is read_committed and the log was read (then those of the range
    read), as Kafka's KafkaApis.handleFetchRequest sets them from the log read's ``abortedTransactions``
    option, which a read that failed leaves empty (ReplicaManager.readFromLog's error result); a partition
    refused before any read (unknown topic, id or partition) has the schema's default, an empty array
    (FetchResponse.partitionResponse). ``error_code`` and ``session_id`` (v7+) say what
    became of the request's fetch session (KIP-227)."""
    flexible = version >= 12
    pieces: list[bytes | memoryview] = []
    out = bytearray()

    def length(n: int) -> None:  # array, string or bytes length; -1 is null
        if flexible:
            write_uvarint(out, n + 1)
        else:
            out.extend(_I32.pack(n))

    out += _TOP.pack(0, error_code, session_id) if version >= 7 else _I32.pack(0)
    length(len(topics))
    for topic, answers in topics:
        if version >= 13:
            out += _topic_id(topic)
        else:
            name = _topic_name(topic).encode()
            if flexible:
                length(len(name))
            else:
                out += _I16.pack(len(name))
            out += name
        length(len(answers))
        for a in answers:
            lso = a.high_watermark if a.last_stable_offset is None else a.last_stable_offset
            if version >= 5:
                out += _PARTITION.pack(a.index, a.error, a.high_watermark, lso, a.log_start_offset)
            else:
                out += _PARTITION_V4.pack(a.index, a.error, a.high_watermark, lso)
            if (read_committed and a.error == ErrorCode.none) or a.error in UNREAD_ERRORS:
                length(len(a.aborted_transactions))
                for producer_id, first_offset in a.aborted_transactions:
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        out.append(0)
            else:
                length(-1)
            if version >= 11:
                out += _I32.pack(-1)  # preferred read replica
            # Records are never null: librdkafka rejects a -1 MessageSetSize as a parse failure.
            length(sum(map(len, a.records)))
            if a.records:
                pieces.append(bytes(out))
                pieces.extend(a.records)
                out = bytearray()
            if flexible:
                fields = []
                if a.diverging is not None:
                    fields.append((0, _EPOCH_END.pack(*a.diverging) + b"\x00"))
                if a.current_leader is not None and a.current_leader != (-1, -1):  # the default is left out
                    fields.append(
                        (1, _I32.pack(a.current_leader[0]) + _I32.pack(a.current_leader[1]) + b"\x00")
                    )
                _tagged(out, fields)
        if flexible:
            out.append(0)  # topic tagged fields
    if flexible:
        _tagged(out, [(0, _node_endpoints(node_endpoints))] if version >= 16 and node_endpoints else [])
    pieces.append(bytes(out))
    return pieces


def session_of(version: int, pieces: Sequence[bytes | memoryview]) -> tuple[int, int]:
    """The top-level error code and session id of an encoded response (none and 0 before v7)."""
    if version < 7 or not pieces:
        return ErrorCode.none, 0
    _throttle, error, session_id = _TOP.unpack_from(pieces[0], 0)
    return error, session_id


def throttled(
    version: int, pieces: Sequence[bytes | memoryview], session_id: int
) -> list[bytes | memoryview]:
    """The empty answer a throttled Fetch gets instead of ``pieces``: their top-level error, and the
    session id the fetch session keeps (FetchContext.getThrottledResponse)."""
    error, _built_with = session_of(version, pieces)
    return encode_response(version, [], error_code=error, session_id=session_id)


class FetchedPartition(NamedTuple):
    """One partition of a leader's answer to a follower."""

    topic_id: uuid.UUID
    index: int  # type: ignore[assignment]  # the partition's index (it hides tuple.index, never called)
    error: int
    high_watermark: int
    records: memoryview | None  # a view into the received frame: use it before the next frame arrives
    diverging: tuple[int, int] | None  # (epoch, end offset)
    log_start_offset: int = -1


class FetchedResponse(NamedTuple):
    """A leader's answer to a follower: the top level and the partitions it names (with a fetch session,
    only those that changed)."""

    error: int
    session_id: int
    throttle_time_ms: int
    partitions: list[FetchedPartition]


def decode_partitions(frame: bytes | memoryview, pos: int) -> FetchedResponse:
    """The top-level error code and session id and every partition of a v13-v16 response body starting at
    ``pos``; ProtocolError on anything malformed."""
    view = memoryview(frame)
    try:
        return _decode(view, pos)
    except (struct.error, IndexError, ValueError) as exc:
        raise ProtocolError(f"malformed Fetch response: {exc}") from exc


def _decode(view: memoryview, pos: int) -> FetchedResponse:
    throttle_ms, error, session_id = _TOP.unpack_from(view, pos)
    pos += _TOP.size
    partitions: list[FetchedPartition] = []
    topics, pos = _count(view, pos)
    for _ in range(topics):
        topic_id = uuid.UUID(bytes=bytes(view[pos : pos + 16]))
        pos += 16
        count, pos = _count(view, pos)
        for _ in range(count):
            index, p_error, hw, _lso, log_start = _PARTITION.unpack_from(view, pos)
            pos += _PARTITION.size
            aborted, pos = _count(view, pos)
            for _ in range(max(aborted, 0)):
                pos = skip_tagged_fields(view, pos + 16)  # producer id, first offset
            pos += 4  # preferred read replica
            size, pos = read_uvarint(view, pos)
            records = None
            if size:
                end = pos + size - 1
                if end > len(view):
                    raise ProtocolError("Fetch response records run past the frame")
                records, pos = view[pos:end], end
            diverging = None
            tags, pos = read_uvarint(view, pos)
            for _ in range(tags):
                tag, pos = read_uvarint(view, pos)
                tag_size, pos = read_uvarint(view, pos)
                if tag == 0:  # DivergingEpoch
                    diverging = _EPOCH_END.unpack_from(view, pos)
                pos += tag_size
            partitions.append(FetchedPartition(topic_id, index, p_error, hw, records, diverging, log_start))
        pos = skip_tagged_fields(view, pos)
    skip_tagged_fields(view, pos)
    return FetchedResponse(error, session_id, throttle_ms, partitions)


def _count(view: memoryview, pos: int) -> tuple[int, int]:
    """A compact array length (-1: null)."""
    n, pos = read_uvarint(view, pos)
    return n - 1, pos
