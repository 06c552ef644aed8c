"""RecordBatch v2 codec: round trips per codec, CRC, stamping, and interop with kafka-python's codec."""

import dataclasses

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from epochkraft.protocol import records
from epochkraft.protocol.records import (
    HEADER_SIZE,
    STAMPED_PREFIX,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    RecordRules,
    RecordValidationError,
    build_batch,
    decode_batch,
    decode_batches,
    iter_batches,
    parse_header,
    stamped_prefix,
    validate,
    verify_crc,
)
from tests.support.lying_batches import LYING_BATCHES, answer, lying_batch, needs_walk

ENTRIES = [
    (b"k1", b"v1", (), 1_700_000_000_123),
    (None, b"value without key", (("h", b"x"), ("empty", None)), 1_700_000_000_124),
    (b"k3", None, (), 1_700_000_000_999),
    (b"", b"" * 0, (), 1_700_000_001_000),
]

KAFKA_PYTHON_CODEC = {
    Compression.NONE: 0,
    Compression.GZIP: DefaultRecordBatch.CODEC_GZIP,
    Compression.SNAPPY: DefaultRecordBatch.CODEC_SNAPPY,
    Compression.LZ4: DefaultRecordBatch.CODEC_LZ4,
    Compression.ZSTD: DefaultRecordBatch.CODEC_ZSTD,
}


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_keeps_everything_and_millisecond_timestamps(codec):
    data = build_batch(ENTRIES, base_offset=100, leader_epoch=3, compression=codec)
    batch = decode_batch(data)
    assert batch.compression == codec
    assert (batch.base_offset, batch.partition_leader_epoch, batch.last_offset) == (100, 3, 103)
    got = [(r.key, r.value, r.headers, batch.timestamp_of(r)) for r in batch.records]
    assert got == [(k, v, tuple(h), ts) for k, v, h, ts in ENTRIES]
    assert batch.max_timestamp == 1_700_000_001_000


def test_crc_detects_a_flipped_bit_anywhere_after_the_crc():
    data = bytearray(build_batch(ENTRIES))
    header = parse_header(data)
    validate(data, 0, header)
    for position in (21, 40, len(data) - 1):
        corrupt = bytearray(data)
        corrupt[position] ^= 0x01
        assert not verify_crc(corrupt, 0, parse_header(corrupt))
        with pytest.raises(CorruptRecordError):
            decode_batch(bytes(corrupt))


def test_stamping_keeps_crc_valid():
    produced = build_batch(ENTRIES)
    data = stamped_prefix(parse_header(produced), 5000, 42) + produced[STAMPED_PREFIX:]
    header = parse_header(data)
    assert (header.base_offset, header.partition_leader_epoch) == (5000, 42)
    assert verify_crc(data, 0, header)
    assert decode_batch(bytes(data)).records[1].value == b"value without key"


def test_iter_batches_whole_buffer_and_trailing_partial_batch():
    one = build_batch(ENTRIES[:2], base_offset=0)
    two = build_batch(ENTRIES[2:], base_offset=2)
    stream = one + two
    assert [h.base_offset for _, h in iter_batches(stream)] == [0, 2]
    assert len(decode_batches(stream)) == 2
    for cut in (1, HEADER_SIZE - 1, HEADER_SIZE + 1, len(two) - 1):
        with pytest.raises(CorruptRecordError):
            list(iter_batches(stream[: len(one) + cut]))


def test_validate_rejects_count_mismatch():
    data = bytearray(build_batch(ENTRIES))
    data[23:27] = (7).to_bytes(
        4, "big"
    )  # lastOffsetDelta, inside the CRC: fix the CRC to isolate the count check
    import crc32c

    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError, match="inconsistent batch offset range"):
        validate(data, 0, parse_header(data))


# kafka-python ships only gzip without extra libraries; the real-client tests cover every codec.
INTEROP_CODECS = [Compression.NONE, Compression.GZIP]


@pytest.mark.parametrize("codec", INTEROP_CODECS)
def test_decodes_batches_written_by_kafka_python(codec):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=KAFKA_PYTHON_CODEC[codec],
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset, (key, value, headers, ts) in enumerate(ENTRIES):
        builder.append(offset=offset, timestamp=ts, key=key, value=value, headers=list(headers))
    data = bytes(builder.build())
    batch = decode_batch(data)
    assert [(r.key, r.value) for r in batch.records] == [(k, v) for k, v, _, _ in ENTRIES]
    assert [batch.timestamp_of(r) for r in batch.records] == [ts for *_, ts in ENTRIES]


@pytest.mark.parametrize("codec", INTEROP_CODECS)
def test_kafka_python_reads_our_batches(codec):
    data = build_batch(ENTRIES, base_offset=7, compression=codec)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    records = list(batch)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (7 + i, k, v, ts) for i, (k, v, _, ts) in enumerate(ENTRIES)
    ]


@pytest.mark.parametrize(
    "garbage", [b"", b"\x00" * 10, b"\xff" * 61, b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"\x00" * 60]
)
def test_garbage_is_a_corrupt_record_error(garbage):
    with pytest.raises(CorruptRecordError):
        decode_batch(garbage)


@pytest.mark.parametrize("codec", list(Compression))
def test_validate_accepts_every_codec(codec):
    data = build_batch(ENTRIES, compression=codec)
    validate(data, 0, parse_header(data))


@pytest.mark.parametrize(("name", "error", "message"), [(n, e, m) for n, (e, m, _) in LYING_BATCHES.items()])
def test_validate_refuses_lying_batches_as_log_validator(name, error, message):
    """LogValidatorTest's invalid-batch cases (count vs offsets, count vs records present, record sizes,
    headers, control batches from clients) plus a compression bomb: each refused with its own message."""
    data = lying_batch(name)
    with pytest.raises(error, match=message):
        validate(data, 0, parse_header(data))


def test_validate_bounds_the_decompressed_size():
    data = build_batch([(None, b"\0" * (1 << 20), (), 0)], compression=Compression.ZSTD)
    validate(data, 0, parse_header(data), max_decompressed=2 << 20)
    with pytest.raises(InvalidRecordError, match="does not decompress within"):
        validate(data, 0, parse_header(data), max_decompressed=1 << 19)


def test_testCompactedTopicConstraints(tmp_path):
    """As Kafka's UnifiedLogTest.testCompactedTopicConstraints: a compacted log refuses records without a
    key, each named by its index in the batch (RecordValidationException's record errors) with
    LogValidator.processRecordErrors' summary as the message; keyed records are appended."""
    from epochkraft.broker.log import LogConfig, PartitionLog

    plog = PartitionLog.open(tmp_path / "compact-0", LogConfig(cleanup_policy="compact"))
    keyed, unkeyed = (b"k", b"v", (), 0), (None, b"v", (), 0)
    with pytest.raises(RecordValidationError) as refused:
        plog.append_as_leader(build_batch([unkeyed]), 0)
    # the texts as Kafka 4.4.0 answers them
    message = "Compacted topic cannot accept message without key in topic partition compact-0"
    assert refused.value.record_errors == ((0, message),)
    assert str(refused.value) == (
        "One or more records have been rejected due to 1 record errors in total, and only showing the "
        f"first three errors at most: [RecordError(batchIndex=0, message='{message}')]"
    )
    with pytest.raises(RecordValidationError) as refused:
        plog.append_as_leader(build_batch([keyed, unkeyed, keyed, unkeyed], compression=Compression.GZIP), 0)
    assert [index for index, _ in refused.value.record_errors] == [1, 3]
    assert plog.log_end_offset == 0
    assert (
        plog.append_as_leader(build_batch([keyed, keyed], compression=Compression.ZSTD), 0).first_offset == 0
    )
    assert plog.log_end_offset == 2


@pytest.mark.parametrize(
    "name", ["offset_delta_gap", "negative_record_length", "trailing_record", "count_5_one_record"]
)
def test_records_that_do_not_parse_refuse_the_batch_without_record_errors(name):
    """As Kafka 4.4.0 answers: a record the iterator cannot read is INVALID_RECORD for the whole batch
    (InvalidRecordException, not a RecordValidationException), with no record_errors."""
    data = lying_batch(name)
    with pytest.raises(InvalidRecordError) as refused:
        validate(data, 0, parse_header(data))
    assert not isinstance(refused.value, RecordValidationError)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.LZ4])
def test_testInvalidCreateTimeV2(compression):
    """As Kafka's LogValidatorTest.testInvalidCreateTimeNonCompressedV2 / testInvalidCreateTimeCompressedV2:
    records whose create time lies outside [now - message.timestamp.before.max.ms, now +
    message.timestamp.after.max.ms] are INVALID_TIMESTAMP, each named in record_errors."""
    now = 1_700_000_000_000
    entries = [(b"k", b"v", (), now), (b"k", b"v", (), now + 3_600_001), (b"k", b"v", (), now - 1001)]
    data = build_batch(entries, compression=compression)
    rules = RecordRules(now_ms=now, timestamp_before_max_ms=1000, timestamp_after_max_ms=3_600_000)
    with pytest.raises(RecordValidationError) as refused:
        validate(data, 0, parse_header(data), rules=rules)
    assert refused.value.invalid_timestamp
    assert str(refused.value) == "One or more records have been rejected due to invalid timestamp"
    assert refused.value.record_errors == (
        (
            1,
            f"Timestamp {now + 3_600_001} of message with offset 1 is out of range. The timestamp should be "
            f"within [{now - 1000}, {now + 3_600_000}]",
        ),
        (
            2,
            f"Timestamp {now - 1001} of message with offset 2 is out of range. The timestamp should be "
            f"within [{now - 1000}, {now + 3_600_000}]",
        ),
    )
    validate(data, 0, parse_header(data), rules=RecordRules(now_ms=now, timestamp_after_max_ms=3_600_001))
    validate(data, 0, parse_header(data))  # no clock given: timestamps are not checked


def test_compressed_batches_and_batches_of_many_records_are_validated_off_the_event_loop():
    from epochkraft.broker.produce_validation import INLINE_MAX_RECORDS, is_heavy

    def headers(count: int, compression: Compression = Compression.NONE):
        return list(iter_batches(build_batch([(None, b"v", (), 0)] * count, compression=compression)))

    assert not is_heavy(headers(INLINE_MAX_RECORDS))
    assert is_heavy(headers(INLINE_MAX_RECORDS + 1))
    assert is_heavy(headers(1, Compression.ZSTD))


@needs_walk
@pytest.mark.parametrize("codec", list(Compression))
def test_the_record_walk_passes_what_producers_write(codec):
    """Keys, nulls, headers, any codec (walked once inflated), kafka-python's batches: the walk passes them
    without an object per record and sums them up (earliest and latest timestamp deltas, keyless records)."""
    data = build_batch(ENTRIES, compression=codec)
    header = parse_header(data)
    inflated = records.decompress(codec, data[HEADER_SIZE:])
    assert records.RECORD_WALK(inflated, 0, len(inflated), header.record_count) == (0, 877, 1)
    assert records._records_pass(inflated, 0, len(inflated), header, RecordRules(compacted=False))
    assert not records._records_pass(inflated, 0, len(inflated), header, RecordRules(compacted=True))
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for offset, (key, value, headers, ts) in enumerate(ENTRIES):
        builder.append(offset=offset, timestamp=ts, key=key, value=value, headers=list(headers))
    written = bytes(builder.build())
    assert records.RECORD_WALK(written, HEADER_SIZE, len(written), 4) == (0, 877, 1)


@needs_walk
@pytest.mark.parametrize("name", list(LYING_BATCHES))
def test_lying_batches_get_the_same_answer_with_the_record_walk(name):
    """The walk never passes a lying batch (it has no verdict, the record reader answers): the same error,
    word for word, with the walk and without it."""
    data = lying_batch(name)
    assert answer(data) == answer(data, walk=False) is not None
    header = parse_header(data)
    lies_in_records = LYING_BATCHES[name][1] in (
        "malformed",
        "unconsumed",
        "offset delta 0",
        "offset delta 5",
    )
    if lies_in_records and not header.attributes & 0x07:
        assert records.RECORD_WALK(data, HEADER_SIZE, len(data), header.record_count) is None


@needs_walk
def test_the_record_walk_bounds_timestamps_by_their_extremes():
    """The walk passes a batch on its earliest and latest timestamps: records at the edges of [now -
    message.timestamp.before.max.ms, now + message.timestamp.after.max.ms] pass, one a millisecond outside
    gets the record reader's answer naming it (LogValidatorTest.testInvalidCreateTimeNonCompressedV2)."""
    now = 1_700_000_000_000
    rules = RecordRules(now_ms=now, timestamp_before_max_ms=1000, timestamp_after_max_ms=2000)
    edges = [(b"k", b"v", (), now), (b"k", b"v", (), now - 1000), (b"k", b"v", (), now + 2000)]
    assert answer(build_batch(edges), rules) is None
    for late in (now - 1001, now + 2001):
        data = build_batch([*edges, (b"k", b"v", (), late)])
        refused = answer(data, rules)
        assert refused == answer(data, rules, walk=False)
        assert refused is not None and refused[2] == ((3, refused[2][0][1]),)
    log_append_time = bytearray(build_batch(edges))
    log_append_time[22] |= records.TIMESTAMP_TYPE_BIT  # every record reads as the max timestamp, now + 2000
    log_append_time[17:21] = crc32c.crc32c(bytes(log_append_time[21:])).to_bytes(4, "big")
    assert answer(bytes(log_append_time), rules) is None
    assert answer(bytes(log_append_time), dataclasses.replace(rules, timestamp_after_max_ms=1999)) == answer(
        bytes(log_append_time), dataclasses.replace(rules, timestamp_after_max_ms=1999), walk=False
    )


@needs_walk
def test_the_record_walk_reads_a_batch_of_many_records_without_the_gil_alike():
    """Past 16,384 records the walk runs without the GIL (a worker thread's batch; not observed here): the
    same summary, and the same bounds."""
    data = build_batch([(None, b"v", (), 1000 + i % 3) for i in range(20_000)])
    assert records.RECORD_WALK(data, HEADER_SIZE, len(data), 20_000) == (0, 2, 20_000)
    assert records.RECORD_WALK(data, HEADER_SIZE, len(data) - 1, 20_000) is None


def test_a_producer_batch_marked_log_append_time_is_refused_on_a_log_append_time_topic():
    """LogValidator.validateTimestamp: on a LogAppendTime topic a producer's batch with the LogAppendTime
    bit is INVALID_TIMESTAMP, "Producer should not set timestamp type to LogAppendTime", each record named;
    the same batch without the bit passes (the broker stamps it), with or without the C walk."""
    rules = RecordRules(log_append_time_topic=True)
    plain = build_batch([(b"k", b"v", (), 1000), (b"k", b"v", (), 1001)])
    marked = bytearray(plain)
    marked[22] |= records.TIMESTAMP_TYPE_BIT
    marked[17:21] = crc32c.crc32c(bytes(marked[21:])).to_bytes(4, "big")
    for walk in (True, False):
        assert answer(plain, rules, walk=walk) is None
        refused = answer(bytes(marked), rules, walk=walk)
        assert refused is not None and [i for i, _ in refused[2]] == [0, 1]
        assert "Producer should not set timestamp type to LogAppendTime" in refused[2][0][1]
    assert (
        answer(bytes(marked), RecordRules(), walk=False) is None
    )  # a CreateTime topic's rules with no clock
