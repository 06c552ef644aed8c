"""Sans-IO transaction coordinator (Kafka's TransactionCoordinator with the state of its
TransactionStateManager), for transaction versions 0 to 2.

A request is decided into an ``Outcome``: an error to answer at once, or a ``LogAppend`` of the transactional
id's next state to write to ``__transaction_state`` (acks=all) before answering. The edge writes it and hands
the result to ``complete_append``, which applies the state (or drops the pending one). A written
PrepareCommit or PrepareAbort queues the transaction's markers (``markers``); once every partition has its
marker, ``due_appends`` gives the CompleteCommit or CompleteAbort to write. Ongoing transactions older than
their timeout are aborted with a bumped epoch (``abort_timed_out``), fencing the producer that let them
expire (at transaction version 2 the abort's own bump, a new producer id once the epoch is exhausted). State is per ``__transaction_state`` partition: loaded when this broker becomes its leader (the
leader epoch is the coordinator epoch markers carry), dropped when it stops leading.

Transaction version 2 (KIP-890 part 2) is the client's, per request: EndTxn v5 and the partitions a
partition leader adds (AddPartitionsToTxn v5 without verify_only) speak it. Its EndTxn bumps the producer's
epoch (a new producer id once the epoch is exhausted) and answers the epoch the producer goes on with; its
markers carry the bumped epoch. The cluster's finalized ``transaction.version`` decides the
``__transaction_state`` value version (1 from level 1) and the version of the coordinator's own aborts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.write_txn_markers.v2.response import WriteTxnMarkersResponse

from epochkraft.broker.producer_id_manager import GeneratedProducerId
from epochkraft.broker.transaction_log import (
    TopicPartition,
    TransactionState,
    key_bytes,
    parse_key,
    parse_value,
    transaction_partition,
    value_bytes,
)
from epochkraft.broker.transaction_markers import MarkerRequest, PendingMarkers, TransactionMarkerQueue
from epochkraft.broker.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    TransactionMetadata,
    TxnTransit,
    is_epoch_exhausted,
    supports_epoch_bump,
)
from epochkraft.protocol.errors import ErrorCode

# Unsafe switch for tests: an InitProducerId that finds a transaction in progress bumps the epoch without
# aborting it first, so the zombie's transaction is left open (and its partitions' LSO stuck).
UNSAFE_SKIP_FENCING_ABORT_FOR_TESTS = False

# Test switch: Kafka's table exactly, fencing an EndTxn v5 at the current epoch while the previous
# transaction's markers are in flight (franz-go's TestTxnEtl then fails on PRODUCER_FENCED).
UNSAFE_FENCE_NEXT_END_TXN_FOR_TESTS = False

PREPARED = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
COMPLETED = (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)
# Append errors as the client sees them (Kafka's TransactionStateManager.appendTransactionToLog).
APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms


@dataclass(frozen=True, slots=True)
class LogAppend:
    """A transactional id's next state, to be written to its ``__transaction_state`` partition."""

    transactional_id: str
    txn_log_partition: int
    coordinator_epoch: int
    transit: TxnTransit
    value_version: int = 0  # 1 (flexible) from transaction.version 1, as Kafka's transactionLogValueVersion

    @property
    def key(self) -> bytes:
        return key_bytes(self.transactional_id)

    @property
    def value(self) -> bytes | None:
        if self.transit.state == TransactionState.DEAD:
            return None
        return value_bytes(self.transit.log_value(), self.value_version)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to answer: ``error`` (after ``append`` is written, if there is one, and then only if it was)."""

    error: ErrorCode = ErrorCode.none
    append: LogAppend | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    def __init__(
        self,
        settings: TransactionSettings,
        producer_ids: Callable[[], GeneratedProducerId],
        transaction_version: Callable[[], int] = lambda: 0,
    ) -> None:
        self.settings = settings
        self.producer_ids = producer_ids
        self.transaction_version = transaction_version  # the cluster's finalized transaction.version
        self.coordinator_epochs: dict[int, int] = {}  # loaded __transaction_state partition -> leader epoch
        self.loading: set[int] = set()
        self.transactions: dict[str, TransactionMetadata] = {}
        self.markers = TransactionMarkerQueue()
        self._completions_due: set[str] = set()

    def partition_for(self, transactional_id: str) -> int:
        return transaction_partition(transactional_id, self.settings.num_partitions)

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self.coordinator_epochs:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def _append(self, metadata: TransactionMetadata, transit: TxnTransit) -> LogAppend:
        partition = self.partition_for(metadata.transactional_id)
        value_version = 1 if self.transaction_version() >= 1 else 0
        return LogAppend(
            metadata.transactional_id, partition, self.coordinator_epochs[partition], transit, value_version
        )

    # ---- InitProducerId ---------------------------------------------------------------------------------
    def init_producer_id(
        self, now_ms: int, transactional_id: str, txn_timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> Outcome:
        """Kafka's handleInitProducerId with a transactional id; ``expected`` is the producer's current
        (id, epoch) when it recovers (KIP-360), None for a fresh producer."""
        if not transactional_id:
            return Outcome(ErrorCode.invalid_request)
        if not 0 < txn_timeout_ms <= self.settings.max_timeout_ms:
            return Outcome(ErrorCode.invalid_transaction_timeout)
        error = self.coordinator_error(transactional_id)
        if error != ErrorCode.none:
            return Outcome(error)
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            generated = self.producer_ids()
            if generated.error != ErrorCode.none:
                return Outcome(generated.error)
            metadata = TransactionMetadata(
                transactional_id,
                generated.producer_id,
                NO_PRODUCER_ID,
                NO_PRODUCER_EPOCH,
                NO_PRODUCER_EPOCH,
                txn_timeout_ms,
                TransactionState.EMPTY,
                set(),
                -1,
                now_ms,
            )
            self.transactions[transactional_id] = metadata
        return self._prepare_init_producer_id(now_ms, metadata, txn_timeout_ms, expected)

    def _prepare_init_producer_id(
        self,
        now_ms: int,
        metadata: TransactionMetadata,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None,
    ) -> Outcome:
        if metadata.pending_transition_in_progress or metadata.state in PREPARED:
            return Outcome(ErrorCode.concurrent_transactions)
        if expected is not None and not _is_valid_producer_id(metadata, *expected):
            return Outcome(ErrorCode.producer_fenced)
        if metadata.state == TransactionState.ONGOING:
            if UNSAFE_SKIP_FENCING_ABORT_FOR_TESTS:
                metadata.state = TransactionState.EMPTY  # the broken rule: the open transaction is forgotten
                return self._prepare_init_producer_id(now_ms, metadata, txn_timeout_ms, expected)
            # Abort the zombie's transaction with a bumped epoch; the client retries and bumps again.
            fence = self._fence(now_ms, metadata)
            if isinstance(fence, ErrorCode):
                return Outcome(fence)
            return Outcome(ErrorCode.concurrent_transactions, fence)
        if metadata.state not in (TransactionState.EMPTY, *COMPLETED):
            return Outcome(ErrorCode.concurrent_transactions)
        expected_epoch = None if expected is None else expected[1]
        if metadata.is_producer_epoch_exhausted and expected_epoch in (None, metadata.producer_epoch):
            generated = self.producer_ids()
            if generated.error != ErrorCode.none:
                return Outcome(generated.error)
            transit: TxnTransit | None = metadata.prepare_producer_id_rotation(
                generated.producer_id, txn_timeout_ms, now_ms, expected is not None
            )
        else:
            transit = metadata.prepare_increment_producer_epoch(txn_timeout_ms, expected_epoch, now_ms)
        if transit is None:
            return Outcome(ErrorCode.producer_fenced)
        return Outcome(
            ErrorCode.none, self._append(metadata, transit), transit.producer_id, transit.producer_epoch
        )

    def _fence(self, now_ms: int, metadata: TransactionMetadata) -> LogAppend | ErrorCode:
        """PrepareAbort of an ongoing transaction with the producer fenced, in the cluster's transaction
        version; from version 2 the abort's one bump takes the next producer id where it exhausts the
        epoch (Kafka's endTransaction from the coordinator)."""
        version = self.transaction_version()
        next_producer_id = NO_PRODUCER_ID
        if supports_epoch_bump(version) and metadata.is_producer_epoch_exhausted:
            generated = self.producer_ids()
            if generated.error != ErrorCode.none:
                return generated.error
            next_producer_id = generated.producer_id
        fence = metadata.prepare_fence_producer_epoch(now_ms, version, next_producer_id)
        return self._append(metadata, fence)

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------------
    def _producer_metadata(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None
        error = self.coordinator_error(transactional_id)
        if error != ErrorCode.none:
            return error, None
        metadata = self.transactions.get(transactional_id)
        if metadata is not None and _awaiting_rotation(metadata, producer_id, producer_epoch):
            return ErrorCode.concurrent_transactions, None
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        return ErrorCode.none, metadata

    def add_partitions(
        self,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        client_transaction_version: int = 0,
    ) -> Outcome:
        """Kafka's handleAddPartitionsToTransaction: the client's (versions 0-3), or a partition leader's
        for a transaction version 2 producer (``client_transaction_version`` 2)."""
        error, metadata = self._producer_metadata(transactional_id, producer_id, producer_epoch)
        if metadata is None:
            return Outcome(error)
        added = set(partitions)
        if metadata.producer_epoch != producer_epoch:
            return Outcome(ErrorCode.producer_fenced)
        if metadata.pending_transition_in_progress or metadata.state in PREPARED:
            return Outcome(ErrorCode.concurrent_transactions)  # retriable: the client backs off
        if metadata.state == TransactionState.ONGOING and added <= metadata.partitions:
            return Outcome(ErrorCode.none)
        transit = metadata.prepare_add_partitions(added, now_ms, client_transaction_version)
        return Outcome(ErrorCode.none, self._append(metadata, transit))

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """A partition leader's check (AddPartitionsToTxn v4+, verify only, KIP-890 part 1), as Kafka's
        handleVerifyPartitionsInTransaction: NONE for the partitions in the transaction of this producer
        epoch, TRANSACTION_ABORTABLE for the rest (the leader answers it to a client that predates it as
        INVALID_TXN_STATE), CONCURRENT_TRANSACTIONS while it is prepared. A pending write (another AddPartitionsToTxn
        of the same transaction) is not waited for: partitions join ``partitions`` only once written."""
        wanted = list(partitions)
        error, metadata = self._producer_metadata(transactional_id, producer_id, producer_epoch)
        if metadata is None:
            return dict.fromkeys(wanted, error)
        if metadata.producer_epoch != producer_epoch:
            return dict.fromkeys(wanted, ErrorCode.producer_fenced)
        if metadata.state in PREPARED:
            return dict.fromkeys(wanted, ErrorCode.concurrent_transactions)
        return {
            tp: ErrorCode.none if tp in metadata.partitions else ErrorCode.transaction_abortable
            for tp in wanted
        }

    # ---- EndTxn -------------------------------------------------------------------------------------------
    def end_txn(
        self,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_transaction_version: int = 0,
    ) -> Outcome:
        """Kafka's handleEndTransaction from a client; EndTxn v5 speaks transaction version 2. The
        outcome's producer id and epoch are what the producer goes on with (EndTxn v5 answers them)."""
        if supports_epoch_bump(client_transaction_version):
            return self._end_txn_v2(now_ms, transactional_id, producer_id, producer_epoch, commit)
        error, metadata = self._producer_metadata(transactional_id, producer_id, producer_epoch)
        if metadata is None:
            return Outcome(error)
        if producer_epoch != metadata.producer_epoch:
            return Outcome(ErrorCode.producer_fenced)
        if metadata.pending_transition_in_progress:
            return Outcome(ErrorCode.concurrent_transactions)
        wanted_prepare = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        wanted_complete = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
        state = metadata.state
        if state == TransactionState.ONGOING:
            transit = metadata.prepare_abort_or_commit(wanted_prepare, now_ms)
            return self._prepared(metadata, transit)
        if state == wanted_complete:
            return _answer(metadata)  # a retry of an EndTxn already done
        if state == wanted_prepare:
            return Outcome(ErrorCode.concurrent_transactions)
        return Outcome(ErrorCode.invalid_txn_state)

    def _end_txn_v2(
        self, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> Outcome:
        """Kafka's endTransaction for transaction version 2: the request carries the epoch before its
        bump, so a retry is told apart from the next transaction's EndTxn by the epoch (the table in
        Kafka's TransactionCoordinator: a retry of a completed EndTxn is NONE, the same epoch in Empty
        or Complete* may only abort, bumping again)."""
        if not transactional_id:
            return Outcome(ErrorCode.invalid_request)
        error = self.coordinator_error(transactional_id)
        if error != ErrorCode.none:
            return Outcome(error)
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            return Outcome(ErrorCode.invalid_producer_id_mapping)
        state = metadata.state
        retry_on_overflow = (
            metadata.previous_producer_id == producer_id
            and producer_epoch == SHORT_MAX - 1
            and metadata.producer_epoch == 0
        )
        retry_on_epoch_bump = metadata.producer_epoch == producer_epoch + 1
        current = producer_epoch == metadata.producer_epoch
        if state in PREPARED:
            # The current epoch here is the next transaction's EndTxn, sent by the producer that was
            # answered this epoch while its previous transaction's markers are still in flight. Kafka's
            # table fences it; ours waits (CONCURRENT_TRANSACTIONS below), as our markers take longer.
            valid_epoch = retry_on_epoch_bump or (current and not UNSAFE_FENCE_NEXT_END_TXN_FOR_TESTS)
        elif state in COMPLETED:
            valid_epoch = retry_on_epoch_bump or retry_on_overflow or current
        else:
            valid_epoch = current
        is_retry = retry_on_epoch_bump or retry_on_overflow
        if _awaiting_rotation(metadata, producer_id, producer_epoch):
            return Outcome(ErrorCode.concurrent_transactions)
        if metadata.producer_id != producer_id and not retry_on_overflow:
            return Outcome(ErrorCode.invalid_producer_id_mapping)
        if not valid_epoch:
            return Outcome(ErrorCode.producer_fenced)
        if metadata.pending_transition_in_progress or (state in PREPARED and current):
            return Outcome(ErrorCode.concurrent_transactions)
        wanted_prepare = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        wanted_complete = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
        if state == TransactionState.ONGOING:
            return self._prepare_v2(now_ms, metadata, wanted_prepare, no_partition_added=False)
        if state == wanted_prepare:
            return Outcome(ErrorCode.concurrent_transactions)
        if state == wanted_complete and is_retry:
            return _answer(metadata)
        idle = (TransactionState.EMPTY, *COMPLETED)
        if not commit and state in idle and not is_retry:
            return self._prepare_v2(now_ms, metadata, wanted_prepare, no_partition_added=True)
        return Outcome(ErrorCode.invalid_txn_state)

    def _prepare_v2(
        self,
        now_ms: int,
        metadata: TransactionMetadata,
        state: TransactionState,
        no_partition_added: bool,
    ) -> Outcome:
        """PrepareCommit or PrepareAbort with the epoch bumped, taking the next producer id first where
        the bump exhausts the epoch."""
        next_producer_id = NO_PRODUCER_ID
        if metadata.is_producer_epoch_exhausted:
            generated = self.producer_ids()
            if generated.error != ErrorCode.none:
                return Outcome(generated.error)
            next_producer_id = generated.producer_id
        transit = metadata.prepare_abort_or_commit(state, now_ms, 2, next_producer_id, no_partition_added)
        return self._prepared(metadata, transit)

    def _prepared(self, metadata: TransactionMetadata, transit: TxnTransit) -> Outcome:
        """Writes Prepare*; answers the id and epoch the transaction completes with (Kafka answers with
        prepareComplete's: after an overflow, the next producer id at epoch 0)."""
        if supports_epoch_bump(transit.client_transaction_version) and transit.next_producer_id >= 0:
            producer = (transit.next_producer_id, 0)
        else:
            producer = (transit.producer_id, transit.producer_epoch)
        return Outcome(ErrorCode.none, self._append(metadata, transit), *producer)

    # ---- the result of a write ------------------------------------------------------------------------------
    def complete_append(self, append: LogAppend, error: ErrorCode) -> ErrorCode:
        """Applies the written state, or drops the pending one; the error to answer. A written Prepare*
        queues the transaction's markers."""
        metadata = self.transactions.get(append.transactional_id)
        if (
            metadata is None
            or self.coordinator_epochs.get(append.txn_log_partition) != append.coordinator_epoch
        ):
            return ErrorCode.not_coordinator  # unloaded meanwhile: the new coordinator has the state
        if metadata.pending_state != append.transit.state:
            return ErrorCode.not_coordinator
        if error != ErrorCode.none:
            metadata.abort_transition()
            if append.transit.state in COMPLETED:
                self._completions_due.add(append.transactional_id)  # written again by the next tick
            return APPEND_ERRORS.get(error, error)
        metadata.complete_transition(append.transit)
        if metadata.state == TransactionState.DEAD:
            del self.transactions[append.transactional_id]
        elif metadata.state in PREPARED:
            self._queue_markers(metadata, append.coordinator_epoch)
        return ErrorCode.none

    def _queue_markers(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        self.markers.add(
            PendingMarkers(
                metadata.transactional_id,
                metadata.producer_id,
                metadata.producer_epoch,
                metadata.state == TransactionState.PREPARE_COMMIT,
                coordinator_epoch,
                self.partition_for(metadata.transactional_id),
                set(metadata.partitions),
                transaction_version=metadata.client_transaction_version,
            )
        )

    def settle_markers(
        self, sent: MarkerRequest, response: WriteTxnMarkersResponse | None
    ) -> dict[TopicPartition, ErrorCode]:
        """A WriteTxnMarkers answered (None: failed as a whole); the errors seen."""
        settled = self.markers.handle_response(sent, response)
        self._completions_due.update(settled.completed)
        return settled.errors

    def due_appends(self, now_ms: int) -> list[LogAppend]:
        """CompleteCommit / CompleteAbort of the transactions whose markers are all written."""
        self._completions_due.update(self.markers.take_done())
        appends = []
        for txn_id in sorted(self._completions_due):
            metadata = self.transactions.get(txn_id)
            if metadata is None or metadata.state not in PREPARED:
                self._completions_due.discard(txn_id)
            elif not metadata.pending_transition_in_progress:
                self._completions_due.discard(txn_id)
                appends.append(self._append(metadata, metadata.prepare_complete(now_ms)))
        return appends

    # ---- timeouts -------------------------------------------------------------------------------------------
    def timed_out_transactions(self, now_ms: int) -> list[str]:
        """Kafka's timedOutTransactions: the ids whose ongoing transaction is past its timeout and has no
        pending write."""
        return [txn_id for txn_id, metadata in self.transactions.items() if _timed_out(metadata, now_ms)]

    def abort_timed_out_transaction(self, now_ms: int, transactional_id: str) -> LogAppend | None:
        """PrepareAbort with a bumped epoch for one timed-out transaction, so the producer that let it
        expire is fenced; None where it is no longer due or no producer id could be taken (next round)."""
        metadata = self.transactions.get(transactional_id)
        if metadata is None or not _timed_out(metadata, now_ms):
            return None
        fence = self._fence(now_ms, metadata)
        return None if isinstance(fence, ErrorCode) else fence

    def abort_timed_out(self, now_ms: int) -> list[LogAppend]:
        """Kafka's abortTimedOutTransactions: the aborts of every timed-out transaction."""
        aborts = (self.abort_timed_out_transaction(now_ms, t) for t in self.timed_out_transactions(now_ms))
        return [append for append in aborts if append is not None]

    def expire_transactional_ids(self, now_ms: int, expiration_ms: int) -> list[LogAppend]:
        """Kafka's removeExpiredTransactionalIds: a tombstone for each id with no transaction in progress
        whose last update is ``transactional.id.expiration.ms`` old; it is forgotten once written."""
        idle = (TransactionState.EMPTY, *COMPLETED)
        return [
            self._append(metadata, metadata.prepare_dead(now_ms))
            for metadata in list(self.transactions.values())
            if metadata.state in idle
            and not metadata.pending_transition_in_progress
            and metadata.txn_last_update_timestamp_ms + expiration_ms <= now_ms
        ]

    # ---- coordinator ownership -------------------------------------------------------------------------
    def begin_loading(self, partition: int) -> None:
        self.loading.add(partition)

    def load_partition(
        self, partition: int, coordinator_epoch: int, records: Iterable[tuple[bytes | None, bytes | None]]
    ) -> None:
        """Replays a ``__transaction_state`` partition (the last record of each id wins, a tombstone
        forgets it) and queues the markers of the transactions left prepared."""
        self._drop(partition)
        loaded: dict[str, TransactionMetadata] = {}
        for key, value in records:
            txn_id = parse_key(key) if key is not None else None
            if txn_id is None:
                continue
            parsed = parse_value(value)
            if parsed is None or parsed.state == TransactionState.DEAD:
                loaded.pop(txn_id, None)
            else:
                loaded[txn_id] = TransactionMetadata.from_log(txn_id, parsed)
        self.transactions.update(loaded)
        self.coordinator_epochs[partition] = coordinator_epoch
        self.loading.discard(partition)
        for metadata in loaded.values():
            if metadata.state in PREPARED:
                self._queue_markers(metadata, coordinator_epoch)

    def unload_partition(self, partition: int) -> None:
        self._drop(partition)
        self.loading.discard(partition)

    def _drop(self, partition: int) -> None:
        self.coordinator_epochs.pop(partition, None)
        self.markers.remove_txn_log_partition(partition)
        for txn_id in [t for t in self.transactions if self.partition_for(t) == partition]:
            del self.transactions[txn_id]
            self._completions_due.discard(txn_id)

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)


def _answer(metadata: TransactionMetadata) -> Outcome:
    """NONE with the producer's current id and epoch (a retry of an EndTxn already done)."""
    return Outcome(ErrorCode.none, None, metadata.producer_id, metadata.producer_epoch)


def _timed_out(metadata: TransactionMetadata, now_ms: int) -> bool:
    return (
        metadata.state == TransactionState.ONGOING
        and not metadata.pending_transition_in_progress
        and metadata.txn_start_timestamp_ms + metadata.txn_timeout_ms < now_ms
    )


def _awaiting_rotation(metadata: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """The producer was answered the next producer id at epoch 0 by an EndTxn that exhausted the epoch,
    and the transaction is still completing under the old id: it waits (Kafka checks the pending
    transition before the id mapping)."""
    return (
        metadata.next_producer_id != NO_PRODUCER_ID
        and producer_id == metadata.next_producer_id
        and producer_epoch == 0
        and (metadata.state in PREPARED or metadata.pending_transition_in_progress)
    )


def _is_valid_producer_id(metadata: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Kafka's isValidProducerId: a recovering producer may go on unless another id has taken over: the
    metadata is new, the id is current, or it is the previous id at an exhausted epoch (a retried
    rotation whose answer was lost)."""
    return (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == metadata.producer_id
        or (producer_id == metadata.previous_producer_id and is_epoch_exhausted(producer_epoch))
    )
