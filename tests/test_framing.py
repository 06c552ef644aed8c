"""Framing: the frame decoder fed whole, byte by byte and with trailing bytes; headers v1/v2."""

import pytest

from epochkraft.protocol.errors import FrameTooLarge, ProtocolError
from epochkraft.protocol.framing import (
    FrameDecoder,
    encode_request,
    encode_response,
    frame,
    parse_request_header,
    parse_response_header,
    response_header_version,
)

FRAMES = [b"", b"a", b"hello world", bytes(range(256)) * 3]
STREAM = b"".join(frame(f) for f in FRAMES)


def test_whole_buffer():
    assert FrameDecoder().feed(STREAM) == FRAMES


def test_one_byte_at_a_time():
    decoder = FrameDecoder()
    out = []
    for i in range(len(STREAM)):
        out += decoder.feed(STREAM[i : i + 1])
    assert out == FRAMES
    assert decoder.buffered == 0


def test_trailing_partial_frame_is_kept():
    decoder = FrameDecoder()
    assert decoder.feed(STREAM + b"\x00\x00\x00\x05ab") == FRAMES
    assert decoder.buffered == 6
    assert decoder.feed(b"cde") == [b"abcde"]


def test_oversized_size_prefix_is_refused_before_buffering():
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_frame_bytes=1024).feed(b"\x7f\xff\xff\xff")


def test_negative_size_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(b"\xff\xff\xff\xfe")


@pytest.mark.parametrize(
    ("api_key", "version", "flexible"),
    [(56, 3, True), (18, 0, False), (18, 3, True), (0, 8, False), (1, 12, True)],
)
def test_request_header_round_trip(api_key, version, flexible):
    data = encode_request(api_key, version, 42, "client-1", b"BODY")
    header = parse_request_header(data[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api_key,
        version,
        42,
        "client-1",
    )
    assert data[4 + header.header_size :] == b"BODY"
    assert header.header_size == 8 + 2 + len("client-1") + (1 if flexible else 0)


def test_null_client_id():
    header = parse_request_header(encode_request(3, 1, 1, None, b"")[4:])
    assert header.client_id is None


@pytest.mark.parametrize("payload", [b"", b"\x00\x01", b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x09ab"])
def test_truncated_headers_are_protocol_errors(payload):
    with pytest.raises(ProtocolError):
        parse_request_header(payload)


def test_api_versions_response_always_uses_header_v0():
    assert response_header_version(18, 3) == 0
    assert response_header_version(56, 3) == 1
    assert response_header_version(0, 8) == 0
    data = encode_response(7, 56, 3, b"xyz")
    assert parse_response_header(56, 3, data[4:]) == (7, 5)


@pytest.mark.parametrize("step", [1, 7, 300, 4096])
def test_frames_larger_than_the_receive_buffer_arrive_whole_in_any_pieces(step):
    # A 64-byte shared buffer: the 768-byte frame (and "hello world" once the buffer holds a partial
    # frame) take the own-buffer path; the rest are cut from the shared buffer.
    decoder = FrameDecoder(chunk_bytes=64)
    out = []
    for i in range(0, len(STREAM), step):
        # Copied at once: a large frame's view is valid until the next call.
        out += [bytes(f) for f in decoder.feed(STREAM[i : i + step])]
    assert out == FRAMES
    assert decoder.buffered == 0


def test_a_large_frame_decodes_with_kio_and_is_not_copied():
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from epochkraft.protocol.framing import decode_request_body, encode_entity, encode_request

    body = encode_entity(ApiVersionsRequest(client_software_name="x" * 500, client_software_version="1"))
    data = encode_request(18, 3, 9, "c", body)
    (received,) = FrameDecoder(chunk_bytes=64).feed(data)
    assert isinstance(received, memoryview) and received.readonly  # its own buffer, handed out as is
    request = decode_request_body(parse_request_header(received), received)
    assert request.client_software_name == "x" * 500


def test_receiving_through_get_buffer_as_a_buffered_protocol_does():
    decoder = FrameDecoder(chunk_bytes=64)
    out, data = [], memoryview(STREAM * 3)
    while data:
        target = decoder.get_buffer(-1)
        n = min(len(target), len(data), 50)  # the transport fills at most what it was given
        target[:n] = data[:n]
        data = data[n:]
        out += [bytes(f) for f in decoder.buffer_updated(n)]
    assert out == FRAMES * 3


@pytest.mark.parametrize("with_cursor", [False, True])
def test_nullable_struct_is_read_with_its_presence_marker(with_cursor):
    """DescribeTopicPartitions' cursor is a nullable struct (int8 -1 or 1 first); the length pre-check
    reads the marker instead of taking it for a string length, and still refuses a truncated body."""
    import io

    from kio.schema.describe_topic_partitions.v0.request import (
        Cursor,
        DescribeTopicPartitionsRequest,
        TopicRequest,
    )
    from kio.serial import entity_writer

    from epochkraft.protocol.framing import decode_entity

    request = DescribeTopicPartitionsRequest(
        topics=(TopicRequest(name="t"),),
        response_partition_limit=2,
        cursor=Cursor(topic_name="t", partition_index=2) if with_cursor else None,
    )
    buffer = io.BytesIO()
    entity_writer(DescribeTopicPartitionsRequest)(buffer, request)
    data = buffer.getvalue()
    assert decode_entity(DescribeTopicPartitionsRequest, data) == request
    assert decode_entity(DescribeTopicPartitionsRequest, data + b"\x00", allow_trailing=True) == request
    with pytest.raises(ProtocolError):
        decode_entity(DescribeTopicPartitionsRequest, data[:-3])


@pytest.mark.parametrize("step", [1, 7, 300, 4096, 100_000])
def test_the_receive_buffer_starts_small_and_grows_for_busy_connections(step):
    """An idle connection holds a 4 KiB receive buffer; receives that fill it grow it fourfold up to
    chunk_bytes, and frames up to chunk_bytes are cut from it whole whatever the pieces they arrive in."""
    frames = [bytes([i % 251]) * size for i, size in enumerate([10, 20_000, 5, 70_000, 200_000, 3, 250_000])]
    stream = b"".join(frame(f) for f in frames)
    decoder = FrameDecoder()
    assert len(decoder.get_buffer()) == 4 * 1024
    out = []
    data = memoryview(stream)
    while data:
        target = decoder.get_buffer()
        n = min(len(target), len(data), step)
        target[:n] = data[:n]
        data = data[n:]
        received = decoder.buffer_updated(n)
        assert all(isinstance(f, bytes) for f in received)  # none took the own-buffer path
        out += received
    assert out == frames
    assert decoder.buffered == 0 and len(decoder._buffer) == 256 * 1024


def test_a_quiet_connection_gives_back_its_receive_buffers():
    decoder = FrameDecoder()
    big, small = bytes(600_000), b"x" * 100
    assert decoder.feed(frame(small) + frame(big)[:300_000]) == [small]
    assert not decoder.release_buffers()  # a frame is half received: nothing goes
    (received,) = decoder.feed(frame(big)[300_000:])
    assert bytes(received) == big
    del received
    assert decoder.feed(frame(small) * 1000) == [small] * 1000  # a burst: the buffer grows
    assert decoder._spare is not None and len(decoder._buffer) > 4 * 1024
    assert decoder.release_buffers()
    assert decoder._spare is None and len(decoder._buffer) == 4 * 1024
    assert decoder.feed(frame(small) * 3) == [small] * 3
    assert [bytes(f) for f in decoder.feed(frame(big))] == [big]


@pytest.mark.parametrize(("length", "refused"), [(32_767, False), (32_768, True), (900_000, True)])
def test_a_string_over_32767_bytes_is_refused_as_kafkas_parsers_do(length, refused):
    """Kafka's generated readers refuse a (compact) string longer than a short can say: an OffsetCommit v9
    whose committedMetadata is 900,000 bytes is ``string field committedMetadata had invalid length 900000``
    and its connection is closed, not answered OFFSET_METADATA_TOO_LARGE."""
    from kio.schema.offset_commit.v9 import request as oc

    from epochkraft.protocol.framing import decode_request_body, encode_entity

    partition = oc.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata="m" * length
    )
    request = oc.OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(oc.OffsetCommitRequestTopic(name="t", partitions=(partition,)),),
    )
    data = encode_request(8, 9, 1, "c", encode_entity(request))[4:]  # without the size prefix
    header = parse_request_header(data)
    if not refused:
        assert decode_request_body(header, data) == request
        return
    with pytest.raises(ProtocolError, match=f"string field committed_metadata had invalid length {length}"):
        decode_request_body(header, data)


def test_a_response_string_over_32767_bytes_is_read():
    """Kafka's limit holds for the requests a server reads, not for the responses our daemons' clients read:
    an error message echoing a 40 kB config value, answered by our own controller in a compact string
    (flexible versions; a legacy string cannot say more), is decoded."""
    import datetime

    from kio.schema.alter_configs.v2 import response as ac
    from kio.static.primitive import i8, i32Timedelta

    from epochkraft.protocol.errors import ErrorCode
    from epochkraft.protocol.framing import decode_entity, encode_entity

    response = ac.AlterConfigsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        responses=(
            ac.AlterConfigsResourceResponse(
                error_code=ErrorCode.invalid_config,
                error_message="x" * 40_000,
                resource_type=i8(2),
                resource_name="t",
            ),
        ),
    )
    assert decode_entity(ac.AlterConfigsResponse, encode_entity(response)) == response
