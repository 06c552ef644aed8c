"""Asyncio edge of the transaction coordinator: ``__transaction_state`` writes, marker sending, timers.

The sans-IO TransactionCoordinator decides; this class writes the records it decides on to
``__transaction_state`` (acks=all) before answering, loads a partition's transactions when this broker
becomes its leader, sends the queued WriteTxnMarkers to the partitions' leaders over the inter-broker
listener (Kafka's TransactionMarkerChannelManager: one request in flight per broker, retried every
``MARKER_RETRY_S`` until settled), writes CompleteCommit/CompleteAbort once every marker is written, and
aborts transactions past their timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from kio.schema.add_partitions_to_txn.v5 import request as ap5
from kio.schema.add_partitions_to_txn.v5.response import AddPartitionsToTxnResponse
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v2.response import WriteTxnMarkersResponse
from kio.static.primitive import i16, i32

from epochkraft.broker.offsets_topic import create_internal_topic
from epochkraft.broker.partition import Role
from epochkraft.broker.producer_state import SENTINEL_GUARD, VerificationGuard
from epochkraft.broker.transaction_coordinator import PREPARED, LogAppend, Outcome, TransactionCoordinator
from epochkraft.broker.transaction_log import TRANSACTION_STATE_TOPIC, TopicPartition
from epochkraft.broker.transaction_markers import TOPIC_DELETED, MarkerRequest
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import (
    HEADER_SIZE,
    TRANSACTIONAL_BIT,
    build_batch,
    decode_batches,
    parse_header,
)

if TYPE_CHECKING:
    from epochkraft.broker.node import BrokerServices

log = structlog.get_logger()
# Coordinator answers a writer retries: Kafka's ReplicaManager turns them into NOT_ENOUGH_REPLICAS for
# Produce (no metadata refresh), its group coordinator into COORDINATOR_NOT_AVAILABLE for TxnOffsetCommit.
RETRIABLE_COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)
APPEND_TIMEOUT_MS = 10_000
MARKER_RETRY_S = 0.1
MARKER_REQUEST_TIMEOUT_MS = 30_000
MARKER_FAILURE_BACKOFF_S = 1.0
MARKER_SENDER, VERIFIER = "txn-marker-sender", "txn-verifier"  # the inter-broker clients' ids


class TransactionOperation(enum.Enum):
    """What a writer's request version lets its partition leader do with the transaction coordinator
    (Kafka's TransactionSupportedOperation)."""

    DEFAULT_ERROR = "defaultError"  # verify; a partition not in the transaction is INVALID_TXN_STATE
    GENERIC_ERROR = "genericErrorSupported"  # verify; the client knows TRANSACTION_ABORTABLE
    ADD_PARTITION = "addPartition"  # transaction version 2: add the partition to the transaction

    @property
    def supports_epoch_bump(self) -> bool:
        return self is TransactionOperation.ADD_PARTITION


def produce_operation(version: int) -> TransactionOperation:
    """Kafka's AddPartitionsToTxnManager.produceRequestVersionToTransactionSupportedOperation."""
    if version >= 12:
        return TransactionOperation.ADD_PARTITION
    return TransactionOperation.GENERIC_ERROR if version == 11 else TransactionOperation.DEFAULT_ERROR


@dataclass(frozen=True)
class ProduceAdds:
    """What a Produce leader's verifications (or adds) to transactions decided: the partitions refused, with
    the error and message to answer, and the guard each transactional batch is appended with."""

    refused: dict[TopicPartition, tuple[ErrorCode, str | None]]
    guards: dict[TopicPartition, VerificationGuard]


class ProducerTurns:
    """One Produce request of a transactional id at a time through its verification, in arrival order, so a
    producer's pipelined requests reach the partitions' append queues in the order they were sent, as Kafka's
    one request at a time per connection keeps them (a later request must not be appended while an earlier
    one waits for the coordinator). A turn ends only after the callbacks ready when it is left have run: the
    Produce handler starts its appends, which take their places in the append queues at their first step,
    right after its verification returns."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def turn(self, transactional_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(transactional_id, asyncio.Lock())
        self._users[transactional_id] = self._users.get(transactional_id, 0) + 1
        try:
            await lock.acquire()
        except BaseException:
            self._leave(transactional_id)
            raise
        try:
            yield
        finally:
            asyncio.get_running_loop().call_soon(self._release, transactional_id, lock)

    def _release(self, transactional_id: str, lock: asyncio.Lock) -> None:
        lock.release()
        self._leave(transactional_id)

    def _leave(self, transactional_id: str) -> None:
        left = self._users[transactional_id] - 1
        if left:
            self._users[transactional_id] = left
        else:
            del self._users[transactional_id], self._locks[transactional_id]


class TransactionStateTopic:
    """``__transaction_state`` as the coordinator sees it: its partitions' leaders are the coordinators."""

    def __init__(self, node: BrokerServices) -> None:
        self.node = node
        self.num_partitions: int = node.settings.transaction_state_log_num_partitions
        self._creating: asyncio.Task[None] | None = None

    def leader_of(self, partition: int, listener_name: str | None = None) -> tuple[int, str, int] | None:
        image = self.node.cache.image
        reg = image.partition(TRANSACTION_STATE_TOPIC, partition)
        if reg is None or reg.leader < 0:
            return None
        endpoint = image.endpoint(reg.leader, listener_name)
        return None if endpoint is None else (reg.leader, endpoint.host, endpoint.port)

    async def ensure(self) -> None:
        if self.node.cache.image.topic(TRANSACTION_STATE_TOPIC) is not None:
            return
        if self._creating is None or self._creating.done():
            settings = self.node.settings
            self._creating = asyncio.create_task(
                create_internal_topic(
                    self.node,
                    TRANSACTION_STATE_TOPIC,
                    self.num_partitions,
                    settings.transaction_state_log_replication_factor,
                    settings.transaction_state_log_min_isr,
                    settings.transaction_state_log_segment_bytes,
                )
            )

    async def append(self, partition: int, key: bytes, value: bytes | None, leader_epoch: int) -> ErrorCode:
        """Writes a transaction's state, only while this broker still leads the partition in the epoch the
        coordinator loaded it in."""
        records = build_batch([(key, value, (), self.node.now_ms())])
        result = await self.node.replica_manager.append(
            TRANSACTION_STATE_TOPIC, partition, records, -1, APPEND_TIMEOUT_MS, leader_epoch=leader_epoch
        )
        return result.error

    def leader_epoch(self, partition: int) -> int:
        replica = self.node.replica_manager.replica(TRANSACTION_STATE_TOPIC, partition)
        return replica.partition.leader_epoch if replica is not None else -1

    def read_all(self, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        replica = self.node.replica_manager.replica(TRANSACTION_STATE_TOPIC, partition)
        if replica is None:
            return []
        data = replica.log.read(replica.log.log_start_offset, 1 << 62)
        return [(r.key, r.value) for batch in decode_batches(data) for r in batch.records]


class TransactionService:
    def __init__(
        self, node: BrokerServices, coordinator: TransactionCoordinator, state_topic: TransactionStateTopic
    ) -> None:
        self.node = node
        self.coordinator = coordinator
        self.state_topic = state_topic
        # (purpose, broker id) -> its client: markers and verifications each on connections of their own, as
        # Kafka's TransactionMarkerChannelManager and AddPartitionsToTxnManager, so a verification never
        # waits behind a WriteTxnMarkers whose acks=all append is slow (a broker answers in order).
        self._clients: dict[tuple[str, int], KafkaClient] = {}
        self._busy: set[int] = set()  # brokers with a WriteTxnMarkers in flight
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[object]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._producer_turns = ProducerTurns()
        # adds held while their transaction completes, woken when its state's next write ends
        self._write_waiters: dict[str, list[asyncio.Future[None]]] = {}

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._marker_loop(), name="txn-markers"),
            asyncio.create_task(self._timeout_loop(), name="txn-timeouts"),
        ]

    async def stop(self) -> None:
        for task in [*self._loops, *self._tasks]:
            task.cancel()
        for task in [*self._loops, *self._tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for client in self._clients.values():
            await client.close()

    # ---- coordinator ownership --------------------------------------------------------------------------
    async def find_coordinator(
        self, transactional_id: str, listener_name: str | None
    ) -> tuple[ErrorCode, int, str, int]:
        leader = self.state_topic.leader_of(self.coordinator.partition_for(transactional_id), listener_name)
        if leader is None:
            await self.state_topic.ensure()
            return ErrorCode.coordinator_not_available, -1, "", -1
        return (ErrorCode.none, *leader)

    def on_leadership(self, partition: int, leader: bool) -> None:
        """Loads the partition's transactions (coordinator epoch = its leader epoch) or drops them."""
        self._wake_writers_of(partition)  # held adds are answered by the new state (NOT_COORDINATOR, ...)
        if not leader:
            self.coordinator.unload_partition(partition)
            return
        self.coordinator.begin_loading(partition)
        records = self.state_topic.read_all(partition)
        self.coordinator.load_partition(partition, self.state_topic.leader_epoch(partition), records)
        self._wake.set()  # markers of the transactions left prepared

    # ---- requests -----------------------------------------------------------------------------------------
    async def _answer(self, outcome: Outcome) -> ErrorCode:
        """Writes the outcome's record, if any, then the error to answer."""
        if outcome.append is None:
            return outcome.error
        written = await self._write(outcome.append)
        return outcome.error if written == ErrorCode.none else written

    async def _write(self, append: LogAppend) -> ErrorCode:
        try:
            error = await self.state_topic.append(
                append.txn_log_partition, append.key, append.value, append.coordinator_epoch
            )
        except Exception:  # a record that cannot be encoded, a bug: the pending state must not stay
            log.exception("transaction state write failed", transactional_id=append.transactional_id)
            error = ErrorCode.unknown_server_error
        result = self.coordinator.complete_append(append, error)
        if result == ErrorCode.none and append.transit.state in PREPARED:
            self._wake.set()
        self._wake_writers(append.transactional_id)
        return result

    def _wake_writers(self, transactional_id: str) -> None:
        for waiter in self._write_waiters.pop(transactional_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    def _wake_writers_of(self, partition: int) -> None:
        """The held adds of the transactional ids ``__transaction_state``'s ``partition`` holds."""
        for transactional_id in [
            t for t in self._write_waiters if self.coordinator.partition_for(t) == partition
        ]:
            self._wake_writers(transactional_id)

    async def init_producer_id(
        self, transactional_id: str, txn_timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int, int]:
        outcome = self.coordinator.init_producer_id(self.now_ms(), transactional_id, txn_timeout_ms, expected)
        error = await self._answer(outcome)
        if error != ErrorCode.none:
            return error, -1, -1
        return error, outcome.producer_id, outcome.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        client_transaction_version: int = 0,
        hold: bool = False,
    ) -> ErrorCode:
        """Adds the partitions (Kafka's handleAddPartitionsToTransaction). With ``hold`` (a client's own
        AddPartitionsToTxn or AddOffsetsToTxn), an add the coordinator would refuse with
        CONCURRENT_TRANSACTIONS (the producer's previous transaction still completing: its EndTxn answered,
        its markers in flight) waits for the transaction's next write (or a change of this coordinator's
        leadership) and asks again, for at most ``add.partitions.to.txn.retry.backoff.max.ms`` (capped by
        ``request.timeout.ms``) before answering it: the bound and the retry of Kafka's
        ReplicaManager.maybeRetryOnConcurrentTransactions for a partition leader's adds, here for the
        client's, whose next transaction otherwise begins with a refusal and the client's backoff (20 ms
        for a first AddPartitionsToTxn in librdkafka and the Java producer, retry.backoff.ms for
        AddOffsetsToTxn)."""
        settings = self.node.settings
        hold_ms = min(settings.add_partitions_to_txn_retry_backoff_max_ms, settings.request_timeout_ms)
        deadline = time.monotonic() + (hold_ms / 1000 if hold else 0)
        while True:
            outcome = self.coordinator.add_partitions(
                self.now_ms(),
                transactional_id,
                producer_id,
                producer_epoch,
                partitions,
                client_transaction_version,
            )
            remaining = deadline - time.monotonic()
            if outcome.error != ErrorCode.concurrent_transactions or remaining <= 0:
                return await self._answer(outcome)
            await self._next_write(transactional_id, remaining)

    async def _next_write(self, transactional_id: str, timeout_s: float) -> None:
        """Returns once a write of the transactional id's state has ended, or after ``timeout_s``."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._write_waiters.setdefault(transactional_id, []).append(written)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):  # not wait_for: 3.11's can swallow a cancellation
                    await written
        finally:
            waiters = self._write_waiters.get(transactional_id, [])
            if written in waiters:  # not woken (timed out, cancelled): no longer waiting
                waiters.remove(written)
                if not waiters:
                    del self._write_waiters[transactional_id]

    async def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_transaction_version: int = 0,
    ) -> tuple[ErrorCode, int, int]:
        """The error, and the producer id and epoch the producer goes on with (-1 on an error)."""
        outcome = self.coordinator.end_txn(
            self.now_ms(), transactional_id, producer_id, producer_epoch, commit, client_transaction_version
        )
        error = await self._answer(outcome)
        if error != ErrorCode.none:
            return error, -1, -1
        return error, outcome.producer_id, outcome.producer_epoch

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """Asks the transactional id's coordinator whether the partitions are in the producer's ongoing
        transaction (AddPartitionsToTxn v5 ``verify_only``, KIP-890 part 1), as Kafka's
        AddPartitionsToTxnManager does before a transactional write: COORDINATOR_NOT_AVAILABLE while the
        coordinator is unknown or unreachable."""
        return await self._ask_coordinator(transactional_id, producer_id, producer_epoch, partitions, True)

    async def add_for_write(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """A partition leader adds the partitions to a transaction version 2 producer's transaction
        before writing its batch (AddPartitionsToTxn v5 without ``verify_only``, Kafka's
        AddPartitionsToTxnManager with the addPartition operation)."""
        return await self._ask_coordinator(transactional_id, producer_id, producer_epoch, partitions, False)

    async def add_for_produce(
        self,
        transactional_id: str,
        batches: dict[TopicPartition, bytes],
        operation: TransactionOperation = TransactionOperation.ADD_PARTITION,
    ) -> ProduceAdds:
        """Each partition this broker leads whose transactional batch comes from a producer with no
        transaction open there at that epoch is verified to be in the producer's transaction (Produce below
        v12, KIP-890 part 1, while transaction.partition.verification.enable) or added to it first (v12+,
        part 2), as Kafka's ReplicaManager.appendRecordsWithTransactionVerification; the partitions refused,
        with the error to answer, and the guard each transactional batch is appended with. Until a
        partition's first batch of the transaction is appended, the leader appends none of a higher
        sequence."""
        if (
            not operation.supports_epoch_bump
            and not self.node.settings.transaction_partition_verification_enable
        ):
            return ProduceAdds({}, {})
        firsts = {
            tp: b for tp, records in batches.items() if (b := _transactional_batch(records)) is not None
        }
        if not firsts:
            return ProduceAdds({}, {})
        async with self._producer_turns.turn(transactional_id):
            return await self._verify_for_produce(transactional_id, firsts, operation)

    async def _verify_for_produce(
        self,
        transactional_id: str,
        firsts: dict[TopicPartition, tuple[int, int, int]],
        operation: TransactionOperation,
    ) -> ProduceAdds:
        guards: dict[TopicPartition, VerificationGuard] = {}
        answers: dict[TopicPartition, ErrorCode] = {}
        wanted: dict[tuple[int, int], list[TopicPartition]] = {}
        bump = operation.supports_epoch_bump
        for tp in self._begin_verifications(list(firsts), firsts, guards, answers, bump):
            wanted.setdefault(firsts[tp][:2], []).append(tp)
        for producer, partitions in wanted.items():
            if operation.supports_epoch_bump:
                answers |= await self._add_retrying(transactional_id, *producer, partitions, firsts, guards)
            else:
                answers |= await self.verify(transactional_id, *producer, partitions)
        refused = {tp: produce_refusal(e, operation) for tp, e in answers.items() if e != ErrorCode.none}
        return ProduceAdds(refused, guards)

    async def _add_retrying(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        firsts: dict[TopicPartition, tuple[int, int, int]],
        guards: dict[TopicPartition, VerificationGuard],
    ) -> dict[TopicPartition, ErrorCode]:
        """Asks again every ``add.partitions.to.txn.retry.backoff.ms`` while the coordinator answers
        CONCURRENT_TRANSACTIONS (the producer's previous transaction is still being completed: its EndTxn
        answered, its markers in flight) and ``.max.ms``, capped by ``request.timeout.ms``, has not passed
        since the first ask, as Kafka's ReplicaManager.maybeRetryOnConcurrentTransactions. Each round
        begins the verification again (a marker of another epoch written meanwhile ended it) and updates
        ``guards``."""
        settings = self.node.settings
        backoff_s = settings.add_partitions_to_txn_retry_backoff_ms / 1000
        retry_ms = min(settings.add_partitions_to_txn_retry_backoff_max_ms, settings.request_timeout_ms)
        started = time.monotonic()
        answers: dict[TopicPartition, ErrorCode] = {}
        while True:
            answers |= await self.add_for_write(transactional_id, producer_id, producer_epoch, partitions)
            partitions = [tp for tp in partitions if answers[tp] == ErrorCode.concurrent_transactions]
            elapsed_ms = (time.monotonic() - started) * 1000
            if not partitions or elapsed_ms >= retry_ms:
                return answers
            await asyncio.sleep(backoff_s)
            partitions = self._begin_verifications(partitions, firsts, guards, answers, True)

    def _begin_verifications(
        self,
        partitions: list[TopicPartition],
        firsts: dict[TopicPartition, tuple[int, int, int]],
        guards: dict[TopicPartition, VerificationGuard],
        answers: dict[TopicPartition, ErrorCode],
        supports_epoch_bump: bool,
    ) -> list[TopicPartition]:
        """Begins or continues each partition's verification with its first batch, its guard into
        ``guards``; the partitions the coordinator must add, returned. One not led here gets its error in
        ``answers``, one whose transaction is open here (another batch of the producer opened it) NONE."""
        to_add = []
        for tp in partitions:
            started = self._start_verification(tp, *firsts[tp], supports_epoch_bump)
            if isinstance(started, ErrorCode):
                answers[tp] = started
                continue
            guards[tp] = started
            if started is SENTINEL_GUARD:
                answers[tp] = ErrorCode.none
            else:
                to_add.append(tp)
        return to_add

    def _start_verification(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        supports_epoch_bump: bool,
    ) -> VerificationGuard | ErrorCode:
        """The guard of the producer's verification on this leader, which its verification state begins
        or continues with the batch's sequence, or SENTINEL_GUARD when its transaction is open here at
        this epoch and needs no adding (Kafka's UnifiedLog.maybeStartTransactionVerification); the error
        for a partition not led here (maybeStartTransactionVerificationForPartition's getPartitionOrException:
        answered, never appended, even if the leadership arrives while the others are added)."""
        manager = self.node.replica_manager
        replica = manager.replica(*tp)
        if replica is None:
            return manager.missing_partition_error(*tp)
        if replica.partition.role != Role.LEADER:
            return ErrorCode.not_leader_or_follower
        producers = replica.producers
        if producers.has_ongoing_transaction(producer_id, producer_epoch):
            return SENTINEL_GUARD
        entry = producers.maybe_create_verification_state_entry(
            producer_id, base_sequence, producer_epoch, self.now_ms(), supports_epoch_bump=supports_epoch_bump
        )
        return entry.verification_guard

    async def _ask_coordinator(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        verify_only: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        partition = self.coordinator.partition_for(transactional_id)
        leader = self.state_topic.leader_of(partition, self.node.settings.inter_broker_listener_name)
        if leader is None:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        if leader[0] == self.node.node_id and verify_only:
            return self.coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        if leader[0] == self.node.node_id:
            error = await self.add_partitions(transactional_id, producer_id, producer_epoch, partitions, 2)
            return dict.fromkeys(partitions, error)
        client = self._client(leader[0], VERIFIER)
        if client is None:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        request = coordinator_request(transactional_id, producer_id, producer_epoch, partitions, verify_only)
        try:
            response = await client.send(request, AddPartitionsToTxnResponse)
        except Exception as exc:  # the coordinator moved or is down: the client retries
            log.info("transaction coordinator unreachable", coordinator=leader[0], error=str(exc))
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if response.error_code == ErrorCode.cluster_authorization_failed:
            # Fatal to a producer, and about the brokers' own principal: AddPartitionsToTxnManager makes it
            # INVALID_TXN_STATE, which aborts the transaction.
            return dict.fromkeys(partitions, ErrorCode.invalid_txn_state)
        if response.error_code != ErrorCode.none:
            return dict.fromkeys(partitions, response.error_code)
        return {
            (topic.name, p.partition_index): p.partition_error_code
            for result in response.results_by_transaction
            for topic in result.topic_results
            for p in topic.results_by_partition
        }

    # ---- markers and completion -------------------------------------------------------------------------
    def _leader_of(self, tp: TopicPartition) -> int | None:
        image = self.node.cache.image
        if image.topic(tp[0]) is None:
            return TOPIC_DELETED
        reg = image.partition(*tp)
        if reg is None:
            return TOPIC_DELETED
        return reg.leader if reg.leader >= 0 else None

    def _client(self, broker_id: int, purpose: str = MARKER_SENDER) -> KafkaClient | None:
        endpoint = self.node.cache.image.endpoint(broker_id, self.node.settings.inter_broker_listener_name)
        if endpoint is None:
            return None
        client = self._clients.get((purpose, broker_id))
        if client is None or (client.host, client.port) != (endpoint.host, endpoint.port):
            client = self._clients[(purpose, broker_id)] = KafkaClient(
                endpoint.host,
                endpoint.port,
                client_id=f"{purpose}-{self.node.node_id}",
                request_timeout_ms=MARKER_REQUEST_TIMEOUT_MS,
                ssl_context=self.node.security.client_ssl(self.node.listeners.inter_broker_protocol),
            )
        return client

    async def _marker_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), MARKER_RETRY_S)
            self._wake.clear()
            try:
                self._send_markers()
                for append in self.coordinator.due_appends(self.now_ms()):
                    self._spawn(self._write(append))
            except Exception:  # a bug here must not stop markers for good
                log.exception("transaction marker round failed")

    def _send_markers(self) -> None:
        for sent in self.coordinator.markers.requests(self._leader_of, self._busy):
            self._busy.add(sent.broker_id)
            self._spawn(self._send(sent))

    async def _send(self, sent: MarkerRequest) -> None:
        response = None
        try:
            client = self._client(sent.broker_id)
            if client is not None:
                response = await client.send(sent.request, WriteTxnMarkersResponse)
        except Exception as exc:  # lost connection, timeout, refused version: every partition is retried
            log.info("WriteTxnMarkers failed", broker=sent.broker_id, error=str(exc))
            await asyncio.sleep(MARKER_FAILURE_BACKOFF_S)  # the broker is retried after a pause
        finally:
            self._busy.discard(sent.broker_id)
        errors = self.coordinator.settle_markers(sent, response)
        if errors:  # retried at the next round, MARKER_RETRY_S from now
            log.info(
                "WriteTxnMarkers partition errors",
                broker=sent.broker_id,
                errors={f"{t}-{p}": e.name for (t, p), e in errors.items()},
            )
        elif response is not None:
            self._wake.set()  # complete the transactions now

    def _spawn(self, coroutine: Coroutine[object, object, object]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _timeout_loop(self) -> None:
        settings = self.node.settings
        interval = settings.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        last_expiry = self.now_ms()
        while True:
            await asyncio.sleep(interval)
            now = self.now_ms()
            self._abort_timed_out(now)
            if now - last_expiry >= settings.transaction_remove_expired_transaction_cleanup_interval_ms:
                last_expiry = now
                try:
                    expired = self.coordinator.expire_transactional_ids(
                        now, settings.transactional_id_expiration_ms
                    )
                except Exception:  # the loop must go on: timeouts and expiry are retried next round
                    log.exception("expiring transactional ids failed")
                    expired = []
                for append in expired:
                    log.info("expiring transactional id", transactional_id=append.transactional_id)
                    self._spawn(self._write(append))

    def _abort_timed_out(self, now: int) -> None:
        """Aborts each timed-out transaction; one that fails is logged and tried again next round, the
        others go on (Kafka's abortTimedOutTransactions, one id at a time)."""
        for txn_id in self.coordinator.timed_out_transactions(now):
            try:
                append = self.coordinator.abort_timed_out_transaction(now, txn_id)
            except Exception:
                log.exception("aborting timed-out transaction failed", transactional_id=txn_id)
                continue
            if append is not None:
                log.info("aborting timed-out transaction", transactional_id=txn_id)
                self._spawn(self._write(append))


def _transactional_batch(records: bytes) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of a transactional first batch, else None."""
    if len(records) < HEADER_SIZE:
        return None
    header = parse_header(records)
    if not header.attributes & TRANSACTIONAL_BIT:
        return None
    return header.producer_id, header.producer_epoch, header.base_sequence


UNVERIFIED_MESSAGE = "Unable to verify the partition has been added to the transaction. Underlying error: {}"


def verification_error(error: ErrorCode, operation: TransactionOperation) -> ErrorCode:
    """A coordinator's per-partition answer as the leader takes it (Kafka's AddPartitionsToTxnManager):
    PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE as INVALID_TXN_STATE for a client that
    predates it."""
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error == ErrorCode.transaction_abortable and operation is TransactionOperation.DEFAULT_ERROR:
        return ErrorCode.invalid_txn_state
    return error


def produce_refusal(error: ErrorCode, operation: TransactionOperation) -> tuple[ErrorCode, str | None]:
    """A coordinator's answer as Produce gives it, with Kafka's message (ReplicaManager's
    postVerificationCallback): the coordinator busy or unreachable as NOT_ENOUGH_REPLICAS, which every
    producer retries without a metadata refresh, except CONCURRENT_TRANSACTIONS to a transaction version 2
    producer, which gets it as it is."""
    error = verification_error(error, operation)
    if error == ErrorCode.invalid_txn_state:
        return error, "Partition was not added to the transaction"
    busy = error == ErrorCode.concurrent_transactions and not operation.supports_epoch_bump
    if busy or (error in RETRIABLE_COORDINATOR_ERRORS and error != ErrorCode.concurrent_transactions):
        return ErrorCode.not_enough_replicas, UNVERIFIED_MESSAGE.format(error.name.upper())
    return error, None


def coordinator_request(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[TopicPartition],
    verify_only: bool = True,
) -> ap5.AddPartitionsToTxnRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return ap5.AddPartitionsToTxnRequest(
        transactions=(
            ap5.AddPartitionsToTxnTransaction(
                transactional_id=TransactionalId(transactional_id),
                producer_id=ProducerId(producer_id),
                producer_epoch=i16(producer_epoch),
                verify_only=verify_only,
                topics=tuple(
                    ap5.AddPartitionsToTxnTopic(name=TopicName(t), partitions=tuple(i32(i) for i in indexes))
                    for t, indexes in by_topic.items()
                ),
            ),
        )
    )
