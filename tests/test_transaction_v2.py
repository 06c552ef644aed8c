"""Transaction version 2 (KIP-890 part 2): an epoch bump per transaction, partitions added by the
partition leaders, the transaction.version feature.

Kafka's cases by name: TransactionCoordinatorTest's EndTxn V2 cases and the table of its endTransaction
(Empty / CompleteAbort / CompleteCommit against a retry or the current epoch), TransactionMetadataTest's
epoch bump cases, TransactionLogTest's flexible value, and AddPartitionsToTxnManager's error translation.
"""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import pytest

from epochkraft.broker import transaction_coordinator, transaction_service
from epochkraft.broker.partition import Role
from epochkraft.broker.producer_state import (
    SENTINEL_GUARD,
    EndTxnMarker,
    ProducerStateTable,
    VerificationGuard,
)
from epochkraft.broker.transaction_coordinator import Outcome
from epochkraft.broker.transaction_log import TransactionLogValue, parse_value, value_bytes
from epochkraft.broker.transaction_metadata import SHORT_MAX, IllegalTransition, TransactionMetadata
from epochkraft.controller.feature_control import (
    SUPPORTED_FEATURES,
    FeatureUpdate,
    UpgradeType,
    decide_update_features,
)
from epochkraft.metadata.image import TRANSACTION_VERSION, MetadataImage
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import build_batch
from tests.test_transaction_coordinator import NOW, TIMEOUT_MS, TXN, S, TxnContext

TV2 = 2
PARTITIONS = (("foo", 0), ("bar", 1))


class TxnV2Context(TxnContext):
    """The coordinator as a transaction version 2 producer drives it: the partition leaders add the
    partitions (AddPartitionsToTxn v5), the producer sends EndTxn v5."""

    def begin(self, producer: tuple[int, int], partitions=PARTITIONS) -> None:
        add = self.coordinator.add_partitions(NOW, TXN, *producer, partitions, TV2)
        assert self.write(add) == ErrorCode.none

    def end_v2(self, producer: tuple[int, int], commit: bool) -> Outcome:
        outcome = self.coordinator.end_txn(NOW, TXN, *producer, commit, TV2)
        assert self.write(outcome) == outcome.error
        return outcome

    def complete(self) -> list:
        """Delivers the markers and writes Complete*; the marker requests sent."""
        sent = self.deliver_all_markers()
        for append in self.coordinator.due_appends(NOW):
            assert self.append(append) == ErrorCode.none
        return sent


def _producer(outcome: Outcome) -> tuple[int, int]:
    return outcome.producer_id, outcome.producer_epoch


@pytest.mark.parametrize("commit", [True, False])
def test_should_append_prepare_to_log_on_end_txn_v2_and_bump_the_epoch(commit):
    """TransactionCoordinatorTest.shouldAppendPrepare{Commit,Abort}ToLogOnEndTxnWhenStatusIsOngoing...
    with transaction version 2: the Prepare written carries epoch + 1, the answer the bumped epoch, the
    markers the bumped epoch and version 2, and the next transaction runs at that epoch."""
    ctx = TxnV2Context()
    producer = _producer(ctx.init())
    ctx.begin(producer)
    end = ctx.end_v2(producer, commit)
    bumped = (producer[0], producer[1] + 1)
    assert (end.error, _producer(end)) == (ErrorCode.none, bumped)
    prepare = parse_value(ctx.log[ctx.coordinator.partition_for(TXN)][-1][1])
    assert prepare is not None and (prepare.producer_epoch, prepare.state) == (
        bumped[1],
        S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
    )
    (sent,) = ctx.complete()
    (marker,) = sent.request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_version) == (*bumped, TV2)
    metadata = ctx.metadata()
    assert (metadata.state, metadata.producer_epoch, metadata.last_producer_epoch) == (
        S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT,
        bumped[1],
        producer[1],
    )
    ctx.begin(bumped)  # the producer's next transaction, at the epoch EndTxn answered
    assert ctx.metadata().state == S.ONGOING


def test_should_return_ok_on_end_txn_v2_retry_after_the_bump():
    """A retried EndTxn v5 (the epoch before its bump) is answered CONCURRENT_TRANSACTIONS while the
    markers are written, then NONE with the bumped epoch (retryOnEpochBump)."""
    ctx = TxnV2Context()
    producer = _producer(ctx.init())
    ctx.begin(producer)
    ctx.end_v2(producer, True)
    retry = ctx.coordinator.end_txn(NOW, TXN, *producer, True, TV2)
    assert retry.error == ErrorCode.concurrent_transactions
    ctx.complete()
    retry = ctx.coordinator.end_txn(NOW, TXN, *producer, True, TV2)
    assert (retry.error, retry.append, _producer(retry)) == (
        ErrorCode.none,
        None,
        (producer[0], producer[1] + 1),
    )


def test_should_return_invalid_txn_request_on_end_txn_v2_if_not_end_txn_v2_retry(monkeypatch):
    """TransactionCoordinatorTest.shouldReturnInvalidTxnRequestOnEndTxnV2IfNotEndTxnV2Retry: in
    CompleteCommit a commit at the current epoch is INVALID_TXN_STATE (Kafka 4.3's table). In
    PrepareCommit the current epoch is the next transaction's EndTxn, sent while the previous one's markers
    are in flight: Kafka's table fences it (PRODUCER_FENCED, kept behind the test switch); ours answers
    CONCURRENT_TRANSACTIONS, so the producer retries once the markers are written (franz-go aborts an
    empty transaction there, and was fenced in every TestTxnEtl run)."""
    ctx = TxnV2Context()
    producer = _producer(ctx.init())
    ctx.begin(producer)
    ctx.end_v2(producer, True)
    bumped = (producer[0], producer[1] + 1)
    for commit in (True, False):
        assert (
            ctx.coordinator.end_txn(NOW, TXN, *bumped, commit, TV2).error == ErrorCode.concurrent_transactions
        )
    monkeypatch.setattr(transaction_coordinator, "UNSAFE_FENCE_NEXT_END_TXN_FOR_TESTS", True)
    assert ctx.coordinator.end_txn(NOW, TXN, *bumped, False, TV2).error == ErrorCode.producer_fenced
    monkeypatch.setattr(transaction_coordinator, "UNSAFE_FENCE_NEXT_END_TXN_FOR_TESTS", False)
    ctx.complete()
    assert ctx.coordinator.end_txn(NOW, TXN, *bumped, True, TV2).error == ErrorCode.invalid_txn_state
    abort = ctx.coordinator.end_txn(NOW, TXN, *bumped, False, TV2)  # the empty transaction's abort
    assert (abort.error, _producer(abort)) == (ErrorCode.none, (producer[0], producer[1] + 2))


def _exhausted(ctx: TxnV2Context) -> tuple[int, int]:
    """A producer whose epoch is Short.MAX - 1, in an ongoing transaction version 2 transaction."""
    producer = _producer(ctx.init())
    ctx.metadata().producer_epoch = SHORT_MAX - 1
    producer = (producer[0], SHORT_MAX - 1)
    ctx.begin(producer)
    return producer


def test_should_return_ok_on_end_txn_v2_if_end_txn_v2_retry_epoch_overflow():
    """TransactionCoordinatorTest.shouldReturnOkOnEndTxnV2IfEndTxnV2RetryEpochOverflow and
    TransactionMetadataTest.testEpochBumpOnEndTxnOverflow: the bump from Short.MAX - 1 takes a new producer
    id; the markers go out with the old id at Short.MAX, the answer (and a retry once complete) is the new
    id at epoch 0."""
    ctx = TxnV2Context(first_producer_id=1000)
    producer = _exhausted(ctx)
    end = ctx.end_v2(producer, True)
    assert (end.error, _producer(end)) == (ErrorCode.none, (1001, 0))
    metadata = ctx.metadata()
    assert (metadata.producer_id, metadata.producer_epoch, metadata.next_producer_id) == (
        1000,
        SHORT_MAX,
        1001,
    )
    assert ctx.coordinator.end_txn(NOW, TXN, *producer, True, TV2).error == ErrorCode.concurrent_transactions
    (sent,) = ctx.complete()
    (marker,) = sent.request.markers
    assert (marker.producer_id, marker.producer_epoch) == (1000, SHORT_MAX)
    metadata = ctx.metadata()
    assert (metadata.producer_id, metadata.producer_epoch, metadata.previous_producer_id) == (1001, 0, 1000)
    assert (metadata.last_producer_epoch, metadata.next_producer_id) == (SHORT_MAX - 1, -1)
    retry = ctx.coordinator.end_txn(NOW, TXN, *producer, True, TV2)
    assert (retry.error, _producer(retry)) == (ErrorCode.none, (1001, 0))
    ctx.begin((1001, 0))
    assert ctx.metadata().state == S.ONGOING


# Kafka's table for transaction version 2 (TransactionCoordinator, above endTransaction): PF
# PRODUCER_FENCED, ITS INVALID_TXN_STATE, NONE no error and no bump, EB no error and an epoch bump.
# Retry: the request's epoch is one below the coordinator's; Current: equal to it.
EB = "epoch bump"


@pytest.mark.parametrize(
    ("state", "commit", "retry", "expected"),
    [
        (S.EMPTY, False, True, ErrorCode.producer_fenced),
        (S.EMPTY, False, False, EB),
        (S.EMPTY, True, True, ErrorCode.producer_fenced),
        (S.EMPTY, True, False, ErrorCode.invalid_txn_state),
        (S.COMPLETE_ABORT, False, True, ErrorCode.none),
        (S.COMPLETE_ABORT, False, False, EB),
        (S.COMPLETE_ABORT, True, True, ErrorCode.invalid_txn_state),
        (S.COMPLETE_ABORT, True, False, ErrorCode.invalid_txn_state),
        (S.COMPLETE_COMMIT, False, True, ErrorCode.invalid_txn_state),
        (S.COMPLETE_COMMIT, False, False, EB),
        (S.COMPLETE_COMMIT, True, True, ErrorCode.none),
        (S.COMPLETE_COMMIT, True, False, ErrorCode.invalid_txn_state),
    ],
)
def test_end_txn_v2_table(state, commit, retry, expected):
    """Kafka's endTransaction table for transaction version 2; an abort with no partition added (EB) is
    written as PrepareAbort with the epoch bumped and no markers, then completes."""
    ctx = TxnV2Context()
    producer_id, epoch = _producer(ctx.init())
    ctx.metadata().producer_epoch = epoch = epoch + 5
    ctx.metadata().state = state
    asked = epoch - 1 if retry else epoch
    outcome = ctx.coordinator.end_txn(NOW, TXN, producer_id, asked, commit, TV2)
    if expected != EB:
        assert (outcome.error, outcome.append) == (expected, None)
        return
    assert (outcome.error, _producer(outcome)) == (ErrorCode.none, (producer_id, epoch + 1))
    assert ctx.write(outcome) == ErrorCode.none
    assert ctx.complete() == []  # no partition: no marker
    assert (ctx.metadata().state, ctx.metadata().producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)


def test_end_txn_v1_keeps_the_epoch():
    """EndTxn below v5 (transaction version 0) bumps nothing, its markers say version 0."""
    ctx = TxnV2Context()
    init = ctx.ongoing()
    outcome = ctx.coordinator.end_txn(NOW, TXN, init.producer_id, init.producer_epoch, True)
    assert ctx.write(outcome) == ErrorCode.none
    assert _producer(outcome) == _producer(init)
    (sent,) = ctx.complete()
    (marker,) = sent.request.markers
    assert (marker.producer_epoch, marker.transaction_version) == (init.producer_epoch, 0)


def test_should_abort_expired_transactions_in_ongoing_state_and_bump_epoch_with_tv2():
    """TransactionCoordinatorTest.shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch with the
    cluster at transaction.version 2: the abort bumps the epoch once, in prepareAbortOrCommit (Kafka 4.1+);
    the markers carry that epoch and version 2, and the EndTxn(abort) the producer sends late at its epoch
    is a retry: CONCURRENT_TRANSACTIONS while the markers are written, then NONE with the bumped epoch."""
    ctx = _tv2_cluster()
    producer = _producer(ctx.init())
    ctx.begin(producer)
    (abort,) = ctx.coordinator.abort_timed_out(NOW + 10 * 60_000)
    assert (abort.transit.producer_epoch, abort.transit.last_producer_epoch) == (producer[1] + 1, producer[1])
    assert ctx.append(abort) == ErrorCode.none
    late = ctx.coordinator.end_txn(NOW, TXN, *producer, False, TV2)
    assert late.error == ErrorCode.concurrent_transactions
    (sent,) = ctx.complete()
    (marker,) = sent.request.markers
    assert (marker.producer_epoch, marker.transaction_version) == (producer[1] + 1, TV2)
    late = ctx.coordinator.end_txn(NOW, TXN, *producer, False, TV2)
    assert (late.error, late.append, _producer(late)) == (
        ErrorCode.none,
        None,
        (producer[0], producer[1] + 1),
    )


def _tv2_cluster() -> TxnV2Context:
    """A coordinator whose cluster is at transaction.version 2: its own aborts speak version 2."""
    ctx = TxnV2Context(first_producer_id=1000)
    ctx.coordinator.transaction_version = lambda: TV2
    return ctx


def _transit_fields(append) -> tuple:
    transit = append.transit
    return (
        transit.state,
        transit.producer_id,
        transit.producer_epoch,
        transit.last_producer_epoch,
        transit.next_producer_id,
    )


def test_should_not_cause_epoch_overflow_when_init_pid_during_ongoing_txn_v2():
    """TransactionCoordinatorTest.shouldNotCauseEpochOverflowWhenInitPidDuringOngoingTxnV2 and
    shouldRotateProducerIdWhenInitPidFencesOngoingTxnAtEpochOverflowBoundaryTV2: an InitProducerId that
    finds a transaction open at Short.MAX - 1 aborts it with prepareAbortOrCommit's one bump (PrepareAbort
    at Short.MAX, the next producer id taken); CompleteAbort rotates to that id at epoch 0, and the retried
    InitProducerId goes on from there."""
    ctx = _tv2_cluster()
    _exhausted(ctx)
    fence = ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS)
    assert fence.append is not None
    assert _transit_fields(fence.append) == (S.PREPARE_ABORT, 1000, SHORT_MAX, SHORT_MAX - 1, 1001)
    assert ctx.write(fence) == ErrorCode.concurrent_transactions
    assert ctx.coordinator.init_producer_id(NOW, TXN, TIMEOUT_MS).error == ErrorCode.concurrent_transactions
    (sent,) = ctx.complete()
    (marker,) = sent.request.markers
    assert (marker.producer_id, marker.producer_epoch) == (1000, SHORT_MAX)
    metadata = ctx.metadata()
    assert (metadata.state, metadata.producer_id, metadata.producer_epoch) == (S.COMPLETE_ABORT, 1001, 0)
    assert _producer(ctx.init()) == (1001, 1)


def test_should_handle_timeout_at_epoch_overflow_boundary_correctly_tv2():
    """TransactionCoordinatorTest.shouldHandleTimeoutAtEpochOverflowBoundaryCorrectlyTV2: a transaction
    timed out at Short.MAX - 1 is aborted at Short.MAX with the old id and a next producer id, written
    without error (the old double bump wrote Short.MAX + 1 at the next EndTxn and broke the coordinator)."""
    ctx = _tv2_cluster()
    _exhausted(ctx)
    (abort,) = ctx.coordinator.abort_timed_out(NOW + 10 * 60_000)
    assert _transit_fields(abort) == (S.PREPARE_ABORT, 1000, SHORT_MAX, SHORT_MAX - 1, 1001)
    assert ctx.append(abort) == ErrorCode.none
    metadata = ctx.metadata()
    assert (metadata.state, metadata.producer_id, metadata.producer_epoch) == (
        S.PREPARE_ABORT,
        1000,
        SHORT_MAX,
    )


def test_should_handle_timeout_at_epoch_overflow_boundary_correctly_and_late_client_abort_request_tv2():
    """TransactionCoordinatorTest.shouldHandleTimeoutAtEpochOverflowBoundaryCorrectlyAndLateClientAbortRequestTV2:
    once the timed-out transaction's markers are written, CompleteAbort moves to the new id at epoch 0 and
    the producer's late EndTxn(abort) at Short.MAX - 1 with the old id is a retry answered with the new id;
    the producer goes on with it."""
    ctx = _tv2_cluster()
    producer = _exhausted(ctx)
    (abort,) = ctx.coordinator.abort_timed_out(NOW + 10 * 60_000)
    assert ctx.append(abort) == ErrorCode.none
    ctx.complete()
    metadata = ctx.metadata()
    assert (metadata.state, metadata.producer_id, metadata.producer_epoch) == (S.COMPLETE_ABORT, 1001, 0)
    late = ctx.coordinator.end_txn(NOW, TXN, *producer, False, TV2)
    assert (late.error, late.append, _producer(late)) == (ErrorCode.none, None, (1001, 0))
    ctx.begin((1001, 0))
    assert ctx.metadata().state == S.ONGOING


def test_the_next_producer_id_is_told_to_wait_while_the_overflow_completes():
    """Kafka checks the pending transition before the id mapping: between the EndTxn at Short.MAX - 1
    answered with (next producer id, 0) and CompleteCommit written, that producer's adds (the leader's and
    a verification) and its EndTxn are CONCURRENT_TRANSACTIONS, retried, not INVALID_PRODUCER_ID_MAPPING."""
    ctx = TxnV2Context(first_producer_id=1000)
    producer = _exhausted(ctx)
    following = _producer(ctx.end_v2(producer, True))
    assert following == (1001, 0)
    busy = ErrorCode.concurrent_transactions
    tp = ("foo", 2)

    def answers() -> tuple:
        coordinator = ctx.coordinator
        return (
            coordinator.add_partitions(NOW, TXN, *following, [tp], TV2).error,
            coordinator.verify_partitions(TXN, *following, [tp]),
            coordinator.end_txn(NOW, TXN, *following, False, TV2).error,
        )

    assert answers() == (busy, {tp: busy}, busy)  # PrepareCommit written, markers in flight
    ctx.deliver_all_markers()
    (complete,) = ctx.coordinator.due_appends(NOW)
    assert answers() == (busy, {tp: busy}, busy)  # CompleteCommit pending
    assert ctx.append(complete) == ErrorCode.none
    ctx.begin(following, [tp])
    assert ctx.metadata().state == S.ONGOING


def test_prepare_abort_or_commit_refuses_an_epoch_past_short_max():
    """A bump from Short.MAX would not fit the log's int16: refused before anything is marked pending."""
    metadata = TransactionMetadata(TXN, 7, -1, SHORT_MAX, -1, 30_000, S.ONGOING, {("foo", 0)}, NOW, NOW)
    with pytest.raises(IllegalTransition):
        metadata.prepare_abort_or_commit(S.PREPARE_ABORT, NOW, TV2)
    assert metadata.pending_state is None


class StateTopic:
    """``__transaction_state`` in memory; ``broken`` makes every write raise."""

    def __init__(self, broken: bool = False) -> None:
        self.broken, self.written = broken, []

    async def append(
        self, partition: int, key: bytes, value: bytes | None, leader_epoch: int = -1
    ) -> ErrorCode:
        if self.broken:
            raise RuntimeError("write failed")
        self.written.append((key, value))
        return ErrorCode.none


def test_a_write_that_raises_drops_the_pending_state():
    """A write that raises (a bug, a record that cannot be encoded) drops the pending state, so the id is
    not answered CONCURRENT_TRANSACTIONS for good."""
    ctx = TxnContext()
    init = ctx.init()
    service = transaction_service.TransactionService(SimpleNamespace(), ctx.coordinator, StateTopic(True))  # type: ignore[arg-type]
    add = ctx.coordinator.add_partitions(NOW, TXN, *_producer(init), [("foo", 0)])
    assert add.append is not None
    assert asyncio.run(service._write(add.append)) == ErrorCode.unknown_server_error
    assert ctx.metadata().pending_state is None
    assert ctx.coordinator.add_partitions(NOW, TXN, *_producer(init), [("foo", 0)]).append is not None


def test_the_timeout_loop_carries_on_past_a_failing_transactional_id():
    """A timed-out transaction whose abort raises is logged and skipped; the loop goes on aborting the
    others, round after round."""
    ctx = TxnContext()
    ctx.ongoing("broken")
    ctx.metadata("broken").producer_epoch = SHORT_MAX  # no epoch left to fence with: the abort raises
    ctx.ongoing("fine")
    settings = SimpleNamespace(
        transaction_abort_timed_out_transaction_cleanup_interval_ms=1,
        transaction_remove_expired_transaction_cleanup_interval_ms=10**12,
        transactional_id_expiration_ms=10**12,
    )
    topic = StateTopic()
    service = transaction_service.TransactionService(
        SimpleNamespace(settings=settings),  # type: ignore[arg-type]
        ctx.coordinator,
        topic,  # type: ignore[arg-type]
    )

    async def run() -> bool:
        loop = asyncio.create_task(service._timeout_loop())
        for _ in range(200):  # a few rounds, until the other id's abort is written (at most 2 s)
            await asyncio.sleep(0.01)
            if ctx.metadata("fine").state == S.PREPARE_ABORT:
                break
        alive = not loop.done()
        loop.cancel()
        return alive

    assert asyncio.run(run())
    assert ctx.metadata("fine").state == S.PREPARE_ABORT
    assert ctx.metadata("broken").state == S.ONGOING


def test_epoch_bump_on_end_txn():
    """TransactionMetadataTest.testEpochBumpOnEndTxn: a transaction version 0 metadata ended by EndTxn v5
    bumps once, keeps the epoch through Complete and speaks version 2 from then on."""
    metadata = TransactionMetadata(TXN, 7, -1, 10, -1, 30_000, S.ONGOING, set(), NOW, NOW)
    metadata.complete_transition(metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW, TV2))
    assert (metadata.producer_id, metadata.producer_epoch, metadata.client_transaction_version) == (
        7,
        11,
        TV2,
    )
    metadata.complete_transition(metadata.prepare_complete(NOW))
    assert (metadata.producer_id, metadata.producer_epoch, metadata.state) == (7, 11, S.COMPLETE_COMMIT)


def test_serialize_transaction_log_value_to_flexible_version():
    """TransactionLogTest.testSerializeTransactionLogValueToFlexibleVersion: version 1 (written from
    transaction.version 1) carries PreviousProducerId, NextProducerId and ClientTransactionVersion as
    tagged fields, read back; version 0 drops them."""
    value = TransactionLogValue(
        1001, SHORT_MAX, 60_000, S.PREPARE_COMMIT, frozenset(PARTITIONS), NOW, NOW - 5, 999, 1002, TV2
    )
    flexible = value_bytes(value, 1)
    assert flexible is not None and flexible[:2] == b"\x00\x01"
    assert parse_value(flexible) == value
    untagged = dataclasses.replace(
        value, previous_producer_id=-1, next_producer_id=-1, client_transaction_version=0
    )
    assert parse_value(value_bytes(value, 0)) == untagged
    empty = TransactionLogValue(1001, 0, 60_000, S.EMPTY, frozenset(), NOW, -1)
    assert parse_value(value_bytes(empty, 1)) == empty


def test_coordinator_writes_the_flexible_value_from_transaction_version_1():
    """The value version follows the finalized transaction.version when each record is written
    (TransactionVersion.transactionLogValueVersion): 0 before the upgrade to 1, 1 after."""
    ctx = TxnV2Context()
    producer = _producer(ctx.init())
    ctx.coordinator.transaction_version = lambda: 1
    ctx.begin(producer)
    ctx.end_v2(producer, True)
    written = ctx.log[ctx.coordinator.partition_for(TXN)]
    assert [value[:2] for _, value in written if value] == [b"\x00\x00", b"\x00\x01", b"\x00\x01"]
    loaded = parse_value(written[-1][1])
    assert loaded is not None and loaded.client_transaction_version == TV2


class LeaderService(transaction_service.TransactionService):
    """A partition leader's TransactionService with a scripted coordinator: ``answers`` per partition,
    one per ask (the last repeated); ``open_at`` the producers with a transaction open per partition."""

    def __init__(
        self, open_at: dict, answers: dict, max_ms: int = 10, request_timeout_ms: int = 30_000
    ) -> None:
        self.open_at, self.answers, self.asked = open_at, answers, []
        settings = SimpleNamespace(
            add_partitions_to_txn_retry_backoff_ms=1,
            add_partitions_to_txn_retry_backoff_max_ms=max_ms,
            request_timeout_ms=request_timeout_ms,
        )
        self.node = SimpleNamespace(settings=settings)  # type: ignore[assignment]
        self._producer_turns = transaction_service.ProducerTurns()

    def _start_verification(self, tp, producer_id, producer_epoch, base_sequence, supports_epoch_bump):
        if self.open_at.get(tp) == (producer_id, producer_epoch):
            return SENTINEL_GUARD
        return VerificationGuard()

    async def add_for_write(self, transactional_id, producer_id, producer_epoch, partitions):
        self.asked.append((producer_id, producer_epoch, sorted(partitions)))
        return {tp: self._next(tp) for tp in partitions}

    def _next(self, tp):
        script = self.answers.get(tp, [ErrorCode.none])
        return script.pop(0) if len(script) > 1 else script[0]


def _batch(transactional: bool, base_sequence: int = 0) -> bytes:
    return build_batch(
        [(None, b"v", (), NOW)],
        producer_id=5,
        producer_epoch=3,
        base_sequence=base_sequence,
        transactional=transactional,
    )


class VerifyingLeader(LeaderService):
    """A LeaderService whose partitions are led here, each with its producer state."""

    _start_verification = transaction_service.TransactionService._start_verification

    def __init__(self, answers: dict, max_ms: int = 0) -> None:
        super().__init__({}, answers, max_ms=max_ms)
        self.replicas = {
            ("t", 0): SimpleNamespace(
                partition=SimpleNamespace(role=Role.LEADER), producers=ProducerStateTable()
            )
        }
        self.node.replica_manager = SimpleNamespace(
            replica=lambda topic, index: self.replicas[(topic, index)]
        )


def test_a_partition_leader_adds_only_what_no_open_transaction_covers():
    """Produce v12+ asks the coordinator for the partitions whose producer has no transaction open at the
    leader at that epoch (not for plain batches), and answers its refusals as Kafka's
    AddPartitionsToTxnManager and ReplicaManager do: PRODUCER_FENCED as INVALID_PRODUCER_EPOCH."""
    service = LeaderService({("t", 0): (5, 3)}, {("t", 1): [ErrorCode.producer_fenced]})
    batches = {
        ("t", 0): _batch(True),
        ("t", 1): _batch(True),
        ("t", 2): _batch(True),
        ("t", 3): _batch(False),
    }
    refused = asyncio.run(service.add_for_produce(TXN, batches)).refused
    assert service.asked == [(5, 3, [("t", 1), ("t", 2)])]
    assert refused == {("t", 1): (ErrorCode.invalid_producer_epoch, None)}


def test_transaction_add_partition_retry():
    """Kafka's server-side retry (add.partitions.to.txn.retry.backoff.ms / .max.ms): CONCURRENT_TRANSACTIONS
    while the previous transaction completes is asked again, only for those partitions; one still refused
    at the end is answered CONCURRENT_TRANSACTIONS as it is to a transaction version 2 producer, which
    retries it (ReplicaManager: "Don't convert the Concurrent Transaction exception for TV2")."""
    concurrent = ErrorCode.concurrent_transactions
    service = LeaderService({}, {("t", 1): [concurrent, ErrorCode.none], ("t", 2): [concurrent]})
    batches = {("t", 0): _batch(True), ("t", 1): _batch(True), ("t", 2): _batch(True)}
    refused = asyncio.run(service.add_for_produce(TXN, batches)).refused
    assert refused == {("t", 2): (concurrent, None)}
    assert service.asked[:2] == [(5, 3, [("t", 0), ("t", 1), ("t", 2)]), (5, 3, [("t", 1), ("t", 2)])]
    assert all(partitions == [("t", 2)] for *_, partitions in service.asked[2:])
    once = LeaderService({}, {("t", 2): [concurrent]}, max_ms=0)
    assert asyncio.run(once.add_for_produce(TXN, batches)).refused == {("t", 2): (concurrent, None)}
    assert len(once.asked) == 1


def test_transaction_add_partition_retry_stops_at_the_request_timeout():
    """ReplicaManager's retry time is min(add.partitions.to.txn.retry.backoff.max.ms, request.timeout.ms): a
    request timeout of 0 answers the first CONCURRENT_TRANSACTIONS at once, whatever the backoff maximum."""
    concurrent = ErrorCode.concurrent_transactions
    service = LeaderService({}, {("t", 0): [concurrent]}, max_ms=60_000, request_timeout_ms=0)
    refused = asyncio.run(
        asyncio.wait_for(service.add_for_produce(TXN, {("t", 0): _batch(True)}), 10)
    ).refused
    assert refused == {("t", 0): (concurrent, None)}
    assert len(service.asked) == 1


def test_a_producers_pipelined_requests_are_verified_in_the_order_they_came():
    """A producer's two pipelined Produce requests whose first batches both wait for the coordinator: the later
    one (its answer quicker) must not reach the append queue first, or its higher sequence is appended before
    the lower one (Kafka keeps them in order by reading one request per connection at a time). The later
    request asks only once the earlier one's appends have started, and another transactional id is not held."""
    events = []

    class SlowFirstAnswer(LeaderService):
        async def add_for_write(self, transactional_id, producer_id, producer_epoch, partitions):
            events.append(("ask", transactional_id, len(self.asked)))
            first = not self.asked
            answers = await super().add_for_write(transactional_id, producer_id, producer_epoch, partitions)
            await asyncio.sleep(0.05 if first else 0)
            return answers

    service = SlowFirstAnswer({}, {})

    async def produce(txn: str, name: str) -> None:
        await service.add_for_produce(txn, {("t", 0): _batch(True)})
        events.append(("append", name))
        await asyncio.sleep(0)

    async def both() -> None:
        await asyncio.gather(produce(TXN, "first"), produce(TXN, "second"), produce("other", "other"))

    asyncio.run(both())
    assert [e for e in events if e[0] == "append"].index(("append", "other")) == 0
    mine = [e for e in events if e[1:2] != ("other",) and e != ("append", "other")]
    assert mine == [("ask", TXN, 0), ("append", "first"), ("ask", TXN, 2), ("append", "second")]
    assert service._producer_turns._locks == {}


class VerifyOnlyLeader(LeaderService):
    """A leader of Produce below v12: it only asks the coordinator to verify (``verify_only``)."""

    def __init__(self, open_at: dict, answers: dict, enabled: bool = True) -> None:
        super().__init__(open_at, answers)
        self.node.settings.transaction_partition_verification_enable = enabled

    async def verify(self, transactional_id, producer_id, producer_epoch, partitions):
        return await self.add_for_write(transactional_id, producer_id, producer_epoch, partitions)


@pytest.mark.parametrize(
    ("version", "coordinator_says", "answered"),
    [
        (10, ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state),
        (11, ErrorCode.transaction_abortable, ErrorCode.transaction_abortable),
        (9, ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch),
        (11, ErrorCode.concurrent_transactions, ErrorCode.not_enough_replicas),
        (10, ErrorCode.coordinator_not_available, ErrorCode.not_enough_replicas),
        (10, ErrorCode.network_exception, ErrorCode.not_enough_replicas),
    ],
)
def test_produce_below_v12_verifies_the_partition_is_in_the_transaction(version, coordinator_says, answered):
    """KIP-890 part 1 (ReplicaManagerTest.testTransactionVerificationFlow, testTransactionVerificationErrors):
    a leader of a Produce below v12 asks the coordinator, verify only and once (no retry on
    CONCURRENT_TRANSACTIONS), whether a first transactional batch's partition is in the producer's
    transaction; its answer as Kafka's AddPartitionsToTxnManager and ReplicaManager translate it for the
    request's version (TRANSACTION_ABORTABLE is known to v11 clients only)."""
    service = VerifyOnlyLeader({("t", 1): (5, 3)}, {("t", 0): [coordinator_says, ErrorCode.none]})
    batches = {("t", 0): _batch(True), ("t", 1): _batch(True), ("t", 2): _batch(False)}
    operation = transaction_service.produce_operation(version)
    adds = asyncio.run(service.add_for_produce(TXN, batches, operation))
    assert service.asked == [(5, 3, [("t", 0)])]
    assert {tp: error for tp, (error, _) in adds.refused.items()} == {("t", 0): answered}
    assert adds.guards[("t", 1)] is SENTINEL_GUARD and adds.guards[("t", 0)] is not SENTINEL_GUARD


def test_disabled_transaction_verification():
    """ReplicaManagerTest.testDisabledTransactionVerification: transaction.partition.verification.enable=false:
    Produce below v12 asks nothing and appends with no
    guard (Kafka's maybeSendPartitionsToTransactionCoordinator skips verification); v12 still adds."""
    service = VerifyOnlyLeader({}, {("t", 0): [ErrorCode.transaction_abortable]}, enabled=False)
    batches = {("t", 0): _batch(True)}
    adds = asyncio.run(service.add_for_produce(TXN, batches, transaction_service.produce_operation(11)))
    assert adds == transaction_service.ProduceAdds({}, {}) and service.asked == []
    adds = asyncio.run(service.add_for_produce(TXN, batches, transaction_service.produce_operation(12)))
    assert service.asked == [(5, 3, [("t", 0)])] and ("t", 0) in adds.refused


def test_transaction_verification_blocks_out_of_order_sequence():
    """ReplicaManagerTest.testTransactionVerificationBlocksOutOfOrderSequence: the leader starts the
    verification with the batch's sequence (maybeStartTransactionVerificationForPartition): sequence 0 refused
    CONCURRENT_TRANSACTIONS (the coordinator busy with the previous transaction's markers), then sequence 38 added, must not be
    appended before sequence 0 (the Streams exactly_once_v2 thread fenced with no fault)."""
    tp = ("t", 0)
    service = VerifyingLeader({tp: [ErrorCode.concurrent_transactions, ErrorCode.none]})
    refused = asyncio.run(service.add_for_produce(TXN, {tp: _batch(True, base_sequence=0)})).refused
    assert refused == {tp: (ErrorCode.concurrent_transactions, None)}
    assert asyncio.run(service.add_for_produce(TXN, {tp: _batch(True, base_sequence=38)})).refused == {}
    producers = service.replicas[tp].producers
    assert producers.check(5, 3, 38, 1, True).error == ErrorCode.out_of_order_sequence_number
    assert producers.check(5, 3, 0, 38, True).error == ErrorCode.none


def test_a_marker_written_while_the_leader_retries_begins_the_verification_again():
    """The previous transaction's marker (transaction version 2: at the bumped epoch the new batch carries)
    lands while the leader asks again through CONCURRENT_TRANSACTIONS; it ends the verification, so each
    round begins it again, as Kafka's ReplicaManager, and the batch goes with the guard of the round the
    coordinator added it in (the first round's guard would refuse it INVALID_TXN_STATE)."""
    tp = ("t", 0)

    class MarkerLands(VerifyingLeader):
        async def add_for_write(self, transactional_id, producer_id, producer_epoch, partitions):
            answers = await super().add_for_write(transactional_id, producer_id, producer_epoch, partitions)
            if len(self.asked) == 1:
                self.replicas[tp].producers.complete_txn(5, 3, EndTxnMarker(True, 0), 1, NOW)
            return answers

    service = MarkerLands({tp: [ErrorCode.concurrent_transactions, ErrorCode.none]}, max_ms=1000)
    producers = service.replicas[tp].producers
    producers.record(5, 2, 0, 1, 0, 0, is_transactional=True)  # the previous transaction, at epoch 2
    adds = asyncio.run(service.add_for_produce(TXN, {tp: _batch(True)}))  # epoch 3, sequence 0
    assert adds.refused == {} and len(service.asked) == 2
    assert producers.check(5, 3, 0, 1, True, adds.guards[tp]).error == ErrorCode.none


def test_transaction_version_feature():
    """transaction.version is supported 0-2 and moves both ways as Kafka's FeatureControlManager allows."""
    assert SUPPORTED_FEATURES[TRANSACTION_VERSION] == (0, 2)
    image = MetadataImage()
    image.features[TRANSACTION_VERSION] = 2

    def decide(level: int, upgrade_type: UpgradeType) -> ErrorCode:
        update = FeatureUpdate(TRANSACTION_VERSION, level, upgrade_type)
        error, _, _ = decide_update_features(image, [update], elr_safety_records=list, clear_elr_records=list)
        return error

    assert decide(0, UpgradeType.UPGRADE) == ErrorCode.invalid_update_version
    assert decide(0, UpgradeType.SAFE_DOWNGRADE) == ErrorCode.none
    assert decide(3, UpgradeType.UPGRADE) == ErrorCode.invalid_update_version


def test_an_out_of_order_refusal_is_logged_once_per_producer_epoch_and_partition():
    """The leader says what it had behind an OUT_OF_ORDER_SEQUENCE_NUMBER, once per partition and producer
    epoch: a client resending the refused batch cannot fill the broker's log."""
    from structlog.testing import capture_logs

    from epochkraft.broker.producer_state import ProducerStateTable
    from epochkraft.broker.replica_manager import ReplicaManager
    from epochkraft.protocol.records import parse_header

    manager = ReplicaManager.__new__(ReplicaManager)
    manager._out_of_order_logged = set()
    replica = SimpleNamespace(key=("t", 0), producers=ProducerStateTable())
    with capture_logs() as logged:
        for sequence in (38, 38, 39):
            manager._log_out_of_order_once(replica, parse_header(_batch(True, base_sequence=sequence)))
        replica.key = ("t", 1)
        manager._log_out_of_order_once(replica, parse_header(_batch(True, base_sequence=38)))
    assert [(e["partition"], e["base_sequence"]) for e in logged] == [("t-0", 38), ("t-1", 38)]
