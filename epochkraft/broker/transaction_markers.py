"""Sans-IO queue of transaction markers to write (the decisions of Kafka's TransactionMarkerChannelManager
and TransactionMarkerRequestCompletionHandler).

After PrepareCommit or PrepareAbort is written, each partition of the transaction needs a marker from its
leader. ``requests`` groups what is due by leader into one WriteTxnMarkers (v2, carrying each
transaction's version, KIP-890) per broker (a partition in
flight is not sent twice); ``handle_response`` settles them: NONE marks the partition done; a retriable
error (or a failed request) makes it due again; INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED
means a newer producer epoch or coordinator has taken over, so this coordinator stops sending for the
transaction. A partition whose topic is gone is done. A transaction with every partition done is returned
so the coordinator writes CompleteCommit or CompleteAbort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v2 import request as wtm
from kio.schema.write_txn_markers.v2.response import WriteTxnMarkersResponse
from kio.static.primitive import i8, i16, i32

from epochkraft.broker.transaction_log import TopicPartition
from epochkraft.protocol.errors import ErrorCode

TOPIC_DELETED = -2  # what ``leader_of`` answers for a partition whose topic no longer exists
RETRIABLE = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
        ErrorCode.coordinator_load_in_progress,
    }
)
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


@dataclass(slots=True)
class PendingMarkers:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    txn_log_partition: int
    remaining: set[TopicPartition]
    in_flight: set[TopicPartition] = field(default_factory=set)
    transaction_version: int = 0  # the transaction's: 2 tells the leader each marker bumps the epoch

    @property
    def done(self) -> bool:
        return not self.remaining and not self.in_flight


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    broker_id: int
    request: wtm.WriteTxnMarkersRequest
    # (the transaction's markers, partitions) it carries: an answer settles those very markers only, not a
    # later transaction of the same id (Kafka's completion handler drops an answer of another epoch)
    sent: tuple[tuple[PendingMarkers, frozenset[TopicPartition]], ...]


@dataclass(frozen=True, slots=True)
class MarkersSettled:
    completed: list[str]  # every marker written: write Complete*
    abandoned: list[str]  # fenced: another epoch or coordinator finishes the transaction
    errors: dict[TopicPartition, ErrorCode]  # the errors seen, for logging


class TransactionMarkerQueue:
    def __init__(self) -> None:
        self.pending: dict[str, PendingMarkers] = {}

    def add(self, markers: PendingMarkers) -> None:
        self.pending[markers.transactional_id] = markers

    def remove_txn_log_partition(self, partition: int) -> None:
        """This broker no longer coordinates the partition's transactions: the new coordinator resends."""
        for txn_id in [t for t, m in self.pending.items() if m.txn_log_partition == partition]:
            del self.pending[txn_id]

    def requests(
        self, leader_of: Callable[[TopicPartition], int | None], busy: set[int]
    ) -> list[MarkerRequest]:
        """The WriteTxnMarkers to send now, one per leader not in ``busy`` (with a request in flight);
        ``leader_of`` answers None while a leader is unknown (kept for later) or TOPIC_DELETED."""
        by_broker: dict[int, list[tuple[PendingMarkers, set[TopicPartition]]]] = {}
        for markers in self.pending.values():
            for tp in sorted(markers.remaining):
                leader = leader_of(tp)
                if leader == TOPIC_DELETED:
                    markers.remaining.discard(tp)
                elif leader is not None and leader not in busy:
                    entries = by_broker.setdefault(leader, [])
                    if not entries or entries[-1][0] is not markers:
                        entries.append((markers, set()))
                    entries[-1][1].add(tp)
        built = []
        for broker_id, entries in by_broker.items():
            for markers, partitions in entries:
                markers.remaining -= partitions
                markers.in_flight |= partitions
            built.append(_marker_request(broker_id, entries))
        return built

    def handle_response(
        self, sent: MarkerRequest, response: WriteTxnMarkersResponse | None
    ) -> MarkersSettled:
        """Settles a request's partitions; ``response`` None when the request failed as a whole."""
        results: dict[tuple[int, str, int], ErrorCode] = {}
        for marker in response.markers if response is not None else ():
            for topic in marker.topics:
                for p in topic.partitions:
                    results[(marker.producer_id, topic.name, p.partition_index)] = p.error_code
        completed: list[str] = []
        abandoned: list[str] = []
        errors: dict[TopicPartition, ErrorCode] = {}
        for sent_markers, partitions in sent.sent:
            txn_id = sent_markers.transactional_id
            markers = self.pending.get(txn_id)
            if markers is not sent_markers:  # completed, fenced or reloaded since: a stale answer
                continue
            fenced = False
            for tp in partitions:
                markers.in_flight.discard(tp)
                error = results.get((markers.producer_id, *tp), ErrorCode.unknown_server_error)
                if error != ErrorCode.none:
                    errors[tp] = error
                if error in FENCED:
                    fenced = True
                elif error != ErrorCode.none:
                    markers.remaining.add(tp)  # retried with the next requests
            if fenced:
                del self.pending[txn_id]
                abandoned.append(txn_id)
            elif markers.done:
                del self.pending[txn_id]
                completed.append(txn_id)
        return MarkersSettled(completed, abandoned, errors)

    def take_done(self) -> list[str]:
        """Transactions left with nothing to send (every partition's topic deleted, or none at all)."""
        done = [t for t, m in self.pending.items() if m.done]
        for txn_id in done:
            del self.pending[txn_id]
        return done


def _marker_request(
    broker_id: int, entries: list[tuple[PendingMarkers, set[TopicPartition]]]
) -> MarkerRequest:
    markers = []
    for pending, partitions in entries:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(partitions):
            by_topic.setdefault(topic, []).append(index)
        markers.append(
            wtm.WritableTxnMarker(
                producer_id=ProducerId(pending.producer_id),
                producer_epoch=i16(pending.producer_epoch),
                transaction_result=pending.commit,
                topics=tuple(
                    wtm.WritableTxnMarkerTopic(
                        name=TopicName(name), partition_indexes=tuple(i32(i) for i in indexes)
                    )
                    for name, indexes in by_topic.items()
                ),
                coordinator_epoch=i32(pending.coordinator_epoch),
                transaction_version=i8(pending.transaction_version),
            )
        )
    return MarkerRequest(
        broker_id,
        wtm.WriteTxnMarkersRequest(markers=tuple(markers)),
        tuple((p, frozenset(parts)) for p, parts in entries),
    )
