"""The follower's side of incremental fetch sessions (KIP-227), as Kafka's FetchSessionHandler (sans-IO).

Each round the fetcher adds the partitions it wants with their fetch data to a ``Builder``; ``build`` says
what to send. The first request of a session is full (every partition, epoch 0); once the leader answers
with a session id, each request is incremental: only the partitions added or altered since the last one
(fetch offset, log start offset, max bytes, current leader epoch or last fetched epoch changed), the
removed ones in the forgotten list, the unchanged ones left out (the leader still fetches them for us).
``handle_response`` takes the answer's top-level error, session id and the partitions it names and moves
the session on; ``handle_error`` does so for a failed send. Any doubt starts a full session again, so a
leader that keeps no sessions (it answers session id 0) is fetched in full every round.

The fetcher speaks Fetch v13+ only (topic ids, forgotten topics by id), so every partition carries its
topic id; Kafka's topic-id upgrade and downgrade paths for older versions have no counterpart here.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import structlog

from epochkraft.broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from epochkraft.protocol.errors import ErrorCode

log = structlog.get_logger()


T = TypeVar("T")
TopicPartition = tuple[str, int]  # (topic name, partition index): a replica's key


class TopicIdPartition(NamedTuple):
    topic_id: uuid.UUID
    topic: str
    partition: int


class PartitionData(NamedTuple):
    """What a Fetch asks of one partition; a change to any field makes the partition altered. A tuple: a
    fetcher builds one per partition per round, thousands of them."""

    topic_id: uuid.UUID
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    """The session id and epoch of the next request (Kafka's FetchMetadata)."""

    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def next_close_existing(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    @staticmethod
    def new_incremental(session_id: int) -> FetchMetadata:
        return FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))

    def next_incremental(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, next_epoch(self.epoch))


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """One built request: what to send, what to forget, and the session it leaves."""

    to_send: Mapping[TopicPartition, PartitionData]
    to_forget: Sequence[TopicIdPartition]  # removed from the session
    to_replace: Sequence[TopicIdPartition]  # the same partition under an earlier topic id
    session_partitions: Mapping[TopicPartition, PartitionData]
    metadata: FetchMetadata

    @property
    def forgotten(self) -> list[TopicIdPartition]:
        """The request's forgotten topics: the removed and, from v13, the replaced partitions."""
        return [*self.to_forget, *self.to_replace]


def find_missing(to_find: Iterable[T], to_search: Collection[T]) -> list[T]:
    """The items of ``to_find`` not in ``to_search`` (a set or a dict, for thousands), in order."""
    return [item for item in to_find if item not in to_search]


class FetchSessionHandler:
    """The session with one leader: the partitions in it and the metadata of the next request."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.next_metadata = INITIAL
        # Insertion-ordered: a full answer too small for all is filled from the front.
        self.session_partitions: dict[TopicPartition, PartitionData] = {}
        self.session_topic_names: dict[uuid.UUID, str] = {}

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def new_builder(self, copy_session_partitions: bool = True) -> Builder:
        """``copy_session_partitions`` False: the request's session_partitions is the session itself, not a
        snapshot, for a caller that reads it before the next build (Kafka's replica fetcher, which builds
        thousands of partitions a round, asks so)."""
        return Builder(self, copy_session_partitions)

    def handle_response(
        self,
        error: int,
        session_id: int,
        partitions: Iterable[tuple[uuid.UUID, int]],
        throttle_time_ms: int = 0,
    ) -> bool:
        """Moves the session on after an answer (its top-level error and session id, the (topic id,
        partition) pairs it names); False when its partitions must not be used."""
        if error != ErrorCode.none:
            log.info("fetch session refused", node=self.node, metadata=self.next_metadata, error=error)
            if error == ErrorCode.fetch_session_id_not_found:
                self.next_metadata = INITIAL
            else:
                self.next_metadata = self.next_metadata.next_close_existing_attempt_new()
            return False
        answered, ids = self._resolve(partitions)
        if self.next_metadata.is_full:
            if not answered and throttle_time_ms > 0:  # KIP-219: a throttled full answer is empty
                self.next_metadata = INITIAL
                return False
            problem = self.verify_full_fetch_response_partitions(answered, ids)
            if problem is not None:
                log.info("invalid full fetch response", node=self.node, problem=problem)
                self.next_metadata = INITIAL
                return False
            if session_id == INVALID_SESSION_ID:
                self.next_metadata = INITIAL
            else:
                self.next_metadata = FetchMetadata.new_incremental(session_id)
            return True
        problem = self.verify_incremental_fetch_response_partitions(answered, ids)
        if problem is not None:
            log.info("invalid incremental fetch response", node=self.node, problem=problem)
            self.next_metadata = self.next_metadata.next_close_existing_attempt_new()
            return False
        if session_id == INVALID_SESSION_ID:  # the leader closed the session
            self.next_metadata = INITIAL
        else:
            self.next_metadata = self.next_metadata.next_incremental()
        return True

    def handle_error(self, reason: str) -> None:
        """A send that failed (a lost or new connection): close the session and open a new one."""
        log.info("fetch failed; starting a new fetch session", node=self.node, reason=reason)
        self.next_metadata = self.next_metadata.next_close_existing_attempt_new()

    def notify_close(self) -> None:
        """The next request closes the session and opens none."""
        self.next_metadata = self.next_metadata.next_close_existing()

    def verify_full_fetch_response_partitions(
        self, answered: Iterable[TopicPartition], ids: Iterable[uuid.UUID]
    ) -> str | None:
        """None when a full answer names exactly the session's partitions, else what is wrong."""
        answered = list(answered)
        extra = find_missing(answered, self.session_partitions)
        omitted = find_missing(self.session_partitions, set(answered))
        extra_ids = find_missing(ids, self.session_topic_names)
        return _problem(answered, omitted=omitted, extra=extra, extra_ids=extra_ids)

    def verify_incremental_fetch_response_partitions(
        self, answered: Iterable[TopicPartition], ids: Iterable[uuid.UUID]
    ) -> str | None:
        """None when an incremental answer names only partitions of the session, else what is wrong."""
        answered = list(answered)
        extra = find_missing(answered, self.session_partitions)
        extra_ids = find_missing(ids, self.session_topic_names)
        return _problem(answered, omitted=[], extra=extra, extra_ids=extra_ids)

    def _resolve(
        self, partitions: Iterable[tuple[uuid.UUID, int]]
    ) -> tuple[list[TopicPartition], list[uuid.UUID]]:
        """The answered partitions by name (those of unknown topic ids left out, as
        FetchResponse.responseData) and every topic id the answer names."""
        answered: list[TopicPartition] = []
        ids: dict[uuid.UUID, None] = {}
        for topic_id, index in partitions:
            ids[topic_id] = None
            name = self.session_topic_names.get(topic_id)
            if name is not None:
                answered.append((name, index))
        return answered, list(ids)


def _problem(
    answered: list[TopicPartition],
    omitted: list[TopicPartition],
    extra: list[TopicPartition],
    extra_ids: list[uuid.UUID],
) -> str | None:
    if not (omitted or extra or extra_ids):
        return None
    parts = [f"omittedPartitions={_some(omitted)}"] if omitted else []
    parts += [f"extraPartitions={_some(extra)}"] if extra else []
    parts += [f"extraIds={_some([str(i) for i in extra_ids])}"] if extra_ids else []
    return ", ".join([*parts, f"response={_some(answered)}"])


def _some(items: Sequence[object], shown: int = 10) -> str:
    """The first few items: a log line about thousands of partitions stays a line."""
    listed = ", ".join(map(str, items[:shown]))
    return f"({listed}{f', ... {len(items) - shown} more' if len(items) > shown else ''})"


class Builder:
    """The partitions wanted in the next request, in the order added (FetchSessionHandler.Builder)."""

    def __init__(self, handler: FetchSessionHandler, copy_session_partitions: bool = True) -> None:
        self._handler = handler
        self._copy = copy_session_partitions
        self._next: dict[TopicPartition, PartitionData] | None = {}
        self._topic_names: dict[uuid.UUID, str] = {}

    def add(self, topic_partition: TopicPartition, data: PartitionData) -> None:
        """Asks for this partition in the upcoming fetch."""
        if self._next is None:
            raise RuntimeError("the request was already built")
        self._next[topic_partition] = data
        self._topic_names.setdefault(data.topic_id, topic_partition[0])

    def build(self) -> FetchRequestData:
        """The request: full (everything added) or incremental (added, altered, removed); once only."""
        wanted, self._next = self._next, None
        if wanted is None:
            raise RuntimeError("the request was already built")
        handler = self._handler
        metadata = handler.next_metadata
        handler.session_topic_names = self._topic_names
        if metadata.is_full:
            handler.session_partitions = wanted
            to_send = dict(wanted)  # the request's own copy: the session changes with the next build
            return FetchRequestData(to_send, (), (), to_send, metadata)
        to_send, removed, replaced = self._changes(handler.session_partitions, wanted)
        session = dict(handler.session_partitions) if self._copy else handler.session_partitions
        return FetchRequestData(to_send, removed, replaced, session, metadata)

    @staticmethod
    def _changes(
        session: dict[TopicPartition, PartitionData], wanted: dict[TopicPartition, PartitionData]
    ) -> tuple[dict[TopicPartition, PartitionData], list[TopicIdPartition], list[TopicIdPartition]]:
        """Updates ``session`` to ``wanted``; returns the partitions to send (added, then altered or
        replaced) and those removed and replaced."""
        removed: list[TopicIdPartition] = []
        replaced: list[TopicIdPartition] = []
        changed: dict[TopicPartition, PartitionData] = {}
        for tp, prev in list(session.items()):
            data = wanted.pop(tp, None)
            if data is None:
                del session[tp]
                removed.append(TopicIdPartition(prev.topic_id, *tp))
            elif data.topic_id != prev.topic_id:  # the topic was recreated: forget the old id
                session[tp] = changed[tp] = data
                replaced.append(TopicIdPartition(prev.topic_id, *tp))
            elif data != prev:
                session[tp] = changed[tp] = data
        session.update(wanted)  # what is left was not in the session: added
        return {**wanted, **changed}, removed, replaced
