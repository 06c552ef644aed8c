"""The leader's incremental fetch sessions (KIP-227), after Kafka's FetchSessionTest: the cache's creation and
eviction rules, the context each request gets, and which partitions an incremental response carries."""

from __future__ import annotations

import random
import uuid

import pytest

from epochkraft.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchContext,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    PartitionData,
    PartitionKey,
    SessionErrorContext,
    SessionlessFetchContext,
    SessionResponse,
    next_epoch,
)
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.fetch_response import Answer

LATEST = 18  # topic ids
BY_NAME = 12  # the last version naming topics
FOO, BAR, ZAR = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def cache(slots: int = 10, eviction_ms: int = 1000) -> FetchSessionCache:
    return FetchSessionCache(slots, eviction_ms, random.Random(0))


def manager(slots: int = 10, eviction_ms: int = 1000) -> FetchManager:
    return FetchManager(cache(slots, eviction_ms))


def data(offset: int, leader_epoch: int = -1, last_fetched_epoch: int = -1) -> PartitionData:
    return PartitionData(offset, 100, leader_epoch, last_fetched_epoch, 0)


def answer(
    index: int,
    hw: int,
    log_start: int,
    records: bytes = b"",
    error: ErrorCode = ErrorCode.none,
    diverging: tuple[int, int] | None = None,
) -> Answer:
    return Answer(index, error, hw, log_start, [records] if records else [], diverging)


def dummy_create(size: int):
    return lambda: {(uuid.uuid4(), i): CachedPartition(data(0)) for i in range(size)}


def new_context(
    fm: FetchManager,
    session_id: int,
    epoch: int,
    fetch_data: dict[PartitionKey, PartitionData] | None = None,
    to_forget: list[PartitionKey] | None = None,
    now_ms: int = 0,
    follower: bool = False,
    version: int = LATEST,
) -> FetchContext:
    return fm.new_context(version, session_id, epoch, follower, fetch_data or {}, to_forget or [], now_ms)


def full_session(fm: FetchManager, answers: dict[PartitionKey, Answer], now_ms: int = 0, **kw) -> int:
    """A session opened by a full fetch of the partitions answered (offset 0 for each)."""
    context = new_context(
        fm, INVALID_SESSION_ID, INITIAL_EPOCH, dict.fromkeys(answers, data(0)), now_ms=now_ms, **kw
    )
    assert isinstance(context, FullFetchContext)
    response = context.response(list(answers.items()), now_ms)
    assert response.error == ErrorCode.none and response.session_id != INVALID_SESSION_ID
    return response.session_id


def sent(response: SessionResponse) -> list[PartitionKey]:
    return [key for key, _ in response.answers]


def assert_cache_contains(c: FetchSessionCache, *ids: int) -> None:
    assert all(c.get(i) is not None for i in ids)
    assert len(c) == len(ids)


def test_new_session_id():
    """testNewSessionId: ids are positive, never 0, and not in use."""
    c = cache(slots=3)
    ids = {c.new_session_id() for _ in range(10_000)}
    assert all(0 < i < 2**31 for i in ids)
    # a generator that keeps drawing an id in use is asked again
    first = c.maybe_create_session(0, False, 1, True, dummy_create(1))
    c.rng = random.Random(0)
    assert c.new_session_id() != first


def test_next_epoch_wraps_to_one():
    """FetchMetadata.nextEpoch: after the largest epoch comes 1, never the full fetch's 0."""
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_session_cache():
    """testSessionCache: a full cache refuses newcomers until a session goes stale or a less valuable one
    (smaller, a consumer's) is old enough to be evicted."""
    c = cache(slots=3, eviction_ms=100)
    assert len(c) == 0
    id1 = c.maybe_create_session(0, False, 10, True, dummy_create(10))
    id2 = c.maybe_create_session(10, False, 20, True, dummy_create(20))
    id3 = c.maybe_create_session(20, False, 30, True, dummy_create(30))
    assert c.maybe_create_session(30, False, 40, True, dummy_create(40)) == INVALID_SESSION_ID
    assert c.maybe_create_session(40, False, 5, True, dummy_create(5)) == INVALID_SESSION_ID
    assert_cache_contains(c, id1, id2, id3)
    c.touch(c.sessions[id1], 200)
    id4 = c.maybe_create_session(210, False, 11, True, dummy_create(11))
    assert_cache_contains(c, id1, id3, id4)
    c.touch(c.sessions[id1], 400)
    c.touch(c.sessions[id3], 390)
    c.touch(c.sessions[id4], 400)
    id5 = c.maybe_create_session(410, False, 50, True, dummy_create(50))
    assert_cache_contains(c, id3, id4, id5)
    assert c.maybe_create_session(410, False, 5, True, dummy_create(5)) == INVALID_SESSION_ID
    id6 = c.maybe_create_session(410, True, 5, True, dummy_create(5))
    assert_cache_contains(c, id3, id5, id6)


def test_resize_cached_sessions():
    """testResizeCachedSessions: the partition count follows sessions created, evicted, removed and
    resized (recounted when touched)."""
    c = cache(slots=2, eviction_ms=100)
    assert (c.total_partitions, len(c), c.evictions) == (0, 0, 0)
    id1 = c.maybe_create_session(0, False, 2, True, dummy_create(2))
    assert id1 > 0
    assert (c.total_partitions, len(c), c.evictions) == (2, 1, 0)
    id2 = c.maybe_create_session(0, False, 4, True, dummy_create(4))
    session2 = c.sessions[id2]
    assert_cache_contains(c, id1, id2)
    assert (c.total_partitions, len(c), c.evictions) == (6, 2, 0)
    c.touch(c.sessions[id1], 200)
    c.touch(session2, 200)
    id3 = c.maybe_create_session(200, False, 5, True, dummy_create(5))
    assert_cache_contains(c, id2, id3)
    assert (c.total_partitions, len(c), c.evictions) == (9, 2, 1)
    c.remove_id(id3)
    assert_cache_contains(c, id2)
    assert (c.total_partitions, len(c), c.evictions) == (4, 1, 1)
    del session2.partitions[next(iter(session2.partitions))]
    assert (len(session2.partitions), session2.cached_size) == (3, 4)
    c.touch(session2, session2.last_used_ms)
    assert c.total_partitions == 3


def _cached_field(field: str) -> None:
    """What testCachedLeaderEpoch and testLastFetchedEpoch share: an incremental fetch reads each partition
    with the request data its session last received."""
    fm = manager()
    tp0, tp1, tp2 = (FOO, 0), (FOO, 1), (BAR, 1)

    def request(values: dict[PartitionKey, int]) -> dict[PartitionKey, PartitionData]:
        return {key: PartitionData(10, 100, **{field: value}) for key, value in values.items()}

    def cached(context: FetchContext) -> dict[PartitionKey, int]:
        return {key: getattr(d, field) for key, d in context.partitions()}

    context1 = new_context(fm, INVALID_SESSION_ID, INITIAL_EPOCH, request({tp0: -1, tp1: 1, tp2: 2}))
    assert cached(context1) == {tp0: -1, tp1: 1, tp2: 2}
    answers = [(tp0, answer(0, 100, 100)), (tp1, answer(1, 10, 10)), (tp2, answer(1, 5, 5))]
    session_id = context1.response(answers, 0).session_id
    # with no changes, the cached values stay
    context2 = new_context(fm, session_id, 1)
    assert cached(context2) == {tp0: -1, tp1: 1, tp2: 2}
    context2.response(answers, 0)
    # changed ones are taken in
    context3 = new_context(fm, session_id, 2, request({tp0: 6, tp1: -1, tp2: 3}))
    assert cached(context3) == {tp0: 6, tp1: -1, tp2: 3}


def test_cached_leader_epoch():
    """testCachedLeaderEpoch."""
    _cached_field("current_leader_epoch")


def test_last_fetched_epoch():
    """testLastFetchedEpoch."""
    _cached_field("last_fetched_epoch")


def test_fetch_requests():
    """testFetchRequests: the context for each kind of request, session errors, an incremental fetch
    with nothing new, and closing a session with the final epoch."""
    fm = manager()
    tp0, tp1, tp2, tp3 = (FOO, 0), (FOO, 1), (BAR, 0), (BAR, 1)
    assert isinstance(
        new_context(fm, INVALID_SESSION_ID, FINAL_EPOCH, follower=True), SessionlessFetchContext
    )
    request2 = {tp0: data(0), tp1: data(10)}
    context2 = new_context(fm, INVALID_SESSION_ID, INITIAL_EPOCH, request2)
    assert isinstance(context2, FullFetchContext)
    assert context2.partitions() == list(request2.items())
    answers2 = [(tp0, answer(0, 100, 100)), (tp1, answer(1, 10, 10))]
    response2 = context2.response(answers2, 0)
    assert (response2.error, response2.answers) == (ErrorCode.none, answers2)
    session_id = response2.session_id
    assert session_id != INVALID_SESSION_ID
    # a wrong epoch, then an unknown session
    context3 = new_context(fm, session_id, 5, request2)
    assert isinstance(context3, SessionErrorContext)
    assert context3.partitions() == []
    assert context3.response(answers2, 0) == SessionResponse(
        ErrorCode.invalid_fetch_session_epoch, INVALID_SESSION_ID, []
    )
    context4 = new_context(fm, session_id + 1, 1, request2)
    assert context4.response(answers2, 0).error == ErrorCode.fetch_session_id_not_found
    # the session goes on: every partition read at its cached offset, nothing new to send
    context5 = new_context(fm, session_id, 1)
    assert isinstance(context5, IncrementalFetchContext)
    assert context5.partitions() == list(request2.items())
    assert context5.response(answers2, 0) == SessionResponse(ErrorCode.none, session_id, [])
    assert new_context(fm, session_id, 5, request2).response(answers2, 0).error == (
        ErrorCode.invalid_fetch_session_epoch
    )
    # the final epoch closes the session: sessionless, no new session
    request8 = {tp2: data(0), tp3: data(10)}
    context8 = new_context(fm, session_id, FINAL_EPOCH, request8)
    assert isinstance(context8, SessionlessFetchContext)
    assert len(fm.cache) == 0
    answers8 = [(tp2, answer(0, 100, 100)), (tp3, answer(1, 100, 100))]
    assert context8.response(answers8, 0) == SessionResponse(ErrorCode.none, INVALID_SESSION_ID, answers8)


def test_a_full_fetch_closes_the_session_it_names():
    """FetchManager.newContext: epoch 0 with a session id closes that session and opens a new one."""
    fm = manager()
    first = full_session(fm, {(FOO, 0): answer(0, 1, 0)})
    second = full_session(fm, {(FOO, 0): answer(0, 1, 0)})
    context = new_context(fm, first, INITIAL_EPOCH, {(BAR, 0): data(0)})
    third = context.response([((BAR, 0), answer(0, 1, 0))], 0).session_id
    assert set(fm.cache.sessions) == {second, third}


def test_fetch_v4_to_v6_are_sessionless():
    """Fetch v4-v6 carry no session fields: sessionless whatever the defaults say."""
    fm = manager()
    context = new_context(fm, INVALID_SESSION_ID, INITIAL_EPOCH, {("foo", 0): data(0)}, version=6)
    assert isinstance(context, SessionlessFetchContext)
    assert context.response([(("foo", 0), answer(0, 1, 0))], 0).session_id == INVALID_SESSION_ID
    assert len(fm.cache) == 0


@pytest.mark.parametrize("uses_topic_ids", [True, False])
def test_incremental_fetch_session(uses_topic_ids):
    """testIncrementalFetchSession: an incremental fetch drops what it forgets, adds what it names, and
    answers only the partitions that changed; topics by id (v13+) or by name."""
    fm = manager()
    version = LATEST if uses_topic_ids else BY_NAME
    foo, bar = (FOO, BAR) if uses_topic_ids else ("foo", "bar")
    tp0, tp1, tp2 = (foo, 0), (foo, 1), (bar, 0)
    context1 = new_context(
        fm, INVALID_SESSION_ID, INITIAL_EPOCH, {tp0: data(0), tp1: data(10)}, version=version
    )
    assert isinstance(context1, FullFetchContext)
    response1 = context1.response([(tp0, answer(0, 100, 100)), (tp1, answer(1, 10, 10))], 0)
    assert len(response1.answers) == 2
    context2 = new_context(fm, response1.session_id, 1, {tp2: data(15)}, [tp0], version=version)
    assert isinstance(context2, IncrementalFetchContext)
    assert [(key, d.fetch_offset) for key, d in context2.partitions()] == [(tp1, 10), (tp2, 15)]
    response2 = context2.response([(tp1, answer(1, 10, 10)), (tp2, answer(0, 10, 10))], 0)
    assert response2 == SessionResponse(ErrorCode.none, response1.session_id, [(tp2, answer(0, 10, 10))])


def test_incremental_fetch_session_with_ids_when_session_does_not_use_ids():
    """testIncrementalFetchSessionWithIdsWhenSessionDoesNotUseIds."""
    fm = manager()
    session_id = full_session(fm, {("foo", 0): answer(0, 100, 100)}, version=BY_NAME)
    context = new_context(fm, session_id, 1, version=LATEST)
    assert isinstance(context, SessionErrorContext)
    assert context.response([], 0) == SessionResponse(
        ErrorCode.fetch_session_topic_id_error, INVALID_SESSION_ID, []
    )


def test_incremental_fetch_session_without_ids_when_session_uses_ids():
    """testIncrementalFetchSessionWithoutIdsWhenSessionUsesIds."""
    fm = manager()
    session_id = full_session(fm, {(FOO, 0): answer(0, 100, 100)}, version=LATEST)
    context = new_context(fm, session_id, 1, version=BY_NAME)
    assert context.response([], 0).error == ErrorCode.fetch_session_topic_id_error


def test_fetch_session_update_topic_ids_broker_side():
    """testFetchSessionUpdateTopicIdsBrokerSide: a partition in error is answered every time (the session
    forgets its high watermark), and again once the error is gone."""
    fm = manager()
    tp0, tp1 = (FOO, 0), (BAR, 1)
    unknown = answer(0, -1, -1, error=ErrorCode.unknown_topic_id)
    session_id = full_session(fm, {tp1: answer(1, 10, 10), tp0: unknown})
    response2 = new_context(fm, session_id, 1).response([(tp0, unknown), (tp1, answer(1, 10, 10))], 0)
    assert response2 == SessionResponse(ErrorCode.none, session_id, [(tp0, unknown)])
    inconsistent = answer(0, -1, -1, error=ErrorCode.inconsistent_topic_id)
    response3 = new_context(fm, session_id, 2).response([(tp0, inconsistent), (tp1, answer(1, 10, 10))], 0)
    assert sent(response3) == [tp0]
    # the error is gone: the partition goes out once with its offsets, then no more
    response4 = new_context(fm, session_id, 3).response([(tp0, answer(0, 5, 0)), (tp1, answer(1, 10, 10))], 0)
    assert sent(response4) == [tp0]
    assert sent(new_context(fm, session_id, 4).response([(tp0, answer(0, 5, 0))], 0)) == []


def test_update_and_generate_response_data():
    """testUpdateAndGenerateResponseData: what makes a partition go out of an incremental session: records,
    a new high watermark or log start offset, an error; not a new last stable offset."""
    fm = manager()
    tp = (FOO, 0)
    session_id = full_session(fm, {tp: answer(0, 10, 0)})
    cases = [
        (answer(0, 10, 0), False),
        (answer(0, 10, 0)._replace(last_stable_offset=5), False),
        (answer(0, 11, 0), True),
        (answer(0, 11, 1), True),
        (answer(0, 11, 1, records=b"batch"), True),
        (answer(0, 11, 1, error=ErrorCode.not_leader_or_follower), True),
        (answer(0, 11, 1), True),  # the error made it forget the high watermark
    ]
    for epoch, (a, goes_out) in enumerate(cases, start=1):
        assert sent(new_context(fm, session_id, epoch).response([(tp, a)], 0)) == ([tp] if goes_out else [])


def test_fetch_session_expiration():
    """testFetchSessionExpiration: a session used recently is kept over one only created earlier."""
    fm = manager(slots=2)
    parts = {(FOO, 0): answer(0, 100, 100), (FOO, 1): answer(1, 10, 10)}
    session1 = full_session(fm, parts, now_ms=0)
    assert fm.cache.get(session1) is not None
    session2 = full_session(fm, parts, now_ms=500)
    assert fm.cache.get(session1) is not None and fm.cache.get(session2) is not None
    assert isinstance(new_context(fm, session1, 1, now_ms=1000), IncrementalFetchContext)
    session3 = full_session(fm, parts, now_ms=1501)
    assert fm.cache.get(session1) is not None
    assert fm.cache.get(session2) is None, "session 2 was evicted: session 1 was used after it was created"
    assert fm.cache.get(session3) is not None


def test_privileged_session_handling():
    """testPrivilegedSessionHandling: a follower's session evicts a consumer's at once; a follower's
    is evicted only once stale."""
    fm = manager(slots=2)
    parts = {(FOO, 0): answer(0, 100, 100), (FOO, 1): answer(1, 10, 10)}
    session1 = full_session(fm, parts, now_ms=0, follower=True)
    assert len(fm.cache) == 1
    session2 = full_session(fm, parts, now_ms=500, follower=False)
    assert len(fm.cache) == 2
    session3 = full_session(fm, parts, now_ms=1000, follower=True)
    assert fm.cache.get(session1) is not None
    assert fm.cache.get(session2) is None, "session 2 was evicted by session 3"
    assert fm.cache.get(session3) is not None
    session4 = full_session(fm, parts, now_ms=1501, follower=True)
    assert fm.cache.get(session1) is None, "session 1 was evicted by session 4: it went stale"
    assert fm.cache.get(session3) is not None and fm.cache.get(session4) is not None
    assert len(fm.cache) == 2


def test_a_consumer_session_does_not_evict_a_larger_or_a_follower_one():
    """EvictableKey ordering: a newcomer evicts only a session worth less (privileged, then size, the
    newcomer's id counting as 0)."""
    c = cache(slots=1, eviction_ms=100)
    follower = c.maybe_create_session(0, True, 1, True, dummy_create(1))
    c.touch(c.sessions[follower], 150)  # old enough to be evictable by anyone, not stale
    assert c.maybe_create_session(200, False, 50, True, dummy_create(50)) == INVALID_SESSION_ID
    assert c.maybe_create_session(200, True, 1, True, dummy_create(1)) == INVALID_SESSION_ID  # a tie keeps it
    assert c.maybe_create_session(200, True, 2, True, dummy_create(2)) != INVALID_SESSION_ID
    assert follower not in c.sessions


def test_zero_size_fetch_session():
    """testZeroSizeFetchSession: an incremental fetch that forgets every partition closes the session."""
    fm = manager()
    session_id = full_session(fm, {(FOO, 0): answer(0, 100, 100), (FOO, 1): answer(1, 10, 10)})
    context = new_context(fm, session_id, 1, to_forget=[(FOO, 0), (FOO, 1)])
    assert isinstance(context, SessionlessFetchContext)
    assert context.response([], 0).session_id == INVALID_SESSION_ID
    assert len(fm.cache) == 0 and fm.cache.total_partitions == 0


def test_forgotten_topics_by_name_and_by_id():
    """testToForgetPartitions, as it applies here: v7-v12 forget by name, v13+ by topic id."""
    for version, foo in ((BY_NAME, "foo"), (LATEST, FOO)):
        fm = manager()
        session_id = full_session(fm, {(foo, 0): answer(0, 1, 0), (foo, 1): answer(1, 1, 0)}, version=version)
        context = new_context(fm, session_id, 1, to_forget=[(foo, 0), (foo, 7)], version=version)
        assert [key for key, _ in context.partitions()] == [(foo, 1)]
        assert fm.cache.total_partitions == 1


def test_diverging_epoch():
    """testDivergingEpoch: a diverging partition goes out even with nothing else new."""
    fm = manager()
    tp1, tp2 = (FOO, 1), (BAR, 2)
    request = {tp1: data(100, 5, 4), tp2: data(100, 5, 4)}
    context1 = new_context(fm, INVALID_SESSION_ID, INITIAL_EPOCH, request)
    diverging = answer(2, 105, 0, diverging=(3, 90))
    response1 = context1.response([(tp1, answer(1, 105, 0)), (tp2, diverging)], 0)
    assert sent(response1) == [tp1, tp2]
    context2 = new_context(fm, response1.session_id, 1, request)
    assert sent(context2.response([(tp1, answer(1, 105, 0)), (tp2, diverging)], 0)) == [tp2]
    both = [(tp1, answer(1, 105, 0, diverging=(3, 90))), (tp2, diverging)]
    assert sent(context2.response(both, 0)) == [tp1, tp2]
    assert sent(context2.response([(tp1, answer(1, 110, 0)), (tp2, diverging)], 0)) == [tp1, tp2]


def test_deprioritizes_partitions_with_records_only():
    """testDeprioritizesPartitionsWithRecordsOnly: a partition that returned records moves to the end of
    the session; one that only changed stays where it is."""
    fm = manager()
    tp1, tp2, tp3 = (FOO, 1), (BAR, 2), (ZAR, 3)
    session_id = full_session(fm, {tp1: answer(1, 50, 0), tp2: answer(2, 50, 0), tp3: answer(3, 50, 0)})
    context2 = new_context(fm, session_id, 1)
    assert [key for key, _ in context2.partitions()] == [tp1, tp2, tp3]
    assert context2.response([], 0) == SessionResponse(ErrorCode.none, session_id, [])
    answers3 = [(tp1, answer(1, 60, 0)), (tp2, answer(2, 60, 0, records=b"batch")), (tp3, answer(3, 50, 0))]
    assert sent(context2.response(answers3, 0)) == [tp1, tp2]
    assert [key for key, _ in context2.partitions()] == [tp1, tp3, tp2]


def test_a_duplicate_incremental_request_is_answered_invalid_epoch():
    """IncrementalFetchContext.updateAndGenerateResponseData: a request of the session that arrived while
    this one waited moved the epoch on; this one answers INVALID_FETCH_SESSION_EPOCH with the session id."""
    fm = manager()
    session_id = full_session(fm, {(FOO, 0): answer(0, 1, 0)})
    first = new_context(fm, session_id, 1)
    new_context(fm, session_id, 2)
    assert first.response([((FOO, 0), answer(0, 2, 0))], 0) == SessionResponse(
        ErrorCode.invalid_fetch_session_epoch, session_id, []
    )


def test_no_session_without_cache_slots():
    """max.incremental.fetch.session.cache.slots=0: a full fetch is answered with session id 0."""
    fm = manager(slots=0)
    context = new_context(fm, INVALID_SESSION_ID, INITIAL_EPOCH, {(FOO, 0): data(0)})
    assert context.response([((FOO, 0), answer(0, 1, 0))], 0).session_id == INVALID_SESSION_ID


def test_a_throttled_full_fetch_keeps_no_session():
    """KafkaApis.handleFetchRequest: a throttled full fetch is answered with session id 0 and leaves no
    session (FullFetchContext.getThrottledResponse); here the session its answer made is removed."""
    fm = manager()
    session_id = full_session(fm, {(FOO, 0): answer(0, 10, 0)})
    assert fm.discard_response(session_id, INITIAL_EPOCH) == INVALID_SESSION_ID
    assert len(fm.cache) == 0 and fm.cache.total_partitions == 0


def test_a_throttled_incremental_fetch_leaves_its_session_as_it_was():
    """KafkaApis.handleFetchRequest updates an incremental session only for a response it sends
    (getResponseSize does not): the discarded answer's high watermark, log start offset and order are put
    back, so the next answer carries what it carried, and nothing more."""
    fm = manager()
    tp0, tp1, tp2 = (FOO, 0), (FOO, 1), (FOO, 2)
    session_id = full_session(fm, {tp0: answer(0, 10, 0), tp1: answer(1, 10, 0), tp2: answer(2, 10, 0)})
    lost = new_context(fm, session_id, 1)
    answers = [(tp0, answer(0, 10, 0, records=b"batch")), (tp1, answer(1, 11, 1)), (tp2, answer(2, 10, 0))]
    assert sent(lost.response(answers, 0)) == [tp0, tp1]
    assert fm.discard_response(session_id, 1) == session_id
    again = new_context(fm, session_id, 2)
    assert [key for key, _ in again.partitions()] == [tp0, tp1, tp2], "tp0 did not move to the end"
    idle = [(tp0, answer(0, 10, 0)), (tp1, answer(1, 11, 1)), (tp2, answer(2, 10, 0))]
    assert sent(again.response(idle, 0)) == [tp1]
    assert fm.discard_response(session_id, 1) == session_id, "another epoch's answer: nothing taken back"
    assert sent(new_context(fm, session_id, 3).response(idle, 0)) == []
    assert fm.discard_response(session_id + 1, 3) == session_id + 1  # a session gone meanwhile


def test_an_error_answer_caches_no_high_watermark():
    """Kafka's error answers carry high watermark -1, which a full fetch's session caches: the partition's
    high watermark goes out once the error is gone, even if the log's is the same as the error's answer
    named (a follower answered OFFSET_OUT_OF_RANGE truncates and fetches again)."""
    fm = manager()
    tp = (FOO, 0)
    out_of_range = answer(0, 100, 0, error=ErrorCode.offset_out_of_range)
    session_id = full_session(fm, {tp: out_of_range})
    assert sent(new_context(fm, session_id, 1).response([(tp, answer(0, 100, 0))], 0)) == [tp]


def test_a_diverging_answer_forgets_the_high_watermark():
    """A follower ahead of the leader (log end 120, high watermark 95; the leader's log end and high
    watermark 100) is answered a diverging epoch, truncates to 100 and does not take the answer's high
    watermark in: the next answer of the idle partition carries it again."""
    fm = manager()
    tp = (FOO, 0)
    session_id = full_session(fm, {tp: answer(0, 100, 0)})
    diverging = answer(0, 100, 0, diverging=(4, 100))
    assert sent(new_context(fm, session_id, 1, {tp: data(120, 5, 5)}).response([(tp, diverging)], 0)) == [tp]
    after = new_context(fm, session_id, 2, {tp: data(100, 5, 4)})
    assert sent(after.response([(tp, answer(0, 100, 0))], 0)) == [tp]


def test_a_new_leader_epoch_sends_the_high_watermark_again():
    """A follower may drop an answer of a partition that moved away and came back under a new leader epoch
    while the fetch was in flight: a request with a new current leader epoch makes the session send the
    partition's high watermark and log start offset again."""
    fm = manager()
    tp = (FOO, 0)
    session_id = full_session(fm, {tp: answer(0, 10, 0)})
    dropped = new_context(fm, session_id, 1).response([(tp, answer(0, 11, 0))], 0)
    assert sent(dropped) == [tp]
    same_epoch = new_context(fm, session_id, 2, {tp: data(0)})
    assert sent(same_epoch.response([(tp, answer(0, 11, 0))], 0)) == []
    new_epoch = new_context(fm, session_id, 3, {tp: data(0, leader_epoch=6)})
    assert sent(new_epoch.response([(tp, answer(0, 11, 0))], 0)) == [tp]


class _ReplicaManager:
    def __init__(self, fm: FetchManager) -> None:
        self.fetch_manager = fm

    async def fetch_messages(self, params, wanted):
        return [Answer(w.partition, ErrorCode.none, 10, 0) for w in wanted]


def _broker_context(fm: FetchManager, version: int, authorizer=None):
    """A Fetch handler's context on a broker whose replica manager answers every partition (HW 10)."""
    from types import SimpleNamespace

    from epochkraft.broker.metadata_cache import MetadataCache
    from epochkraft.protocol.framing import RequestHeader
    from epochkraft.server.context import BROKER, RequestContext

    node = SimpleNamespace(
        replica_manager=_ReplicaManager(fm),
        cache=MetadataCache(1),
        settings=SimpleNamespace(fetch_max_bytes=55 * 2**20),
        observe_fetch=lambda is_follower, seconds: None,
        client_quotas=SimpleNamespace(active=lambda: False),
    )
    header = RequestHeader(1, version, 1, "client", 0)
    return RequestContext(BROKER, header, version, node, ("127.0.0.1", 1), None, authorizer=authorizer)


def _fetch_request(replica_id: int, session_id: int = INVALID_SESSION_ID, epoch: int = INITIAL_EPOCH):
    """A Fetch v12 (topics by name) of partition t-0 from a replica id (-1: a consumer)."""
    import datetime

    from kio.schema.fetch.v12 import request as f12
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    partition = f12.FetchPartition(
        partition=i32(0),
        current_leader_epoch=i32(-1),
        fetch_offset=i64(0),
        last_fetched_epoch=i32(-1),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(1000),
    )
    return f12.FetchRequest(
        replica_id=f12.BrokerId(replica_id),
        max_wait=i32Timedelta.parse(datetime.timedelta(0)),
        min_bytes=i32(0),
        max_bytes=i32(10_000),
        isolation_level=i8(0),
        session_id=i32(session_id),
        session_epoch=i32(epoch),
        topics=(f12.FetchTopic(topic="t", partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


@pytest.mark.parametrize(
    ("replica_id", "cluster_action", "privileged"),
    [(-1, True, False), (2, True, True), (2, False, False)],
    ids=["consumer", "authorized follower", "unauthorized follower"],
)
async def test_only_an_authorized_follower_gets_a_privileged_session(replica_id, cluster_action, privileged):
    """A request naming a replica id is a follower's only with CLUSTER_ACTION: without it its session is a
    consumer's, which cannot take a follower's slot in a full cache."""
    from epochkraft.security.authorizer import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
        StandardAuthorizer,
    )
    from epochkraft.security.principal import parse_super_users
    from epochkraft.server.handlers import k01_fetch

    def allow(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
        return AclBinding(
            resource_type,
            name,
            PatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            operation,
            AclPermissionType.ALLOW,
        )

    authorizer = StandardAuthorizer(parse_super_users(""), False)
    authorizer.add(uuid.uuid4(), allow(ResourceType.TOPIC, "t", AclOperation.READ))
    if cluster_action:
        authorizer.add(
            uuid.uuid4(), allow(ResourceType.CLUSTER, "kafka-cluster", AclOperation.CLUSTER_ACTION)
        )
    fm = manager()
    await k01_fetch.handle(_fetch_request(replica_id), _broker_context(fm, 12, authorizer))
    [session] = fm.cache.sessions.values()
    assert session.privileged == privileged


async def test_a_throttled_full_fetch_is_answered_without_a_session():
    """KafkaApis.handleFetchRequest: the empty answer of a throttled full fetch carries session id 0 and the
    broker keeps no session for it; a throttled incremental fetch's answer keeps its session's id."""
    from epochkraft.protocol import fetch_response
    from epochkraft.server.handlers import k01_fetch

    fm = manager()
    ctx = _broker_context(fm, 12)
    full = _fetch_request(-1)
    built = await k01_fetch.handle(full, ctx)
    assert fetch_response.session_of(12, built)[1] != INVALID_SESSION_ID and len(fm.cache) == 1
    throttled = k01_fetch.throttled_response(ctx, full, built)
    assert fetch_response.session_of(12, throttled) == (ErrorCode.none, INVALID_SESSION_ID)
    assert len(fm.cache) == 0
    session_id = fetch_response.session_of(12, await k01_fetch.handle(full, ctx))[1]
    incremental = _fetch_request(-1, session_id, 1)
    throttled = k01_fetch.throttled_response(ctx, incremental, await k01_fetch.handle(incremental, ctx))
    assert fetch_response.session_of(12, throttled) == (ErrorCode.none, session_id)
    assert fm.cache.get(session_id) is not None
