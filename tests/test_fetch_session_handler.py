"""The follower's fetch session (KIP-227), as Kafka's FetchSessionHandlerTest: each test names the Kafka
case it reproduces. The fetcher speaks Fetch v13+ only, so every case runs with topic ids."""

from __future__ import annotations

import uuid

import pytest

from epochkraft.broker.fetch_session_handler import (
    FINAL_EPOCH,
    INITIAL,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchMetadata,
    FetchSessionHandler,
    PartitionData,
    TopicIdPartition,
    find_missing,
    next_epoch,
)
from epochkraft.protocol.errors import ErrorCode

FOO, BAR = uuid.uuid4(), uuid.uuid4()
IDS = {"foo": FOO, "bar": BAR}


def req(topic: str, partition: int, fetch_offset: int, log_start: int, max_bytes: int):
    """ReqEntry: one partition's fetch data (leader epochs fixed)."""
    return (topic, partition), PartitionData(IDS[topic], fetch_offset, log_start, max_bytes, 5, 4)


def req_map(*entries):
    return dict(entries)


def build(handler: FetchSessionHandler, *entries):
    builder = handler.new_builder()
    for tp, data in entries:
        builder.add(tp, data)
    return builder.build()


def resp(*partitions: tuple[str, int]):
    """RespEntry: the (topic id, partition) pairs an answer names."""
    return [(IDS[topic], index) for topic, index in partitions]


def assert_ordered(expected: dict, actual) -> None:
    """assertMapEquals: the same entries in the same order."""
    assert list(actual.items()) == list(expected.items())


def test_find_missing():
    """testFindMissing."""
    foo0, foo1, bar0, bar1, baz0, baz1 = (
        ("foo", 0),
        ("foo", 1),
        ("bar", 0),
        ("bar", 1),
        ("baz", 0),
        ("baz", 1),
    )
    assert find_missing([foo0], [foo0]) == []
    assert find_missing([foo0], [foo1]) == [foo0]
    assert find_missing([foo0, foo1], [baz0]) == [foo0, foo1]
    assert find_missing([foo0, foo1, bar0, bar1], [bar0, baz0, baz1]) == [foo0, foo1, bar1]
    assert find_missing([foo0, foo1, bar0, bar1, baz1], [foo0, foo1, bar0, bar1, baz0, baz1]) == []


def test_sessionless():
    """testSessionless: a leader that answers session id 0 is fetched in full, every partition, every time."""
    handler = FetchSessionHandler(1)
    data = build(handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210))
    expected = req_map(req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210))
    assert_ordered(expected, data.to_send)
    assert_ordered(expected, data.session_partitions)
    assert data.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)

    assert handler.handle_response(ErrorCode.none, INVALID_SESSION_ID, resp(("foo", 0), ("foo", 1)))

    data2 = build(handler, req("foo", 0, 0, 100, 200))
    assert data2.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
    assert_ordered(req_map(req("foo", 0, 0, 100, 200)), data2.to_send)
    assert_ordered(req_map(req("foo", 0, 0, 100, 200)), data2.session_partitions)
    assert data2.forgotten == []


def test_incrementals():
    """testIncrementals: after the leader opens a session, a request sends the added and altered partitions
    only (added first); INVALID_FETCH_SESSION_EPOCH closes it and the next request is full again."""
    handler = FetchSessionHandler(1)
    data = build(handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210))
    assert data.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
    assert handler.handle_response(ErrorCode.none, 123, resp(("foo", 0), ("foo", 1)))

    data2 = build(
        handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 120, 210), req("bar", 0, 20, 200, 200)
    )
    assert not data2.metadata.is_full
    assert data2.metadata == FetchMetadata(123, 1)
    assert_ordered(
        req_map(req("foo", 0, 0, 100, 200), req("foo", 1, 10, 120, 210), req("bar", 0, 20, 200, 200)),
        data2.session_partitions,
    )
    assert_ordered(req_map(req("bar", 0, 20, 200, 200), req("foo", 1, 10, 120, 210)), data2.to_send)

    assert handler.handle_response(ErrorCode.none, 123, resp(("foo", 1)))
    assert handler.next_metadata == FetchMetadata(123, 2)
    assert not handler.handle_response(ErrorCode.invalid_fetch_session_epoch, INVALID_SESSION_ID, [])

    data4 = build(
        handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 120, 210), req("bar", 0, 20, 200, 200)
    )
    assert data4.metadata.is_full
    assert data4.metadata == FetchMetadata(data2.metadata.session_id, INITIAL_EPOCH)
    expected = req_map(req("foo", 0, 0, 100, 200), req("foo", 1, 10, 120, 210), req("bar", 0, 20, 200, 200))
    assert_ordered(expected, data4.session_partitions)
    assert_ordered(expected, data4.to_send)


@pytest.mark.parametrize(
    "field, value",
    [
        ("fetch_offset", 11),
        ("log_start_offset", 111),
        ("max_bytes", 211),
        ("current_leader_epoch", 6),
        ("last_fetched_epoch", 5),
    ],
)
def test_incremental_sends_a_partition_whose_fetch_data_changed(field, value):
    """As testIncrementals' altered partition, for each field of PartitionData: any change is sent."""
    handler = FetchSessionHandler(1)
    foo0, foo1 = req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210)
    build(handler, foo0, foo1)
    handler.handle_response(ErrorCode.none, 123, resp(("foo", 0), ("foo", 1)))
    altered = foo1[1]._replace(**{field: value})
    data = build(handler, foo0, (foo1[0], altered))
    assert_ordered({("foo", 1): altered}, data.to_send)
    assert data.forgotten == []


def test_double_build():
    """testDoubleBuild: a builder builds once."""
    handler = FetchSessionHandler(1)
    builder = handler.new_builder()
    builder.add(*req("foo", 0, 0, 100, 200))
    builder.build()
    with pytest.raises(RuntimeError):
        builder.build()


def test_incremental_partition_removal():
    """testIncrementalPartitionRemoval: partitions no longer wanted are forgotten and nothing unchanged is
    sent; FETCH_SESSION_ID_NOT_FOUND starts a new session from scratch (session id 0)."""
    handler = FetchSessionHandler(1)
    data = build(
        handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210), req("bar", 0, 20, 120, 220)
    )
    assert data.metadata.is_full
    assert handler.handle_response(ErrorCode.none, 123, resp(("foo", 0), ("foo", 1), ("bar", 0)))

    data2 = build(handler, req("foo", 1, 10, 110, 210))
    assert not data2.metadata.is_full
    assert data2.metadata == FetchMetadata(123, 1)
    assert_ordered(req_map(req("foo", 1, 10, 110, 210)), data2.session_partitions)
    assert_ordered({}, data2.to_send)
    assert sorted(data2.to_forget) == sorted(
        [TopicIdPartition(FOO, "foo", 0), TopicIdPartition(BAR, "bar", 0)]
    )

    assert not handler.handle_response(ErrorCode.fetch_session_id_not_found, INVALID_SESSION_ID, [])
    data3 = build(handler, req("foo", 0, 0, 100, 200))
    assert data3.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
    assert_ordered(req_map(req("foo", 0, 0, 100, 200)), data3.session_partitions)
    assert_ordered(req_map(req("foo", 0, 0, 100, 200)), data3.to_send)


def test_topic_id_replaced_in_session():
    """As the replaced-topic cases of FetchSessionHandlerTest: the same partition under a new topic id (the
    topic deleted and created again) is sent with the new id and the old id is forgotten (v13+)."""
    handler = FetchSessionHandler(1)
    build(handler, req("foo", 0, 0, 100, 200))
    handler.handle_response(ErrorCode.none, 123, resp(("foo", 0)))
    new_id = uuid.uuid4()
    recreated = PartitionData(new_id, 0, 0, 200, 5, 4)
    data = build(handler, (("foo", 0), recreated))
    assert_ordered({("foo", 0): recreated}, data.to_send)
    assert data.to_forget == [] and data.to_replace == [TopicIdPartition(FOO, "foo", 0)]
    assert data.forgotten == [TopicIdPartition(FOO, "foo", 0)]
    assert handler.handle_response(ErrorCode.none, 123, [(new_id, 0)]), "the new id is the session's"


def test_verify_full_fetch_response_partitions():
    """testVerifyFullFetchResponsePartitions: a full answer naming partitions outside the session, or
    leaving some out, is invalid."""
    handler = FetchSessionHandler(1)
    issue = handler.verify_full_fetch_response_partitions([("foo", 0), ("foo", 1), ("bar", 0)], [])
    assert issue is not None and "extra" in issue and "omitted" not in issue
    build(handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210), req("bar", 0, 20, 120, 220))
    assert (
        handler.verify_full_fetch_response_partitions([("foo", 0), ("foo", 1), ("bar", 0)], [FOO, BAR])
        is None
    )
    issue3 = handler.verify_full_fetch_response_partitions([("foo", 0), ("foo", 1)], [FOO])
    assert issue3 is not None and "extra" not in issue3 and "omitted" in issue3


def test_verify_full_fetch_response_partitions_with_topic_ids():
    """testVerifyFullFetchResponsePartitionsWithTopicIds: a topic id outside the session is an extra id."""
    handler = FetchSessionHandler(1)
    extra_id = uuid.uuid4()
    build(handler, req("foo", 0, 0, 100, 200), req("bar", 0, 20, 120, 220))
    issue = handler.verify_full_fetch_response_partitions([("foo", 0), ("bar", 0)], [FOO, extra_id, BAR])
    assert (
        issue is not None
        and "extraIds=" in issue
        and "extraPartitions" not in issue
        and "omitted" not in issue
    )
    assert handler.verify_full_fetch_response_partitions([("foo", 0), ("bar", 0)], [FOO, BAR]) is None


def test_full_response_missing_a_partition_starts_again():
    """handleResponse: an invalid full answer (a partition left out, or an unknown topic id) is refused and
    the next request is full with no session, even when the answer opened one."""
    handler = FetchSessionHandler(1)
    build(handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210))
    assert not handler.handle_response(ErrorCode.none, 123, resp(("foo", 0)))
    assert handler.next_metadata == INITIAL
    build(handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210))
    assert not handler.handle_response(
        ErrorCode.none, 123, [*resp(("foo", 0), ("foo", 1)), (uuid.uuid4(), 0)]
    )
    assert handler.next_metadata == INITIAL


def test_incremental_response_naming_unknown_partition_closes_the_session():
    """handleResponse: an incremental answer naming a partition outside the session is refused; the next
    request closes the session and asks for a new one (same id, epoch 0)."""
    handler = FetchSessionHandler(1)
    build(handler, req("foo", 0, 0, 100, 200))
    assert handler.handle_response(ErrorCode.none, 123, resp(("foo", 0)))
    build(handler, req("foo", 0, 0, 100, 200))
    assert handler.handle_response(ErrorCode.none, 123, []), "an empty incremental answer is valid"
    build(handler, req("foo", 0, 0, 100, 200))
    assert not handler.handle_response(ErrorCode.none, 123, resp(("foo", 1)))
    assert handler.next_metadata == FetchMetadata(123, INITIAL_EPOCH)


def test_incremental_response_with_session_id_zero_closes_the_session():
    """handleResponse: session id 0 in an incremental answer means the leader closed the session."""
    handler = FetchSessionHandler(1)
    build(handler, req("foo", 0, 0, 100, 200))
    handler.handle_response(ErrorCode.none, 123, resp(("foo", 0)))
    build(handler, req("foo", 0, 1, 100, 200))
    assert handler.handle_response(ErrorCode.none, INVALID_SESSION_ID, resp(("foo", 0)))
    assert handler.next_metadata == INITIAL


def test_throttled_empty_full_response():
    """handleResponse (KIP-219): an empty full answer with a throttle time is not applied, nor an error."""
    handler = FetchSessionHandler(1)
    build(handler, req("foo", 0, 0, 100, 200))
    assert not handler.handle_response(ErrorCode.none, 123, [], throttle_time_ms=100)
    assert handler.next_metadata == INITIAL


def test_top_level_error_resets_metadata():
    """testTopLevelErrorResetsMetadata: a top-level error other than FETCH_SESSION_ID_NOT_FOUND closes the
    session and asks for a new one in the next request (same session id, epoch 0)."""
    handler = FetchSessionHandler(1)
    data = build(handler, req("foo", 0, 0, 100, 200), req("foo", 1, 10, 110, 210))
    assert data.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
    handler.handle_response(ErrorCode.none, 123, resp(("foo", 0), ("foo", 1)))

    unknown = uuid.uuid4()
    builder2 = handler.new_builder()
    builder2.add(("unknown", 0), PartitionData(unknown, 0, 100, 200, 5, 4))
    data2 = builder2.build()
    assert not data2.metadata.is_full
    assert data2.metadata == FetchMetadata(123, next_epoch(INITIAL_EPOCH))

    assert not handler.handle_response(ErrorCode.unknown_topic_id, 123, [(unknown, 0)])
    data3 = handler.new_builder().build()
    assert data3.metadata == FetchMetadata(123, INITIAL_EPOCH)


def test_handle_error_starts_a_new_session():
    """handleError: a failed send (a lost or new connection) closes the session and asks for a new one."""
    handler = FetchSessionHandler(1)
    build(handler, req("foo", 0, 0, 100, 200))
    handler.handle_response(ErrorCode.none, 123, resp(("foo", 0)))
    handler.handle_error("connection lost")
    data = build(handler, req("foo", 0, 0, 100, 200))
    assert data.metadata == FetchMetadata(123, INITIAL_EPOCH)
    assert_ordered(req_map(req("foo", 0, 0, 100, 200)), data.to_send)
    handler.notify_close()
    assert handler.next_metadata == FetchMetadata(123, FINAL_EPOCH) and handler.next_metadata.is_full


@pytest.mark.parametrize(
    "prev, expected",
    [(INITIAL_EPOCH, 1), (1, 2), (2**31 - 1, 1), (FINAL_EPOCH, FINAL_EPOCH), (-5, FINAL_EPOCH)],
)
def test_next_epoch_wraps_past_initial(prev, expected):
    """FetchMetadata.nextEpoch: FINAL stays FINAL; after the largest int32 the epoch is 1, never 0."""
    assert next_epoch(prev) == expected


def test_an_invalid_answer_is_described_in_a_line_at_thousands_of_partitions():
    """The problem logged for an invalid answer names a few partitions, not all of them."""
    handler = FetchSessionHandler(1)
    build(handler, *(req("foo", i, 0, 0, 1) for i in range(5000)))
    problem = handler.verify_full_fetch_response_partitions([("foo", i) for i in range(2, 5000)], [FOO])
    assert problem == (
        "omittedPartitions=(('foo', 0), ('foo', 1)), response=(('foo', 2), ('foo', 3), ('foo', 4), ('foo', 5),"
        " ('foo', 6), ('foo', 7), ('foo', 8), ('foo', 9), ('foo', 10), ('foo', 11), ... 4988 more)"
    )
