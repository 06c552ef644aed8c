"""Sans-IO idempotent-producer state of one partition: sequence checks and duplicate detection.

As Kafka's ProducerStateManager: for each producer id the leader remembers its epoch and the sequence
ranges of its last five batches. A retried batch whose sequences match one of them is a duplicate and is
answered with the original offsets instead of being appended again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER;
an older epoch is INVALID_PRODUCER_EPOCH. The table is rebuilt from batch headers when a replica becomes
leader, so a new leader drops the same duplicates.

A producer that has appended nothing for ``producer.id.expiration.ms`` (by its last batch's max timestamp)
is forgotten, as Kafka's removeExpiredProducers: the broker checks every
``producer.id.expiration.check.interval.ms``, and a rebuild from the log skips expired producers as
Kafka's loadFromSnapshot does, so the expiry holds across a restart. A producer with an ongoing
transaction is never expired.

Transactions (KIP-98, Kafka's ProducerAppendInfo and ProducerStateManager): a producer's first
transactional batch opens its transaction at that batch's first offset; a control batch (an end
transaction marker, commit or abort, written by the transaction coordinator) closes it, returning a
``CompletedTxn``. A non-transactional batch from a producer in a transaction is INVALID_TXN_STATE. The
first unstable offset is the first offset of the earliest transaction still open or completed by a
marker not yet below the high watermark; the last stable offset is that, or the high watermark if lower,
and a read_committed consumer reads no further.

Transaction version 2 (KIP-890): before a producer's first batch of a transaction is appended, the leader
has the coordinator add the partition, and meanwhile keeps a ``VerificationStateEntry`` for the producer:
the lowest sequence being added. No batch of a higher sequence is appended until one is (Kafka's
ProducerAppendInfo.checkSequence), so a first batch answered with a retriable error while a later one is
added and written cannot be left out of order for good. The entry's ``VerificationGuard`` goes with the
request: a transactional batch from a producer with no transaction open here at its epoch is appended only
with the guard of the entry still there (Kafka's UnifiedLog.analyzeAndValidateProducerState), so a marker
written between the coordinator's answer and the append (it clears the entry) keeps the late batch out
(INVALID_TXN_STATE) instead of opening a transaction the coordinator does not know.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Record,
    RecordBatch,
    decode_batch,
    encode_batch,
)

NO_PRODUCER_ID = -1
# Breaks the rule the last stable offset exists for: read_committed reads to the high watermark, into
# open transactions (tests show the checks catch it).
UNSAFE_LSO_IGNORES_OPEN_TRANSACTIONS_FOR_TESTS = False
BATCHES_REMEMBERED = 5
MAX_SEQUENCE = 2**31 - 1
MAX_EPOCH = 2**15 - 1


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
    current_txn_first_offset: int = -1  # the first offset of its ongoing transaction, else -1
    coordinator_epoch: int = -1  # of the last marker written for it

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class VerificationGuard:
    """A token, equal only to itself, that a leader's verification hands to the append (Kafka's
    VerificationGuard)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SENTINEL_GUARD" if self is SENTINEL_GUARD else f"VerificationGuard({id(self):#x})"


# A request that started no verification (its producer's transaction was open): Kafka's SENTINEL, which
# verifies nothing.
SENTINEL_GUARD = VerificationGuard()


@dataclass(slots=True)
class VerificationStateEntry:
    """A producer whose transactional batches the leader is having added to its transaction here (Kafka's
    VerificationStateEntry): when it began, and the lowest sequence of the epoch being added. Kept only on
    the leader, in memory; cleared by the producer's next transactional batch or marker."""

    timestamp: int
    lowest_sequence: int
    epoch: int
    # Transaction version 2 (Produce v12+ adds the partition): the previous transaction's marker carries the
    # epoch this verification is at, so it does not end it, and a producer new here starts at sequence 0.
    supports_epoch_bump: bool
    verification_guard: VerificationGuard = field(default_factory=VerificationGuard)

    def maybe_update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        """A lower sequence of the same epoch lowers the bar; a newer epoch starts it again (its sequences
        restart), an older one is ignored."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence


@dataclass(frozen=True, slots=True)
class LastRecord:
    """A producer's last entry in the log, which compaction keeps (Kafka's LastRecord): the last offset
    of its last data batch, or None when its last entry is a marker that bumped its epoch (with no batch
    of that epoch since), and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """A control record's content: commit or abort, and the transaction coordinator's epoch."""

    committed: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended (Kafka's CompletedTxn), with the last stable offset once it ended
    (Kafka's ProducerStateManager.lastStableOffset(completedTxn): the first offset of the next open
    transaction, else the offset after the marker), which the aborted-transaction index records."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool
    last_stable_offset: int


CONTROL_KEY = struct.Struct(">hh")  # version, type (0 abort, 1 commit): Kafka's ControlRecordType key
MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch: Kafka's EndTxnMarker value
ABORT, COMMIT = 0, 1


def read_end_txn_marker(buf: bytes | memoryview, pos: int, header: BatchHeader) -> EndTxnMarker | None:
    """The marker in a control batch (Kafka's EndTransactionMarker.deserialize); None for an empty
    batch (compaction removed it) or a control record of another type."""
    batch = decode_batch(bytes(memoryview(buf)[pos : pos + header.size]))
    if not batch.records:
        return None
    record = batch.records[0]
    if record.key is None or len(record.key) < CONTROL_KEY.size or record.value is None:
        return None
    _version, kind = CONTROL_KEY.unpack_from(record.key)
    if kind not in (ABORT, COMMIT) or len(record.value) < MARKER_VALUE.size:
        return None
    _version, coordinator_epoch = MARKER_VALUE.unpack_from(record.value)
    return EndTxnMarker(kind == COMMIT, coordinator_epoch)


def end_txn_marker_batch(
    producer_id: int, producer_epoch: int, marker: EndTxnMarker, timestamp_ms: int
) -> bytes:
    """A control batch of one marker record, as Kafka's MemoryRecords.withEndTransactionMarker:
    transactional and control attributes, no sequence, key (version 0, type), value (version 0,
    coordinator epoch)."""
    key = CONTROL_KEY.pack(0, COMMIT if marker.committed else ABORT)
    value = MARKER_VALUE.pack(0, marker.coordinator_epoch)
    batch = RecordBatch(
        base_offset=0,
        partition_leader_epoch=-1,
        attributes=TRANSACTIONAL_BIT | CONTROL_BIT,
        last_offset_delta=0,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        records=[Record(0, 0, key, value)],
    )
    return encode_batch(batch)


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    error: ErrorCode
    duplicate_of: BatchMetadata | None = None


def last_sequence(base_sequence: int, record_count: int) -> int:
    return (base_sequence + record_count - 1) % (MAX_SEQUENCE + 1)


def _next_sequence(seq: int) -> int:
    return 0 if seq == MAX_SEQUENCE else seq + 1


class ProducerStateTable:
    """Per-partition producer state, kept by the leader and its followers alike."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its open transaction, in the order they began (by offset)
        self.ongoing: dict[int, int] = {}
        # transactions ended by a marker the high watermark has not passed yet (Kafka's unreplicatedTxns)
        self.unreplicated: list[CompletedTxn] = []
        # producers whose transaction the leader is having the coordinator add this partition to
        self.verification_states: dict[int, VerificationStateEntry] = {}

    def check(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        record_count: int,
        is_transactional: bool = False,
        verification_guard: VerificationGuard | None = None,
    ) -> SequenceCheck:
        """Decides whether a batch from a producer may be appended (nothing changes here).
        ``verification_guard``: the guard the request's verification got (SENTINEL_GUARD if it started
        none), or None for a request not verified (Produce before v12)."""
        if producer_id == NO_PRODUCER_ID:
            return SequenceCheck(ErrorCode.none)
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            return SequenceCheck(ErrorCode.invalid_producer_epoch)
        last = last_sequence(base_sequence, record_count)
        for batch in entry.batches if entry is not None and epoch == entry.epoch else ():
            if batch.first_seq == base_sequence and batch.last_seq == last:
                return SequenceCheck(ErrorCode.none, duplicate_of=batch)
        if verification_guard is not None and self.missing_verification(
            producer_id, epoch, is_transactional, verification_guard
        ):
            return SequenceCheck(ErrorCode.invalid_txn_state)  # not part of an ongoing transaction
        verifying = self.verification_states.get(producer_id)
        if verifying is not None and verifying.supports_epoch_bump and entry is None and base_sequence != 0:
            return _OUT_OF_ORDER  # a transaction version 2 producer new here starts at sequence 0
        if verifying is not None and base_sequence > verifying.lowest_sequence:
            return _OUT_OF_ORDER  # a lower sequence is still being added to the transaction
        if entry is None:
            # Unknown producer (new, or its state was lost with the log): accepted, as Kafka does.
            return SequenceCheck(ErrorCode.none)
        if epoch > entry.epoch:
            ok = base_sequence == 0
            return self._txn_state(entry, is_transactional) if ok else _OUT_OF_ORDER
        if entry.batches and base_sequence != _next_sequence(entry.last_seq):
            return _OUT_OF_ORDER
        if not entry.batches and base_sequence != 0:
            return _OUT_OF_ORDER  # a marker bumped the epoch (KIP-890): sequences start again at 0
        return self._txn_state(entry, is_transactional)

    @staticmethod
    def _txn_state(entry: ProducerEntry, is_transactional: bool) -> SequenceCheck:
        """ProducerAppendInfo.appendDataBatch: no plain batch while the producer's transaction is open."""
        if entry.current_txn_first_offset >= 0 and not is_transactional:
            return SequenceCheck(ErrorCode.invalid_txn_state)
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
        is_transactional: bool = False,
    ) -> None:
        """Remembers an appended batch (on the leader after append, and when rebuilding from the log);
        a transactional one opens its producer's transaction unless one is open, and ends the
        verification of its first batch (Kafka's UnifiedLog.updateProducers)."""
        if producer_id == NO_PRODUCER_ID:
            return
        if is_transactional:
            self.verification_states.pop(producer_id, None)
        if base_sequence < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
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
        if is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[producer_id] = first_offset

    def append(
        self, buf: bytes | memoryview, headers: Sequence[BatchHeader], positions: Sequence[int]
    ) -> list[CompletedTxn]:
        """Takes in appended batches in log order (``positions``: where each lies in ``buf``), as
        Kafka's ProducerAppendInfo.append: data batches are remembered, markers end transactions.
        Returns the transactions ended, for the aborted-transaction index."""
        completed = []
        for header, pos in zip(headers, positions, strict=True):
            attributes = header.attributes  # flags read directly: this runs for every appended batch
            if not attributes & CONTROL_BIT:
                self.record(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    # the offset range, not the record count: compaction may have emptied the batch
                    # (Kafka's lastSequence counts from the last offset delta)
                    header.last_offset_delta + 1,
                    header.base_offset,
                    header.base_offset + header.last_offset_delta,
                    header.max_timestamp,
                    bool(attributes & TRANSACTIONAL_BIT),
                )
                continue
            marker = read_end_txn_marker(buf, pos, header) if header.producer_id >= 0 else None
            if marker is None:  # no producer (Kafka keeps no state for such batches) or no marker
                continue
            txn = self.complete_txn(
                header.producer_id, header.producer_epoch, marker, header.base_offset, header.max_timestamp
            )
            if txn is not None:
                completed.append(txn)
        return completed

    # ---- transactions ------------------------------------------------------------------------------
    def check_marker(
        self, producer_id: int, epoch: int, marker: EndTxnMarker, transaction_version: int = 0
    ) -> ErrorCode:
        """The coordinator's marker may be appended (ProducerAppendInfo.checkProducerEpoch and
        checkCoordinatorEpoch): not from an older producer epoch (with transaction version 2, KIP-890,
        only from a newer one, or the same one again once the transaction has ended: a retried marker),
        nor from an older coordinator."""
        entry = self.producers.get(producer_id)
        if entry is None or producer_id == NO_PRODUCER_ID:
            return ErrorCode.none
        if transaction_version >= 2:
            retry = epoch == entry.epoch and (entry.current_txn_first_offset < 0 or epoch == MAX_EPOCH)
            stale = epoch <= entry.epoch and not retry
        else:
            stale = epoch < entry.epoch
        if stale:
            return ErrorCode.invalid_producer_epoch
        if marker.coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.transaction_coordinator_fenced
        return ErrorCode.none

    def complete_txn(
        self, producer_id: int, epoch: int, marker: EndTxnMarker, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Applies an appended marker (ProducerAppendInfo.appendEndTxnMarker, then completeTxn): the
        producer's transaction, if it had one open, ends at ``offset``. A marker with no transaction
        (nothing was written to this partition, or compaction emptied it) changes no offset. A verification
        of transaction version 2 at the same epoch survives it: there the marker of the transaction before
        carries the epoch its successor's first batch is being verified at (UnifiedLog.updateProducers); a
        version 1 producer keeps its epoch across transactions, so its marker ends any verification (a late
        batch of the ended transaction must not open a new one)."""
        verifying = self.verification_states.get(producer_id)
        if verifying is not None and not (verifying.supports_epoch_bump and verifying.epoch == epoch):
            del self.verification_states[producer_id]
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = timestamp
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        del self.ongoing[producer_id]
        next_open = next(iter(self.ongoing.values()), offset + 1)
        completed = CompletedTxn(producer_id, first, offset, not marker.committed, next_open)
        self.unreplicated.append(completed)
        return completed

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forgets the ended transactions whose marker is below the high watermark (Kafka's
        ProducerStateManager.onHighWatermarkUpdated): they no longer hold the last stable offset."""
        if self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction open, or ended by a marker at or above the
        high watermark (Kafka's firstUnstableOffset); None when there is none."""
        self.on_high_watermark_updated(high_watermark)
        firsts = [t.first_offset for t in self.unreplicated]
        if self.ongoing:
            firsts.append(next(iter(self.ongoing.values())))
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int, log_start_offset: int = 0) -> int:
        """How far a read_committed consumer may read: the first unstable offset, or the high
        watermark if that is lower (Kafka's UnifiedLog.lastStableOffset). A transaction whose start
        was deleted (retention, DeleteRecords) counts from the log start offset, as Kafka's
        maybeIncrementFirstUnstableOffset."""
        if UNSAFE_LSO_IGNORES_OPEN_TRANSACTIONS_FOR_TESTS or (not self.ongoing and not self.unreplicated):
            return high_watermark
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(max(first, log_start_offset), high_watermark)

    # ---- verification (transaction version 2) -------------------------------------------------------
    def maybe_create_verification_state_entry(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int, *, supports_epoch_bump: bool
    ) -> VerificationStateEntry:
        """Notes that the producer's batch of ``sequence`` is being added to its transaction (Kafka's
        ProducerStateManager.maybeCreateVerificationStateEntry): a new entry, or the existing one with its
        lowest sequence and epoch updated."""
        entry = self.verification_states.get(producer_id)
        if entry is None:
            entry = VerificationStateEntry(now_ms, sequence, epoch, supports_epoch_bump)
            self.verification_states[producer_id] = entry
        entry.maybe_update_lowest_sequence_and_epoch(sequence, epoch)
        return entry

    def has_ongoing_transaction(self, producer_id: int, epoch: int) -> bool:
        """The producer's transaction is open here at this epoch (Kafka's UnifiedLog.hasOngoingTransaction)."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.epoch == epoch and entry.current_txn_first_offset >= 0

    def missing_verification(
        self, producer_id: int, epoch: int, is_transactional: bool, verification_guard: VerificationGuard
    ) -> bool:
        """A transactional batch that would open a transaction here without the guard of the producer's
        verification still under way (Kafka's batchMissingRequiredVerification)."""
        if not is_transactional or self.has_ongoing_transaction(producer_id, epoch):
            return False
        entry = self.verification_states.get(producer_id)
        return (
            verification_guard is SENTINEL_GUARD
            or entry is None
            or entry.verification_guard is not verification_guard
        )

    # ---- truncation and expiry ---------------------------------------------------------------------
    def reset(self) -> None:
        """Forgets everything (the log was truncated: the caller rebuilds the state from what is left,
        as Kafka's loadProducerState, rather than editing it)."""
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    def last_records_of_active_producers(self) -> dict[int, LastRecord]:
        """Each producer's last entry, which compaction must keep (Kafka's
        UnifiedLog.lastRecordsOfActiveProducers): with no producer-state snapshot, the state is rebuilt
        from the log, and a producer whose last batch was removed would lose its epoch and sequence."""
        return {
            producer_id: LastRecord(entry.batches[-1].last_offset if entry.batches else None, entry.epoch)
            for producer_id, entry in self.producers.items()
        }

    def remove_expired_producers(self, now_ms: int, producer_id_expiration_ms: int) -> int:
        """Kafka's ProducerStateManager.removeExpiredProducers: forgets every producer idle for
        ``producer_id_expiration_ms``, and every verification begun that long ago (never completed);
        returns how many producers."""
        self.verification_states = {
            producer_id: entry
            for producer_id, entry in self.verification_states.items()
            if now_ms - entry.timestamp < producer_id_expiration_ms
        }
        expired = [
            producer_id
            for producer_id, entry in self.producers.items()
            if is_producer_expired(now_ms, entry, producer_id_expiration_ms)
        ]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)


_OUT_OF_ORDER = SequenceCheck(ErrorCode.out_of_order_sequence_number)


def is_producer_expired(now_ms: int, entry: ProducerEntry, producer_id_expiration_ms: int) -> bool:
    """Kafka's isProducerExpired: idle that long, and no transaction open."""
    return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= producer_id_expiration_ms
