"""The log lifecycle at the broker's asyncio edge: retention passes on every replica, removal of deleted
segments' files, log start offset checkpoints, and DeleteRecords waiting for the followers. A disk error
in any of them, or in the cleaner, takes the log dir offline (Kafka's LogDirFailureChannel), as a failed
write does.

Every ``log.retention.check.interval.ms`` each hosted log deletes its segments wholly below its log
start offset, past retention.bytes or past retention.ms, below its high watermark (Kafka's
LogManager.cleanupLogs and UnifiedLog.deleteOldSegments), on leaders and followers alike; the files
renamed ``.deleted`` are removed ``file.delete.delay.ms`` later on a worker thread. DeleteRecords moves
the leader's log start offset and answers once the low watermark (the smallest log start offset over the
leader and its alive followers, which report theirs in every Fetch) has reached it, as Kafka's
ReplicaManager.deleteRecords with DelayedDeleteRecords. Every ``log.cleaner.backoff.ms`` each log whose
cleanup.policy includes compact and whose cleanable segments changed (or whose tombstones may have come
of age) is compacted on a worker thread, one log at a time (``log.cleaner``, Kafka's LogCleaner).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog

from epochkraft.broker.log.cleaner import SegmentSnapshot, compact
from epochkraft.broker.partition import Role
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import LONG_MAX, CorruptRecordError

if TYPE_CHECKING:
    from epochkraft.broker.replica_manager import Replica, ReplicaManager

log = structlog.get_logger()
HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "up to the high watermark"


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogLifecycle:
    def __init__(self, manager: ReplicaManager) -> None:
        self.manager = manager
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = {}
        self._checkpointed_starts: dict[tuple[str, int], int] = {}
        # per log: the cleanable segments (base, size) of its last pass, and when it ran
        self._cleaned: dict[tuple[str, int], tuple[tuple[tuple[int, int], ...], int]] = {}
        self.cleaner_stats = {"bytes_read": 0, "bytes_written": 0, "seconds": 0.0, "passes": 0}

    # ---- retention -----------------------------------------------------------------------------------
    def retention_pass(self, now_ms: int) -> None:
        """Deletes what each hosted log may delete (below its high watermark) and schedules the files."""
        logs = self.manager.logs
        for replica in list(self.manager.replicas.values()):
            plog = replica.log
            renamed = plog.delete_old_segments(now_ms, replica.partition.high_watermark)
            logs.schedule_removal(now_ms, renamed, plog.config.file_delete_delay_ms)

    async def run(self) -> None:
        """Retention passes, file removals and log start checkpoints, for as long as the broker runs;
        a pass that fails is logged and the next one runs as usual."""
        settings = self.manager.settings
        interval_ms = settings.log_retention_check_interval_ms
        checkpoint_ms = settings.log_flush_start_offset_checkpoint_interval_ms
        last_retention = last_checkpoint = _now_ms()
        while True:
            await asyncio.sleep(min(interval_ms, checkpoint_ms, 1000) / 1000)
            if self.manager.log_dir_failures.offline:
                continue  # the broker halts; nothing more is deleted from a failed dir
            now = _now_ms()
            try:
                if now - last_retention >= interval_ms:
                    last_retention = now
                    self.retention_pass(now)
                due = self.manager.logs.due_removals(now)
                if due:
                    await asyncio.to_thread(self.manager.logs.remove_files, due)
                starts = self.manager.logs.log_start_offsets()
                if starts != self._checkpointed_starts or now - last_checkpoint >= checkpoint_ms:
                    last_checkpoint = now
                    await asyncio.to_thread(self.manager.logs.checkpoint_log_start_offsets, starts)
                    self._checkpointed_starts = starts
            except (
                OSError
            ) as exc:  # Kafka's maybeHandleIOException around deleteOldSegments and the checkpoint
                self.manager.log_dir_failed(
                    "error deleting old segments or checkpointing log start offsets", exc
                )

    # ---- compaction ----------------------------------------------------------------------------------
    async def run_cleaner(self) -> None:
        """Compaction passes for as long as the broker runs; a pass that fails is logged and skipped."""
        settings = self.manager.settings
        if not settings.log_cleaner_enable:
            return
        while True:
            await asyncio.sleep(settings.log_cleaner_backoff_ms / 1000)
            for key, replica in list(self.manager.replicas.items()):
                if not replica.log.config.compact_enabled or self.manager.log_dir_failures.offline:
                    continue
                try:
                    await self.clean(key, replica)
                except OSError as exc:  # as Kafka's LogCleaner.cleanLog: an IOException takes the dir offline
                    self.manager.log_dir_failed(f"error cleaning {key[0]}-{key[1]}", exc)
                except CorruptRecordError as exc:
                    log.error("log compaction failed", topic=key[0], partition=key[1], error=str(exc))

    async def clean(self, key: tuple[str, int], replica: Replica) -> bool:
        """Compaction of the log's cleanable segments, if they changed since the last one or its
        tombstones may have come of age, in as many passes as the dedupe buffer needs (each maps keys
        from where the previous one's map filled); True if cleaned segments were swapped in."""
        plog = replica.log
        snapshots = plog.cleanable_snapshots(replica.last_stable_offset)
        if not snapshots:
            return False
        shape = tuple((s.base_offset, s.size) for s in snapshots)
        now = _now_ms()
        last = self._cleaned.get(key)
        if last is not None and last[0] == shape and now - last[1] < plog.config.delete_retention_ms:
            return False
        first_dirty_offset: int | None = 0
        while first_dirty_offset is not None:
            swapped, end_offset = await self._clean_pass(key, replica, snapshots, now, first_dirty_offset)
            if not swapped:
                return False  # the log changed meanwhile (moved, deleted, truncated): the next pass retries
            if end_offset is not None and end_offset <= first_dirty_offset:
                break  # a map that holds no key: nothing more to gain
            first_dirty_offset = end_offset
            snapshots = plog.cleanable_snapshots(replica.last_stable_offset)
        shape = tuple((s.base_offset, s.size) for s in plog.cleanable_snapshots(replica.last_stable_offset))
        self._cleaned[key] = (shape, now)
        return True

    async def _clean_pass(
        self,
        key: tuple[str, int],
        replica: Replica,
        snapshots: list[SegmentSnapshot],
        now: int,
        first_dirty_offset: int,
    ) -> tuple[bool, int | None]:
        """One pass: whether its cleaned copies were swapped in, and the offset its cleaned range ended at
        (None: the whole cleanable log)."""
        plog, settings = replica.log, self.manager.settings
        cleaned, stats, end_offset = await asyncio.to_thread(
            compact,
            plog.dir,
            snapshots,
            now,
            plog.config.delete_retention_ms,
            settings.log_cleaner_io_max_bytes_per_second,
            dedupe_buffer_size=settings.log_cleaner_dedupe_buffer_size,
            load_factor=settings.log_cleaner_io_buffer_load_factor,
            first_dirty_offset=first_dirty_offset,
            aborted=plog.collect_aborted_txns(snapshots[0].base_offset, LONG_MAX),
            last_records=replica.producers.last_records_of_active_producers(),
        )
        if self.manager.replica(*key) is not replica or not plog.replace_cleaned(cleaned):
            return False, end_offset
        self.cleaner_stats["bytes_read"] += stats.bytes_read
        self.cleaner_stats["bytes_written"] += stats.bytes_written
        self.cleaner_stats["seconds"] += stats.seconds
        self.cleaner_stats["passes"] += 1
        log.info(
            "log compacted",
            topic=key[0],
            partition=key[1],
            segments=len(cleaned),
            first_dirty_offset=first_dirty_offset,
            cleaned_up_to=end_offset,
            bytes_read=stats.bytes_read,
            bytes_written=stats.bytes_written,
            records_kept=stats.records_kept,
            records_read=stats.records_read,
            seconds=round(stats.seconds, 3),
        )
        return True, end_offset

    # ---- DeleteRecords -------------------------------------------------------------------------------
    def low_watermark(self, replica: Replica) -> int:
        """Kafka's Partition.lowWatermarkIfLeader: the smallest log start offset over the leader and the
        followers on alive brokers (-1 for a follower that has not fetched since this leader began)."""
        low = replica.log.log_start_offset
        image = self.manager.cache.image
        for broker_id, state in replica.partition.remote.items():
            if not image.is_fenced(broker_id):
                low = min(low, state.log_start_offset)
        return low

    async def delete_records(
        self, topic: str, index: int, offset: int, timeout_ms: int
    ) -> tuple[ErrorCode, int]:
        """(error, low watermark): moves the leader's log start offset to ``offset`` (or the high
        watermark for -1) and waits until every alive follower's has moved as well."""
        replica = self.manager.replica(topic, index)
        if replica is None:
            known = self.manager.cache.image.topic(topic)
            if known is None or index not in known.partitions:
                return ErrorCode.unknown_topic_or_partition, -1
            return ErrorCode.not_leader_or_follower, -1
        p = replica.partition
        if p.role != Role.LEADER:
            return ErrorCode.not_leader_or_follower, -1
        if not replica.log.config.delete_enabled:
            return ErrorCode.policy_violation, -1
        target = p.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0 or target > p.high_watermark:
            return ErrorCode.offset_out_of_range, -1
        if replica.log.maybe_increment_log_start_offset(target):
            log.info("log start offset moved by DeleteRecords", topic=topic, partition=index, offset=target)
        if self.low_watermark(replica) >= target:
            return ErrorCode.none, self.low_watermark(replica)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(replica.key, [])
        waiters.append((target, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_ms / 1000)
        except TimeoutError:
            return ErrorCode.request_timed_out, self.low_watermark(replica)
        finally:
            if (target, future) in waiters:
                waiters.remove((target, future))
        if p.role != Role.LEADER or self.manager.replica(topic, index) is not replica:
            return ErrorCode.not_leader_or_follower, -1
        return ErrorCode.none, self.low_watermark(replica)

    def on_follower_fetch(self, replica: Replica) -> None:
        """A follower reported its log start offset: completes the DeleteRecords it satisfies."""
        waiters = self._waiters.get(replica.key)
        if not waiters:
            return
        low = self.low_watermark(replica)
        for target, future in list(waiters):
            if low >= target and not future.done():
                future.set_result(None)

    def on_leadership_lost(self, key: tuple[str, int]) -> None:
        for _target, future in self._waiters.pop(key, []):
            if not future.done():
                future.set_result(None)
