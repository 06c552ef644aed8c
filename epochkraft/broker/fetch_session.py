"""Incremental fetch sessions on the leader (KIP-227), as Kafka's FetchSession.scala: the cache of sessions
(FetchSessionCache), the choice of a context for each Fetch (FetchManager.newContext) and the contexts, which
say what partitions to read and which of the answers go out. Sans-IO: time comes in as ``now_ms``.

- Epoch -1 is sessionless (closing the session named, if any); epoch 0 is a full fetch that closes the
  session named and creates a new one with every partition asked for; session X with epoch N > 0 is an
  incremental fetch: the request names only what changed (and forgotten_topics_data what to drop), every
  partition of the session is read at its cached fetch offset, and only the partitions whose answer
  changed go out (records, high watermark, log start offset, an error, a diverging epoch; not the last
  stable offset, as CachedPartition.maybeUpdateResponseData). A partition that returned records moves to
  the end of the session, so the others get the response's byte budget first next time.
- A full cache (max.incremental.fetch.session.cache.slots) evicts a session idle for
  min.incremental.fetch.session.eviction.ms, else the least valuable one if the new one is worth more:
  followers' sessions over consumers', larger over smaller (EvictableKey). One cache per broker, not
  Kafka's shards: those spread a lock this event loop does not have.
- Sessions are keyed by topic id (Fetch v13+) or by name (older); a session made one way refuses
  requests of the other (FETCH_SESSION_TOPIC_ID_ERROR).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.fetch_response import Answer, TopicKey

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that creates a session
FINAL_EPOCH = -1  # a sessionless fetch (closing the session named)
FIRST_SESSION_VERSION = 7  # Fetch v4-v6 have no session fields
FIRST_TOPIC_ID_VERSION = 13
MAX_SESSION_ID = 2**31 - 1
MAX_EPOCH = 2**31 - 1  # an epoch wraps to 1 past Integer.MAX_VALUE

PartitionKey = tuple[TopicKey, int]


# Read once: an enum member's lookup is slow on Python 3.11, and the checks below run per partition.
_NONE = ErrorCode.none


def _has_records(answer: Answer) -> bool:
    return bool(answer.records) and any(len(chunk) for chunk in answer.records)


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch`` (FetchMetadata.nextEpoch): it wraps to 1, never back to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


class PartitionData(NamedTuple):
    """What a request asks of one partition (Kafka's FetchRequest.PartitionData; a tuple: a sessionless
    Fetch makes one for each of its partitions)."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: its last request and what the client last heard of it."""

    data: PartitionData
    high_watermark: int = -1
    local_log_start_offset: int = -1

    def maybe_update_response_data(self, answer: Answer, update: bool) -> bool:
        """Whether ``answer`` must go out, remembering what it tells the client when ``update``
        (CachedPartition.maybeUpdateResponseData): an error or a diverging epoch forgets the high watermark,
        so the partition goes out again once it is gone."""
        must_respond = _has_records(answer)
        if self.high_watermark != answer.high_watermark:
            must_respond = True
            if update:
                self.high_watermark = answer.high_watermark
        if self.local_log_start_offset != answer.log_start_offset:
            must_respond = True
            if update:
                self.local_log_start_offset = answer.log_start_offset
        if answer.error != _NONE or answer.diverging is not None:
            must_respond = True
            if update:
                # A follower truncates on a divergence and does not take its high watermark in, as it
                # drops an error's: the next high watermark goes out whatever it is.
                self.high_watermark = -1
        # A preferred read replica would go out too; this leader never names one.
        return must_respond


@dataclass(slots=True, eq=False)
class FetchSession:
    """One client's session (Kafka's FetchSession); ``partitions`` in the order they are read."""

    id: int
    privileged: bool  # a follower's
    partitions: dict[PartitionKey, CachedPartition]
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int
    cached_size: int = -1  # the size the cache last counted; -1: not in the cache
    last_changes: ResponseChanges | None = None  # what the last incremental response changed

    def update(
        self, fetch_data: dict[PartitionKey, PartitionData], to_forget: Sequence[PartitionKey]
    ) -> tuple[list[PartitionKey], list[PartitionKey], list[PartitionKey]]:
        """Takes in an incremental request: the partitions (added, updated, removed)."""
        added, updated, removed = [], [], []
        for key, data in fetch_data.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(data)
                added.append(key)
            else:
                if cached.data.current_leader_epoch != data.current_leader_epoch:
                    # A client that heard of a new leader epoch may have dropped an answer of the old one
                    # (a follower's partition that moved away and back while the fetch was in flight).
                    cached.high_watermark = cached.local_log_start_offset = -1
                cached.data = data  # updateRequestParams
                updated.append(key)
        for key in to_forget:
            if self.partitions.pop(key, None) is not None:
                removed.append(key)
        return added, updated, removed

    def take_back(self, changes: ResponseChanges) -> None:
        """Puts back what a response not sent changed: its partitions' high watermarks, log start
        offsets and order."""
        for cached, high_watermark, log_start_offset in changes.cached:
            cached.high_watermark, cached.local_log_start_offset = high_watermark, log_start_offset
        if changes.order is not None:
            moved = self.partitions
            self.partitions = {key: moved[key] for key in changes.order if key in moved}
            self.partitions.update(moved)  # none, unless a request came in meanwhile


@dataclass(slots=True)
class ResponseChanges:
    """What an incremental response changed in its session, for a response built but not sent."""

    epoch: int  # the session's epoch once the request was taken in
    cached: list[tuple[CachedPartition, int, int]]  # each changed partition's high watermark and log start
    order: list[PartitionKey] | None = None  # the session's order before a partition moved to the end


class EvictableKey(NamedTuple):
    """A session's value when the cache is full: followers' over consumers', larger over smaller."""

    privileged: bool
    size: int
    id: int


class FetchSessionCache:
    """The broker's sessions (Kafka's FetchSessionCacheShard, one shard)."""

    def __init__(self, max_entries: int, eviction_ms: int, rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.total_partitions = 0
        self.evictions = 0
        # what a new session may evict: a privileged one may take any of the first, anyone the second
        self._evictable_by_privileged: dict[int, EvictableKey] = {}
        self._evictable_by_all: dict[int, EvictableKey] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def new_session_id(self) -> int:
        while True:
            session_id = self.rng.randrange(1, MAX_SESSION_ID)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(
        self,
        now_ms: int,
        privileged: bool,
        size: int,
        uses_topic_ids: bool,
        create_partitions: Callable[[], dict[PartitionKey, CachedPartition]],
    ) -> int:
        """A new session's id, or INVALID_SESSION_ID when the cache is full of sessions worth more."""
        if len(self.sessions) >= self.max_entries and not self._try_evict(
            privileged, EvictableKey(privileged, size, 0), now_ms
        ):
            return INVALID_SESSION_ID
        session = FetchSession(
            self.new_session_id(),
            privileged,
            create_partitions(),
            uses_topic_ids,
            now_ms,
            now_ms,
            next_epoch(INITIAL_EPOCH),
        )
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, key: EvictableKey, now_ms: int) -> bool:
        """Makes room: the least recently used session if it is stale, else the least valuable evictable
        one if ``key`` is worth at least as much (FetchSessionCacheShard.tryEvict)."""
        if not self.sessions:
            return False
        oldest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self.remove(oldest)
            self.evictions += 1
            return True
        candidates = self._evictable_by_privileged if privileged else self._evictable_by_all
        if not candidates:
            return False
        least = min(candidates.values())
        if key < least:
            return False
        self.remove(self.sessions[least.id])
        self.evictions += 1
        return True

    def remove_id(self, session_id: int) -> FetchSession | None:
        session = self.sessions.get(session_id)
        return self.remove(session) if session is not None else None

    def remove(self, session: FetchSession) -> FetchSession | None:
        self._evictable_by_privileged.pop(session.id, None)
        self._evictable_by_all.pop(session.id, None)
        removed = self.sessions.pop(session.id, None)
        if removed is not None:
            self.total_partitions -= session.cached_size
        return removed

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Marks the session used now and recounts its size: a consumer's session becomes evictable by a
        follower's at once, any session by anyone once it is older than the eviction time."""
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self._evictable_by_privileged.pop(session.id, None)
            self._evictable_by_all.pop(session.id, None)
            self.total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        key = EvictableKey(session.privileged, session.cached_size, session.id)
        aged = now_ms - session.creation_ms > self.eviction_ms
        if not session.privileged or aged:
            self._evictable_by_privileged[session.id] = key
        if aged:
            self._evictable_by_all[session.id] = key
        self.total_partitions += session.cached_size


class SessionResponse(NamedTuple):
    """What a Fetch response says of the session, and the partitions it carries, in order."""

    error: ErrorCode
    session_id: int
    answers: list[tuple[PartitionKey, Answer]]


class FetchContext(Protocol):
    def partitions(self) -> list[tuple[PartitionKey, PartitionData]]:
        """The partitions to read and how (FetchContext.foreachPartition)."""
        ...

    def response(self, answers: list[tuple[PartitionKey, Answer]], now_ms: int) -> SessionResponse:
        """The response from every partition's answer (updateAndGenerateResponseData)."""
        ...


@dataclass(frozen=True, slots=True)
class SessionErrorContext:
    """A session the request cannot use: the error alone, no partitions read."""

    error: ErrorCode

    def partitions(self) -> list[tuple[PartitionKey, PartitionData]]:
        return []

    def response(self, answers: list[tuple[PartitionKey, Answer]], now_ms: int) -> SessionResponse:
        return SessionResponse(self.error, INVALID_SESSION_ID, [])


@dataclass(frozen=True, slots=True)
class SessionlessFetchContext:
    """Every partition asked for, read and answered; no session."""

    fetch_data: dict[PartitionKey, PartitionData]

    def partitions(self) -> list[tuple[PartitionKey, PartitionData]]:
        return list(self.fetch_data.items())

    def response(self, answers: list[tuple[PartitionKey, Answer]], now_ms: int) -> SessionResponse:
        return SessionResponse(ErrorCode.none, INVALID_SESSION_ID, answers)


@dataclass(frozen=True, slots=True)
class FullFetchContext:
    """Every partition asked for, read and answered, and a new session holding them if the cache has room."""

    cache: FetchSessionCache
    fetch_data: dict[PartitionKey, PartitionData]
    uses_topic_ids: bool
    is_from_follower: bool

    def partitions(self) -> list[tuple[PartitionKey, PartitionData]]:
        return list(self.fetch_data.items())

    def response(self, answers: list[tuple[PartitionKey, Answer]], now_ms: int) -> SessionResponse:
        def cached() -> dict[PartitionKey, CachedPartition]:
            # Kafka's error answers carry high watermark -1; ours may carry the log's
            return {
                key: CachedPartition(
                    self.fetch_data[key],
                    a.high_watermark if a.error == ErrorCode.none else -1,
                    a.log_start_offset,
                )
                for key, a in answers
            }

        session_id = self.cache.maybe_create_session(
            now_ms, self.is_from_follower, len(answers), self.uses_topic_ids, cached
        )
        return SessionResponse(ErrorCode.none, session_id, answers)


@dataclass(frozen=True, slots=True)
class IncrementalFetchContext:
    """Every partition of the session read at its cached position; only the changed ones answered."""

    request_epoch: int
    session: FetchSession

    def partitions(self) -> list[tuple[PartitionKey, PartitionData]]:
        return [(key, cached.data) for key, cached in self.session.partitions.items()]

    def response(self, answers: list[tuple[PartitionKey, Answer]], now_ms: int) -> SessionResponse:
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):
            # another request of the session came in meanwhile (a duplicate)
            return SessionResponse(ErrorCode.invalid_fetch_session_epoch, session.id, [])
        changes = session.last_changes = ResponseChanges(session.epoch, [])
        return SessionResponse(
            ErrorCode.none, session.id, [pair for pair in answers if self._selected(*pair, changes)]
        )

    def _selected(self, key: PartitionKey, answer: Answer, changes: ResponseChanges) -> bool:
        """Whether the partition goes out, remembering what it tells the client (and in ``changes`` what
        it knew before); one with records moves to the end of the session
        (IncrementalFetchContext.PartitionIterator)."""
        session = self.session
        cached = session.partitions.get(key)
        if cached is None:  # forgotten by a request that overtook this one
            return True
        before = (cached, cached.high_watermark, cached.local_log_start_offset)
        if not cached.maybe_update_response_data(answer, update=True):
            return False
        changes.cached.append(before)
        if _has_records(answer):
            if changes.order is None:
                changes.order = list(session.partitions)
            session.partitions[key] = session.partitions.pop(key)
        return True


@dataclass(slots=True)
class FetchManager:
    """Picks each Fetch's context (Kafka's FetchManager.newContext)."""

    cache: FetchSessionCache

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        is_follower: bool,
        fetch_data: dict[PartitionKey, PartitionData],
        to_forget: Sequence[PartitionKey],
        now_ms: int,
    ) -> FetchContext:
        if version < FIRST_SESSION_VERSION:
            return SessionlessFetchContext(fetch_data)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.cache.remove_id(session_id)  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(self.cache, fetch_data, version >= FIRST_TOPIC_ID_VERSION, is_follower)
        return self._incremental(version, session_id, epoch, fetch_data, to_forget, now_ms)

    def discard_response(self, session_id: int, request_epoch: int) -> int:
        """A response built but not sent, since a quota throttles the Fetch and answers it empty: the
        session id of that empty answer. Kafka decides the throttle before it builds the response and
        then leaves the session as it was (KafkaApis.handleFetchRequest, getThrottledResponse): so a
        full fetch's new session is removed (answered 0, the client starts over with a full fetch), and
        an incremental one's session takes back what the response changed."""
        if session_id == INVALID_SESSION_ID:
            return INVALID_SESSION_ID
        if request_epoch == INITIAL_EPOCH:
            self.cache.remove_id(session_id)
            return INVALID_SESSION_ID
        session = self.cache.get(session_id)
        changes = session.last_changes if session is not None else None
        if session is not None and changes is not None and changes.epoch == next_epoch(request_epoch):
            session.take_back(changes)
            session.last_changes = None
        return session_id

    def _incremental(
        self,
        version: int,
        session_id: int,
        epoch: int,
        fetch_data: dict[PartitionKey, PartitionData],
        to_forget: Sequence[PartitionKey],
        now_ms: int,
    ) -> FetchContext:
        session = self.cache.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != (version >= FIRST_TOPIC_ID_VERSION):
            return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
        session.update(fetch_data, to_forget)
        if not session.partitions:
            self.cache.remove(session)
            return SessionlessFetchContext(fetch_data)
        self.cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(epoch, session)
