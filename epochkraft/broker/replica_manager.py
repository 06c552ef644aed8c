"""The broker's replicas: partition logs, leader/follower transitions, produce and fetch, ISR actions.

This is the asyncio driver of the sans-IO ``ReplicaSet``: it reads the clock, feeds the replica set
metadata, appends, follower fetches, AlterPartition answers and ticks, and carries out what it decides
(become leader or follower on the logs and fetchers, send AlterPartition, release acks=all producers and
long-polling consumers when a high watermark moves).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Unpack

import structlog

from epochkraft.broker.fetch_messages import FetchParams, PartitionFetch, fetch_messages
from epochkraft.broker.fetch_rules import check_leader_epoch
from epochkraft.broker.fetch_session import FetchManager, FetchSessionCache
from epochkraft.broker.log import LogConfig, LogManager, PartitionLog
from epochkraft.broker.log.partition_log import NO_TIMESTAMP, TOPIC_CONFIGS
from epochkraft.broker.log_dir_failure import LogDirFailureChannel
from epochkraft.broker.log_lifecycle import LogLifecycle
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.partition import Partition
from epochkraft.broker.produce_validation import BatchValidator
from epochkraft.broker.producer_state import (
    BatchMetadata,
    EndTxnMarker,
    ProducerStateTable,
    VerificationGuard,
    end_txn_marker_batch,
    read_end_txn_marker,
)
from epochkraft.broker.replica_set import IsrEvent, ReplicaOutputs, ReplicaSet, Transition
from epochkraft.broker.settings import BrokerSettings
from epochkraft.broker.slices import Slicer
from epochkraft.metadata.config_schema import TOPIC_CONFIGS as TOPIC_CONFIG_DEFS
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.fetch_response import Answer
from epochkraft.protocol.records import (
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    RecordValidationError,
    iter_batches,
)

if TYPE_CHECKING:
    from kio.schema.alter_partition.v3.response import AlterPartitionResponse

    from epochkraft.broker.alter_partition_manager import AlterPartitionRequest
    from epochkraft.broker.fetcher import ReplicaFetcher
    from epochkraft.metrics.documents import PartitionMetrics
    from epochkraft.metrics.event_schema import EventFields
    from epochkraft.metrics.events import EventLog

log = structlog.get_logger()


# The broker-level dynamic configs a log's config reads: each log config's broker synonyms (or its own
# name), where MetadataCache.topic_config looks for a topic's value below the topic's own.
BROKER_LOG_CONFIGS = frozenset(
    synonym
    for name in TOPIC_CONFIGS
    for synonym in (TOPIC_CONFIG_DEFS[name].synonyms if name in TOPIC_CONFIG_DEFS else ()) or (name,)
)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Replica:
    """A partition hosted on this broker: the sans-IO core, its log, producer state, waiters."""

    partition: Partition
    log: PartitionLog
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    # acks=all waiters: (required offset, sequence, future) ordered by offset
    hw_waiters: list[tuple[int, int, asyncio.Future[ErrorCode]]] = field(default_factory=list)
    # long-polling fetches waiting on this replica: one future each, shared by all the partitions it reads
    fetch_waiters: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, int]:
        return self.partition.topic, self.partition.index

    @property
    def last_stable_offset(self) -> int:
        return self.producers.last_stable_offset(self.partition.high_watermark, self.log.log_start_offset)

    def truncate_to(self, offset: int) -> None:
        """Cuts the log at ``offset`` (a follower diverged from its leader) and reloads the producer state
        from what is left, as Kafka's UnifiedLog.truncateTo and loadProducerState: the table is rebuilt,
        not edited, so a producer keeps the epoch and coordinator epoch of its last batch or marker left
        in the log and loses those of the ones cut off. At or past the log end nothing is cut and the
        producer state stays as it is."""
        plog = self.log
        cut = offset < plog.log_end_offset
        plog.truncate_to(offset)
        self.partition.high_watermark = min(self.partition.high_watermark, plog.log_end_offset)
        if cut:
            self.producers.reset()
            plog.rebuild_producer_state(self.producers, self.partition.high_watermark)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Starts the log afresh at ``offset``, with no producer state (Kafka's truncateFullyAndStartAt)."""
        self.log.truncate_fully_and_start_at(offset)
        self.producers.reset()


def wake(replica: Replica) -> None:
    """Wakes every long-polling fetch waiting on this replica; each checks whether to read again."""
    waiters, replica.fetch_waiters = replica.fetch_waiters, set()
    for future in waiters:
        if not future.done():
            future.set_result(None)


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    # (index of the record in its batch, message) per invalid record: Produce's record_errors (v8+)
    record_errors: tuple[tuple[int, str], ...] = ()
    log_append_time: int = NO_TIMESTAMP  # Produce's log_append_time_ms: -1 unless LogAppendTime


class ReplicaManager:
    """Drives the sans-IO ``ReplicaSet`` with asyncio: logs, acks=all futures, long-poll wakeups, fetchers
    and the AlterPartition sender loop."""

    def __init__(
        self,
        node_id: int,
        settings: BrokerSettings,
        logs: LogManager,
        cache: MetadataCache,
        broker_epoch: Callable[[], int],
        send_alter_partition: Callable[[AlterPartitionRequest], Awaitable[AlterPartitionResponse]],
        events: EventLog | None = None,
    ) -> None:
        self.node_id = node_id
        self.settings = settings
        self.logs = logs
        self.cache = cache
        self.broker_epoch = broker_epoch
        # (partition, producer id, epoch) whose OUT_OF_ORDER_SEQUENCE_NUMBER was logged: once each, so a
        # client resending a refused batch cannot fill the log
        self._out_of_order_logged: set[tuple[tuple[str, int], int, int]] = set()
        self.send_alter_partition = send_alter_partition
        self.events = events
        self.log_dir_failures = LogDirFailureChannel(logs.data_dir)
        # called once when a background task dies of an unexpected error: the daemon stops
        self.on_fatal: Callable[[str], None] | None = None
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.replica_set = ReplicaSet(
            node_id,
            broker_epoch,
            cache,
            self,
            replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            min_insync_replicas=settings.min_insync_replicas,
            unsafe_pre_kip903=settings.unsafe_pre_kip903_mode,
        )
        self.alter_manager = self.replica_set.alter
        self._alter_wakeup = asyncio.Event()
        self._seq = itertools.count()
        self.fetchers: dict[int, ReplicaFetcher] = {}  # by source broker id
        # the leader's incremental fetch sessions (KIP-227), for followers and consumers alike
        self.fetch_manager = FetchManager(
            FetchSessionCache(
                settings.max_incremental_fetch_session_cache_slots,
                settings.min_incremental_fetch_session_eviction_ms,
            )
        )
        self.fetcher_factory: Callable[[int], ReplicaFetcher] | None = None
        self.leadership_listeners: list[Callable[[str, int, bool], None]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.stopped = False
        self.lifecycle = LogLifecycle(self)
        self.validator = BatchValidator(settings.produce_validation_threads)
        self._log_configs: dict[str, LogConfig] = {}  # topic -> its logs' config (topic_log_config)
        # per partition: resolved once the latest produce to it has been appended (or refused)
        self._append_turns: dict[tuple[str, int], asyncio.Future[None]] = {}
        # The replicas with acks=all waiters: each replica-set step looks at these, not at every replica
        # (a follower's fetch of thousands of partitions is thousands of steps).
        self._waiting: dict[tuple[str, int], Replica] = {}

    @property
    def stats(self) -> dict[str, int]:
        return self.replica_set.stats

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.tasks += [
            asyncio.create_task(self._alter_partition_loop(), name="alter-partition"),
            asyncio.create_task(self._isr_shrink_loop(), name="isr-shrink"),
            asyncio.create_task(self._checkpoint_loop(), name="hw-checkpoint"),
            asyncio.create_task(self._producer_expiration_loop(), name="producer-expiration"),
            asyncio.create_task(self.lifecycle.run(), name="log-retention"),
            asyncio.create_task(self.lifecycle.run_cleaner(), name="log-cleaner"),
        ]
        for task in self.tasks:
            task.add_done_callback(self._background_task_done)

    def _background_task_done(self, task: asyncio.Task[None]) -> None:
        """A background task runs until the broker stops; one that ends otherwise is logged and stops
        the daemon rather than vanish (its work would silently stop being done)."""
        if self.stopped or task.cancelled():
            return
        error = task.exception()
        if error is None:  # finished its work (e.g. the cleaner with log.cleaner.enable=false)
            return
        reason = f"background task {task.get_name()} ended: {error!r}"
        log.critical("background task failed; stopping the broker", task=task.get_name(), exc_info=error)
        if self.on_fatal is not None:
            self.on_fatal(reason)

    def log_dir_failed(self, message: str, error: OSError) -> None:
        """A storage error on the data dir (a write, flush or checkpoint failed): the dir goes offline."""
        self.log_dir_failures.maybe_add_offline_log_dir(message, error)

    async def stop(self) -> None:
        """Stops for good: no fetcher starts again and none appends or truncates after this returns."""
        self.stopped = True
        for task in self.tasks:
            task.cancel()
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        for fetcher in fetchers:
            await fetcher.stop()
        for replica in self.replicas.values():
            self._fail_waiters(replica, ErrorCode.not_leader_or_follower)
            wake(replica)
        self.validator.close()
        self.checkpoint_high_watermarks()
        self.logs.flush_all()

    def _emit(self, event: str, **fields: Unpack[EventFields]) -> None:
        if self.events is not None:
            self.events.emit(event, **fields)

    # ---- ReplicaHost (storage for the replica set) -----------------------------------------------------------
    def open_replica(self, key: tuple[str, int]) -> int:
        self.logs.get_or_create(*key, self.topic_log_config(key[0]))
        return self.logs.high_watermarks.get(key, 0)

    def log_end_offset(self, key: tuple[str, int]) -> int:
        replica = self.replicas.get(key)
        if replica is not None:
            return replica.log.log_end_offset
        return self.logs.get_or_create(*key, self.topic_log_config(key[0])).log_end_offset

    def topic_log_config(self, topic: str) -> LogConfig:
        """The broker's log.* defaults overridden by the topic's configs (and dynamic broker defaults),
        built once per topic and kept until a config it reads changes (``_apply_config_changes``)."""
        config = self._log_configs.get(topic)
        if config is None:
            image = self.cache.image
            configs = {name: image.topic_config(topic, name) for name in TOPIC_CONFIGS}
            config = self.logs.config.with_topic_configs({k: v for k, v in configs.items() if v is not None})
            self._log_configs[topic] = config
        return config

    def _apply_config_changes(self, changes: Changes) -> None:
        """Kafka's TopicConfigHandler.processConfigChanges -> LogManager.updateTopicConfig: a topic's new
        LogConfig, built once, goes to that topic's logs only, and only when a config a log reads
        changed (a broker-level one reaches every topic's, as Kafka's DynamicLogConfig)."""
        image = self.cache.image
        for deleted in changes.deleted_topics:
            self._log_configs.pop(deleted.name, None)
        if changes.broker_configs & BROKER_LOG_CONFIGS:
            self._log_configs.clear()
            topics: list[str] = list(image.topic_ids)
        else:
            topics = [t for t, names in changes.topic_configs.items() if not names.isdisjoint(TOPIC_CONFIGS)]
        for name in topics:
            self._log_configs.pop(name, None)
            info = image.topic(name)
            if info is not None:
                self.logs.update_topic_config(name, info.partitions, self.topic_log_config(name))

    # ---- metadata ----------------------------------------------------------------------------------------
    async def on_metadata(self, changes: Changes) -> None:
        """Applies partition changes from the metadata log, then carries out what the replica set decided,
        in slices (epochkraft/broker/slices.py): opening thousands of logs and writing their leader-epoch
        checkpoints at once would hold back heartbeats and replica fetches for seconds. The replica set
        takes the whole change first; a request for a partition not carried out yet is answered as
        before the change. Partitions this broker no longer holds are stopped before the first slice
        ends, as Kafka's ReplicaManager.applyDelta stops deleted and moved-away partitions first: no
        produce or fetch is served meanwhile by a partition the metadata has taken away (a key's removal
        comes before its new partition in the list, so that order holds)."""
        slicer = Slicer()
        self._apply_config_changes(changes)
        await self._open_new_logs(changes, slicer)
        outputs = self.replica_set.apply_metadata(now_ms(), changes)
        for transition in outputs.transitions:
            if transition.kind == "removed":
                self._carry_out(transition)
        # before the slices: the ISR requests (an unclean leader's RECOVERED report) and the HWs a fencing
        # or a min ISR change freed on replicas that exist already; a large change's slices take seconds
        self._after_replica_set(ReplicaOutputs(hw_moved=outputs.hw_moved, isr_events=outputs.isr_events))
        for transition in outputs.transitions:
            if transition.kind != "removed":
                self._carry_out(transition)
                await slicer.turn()
        self._after_replica_set(ReplicaOutputs(hw_moved=outputs.hw_moved))  # the new leaders' replicas too

    async def _open_new_logs(self, changes: Changes, slicer: Slicer) -> None:
        """Opens (creating on disk) the logs of the partitions this change gives this broker, in slices,
        so the replica set's synchronous pass finds them open. Topics deleted by the same change are
        skipped here: their old log goes with the removal carried out first, and the new one is opened when
        its transition is carried out."""
        deleted = {t.name for t in changes.deleted_topics}
        image = self.cache.image
        for key in sorted(changes.partitions):
            if key in self.replica_set.partitions or key[0] in deleted or key in self.logs.logs:
                continue
            registration = image.partition(*key)
            if registration is None or self.node_id not in registration.replicas:
                continue
            self.logs.get_or_create(*key, self.topic_log_config(key[0]))
            await slicer.turn()

    def _carry_out(self, transition: Transition) -> None:
        key = transition.key
        if transition.kind == "removed":
            self._remove(key, was_leader=transition.was_leader)
            return
        replica = self.replicas.get(key)
        if replica is None:
            partition = self.replica_set.partitions[key]
            config = self.topic_log_config(key[0])
            plog = self.logs.get_or_create(*key, config)
            # A log opened at start-up (LogManager.load_all) has the static defaults: it takes the topic's
            # config, dynamic broker defaults included, as Kafka's LogManager.startup is given topicConfigs.
            plog.config = config
            replica = self.replicas[key] = Replica(partition, plog)
            self._rebuild_producer_state(replica)
        if transition.kind == "leader":
            self._became_leader(replica, transition)
        else:
            self._became_follower(replica, transition)

    def _rebuild_producer_state(self, replica: Replica) -> None:
        replica.log.rebuild_producer_state(replica.producers, replica.partition.high_watermark)
        replica.producers.remove_expired_producers(now_ms(), self.settings.producer_id_expiration_ms)

    def _became_leader(self, replica: Replica, transition: Transition) -> None:
        p = replica.partition
        if transition.new_term:
            self._stop_fetching(replica)
            replica.log.epochs.assign(p.leader_epoch, replica.log.log_end_offset)
            log.info(
                "became leader",
                topic=p.topic,
                partition=p.index,
                leader_epoch=p.leader_epoch,
                isr=list(p.isr),
            )
            for listener in self.leadership_listeners:
                listener(p.topic, p.index, True)
        wake(replica)

    def _became_follower(self, replica: Replica, transition: Transition) -> None:
        p = replica.partition
        if transition.was_leader:
            self._fail_waiters(replica, ErrorCode.not_leader_or_follower)
            self.lifecycle.on_leadership_lost(replica.key)
            for listener in self.leadership_listeners:
                listener(p.topic, p.index, False)
        if transition.new_term:
            self._stop_fetching(replica)
            if transition.leader >= 0 and self.fetcher_factory is not None and not self.stopped:
                fetcher = self.fetchers.get(transition.leader)
                if fetcher is None:
                    fetcher = self.fetchers[transition.leader] = self.fetcher_factory(transition.leader)
                fetcher.add(replica)
        wake(replica)

    def _stop_fetching(self, replica: Replica) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(replica.key)

    def _remove(self, key: tuple[str, int], was_leader: bool) -> None:
        replica = self.replicas.pop(key, None)
        if replica is not None:
            self._stop_fetching(replica)
            self._fail_waiters(replica, ErrorCode.not_leader_or_follower)
            wake(replica)  # its long polls answer now (completeDelayedOperationsWhenNotPartitionLeader)
            self.lifecycle.on_leadership_lost(key)
        if was_leader:
            for listener in self.leadership_listeners:
                listener(*key, False)
        self.logs.delete(*key)

    def _after_replica_set(self, outputs: ReplicaOutputs) -> None:
        """Carries out what a call to the replica set returned: wake waiters of moved HWs, send ISR changes,
        log; then release the acks=all waiters whose HW or ISR now allows."""
        for key in outputs.hw_moved:
            replica = self.replicas.get(key)
            if replica is not None:
                replica.producers.on_high_watermark_updated(replica.partition.high_watermark)
                wake(replica)
        if outputs.isr_events:
            self._log_isr_events(outputs.isr_events)
        for key, replica in list(self._waiting.items()) if self._waiting else ():
            self._release_waiters(replica)
            if not replica.hw_waiters:
                del self._waiting[key]

    def _log_isr_events(self, events: tuple[IsrEvent, ...]) -> None:
        """The replica set's ISR changes requested, refused and made: events, logs, the sender woken."""
        for event in events:
            item = event.item
            topic, index = event.key
            if event.kind == "requested" and item is not None:
                self._emit(
                    "isr_change_requested",
                    topic=topic,
                    partition=index,
                    kind=item.kind,
                    isr=list(item.isr_ids),
                    partition_epoch=item.partition_epoch,
                )
                self._alter_wakeup.set()
            elif event.kind == "rejected" and item is not None:
                self._emit(
                    "isr_change_rejected",
                    topic=topic,
                    partition=index,
                    kind=item.kind,
                    isr=list(item.isr_ids),
                    error=event.error.name.upper(),
                    error_code=int(event.error),
                )
                log.info("AlterPartition rejected", topic=topic, partition=index, error=event.error.name)
            elif event.kind == "changed" and item is not None:
                log.info("ISR changed", topic=topic, partition=index, isr=list(event.isr), kind=item.kind)

    # ---- high watermark and acks=all ---------------------------------------------------------------------
    def _release_waiters(self, replica: Replica) -> None:
        waiters = replica.hw_waiters
        while waiters:
            offset, _seq, future = waiters[0]
            result = replica.partition.acks_all_result(offset)
            if result is None:
                break
            heapq.heappop(waiters)
            if not future.done():
                future.set_result(result)

    def _fail_waiters(self, replica: Replica, error: ErrorCode) -> None:
        for _offset, _seq, future in replica.hw_waiters:
            if not future.done():
                future.set_result(error)
        replica.hw_waiters.clear()

    # ---- produce -----------------------------------------------------------------------------------------
    async def append(
        self,
        topic: str,
        index: int,
        records: bytes,
        acks: int,
        timeout_ms: int,
        *,
        from_coordinator: bool = False,
        transaction_version: int = 0,
        leader_epoch: int | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> ProduceResult:
        """Validates the batches (off the event loop when that is heavy), then appends them as leader.
        Leadership, the log dir and the ISR are checked before validating and again after, since they
        may change while a worker thread validates; produces to one partition are appended in the order
        they arrived whichever finishes validating first, as Kafka's one request at a time per connection
        keeps a producer's pipelined batches in order. ``from_coordinator``: the transaction markers
        the broker built itself (Kafka's AppendOrigin.COORDINATOR), control batches that no client may
        write, checked against the producer's and the coordinator's epochs instead (``transaction_version``
        2, KIP-890: the marker must bump the producer's epoch). ``leader_epoch``: appended only while this
        broker leads the partition in that epoch (a coordinator's state written under the epoch it loaded,
        as Kafka's appendTransactionToLog checks its coordinator epoch right before appending).
        ``verification_guard``: a Produce v12+ batch's guard from its verification (a transactional batch
        opens a transaction only with the guard of the verification still under way)."""
        refused = self._refuse_append(topic, index, acks)
        if refused is not None:
            return refused
        key = (topic, index)
        previous = self._append_turns.get(key)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._append_turns[key] = turn
        try:
            outcome = (
                _coordinator_batches(records)
                if from_coordinator
                else await self._validate(self.replicas[key], records)
            )
            if previous is not None and not previous.done():
                await asyncio.shield(previous)  # the produces that came before are appended first
            if isinstance(outcome, ProduceResult):
                return outcome
            if leader_epoch is not None and self.replicas[key].partition.leader_epoch != leader_epoch:
                return ProduceResult(ErrorCode.not_leader_or_follower)
            appended = self._refuse_append(topic, index, acks) or self._append_validated(
                self.replicas[key],
                records,
                outcome,
                from_coordinator,
                transaction_version,
                verification_guard,
            )
        finally:
            turn.set_result(None)
            if self._append_turns.get(key) is turn:
                del self._append_turns[key]
        if isinstance(appended, ProduceResult):
            return appended
        replica, first_offset, end_offset, log_append_time = appended
        result = await self._await_acks(replica, first_offset, end_offset, acks, timeout_ms)
        if result.error != ErrorCode.none:
            return result
        return dataclasses.replace(result, log_append_time=log_append_time)

    async def _validate(
        self, replica: Replica, records: bytes
    ) -> list[tuple[int, BatchHeader]] | ProduceResult:
        """The batches' headers once they pass Kafka's checks, else the error to answer."""
        topic = replica.partition.topic
        try:
            headers = list(iter_batches(records))
            if not headers:
                raise CorruptRecordError("no record batch in the produce request")
        except CorruptRecordError as exc:
            return ProduceResult(ErrorCode.corrupt_message, message=str(exc))
        limit = self.max_message_bytes(topic)
        for _pos, header in headers:  # Kafka's UnifiedLog.analyzeAndValidateRecords
            if header.size > limit:
                return ProduceResult(
                    ErrorCode.message_too_large,
                    message=f"record batch of {header.size} bytes exceeds max.message.bytes {limit}",
                )
        try:  # Kafka's LogValidator.validateMessagesAndAssignOffsets
            await self.validator.validate(records, headers, replica.log.record_rules(now_ms()))
        except RecordValidationError as exc:  # ReplicaManager: RecordValidationException's record errors
            error = ErrorCode.invalid_timestamp if exc.invalid_timestamp else ErrorCode.invalid_record
            return ProduceResult(error, message=str(exc), record_errors=exc.record_errors)
        except InvalidRecordError as exc:
            return ProduceResult(ErrorCode.invalid_record, message=str(exc))
        except CorruptRecordError as exc:
            return ProduceResult(ErrorCode.corrupt_message, message=str(exc))
        return headers

    def _refuse_append(self, topic: str, index: int, acks: int) -> ProduceResult | None:
        """The answer to a produce this broker cannot take now (not the leader, log dir offline, ISR too
        small), else None."""
        replica = self.replicas.get((topic, index))
        if replica is None:
            known = self.cache.image.topic(topic)
            return ProduceResult(
                ErrorCode.not_leader_or_follower
                if known is not None and index in known.partitions
                else ErrorCode.unknown_topic_or_partition
            )
        p = replica.partition
        if self.log_dir_failures.offline:
            return ProduceResult(
                ErrorCode.kafka_storage_error, message=f"log dir {self.logs.data_dir} is offline"
            )
        error = p.check_enough_replicas_before_append(acks)
        if error != ErrorCode.none:
            return ProduceResult(
                error, message=f"ISR {list(p.isr)} below min.insync.replicas {p.min_insync_replicas}"
            )
        return None

    def _log_out_of_order_once(self, replica: Replica, header: BatchHeader) -> None:
        key = (replica.key, header.producer_id, header.producer_epoch)
        if key in self._out_of_order_logged:
            return
        if len(self._out_of_order_logged) >= 1024:
            self._out_of_order_logged.clear()
        self._out_of_order_logged.add(key)
        _log_out_of_order(replica, header)

    def _append_validated(
        self,
        replica: Replica,
        records: bytes,
        headers: list[tuple[int, BatchHeader]],
        from_coordinator: bool = False,
        transaction_version: int = 0,
        verification_guard: VerificationGuard | None = None,
    ) -> tuple[Replica, int, int, int] | ProduceResult:
        """Appends validated batches: (replica, first offset, end offset, log append time) to await acks
        for, or an error."""
        topic, index = replica.key
        checked = (
            _check_markers(replica.producers, records, headers, transaction_version)
            if from_coordinator
            else _check_sequences(replica.producers, headers, verification_guard)
        )
        if isinstance(checked, ProduceResult):
            if checked.error == ErrorCode.out_of_order_sequence_number:
                self._log_out_of_order_once(replica, headers[0][1])
            return checked
        if checked is not None:
            # UnifiedLog.append: a retried batch is answered with the first append's offsets and its
            # timestamp (the append time on a LogAppendTime topic)
            return replica, checked.first_offset, checked.last_offset + 1, checked.timestamp
        try:
            info = replica.log.append_as_leader(
                records, replica.partition.leader_epoch, validated=True, now_ms=now_ms()
            )
        except OSError as exc:  # the disk, not the client: KafkaStorageException
            self.log_dir_failed(f"error appending to {topic}-{index}", exc)
            return ProduceResult(
                ErrorCode.kafka_storage_error, message=f"log dir {self.logs.data_dir} is offline: {exc}"
            )
        completed = replica.producers.append(records, info.headers, info.positions)
        if completed:
            replica.log.append_aborted_txns(completed)
        wake(replica)  # followers long-polling this partition fetch the new batch at once
        self._after_replica_set(self.replica_set.on_append(now_ms(), replica.key))
        return replica, info.first_offset, info.last_offset + 1, info.log_append_time

    async def append_txn_marker(
        self,
        topic: str,
        index: int,
        producer_id: int,
        producer_epoch: int,
        marker: EndTxnMarker,
        timeout_ms: int,
        transaction_version: int = 0,
    ) -> ErrorCode:
        """Writes a transaction coordinator's marker to a partition this broker leads and answers once
        the high watermark passes it (Kafka's KafkaApis.handleWriteTxnMarkersRequest: appendRecords with
        requiredAcks -1 and AppendOrigin.COORDINATOR)."""
        batch = end_txn_marker_batch(producer_id, producer_epoch, marker, now_ms())
        result = await self.append(
            topic,
            index,
            batch,
            -1,
            timeout_ms,
            from_coordinator=True,
            transaction_version=transaction_version,
        )
        return result.error

    def max_message_bytes(self, topic: str) -> int:
        """The topic's max.message.bytes, else the broker's message.max.bytes."""
        value = self.cache.image.topic_config(topic, "max.message.bytes")
        return int(value) if value is not None else self.settings.message_max_bytes

    async def _await_acks(
        self, replica: Replica, base_offset: int, required: int, acks: int, timeout_ms: int
    ) -> ProduceResult:
        start = replica.log.log_start_offset
        if acks != -1:
            return ProduceResult(ErrorCode.none, base_offset, start)
        result = replica.partition.acks_all_result(required)
        if result is None:
            future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            heapq.heappush(replica.hw_waiters, (required, next(self._seq), future))
            self._waiting[replica.key] = replica
            try:
                result = await asyncio.wait_for(future, timeout_ms / 1000)
            except TimeoutError:
                return ProduceResult(ErrorCode.request_timed_out, base_offset, start)
        return ProduceResult(result, base_offset if result == ErrorCode.none else -1, start)

    # ---- fetch (leader side) -----------------------------------------------------------------------------
    def replica(self, topic: str, index: int) -> Replica | None:
        return self.replicas.get((topic, index))

    def missing_partition_error(self, topic: str, index: int) -> ErrorCode:
        """Why a partition has no replica here: unknown to the metadata, or not hosted on this broker
        (Kafka's ReplicaManager.getPartitionOrError)."""
        known = self.cache.image.topic(topic)
        if known is None or index not in known.partitions:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.not_leader_or_follower

    def leader_replica(
        self, topic: str, index: int, current_leader_epoch: int
    ) -> tuple[Replica | None, ErrorCode]:
        """The partition's replica if this broker leads it at the client's leader epoch, else the error the
        client gets (Kafka's getPartitionOrException then localLogWithEpochOrThrow)."""
        replica = self.replica(topic, index)
        if replica is None:
            return None, self.missing_partition_error(topic, index)
        error = check_leader_epoch(replica.partition, current_leader_epoch)
        return (replica if error == ErrorCode.none else None), error

    async def fetch_messages(self, params: FetchParams, partitions: Sequence[PartitionFetch]) -> list[Answer]:
        """Reads the partitions a Fetch may read, waiting for data as the request allows (Kafka's
        ReplicaManager.fetchMessages); a follower's fetch records its position."""
        return await fetch_messages(self, params, partitions)

    def on_follower_fetch(
        self,
        replica: Replica,
        replica_id: int,
        replica_epoch: int,
        fetch_offset: int,
        leader_log_end: int,
        log_start_offset: int = -1,
    ) -> None:
        outputs = self.replica_set.on_follower_fetch(
            now_ms(), replica.key, replica_id, replica_epoch, fetch_offset, leader_log_end, log_start_offset
        )
        self._after_replica_set(outputs)
        self.lifecycle.on_follower_fetch(replica)

    # ---- ISR changes -------------------------------------------------------------------------------------
    async def _alter_partition_loop(self) -> None:
        from epochkraft.net.errors import NetworkError

        while True:
            request = self.replica_set.poll_alter_partition(now_ms())
            if request is None:
                self._alter_wakeup.clear()
                # Queued changes are backing off: wake when the backoff ends; else when a change arrives.
                delay = (
                    max(self.alter_manager.not_before_ms - now_ms(), 1) / 1000
                    if self.alter_manager.queue
                    else None
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._alter_wakeup.wait(), delay)
                continue
            try:
                response = await self.send_alter_partition(request)
            except (NetworkError, OSError) as exc:
                log.warning("AlterPartition failed; will resend", error=str(exc))
                self.replica_set.on_alter_partition_network_error(now_ms())
                continue
            self._after_replica_set(self.replica_set.on_alter_partition_response(now_ms(), response))

    async def _isr_shrink_loop(self) -> None:
        interval = max(self.settings.replica_lag_time_max_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            self._after_replica_set(self.replica_set.tick(now_ms()))

    # ---- producer state --------------------------------------------------------------------------------
    def remove_expired_producers(self, now: int) -> int:
        """Kafka's PeriodicProducerExpirationCheck over every partition here; returns the producers removed."""
        expiration_ms = self.settings.producer_id_expiration_ms
        return sum(r.producers.remove_expired_producers(now, expiration_ms) for r in self.replicas.values())

    async def _producer_expiration_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.producer_id_expiration_check_interval_ms / 1000)
            removed = self.remove_expired_producers(now_ms())
            if removed:
                log.info("expired idle producer ids", producers=removed)

    # ---- checkpoints ---------------------------------------------------------------------------------------
    def checkpoint_high_watermarks(self) -> None:
        self.logs.checkpoint_high_watermarks(
            {key: r.partition.high_watermark for key, r in self.replicas.items()}
        )

    async def _checkpoint_loop(self) -> None:
        """High watermark and recovery point checkpoints and the configured flushes, for as long as the
        broker runs. A storage error takes the log dir offline (Kafka's checkpointHighWatermarks); any
        other failure is logged and the next round runs as usual."""
        hw_interval = self.settings.replica_high_watermark_checkpoint_interval_ms / 1000
        flush_ms = self.settings.log_flush_interval_ms
        recovery_every = self.settings.log_flush_offset_checkpoint_interval_ms
        last_flush = last_recovery = now_ms()
        while True:
            await asyncio.sleep(min(hw_interval, (flush_ms or 1e9) / 1000))
            if self.log_dir_failures.offline:
                continue
            try:
                # Checkpoints fsync: they run on a worker thread so they never stall the event loop
                # (a snapshot is taken here, on the loop, so the thread reads nothing that changes).
                snapshot = {key: r.partition.high_watermark for key, r in self.replicas.items()}
                await asyncio.to_thread(self.logs.checkpoint_high_watermarks, snapshot)
                now = now_ms()
                if flush_ms is not None and now - last_flush >= flush_ms:
                    for replica in list(self.replicas.values()):
                        replica.log.flush()
                    last_flush = now
                if now - last_recovery >= recovery_every:
                    points = {key: r.log.recovery_point for key, r in self.replicas.items()}
                    await asyncio.to_thread(self.logs.checkpoint_recovery_points, points)
                    last_recovery = now
            except OSError as exc:
                self.log_dir_failed("error writing checkpoints or flushing logs", exc)
            except Exception:
                log.exception("checkpoint round failed; retrying at the next interval")

    # ---- observability --------------------------------------------------------------------------------------
    def replica_positions(self) -> dict[str, list[tuple[int, int, int]]]:
        """Each replica's (partition, log end offset, high watermark) by topic: what the controller's live
        view reads every second, a twentieth of the bytes of ``partition_metrics`` and no row built."""
        positions: dict[str, list[tuple[int, int, int]]] = {}
        for (topic, index), r in self.replicas.items():
            held = (index, r.log.log_end_offset, r.partition.high_watermark)
            positions.setdefault(topic, []).append(held)
        return positions

    def partition_metrics(self) -> list[PartitionMetrics]:
        out: list[PartitionMetrics] = []
        for (topic, index), r in sorted(self.replicas.items()):
            p = r.partition
            out.append(
                {
                    "topic": topic,
                    "partition": index,
                    "role": p.role.value,
                    "leader": p.leader_id,
                    "leader_epoch": p.leader_epoch,
                    "partition_epoch": p.partition_epoch,
                    "isr": list(p.isr),
                    "replicas": list(p.replicas),
                    "log_end_offset": r.log.log_end_offset,
                    "log_start_offset": r.log.log_start_offset,
                    "size_bytes": r.log.size_bytes,
                    "segments": len(r.log.segments),
                    "high_watermark": p.high_watermark,
                    "min_insync_replicas": p.min_insync_replicas,
                    "follower_lag": {
                        str(b): max(r.log.log_end_offset - s.log_end_offset, 0) for b, s in p.remote.items()
                    },
                }
            )
        return out


def _coordinator_batches(records: bytes) -> list[tuple[int, BatchHeader]] | ProduceResult:
    """The headers of the batches the broker built itself (no client's rules to check)."""
    try:
        return list(iter_batches(records))
    except CorruptRecordError as exc:
        return ProduceResult(ErrorCode.corrupt_message, message=str(exc))


def _check_sequences(
    producers: ProducerStateTable,
    headers: list[tuple[int, BatchHeader]],
    verification_guard: VerificationGuard | None = None,
) -> ProduceResult | BatchMetadata | None:
    """Idempotent and transactional producers' batches against their state: the error to answer, the
    batch a retry duplicates, or None to append (one batch per request in practice)."""
    for _pos, header in headers:
        check = producers.check(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.record_count,
            header.is_transactional,
            verification_guard,
        )
        if check.error != ErrorCode.none:
            return ProduceResult(check.error)
        if check.duplicate_of is not None:
            return check.duplicate_of
    return None


def _log_out_of_order(replica: Replica, header: BatchHeader) -> None:
    """What the leader had when it answered OUT_OF_ORDER_SEQUENCE_NUMBER (the producer's epoch, its last
    sequences here, its open transaction, the lowest sequence of a verification under way), so a run's
    logs tell which rule refused the batch: with no fault, only a first batch of a transaction whose
    verification failed (Kafka's VerificationStateEntry) leaves later sequences refused."""
    producers = replica.producers
    entry = producers.producers.get(header.producer_id)
    verifying = producers.verification_states.get(header.producer_id)
    log.info(
        "produce refused OUT_OF_ORDER_SEQUENCE_NUMBER",
        partition=f"{replica.key[0]}-{replica.key[1]}",
        producer_id=header.producer_id,
        epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records=header.record_count,
        transactional=header.is_transactional,
        known_epoch=None if entry is None else entry.epoch,
        batches=None if entry is None else [(b.first_seq, b.last_seq) for b in entry.batches],
        txn_first_offset=None if entry is None else entry.current_txn_first_offset,
        verifying=None
        if verifying is None
        else (verifying.epoch, verifying.lowest_sequence, verifying.supports_epoch_bump),
    )


def _check_markers(
    producers: ProducerStateTable,
    records: bytes,
    headers: list[tuple[int, BatchHeader]],
    transaction_version: int = 0,
) -> ProduceResult | None:
    """The coordinator's markers against the producer state: an older producer epoch is
    INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED (Kafka's
    ProducerAppendInfo.appendEndTxnMarker)."""
    for pos, header in headers:
        marker = read_end_txn_marker(records, pos, header) if header.is_control else None
        if marker is None:
            return ProduceResult(ErrorCode.invalid_record, message="the coordinator appends only markers")
        error = producers.check_marker(header.producer_id, header.producer_epoch, marker, transaction_version)
        if error != ErrorCode.none:
            return ProduceResult(error)
    return None


def log_config(settings: BrokerSettings) -> LogConfig:
    """The broker's log.* defaults, which topic configs override."""
    if settings.log_retention_ms is not None:
        retention_ms = settings.log_retention_ms
    elif settings.log_retention_minutes is not None:
        retention_ms = settings.log_retention_minutes * 60_000
    else:
        retention_ms = settings.log_retention_hours * 3_600_000
    return LogConfig(
        segment_bytes=settings.log_segment_bytes,
        segment_ms=settings.log_roll_ms
        if settings.log_roll_ms is not None
        else settings.log_roll_hours * 3_600_000,
        segment_index_bytes=settings.log_index_size_max_bytes,
        index_interval_bytes=settings.log_index_interval_bytes,
        retention_ms=retention_ms if retention_ms >= 0 else -1,
        retention_bytes=settings.log_retention_bytes,
        cleanup_policy=settings.log_cleanup_policy,
        file_delete_delay_ms=settings.log_segment_delete_delay_ms,
        delete_retention_ms=settings.log_cleaner_delete_retention_ms,
        flush_messages=settings.log_flush_interval_messages,
        drop_behind_bytes=settings.log_page_cache_drop_behind_bytes,
        message_timestamp_type=settings.log_message_timestamp_type,
    )
