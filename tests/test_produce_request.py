"""protocol/produce_request: the Produce body read with its records as views of the frame, checked against
kio's reader on every version the handler registers, well-formed and changed bytes alike; and the Produce
response's KIP-951 leader hints."""

from __future__ import annotations

import datetime
import importlib
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epochkraft.server.handlers  # noqa: F401  (registers the handlers)
from epochkraft.protocol.api import BROKER, registered
from epochkraft.protocol.errors import ProtocolError
from epochkraft.protocol.framing import (
    decode_entity,
    decode_request_body,
    encode_entity,
    encode_request,
    parse_request_header,
    request_class,
)
from epochkraft.protocol.produce_request import FIRST_VERSION, LAST_VERSION, decode_produce_request

VERSIONS = list(range(FIRST_VERSION, LAST_VERSION + 1))


def test_the_reader_covers_the_versions_the_handler_registers():
    produce = registered(BROKER)[0]
    assert (produce.min_version, produce.max_version) == (FIRST_VERSION, LAST_VERSION)


def produce_request(version: int, transactional_id: str | None, topics: list[tuple[Any, list]]) -> Any:
    """kio's ProduceRequest of ``version``: topics as (name or topic id, [(index, records)])."""
    cls = request_class(0, version)
    schema = importlib.import_module(cls.__module__)
    key = "topic_id" if version >= 13 else "name"
    return cls(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=30_000),
        topic_data=tuple(
            schema.TopicProduceData(
                **{key: name},
                partition_data=tuple(schema.PartitionProduceData(index=i, records=r) for i, r in partitions),
            )
            for name, partitions in topics
        ),
    )


def kio_answer(frame: bytes, version: int, offset: int) -> Any:
    """What kio gives for the body (the ProtocolError's type when it refuses it)."""
    try:
        return decode_entity(request_class(0, version), frame, offset, allow_trailing=True, request=True)
    except ProtocolError:
        return ProtocolError


def topic_key(version: int, n: int) -> Any:
    if version >= 13:
        return uuid.UUID(int=n * 7919) if n else None  # the zero id reads as None
    return ["orders", "tøpic-ü", "", "x" * 300][n % 4]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_reads_as_kio_with_its_records_as_views_of_the_frame(version):
    request = produce_request(
        version,
        "tx-1",
        [
            (topic_key(version, 1), [(0, b"batch-0" * 30), (5, None), (2, b"")]),
            (topic_key(version, 2), []),
            (topic_key(version, 0), [(-1, b"\x00" * 300)]),
        ],
    )
    frame = encode_request(0, version, 7, "client", encode_entity(request))[4:] + b"trailing"
    header = parse_request_header(frame)
    mine = decode_request_body(header, frame)
    assert mine == request == kio_answer(frame, version, header.header_size)
    records = [p.records for t in mine.topic_data for p in t.partition_data]
    assert [type(r) for r in records] == [memoryview, type(None), memoryview, memoryview]
    assert all(r.readonly and r.obj is frame for r in records if r is not None)


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_frame_in_a_reused_buffer_gets_its_records_copied_out(version):
    """A large frame arrives as a view of a reused receive mapping: records viewing it would change under
    the handler, so they are copied out, as kio does."""
    request = produce_request(version, None, [(topic_key(version, 1), [(0, b"r" * 50)])])
    received = bytearray(encode_request(0, version, 7, "client", encode_entity(request))[4:])
    frame = memoryview(received).toreadonly()
    header = parse_request_header(frame)
    decoded = decode_request_body(header, frame)
    received[-10:] = bytes(10)  # the next read overwrites the buffer
    assert decoded == request and type(decoded.topic_data[0].partition_data[0].records) is bytes


@pytest.mark.parametrize("version", [9, 13])
def test_tagged_fields_are_left_to_kio(version):
    request = produce_request(version, None, [(topic_key(version, 1), [(0, b"r" * 5)])])
    body = bytearray(encode_entity(request))
    assert body[-1] == 0  # the request's tagged fields: none
    body[-1:] = b"\x01\x00\x00"  # one, tag 0, empty
    frame = encode_request(0, version, 7, "client", bytes(body))[4:]
    header = parse_request_header(frame)
    assert decode_produce_request(frame, version, header.header_size) is None
    with pytest.raises(ProtocolError):  # kio's answer, whatever it is, stands: here it refuses tag 0
        decode_request_body(header, frame)
    assert kio_answer(frame, version, header.header_size) is ProtocolError


def test_a_string_past_kafkas_limit_is_refused_by_kio():
    request = produce_request(9, "t" * 40_000, [("orders", [(0, b"r")])])
    frame = b"x" + encode_entity(request)
    assert decode_produce_request(frame, 9, 1) is None
    assert kio_answer(frame, 9, 1) is ProtocolError


names = st.text(max_size=6) | st.sampled_from(["", "a" * 200])
records = st.none() | st.binary(max_size=40)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(VERSIONS),
    st.none() | names,
    st.lists(
        st.tuples(names, st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), records), max_size=3)),
        max_size=3,
    ),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.integers(0, 10_000),
    st.binary(max_size=4),
)
def test_changed_bytes_read_as_kio_or_are_left_to_it(version, transactional_id, topics, flips, cut, tail):
    """Requests with bytes changed, cut short or extended: wherever this reader answers, kio gives the same
    request; wherever kio refuses the body, this reader leaves it to kio."""
    if version >= 13:
        topics = [(uuid.UUID(bytes=(name.encode() * 16)[:16]) if name else None, ps) for name, ps in topics]
    request = produce_request(version, transactional_id, topics)
    frame = b"head" + encode_entity(request)
    assert decode_produce_request(frame, version, 4) == request
    changed = bytearray(frame)
    for position, value in flips:
        changed[4 + position % (len(changed) - 4)] = value
    if cut:
        changed = changed[: max(4, len(changed) - cut % 16)]
    changed += tail
    data = bytes(changed)
    expected = kio_answer(data, version, 4)
    for frame in (data, memoryview(bytearray(data)).toreadonly()):
        mine = decode_produce_request(frame, version, 4)
        if mine is not None:
            assert mine == expected


def produce_response(errors: list[Any]) -> Any:
    from kio.schema.produce.v11 import response as r11

    partitions = tuple(
        r11.PartitionProduceResponse(
            index=i, error_code=e, base_offset=-1, log_append_time=None, log_start_offset=-1, record_errors=()
        )
        for i, e in enumerate(errors)
    )
    return r11.ProduceResponse(
        responses=(r11.TopicProduceResponse(name="orders", partition_responses=partitions),),
        throttle_time=datetime.timedelta(0),
    )


class _Registration:
    leader, leader_epoch, host, port, rack = 2, 7, "127.0.0.1", 9092, None


class _Image:
    """A broker's metadata image: partition 1 of orders led by broker 2."""

    brokers = {2: _Registration()}

    def partition(self, name: str, index: int) -> _Registration | None:
        return _Registration() if (name, index) == ("orders", 1) else None

    def endpoint(self, broker: int, listener: str) -> _Registration:
        return _Registration()


class _Context:
    listener_name = "PLAINTEXT"

    def __init__(self, image: Any) -> None:
        self.broker = type("Broker", (), {"cache": type("Cache", (), {"image": image})()})()


def test_a_not_leader_answer_names_the_leader_and_its_endpoint():
    """KIP-951 (KafkaApis.handleProduceRequest): NOT_LEADER_OR_FOLLOWER carries the current leader."""
    from kio.schema.produce.v11 import response as r11

    from epochkraft.protocol.errors import ErrorCode
    from epochkraft.server.handlers.k00_produce import _with_leader_hints

    built = produce_response([ErrorCode.none, ErrorCode.not_leader_or_follower])
    hinted = _with_leader_hints(built, ["orders"], _Context(_Image()), r11)
    first, second = hinted.responses[0].partition_responses
    assert first == built.responses[0].partition_responses[0]
    assert (second.current_leader.leader_id, second.current_leader.leader_epoch) == (2, 7)
    assert [(n.node_id, n.host, n.port) for n in hinted.node_endpoints] == [(2, "127.0.0.1", 9092)]


def test_a_response_with_nothing_to_hint_is_answered_as_built_without_metadata_lookups():
    from kio.schema.produce.v11 import response as r11

    from epochkraft.protocol.errors import ErrorCode
    from epochkraft.server.handlers.k00_produce import _with_leader_hints

    built = produce_response([ErrorCode.none, ErrorCode.none])
    assert _with_leader_hints(built, ["orders"], _Context(None), r11) is built  # None: any lookup fails
