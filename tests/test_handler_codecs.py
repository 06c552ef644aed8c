"""Handlers that encode their own response bodies produce exactly kio's bytes, at every version served."""

import datetime
import importlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.alter_partition.v2 import response as v2
from kio.schema.alter_partition.v3 import response as v3

from epochkraft.protocol import fetch_response as fetch
from epochkraft.protocol import list_offsets_response as list_offsets
from epochkraft.protocol.api import BROKER
from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.protocol.framing import decode_entity, encode_entity, response_class
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.handlers import served
from epochkraft.server.handlers._util import build
from epochkraft.server.handlers.k56_alter_partition import encode_response

int32 = st.integers(-(2**31), 2**31 - 1)
partitions = st.builds(
    v3.PartitionData,
    partition_index=int32,
    error_code=st.sampled_from(list(ErrorCode)),
    leader_id=int32,
    leader_epoch=int32,
    isr=st.lists(int32, max_size=200).map(tuple),
    leader_recovery_state=st.integers(-128, 127),
    partition_epoch=int32,
)
responses = st.builds(
    v3.AlterPartitionResponse,
    throttle_time=st.integers(0, 2**31 - 1).map(lambda n: datetime.timedelta(milliseconds=n)),
    error_code=st.sampled_from(list(ErrorCode)),
    topics=st.lists(
        st.builds(
            v3.TopicData, topic_id=st.uuids(), partitions=st.lists(partitions, max_size=150).map(tuple)
        ),
        max_size=4,
    ).map(tuple),
)


@given(responses)
def test_alter_partition_response_bytes_match_kio(response):
    ours = encode_response(response)
    assert ours == encode_entity(response)
    assert ours == encode_entity(downgrade_response(response, 2))
    assert decode_entity(v2.AlterPartitionResponse, ours) == downgrade_response(response, 2)


def test_alter_partition_response_of_a_thousand_partitions():
    topic_id = uuid.uuid4()
    response = v3.AlterPartitionResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        topics=(
            v3.TopicData(
                topic_id=topic_id,
                partitions=tuple(
                    v3.PartitionData(
                        partition_index=i,
                        error_code=ErrorCode.none if i % 7 else ErrorCode.invalid_update_version,
                        leader_id=1,
                        leader_epoch=3,
                        isr=(1, 2, 3)[: 1 + i % 3],
                        leader_recovery_state=0,
                        partition_epoch=i,
                    )
                    for i in range(1000)
                ),
            ),
        ),
    )
    assert encode_response(response) == encode_entity(response)


# ---- Fetch: our pieces, joined, are kio's bytes at every served version --------------------------------
def _kio_fetch_response(
    version, topics, read_committed=False, nodes=(), error_code=ErrorCode.none, session_id=0
):
    """The reference: the same answers as kio entities (built at v16 and converted, or by name < v13)."""
    cls = response_class(1, version)
    module = importlib.import_module(cls.__module__)

    def partition(a):
        fields = {
            "partition_index": a.index,
            "error_code": a.error,
            "high_watermark": a.high_watermark,
            "last_stable_offset": a.high_watermark if a.last_stable_offset is None else a.last_stable_offset,
            "log_start_offset": a.log_start_offset,
            # null for read_uncommitted reads and failed reads; the read range's when a read_committed read
            # succeeded; the schema's empty default when refused before a read
            "aborted_transactions": tuple(
                module.AbortedTransaction(producer_id=pid, first_offset=first)
                for pid, first in a.aborted_transactions
            )
            if (read_committed and a.error == ErrorCode.none) or a.error in fetch.UNREAD_ERRORS
            else None,
            "preferred_read_replica": -1,
            "records": b"".join(a.records),  # never null, as Kafka: an error partition has empty records
        }
        if a.diverging is not None:
            fields["diverging_epoch"] = module.EpochEndOffset(epoch=a.diverging[0], end_offset=a.diverging[1])
        if a.current_leader is not None:
            fields["current_leader"] = module.LeaderIdAndEpoch(
                leader_id=a.current_leader[0], leader_epoch=a.current_leader[1]
            )
        return build(module.PartitionData, **fields)

    key = "topic_id" if version >= 13 else "topic"
    responses = tuple(
        module.FetchableTopicResponse(**{key: t, "partitions": tuple(map(partition, answers))})
        for t, answers in topics
    )
    return build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=error_code,
        session_id=session_id,
        responses=responses,
        node_endpoints=tuple(module.NodeEndpoint(node_id=n, host=h, port=p, rack=r) for n, h, p, r in nodes)
        if nodes
        else (),
    )


int64 = st.integers(-(2**63), 2**63 - 1)
chunks = st.lists(st.binary(max_size=300), max_size=3)
answers = st.builds(
    fetch.Answer,
    index=int32,
    error=st.sampled_from(list(ErrorCode)),
    high_watermark=int64,
    log_start_offset=int64,
    records=chunks,
    diverging=st.none() | st.tuples(int32, int64),
    current_leader=st.none() | st.tuples(int32, int32),
    last_stable_offset=st.none() | int64,
    aborted_transactions=st.lists(st.tuples(int64, int64), max_size=3),
)
endpoints = st.lists(
    st.tuples(int32, st.text(max_size=20), int32, st.none() | st.text(max_size=8)), max_size=3
)


@given(
    version=st.integers(4, served(BROKER)[1].max_version),
    # None: the zero topic id a Fetch may name (kio decodes it as None), echoed back with UNKNOWN_TOPIC_ID
    topics=st.lists(
        st.tuples(st.none() | st.uuids(), st.text(max_size=20), st.lists(answers, max_size=5)), max_size=3
    ),
    read_committed=st.booleans(),
    nodes=endpoints,
    session=st.tuples(st.sampled_from(list(ErrorCode)), int32),  # KIP-227's top-level error and session id
)
def test_fetch_response_pieces_join_to_kio_bytes(version, topics, read_committed, nodes, session):
    by_version = [(tid if version >= 13 else name, ps) for tid, name, ps in topics]
    if version < 12:  # no DivergingEpoch or CurrentLeader before v12
        by_version = [
            (t, [a._replace(diverging=None, current_leader=None) for a in ps]) for t, ps in by_version
        ]
    nodes = nodes if version >= 16 else []  # NodeEndpoints (KIP-951) from v16
    error_code, session_id = session if version >= 7 else (ErrorCode.none, 0)  # no session fields before v7
    pieces = fetch.encode_response(version, by_version, read_committed, nodes, error_code, session_id)
    ours = b"".join(pieces)
    expected = _kio_fetch_response(version, by_version, read_committed, nodes, error_code, session_id)
    assert ours == encode_entity(expected)
    # Record buffers are handed on as they are, not copied into the encoding.
    records = [c for _, ps in by_version for a in ps if a.records for c in a.records if c]
    assert all(any(piece is c for piece in pieces) for c in records)


@pytest.mark.parametrize("version", [7, 12, 13, 16, 18])
@pytest.mark.parametrize(
    ("with_partitions", "error_code", "session_id"),
    [
        (True, ErrorCode.none, 123456789),  # a session's full or incremental answer
        (False, ErrorCode.none, 2**31 - 1),  # an incremental answer with nothing new
        (False, ErrorCode.invalid_fetch_session_epoch, 0),
        (False, ErrorCode.fetch_session_id_not_found, 0),
        (False, ErrorCode.fetch_session_topic_id_error, 0),
    ],
)
def test_fetch_response_with_a_session_id_and_a_top_level_error(
    version, with_partitions, error_code, session_id
):
    topic = uuid.UUID(int=7) if version >= 13 else "t"
    answers = [fetch.Answer(0, ErrorCode.none, 5, 0, [b"records"]), fetch.Answer(1, ErrorCode.none, 9, 2)]
    topics = [(topic, answers)] if with_partitions else []
    ours = b"".join(fetch.encode_response(version, topics, error_code=error_code, session_id=session_id))
    assert ours == encode_entity(
        _kio_fetch_response(version, topics, error_code=error_code, session_id=session_id)
    )
    if 13 <= version <= 16:  # what a follower reads back
        assert fetch.decode_partitions(ours, 0)[0] == error_code


@pytest.mark.parametrize("version", [4, 7, 13, 18])
def test_a_throttled_fetch_keeps_its_session(version):
    """IncrementalFetchContext.getThrottledResponse: the empty answer of a throttled Fetch carries the session
    id given and keeps the top-level error (none before v7, which has no session fields)."""
    topic = uuid.UUID(int=7) if version >= 13 else "t"
    answered = fetch.encode_response(
        version, [(topic, [fetch.Answer(0, ErrorCode.none, 5, 0, [b"records"])])], session_id=4242
    )
    throttled = decode_entity(response_class(1, version), b"".join(fetch.throttled(version, answered, 4242)))
    assert throttled.responses == ()
    if version >= 7:
        assert (throttled.error_code, throttled.session_id) == (ErrorCode.none, 4242)
        dropped = decode_entity(response_class(1, version), b"".join(fetch.throttled(version, answered, 0)))
        assert (dropped.error_code, dropped.session_id) == (ErrorCode.none, 0)
    refused = fetch.encode_response(
        version, [], error_code=ErrorCode.invalid_fetch_session_epoch, session_id=9
    )
    if version >= 7:
        again = decode_entity(response_class(1, version), b"".join(fetch.throttled(version, refused, 9)))
        assert (again.error_code, again.session_id) == (ErrorCode.invalid_fetch_session_epoch, 9)


def _kio_v16_partition(draw_records, index, error, hw, diverging, aborted):
    from kio.schema.fetch.v16 import response as r16

    return r16.PartitionData(
        partition_index=index,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=hw,
        log_start_offset=0,
        diverging_epoch=r16.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
        if diverging
        else r16.EpochEndOffset(epoch=-1, end_offset=-1),
        aborted_transactions=tuple(
            r16.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in aborted
        ),
        preferred_read_replica=-1,
        records=draw_records,
    )


fetched = st.tuples(
    st.none() | st.binary(max_size=400),
    int32,
    st.sampled_from(list(ErrorCode)),
    int64,
    st.none() | st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)),
    st.lists(st.tuples(int64, int64), max_size=3),
)


@given(
    version=st.integers(13, 16),
    topics=st.lists(st.tuples(st.uuids(), st.lists(fetched, max_size=4)), max_size=3),
    error=st.sampled_from([ErrorCode.none, ErrorCode.unknown_server_error]),
    cut=st.integers(0, 10_000),
    session_id=int32,
)
def test_follower_decode_reads_what_kio_encodes_and_refuses_truncated_frames(
    version, topics, error, cut, session_id
):
    from kio.schema.fetch.v16 import response as r16

    response = r16.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=error,
        session_id=session_id,
        responses=tuple(
            r16.FetchableTopicResponse(topic_id=tid, partitions=tuple(_kio_v16_partition(*p) for p in ps))
            for tid, ps in topics
        ),
    )
    body = encode_entity(downgrade_response(response, version))
    top_error, top_session_id, _throttle, partitions = fetch.decode_partitions(b"head" + body, 4)
    assert (top_error, top_session_id) == (error, session_id)
    expected = [
        (tid, index, err, hw, records, tuple(diverging) if diverging else None)
        for tid, ps in topics
        for records, index, err, hw, diverging, _aborted in ps
    ]
    assert [
        (
            p.topic_id,
            p.index,
            p.error,
            p.high_watermark,
            None if p.records is None else bytes(p.records),
            p.diverging,
        )
        for p in partitions
    ] == expected
    if cut < len(body):  # any truncation is a ProtocolError, never another exception
        with pytest.raises(ProtocolError):
            fetch.decode_partitions(body[:cut], 0)


offsets = st.builds(
    list_offsets.Offset,
    partition=int32,
    error=st.sampled_from(list(ErrorCode)),
    timestamp=st.integers(-(2**63), 2**63 - 1),
    offset=st.integers(-(2**63), 2**63 - 1),
    leader_epoch=int32,
)


@pytest.mark.parametrize("version", range(1, 12))
@settings(max_examples=10)
@given(
    throttle_ms=st.integers(0, 2**31 - 1),
    topics=st.lists(st.tuples(st.text(max_size=40), st.lists(offsets, max_size=10)), max_size=4),
)
def test_list_offsets_response_bytes_match_kio(version, throttle_ms, topics):
    """ListOffsets v1-v11: protocol/list_offsets_response.py's bytes are kio's for the same answer (fields
    a version lacks are left out, as kio's conversion drops them)."""
    from kio.schema.list_offsets.v8 import response as r8

    entity = r8.ListOffsetsResponse(
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        topics=tuple(
            r8.ListOffsetsTopicResponse(
                name=name,
                partitions=tuple(
                    r8.ListOffsetsPartitionResponse(
                        partition_index=o.partition,
                        error_code=o.error,
                        timestamp=o.timestamp,
                        offset=o.offset,
                        leader_epoch=o.leader_epoch,
                    )
                    for o in parts
                ),
            )
            for name, parts in topics
        ),
    )
    expected = encode_entity(downgrade_response(entity, version))
    assert list_offsets.encode_response(version, throttle_ms, topics) == expected


@pytest.mark.parametrize(
    ("error", "read_committed", "expected"),
    [
        (ErrorCode.none, False, None),  # read_uncommitted: no aborted list at all
        (ErrorCode.none, True, ((7, 3),)),  # the read range's
        (ErrorCode.fenced_leader_epoch, True, None),  # a read that failed (ReplicaManager.readFromLog)
        (ErrorCode.offset_out_of_range, True, None),
        (ErrorCode.unknown_topic_id, False, ()),  # refused before a read: the schema's empty default
        (ErrorCode.topic_authorization_failed, False, ()),
        (ErrorCode.topic_authorization_failed, True, ()),
    ],
)
def test_aborted_transactions_as_kafka_answers_them(error, read_committed, expected):
    """KafkaApis.handleFetchRequest: a partition's aborted transactions come from its log read (present only
    for read_committed, absent when the read failed); the partitions refused before the read
    (FetchResponse.partitionResponse) carry the schema's empty default."""
    answer = fetch.Answer(0, error, 5, 0, aborted_transactions=[(7, 3)] if error == ErrorCode.none else [])
    body = b"".join(fetch.encode_response(13, [(uuid.UUID(int=7), [answer])], read_committed))
    decoded = decode_entity(response_class(1, 13), body).responses[0].partitions[0]
    got = decoded.aborted_transactions
    assert (None if got is None else tuple((a.producer_id, a.first_offset) for a in got)) == expected
