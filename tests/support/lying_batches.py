"""Produce batches that lie about their records (counts, lengths, offsets, headers, compression), each with
a correct CRC so that only the structure checks can catch them: name -> (error, message, bytes); and what
validate answers with the C record walk and without it."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest

from epochkraft.protocol import records
from epochkraft.protocol.records import (
    CONTROL_BIT,
    MAX_DECOMPRESSED_BATCH_BYTES,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    RecordRules,
    parse_header,
    validate,
)


def varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def record(
    offset_delta: int, value: bytes = b"v", *, headers: bytes = varint(0), length: int | None = None
) -> bytes:
    body = b"\0" + varint(0) + varint(offset_delta) + varint(-1) + varint(len(value)) + value + headers
    return varint(len(body) if length is None else length) + body


def batch(payload: bytes, count: int, *, last_offset_delta: int | None = None, attributes: int = 0) -> bytes:
    """A RecordBatch v2 around ``payload`` (already compressed if ``attributes`` says so), CRC correct."""
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    tail = struct.pack(">hiqqqhii", attributes, delta, 0, 0, -1, -1, -1, count) + payload
    body = struct.pack(">ibI", -1, 2, crc32c.crc32c(tail)) + tail
    return struct.pack(">qi", 0, len(body)) + body


def _bomb() -> bytes:
    inflated = record(0, b"\0" * (MAX_DECOMPRESSED_BATCH_BYTES + 1024))
    return batch(bytes(cramjam.zstd.compress(inflated)), 1, attributes=int(Compression.ZSTD))


LYING_BATCHES: dict[str, tuple[type[Exception], str, object]] = {
    "count_2^31-1_one_record": (InvalidRecordError, "cannot fit", lambda: batch(record(0), 2**31 - 1)),
    "count_5_one_record": (InvalidRecordError, "malformed", lambda: batch(record(0) + b"\0" * 30, 5)),
    "count_0": (
        InvalidRecordError,
        "invalid reported count",
        lambda: batch(record(0), 0, last_offset_delta=0),
    ),
    "count_vs_offset_range": (
        InvalidRecordError,
        "inconsistent",
        lambda: batch(record(0), 1, last_offset_delta=3),
    ),
    "negative_record_length": (
        InvalidRecordError,
        "malformed",
        lambda: batch(record(0, length=-5) + b"\0" * 8, 1),
    ),
    "record_length_past_batch": (InvalidRecordError, "malformed", lambda: batch(record(0, length=90), 1)),
    "record_length_short": (
        InvalidRecordError,
        "malformed",
        lambda: batch(record(0, length=3) + b"\0" * 8, 1),
    ),
    "trailing_record": (InvalidRecordError, "unconsumed", lambda: batch(record(0) + record(1), 1)),
    "offset_delta_gap": (InvalidRecordError, "offset delta 5", lambda: batch(record(0) + record(5), 2)),
    "offset_delta_repeat": (InvalidRecordError, "offset delta 0", lambda: batch(record(0) + record(0), 2)),
    "negative_header_count": (
        InvalidRecordError,
        "malformed",
        lambda: batch(record(0, headers=varint(-3)), 1),
    ),
    "header_count_past_record": (
        InvalidRecordError,
        "malformed",
        lambda: batch(record(0, headers=varint(9)), 1),
    ),
    "negative_header_key": (
        InvalidRecordError,
        "malformed",
        lambda: batch(record(0, headers=varint(1) + varint(-1) + varint(-1)), 1),
    ),
    "header_key_not_utf8": (
        InvalidRecordError,
        "malformed",
        lambda: batch(record(0, headers=varint(1) + varint(2) + b"\xff\xfe" + varint(-1)), 1),
    ),
    "varint_runs_off_the_end": (
        InvalidRecordError,
        "malformed",
        lambda: batch(record(0)[:-1] + b"\xff\xff", 1),
    ),
    "control_batch_from_client": (
        InvalidRecordError,
        "control records",
        lambda: batch(record(0), 1, attributes=CONTROL_BIT),
    ),
    "zstd_bomb": (InvalidRecordError, "does not decompress within", _bomb),
    "gzip_garbage": (
        InvalidRecordError,
        "does not decompress within",
        lambda: batch(b"\x1f\x8b" + b"\xaa" * 64, 1, attributes=int(Compression.GZIP)),
    ),
    "snappy_declares_huge": (
        InvalidRecordError,
        "does not decompress within",
        lambda: batch(b"\xff\xff\xff\xff\x0f" + b"\0" * 16, 1, attributes=int(Compression.SNAPPY)),
    ),
    "lz4_count_lies": (
        InvalidRecordError,
        "malformed",
        lambda: batch(
            bytes(cramjam.lz4.compress(b"".join(record(i) for i in range(8)))),
            9,
            attributes=int(Compression.LZ4),
        ),
    ),
}
_ = CorruptRecordError  # CRC failures are CORRUPT_MESSAGE, every structure failure INVALID_RECORD


def lying_batch(name: str) -> bytes:
    return LYING_BATCHES[name][2]()  # type: ignore[operator]


needs_walk = pytest.mark.skipif(records.RECORD_WALK is None, reason="built without a C compiler")


def answer(data: bytes, rules: RecordRules = RecordRules(), *, walk: bool = True) -> object:
    """What validate answers for ``data``: None when it passes, else the error's type, text and record
    errors; ``walk=False`` without the C record walk (aiokafka's reader alone)."""
    saved = records.RECORD_WALK
    if not walk:
        records.RECORD_WALK = None
    try:
        validate(data, 0, parse_header(data), rules=rules)
    except CorruptRecordError as exc:
        return type(exc), str(exc), getattr(exc, "record_errors", None)
    finally:
        records.RECORD_WALK = saved
    return None
