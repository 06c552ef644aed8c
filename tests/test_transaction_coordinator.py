"""The sans-IO transaction coordinator, after Kafka's TransactionCoordinatorTest, TransactionMetadataTest,
TransactionMarkerChannelManagerTest / TransactionMarkerRequestCompletionHandlerTest and TransactionLogTest.

A ``TxnContext`` stands in for the edge: it writes each ``LogAppend`` to an in-memory
``__transaction_state`` (or fails it with the error asked for) and hands the result back, as
TransactionService does with acks=all appends.
"""

from __future__ import annotations

import itertools

import pytest
from kio.schema.write_txn_markers.v1 import response as wtm

from epochkraft.broker import transaction_coordinator
from epochkraft.broker.group_coordinator import CommittedOffset, GroupCoordinator
from epochkraft.broker.producer_id_manager import GeneratedProducerId
from epochkraft.broker.transaction_coordinator import (
    LogAppend,
    Outcome,
    TransactionCoordinator,
    TransactionSettings,
)
from epochkraft.broker.transaction_log import (
    TransactionLogValue,
    TransactionState,
    key_bytes,
    parse_key,
    parse_value,
    transaction_partition,
    value_bytes,
)
from epochkraft.broker.transaction_markers import TOPIC_DELETED
from epochkraft.broker.transaction_metadata import (
    SHORT_MAX,
    IllegalTransition,
    TransactionMetadata,
)
from epochkraft.protocol.errors import ErrorCode

TXN = "txn-1"
TIMEOUT_MS = 60_000
NOW = 1_000_000
S = TransactionState


class TxnContext:
    """A coordinator leading every ``__transaction_state`` partition, its log in memory."""

    def __init__(self, first_producer_id: int = 1000, partitions: int = 50) -> None:
        ids = itertools.count(first_producer_id)
        self.coordinator = TransactionCoordinator(
            TransactionSettings(num_partitions=partitions),
            lambda: GeneratedProducerId(ErrorCode.none, next(ids)),
        )
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for p in range(partitions):
            self.coordinator.load_partition(p, 7, [])

    def write(self, outcome: Outcome, error: ErrorCode = ErrorCode.none) -> ErrorCode:
        """Writes the outcome's record (or fails it with ``error``): the error the client is answered."""
        if outcome.append is None:
            return outcome.error
        written = self.append(outcome.append, error)
        return outcome.error if written == ErrorCode.none else written

    def append(self, append: LogAppend, error: ErrorCode = ErrorCode.none) -> ErrorCode:
        if error == ErrorCode.none:
            self.log.setdefault(append.txn_log_partition, []).append((append.key, append.value))
        return self.coordinator.complete_append(append, error)

    def metadata(self, txn_id: str = TXN) -> TransactionMetadata:
        metadata = self.coordinator.describe(txn_id)
        assert metadata is not None
        return metadata

    def init(self, txn_id: str = TXN, expected: tuple[int, int] | None = None, now: int = NOW) -> Outcome:
        outcome = self.coordinator.init_producer_id(now, txn_id, TIMEOUT_MS, expected)
        assert self.write(outcome) == outcome.error
        return outcome

    def ongoing(self, txn_id: str = TXN, partitions=(("foo", 0), ("bar", 1)), now: int = NOW) -> Outcome:
        init = self.init(txn_id, now=now)
        add = self.coordinator.add_partitions(now, txn_id, init.producer_id, init.producer_epoch, partitions)
        assert self.write(add) == ErrorCode.none
        return init

    def end(self, init: Outcome, commit: bool, txn_id: str = TXN) -> ErrorCode:
        outcome = self.coordinator.end_txn(NOW, txn_id, init.producer_id, init.producer_epoch, commit)
        return self.write(outcome)

    def deliver_all_markers(self, error_by_partition=None) -> list:
        """Answers every WriteTxnMarkers due (all led by broker 1) with NONE or the errors given."""
        sent = self.coordinator.markers.requests(lambda tp: 1, set())
        for request in sent:
            self.coordinator.settle_markers(request, marker_response(request, error_by_partition or {}))
        return sent


def marker_response(sent, errors) -> wtm.WriteTxnMarkersResponse:
    return wtm.WriteTxnMarkersResponse(
        markers=tuple(
            wtm.WritableTxnMarkerResult(
                producer_id=m.producer_id,
                topics=tuple(
                    wtm.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=tuple(
                            wtm.WritableTxnMarkerPartitionResult(
                                partition_index=p, error_code=errors.get((t.name, p), ErrorCode.none)
                            )
                            for p in t.partition_indexes
                        ),
                    )
                    for t in m.topics
                ),
            )
            for m in sent.request.markers
        )
    )


# ---- TransactionLogTest ------------------------------------------------------------------------------
def test_should_read_write_messages():
    """TransactionLogTest.shouldReadWriteMessages: every state's record reads back as written."""
    for state in (S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_ABORT):
        partitions = frozenset() if state == S.EMPTY else frozenset({("foo", 0), ("foo", 3), ("bar", 1)})
        value = TransactionLogValue(1234, 5, 30_000, state, partitions, NOW + 1, NOW)
        assert parse_value(value_bytes(value)) == value
    assert parse_key(key_bytes("my-txn")) == "my-txn"
    assert parse_value(None) is None


def test_transaction_log_key_is_kafka_bytes():
    """Kafka's TransactionLogKey v0 bytes: int16 version, int16 length, the id."""
    assert key_bytes("ab") == b"\x00\x00\x00\x02ab"


def test_partition_for_transactional_id_is_java_hash():
    """Utils.abs("txn-1".hashCode) % 50, as Kafka's TransactionStateManager.partitionFor."""
    h = 0
    for ch in "txn-1":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    assert transaction_partition("txn-1", 50) == abs(h) % 50


# ---- InitProducerId --------------------------------------------------------------------------------
def test_should_return_invalid_request_when_transactional_id_is_empty():
    """TransactionCoordinatorTest.shouldReturnInvalidRequestWhenTransactionalIdIsEmpty."""
    assert TxnContext().coordinator.init_producer_id(NOW, "", TIMEOUT_MS).error == ErrorCode.invalid_request


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001])
def test_should_respond_with_invalid_transaction_timeout(timeout_ms):
    """TransactionCoordinatorTest.shouldRespondWithInvalidTransactionTimeout...: transaction.timeout.ms
    above transaction.max.timeout.ms (15 minutes) or not positive."""
    outcome = TxnContext().coordinator.init_producer_id(NOW, TXN, timeout_ms)
    assert outcome.error == ErrorCode.invalid_transaction_timeout


def test_should_init_pid_with_epoch_zero_for_new_transactional_id():
    """TransactionCoordinatorTest.shouldInitPidWithEpochZeroForNewTransactionalId: the Empty record with
    epoch 0 is written before the answer."""
    ctx = TxnContext()
    outcome = ctx.init()
    assert (outcome.error, outcome.producer_id, outcome.producer_epoch) == (ErrorCode.none, 1000, 0)
    ((key, value),) = ctx.log[transaction_partition(TXN, 50)]
    logged = parse_value(value)
    assert parse_key(key) == TXN and logged is not None
    assert (logged.producer_id, logged.producer_epoch, logged.state) == (1000, 0, S.EMPTY)


def test_should_respond_with_not_coordinator_on_init_pid_when_not_coordinator():
    """TransactionCoordinatorTest.shouldRespondWithNotCoordinatorOnInitPidWhenNotCoordinator."""
    ctx = TxnContext()
    ctx.coordinator.unload_partition(ctx.coordinator.partition_for(TXN))
    assert ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS).error == ErrorCode.not_coordinator


def test_should_respond_with_coordinator_load_in_progress_on_init_pid_when_coordinator_loading():
    """TransactionCoordinatorTest.shouldRespondWithCoordinatorLoadInProgressOnInitPidWhenCoordintorLoading."""
    ctx = TxnContext()
    ctx.coordinator.begin_loading(ctx.coordinator.partition_for(TXN))
    assert (
        ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS).error == ErrorCode.coordinator_load_in_progress
    )


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_should_increment_epoch_and_update_metadata_on_handle_init_pid_when_existing(state):
    """TransactionCoordinatorTest.shouldIncrementEpochAndUpdateMetadataOnHandleInitPidWhenExisting
    {Empty,Complete,CompleteAbort}Transaction."""
    ctx = TxnContext()
    first = ctx.init()
    ctx.metadata().state = state
    second = ctx.init()
    assert (second.error, second.producer_id, second.producer_epoch) == (ErrorCode.none, first.producer_id, 1)
    assert ctx.metadata().state == S.EMPTY


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_should_wait_for_commit_to_complete_on_handle_init_pid_and_existing_transaction_in_prepare_state(
    state,
):
    """TransactionCoordinatorTest.shouldWaitForCommitToCompleteOnHandleInitPidAndExistingTransactionIn
    Prepare{Commit,Abort}State."""
    ctx = TxnContext()
    ctx.init()
    ctx.metadata().state = state
    assert ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS).error == ErrorCode.concurrent_transactions


def test_should_abort_transaction_on_handle_init_pid_when_existing_transaction_in_ongoing_state():
    """TransactionCoordinatorTest.shouldAbortTransactionOnHandleInitPidWhenExistingTransactionInOngoingState:
    the zombie's transaction is aborted with a bumped epoch (its markers fence it) and the new producer is
    told CONCURRENT_TRANSACTIONS; its retry, once the abort completes, bumps the epoch again."""
    ctx = TxnContext()
    zombie = ctx.ongoing()
    fence = ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS)
    assert fence.error == ErrorCode.concurrent_transactions
    assert fence.append is not None and fence.append.transit.state == S.PREPARE_ABORT
    assert fence.append.transit.producer_epoch == zombie.producer_epoch + 1
    assert ctx.write(fence) == ErrorCode.concurrent_transactions
    sent = ctx.deliver_all_markers()
    marker = sent[0].request.markers[0]
    assert (marker.producer_epoch, marker.transaction_result) == (zombie.producer_epoch + 1, False)
    for append in ctx.coordinator.due_appends(NOW):
        ctx.append(append)
    assert ctx.metadata().state == S.COMPLETE_ABORT
    retry = ctx.init()
    assert (retry.error, retry.producer_epoch) == (ErrorCode.none, zombie.producer_epoch + 2)
    # the zombie is fenced wherever it goes next
    add = ctx.coordinator.add_partitions(NOW, TXN, zombie.producer_id, zombie.producer_epoch, [("foo", 0)])
    assert add.error == ErrorCode.producer_fenced


def test_unsafe_skip_fencing_abort_is_caught(monkeypatch):
    """The test above fails with the fencing abort skipped (UNSAFE_SKIP_FENCING_ABORT_FOR_TESTS): the new
    producer gets its epoch at once and the zombie's transaction is never aborted (no marker, its
    partitions' last stable offset stuck)."""
    monkeypatch.setattr(transaction_coordinator, "UNSAFE_SKIP_FENCING_ABORT_FOR_TESTS", True)
    with pytest.raises(AssertionError):
        test_should_abort_transaction_on_handle_init_pid_when_existing_transaction_in_ongoing_state()


def test_should_not_repeatedly_bump_epoch_due_to_init_pid_during_ongoing_txn_if_append_to_log_fails():
    """TransactionCoordinatorTest.shouldNotRepeatedlyBumpEpochDueToInitPidDuringOngoingTxnIfAppendToLogFails."""
    ctx = TxnContext()
    zombie = ctx.ongoing()
    fence = ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS)
    assert ctx.write(fence, ErrorCode.not_enough_replicas) == ErrorCode.coordinator_not_available
    assert (ctx.metadata().state, ctx.metadata().producer_epoch) == (S.ONGOING, zombie.producer_epoch)
    again = ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS)
    assert again.append is not None and again.append.transit.producer_epoch == zombie.producer_epoch + 1


def test_should_generate_new_producer_id_if_epochs_exhausted():
    """TransactionCoordinatorTest.shouldGenerateNewProducerIdIfEpochsExhausted."""
    ctx = TxnContext()
    first = ctx.init()
    ctx.metadata().producer_epoch = SHORT_MAX - 1
    rotated = ctx.init()
    assert (rotated.producer_id, rotated.producer_epoch) == (first.producer_id + 1, 0)
    assert ctx.metadata().previous_producer_id == first.producer_id


def test_init_producer_id_with_current_epoch_provided():
    """TransactionCoordinatorTest.testInitProducerIdWithCurrentEpochProvided (KIP-360): the producer's
    own id and epoch bump the epoch, the last epoch kept for a retry."""
    ctx = TxnContext()
    first = ctx.init()
    bumped = ctx.init(expected=(first.producer_id, first.producer_epoch))
    assert (bumped.error, bumped.producer_epoch) == (ErrorCode.none, first.producer_epoch + 1)
    assert ctx.metadata().last_producer_epoch == first.producer_epoch
    # TransactionMetadataTest.testAttemptedEpochBumpWithLastEpoch: a retry answers the same epoch
    retry = ctx.init(expected=(first.producer_id, first.producer_epoch))
    assert (retry.error, retry.producer_epoch) == (ErrorCode.none, first.producer_epoch + 1)


def test_init_producer_id_stale_current_epoch_provided():
    """TransactionCoordinatorTest.testInitProducerIdStaleCurrentEpochProvided: PRODUCER_FENCED."""
    ctx = TxnContext()
    first = ctx.init()
    ctx.init()
    ctx.init()
    stale = ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS, (first.producer_id, first.producer_epoch))
    assert stale.error == ErrorCode.producer_fenced


def test_fence_producer_when_mapping_exists_with_different_producer_id():
    """TransactionCoordinatorTest.testFenceProducerWhenMappingExistsWithDifferentProducerId."""
    ctx = TxnContext()
    first = ctx.init()
    other = ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS, (first.producer_id + 10, 0))
    assert other.error == ErrorCode.producer_fenced


def test_retry_init_producer_id_after_producer_id_rotation():
    """TransactionCoordinatorTest.testRetryInitProducerIdAfterProducerIdRotation: the previous id at an
    exhausted epoch is a retry whose answer was lost, not a zombie."""
    ctx = TxnContext()
    first = ctx.init()
    ctx.metadata().producer_epoch = SHORT_MAX - 1
    rotated = ctx.init(expected=(first.producer_id, SHORT_MAX - 1))
    assert (rotated.error, rotated.producer_id, rotated.producer_epoch) == (
        ErrorCode.none,
        first.producer_id + 1,
        0,
    )
    retry = ctx.init(expected=(first.producer_id, SHORT_MAX - 1))
    assert (retry.error, retry.producer_id) == (ErrorCode.none, rotated.producer_id)


# ---- AddPartitionsToTxn ------------------------------------------------------------------------------
def test_should_respond_with_invalid_pid_mapping_on_add_partitions_when_transactional_id_not_present():
    """TransactionCoordinatorTest.shouldRespondWithInvalidPidMappingOnAddPartitionsToTransactionWhen
    TransactionalIdNotPresent."""
    outcome = TxnContext().coordinator.add_partitions(NOW, TXN, 0, 0, [("foo", 0)])
    assert outcome.error == ErrorCode.invalid_producer_id_mapping


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_should_respond_with_concurrent_transactions_on_add_partitions_when_state_is_prepare(state):
    """TransactionCoordinatorTest.shouldRespondWithConcurrentTransactionsOnAddPartitionsWhenStateIs
    Prepare{Commit,Abort}."""
    ctx = TxnContext()
    init = ctx.init()
    ctx.metadata().state = state
    outcome = ctx.coordinator.add_partitions(NOW, TXN, init.producer_id, init.producer_epoch, [("foo", 0)])
    assert outcome.error == ErrorCode.concurrent_transactions


def test_should_respond_with_producer_fenced_on_add_partitions_when_epochs_are_different():
    """TransactionCoordinatorTest.shouldRespondWithProducerFencedOnAddPartitionsWhenEpochsAreDifferent."""
    ctx = TxnContext()
    init = ctx.init()
    outcome = ctx.coordinator.add_partitions(
        NOW, TXN, init.producer_id, init.producer_epoch + 1, [("foo", 0)]
    )
    assert outcome.error == ErrorCode.producer_fenced


def test_should_append_new_metadata_to_log_on_add_partitions_when_partitions_added():
    """TransactionCoordinatorTest.shouldAppendNewMetadataToLogOnAddPartitionsWhenPartitionsAdded, and
    shouldRespondWithErrorsNoneOnAddPartitionWhenNoErrorsAndPartitionsTheSame (nothing written)."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("foo", 0)])
    assert ctx.metadata().state == S.ONGOING and ctx.metadata().txn_start_timestamp_ms == NOW
    same = ctx.coordinator.add_partitions(NOW + 5, TXN, init.producer_id, init.producer_epoch, [("foo", 0)])
    assert same == Outcome(ErrorCode.none)
    more = ctx.coordinator.add_partitions(NOW + 5, TXN, init.producer_id, init.producer_epoch, [("bar", 2)])
    assert ctx.write(more) == ErrorCode.none
    assert ctx.metadata().partitions == {("foo", 0), ("bar", 2)}
    assert ctx.metadata().txn_start_timestamp_ms == NOW  # the transaction's start, not the last add


def test_should_respond_with_concurrent_transactions_while_append_pending():
    """A second request while the first one's record is being written: CONCURRENT_TRANSACTIONS (Kafka's
    pendingTransitionInProgress)."""
    ctx = TxnContext()
    init = ctx.init()
    pending = ctx.coordinator.add_partitions(NOW, TXN, init.producer_id, init.producer_epoch, [("foo", 0)])
    assert pending.append is not None
    second = ctx.coordinator.add_partitions(NOW, TXN, init.producer_id, init.producer_epoch, [("bar", 0)])
    assert second.error == ErrorCode.concurrent_transactions
    assert ctx.write(pending) == ErrorCode.none


def test_verify_only_answers_partitions_in_the_ongoing_transaction():
    """AddPartitionsToTxn v4+ verification (KIP-890 part 1): NONE for a partition added,
    TRANSACTION_ABORTABLE for one the transaction does not hold (Kafka's handleVerifyPartitionsInTransaction),
    PRODUCER_FENCED for another epoch."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("foo", 0)])
    verified = ctx.coordinator.verify_partitions(
        TXN, init.producer_id, init.producer_epoch, [("foo", 0), ("foo", 1)]
    )
    assert verified == {("foo", 0): ErrorCode.none, ("foo", 1): ErrorCode.transaction_abortable}
    fenced = ctx.coordinator.verify_partitions(TXN, init.producer_id, init.producer_epoch - 1, [("foo", 0)])
    assert fenced == {("foo", 0): ErrorCode.producer_fenced}


def test_verify_only_does_not_wait_for_a_pending_add_partitions():
    """Kafka's handleVerifyPartitionsInTransaction checks no pending state: a TxnOffsetCommit verified while
    the producer's next AddPartitionsToTxn is being written finds the offsets partition AddOffsetsToTxn
    added (once refused INVALID_TXN_STATE, fatal to librdkafka); a prepared transaction answers
    CONCURRENT_TRANSACTIONS."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("__consumer_offsets", 3)])
    pending = ctx.coordinator.add_partitions(NOW, TXN, init.producer_id, init.producer_epoch, [("out", 0)])
    assert pending.append is not None and ctx.metadata().pending_transition_in_progress
    verified = ctx.coordinator.verify_partitions(
        TXN, init.producer_id, init.producer_epoch, [("__consumer_offsets", 3), ("out", 0)]
    )
    assert verified == {
        ("__consumer_offsets", 3): ErrorCode.none,
        ("out", 0): ErrorCode.transaction_abortable,
    }
    assert ctx.write(pending) == ErrorCode.none
    assert ctx.write(ctx.coordinator.end_txn(NOW, TXN, init.producer_id, init.producer_epoch, True)) == 0
    prepared = ctx.coordinator.verify_partitions(TXN, init.producer_id, init.producer_epoch, [("out", 0)])
    assert prepared == {("out", 0): ErrorCode.concurrent_transactions}


# ---- EndTxn --------------------------------------------------------------------------------------------
def test_should_reply_with_invalid_pid_mapping_on_end_txn_when_pid_dosent_match_mapped():
    """TransactionCoordinatorTest.shouldReplyWithInvalidPidMappingOnEndTxnWhen{TxnIdDoesntExist,
    PidDosentMatchMapped}."""
    ctx = TxnContext()
    assert ctx.coordinator.end_txn(NOW, TXN, 1, 0, True).error == ErrorCode.invalid_producer_id_mapping
    init = ctx.ongoing()
    outcome = ctx.coordinator.end_txn(NOW, TXN, init.producer_id + 1, init.producer_epoch, True)
    assert outcome.error == ErrorCode.invalid_producer_id_mapping


@pytest.mark.parametrize("delta", [1, -1])
def test_should_reply_with_producer_fenced_on_end_txn_when_epoch_is_not_same_as_transaction(delta):
    """TransactionCoordinatorTest.shouldReplyWithProducerFencedOnEndTxnWhenEpochIsNotSameAsTransaction."""
    ctx = TxnContext()
    init = ctx.ongoing()
    outcome = ctx.coordinator.end_txn(NOW, TXN, init.producer_id, init.producer_epoch + delta, True)
    assert outcome.error == ErrorCode.producer_fenced


@pytest.mark.parametrize(
    ("state", "commit", "error"),
    [
        (
            S.COMPLETE_COMMIT,
            True,
            ErrorCode.none,
        ),  # shouldReturnOkOnEndTxnWhenStatusIsCompleteCommitAndResultIsCommit
        (S.COMPLETE_ABORT, False, ErrorCode.none),  # ...CompleteAbortAndResultIsAbort
        (
            S.COMPLETE_ABORT,
            True,
            ErrorCode.invalid_txn_state,
        ),  # shouldReturnInvalidTxnRequestOnEndTxnRequest...
        (S.COMPLETE_COMMIT, False, ErrorCode.invalid_txn_state),
        (S.PREPARE_COMMIT, True, ErrorCode.concurrent_transactions),  # shouldReturnConcurrentTxnRequest...
        (S.PREPARE_ABORT, True, ErrorCode.invalid_txn_state),
        (S.EMPTY, True, ErrorCode.invalid_txn_state),
    ],
)
def test_end_txn_by_state(state, commit, error):
    """TransactionCoordinatorTest's EndTxn answers by state (the cases named beside each row)."""
    ctx = TxnContext()
    init = ctx.init()
    ctx.metadata().state = state
    outcome = ctx.coordinator.end_txn(NOW, TXN, init.producer_id, init.producer_epoch, commit)
    assert (outcome.error, outcome.append) == (error, None)


@pytest.mark.parametrize("commit", [True, False])
def test_should_append_prepare_to_log_on_end_txn_when_status_is_ongoing(commit):
    """TransactionCoordinatorTest.shouldAppendPrepare{Commit,Abort}ToLogOnEndTxnWhenStatusIsOngoingAnd
    ResultIs{Commit,Abort}, then TransactionMarkerChannelManagerTest.shouldCompleteAppendToLogOnEndTxn
    WhenSendMarkersSucceed: a marker per partition, one WriteTxnMarkers per leader, then Complete*."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("foo", 0), ("foo", 1), ("bar", 0)])
    assert ctx.end(init, commit) == ErrorCode.none
    assert ctx.metadata().state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    leaders = {("foo", 0): 1, ("foo", 1): 2, ("bar", 0): 1}
    sent = ctx.coordinator.markers.requests(leaders.get, set())
    assert sorted(r.broker_id for r in sent) == [1, 2]
    by_broker = {r.broker_id: r.request.markers for r in sent}
    (marker,) = by_broker[1]
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result) == (
        init.producer_id,
        init.producer_epoch,
        commit,
    )
    assert marker.coordinator_epoch == 7
    assert {(t.name, tuple(t.partition_indexes)) for t in marker.topics} == {("foo", (0,)), ("bar", (0,))}
    assert ctx.coordinator.markers.requests(leaders.get, set()) == []  # in flight: not sent twice
    for request in sent:
        ctx.coordinator.settle_markers(request, marker_response(request, {}))
    (complete,) = ctx.coordinator.due_appends(NOW + 1)
    assert complete.transit.state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    assert ctx.append(complete) == ErrorCode.none
    assert ctx.metadata().partitions == set()
    assert ctx.end(init, commit) == ErrorCode.none  # a retried EndTxn


def test_should_retry_partition_when_not_leader_or_follower_error():
    """TransactionMarkerRequestCompletionHandlerTest.shouldRetryPartitionWhenNotLeaderOrFollowerError and
    shouldReEnqueuePartitionsWhenBrokerDisconnected: nothing completes until every marker is written."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("foo", 0), ("foo", 1)])
    ctx.end(init, True)
    ctx.deliver_all_markers({("foo", 1): ErrorCode.not_leader_or_follower})
    assert ctx.coordinator.due_appends(NOW) == []
    (again,) = ctx.coordinator.markers.requests(lambda tp: 1, set())
    assert [tuple(t.partition_indexes) for t in again.request.markers[0].topics] == [(1,)]
    ctx.coordinator.settle_markers(again, None)  # the connection failed
    assert ctx.coordinator.due_appends(NOW) == []
    ctx.deliver_all_markers()
    assert [a.transit.state for a in ctx.coordinator.due_appends(NOW)] == [S.COMPLETE_COMMIT]


def test_should_abandon_sending_when_producer_epoch_changed():
    """TransactionMarkerRequestCompletionHandlerTest: INVALID_PRODUCER_EPOCH (or
    TRANSACTION_COORDINATOR_FENCED) means a newer epoch or coordinator has taken over: stop sending."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("foo", 0)])
    ctx.end(init, True)
    ctx.deliver_all_markers({("foo", 0): ErrorCode.transaction_coordinator_fenced})
    assert ctx.coordinator.markers.pending == {}
    assert ctx.coordinator.due_appends(NOW) == []


def test_should_skip_send_markers_when_leader_not_found():
    """TransactionMarkerChannelManagerTest.shouldSkipSendMarkersWhenLeaderNotFound (a deleted topic needs
    no marker) and shouldSaveForLaterWhenLeaderUnknownButNotAvailable (an unknown leader waits)."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("gone", 0), ("foo", 0)])
    ctx.end(init, False)
    leaders = {("gone", 0): TOPIC_DELETED, ("foo", 0): None}
    assert ctx.coordinator.markers.requests(leaders.get, set()) == []
    assert ctx.coordinator.markers.pending[TXN].remaining == {("foo", 0)}
    leaders[("foo", 0)] = 3
    (sent,) = ctx.coordinator.markers.requests(leaders.get, set())
    assert sent.broker_id == 3


def test_empty_transaction_completes_without_markers():
    """A transaction whose partitions all went away completes without a WriteTxnMarkers."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("gone", 0)])
    ctx.end(init, True)
    assert ctx.coordinator.markers.requests(lambda tp: TOPIC_DELETED, set()) == []
    assert [a.transit.state for a in ctx.coordinator.due_appends(NOW)] == [S.COMPLETE_COMMIT]


# ---- timeouts -------------------------------------------------------------------------------------------
def test_should_abort_expired_transactions_in_ongoing_state_and_bump_epoch():
    """TransactionCoordinatorTest.shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch."""
    ctx = TxnContext()
    init = ctx.ongoing()
    assert ctx.coordinator.abort_timed_out(NOW + TIMEOUT_MS) == []
    (abort,) = ctx.coordinator.abort_timed_out(NOW + TIMEOUT_MS + 1)
    assert (abort.transit.state, abort.transit.producer_epoch) == (S.PREPARE_ABORT, init.producer_epoch + 1)
    # shouldNotAbortExpiredTransactionsThatHaveAPendingStateTransition
    assert ctx.coordinator.abort_timed_out(NOW + TIMEOUT_MS + 2) == []
    assert ctx.append(abort) == ErrorCode.none
    outcome = ctx.coordinator.end_txn(NOW, TXN, init.producer_id, init.producer_epoch, True)
    assert outcome.error == ErrorCode.producer_fenced  # the producer that let it expire


def test_should_use_last_epoch_to_fence_when_epochs_are_exhausted():
    """TransactionCoordinatorTest.shouldUseLastEpochToFenceWhenEpochsAreExhausted: an InitProducerId that
    finds a transaction open at Short.MAX - 1 (transaction version 0) writes PrepareAbort at Short.MAX with no
    last epoch; once it completes, the retried InitProducerId takes a new producer id at epoch 0."""
    ctx = TxnContext()
    init = ctx.init()
    ctx.metadata().producer_epoch = SHORT_MAX - 1
    add = ctx.coordinator.add_partitions(NOW, TXN, init.producer_id, SHORT_MAX - 1, [("foo", 0)])
    assert ctx.write(add) == ErrorCode.none
    fence = ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS)
    assert fence.error == ErrorCode.concurrent_transactions and fence.append is not None
    transit = fence.append.transit
    assert (transit.state, transit.producer_id, transit.producer_epoch, transit.last_producer_epoch) == (
        S.PREPARE_ABORT,
        init.producer_id,
        SHORT_MAX,
        -1,
    )
    assert ctx.write(fence) == ErrorCode.concurrent_transactions
    ctx.deliver_all_markers()
    for append in ctx.coordinator.due_appends(NOW):
        assert ctx.append(append) == ErrorCode.none
    retried = ctx.init()
    assert (retried.producer_id, retried.producer_epoch) == (init.producer_id + 1, 0)


def test_should_not_bump_epoch_when_aborting_expired_transaction_if_append_to_log_fails():
    """TransactionCoordinatorTest.shouldNotBumpEpochWhenAbortingExpiredTransactionIfAppendToLogFails."""
    ctx = TxnContext()
    init = ctx.ongoing()
    (abort,) = ctx.coordinator.abort_timed_out(NOW + TIMEOUT_MS + 1)
    assert ctx.append(abort, ErrorCode.not_leader_or_follower) == ErrorCode.not_coordinator
    assert (ctx.metadata().state, ctx.metadata().producer_epoch) == (S.ONGOING, init.producer_epoch)


def test_remove_expired_transactional_ids():
    """TransactionStateManagerTest.shouldRemoveCompleteCommitExpiredTransactionalIds / ...Ongoing (kept):
    an idle id past transactional.id.expiration.ms gets a tombstone and is forgotten once it is written;
    one with a transaction in progress is kept."""
    ctx = TxnContext()
    ctx.init("idle")
    ctx.ongoing("busy")
    expiration_ms = 1000
    assert ctx.coordinator.expire_transactional_ids(NOW + expiration_ms - 1, expiration_ms) == []
    (dead,) = ctx.coordinator.expire_transactional_ids(NOW + expiration_ms, expiration_ms)
    assert (dead.transactional_id, dead.value) == ("idle", None)
    assert ctx.append(dead) == ErrorCode.none
    assert ctx.coordinator.describe("idle") is None and ctx.coordinator.describe("busy") is not None
    again = ctx.init("idle")  # a new producer id: the old mapping is gone
    assert (again.error, again.producer_epoch) == (ErrorCode.none, 0)


# ---- loading and unloading --------------------------------------------------------------------------------
def test_load_partition_replays_last_state_and_resends_markers():
    """TransactionStateManagerTest.testLoadAndRemoveTransactionsForPartition: a new coordinator takes the
    last record of each id, forgets tombstoned ids, and sends the markers of a transaction left prepared,
    with its own coordinator epoch."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("foo", 0)])
    ctx.end(init, True)
    partition = ctx.coordinator.partition_for(TXN)
    records = list(ctx.log[partition])
    fresh = TxnContext()
    fresh.coordinator.load_partition(partition, 9, records)
    loaded = fresh.metadata()
    assert (loaded.state, loaded.producer_id, loaded.partitions) == (
        S.PREPARE_COMMIT,
        init.producer_id,
        {("foo", 0)},
    )
    (sent,) = fresh.coordinator.markers.requests(lambda tp: 1, set())
    assert sent.request.markers[0].coordinator_epoch == 9
    fresh.coordinator.load_partition(partition, 10, [*records, (key_bytes(TXN), None)])
    assert fresh.coordinator.describe(TXN) is None


def test_should_remove_transactions_for_partition_on_emigration():
    """TransactionCoordinatorTest.shouldRemoveTransactionsForPartitionOnEmigration: state, markers and
    writes in flight of the partition are dropped; a write that completes afterwards is NOT_COORDINATOR."""
    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("foo", 0)])
    end = ctx.coordinator.end_txn(NOW, TXN, init.producer_id, init.producer_epoch, True)
    ctx.coordinator.unload_partition(ctx.coordinator.partition_for(TXN))
    assert ctx.coordinator.describe(TXN) is None
    assert (
        end.append is not None
        and ctx.coordinator.complete_append(end.append, ErrorCode.none) == ErrorCode.not_coordinator
    )


# ---- TransactionMetadataTest ------------------------------------------------------------------------------
def _metadata(epoch: int, state: S = S.EMPTY, last_epoch: int = -1) -> TransactionMetadata:
    return TransactionMetadata(TXN, 1, -1, epoch, last_epoch, TIMEOUT_MS, state, set(), -1, NOW)


def test_initialize_epoch():
    """TransactionMetadataTest.testInitializeEpoch."""
    transit = _metadata(-1).prepare_increment_producer_epoch(30_000, None, NOW)
    assert transit is not None and (transit.producer_epoch, transit.last_producer_epoch) == (0, -1)


def test_normal_epoch_bump():
    """TransactionMetadataTest.testNormalEpochBump."""
    metadata = _metadata(735)
    transit = metadata.prepare_increment_producer_epoch(30_000, None, NOW)
    assert transit is not None
    metadata.complete_transition(transit)
    assert (metadata.producer_epoch, metadata.last_producer_epoch, metadata.txn_timeout_ms) == (
        736,
        -1,
        30_000,
    )


def test_bump_epoch_not_allowed_if_epochs_exhausted():
    """TransactionMetadataTest.testBumpEpochNotAllowedIfEpochsExhausted."""
    with pytest.raises(IllegalTransition):
        _metadata(SHORT_MAX - 1).prepare_increment_producer_epoch(30_000, None, NOW)


def test_fence_producer_after_epochs_exhausted():
    """TransactionMetadataTest.testFenceProducerAfterEpochsExhausted: fencing at the last usable epoch takes
    the last epoch, Short.MAX, kept for fencing; and testFenceProducerNotAllowedIfItWouldOverflow."""
    transit = _metadata(SHORT_MAX - 1, S.ONGOING).prepare_fence_producer_epoch(NOW)
    assert (transit.producer_epoch, transit.last_producer_epoch) == (SHORT_MAX, -1)
    with pytest.raises(IllegalTransition):
        _metadata(SHORT_MAX, S.ONGOING).prepare_fence_producer_epoch(NOW)


def test_attempted_epoch_bump_with_stale_epoch():
    """TransactionMetadataTest.testAttemptedEpochBumpWithStaleEpoch: neither the current nor the last
    epoch: fenced (None)."""
    assert _metadata(10, last_epoch=9).prepare_increment_producer_epoch(30_000, 3, NOW) is None


def test_rotate_producer_id():
    """TransactionMetadataTest.testRotateProducerId."""
    metadata = _metadata(SHORT_MAX - 1, S.COMPLETE_COMMIT)
    transit = metadata.prepare_producer_id_rotation(99, 30_000, NOW, record_last_epoch=True)
    metadata.complete_transition(transit)
    assert (metadata.producer_id, metadata.producer_epoch, metadata.previous_producer_id) == (99, 0, 1)
    assert metadata.last_producer_epoch == SHORT_MAX - 1


def test_invalid_transitions_are_refused():
    """TransactionMetadataTest.shouldFailToTransitionTo...: PrepareCommit only from Ongoing."""
    with pytest.raises(IllegalTransition):
        _metadata(0, S.EMPTY).prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)


# ---- the group coordinator's transactional offsets --------------------------------------------------------
def test_commit_and_abort_transactional_offsets():
    """GroupCoordinatorTest.testFetchPendingTxnOffsetsWithCommit / testFetchTxnOffsetsWithAbort: pending
    offsets are invisible (and unstable) until the marker, committed or dropped by it."""
    groups = GroupCoordinator()
    offset = CommittedOffset(42, -1, None, NOW)
    groups.add_pending_txn_offsets(3, 1000, "g", {("foo", 0): offset})
    groups.add_pending_txn_offsets(3, 2000, "g", {("foo", 1): offset})
    assert groups.committed_offsets("g") == {}
    assert groups.has_pending_txn_offsets("g", "foo", 0)
    groups.complete_transactional_offsets(3, 1000, 0, committed=True)
    groups.complete_transactional_offsets(3, 2000, 0, committed=False)
    assert groups.committed_offsets("g") == {("foo", 0): offset}
    assert not groups.has_pending_txn_offsets("g", "foo", 0)
    assert not groups.has_pending_txn_offsets("g", "foo", 1)


def test_write_txn_markers_request_is_a_valid_v2_frame():
    """What the marker sender puts on the wire decodes, as a partition leader's listener reads it, to
    Kafka's WriteTxnMarkers v2: the producer id and epoch, the result, the coordinator epoch, the
    partitions the leader holds and the transaction's version (0 for a client's AddPartitionsToTxn)."""
    from epochkraft.protocol.framing import (
        decode_request_body,
        encode_entity,
        encode_request,
        parse_request_header,
    )

    ctx = TxnContext()
    init = ctx.ongoing(partitions=[("foo", 0), ("foo", 2)])
    ctx.end(init, False)
    (sent,) = ctx.coordinator.markers.requests(lambda tp: 4, set())
    request = sent.request
    wire = encode_request(27, int(request.__version__), 11, "txn-marker-sender-1", encode_entity(request))
    header = parse_request_header(wire[4:])
    assert (header.api_key, header.api_version) == (27, 2)
    decoded = decode_request_body(header, wire[4:])
    (marker,) = decoded.markers
    assert (marker.producer_id, marker.producer_epoch) == (init.producer_id, init.producer_epoch)
    assert marker.transaction_result is False and marker.coordinator_epoch == 7
    assert marker.transaction_version == 0
    assert [(t.name, tuple(t.partition_indexes)) for t in marker.topics] == [("foo", (0, 2))]


def test_txn_offset_commit_batches_continue_the_producers_sequence():
    """The group coordinator's transactional offset batches carry the producer's next sequence on the
    offsets partition, so the leader's checks take the second commit of a transaction as new, not as a
    duplicate or out of order (a batch without a sequence is INVALID_RECORD from a producer id)."""
    from epochkraft.broker.producer_state import ProducerStateTable

    table = ProducerStateTable()
    assert table.next_sequence(1000, 0) == 0
    table.record(1000, 0, 0, 2, 10, 11, NOW)
    assert table.next_sequence(1000, 0) == 2
    assert table.check(1000, 0, 2, 1).error == ErrorCode.none
    assert table.check(1000, 0, 2, 1).duplicate_of is None
    assert table.next_sequence(1000, 1) == 0  # a new epoch starts over


def test_a_stale_marker_answer_settles_nothing_of_a_later_transaction():
    # As TransactionMarkerRequestCompletionHandler, which drops an answer of another coordinator epoch: a
    # slow broker's answer to the markers of a transaction the coordinator has since reloaded must not
    # settle the same partition of the transaction's markers queued again (its Complete* would be written
    # with foo-0's marker never retried, the last stable offset stuck there).
    from epochkraft.broker.transaction_markers import PendingMarkers, TransactionMarkerQueue

    queue = TransactionMarkerQueue()
    queue.add(PendingMarkers("x", 7, 0, True, 0, 0, {("foo", 0)}))
    (slow,) = queue.requests(lambda tp: 1, busy=set())
    queue.remove_txn_log_partition(0)  # the partition reloaded: the transaction's markers queued again
    again = PendingMarkers("x", 7, 0, True, 1, 0, {("foo", 0), ("bar", 0)})
    queue.add(again)
    leaders = {("foo", 0): 2, ("bar", 0): 3}
    to_foo, to_bar = sorted(queue.requests(leaders.get, busy={1}), key=lambda r: r.broker_id)

    assert queue.handle_response(slow, marker_response(slow, {})).completed == []
    assert again.in_flight == {("foo", 0), ("bar", 0)}
    assert queue.handle_response(to_bar, marker_response(to_bar, {})).completed == []
    not_leader = {("foo", 0): ErrorCode.not_leader_or_follower}
    assert queue.handle_response(to_foo, marker_response(to_foo, not_leader)).completed == []
    assert again.remaining == {("foo", 0)}  # retried with the next requests
