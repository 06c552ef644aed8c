"""Sans-IO idempotent-producer state of one partition: sequence checks and duplicate detection.

As Kafka's ProducerStateManager: for each producer id the leader remembers its epoch and the sequence
ranges of its last five batches. A retried batch whose sequences match one of them is a duplicate and is
answered with the original offsets instead of being appended again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER;
an older epoch is INVALID_PRODUCER_EPOCH. The table is rebuilt from batch headers when a replica becomes
leader, so a new leader drops the same duplicates.

A producer that has appended nothing for ``producer.id.expiration.ms`` (by its last batch's max timestamp)
is forgotten, as Kafka's removeExpiredProducers: the broker checks every
``producer.id.expiration.check.interval.ms``, and a rebuild from the log skips expired producers as
Kafka's loadFromSnapshot does, so the expiry holds across a restart. Transactions are not built, so no
producer has an ongoing transaction that would keep it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from epochkraft.protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
BATCHES_REMEMBERED = 5
MAX_SEQUENCE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int = -1  # the batch's max timestamp as appended (Kafka's BatchMetadata.timestamp)


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_timestamp: int = -1  # max timestamp of its last batch (Kafka's ProducerStateEntry.lastTimestamp)
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_REMEMBERED))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    error: ErrorCode
    duplicate_of: BatchMetadata | None = None


def last_sequence(base_sequence: int, record_count: int) -> int:
    return (base_sequence + record_count - 1) % (MAX_SEQUENCE + 1)


def _next_sequence(seq: int) -> int:
    return 0 if seq == MAX_SEQUENCE else seq + 1


class ProducerStateTable:
    """Per-partition producer state, owned by the partition's leader."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, base_sequence: int, record_count: int) -> SequenceCheck:
        """Decides whether a batch from a producer may be appended (nothing changes here)."""
        if producer_id == NO_PRODUCER_ID:
            return SequenceCheck(ErrorCode.none)
        entry = self.producers.get(producer_id)
        if entry is None:
            # Unknown producer (new, or its state was lost with the log): accepted, as Kafka does.
            return SequenceCheck(ErrorCode.none)
        if epoch < entry.epoch:
            return SequenceCheck(ErrorCode.invalid_producer_epoch)
        if epoch > entry.epoch:
            ok = base_sequence == 0
            return SequenceCheck(ErrorCode.none if ok else ErrorCode.out_of_order_sequence_number)
        last = last_sequence(base_sequence, record_count)
        for batch in entry.batches:
            if batch.first_seq == base_sequence and batch.last_seq == last:
                return SequenceCheck(ErrorCode.none, duplicate_of=batch)
        if entry.batches and base_sequence != _next_sequence(entry.last_seq):
            return SequenceCheck(ErrorCode.out_of_order_sequence_number)
        return SequenceCheck(ErrorCode.none)

    def next_sequence(self, producer_id: int, epoch: int) -> int:
        """The base sequence that continues the producer's batches here: 0 for a producer this partition
        does not know or a new epoch. The group coordinator writes a transaction's offsets with it, so
        they pass the leader's sequence checks as the producer's own batches do."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.epoch != epoch or not entry.batches:
            return 0
        return _next_sequence(entry.last_seq)

    def record(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        record_count: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int = -1,
    ) -> None:
        """Remembers an appended batch (on the leader after append, and when rebuilding from the log)."""
        if producer_id == NO_PRODUCER_ID or base_sequence < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return
        entry.last_timestamp = max_timestamp
        entry.batches.append(
            BatchMetadata(
                base_sequence,
                last_sequence(base_sequence, record_count),
                first_offset,
                last_offset,
                max_timestamp,
            )
        )

    def truncate(self, log_end_offset: int) -> None:
        """Forgets batches at or beyond a truncation point (a follower cutting its log)."""
        for producer_id in list(self.producers):
            entry = self.producers[producer_id]
            kept = [b for b in entry.batches if b.last_offset < log_end_offset]
            if kept:
                entry.batches = deque(kept, maxlen=BATCHES_REMEMBERED)
            else:
                del self.producers[producer_id]

    def remove_expired_producers(self, now_ms: int, producer_id_expiration_ms: int) -> int:
        """Kafka's ProducerStateManager.removeExpiredProducers: forgets every producer idle for
        ``producer_id_expiration_ms``; returns how many."""
        expired = [
            producer_id
            for producer_id, entry in self.producers.items()
            if is_producer_expired(now_ms, entry, producer_id_expiration_ms)
        ]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)


def is_producer_expired(now_ms: int, entry: ProducerEntry, producer_id_expiration_ms: int) -> bool:
    """Kafka's isProducerExpired (without transactions, no entry has a current transaction to keep it)."""
    return now_ms - entry.last_timestamp >= producer_id_expiration_ms
