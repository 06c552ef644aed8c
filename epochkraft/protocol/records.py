"""RecordBatch v2 (magic 2): the on-wire and on-disk unit of Kafka data.

Layout (61-byte header, then records):
baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 | attributes i16 |
lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 | producerId i64 | producerEpoch i16 |
baseSequence i32 | recordsCount i32 | records...

CRC-32C covers attributes..end, so a leader stamps baseOffset and partitionLeaderEpoch (``stamped_prefix``)
without recomputing it. Timestamps stay in milliseconds (kio's own record reader rounds them
to seconds, which is why this codec exists). Compression via cramjam: gzip, snappy (xerial framing, as the
Java and librdkafka producers write it), lz4 frame, zstd.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum

import cramjam
import crc32c as _crc32c
from aiokafka.errors import CorruptRecordException as _AiokafkaCorrupt
from aiokafka.record.default_records import DefaultRecordBatch as _CRecordBatch

from epochkraft.protocol.errors import ProtocolError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the length-counted part
CRC_START = 21  # attributes begin here
_XERIAL_MAGIC = b"\x82SNAPPY\x00"

TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
TIMESTAMP_TYPE_BIT = 0x08


class CorruptRecordError(ProtocolError):
    """A batch that fails validation: bad CRC, magic, structure or counts (Kafka's CORRUPT_MESSAGE)."""


class InvalidRecordError(CorruptRecordError):
    """A batch whose CRC holds but whose records break Kafka's rules (InvalidRecordException: INVALID_RECORD)."""


class RecordValidationError(InvalidRecordError):
    """Records of a batch that break a partition's rules (LogValidator's RecordValidationException):
    ProduceResponse's record_errors (v8+), each record's index in its batch and message, with
    LogValidator.processRecordErrors' summary as the error message; INVALID_TIMESTAMP if any record's
    timestamp is out of range, else INVALID_RECORD."""

    def __init__(self, record_errors: list[tuple[int, str]], invalid_timestamp: bool) -> None:
        self.record_errors = tuple(record_errors)
        self.invalid_timestamp = invalid_timestamp
        if invalid_timestamp:
            super().__init__("One or more records have been rejected due to invalid timestamp")
            return
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
        super().__init__(
            f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
            f"and only showing the first three errors at most: [{shown}]"
        )


LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class RecordRules:
    """A partition's rules for each record (LogValidator.validateRecord): a key in a compacted topic,
    create-time timestamps within [now - before, now + after] (not checked when ``now_ms`` is None), and on
    a LogAppendTime topic no batch a producer marked LogAppendTime (LogValidator.validateTimestamp)."""

    topic_partition: str = ""
    compacted: bool = False
    now_ms: int | None = None
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    log_append_time_topic: bool = False


NO_RULES = RecordRules()


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & 0x07)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


@dataclass(frozen=True, slots=True)
class Record:
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    attributes: int = 0


@dataclass(slots=True)
class RecordBatch:
    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    records: list[Record] = field(default_factory=list)

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & 0x07)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def timestamp_of(self, record: Record) -> int:
        return self.base_timestamp + record.timestamp_delta

    def offset_of(self, record: Record) -> int:
        return self.base_offset + record.offset_delta


# ---- varints ----------------------------------------------------------------------------------------
def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)  # zigzag
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise CorruptRecordError("truncated varint in record")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long in record")


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(value))
        out += value


def _read_bytes(data: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(data, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(data):
        raise CorruptRecordError("record field runs past the end of the batch")
    return bytes(data[pos:end]), end


def encode_records(records: list[Record]) -> bytes:
    out = bytearray()
    for r in records:
        body = bytearray()
        body.append(r.attributes & 0xFF)
        _write_varint(body, r.timestamp_delta)
        _write_varint(body, r.offset_delta)
        _write_bytes(body, r.key)
        _write_bytes(body, r.value)
        _write_varint(body, len(r.headers))
        for name, value in r.headers:
            _write_bytes(body, name.encode())
            _write_bytes(body, value)
        _write_varint(out, len(body))
        out += body
    return bytes(out)


def decode_records(data: bytes | memoryview, count: int) -> list[Record]:
    records = []
    pos = 0
    for _ in range(count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        if length < 0 or end > len(data):
            raise CorruptRecordError("record length runs past the end of the batch")
        attributes = data[pos]
        p = pos + 1
        timestamp_delta, p = _read_varint(data, p)
        offset_delta, p = _read_varint(data, p)
        key, p = _read_bytes(data, p)
        value, p = _read_bytes(data, p)
        header_count, p = _read_varint(data, p)
        if header_count < 0 or header_count > length:
            raise CorruptRecordError(f"bad header count {header_count}")
        headers = []
        for _ in range(header_count):
            name, p = _read_bytes(data, p)
            hvalue, p = _read_bytes(data, p)
            if name is None:
                raise CorruptRecordError("null header key")
            try:
                headers.append((name.decode(), hvalue))
            except UnicodeDecodeError as exc:
                raise CorruptRecordError("header key is not UTF-8") from exc
        if p != end:
            raise CorruptRecordError("record length does not match its fields")
        records.append(Record(offset_delta, timestamp_delta, key, value, tuple(headers), attributes))
        pos = end
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} trailing bytes after {count} records")
    return records


# ---- compression ------------------------------------------------------------------------------------
def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return _xerial_snappy(data)
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(bytes(data)))
        if codec == Compression.SNAPPY:
            raw = bytes(data)
            if raw.startswith(_XERIAL_MAGIC):
                return _xerial_unsnappy(raw)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam raises its own errors on bad input
        raise CorruptRecordError(f"cannot decompress {Compression(codec).name}: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _xerial_snappy(data: bytes, block: int = 32 * 1024) -> bytes:
    out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def _xerial_unsnappy(data: bytes) -> bytes:
    pos = 16
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError("bad xerial snappy block size")
        out += cramjam.snappy.decompress_raw(data[pos : pos + size])
        pos += size
    return bytes(out)


# ---- batches ----------------------------------------------------------------------------------------
def parse_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"batch header truncated ({len(buf) - pos} bytes)")
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.magic != 2:
        raise CorruptRecordError(f"unsupported magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {header.batch_length} below the header size")
    return header


def iter_batches(buf: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in ``buf``; CorruptRecordError on a bad or partial batch."""
    pos = 0
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos)
        if pos + header.size > end:
            raise CorruptRecordError("batch truncated")
        yield pos, header
        pos += header.size


def verify_crc(buf: bytes | memoryview, pos: int, header: BatchHeader) -> bool:
    view = memoryview(buf)[pos + CRC_START : pos + header.size]
    return _crc32c.crc32c(view) == header.crc


def whole_batches(buf: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole, CRC-valid batch from the front of ``buf``, stopping at the first
    torn, malformed or damaged one (a log's tail after a crash)."""
    try:
        for pos, header in iter_batches(buf):
            if not verify_crc(buf, pos, header):
                return
            yield pos, header
    except ProtocolError:
        return


RecordWalk = Callable[[bytes | memoryview, int, int, int], tuple[int, int, int] | None]


def _load_record_walk() -> RecordWalk | None:
    """The C walk of ``_recordwalk.c``, or None where the package was built without a compiler."""
    try:
        from epochkraft.protocol._recordwalk import walk
    except ImportError:
        return None
    return walk


# (buffer, start, end, count) -> (min timestamp delta, max timestamp delta, keyless records) when every
# record is well formed at its offset delta, else None; tests set it to None to check the slow path alone.
RECORD_WALK = _load_record_walk()

MAX_DECOMPRESSED_BATCH_BYTES = 16 * 1024 * 1024  # a produced batch may not inflate past this
MIN_RECORD_BYTES = 7  # length, attributes, timestamp and offset deltas, key, value, header count


def validate(
    buf: bytes | memoryview,
    pos: int,
    header: BatchHeader,
    max_decompressed: int = MAX_DECOMPRESSED_BATCH_BYTES,
    *,
    rules: RecordRules = NO_RULES,
) -> None:
    """The leader's checks on a produced batch, as Kafka's LogValidator.validateBatch and the record
    iterator behind validateRecord: CRC (CORRUPT_MESSAGE); then INVALID_RECORD for a control batch, an
    offset range that does not match the record count, a producer id without a sequence, a compressed
    payload that does not decompress within ``max_decompressed`` bytes, and records that do not parse to
    exactly the declared count with offset deltas 0..count-1, lengths that match their fields, UTF-8
    header keys and nothing left over. Then each record against ``rules`` (a key in a compacted topic,
    timestamps in range): RecordValidationError naming every record that breaks them. The records are
    first walked in C without an object per record (``_records_pass``); a batch that walk does not pass
    is parsed by aiokafka's Cython record reader, record by record, which gives the error answer (each
    record's bounds are checked; a ``bytes`` object ends in a NUL, which ends a varint running off its
    end)."""
    if not verify_crc(buf, pos, header):
        raise CorruptRecordError("CRC-32C mismatch")
    validate_header(header)
    if header.is_control:
        raise InvalidRecordError("clients are not allowed to write control records")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"invalid sequence number {header.base_sequence} for producer {header.producer_id}"
        )
    payload = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    codec = header.attributes & 0x07
    if codec == Compression.NONE:
        if header.record_count > len(payload) // MIN_RECORD_BYTES:
            raise InvalidRecordError(
                f"record count {header.record_count} cannot fit in {len(payload)} bytes of records"
            )
        if _records_pass(buf, pos + HEADER_SIZE, pos + header.size, header, rules):
            return
        if isinstance(buf, bytes) and pos == 0 and header.size == len(buf):
            raw = buf  # the whole buffer
        else:
            raw = bytes(memoryview(buf)[pos : pos + header.size])
    else:
        inflated = decompress_bounded(codec, payload, max_decompressed)
        if header.record_count > len(inflated) // MIN_RECORD_BYTES:
            raise InvalidRecordError(
                f"record count {header.record_count} cannot fit in {len(inflated)} decompressed bytes"
            )
        if _records_pass(inflated, 0, len(inflated), header, rules):
            return
        head = bytearray(memoryview(buf)[pos : pos + HEADER_SIZE])
        head[CRC_START + 1] &= 0xF8  # the reader sees an uncompressed batch of the inflated records
        raw = bytes(head) + inflated
    _check_records(raw, header, rules)


def validate_header(header: BatchHeader) -> None:
    """The batch-level counts (LogValidator.validateBatch): a positive record count matching the offset
    range. Followers check these too, so a leader's bad batch is never replicated."""
    if header.last_offset_delta < 0:
        raise InvalidRecordError(
            f"batch has an invalid offset range: last offset delta {header.last_offset_delta}"
        )
    if header.record_count <= 0:
        raise InvalidRecordError(f"invalid reported count for record batch: {header.record_count}")
    if header.last_offset_delta + 1 != header.record_count:
        raise InvalidRecordError(
            f"inconsistent batch offset range [0, {header.last_offset_delta}] "
            f"and count of records {header.record_count}"
        )


def _records_pass(
    buf: bytes | memoryview, start: int, end: int, header: BatchHeader, rules: RecordRules
) -> bool:
    """True when the C walk finds buf[start:end] to be the batch's records, well formed and each at its
    offset delta, and its summary shows every record within ``rules``: the batch passes without an object
    per record. False is no verdict: ``_check_records`` then reads the records one by one and gives the
    answer. The walk passes only what that reading passes (its reads are stricter), and the summary's
    extremes bound every record: if the earliest and the latest timestamps are in range, all are."""
    walk = RECORD_WALK
    if walk is None or header.base_offset > LONG_MAX - header.record_count:
        return False  # an offset past 2^63 wraps in the Cython reader: its answer, not ours
    summary = walk(buf, start, end, header.record_count)
    if summary is None:
        return False
    min_delta, max_delta, keyless = summary
    if rules.compacted and keyless:
        return False
    now = rules.now_ms
    if now is None:
        return not (rules.log_append_time_topic and header.attributes & TIMESTAMP_TYPE_BIT)
    if header.attributes & TIMESTAMP_TYPE_BIT:  # every record reads as the batch's max timestamp
        if header.max_timestamp == -1:
            return False
        earliest = latest = header.max_timestamp
    else:
        earliest = header.base_timestamp + min_delta
        latest = header.base_timestamp + max_delta
        if earliest < -LONG_MAX - 1 or latest > LONG_MAX:
            return False
    return now - earliest <= rules.timestamp_before_max_ms and latest - now <= rules.timestamp_after_max_ms


def _check_records(raw: bytes, header: BatchHeader, rules: RecordRules) -> None:
    """Each record in turn, as LogValidator's per-record loop. A record that does not parse, or sits at the
    wrong offset delta, refuses the batch at once (Kafka's record iterator throws InvalidRecordException);
    records that break ``rules`` are collected with their index in the batch (batchIndex) and refuse it
    together (RecordValidationException)."""
    base = header.base_offset
    index = 0
    errors: list[tuple[int, str]] = []
    invalid_timestamp = False
    where = f" in topic partition {rules.topic_partition}" if rules.topic_partition else ""
    now = rules.now_ms
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_BIT)
    try:
        for record in _CRecordBatch(raw):
            if record.offset != base + index:
                raise InvalidRecordError(
                    f"record {index} has offset delta {record.offset - base}, expected {index}"
                )
            if rules.compacted and record.key is None:
                errors.append((index, f"Compacted topic cannot accept message without key{where}"))
            elif now is not None:
                # A LogAppendTime batch's records read as its max timestamp, as Kafka's record iterator
                # gives them; only one without any is refused for its type.
                timestamp = header.max_timestamp if log_append_time else record.timestamp
                if timestamp != -1 and (
                    now - timestamp > rules.timestamp_before_max_ms
                    or timestamp - now > rules.timestamp_after_max_ms
                ):
                    invalid_timestamp = True
                    errors.append(
                        (
                            index,
                            f"Timestamp {timestamp} of message with offset {record.offset} is out of "
                            f"range. The timestamp should be within [{now - rules.timestamp_before_max_ms}, "
                            f"{now + rules.timestamp_after_max_ms}]",
                        )
                    )
                elif timestamp == -1 and log_append_time:
                    invalid_timestamp = True
                    errors.append((index, _producer_log_append_time(record.offset)))
            elif rules.log_append_time_topic and log_append_time:
                invalid_timestamp = True
                errors.append((index, _producer_log_append_time(record.offset)))
            index += 1
    except InvalidRecordError:
        raise
    except (_AiokafkaCorrupt, UnicodeDecodeError, MemoryError, OverflowError, ValueError) as exc:
        raise InvalidRecordError(f"record {index} of {header.record_count} is malformed: {exc}") from exc
    if errors:
        raise RecordValidationError(errors, invalid_timestamp)


def _producer_log_append_time(offset: int) -> str:
    return f"Invalid timestamp type in message with offset {offset}. Producer should not set timestamp type to LogAppendTime."


_DECOMPRESS_INTO: dict[int, Callable[[bytes, bytearray], int]] = {
    Compression.GZIP: cramjam.gzip.decompress_into,
    Compression.LZ4: cramjam.lz4.decompress_into,
    Compression.ZSTD: cramjam.zstd.decompress_into,
}


def decompress_bounded(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """``data`` decompressed, never allocating more than ``limit`` bytes of output: INVALID_RECORD past it,
    CORRUPT_MESSAGE when it does not decompress."""
    name = Compression(codec).name if 0 <= codec <= 4 else str(codec)
    if codec == Compression.SNAPPY:
        return _snappy_bounded(bytes(data), limit)
    into = _DECOMPRESS_INTO.get(codec)
    if into is None:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    source = bytes(data)
    size = min(limit, max(4 * len(source), 1 << 16))
    while True:
        out = bytearray(size)
        try:
            n = into(source, out)
        except Exception as exc:  # cramjam: output full, or not valid compressed data
            if size >= limit:
                raise InvalidRecordError(
                    f"{name} payload does not decompress within {limit} bytes: {exc}"
                ) from exc
            size = min(limit, size * 4)
            continue
        return bytes(memoryview(out)[:n])


def _snappy_bounded(data: bytes, limit: int) -> bytes:
    blocks: list[bytes] = []
    if data.startswith(_XERIAL_MAGIC):
        pos = 16
        while pos < len(data):
            if pos + 4 > len(data):
                raise CorruptRecordError("truncated xerial snappy block")
            (size,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if size < 0 or pos + size > len(data):
                raise CorruptRecordError("bad xerial snappy block size")
            blocks.append(data[pos : pos + size])
            pos += size
    else:
        blocks.append(data)
    out = bytearray()
    for block in blocks:
        if len(out) + _snappy_length(block) > limit:
            raise InvalidRecordError(f"SNAPPY payload does not decompress within {limit} bytes")
        try:
            out += cramjam.snappy.decompress_raw(block)
        except Exception as exc:
            raise CorruptRecordError(f"cannot decompress SNAPPY: {exc}") from exc
    return bytes(out)


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (an unsigned varint at its start)."""
    result = shift = 0
    for pos in range(min(len(block), 10)):
        result |= (block[pos] & 0x7F) << shift
        if not block[pos] & 0x80:
            return result
        shift += 7
    raise CorruptRecordError("bad snappy length preamble")


STAMPED_PREFIX = 16  # baseOffset, batchLength, partitionLeaderEpoch: the bytes a leader stamps
_PREFIX = struct.Struct(">qii")


def stamped_prefix(header: BatchHeader, base_offset: int, leader_epoch: int) -> bytes:
    """The first ``STAMPED_PREFIX`` bytes of a batch as the leader writes them, with its offset and leader
    epoch; the rest of the batch is written unchanged, as it arrived."""
    return _PREFIX.pack(base_offset, header.batch_length, leader_epoch)


_STAMPED_HEAD = struct.Struct(">bIhiqq")  # magic, crc, attributes, lastOffsetDelta, base and max timestamps


def with_log_append_time(
    buf: bytes | memoryview, pos: int, header: BatchHeader, now_ms: int
) -> tuple[bytes, BatchHeader]:
    """A batch stamped with the broker's append time, as Kafka's LogValidator does for a topic with
    message.timestamp.type=LogAppendTime (DefaultRecordBatch.setMaxTimestamp(LOG_APPEND_TIME, now)):
    the timestamp-type bit set, max timestamp ``now_ms``, the CRC recomputed; the records (compressed or
    not) are not touched. Returns the header's bytes from the magic byte to the record count (what
    follows ``STAMPED_PREFIX``) and the new header."""
    attributes = header.attributes | TIMESTAMP_TYPE_BIT
    head = bytearray(memoryview(buf)[pos + STAMPED_PREFIX : pos + HEADER_SIZE])
    if header.attributes == attributes and header.max_timestamp == now_ms:
        return bytes(head), header  # setMaxTimestamp: nothing changes, nor does the CRC
    tail = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    _STAMPED_HEAD.pack_into(
        head, 0, header.magic, 0, attributes, header.last_offset_delta, header.base_timestamp, now_ms
    )
    crc = _crc32c.crc32c(tail, _crc32c.crc32c(head[CRC_START - STAMPED_PREFIX :]))
    struct.pack_into(">I", head, 1, crc)
    stamped = replace(header, crc=crc, attributes=attributes, max_timestamp=now_ms)
    return bytes(head), stamped


def decode_batch(data: bytes | memoryview, pos: int = 0) -> RecordBatch:
    """Decodes one batch fully (CRC checked, records decompressed)."""
    header = parse_header(data, pos)
    if pos + header.size > len(data):
        raise CorruptRecordError("batch truncated")
    if not verify_crc(data, pos, header):
        raise CorruptRecordError("CRC-32C mismatch")
    if header.record_count < 0:
        raise CorruptRecordError(f"negative record count {header.record_count}")
    payload = memoryview(data)[pos + HEADER_SIZE : pos + header.size]
    records = decode_records(decompress(header.attributes & 0x07, payload), header.record_count)
    return RecordBatch(
        header.base_offset,
        header.partition_leader_epoch,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        records,
    )


def decode_batches(data: bytes | memoryview) -> list[RecordBatch]:
    return [decode_batch(data, pos) for pos, _ in iter_batches(data)]


def encode_batch(batch: RecordBatch, compression: Compression | None = None) -> bytes:
    codec = batch.compression if compression is None else compression
    attributes = (batch.attributes & ~0x07) | int(codec)
    payload = compress(codec, encode_records(batch.records))
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        batch.last_offset_delta,
        batch.base_timestamp,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        len(batch.records),
    )
    body = tail + payload
    crc = _crc32c.crc32c(body)
    batch_length = 4 + 1 + 4 + len(body)  # epoch + magic + crc + the rest
    return struct.pack(">qiibI", batch.base_offset, batch_length, batch.partition_leader_epoch, 2, crc) + body


def build_batch(
    entries: Sequence[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]],
    *,
    base_offset: int = 0,
    leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: Compression = Compression.NONE,
    transactional: bool = False,
) -> bytes:
    """One batch of (key, value, headers, timestamp_ms) entries."""
    if not entries:
        raise ValueError("a batch needs at least one record")
    base_ts = entries[0][3]
    records = [
        Record(i, ts - base_ts, key, value, tuple(headers))
        for i, (key, value, headers, ts) in enumerate(entries)
    ]
    batch = RecordBatch(
        base_offset,
        leader_epoch,
        int(compression) | (TRANSACTIONAL_BIT if transactional else 0),
        len(entries) - 1,
        base_ts,
        max(ts for *_, ts in entries),
        producer_id,
        producer_epoch,
        base_sequence,
        records,
    )
    return encode_batch(batch, compression)


# ---- control batches (Kafka's ControlRecordUtils) ------------------------------------------------------
CONTROL_KEY = struct.Struct(">hh")  # a control record's key: version 0, ControlRecordType


def control_batch(base_offset: int, epoch: int, control_type: int, value: bytes, now_ms: int) -> bytes:
    """A control batch of one record (ControlRecordType ``control_type``), as Kafka's ControlRecordUtils."""
    return control_records_batch(base_offset, epoch, [(control_type, value)], now_ms)


def control_records_batch(
    base_offset: int, epoch: int, records: list[tuple[int, bytes]], now_ms: int
) -> bytes:
    """A control batch of (ControlRecordType, value) records at consecutive offsets."""
    out = [Record(i, 0, CONTROL_KEY.pack(0, kind), value) for i, (kind, value) in enumerate(records)]
    batch = RecordBatch(base_offset, epoch, CONTROL_BIT, len(out) - 1, now_ms, now_ms, records=out)
    return encode_batch(batch)
