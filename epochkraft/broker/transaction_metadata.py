"""One transactional id's state on its coordinator (Kafka's TransactionMetadata).

A change is prepared as a ``TxnTransit`` (the record to write) and marks the metadata with a pending
state; the state changes only when the record is in ``__transaction_state`` (``complete_transition``), or
the pending state is dropped if the write fails (``abort_transition``), as Kafka's prepareTransitionTo /
completeTransitionTo.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from epochkraft.broker.transaction_log import TopicPartition, TransactionLogValue, TransactionState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767

# The states each state may be reached from (Kafka's TransactionState.validPreviousStates).
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.EMPTY: frozenset(
        {
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        }
    ),
    TransactionState.ONGOING: frozenset(
        {
            TransactionState.ONGOING,
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        }
    ),
    TransactionState.PREPARE_COMMIT: frozenset({TransactionState.ONGOING}),
    # Transaction version 2 aborts a transaction that added no partition too (Kafka 4.x).
    TransactionState.PREPARE_ABORT: frozenset(
        {
            TransactionState.ONGOING,
            TransactionState.PREPARE_EPOCH_FENCE,
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        }
    ),
    TransactionState.COMPLETE_COMMIT: frozenset({TransactionState.PREPARE_COMMIT}),
    TransactionState.COMPLETE_ABORT: frozenset({TransactionState.PREPARE_ABORT}),
    TransactionState.DEAD: frozenset(
        {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
    ),
    TransactionState.PREPARE_EPOCH_FENCE: frozenset({TransactionState.ONGOING}),
}


def supports_epoch_bump(transaction_version: int) -> bool:
    """Kafka's TransactionVersion.supportsEpochBump: from transaction version 2 (KIP-890 part 2) each
    transaction ends with the producer's epoch bumped."""
    return transaction_version >= 2


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing, so an id is rotated at Short.MAX_VALUE - 1."""
    return epoch >= SHORT_MAX - 1


class IllegalTransition(Exception):
    """A transition Kafka's TransactionMetadata refuses with IllegalStateException."""


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The metadata a prepared transition leads to (Kafka's TxnTransitMetadata)."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    def log_value(self) -> TransactionLogValue:
        return TransactionLogValue(
            self.producer_id,
            self.producer_epoch,
            self.txn_timeout_ms,
            self.state,
            self.partitions,
            self.txn_last_update_timestamp_ms,
            self.txn_start_timestamp_ms,
            self.previous_producer_id,
            self.next_producer_id,
            self.client_transaction_version,
        )


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    pending_state: TransactionState | None = None
    next_producer_id: int = NO_PRODUCER_ID  # the id a transaction whose epoch overflowed ends with
    client_transaction_version: int = 0  # the transaction version its producer's requests speak

    @classmethod
    def from_log(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        return cls(
            transactional_id,
            value.producer_id,
            value.previous_producer_id,
            value.producer_epoch,
            NO_PRODUCER_EPOCH,
            value.txn_timeout_ms,
            value.state,
            set(value.partitions),
            value.txn_start_timestamp_ms,
            value.txn_last_update_timestamp_ms,
            next_producer_id=value.next_producer_id,
            client_transaction_version=value.client_transaction_version,
        )

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # ---- prepared transitions ---------------------------------------------------------------------------
    def _transit(self, state: TransactionState, now_ms: int, **changes: object) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: {self.pending_state} is still pending")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        transit = TxnTransit(
            self.producer_id,
            self.previous_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            state,
            frozenset(self.partitions),
            self.txn_start_timestamp_ms,
            now_ms,
            self.next_producer_id,
            self.client_transaction_version,
        )
        self.pending_state = state
        return replace(transit, **changes)  # type: ignore[arg-type]

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | None:
        """Kafka's prepareIncrementProducerEpoch; None where the producer is fenced (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: epoch {self.producer_epoch} is exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:  # a fresh initialization
            epochs = (bumped, NO_PRODUCER_EPOCH)
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epochs = (bumped, self.producer_epoch)  # the producer recovers (KIP-360): bump again
        elif expected_epoch == self.last_producer_epoch:
            epochs = (self.producer_epoch, self.last_producer_epoch)  # a retry of a bump already done
        else:
            return None
        return self._transit(
            TransactionState.EMPTY,
            now_ms,
            producer_epoch=epochs[0],
            last_producer_epoch=epochs[1],
            txn_timeout_ms=txn_timeout_ms,
            partitions=frozenset(),
            txn_start_timestamp_ms=-1,
        )

    def prepare_producer_id_rotation(
        self, producer_id: int, txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """Kafka's prepareProducerIdRotation: a new id at epoch 0 once the epoch is exhausted."""
        return self._transit(
            TransactionState.EMPTY,
            now_ms,
            producer_id=producer_id,
            previous_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            partitions=frozenset(),
            txn_start_timestamp_ms=-1,
        )

    def prepare_fence_producer_epoch(
        self, now_ms: int, transaction_version: int = 0, next_producer_id: int = NO_PRODUCER_ID
    ) -> TxnTransit:
        """Kafka's prepareFenceProducerEpoch followed by endTransaction(ABORT) from the coordinator, in the
        cluster's ``transaction_version``: the PrepareAbort written carries a bumped epoch (PrepareEpochFence
        itself is never written), so the abort markers fence the producer that was mid-transaction. Below 2
        the fence takes epoch + 1, Short.MAX included (kept for fencing); from 2 the fence's own bump is
        dropped and prepareAbortOrCommit bumps once (Kafka 4.1+), with the ``next_producer_id`` the caller
        takes where that exhausts the epoch."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence at epoch {SHORT_MAX}")
        if self.state != TransactionState.ONGOING:
            raise IllegalTransition(f"{self.transactional_id}: fencing in {self.state.kafka_name}")
        if supports_epoch_bump(transaction_version):
            return self.prepare_abort_or_commit(
                TransactionState.PREPARE_ABORT, now_ms, transaction_version, next_producer_id
            )
        return self._transit(
            TransactionState.PREPARE_ABORT,
            now_ms,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            next_producer_id=NO_PRODUCER_ID,
            client_transaction_version=transaction_version,
        )

    def prepare_add_partitions(
        self, partitions: set[TopicPartition], now_ms: int, client_transaction_version: int = 0
    ) -> TxnTransit:
        starting = self.state in (
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        )
        return self._transit(
            TransactionState.ONGOING,
            now_ms,
            partitions=frozenset(self.partitions | partitions),
            txn_start_timestamp_ms=now_ms if starting else self.txn_start_timestamp_ms,
            client_transaction_version=client_transaction_version,
        )

    def prepare_abort_or_commit(
        self,
        state: TransactionState,
        now_ms: int,
        client_transaction_version: int = 0,
        next_producer_id: int = NO_PRODUCER_ID,
        no_partition_added: bool = False,
    ) -> TxnTransit:
        """Kafka's prepareAbortOrCommit: with transaction version 2 the epoch is bumped (the caller takes a
        ``next_producer_id`` first where that exhausts it); an abort of a transaction that added nothing
        starts and ends now."""
        epochs = (self.producer_epoch, self.last_producer_epoch)
        if supports_epoch_bump(client_transaction_version):
            if self.producer_epoch >= SHORT_MAX:  # the log's epoch is an int16
                raise IllegalTransition(f"{self.transactional_id}: cannot bump epoch {self.producer_epoch}")
            epochs = (self.producer_epoch + 1, self.producer_epoch)
        return self._transit(
            state,
            now_ms,
            producer_epoch=epochs[0],
            last_producer_epoch=epochs[1],
            txn_start_timestamp_ms=now_ms if no_partition_added else self.txn_start_timestamp_ms,
            next_producer_id=next_producer_id,
            client_transaction_version=client_transaction_version,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Kafka's prepareComplete: after an epoch overflow (transaction version 2) the transaction ends
        with the next producer id at epoch 0, the last epoch kept as the one the producer last saw."""
        done = (
            TransactionState.COMPLETE_COMMIT
            if self.state == TransactionState.PREPARE_COMMIT
            else TransactionState.COMPLETE_ABORT
        )
        if self.overflowed:
            return self._transit(
                done,
                now_ms,
                producer_id=self.next_producer_id,
                previous_producer_id=self.producer_id,
                producer_epoch=0,
                next_producer_id=NO_PRODUCER_ID,
                partitions=frozenset(),
            )
        return self._transit(done, now_ms, partitions=frozenset(), next_producer_id=NO_PRODUCER_ID)

    @property
    def overflowed(self) -> bool:
        """A transaction version 2 transaction whose bump took the last epoch: it ends with a new id."""
        return (
            supports_epoch_bump(self.client_transaction_version) and self.next_producer_id != NO_PRODUCER_ID
        )

    def prepare_dead(self, now_ms: int) -> TxnTransit:
        return self._transit(TransactionState.DEAD, now_ms, partitions=frozenset())

    # ---- outcome of the write ------------------------------------------------------------------------
    def complete_transition(self, transit: TxnTransit) -> None:
        """Kafka's completeTransitionTo: the record is written; the metadata becomes the transit's."""
        if self.pending_state != transit.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state} with {self.pending_state} pending"
            )
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp_ms = transit.txn_start_timestamp_ms
        self.txn_last_update_timestamp_ms = transit.txn_last_update_timestamp_ms
        self.next_producer_id = transit.next_producer_id
        self.client_transaction_version = transit.client_transaction_version
        self.pending_state = None

    def abort_transition(self) -> None:
        self.pending_state = None
