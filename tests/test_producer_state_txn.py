"""Transactions in the producer state, as Kafka's ProducerStateManagerTest: transactions opened by
transactional batches, ended by the coordinator's markers, the first unstable and last stable offsets."""

import uuid

import pytest

from epochkraft.broker import producer_state
from epochkraft.broker.log.partition_log import LogConfig, PartitionLog
from epochkraft.broker.partition import Partition
from epochkraft.broker.producer_state import (
    SENTINEL_GUARD,
    EndTxnMarker,
    ProducerStateTable,
    end_txn_marker_batch,
    read_end_txn_marker,
)
from epochkraft.broker.replica_manager import Replica
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import (
    STAMPED_PREFIX,
    TRANSACTIONAL_BIT,
    Record,
    RecordBatch,
    encode_batch,
    parse_header,
    stamped_prefix,
)

PID, OTHER = 7, 8


class Log:
    """A producer state fed appended batches at increasing offsets, as a partition's log does."""

    def __init__(self) -> None:
        self.table = ProducerStateTable()
        self.offset = 0

    def data(self, pid: int, epoch: int, seq: int, count: int = 1, transactional: bool = True) -> int:
        first = self.offset
        self.table.record(pid, epoch, seq, count, first, first + count - 1, 0, transactional)
        self.offset += count
        return first

    def marker(self, pid: int, epoch: int, committed: bool, coordinator_epoch: int = 0):
        batch = end_txn_marker_batch(pid, epoch, EndTxnMarker(committed, coordinator_epoch), 1000)
        batch = stamped_prefix(parse_header(batch), self.offset, 0) + batch[STAMPED_PREFIX:]
        header = parse_header(batch)
        self.offset += 1
        (completed,) = self.table.append(batch, [header], [0]) or [None]
        return completed


def test_marker_round_trip():
    """EndTransactionMarkerTest: the control batch carries the producer, the type and the coordinator
    epoch as Kafka writes them."""
    batch = end_txn_marker_batch(PID, 3, EndTxnMarker(False, 11), 1000)
    header = parse_header(batch)
    assert header.is_control and header.is_transactional and header.base_sequence == -1
    assert (header.producer_id, header.producer_epoch) == (PID, 3)
    assert read_end_txn_marker(batch, 0, header) == EndTxnMarker(False, 11)


def test_first_unstable_offset_with_transactional_data():
    """UnifiedLogTest.testFirstUnstableOffsetWithTransactionalData (on the producer state): the first
    unstable offset is the transaction's first offset until its marker is below the high watermark."""
    log = Log()
    log.data(1, 0, 0, transactional=False)
    first = log.data(PID, 0, 0, 3)
    log.data(PID, 0, 3, 2)
    assert log.table.first_unstable_offset(high_watermark=log.offset) == first
    assert log.table.last_stable_offset(high_watermark=log.offset) == first
    assert log.table.last_stable_offset(high_watermark=0) == 0  # never above the high watermark
    marker = log.offset
    log.marker(PID, 0, committed=True)
    assert log.table.last_stable_offset(high_watermark=marker) == first  # marker not replicated yet
    assert log.table.last_stable_offset(high_watermark=marker + 1) == marker + 1
    assert log.table.first_unstable_offset(marker + 1) is None


def test_last_stable_offset_does_not_exceed_log_start_offset_after_segment_deletion():
    """UnifiedLogTest.testLastStableOffsetDoesNotExceedLogStartOffsetAfterSegmentDeletion: an open
    transaction whose first batches were deleted holds the last stable offset at the log start, not
    below it, where no fetch could reach."""
    log = Log()
    first = log.data(PID, 0, 0, 5)
    log.data(1, 0, 0, 5, transactional=False)
    assert log.table.last_stable_offset(high_watermark=log.offset, log_start_offset=0) == first
    assert log.table.last_stable_offset(high_watermark=log.offset, log_start_offset=3) == 3
    assert log.table.last_stable_offset(high_watermark=2, log_start_offset=3) == 2  # never above the HW


def test_last_stable_offset_completed_txn():
    """ProducerStateManagerTest.testLastStableOffsetCompletedTxn: a completed transaction's last stable
    offset is the first offset of the next open transaction of another producer, else the offset after
    its marker."""
    log = Log()
    first1 = log.data(PID, 0, 0)
    first2 = log.data(OTHER, 0, 0)
    log.data(9, 0, 0)
    completed = log.marker(PID, 0, committed=False)
    assert completed.first_offset == first1 and completed.is_aborted
    assert completed.last_stable_offset == first2
    completed = log.marker(OTHER, 0, committed=True)
    assert completed.last_stable_offset == first2 + 1  # producer 9's transaction
    log.marker(9, 0, committed=True)
    assert log.table.first_unstable_offset(high_watermark=log.offset) is None


def test_non_transactional_append_with_ongoing_transaction():
    """ProducerStateManagerTest.testNonTransactionalAppendWithOngoingTransaction: INVALID_TXN_STATE."""
    log = Log()
    log.data(PID, 0, 0)
    assert log.table.check(PID, 0, 1, 1, is_transactional=False).error == ErrorCode.invalid_txn_state
    assert log.table.check(PID, 0, 1, 1, is_transactional=True).error == ErrorCode.none
    log.marker(PID, 0, committed=True)
    assert log.table.check(PID, 0, 1, 1, is_transactional=False).error == ErrorCode.none


def test_old_epoch_for_control_record():
    """ProducerStateManagerTest.testOldEpochForControlRecord: a marker from an older producer epoch is
    refused (INVALID_PRODUCER_EPOCH, as Kafka 2.7+ answers it)."""
    log = Log()
    log.data(PID, 3, 0)
    marker = EndTxnMarker(True, 0)
    assert log.table.check_marker(PID, 2, marker) == ErrorCode.invalid_producer_epoch
    assert log.table.check_marker(PID, 3, marker) == ErrorCode.none


def test_coordinator_fencing():
    """ProducerStateManagerTest.testCoordinatorFencing: a marker from an older coordinator epoch than
    the last one written for the producer is TRANSACTION_COORDINATOR_FENCED."""
    log = Log()
    log.data(PID, 0, 0)
    log.marker(PID, 0, committed=True, coordinator_epoch=5)
    log.data(PID, 0, 1)
    assert log.table.check_marker(PID, 0, EndTxnMarker(False, 4)) == ErrorCode.transaction_coordinator_fenced
    assert log.table.check_marker(PID, 0, EndTxnMarker(False, 5)) == ErrorCode.none


def test_control_record_bumps_producer_epoch():
    """ProducerStateManagerTest.testControlRecordBumpsProducerEpoch: a marker with a newer epoch (an
    abort by the coordinator, or KIP-890's bump) becomes the producer's epoch; the old one is fenced and
    the new one starts at sequence 0."""
    log = Log()
    log.data(PID, 0, 0)
    assert log.marker(PID, 1, committed=False) is not None
    entry = log.table.producers[PID]
    assert entry.epoch == 1 and entry.current_txn_first_offset == -1
    assert log.table.check(PID, 0, 1, 1, True).error == ErrorCode.invalid_producer_epoch
    assert log.table.check(PID, 1, 5, 1, True).error == ErrorCode.out_of_order_sequence_number
    assert log.table.check(PID, 1, 0, 1, True).error == ErrorCode.none


def test_append_txn_marker_with_no_producer_state():
    """ProducerStateManagerTest.testAppendTxnMarkerWithNoProducerState: a marker for a producer with no
    state (and no transaction here) is remembered with its epochs and ends nothing."""
    log = Log()
    assert log.marker(PID, 2, committed=True, coordinator_epoch=27) is None
    entry = log.table.producers[PID]
    assert (entry.epoch, entry.coordinator_epoch, entry.current_txn_first_offset) == (2, 27, -1)
    assert log.table.last_stable_offset(log.offset) == log.offset


class Follower:
    """A partition's log and producer state, appended to as a follower copies its leader's batches."""

    def __init__(self, directory) -> None:
        plog = PartitionLog.open(directory, LogConfig(retention_ms=-1))
        self.replica = Replica(Partition("t", uuid.uuid4(), 0, 1), plog)

    @property
    def table(self) -> ProducerStateTable:
        return self.replica.producers

    @property
    def end(self) -> int:
        return self.replica.log.log_end_offset

    def append(self, batch: bytes) -> int:
        plog = self.replica.log
        batch = stamped_prefix(parse_header(batch), plog.log_end_offset, 0) + batch[STAMPED_PREFIX:]
        info = plog.append_as_follower(batch)
        completed = self.table.append(batch, info.headers, info.positions)
        if completed:
            plog.append_aborted_txns(completed)
        return info.first_offset

    def data(self, pid: int, epoch: int, seq: int, transactional: bool = True) -> int:
        records = [Record(0, 0, b"k", b"v")]
        attributes = TRANSACTIONAL_BIT if transactional else 0
        batch = RecordBatch(0, -1, attributes, 0, 1000, 1000, pid, epoch, seq, records)
        return self.append(encode_batch(batch))

    def marker(self, pid: int, epoch: int, committed: bool, coordinator_epoch: int = 0) -> int:
        marker = EndTxnMarker(committed, coordinator_epoch)
        return self.append(end_txn_marker_batch(pid, epoch, marker, 1000))


def test_truncate_forgets_batches_beyond_log_end(tmp_path):
    """UnifiedLog.truncateTo reloads the producer state: a batch cut off is no longer a duplicate, its
    sequence is the next one expected again."""
    log = Follower(tmp_path)
    log.data(9, 0, 0, transactional=False)
    second = log.data(9, 0, 1, transactional=False)
    log.replica.truncate_to(second)
    assert log.table.check(9, 0, 1, 1).duplicate_of is None
    assert log.table.check(9, 0, 1, 1).error == ErrorCode.none


def test_truncate_reopens_a_transaction_whose_marker_is_cut(tmp_path):
    """ProducerStateManagerTest.testTruncateAndReloadRemovesOutOfRangeSnapshots' intent without
    snapshots: a follower cutting its log above the high watermark forgets transactions begun there and
    reopens one whose marker it cut."""
    log = Follower(tmp_path)
    first = log.data(PID, 0, 0)
    marker = log.marker(PID, 0, committed=True)
    log.data(OTHER, 0, 0)
    log.replica.truncate_to(marker)
    assert log.table.ongoing == {PID: first}
    assert log.table.producers[PID].current_txn_first_offset == first
    assert OTHER not in log.table.producers
    assert log.table.last_stable_offset(high_watermark=marker) == first


def test_truncate_to_log_end_keeps_producer_state(tmp_path):
    """UnifiedLog.truncateTo at or past the log end changes nothing: a producer whose last entry is a
    marker with a newer epoch (a fencing abort, or any transaction version 2 marker), so with no batch
    remembered, keeps its epoch and coordinator epoch, and its older-epoch zombie stays fenced."""
    log = Follower(tmp_path)
    log.data(PID, 0, 0)
    log.marker(PID, 1, committed=False, coordinator_epoch=5)
    log.replica.truncate_to(log.end)
    log.replica.truncate_to(log.end + 3)
    entry = log.table.producers[PID]
    assert (entry.epoch, entry.coordinator_epoch) == (1, 5)
    assert log.table.check(PID, 0, 1, 1, True).error == ErrorCode.invalid_producer_epoch
    stale = EndTxnMarker(committed=True, coordinator_epoch=4)
    assert log.table.check_marker(PID, 1, stale) == ErrorCode.transaction_coordinator_fenced
    # A real truncation after the marker keeps it too: the state is reloaded from the log.
    cut = log.data(OTHER, 0, 0)
    log.replica.truncate_to(cut)
    assert (log.table.producers[PID].epoch, log.table.producers[PID].coordinator_epoch) == (1, 5)
    assert log.table.check(PID, 0, 1, 1, True).error == ErrorCode.invalid_producer_epoch


def test_truncate_rolls_back_the_producer_epoch(tmp_path):
    """UnifiedLog.truncateTo then loadProducerState: a marker with a newer epoch cut off takes its epoch
    with it, so the new leader's batches of the older epoch are taken in, their transaction opens, and
    its abort marker is indexed (else read_committed consumers would see the aborted records)."""
    log = Follower(tmp_path)
    log.data(PID, 0, 0)
    cut = log.marker(PID, 1, committed=False)  # the old leader's fencing abort, never replicated
    log.replica.truncate_to(cut)
    assert log.table.producers[PID].epoch == 0
    assert log.table.ongoing == {PID: 0}  # its marker cut, the transaction is open again
    log.data(PID, 0, 1)  # the new leader's log
    abort1 = log.marker(PID, 0, committed=False)
    first = log.data(PID, 0, 2)
    abort2 = log.marker(PID, 0, committed=False)
    assert log.table.producers[PID].batches[-1].first_offset == first
    aborted = log.replica.log.collect_aborted_txns(0, log.end)
    found = [(t.producer_id, t.first_offset, t.last_offset) for t in aborted]
    assert found == [(PID, 0, abort1), (PID, first, abort2)]


def test_ongoing_transaction_keeps_producer_from_expiring():
    """ProducerStateManager.isProducerExpired: a producer with a transaction open is never expired."""
    log = Log()
    log.data(PID, 0, 0)
    assert log.table.remove_expired_producers(now_ms=10**9, producer_id_expiration_ms=1) == 0
    log.marker(PID, 0, committed=False)
    assert log.table.remove_expired_producers(now_ms=10**9, producer_id_expiration_ms=1) == 1


@pytest.mark.parametrize("unsafe", [False, True])
def test_lso_stops_at_an_open_transaction(monkeypatch, unsafe):
    """The rule read_committed relies on; with the unsafe switch the check above catches it."""
    monkeypatch.setattr(producer_state, "UNSAFE_LSO_IGNORES_OPEN_TRANSACTIONS_FOR_TESTS", unsafe)
    log = Log()
    first = log.data(PID, 0, 0, 5)
    assert (log.table.last_stable_offset(high_watermark=log.offset) == first) != unsafe


def test_ended_transactions_are_forgotten_once_the_high_watermark_passes_their_marker():
    """ProducerStateManager.onHighWatermarkUpdated: a partition nobody fetches from still forgets its
    ended transactions as its high watermark moves, so they do not pile up."""
    log = Log()
    for pid in range(10):
        log.data(pid, 0, 0)
        log.marker(pid, 0, committed=pid % 2 == 0)
    assert len(log.table.unreplicated) == 10
    log.table.on_high_watermark_updated(log.offset - 1)
    assert len(log.table.unreplicated) == 1  # the last marker is not below it yet
    log.table.on_high_watermark_updated(log.offset)
    assert log.table.unreplicated == []


def test_coordinator_appends_only_markers_checked_against_the_producer_state():
    """ReplicaManager with AppendOrigin.COORDINATOR: each batch must be a marker, from the producer's
    current epoch or later and the latest coordinator epoch (KafkaApis answers the error per partition)."""
    from epochkraft.broker.replica_manager import _check_markers
    from epochkraft.protocol.records import build_batch, iter_batches

    log = Log()
    log.data(PID, 2, 0)
    log.marker(PID, 2, committed=True, coordinator_epoch=4)

    def check(batch: bytes) -> ErrorCode:
        result = _check_markers(log.table, batch, list(iter_batches(batch)))
        return ErrorCode.none if result is None else result.error

    def marker(epoch: int, coordinator_epoch: int) -> bytes:
        return end_txn_marker_batch(PID, epoch, EndTxnMarker(True, coordinator_epoch), 1000)

    assert check(marker(2, 4)) == ErrorCode.none
    assert check(marker(3, 4)) == ErrorCode.none  # a bumped epoch (KIP-890)
    assert check(marker(1, 4)) == ErrorCode.invalid_producer_epoch
    assert check(marker(2, 3)) == ErrorCode.transaction_coordinator_fenced
    assert check(build_batch([(b"k", b"v", (), 1000)])) == ErrorCode.invalid_record


def test_a_marker_without_a_producer_id_changes_no_state():
    """UnifiedLog.analyzeAndValidateProducerState skips batches without a producer id: a marker for
    producer -1 opens, ends and remembers nothing (DescribeProducers shows no such producer)."""
    log = Log()
    assert log.marker(-1, -1, committed=False) is None
    assert log.table.producers == {}


def test_transaction_version_2_markers_bump_the_epoch():
    """ProducerAppendInfo.checkProducerEpoch with transaction version 2 (KIP-890): a marker must carry a
    newer epoch than the producer's, except a retry of the marker that already ended its transaction."""
    log = Log()
    log.data(PID, 3, 0)
    commit = EndTxnMarker(True, 0)
    assert log.table.check_marker(PID, 3, commit, transaction_version=2) == ErrorCode.invalid_producer_epoch
    assert log.table.check_marker(PID, 3, commit, transaction_version=1) == ErrorCode.none
    assert log.table.check_marker(PID, 4, commit, transaction_version=2) == ErrorCode.none
    log.marker(PID, 4, committed=True)
    assert log.table.check_marker(PID, 4, commit, transaction_version=2) == ErrorCode.none  # a retry
    assert log.table.check_marker(PID, 3, commit, transaction_version=2) == ErrorCode.invalid_producer_epoch


# ---- verification before a transaction's first batch (transaction version 2) -------------------------------
EXPIRATION_MS = 5000


def test_entry_for_verification():
    """ProducerStateManagerTest.testEntryForVerification: an entry is reused while it lasts, and the
    producer's first transactional batch clears it."""
    log = Log()
    original = log.table.maybe_create_verification_state_entry(
        PID, 0, 0, now_ms=1000, supports_epoch_bump=True
    )
    assert (
        log.table.maybe_create_verification_state_entry(PID, 0, 0, now_ms=1001, supports_epoch_bump=True)
        is original
    )
    assert log.table.verification_states[PID] is original
    log.data(PID, 0, 0)
    assert PID not in log.table.verification_states


def test_sequence_and_epoch_in_verification_entry():
    """ProducerStateManagerTest.testSequenceAndEpochInVerificationEntry: a lower sequence lowers the
    entry's, a newer epoch replaces sequence and epoch, an older epoch is ignored."""
    table = ProducerStateTable()
    entry = table.maybe_create_verification_state_entry(PID, 1, 0, now_ms=1000, supports_epoch_bump=True)
    assert (entry.lowest_sequence, entry.epoch) == (1, 0)
    table.maybe_create_verification_state_entry(PID, 0, 0, now_ms=1000, supports_epoch_bump=True)
    assert (entry.lowest_sequence, entry.epoch) == (0, 0)
    table.maybe_create_verification_state_entry(PID, 2, 1, now_ms=1000, supports_epoch_bump=True)
    assert (entry.lowest_sequence, entry.epoch) == (2, 1)
    table.maybe_create_verification_state_entry(PID, 0, 0, now_ms=1000, supports_epoch_bump=True)
    assert (entry.lowest_sequence, entry.epoch) == (2, 1)
    assert table.verification_states == {PID: entry}


def test_throw_out_of_order_sequence_with_verification_sequence_check():
    """ProducerStateManagerTest.testThrowOutOfOrderSequenceWithVerificationSequenceCheck: while sequence
    0 is being added to the transaction, a batch of a higher sequence is OUT_OF_ORDER_SEQUENCE_NUMBER,
    also from a producer the partition does not know (which is otherwise accepted at any sequence)."""
    table = ProducerStateTable()
    entry = table.maybe_create_verification_state_entry(PID, 0, 0, now_ms=1000, supports_epoch_bump=True)
    assert table.check(PID, 0, 4, 1, is_transactional=True).error == ErrorCode.out_of_order_sequence_number
    assert table.verification_states[PID] is entry
    assert table.check(PID, 0, 0, 4, is_transactional=True).error == ErrorCode.none


def test_a_later_batch_waits_for_the_producers_first_batch_here():
    """The Streams exactly_once_v2 stall (transaction version 2, no fault): a producer new to this
    partition sent sequence 0 at epoch 1, answered NOT_ENOUGH_REPLICAS (the coordinator still writing its
    previous transaction's markers), then sequence 38, added once they were written. Appended first (a
    producer the partition does not know is accepted at any sequence), sequence 38 left every retry of
    sequence 0 OUT_OF_ORDER_SEQUENCE_NUMBER until the transaction timed out and the coordinator's abort
    fenced the producer. It waits for sequence 0 instead."""
    log = Log()
    log.table.maybe_create_verification_state_entry(
        PID, 0, 1, now_ms=1000, supports_epoch_bump=True
    )  # sequence 0, refused
    log.table.maybe_create_verification_state_entry(
        PID, 38, 1, now_ms=1001, supports_epoch_bump=True
    )  # sequence 38, added
    assert log.table.check(PID, 1, 38, 2, True).error == ErrorCode.out_of_order_sequence_number
    assert log.table.check(PID, 1, 0, 38, True).error == ErrorCode.none  # the retry of sequence 0
    log.data(PID, 1, 0, count=38)
    assert log.table.check(PID, 1, 38, 2, True).error == ErrorCode.none


def test_empty_transaction_still_clears_verification_guard():
    """UnifiedLogTest.testEmptyTransactionStillClearsVerificationGuard: a marker clears the producer's
    verification state too (its transaction ended; a batch after it starts a new verification)."""
    log = Log()
    log.table.maybe_create_verification_state_entry(PID, 0, 0, now_ms=1000, supports_epoch_bump=True)
    log.marker(PID, 1, committed=False)
    assert log.table.verification_states == {}


def test_transaction_is_ongoing_and_verification_guard():
    """UnifiedLogTest.testTransactionIsOngoingAndVerificationGuard: an idempotent batch keeps the guard,
    the first transactional batch appended with it clears it and opens the transaction, the marker ends
    it, and the next transaction's verification has a guard of its own: the old one no longer opens one."""
    log = Log()
    assert not log.table.has_ongoing_transaction(PID, 1)
    assert log.table.missing_verification(PID, 1, True, SENTINEL_GUARD)
    guard = log.table.maybe_create_verification_state_entry(
        PID, 5, 1, now_ms=1000, supports_epoch_bump=True
    ).verification_guard
    assert guard is not SENTINEL_GUARD
    log.data(PID, 1, 3, count=2, transactional=False)
    assert log.table.verification_states[PID].verification_guard is guard
    assert log.table.check(PID, 1, 5, 2, True, guard).error == ErrorCode.none
    log.data(PID, 1, 5, count=2)
    assert log.table.has_ongoing_transaction(PID, 1) and log.table.verification_states == {}
    assert log.table.check(PID, 1, 7, 1, True, SENTINEL_GUARD).error == ErrorCode.none  # in the transaction
    log.marker(PID, 1, committed=True)
    assert not log.table.has_ongoing_transaction(PID, 1)
    new_guard = log.table.maybe_create_verification_state_entry(
        PID, 7, 1, now_ms=1001, supports_epoch_bump=True
    ).verification_guard
    assert new_guard is not guard
    assert log.table.check(PID, 1, 7, 1, True, guard).error == ErrorCode.invalid_txn_state
    assert log.table.check(PID, 1, 7, 1, True, new_guard).error == ErrorCode.none


def test_a_marker_between_the_add_and_the_append_keeps_the_late_batch_out():
    """The ABA the guard is for (UnifiedLog.analyzeAndValidateProducerState): the coordinator added the
    partition, then its abort marker (a timed-out transaction: transaction version 2 bumps the epoch) was
    written before the batch: the verification is gone with it, and the late batch cannot open a
    transaction the coordinator does not know (refused for its older epoch, and without the bump for its
    guard). A request not verified (Produce before v12) keeps the checks it had."""
    log = Log()
    guard = log.table.maybe_create_verification_state_entry(
        PID, 0, 1, now_ms=1000, supports_epoch_bump=True
    ).verification_guard
    log.marker(PID, 2, committed=False)
    assert log.table.verification_states == {}
    assert log.table.check(PID, 1, 0, 1, True, guard).error == ErrorCode.invalid_producer_epoch
    assert log.table.check(PID, 2, 0, 1, True, guard).error == ErrorCode.invalid_txn_state
    assert log.table.check(PID, 2, 0, 1, True).error == ErrorCode.none
    assert log.table.check(PID, 2, 0, 1, False, guard).error == ErrorCode.none  # not transactional


def test_a_version_2_marker_of_the_same_epoch_keeps_the_next_transactions_verification():
    """UnifiedLog.updateProducers (isV2NextTransactionStarted): under transaction version 2 the marker of
    the transaction before carries the bumped epoch its successor's first batch is being verified at; the
    verification survives it, and the batch is appended with its guard."""
    log = Log()
    log.data(PID, 0, 0, count=1, transactional=True)
    guard = log.table.maybe_create_verification_state_entry(
        PID, 0, 1, now_ms=1000, supports_epoch_bump=True
    ).verification_guard
    log.marker(PID, 1, committed=True)  # the previous transaction's, at the bumped epoch
    assert PID in log.table.verification_states
    assert log.table.check(PID, 1, 0, 1, True, guard).error == ErrorCode.none


def test_a_version_2_producer_new_here_starts_at_sequence_0():
    """ProducerAppendInfo.checkSequence: with a verification under way and no state for the producer, a
    first sequence other than 0 is OUT_OF_ORDER_SEQUENCE_NUMBER (its sequence 0 failed elsewhere and is
    retried), so the partition does not begin the producer at sequence 38."""
    log = Log()
    log.table.maybe_create_verification_state_entry(PID, 38, 1, now_ms=1000, supports_epoch_bump=True)
    assert log.table.check(PID, 1, 38, 2, True).error == ErrorCode.out_of_order_sequence_number
    assert log.table.check(PID, 1, 0, 38, True).error == ErrorCode.none


def test_verification_state_entry_expiration():
    """ProducerStateManagerTest.testVerificationStateEntryExpiration: an entry never completed is
    forgotten producer.id.expiration.ms after it began."""
    table = ProducerStateTable()
    entry = table.maybe_create_verification_state_entry(PID, 0, 0, now_ms=1000, supports_epoch_bump=True)
    table.remove_expired_producers(1000 + EXPIRATION_MS // 2, EXPIRATION_MS)
    assert table.verification_states == {PID: entry}
    table.remove_expired_producers(1000 + EXPIRATION_MS, EXPIRATION_MS)
    assert table.verification_states == {}


def test_a_version_1_marker_of_the_same_epoch_ends_the_verification():
    """UnifiedLog.updateProducers keeps a verification through a marker only when it supports the epoch bump
    (transaction version 2): a version 1 producer keeps its epoch across transactions, so the abort of its
    transaction ends the verification of a late first batch, which then cannot open a transaction no
    marker will end (INVALID_TXN_STATE with its guard)."""
    log = Log()
    guard = log.table.maybe_create_verification_state_entry(
        PID, 10, 3, now_ms=1000, supports_epoch_bump=False
    ).verification_guard
    log.marker(PID, 3, committed=False)
    assert log.table.verification_states == {}
    assert log.table.check(PID, 3, 10, 5, True, guard).error == ErrorCode.invalid_txn_state


def test_a_version_1_producer_new_here_is_accepted_at_any_sequence_while_verified():
    """ProducerAppendInfo.checkSequence asks a producer new to the partition for sequence 0 only when its
    verification supports the epoch bump: a version 1 producer's sequences go on across transactions, and
    its state here may have expired or gone with the log, so its batch at sequence 42 is accepted."""
    log = Log()
    guard = log.table.maybe_create_verification_state_entry(
        PID, 42, 0, now_ms=1000, supports_epoch_bump=False
    ).verification_guard
    assert log.table.check(PID, 0, 42, 3, True, guard).error == ErrorCode.none
