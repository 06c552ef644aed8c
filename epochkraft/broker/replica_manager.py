"""The broker's replicas: partition logs, leader/follower transitions, produce and fetch, ISR actions.

This is the asyncio edge around the sans-IO ``Partition`` core: it reads the clock, executes the core's
decisions (AlterPartition items go to the AlterPartitionManager, high-watermark moves release acks=all
producers and long-polling consumers), and owns the logs and the follower fetchers.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from epochkraft.broker.alter_partition_manager import AlterPartitionManager
from epochkraft.broker.log import LogConfig, LogManager, PartitionLog
from epochkraft.broker.log.partition_log import TOPIC_CONFIGS
from epochkraft.broker.log_lifecycle import LogLifecycle
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.partition import AlterPartitionItem, Partition, Role
from epochkraft.broker.producer_state import ProducerStateTable
from epochkraft.broker.settings import BrokerSettings
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import CorruptRecordError, iter_batches

log = structlog.get_logger()


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
    data_event: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def key(self) -> tuple[str, int]:
        return self.partition.topic, self.partition.index


def wake(replica: Replica) -> None:
    """Wakes every long-polling fetch waiting on this replica and arms a fresh event for the next ones."""
    replica.data_event.set()
    replica.data_event = asyncio.Event()


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        settings: BrokerSettings,
        logs: LogManager,
        cache: MetadataCache,
        broker_epoch: Callable[[], int],
        send_alter_partition: Callable[[Any], Any],
        events: Any = None,
    ) -> None:
        self.node_id = node_id
        self.settings = settings
        self.logs = logs
        self.cache = cache
        self.broker_epoch = broker_epoch
        self.send_alter_partition = send_alter_partition
        self.events = events
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.alter_manager = AlterPartitionManager(
            node_id, broker_epoch, unsafe_pre_kip903=settings.unsafe_pre_kip903_mode
        )
        self._alter_wakeup = asyncio.Event()
        self._seq = itertools.count()
        self.fetchers: dict[int, Any] = {}  # source broker id -> ReplicaFetcher
        self.fetcher_factory: Callable[[int], Any] | None = None
        self.leadership_listeners: list[Callable[[str, int, bool], None]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.stats = {"isr_shrinks": 0, "isr_expands": 0, "failed_isr_updates": 0}
        self.lifecycle = LogLifecycle(self)

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.tasks += [
            asyncio.create_task(self._alter_partition_loop(), name="alter-partition"),
            asyncio.create_task(self._isr_shrink_loop(), name="isr-shrink"),
            asyncio.create_task(self._checkpoint_loop(), name="hw-checkpoint"),
            asyncio.create_task(self.lifecycle.run(), name="log-retention"),
        ]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
        for replica in self.replicas.values():
            self._fail_waiters(replica, ErrorCode.not_leader_or_follower)
        self.checkpoint_high_watermarks()
        self.logs.flush_all()

    def _emit(self, event: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(event, **fields)

    # ---- metadata ----------------------------------------------------------------------------------------
    def on_metadata(self, changes: Changes) -> None:
        """Applies partition changes from the metadata log: become leader, follower, or drop the replica."""
        for topic in changes.deleted_topics:
            for index in list(topic.partitions):
                self._remove(topic.name, index, delete=True)
        for name, index in sorted(changes.partitions):
            registration = self.cache.partition(name, index)
            topic = self.cache.topic(name)
            if registration is None or topic is None:
                continue
            if self.node_id not in registration.replicas:
                self._remove(name, index, delete=True)
                continue
            replica = self._get_or_create(name, index, topic.topic_id)
            replica.log.config = self.topic_log_config(name)  # topic configs may have changed
            if registration.leader == self.node_id:
                self._become_leader(replica, registration)
            else:
                self._become_follower(replica, registration)
        if changes.brokers:
            # A broker's fencing or new epoch can make a follower eligible, or free a stuck HW.
            for replica in self.replicas.values():
                if replica.partition.role == Role.LEADER:
                    self._maybe_advance_hw(replica)

    def topic_log_config(self, topic: str) -> LogConfig:
        """The broker's log.* defaults overridden by the topic's configs (and dynamic broker defaults)."""
        configs = {name: self.cache.topic_config(topic, name) for name in TOPIC_CONFIGS}
        return self.logs.config.with_topic_configs({k: v for k, v in configs.items() if v is not None})

    def _get_or_create(self, topic: str, index: int, topic_id: uuid.UUID) -> Replica:
        replica = self.replicas.get((topic, index))
        if replica is None:
            plog = self.logs.get_or_create(topic, index, self.topic_log_config(topic))
            partition = Partition(
                topic,
                topic_id,
                index,
                self.node_id,
                replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms,
                unsafe_pre_kip903=self.settings.unsafe_pre_kip903_mode,
            )
            checkpointed = self.logs.high_watermarks.get((topic, index), 0)
            partition.high_watermark = min(checkpointed, plog.log_end_offset)
            replica = self.replicas[(topic, index)] = Replica(partition, plog)
            self._rebuild_producer_state(replica)
        return replica

    def _rebuild_producer_state(self, replica: Replica) -> None:
        position = replica.log.log_start_offset
        end = replica.log.log_end_offset
        while position < end:
            chunk = replica.log.read(position, 4 * 1024 * 1024)
            if not chunk:
                break
            for _pos, header in iter_batches(chunk):
                replica.producers.record(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.record_count,
                    header.base_offset,
                    header.last_offset,
                )
                position = header.next_offset

    def _become_leader(self, replica: Replica, reg: Any) -> None:
        p = replica.partition
        was_leader = p.role == Role.LEADER and p.leader_epoch == reg.leader_epoch
        previous_isr = set(p.isr)
        applied = p.make_leader(
            now_ms(),
            leader_epoch=reg.leader_epoch,
            partition_epoch=reg.partition_epoch,
            replicas=reg.replicas,
            isr=reg.isr,
            leader_recovery_state=int(reg.leader_recovery_state),
            log_end_offset=replica.log.log_end_offset,
            min_insync_replicas=self.cache.min_insync(p.topic, self.settings.min_insync_replicas),
        )
        if not applied:
            return
        if was_leader:
            # ISR changes decided by the controller (fencing, shutdown) count like our own.
            self._count_isr_change(previous_isr, set(p.isr))
        if not was_leader:
            self._stop_fetching(replica)
            replica.log.epochs.assign(reg.leader_epoch, replica.log.log_end_offset)
            log.info(
                "became leader",
                topic=p.topic,
                partition=p.index,
                leader_epoch=p.leader_epoch,
                isr=list(p.isr),
            )
            for listener in self.leadership_listeners:
                listener(p.topic, p.index, True)
            recovered = p.maybe_report_recovered(self.cache, self.broker_epoch())
            if recovered is not None:
                self._submit(recovered)
        self._maybe_advance_hw(replica)
        wake(replica)

    def _become_follower(self, replica: Replica, reg: Any) -> None:
        p = replica.partition
        was = (p.role, p.leader_id, p.leader_epoch)
        applied = p.make_follower(
            leader=reg.leader,
            leader_epoch=reg.leader_epoch,
            partition_epoch=reg.partition_epoch,
            replicas=reg.replicas,
            isr=reg.isr,
            leader_recovery_state=int(reg.leader_recovery_state),
        )
        if not applied:
            return
        if was[0] == Role.LEADER:
            self._fail_waiters(replica, ErrorCode.not_leader_or_follower)
            self.lifecycle.on_leadership_lost(replica.key)
            for listener in self.leadership_listeners:
                listener(p.topic, p.index, False)
        p.high_watermark = min(p.high_watermark, replica.log.log_end_offset)
        if was != (Role.FOLLOWER, reg.leader, reg.leader_epoch):
            self._stop_fetching(replica)
            if reg.leader >= 0 and self.fetcher_factory is not None:
                fetcher = self.fetchers.get(reg.leader)
                if fetcher is None:
                    fetcher = self.fetchers[reg.leader] = self.fetcher_factory(reg.leader)
                fetcher.add(replica)
        wake(replica)

    def _stop_fetching(self, replica: Replica) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(replica.key)

    def _remove(self, topic: str, index: int, delete: bool) -> None:
        replica = self.replicas.pop((topic, index), None)
        if replica is None:
            return
        self._stop_fetching(replica)
        self._fail_waiters(replica, ErrorCode.not_leader_or_follower)
        self.lifecycle.on_leadership_lost(replica.key)
        if replica.partition.role == Role.LEADER:
            for listener in self.leadership_listeners:
                listener(topic, index, False)
        if delete:
            self.logs.delete(topic, index)

    # ---- high watermark and acks=all ---------------------------------------------------------------------
    def _maybe_advance_hw(self, replica: Replica) -> None:
        p = replica.partition
        new_hw = p.maybe_increment_high_watermark(now_ms(), replica.log.log_end_offset, self.cache)
        if new_hw is not None:
            wake(replica)
        self._release_waiters(replica)

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
        self, topic: str, index: int, records: bytes, acks: int, timeout_ms: int
    ) -> ProduceResult:
        replica = self.replicas.get((topic, index))
        if replica is None:
            known = self.cache.topic(topic)
            return ProduceResult(
                ErrorCode.not_leader_or_follower
                if known is not None and index in known.partitions
                else ErrorCode.unknown_topic_or_partition
            )
        p = replica.partition
        error = p.check_enough_replicas_before_append(acks)
        if error != ErrorCode.none:
            return ProduceResult(
                error, message=f"ISR {list(p.isr)} below min.insync.replicas {p.min_insync_replicas}"
            )
        try:
            headers = list(iter_batches(records))
        except CorruptRecordError as exc:
            return ProduceResult(ErrorCode.corrupt_message, message=str(exc))
        limit = self.max_message_bytes(topic)
        for _pos, header in headers:  # Kafka's UnifiedLog.analyzeAndValidateRecords
            if header.size > limit:
                return ProduceResult(
                    ErrorCode.message_too_large,
                    message=f"record batch of {header.size} bytes exceeds max.message.bytes {limit}",
                )
        # Idempotent producers: drop a retried batch, refuse a sequence gap (one batch per request in practice).
        for _pos, header in headers:
            check = replica.producers.check(
                header.producer_id, header.producer_epoch, header.base_sequence, header.record_count
            )
            if check.error != ErrorCode.none:
                return ProduceResult(check.error)
            if check.duplicate_of is not None:
                return await self._await_acks(
                    replica,
                    check.duplicate_of.first_offset,
                    check.duplicate_of.last_offset + 1,
                    acks,
                    timeout_ms,
                )
        try:
            info = replica.log.append_as_leader(records, p.leader_epoch)
        except CorruptRecordError as exc:
            return ProduceResult(ErrorCode.corrupt_message, message=str(exc))
        for header in info.headers:
            replica.producers.record(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.record_count,
                header.base_offset,
                header.last_offset,
            )
        wake(replica)  # followers long-polling this partition fetch the new batch at once
        self._maybe_advance_hw(replica)
        return await self._await_acks(replica, info.first_offset, info.last_offset + 1, acks, timeout_ms)

    def max_message_bytes(self, topic: str) -> int:
        """The topic's max.message.bytes, else the broker's message.max.bytes."""
        value = self.cache.topic_config(topic, "max.message.bytes")
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
            try:
                result = await asyncio.wait_for(future, timeout_ms / 1000)
            except TimeoutError:
                return ProduceResult(ErrorCode.request_timed_out, base_offset, start)
        return ProduceResult(result, base_offset if result == ErrorCode.none else -1, start)

    # ---- fetch (leader side) -----------------------------------------------------------------------------
    def replica(self, topic: str, index: int) -> Replica | None:
        return self.replicas.get((topic, index))

    def on_follower_fetch(
        self,
        replica: Replica,
        replica_id: int,
        replica_epoch: int,
        fetch_offset: int,
        log_start_offset: int = -1,
    ) -> None:
        p = replica.partition
        item = p.update_follower_fetch(
            now_ms(),
            replica_id,
            replica_epoch,
            fetch_offset,
            replica.log.log_end_offset,
            self.cache,
            self.broker_epoch(),
            log_start_offset,
        )
        if item is not None:
            self._submit(item)
        self._maybe_advance_hw(replica)
        self.lifecycle.on_follower_fetch(replica)

    # ---- ISR changes -------------------------------------------------------------------------------------
    def _submit(self, item: AlterPartitionItem) -> None:
        if self.alter_manager.submit(item):
            self._emit(
                "isr_change_requested",
                topic=self._topic_name(item.topic_id),
                partition=item.partition,
                kind=item.kind,
                isr=list(item.isr_ids),
                partition_epoch=item.partition_epoch,
            )
            self._alter_wakeup.set()

    def _topic_name(self, topic_id: uuid.UUID) -> str:
        topic = self.cache.topics.get(topic_id)
        return topic.name if topic else str(topic_id)

    async def _alter_partition_loop(self) -> None:
        from epochkraft.net.errors import NetworkError

        while True:
            request = self.alter_manager.poll(now_ms())
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
                self.alter_manager.on_network_error(now_ms())
                continue
            for result in self.alter_manager.on_response(now_ms(), response):
                self._on_alter_result(result)

    def _on_alter_result(self, result: Any) -> None:
        item = result.item
        key = (self._topic_name(item.topic_id), item.partition)
        replica = self.replicas.get(key)
        if replica is None:
            return
        p = replica.partition
        previous_isr = set(p.isr)
        changed = p.on_alter_partition_result(
            item,
            result.error,
            leader_epoch=result.leader_epoch,
            isr=result.isr,
            partition_epoch=result.partition_epoch,
            leader_recovery_state=result.leader_recovery_state,
        )
        if result.error != ErrorCode.none:
            self.stats["failed_isr_updates"] += 1
            self._emit(
                "isr_change_rejected",
                topic=key[0],
                partition=key[1],
                kind=item.kind,
                isr=list(item.isr_ids),
                error=result.error.name.upper(),
                error_code=int(result.error),
            )
            log.info("AlterPartition rejected", topic=key[0], partition=key[1], error=result.error.name)
        elif changed:
            self._count_isr_change(previous_isr, set(p.isr))
            log.info("ISR changed", topic=key[0], partition=key[1], isr=list(p.isr), kind=item.kind)
        self._maybe_advance_hw(replica)

    def _count_isr_change(self, before: set[int], after: set[int]) -> None:
        if after - before:
            self.stats["isr_expands"] += 1
        if before - after:
            self.stats["isr_shrinks"] += 1

    async def _isr_shrink_loop(self) -> None:
        interval = max(self.settings.replica_lag_time_max_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            for replica in list(self.replicas.values()):
                p = replica.partition
                if p.role != Role.LEADER:
                    continue
                item = p.maybe_shrink_isr(
                    now_ms(), replica.log.log_end_offset, self.cache, self.broker_epoch()
                )
                if item is not None:
                    self._submit(item)
                self._maybe_advance_hw(replica)

    # ---- checkpoints ---------------------------------------------------------------------------------------
    def checkpoint_high_watermarks(self) -> None:
        self.logs.checkpoint_high_watermarks(
            {key: r.partition.high_watermark for key, r in self.replicas.items()}
        )

    async def _checkpoint_loop(self) -> None:
        hw_interval = self.settings.replica_high_watermark_checkpoint_interval_ms / 1000
        flush_ms = self.settings.log_flush_interval_ms
        recovery_every = self.settings.log_flush_offset_checkpoint_interval_ms
        last_flush = last_recovery = now_ms()
        while True:
            await asyncio.sleep(min(hw_interval, (flush_ms or 1e9) / 1000))
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

    # ---- observability --------------------------------------------------------------------------------------
    def partition_metrics(self) -> list[dict[str, Any]]:
        out = []
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
                    "high_watermark": p.high_watermark,
                    "min_insync_replicas": p.min_insync_replicas,
                    "follower_lag": {
                        str(b): max(r.log.log_end_offset - s.log_end_offset, 0) for b, s in p.remote.items()
                    },
                }
            )
        return out


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
        flush_messages=settings.log_flush_interval_messages,
        drop_behind_bytes=settings.log_page_cache_drop_behind_bytes,
    )
