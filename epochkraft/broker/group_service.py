"""Asyncio edge of the group coordinator: futures for waiting joins and syncs, a tick timer, durable commits.

The sans-IO GroupCoordinator decides; this class turns its completions into awaited results, runs its
deadlines on a timer, and writes offset commits and classic groups' GroupMetadata records (the leader's
assignment before the group is Stable, a group left Empty, a group's tombstone) to the replicated
``__consumer_offsets`` topic before applying them. The broker supplies an ``OffsetsTopic`` port that knows which broker leads each offsets
partition and can append to it with acks=all.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import struct
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

import structlog

from epochkraft.broker import classic_group_records, consumer_group_classic, consumer_group_records
from epochkraft.broker.classic_group_records import group_metadata_key
from epochkraft.broker.consumer_group import (
    ConsumerGroupCoordinator,
    ConsumerGroupSettings,
    HeartbeatRequest,
    HeartbeatResult,
    TopicsImage,
)
from epochkraft.broker.consumer_group_classic import ClassicJoin
from epochkraft.broker.group_coordinator import (
    CommittedOffset,
    Completion,
    Group,
    GroupCoordinator,
    GroupState,
    JoinResult,
    StoreGroup,
    StoreStaticMember,
    SyncResult,
    coordinator_partition,
)
from epochkraft.broker.group_record_serde import GroupMetadataValue, RecordError, is_json_record, value_bytes
from epochkraft.broker.offset_records import (
    json_offset_record_key,
    offset_record_key,
    offset_record_value,
    parse_offset_record,
)
from epochkraft.protocol.errors import ErrorCode

log = structlog.get_logger()
T = TypeVar("T")
Store = TypeVar("Store", StoreGroup, StoreStaticMember)  # a group record a join or sync waits on
TICK_INTERVAL_S = 0.1
EMPTY_WRITE_RETRY_MS = 1_000  # between the tries of an Empty group's record whose write failed

# Append errors after which the records may still be in the log (appended, not yet replicated): the
# coordinator keeps the changes they carry
MAYBE_APPENDED = frozenset({ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append})


def normalize_append_error(error: ErrorCode) -> ErrorCode:
    """GroupCoordinatorService.normalizeException: a failed __consumer_offsets write as the group APIs'
    clients know to handle it."""
    if error in (
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.unknown_topic_or_partition,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return error


class OffsetsTopic(Protocol):
    """What the group service needs from the broker about ``__consumer_offsets``."""

    num_partitions: int

    def leader_of(self, partition: int, listener_name: str | None = None) -> tuple[int, str, int] | None:
        """(node id, host, port) of the partition's leader on the named listener, or None if unknown,
        the topic is missing or the leader has no such listener."""

    def is_local_leader(self, partition: int) -> bool: ...

    async def ensure(self) -> None:
        """Asks the controller to create the topic if it does not exist yet (idempotent)."""

    async def append(
        self,
        partition: int,
        entries: list[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        """Appends key/value records with acks=all; NONE once committed (HW past them). ``producer`` (id,
        epoch) makes it a transactional batch of that producer."""


class Tombstone(Enum):
    """A record's deletion, where None already means no record."""

    TOMBSTONE = "tombstone"


TOMBSTONE = Tombstone.TOMBSTONE


class TxnOutcome(Enum):
    COMMIT = "commit"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class LoggedOffsetRecord:
    """A record of __consumer_offsets as a loading coordinator replays it: a transaction's record carries
    its producer id; a control record (no key) its transaction's outcome."""

    key: bytes | None
    value: bytes | None
    producer_id: int = -1  # -1: not transactional
    outcome: TxnOutcome | None = None
    offset: int = -1  # its offset in the partition, for the log


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class KeyedLocks:
    """A lock per key, kept only while it is held or waited for."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: collections.Counter[str] = collections.Counter()

    @contextlib.asynccontextmanager
    async def held(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] += 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]


def _idle(task: asyncio.Task[None] | None) -> bool:
    return task is None or task.done()


class GroupService:
    def __init__(
        self,
        offsets_topic: OffsetsTopic,
        coordinator: GroupCoordinator | None = None,
        offsets_retention_check_interval_ms: int = 600_000,
        consumer_group_settings: ConsumerGroupSettings | None = None,
        group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {},
    ) -> None:
        self.offsets_topic = offsets_topic
        self.coordinator = coordinator or GroupCoordinator()
        # KIP-848 consumer groups share the group id namespace and the committed offsets with classic ones
        self.consumer_groups = ConsumerGroupCoordinator(
            consumer_group_settings, self.coordinator, group_configs
        )
        self._consumer_groups_written: dict[str, dict[bytes, bytes]] = {}  # group -> key -> value stored
        self._consumer_group_changes: dict[str, int] = {}  # group -> heartbeats and ticks that changed it
        self._unwritten_consumer_groups: set[str] = set()  # the ticks' changes not yet written
        # offsets loaded from JSON records (before Kafka's format): their tombstones cover those keys too
        self._json_offsets: set[tuple[str, str, int]] = set()
        # group -> its GroupMetadata record live: the last appended in the order the appends were asked for
        self._classic_written: dict[str, GroupMetadataValue] = {}
        self._classic_asked: dict[str, int] = {}  # group -> the order of its latest GroupMetadata append
        self._classic_applied: dict[str, int] = {}  # group -> the order of its latest one known appended
        self._classic_maybe: set[str] = set()  # groups a GroupMetadata record may be live for (to tombstone)
        self._classic_order = itertools.count()
        self._empty_writes: dict[str, asyncio.Task[ErrorCode]] = {}  # at most one per group
        self._empty_retry_at: dict[str, int] = {}  # group -> when its failed Empty record is tried again
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        self._waiters: dict[int, asyncio.Future[JoinResult | SyncResult]] = {}
        self._tokens = itertools.count()
        self._loaded: set[int] = set()
        self._next_record_offset = 0  # above every loaded record's offset: the order of commits written here
        self._failed: set[int] = set()  # offsets partitions whose load failed: NOT_COORDINATOR until reloaded
        self._ticker: asyncio.Task[None] | None = None
        self._stores: set[asyncio.Task[None]] = set()  # leaders' assignments being written
        self._commits_in_flight: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self._consumer_group_writes = KeyedLocks()
        self._consumer_group_writer: asyncio.Task[None] | None = None  # the ticks' writes, one at a time
        self._offset_expiry: asyncio.Task[None] | None = None
        self._last_offset_expiry_ms = self.now_ms()

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick_loop(), name="group-coordinator-ticks")

    async def stop(self) -> None:
        for background in (self._ticker, self._consumer_group_writer, self._offset_expiry):
            if background is not None:
                background.cancel()
        for task in list(self._empty_writes.values()):
            task.cancel()
        for future in self._waiters.values():
            if not future.done():
                future.set_result(JoinResult(ErrorCode.coordinator_not_available))
        self._waiters.clear()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL_S)
            self.tick(self.now_ms())

    def tick(self, now_ms: int) -> None:
        """Expires the groups' deadlines. The writes this leads to (fenced members' groups, expired
        offsets) run beside the ticks, one of each kind at a time: a write waits for the offsets
        partition's replicas (acks=all), and a slow one must not hold back the next deadlines."""
        try:  # the ticks go on whatever one step raises
            self._complete(self.coordinator.tick(now_ms))
            self.store_empty_groups(list(self.coordinator.groups), now_ms)
        except Exception as exc:
            log.warning("could not expire the classic groups' deadlines", error=str(exc))
        try:
            self.fence_expired_consumer_group_members(now_ms)
        except Exception as exc:
            log.warning("could not expire the consumer groups' deadlines", error=str(exc))
        if self._unwritten_consumer_groups and _idle(self._consumer_group_writer):
            self._consumer_group_writer = asyncio.create_task(
                self.write_unwritten_consumer_groups(), name="consumer-group-writes"
            )
        due = now_ms - self._last_offset_expiry_ms >= self.offsets_retention_check_interval_ms
        if due and _idle(self._offset_expiry):
            self._last_offset_expiry_ms = now_ms
            self._offset_expiry = asyncio.create_task(
                self._expire_offsets_logged(now_ms), name="offset-expiry"
            )

    async def persist_ticked_consumer_groups(self, now_ms: int) -> None:
        """One tick's consumer group work, awaited: fences the members whose deadlines passed and writes
        their groups' changes."""
        self.fence_expired_consumer_group_members(now_ms)
        await self.write_unwritten_consumer_groups()

    def fence_expired_consumer_group_members(self, now_ms: int) -> None:
        """Fences the consumer group members whose deadlines passed; their groups are to be written."""
        ticked = {group_id for group_id, _ in self.consumer_groups.tick(now_ms)}
        for group_id in sorted(ticked):
            self._consumer_group_changes[group_id] = self._consumer_group_changes.get(group_id, 0) + 1
        self._unwritten_consumer_groups |= ticked

    async def write_unwritten_consumer_groups(self) -> None:
        """Writes the changes of the groups the ticks changed. A write that fails is tried again at the next
        ticks: a group the fencing downgraded has no heartbeat of its own to carry its tombstones, which a
        new coordinator would otherwise replay. A group changed again while its write is under way stays
        to be written."""
        pending = sorted(self._unwritten_consumer_groups)
        self._unwritten_consumer_groups.difference_update(pending)
        for group_id in pending:
            try:
                error = await self.persist_consumer_group(group_id)
            except Exception as exc:  # the ticks go on
                error, reason = ErrorCode.unknown_server_error, str(exc)
            else:
                reason = error.name
            if error != ErrorCode.none:
                self._unwritten_consumer_groups.add(group_id)
                log.warning("could not write a consumer group's changes", group=group_id, error=reason)

    async def _expire_offsets_logged(self, now_ms: int) -> None:
        try:
            await self.expire_offsets(now_ms)
        except Exception as exc:  # the next check tries again
            log.warning("could not expire committed offsets", error=str(exc))

    async def expire_offsets(self, now_ms: int) -> None:
        """Kafka's cleanupGroupMetadata: tombstones the expired offsets of empty groups (acks=all, so the
        compacted __consumer_offsets drops them too) and forgets groups left with nothing."""
        for group_id in list(self.coordinator.decide_expired_offsets(now_ms)):
            # decided again for each group as its tombstones are asked for, as Kafka decides and writes a
            # group's in one step: a commit landed while an earlier group's were written is not expired, and
            # one still being written is not either
            partitions = [
                tp
                for tp in self.coordinator.expired_offsets(group_id, now_ms)
                if (group_id, *tp) not in self._commits_in_flight
            ]
            if not partitions:
                continue
            if self.coordinator_error(group_id) != ErrorCode.none or self.consumer_groups.is_live(group_id):
                continue
            all_expired = set(partitions) == set(self.coordinator.committed_offsets(group_id))
            # cleanupExpiredOffsets: a group an open transaction commits to stays
            open_txns = self.coordinator.has_open_transactions(group_id)
            deleted = all_expired and not open_txns and self._deletable_classic_group(group_id)
            if await self._delete(group_id, partitions, deleted) == ErrorCode.none:
                log.info("expired committed offsets", group=group_id, partitions=len(partitions))
                if not self.coordinator.committed_offsets(group_id) and not open_txns:
                    self.coordinator.remove_group(group_id)
        for group_id in self.coordinator.empty_groups_without_offsets():
            if self.coordinator_error(group_id) != ErrorCode.none or not self._deletable_classic_group(
                group_id
            ):
                continue
            await self._delete(group_id, [], group_tombstone=True)

    async def _delete(
        self, group_id: str, partitions: list[tuple[str, int]], group_tombstone: bool
    ) -> ErrorCode:
        """``_tombstone``; with the group's tombstone the group is Dead while it is written (nothing joins,
        commits or writes it Empty again), as it was if the write failed, and as a load would replay it if
        the write succeeded (gone, or Empty with an offset whose commit landed before the tombstone)."""
        before = self.coordinator.mark_dead(group_id) if group_tombstone else None
        error = ErrorCode.unknown_server_error
        try:
            error = await self._tombstone(group_id, partitions, group_tombstone)
        finally:  # a failed or abandoned write leaves the group as it was
            if error != ErrorCode.none:
                self.coordinator.revive(group_id, before)
        if group_tombstone and error == ErrorCode.none:
            self.coordinator.forget_deleted_group(group_id)
        return error

    def _deletable_classic_group(self, group_id: str) -> bool:
        """An Empty classic group, which cleanupGroupMetadata deletes with a GroupMetadata tombstone once
        its offsets are gone (maybeDeleteGroup); an empty consumer group of that id stays."""
        group = self.coordinator.groups.get(group_id)
        return (
            group is not None
            and group.state == GroupState.EMPTY
            and group_id not in self.consumer_groups.groups
        )

    def _complete(self, completions: Iterable[Completion]) -> None:
        for completion in completions:
            future = self._waiters.pop(completion.token, None)  # type: ignore[call-overload]
            if future is not None and not future.done():
                future.set_result(completion.result)

    # ---- coordinator ownership ------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(group_id, self.offsets_topic.num_partitions)

    async def find_coordinator(
        self, group_id: str, listener_name: str | None = None
    ) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the broker leading the group's offsets partition, its endpoint
        on the listener the request came in on (Kafka: getAliveBrokerNode(id, listenerName))."""
        leader = self.offsets_topic.leader_of(self.partition_for(group_id), listener_name)
        if leader is None:
            await self.offsets_topic.ensure()
            return ErrorCode.coordinator_not_available, -1, "", -1
        return (ErrorCode.none, *leader)

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NOT_COORDINATOR unless this broker leads the group's offsets partition and has loaded it."""
        partition = self.partition_for(group_id)
        if not self.offsets_topic.is_local_leader(partition):
            return ErrorCode.not_coordinator
        if partition in self._failed:
            return ErrorCode.not_coordinator
        if partition not in self._loaded:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def load_partition(
        self, partition: int, records: Iterable[LoggedOffsetRecord], topics: TopicsImage | None = None
    ) -> None:
        """Replays an offsets partition's records when this broker becomes its leader; a transaction's
        offsets wait for its marker, as Kafka's GroupMetadataManager.doLoadGroupsAndOffsets. ``topics``:
        the metadata the consumer groups' subscribed topics are looked up in. A record that cannot be read
        is logged and skipped; a load that fails anyway leaves this partition's coordinator failed
        (NOT_COORDINATOR) without raising into the leadership change that called it, as Kafka's
        CoordinatorRuntime fails the one shard."""
        self._failed.discard(partition)
        try:
            self._load(partition, records, topics)
        except Exception:
            log.exception(
                "could not load an offsets partition: its groups are not coordinated here",
                partition=partition,
            )
            self.unload_partition(partition)
            self._failed.add(partition)

    def _load(
        self, partition: int, records: Iterable[LoggedOffsetRecord], topics: TopicsImage | None
    ) -> None:
        coordinator = self.coordinator
        coordinator.drop_pending_txn_offsets(partition)
        json_records: dict[str, dict[bytes, bytes]] = {}  # group -> the JSON records still live
        read_only: dict[str, dict[bytes, bytes]] = {}  # group -> Kafka's records we only read, still live
        for record in records:
            self._next_record_offset = max(self._next_record_offset, record.offset + 1)
            try:
                self._replay(partition, record, json_records, read_only)
            except (RecordError, ValueError, struct.error) as exc:
                log.error(
                    "skipped an offsets record that cannot be read",
                    partition=partition,
                    offset=record.offset,
                    key=None if record.key is None else record.key.hex(),
                    error=str(exc),
                )
        classic = [g for g in self.coordinator.groups if self.partition_for(g) == partition]
        self.coordinator.on_loaded(self.now_ms(), classic)
        loaded = [g for g in self.consumer_groups.groups if self.partition_for(g) == partition]
        self.consumer_groups.on_loaded(self.now_ms(), loaded, topics)
        for group_id in loaded:
            group = self.consumer_groups.groups[group_id]
            # a group stored as JSON has none of Kafka's records yet: its next write has them all
            written = json_records.get(group_id) or consumer_group_records.group_records(group)
            self._consumer_groups_written[group_id] = written | read_only.get(group_id, {})
        self._loaded.add(partition)

    def _replay(
        self,
        partition: int,
        record: LoggedOffsetRecord,
        json_records: dict[str, dict[bytes, bytes]],
        read_only: dict[str, dict[bytes, bytes]],
    ) -> None:
        coordinator = self.coordinator
        if record.outcome is not None:
            committed = record.outcome == TxnOutcome.COMMIT
            coordinator.complete_transactional_offsets(partition, record.producer_id, -1, committed)
            return
        if record.key is None:
            return
        parsed = parse_offset_record(record.key, record.value)
        if parsed is None and self._replay_group_metadata(record.key, record.value):
            return
        if parsed is None:
            consumer_group_records.replay(self.consumer_groups, record.key, record.value)
            group_id = consumer_group_records.json_record_group(record.key)
            _note_live(group_id, record.key, record.value, json_records)
            group_id = consumer_group_records.read_only_record_group(record.key)
            _note_live(group_id, record.key, record.value, read_only)
            return
        group_id, topic, index, offset = parsed
        if offset is not None:
            offset = dataclasses.replace(offset, record_offset=record.offset)
        if is_json_record(record.key):
            self._json_offsets.add((group_id, topic, index))
        if record.producer_id < 0:
            coordinator.apply_offset(group_id, topic, index, offset)
        elif offset is not None:
            coordinator.add_pending_txn_offsets(
                partition, record.producer_id, group_id, {(topic, index): offset}
            )

    def _replay_group_metadata(self, key: bytes, value: bytes | None) -> bool:
        """A classic group's GroupMetadata record replayed; False for a record of another kind."""
        parsed = classic_group_records.parse(key, value)
        if parsed is None:
            return False
        group_id, record_value = parsed
        loaded = (
            None if record_value is None else classic_group_records.group_from_record(group_id, record_value)
        )
        self.coordinator.replay_group_metadata(group_id, loaded)
        if record_value is None:
            self._classic_written.pop(group_id, None)
            self._classic_maybe.discard(group_id)
        else:
            self._classic_written[group_id] = record_value
            self._classic_maybe.add(group_id)
        return True

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads the partition: its groups move to the new coordinator."""
        self._loaded.discard(partition)
        self.coordinator.drop_pending_txn_offsets(partition)
        self._complete(self.coordinator.unload_groups(lambda g: self.partition_for(g) == partition))
        self.consumer_groups.unload_groups(lambda g: self.partition_for(g) == partition)
        for group_id in [g for g in self._consumer_groups_written if self.partition_for(g) == partition]:
            del self._consumer_groups_written[group_id]
        for classic in (
            self._classic_written,
            self._classic_asked,
            self._classic_applied,
            self._empty_retry_at,
        ):
            for group_id in [g for g in classic if self.partition_for(g) == partition]:
                del classic[group_id]
        self._classic_maybe = {g for g in self._classic_maybe if self.partition_for(g) != partition}
        self.consumer_groups.converted_to_classic -= {
            g for g in self.consumer_groups.converted_to_classic if self.partition_for(g) == partition
        }
        self._json_offsets = {o for o in self._json_offsets if self.partition_for(o[0]) != partition}
        for group_id in [g for g in self._consumer_group_changes if self.partition_for(g) == partition]:
            del self._consumer_group_changes[group_id]
        self._unwritten_consumer_groups = {
            g for g in self._unwritten_consumer_groups if self.partition_for(g) != partition
        }

    # ---- membership -----------------------------------------------------------------------------------
    def _waiter(self) -> tuple[int, asyncio.Future[JoinResult | SyncResult]]:
        token = next(self._tokens)
        future: asyncio.Future[JoinResult | SyncResult] = asyncio.get_running_loop().create_future()
        self._waiters[token] = future
        return token, future

    async def join(self, request: ClassicJoin, topics: TopicsImage) -> JoinResult:
        """A classic JoinGroup: into the consumer group of that id if it has members (Kafka's
        classicGroupJoinToConsumerGroup, answered once its changes are written), else into the classic
        group (an empty consumer group of that id goes first, its tombstones written). The session timeout
        is checked before either, as GroupCoordinatorService.joinGroup."""
        group_id = request.group_id
        error = self._invalid_join(request)
        if error == ErrorCode.none and not self.consumer_groups.is_live(group_id):
            self.consumer_groups.remove_empty_group(group_id)
            error = normalize_append_error(await self.persist_consumer_group(group_id))
        if error != ErrorCode.none:
            return JoinResult(error, member_id=request.member_id)
        # checked again after the write: a consumer member may have created the group meanwhile
        if self.consumer_groups.is_live(group_id):
            joined, error = await self._change_consumer_group(
                group_id,
                lambda: consumer_group_classic.join(self.consumer_groups, self.now_ms(), request, topics),
            )
            return joined if joined is not None else JoinResult(error, member_id=request.member_id)
        created = group_id not in self.coordinator.groups
        token, future = self._waiter()
        done, store = self.coordinator.join_group(
            self.now_ms(),
            token,
            group_id=group_id,
            member_id=request.member_id,
            group_instance_id=request.instance_id,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            client_id=request.client_id,
            client_host=request.client_host,
            require_known_member_id=request.require_known_member_id,
            skip_assignment_supported=request.skip_assignment_supported,
        )
        self._complete(done)
        if created and store is None and group_id in self.coordinator.groups:
            group = self.coordinator.groups[group_id]
            self._background(self._write_new_group(group_id, group, self._classic_asked.get(group_id)))
        result = await self._answer(token, future, store, self._store_static_member)
        assert isinstance(result, JoinResult)
        return result

    def _new_group_value(self, group: Group) -> GroupMetadataValue:
        """GroupCoordinatorRecordHelpers.newEmptyGroupMetadataRecord: generation 0, no members, no protocol,
        protocol type or leader."""
        timestamp = self.now_ms() if group.state_timestamp_ms is None else group.state_timestamp_ms
        return GroupMetadataValue("", 0, None, None, timestamp, ())

    async def _write_new_group(self, group_id: str, group: Group, asked_at_join: int | None) -> None:
        """classicGroupJoinToClassicGroup: a group a JoinGroup created is written at once, empty, so it is
        known to a new coordinator (and tombstoned by an upgrade) before its first rebalance completes.
        The join is not held for it (MEMBER_ID_REQUIRED is answered at once, as Kafka's). Kafka appends it
        in the join's own batch; here it waits for its turn, so it is left out if another record of the
        group was asked for first (a rebalance's, a deletion's or an upgrade's tombstone: the log must end
        with that one). A write that failed drops the group again and answers its waiting joins the error,
        as Kafka reverts the join, unless the record may be in the log or the group changed meanwhile."""
        if (
            self.coordinator.groups.get(group_id) is not group
            or self._classic_asked.get(group_id) != asked_at_join
            or group_id in self.consumer_groups.groups
        ):
            return
        value = self._new_group_value(group)
        order = self._ask_classic_append(group_id, value)  # nothing awaited since the checks above
        try:
            error = await self.offsets_topic.append(
                self.partition_for(group_id), [(group_metadata_key(group_id), value_bytes(value))]
            )
        except Exception as exc:
            log.warning("could not write a new group's metadata", group=group_id, error=str(exc))
            error = ErrorCode.unknown_server_error
        if error == ErrorCode.none:
            self._classic_appended(group_id, order, value)
            return
        log.warning("could not write a new group's metadata", group=group_id, error=error.name)
        untouched = (
            self.coordinator.groups.get(group_id) is group
            and self._classic_asked.get(group_id) == order
            and group_id not in self.consumer_groups.groups
        )
        if untouched and error not in MAYBE_APPENDED:
            self._complete(self.coordinator.revert_new_group(group_id, normalize_append_error(error)))

    async def _answer(
        self,
        token: int,
        future: asyncio.Future[JoinResult | SyncResult],
        store: Store | None,
        write: Callable[[Store, GroupMetadataValue], Coroutine[object, None, None]],
    ) -> JoinResult | SyncResult:
        """A join's or sync's answer: given by the write of the group's record ``store`` asks for, started
        here, unless a rebalance or an unload answers first."""
        try:
            if store is not None:
                group = self.coordinator.groups[store.group_id]
                value = classic_group_records.group_metadata_value(group, store.assignments)
                self._background(write(store, value))
            return await future
        finally:
            self._waiters.pop(token, None)

    def _background(self, write: Coroutine[object, None, None]) -> None:
        """A group's write, finished even if the request is dropped (others wait on what it decides) and
        not waited on: the request waits for its own answer, which a rebalance or an unload may give
        first."""
        task = asyncio.create_task(write)
        self._stores.add(task)
        task.add_done_callback(self._stores.discard)

    async def _store_static_member(self, store: StoreStaticMember, value: GroupMetadataValue) -> None:
        """updateStaticMemberThenRebalanceOrCompleteJoin's append: the group with the replaced static member
        written before its join is answered; a failed write puts the old member back."""
        error = await self._append_group_record(store.group_id, value)
        done = self.coordinator.complete_static_store(self.now_ms(), store, normalize_append_error(error))
        self._complete(done)

    async def _append_group_record(self, group_id: str, value: GroupMetadataValue) -> ErrorCode:
        """The group's GroupMetadata record appended (acks=all); an exception is UNKNOWN_SERVER_ERROR."""
        key = group_metadata_key(group_id)
        order = self._ask_classic_append(group_id, value)
        try:
            error = await self.offsets_topic.append(self.partition_for(group_id), [(key, value_bytes(value))])
        except Exception as exc:  # whoever waits is answered all the same
            log.warning("could not write a group's metadata", group=group_id, error=str(exc))
            return ErrorCode.unknown_server_error
        if error == ErrorCode.none:
            self._classic_appended(group_id, order, value)
        return error

    def _ask_classic_append(self, group_id: str, value: GroupMetadataValue | None) -> int:
        """Called just before a GroupMetadata record (``value``, None for a tombstone) is appended, nothing
        awaited between: appends to a partition are made in the order they are asked for, so this order is
        the log's. From then on a record may be live, whatever the append's outcome."""
        order = self._classic_asked[group_id] = next(self._classic_order)
        if value is not None:
            self._classic_maybe.add(group_id)
        return order

    def _classic_appended(self, group_id: str, order: int, value: GroupMetadataValue | None) -> None:
        """A GroupMetadata append asked for at ``order`` succeeded: the group's live record unless one
        asked for later already is (appends complete in any order)."""
        superseded = order < self._classic_applied.get(group_id, -1)
        if superseded or self.coordinator_error(group_id) != ErrorCode.none:
            return
        self._classic_applied[group_id] = order
        if value is not None:
            self._classic_written[group_id] = value
            return
        self._classic_written.pop(group_id, None)
        self._empty_retry_at.pop(group_id, None)
        if self._classic_asked.get(group_id) == order:
            self._classic_maybe.discard(group_id)

    def _invalid_join(self, request: ClassicJoin) -> ErrorCode:
        """INVALID_GROUP_ID or INVALID_SESSION_TIMEOUT (group.min/max.session.timeout.ms), whatever group
        the id names; NONE if the join may go on."""
        settings = self.coordinator.settings
        if not request.group_id:
            return ErrorCode.invalid_group_id
        if (
            not settings.min_session_timeout_ms
            <= request.session_timeout_ms
            <= settings.max_session_timeout_ms
        ):
            return ErrorCode.invalid_session_timeout
        return ErrorCode.none

    async def sync(
        self,
        topics: TopicsImage,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: dict[str, bytes],
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        if self.consumer_groups.is_live(group_id):
            return consumer_group_classic.sync(
                self.consumer_groups,
                self.now_ms(),
                group_id=group_id,
                member_id=member_id,
                instance_id=instance_id,
                generation_id=generation_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                topics=topics,
            )
        token, future = self._waiter()
        done, store = self.coordinator.sync_group(
            self.now_ms(),
            token,
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            assignments=assignments,
            group_instance_id=instance_id,
        )
        self._complete(done)
        result = await self._answer(token, future, store, self._store_group)
        assert isinstance(result, SyncResult)
        return result

    async def _store_group(self, store: StoreGroup, value: GroupMetadataValue) -> None:
        """completeClassicGroupSync: the leader's assignment written as the group's GroupMetadata record
        (acks=all) before the group is Stable and the syncs are answered; a failed write answers them the
        error as clients know it and the group rebalances."""
        error = await self._append_group_record(store.group_id, value)
        self._complete(self.coordinator.complete_store(self.now_ms(), store, normalize_append_error(error)))

    def store_empty_groups(self, group_ids: Iterable[str], now_ms: int) -> list[asyncio.Task[ErrorCode]]:
        """completeClassicGroupJoin's record when a rebalance left a group Empty: its new generation
        without members, written in the background (a slow acks=all append holds no timer), at most one
        write per group. A failure is logged (Kafka only warns) and tried again EMPTY_WRITE_RETRY_MS later.
        The writes started or under way."""
        writes = []
        for group_id in group_ids:
            if now_ms >= self._empty_retry_at.get(group_id, 0) and (write := self._empty_write(group_id)):
                writes.append(write)
        return writes

    def _empty_write(self, group_id: str) -> asyncio.Task[ErrorCode] | None:
        """The group's Empty record write under way, or one started if the record is due."""
        running = self._empty_writes.get(group_id)
        if running is not None or self._empty_record_due(group_id) is None:
            return running
        task = asyncio.create_task(self._write_empty_group(group_id), name=f"empty-group-{group_id}")
        self._empty_writes[group_id] = task
        task.add_done_callback(lambda _: self._empty_writes.pop(group_id, None))
        return task

    async def _write_empty_group(self, group_id: str) -> ErrorCode:
        """The Empty record due when the write starts (a deletion may have come since it was asked for),
        again while a newer one is due; the last append's error."""
        error = ErrorCode.none
        while (value := self._empty_record_due(group_id)) is not None:
            error = await self._append_group_record(group_id, value)
            if error != ErrorCode.none:
                self._empty_retry_at[group_id] = self.now_ms() + EMPTY_WRITE_RETRY_MS
                log.warning("could not write an empty group's metadata", group=group_id, error=error.name)
                break
            self._empty_retry_at.pop(group_id, None)
        return error

    def _empty_record_due(self, group_id: str) -> GroupMetadataValue | None:
        """The Empty record of a classic group that had members and whose generation without them is not
        written yet; None otherwise (a consumer group of that id holds it, or it is coordinated elsewhere)."""
        group = self.coordinator.groups.get(group_id)
        if group is None or group.state != GroupState.EMPTY or group.protocol_type is None:
            return None
        written = self._classic_written.get(group_id)
        if written is not None and written.generation == group.generation_id and not written.members:
            return None
        if group_id in self.consumer_groups.groups or self.coordinator_error(group_id) != ErrorCode.none:
            return None
        return classic_group_records.group_metadata_value(group, {})

    async def consumer_heartbeat(self, request: HeartbeatRequest, topics: TopicsImage) -> HeartbeatResult:
        """A ConsumerGroupHeartbeat, answered once the group's changes are written (acks=all)."""

        def heartbeat() -> HeartbeatResult:
            result = self.consumer_groups.heartbeat(self.now_ms(), request, topics)
            self._complete(result.classic_completions)  # a converted classic group's waiters rejoin
            return result

        result, error = await self._change_consumer_group(request.group_id, heartbeat)
        return result if result is not None else HeartbeatResult(error)

    async def _change_consumer_group(
        self, group_id: str, change: Callable[[], T]
    ) -> tuple[T, ErrorCode] | tuple[None, ErrorCode]:
        """Runs ``change`` on the consumer groups and writes what it changed: (its result, NONE), or (None,
        the write's error as clients know it) if the write failed. The group is then as before (Kafka
        reverts to its snapshot), a conversion either way undone with it, unless another change came
        meanwhile or the records may be in the log."""
        before = self.consumer_groups.groups.get(group_id)
        snapshot = before.copy() if before is not None else None
        classic_snapshot = self.coordinator.membership_snapshot(group_id)
        count = self._consumer_group_changes[group_id] = self._consumer_group_changes.get(group_id, 0) + 1
        result = change()
        after = self.consumer_groups.groups.get(group_id)
        if before is None and after is not None and classic_snapshot is not None:
            # convertToConsumerGroup writes the classic group's tombstone whether or not a record of it was
            # written (a group a commit made, joined since, has none)
            self._classic_maybe.add(group_id)
        error = await self.persist_consumer_group(group_id)
        if error == ErrorCode.none:
            return result, error
        untouched = (
            self._consumer_group_changes.get(group_id) == count
            and self.consumer_groups.groups.get(group_id) is after
        )
        if untouched and error not in MAYBE_APPENDED:
            if snapshot is None:
                self.consumer_groups.groups.pop(group_id, None)
                if classic_snapshot is not None:  # an upgrade undone: the classic group as it was
                    self.coordinator.restore_membership(classic_snapshot)
            else:
                self.consumer_groups.groups[group_id] = snapshot
                self.consumer_groups.converted_to_classic.discard(group_id)
                if self.coordinator.classic_group_of(group_id) is not None:  # a downgrade undone
                    self._complete(self.coordinator.release_members(group_id))
        return None, normalize_append_error(error)

    async def persist_consumer_group(self, group_id: str) -> ErrorCode:
        """Writes what changed in a consumer group since its last write (tombstones for what is gone);
        the append's error as it is. A group's writes run in turn, as Kafka's runtime runs them, each
        comparing with what the one before wrote: two at once would both compare with the same records,
        and the later could leave out a key the earlier changed and the group then changed back."""
        async with self._consumer_group_writes.held(group_id):
            return await self._persist_consumer_group(group_id)

    async def _persist_consumer_group(self, group_id: str) -> ErrorCode:
        group = self.consumer_groups.groups.get(group_id)
        if group is None and group_id not in self._consumer_groups_written:
            return ErrorCode.none
        written = self._consumer_groups_written.setdefault(group_id, {})
        records = consumer_group_records.records_to_write(group, written)
        classic = self._conversion_record(group_id)
        if isinstance(classic, Tombstone):
            records = [(group_metadata_key(group_id), None), *records]
        elif classic is not None:
            records = [*records, (group_metadata_key(group_id), value_bytes(classic))]
        if not records:
            return ErrorCode.none
        classic_value = classic if isinstance(classic, GroupMetadataValue) else None
        order = None if classic is None else self._ask_classic_append(group_id, classic_value)
        error = await self.offsets_topic.append(self.partition_for(group_id), records)
        if error == ErrorCode.none:
            for key, value in records:
                if value is None:
                    written.pop(key, None)
                else:
                    written[key] = value
            if group is None:
                del self._consumer_groups_written[group_id]
            if order is not None:
                self._classic_appended(group_id, order, classic_value)
            if classic_value is not None:
                self.consumer_groups.converted_to_classic.discard(group_id)
        return error

    def _conversion_record(self, group_id: str) -> GroupMetadataValue | Tombstone | None:
        """The GroupMetadata record written with a consumer group's records, as Kafka's conversions: its
        tombstone, first, when a consumer group took the id of a classic group whose record may be live
        (convertToConsumerGroup, or an empty classic group replaced: whether or not an append of it
        finished); the classic group's record, after the consumer group's tombstones, until written once
        the consumer group became it (convertToClassicGroup's createClassicGroupRecords, each member with
        its assignment); None otherwise."""
        if group_id in self.consumer_groups.groups:
            return TOMBSTONE if group_id in self._classic_maybe else None
        classic = self.coordinator.classic_group_of(group_id)
        if classic is None or group_id not in self.consumer_groups.converted_to_classic:
            return None
        return classic_group_records.synced_value(classic)

    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, instance_id: str | None = None
    ) -> ErrorCode:
        if self.consumer_groups.is_live(group_id):
            return consumer_group_classic.heartbeat(
                self.consumer_groups,
                self.now_ms(),
                group_id=group_id,
                member_id=member_id,
                instance_id=instance_id,
                generation_id=generation_id,
            )
        return self.coordinator.heartbeat(
            self.now_ms(),
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
        )

    async def leave(
        self, *, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup of (member id, instance id) pairs: members of a consumer group, of either protocol,
        are fenced (its changes written first); else the classic group's members (by member id, or a static
        member by its instance id)."""
        if self.consumer_groups.is_live(group_id):
            left, error = await self._change_consumer_group(
                group_id,
                lambda: consumer_group_classic.leave(self.consumer_groups, self.now_ms(), group_id, members),
            )
            return left if left is not None else (error, [error] * len(members))
        top, errors, done = self.coordinator.leave_group(self.now_ms(), group_id=group_id, members=members)
        self._complete(done)
        write = self._empty_write(group_id)
        # answered by the write that leaves the group Empty, as Kafka's; the members stay removed if it fails
        error = ErrorCode.none if write is None else await asyncio.shield(write)
        if error != ErrorCode.none:
            error = normalize_append_error(error)
            return error, [error] * len(members)
        return top, errors

    # ---- offsets ---------------------------------------------------------------------------------------
    async def commit(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        entries: list[OffsetCommitEntry],
        api_version: int = 9,
        group_instance_id: str | None = None,
    ) -> list[ErrorCode]:
        """Validates, writes to __consumer_offsets with acks=all, then applies. One error per entry, in
        order: the group's error for every entry if it refuses the commit; else OFFSET_METADATA_TOO_LARGE
        for an entry whose metadata is too long (not written, as Kafka's OffsetMetadataManager.commitOffset)
        and the append's error for the others."""
        error = self.consumer_groups.validate_offset_commit(group_id, member_id, generation_id, api_version)
        if error is None:
            error = self.coordinator.validate_offset_commit(
                group_id=group_id,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=group_instance_id,
                api_version=api_version,
            )
        if error != ErrorCode.none:
            return [error] * len(entries)
        errors, accepted = self._metadata_checked(entries)
        if accepted:
            error = await self._write_offsets(group_id, accepted)
        return [error if entry_error == ErrorCode.none else entry_error for entry_error in errors]

    def _metadata_checked(
        self, entries: list[OffsetCommitEntry]
    ) -> tuple[list[ErrorCode], list[OffsetCommitEntry]]:
        """Each entry's error (OFFSET_METADATA_TOO_LARGE for metadata over offset.metadata.max.bytes, else
        none) and the entries to write."""
        errors = [
            ErrorCode.offset_metadata_too_large
            if self.coordinator.offset_metadata_too_large(e.metadata)
            else ErrorCode.none
            for e in entries
        ]
        accepted = [e for e, error in zip(entries, errors, strict=True) if error == ErrorCode.none]
        return errors, accepted

    async def _write_offsets(self, group_id: str, entries: list[OffsetCommitEntry]) -> ErrorCode:
        """The commits, and tombstones for the JSON keys of the offsets they replace (loaded from records
        written before Kafka's format): compaction would otherwise keep those for good."""
        now, record_offset = self.now_ms(), self._take_record_offset()
        committed = [(e, _committed(e, now, record_offset)) for e in entries]
        legacy = [(group_id, e.topic, e.partition) for e in entries]
        legacy = [offset for offset in legacy if offset in self._json_offsets]
        records: list[tuple[bytes, bytes | None]] = [(json_offset_record_key(*o), None) for o in legacy]
        records += [
            (offset_record_key(group_id, e.topic, e.partition), offset_record_value(c)) for e, c in committed
        ]
        writing = [(group_id, e.topic, e.partition) for e in entries]
        self._commits_in_flight.update(writing)
        try:
            error = await self.offsets_topic.append(self.partition_for(group_id), records)
        finally:
            for offset in writing:
                self._commits_in_flight[offset] -= 1
                if not self._commits_in_flight[offset]:
                    del self._commits_in_flight[offset]
        if error != ErrorCode.none:
            return normalize_append_error(error)
        self._json_offsets.difference_update(legacy)
        for e, c in committed:
            self.coordinator.apply_offset(group_id, e.topic, e.partition, c)
        return ErrorCode.none

    async def txn_commit(
        self,
        *,
        group_id: str,
        producer: tuple[int, int],
        generation_id: int,
        member_id: str,
        entries: list[OffsetCommitEntry],
        group_instance_id: str | None = None,
    ) -> list[ErrorCode]:
        """TxnOffsetCommit: written as a transactional batch of the producer, then pending until the
        transaction's marker (``GroupCoordinator.complete_transactional_offsets``). One error per entry."""
        error = self.coordinator_error(group_id)
        if error == ErrorCode.none:
            error = self._validate_txn_offset_commit(group_id, member_id, generation_id, group_instance_id)
        if error != ErrorCode.none:
            return [error] * len(entries)
        errors, accepted = self._metadata_checked(entries)
        if accepted:
            now, record_offset = self.now_ms(), self._take_record_offset()
            offsets = {(e.topic, e.partition): _committed(e, now, record_offset) for e in accepted}
            records = [
                (offset_record_key(group_id, t, p), offset_record_value(c)) for (t, p), c in offsets.items()
            ]
            partition = self.partition_for(group_id)
            error = await self.offsets_topic.append(partition, records, producer)
            if error == ErrorCode.none:
                self.coordinator.add_pending_txn_offsets(partition, producer[0], group_id, offsets)
        return [error if entry_error == ErrorCode.none else entry_error for entry_error in errors]

    def _take_record_offset(self) -> int:
        """Taken as the append is asked for: appends to a partition are made in the order they are asked
        for, so these orders follow the log's."""
        self._next_record_offset += 1
        return self._next_record_offset - 1

    def _validate_txn_offset_commit(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode:
        """Kafka's OffsetMetadataManager.validateTransactionalOffsetCommit: a consumer group (KIP-848)
        checks the member and its epoch (a stale epoch is ILLEGAL_GENERATION here), a classic group its
        generation."""
        error = self.consumer_groups.validate_offset_commit(
            group_id, member_id, generation_id, api_version=0, transactional=True
        )
        if error is not None:
            return ErrorCode.illegal_generation if error == ErrorCode.stale_member_epoch else error
        return self.coordinator.validate_offset_commit(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            transactional=True,
        )

    def unstable(self, group_id: str, topic: str, partition: int) -> bool:
        return self.coordinator.has_pending_txn_offsets(group_id, topic, partition)

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """Committed offsets of the requested partitions (None = all the group has)."""
        stored = self.coordinator.committed_offsets(group_id)
        if partitions is None:
            return dict(stored)
        return {tp: stored.get(tp) for tp in partitions}

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Tombstones the group's offsets with acks=all, then forgets the group (but an offset committed
        meanwhile, which a new coordinator would load)."""
        error = self.coordinator_error(group_id)
        if error != ErrorCode.none:
            return error
        consumer_group_existed = group_id in self.consumer_groups.groups
        if not self.consumer_groups.remove_empty_group(group_id):
            return ErrorCode.non_empty_group
        error = await self.persist_consumer_group(group_id)
        if error != ErrorCode.none:
            return normalize_append_error(error)
        error, offsets = self.coordinator.decide_delete_group(group_id)
        if error == ErrorCode.group_id_not_found and consumer_group_existed:
            error = ErrorCode.none
        if error == ErrorCode.none:
            # a classic group's tombstone, and one for a GroupMetadata record a consumer group left live
            group_tombstone = not consumer_group_existed or group_id in self._classic_maybe
            error = await self._delete(group_id, offsets, group_tombstone)
        if error == ErrorCode.none and not group_tombstone:  # with it, _delete has forgotten the group
            self.coordinator.forget_deleted_group(group_id)
        return error

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        error = self.coordinator_error(group_id)
        if error != ErrorCode.none:
            return error, {}
        error, results = self.coordinator.decide_delete_offsets(group_id, partitions)
        subscribed = self.consumer_groups.subscribed_topics(group_id)
        results = {
            tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else e for tp, e in results.items()
        }
        stored = self.coordinator.committed_offsets(group_id)
        deletable = [tp for tp, e in results.items() if e == ErrorCode.none and tp in stored]
        if error == ErrorCode.none and deletable:
            written = await self._tombstone(group_id, deletable)
            if written != ErrorCode.none:
                return written, {}
        return error, results

    async def _tombstone(
        self, group_id: str, partitions: list[tuple[str, int]], group_tombstone: bool = False
    ) -> ErrorCode:
        """The offsets' tombstones, then with ``group_tombstone`` the classic group's GroupMetadata one
        (ClassicGroup.createGroupTombstoneRecords, which Kafka writes for every classic group deleted)."""
        records: list[tuple[bytes, bytes | None]] = [
            (offset_record_key(group_id, t, p), None) for t, p in partitions
        ]
        legacy = [(group_id, t, p) for t, p in partitions if (group_id, t, p) in self._json_offsets]
        records += [(json_offset_record_key(*offset), None) for offset in legacy]
        if group_tombstone:
            records.append((group_metadata_key(group_id), None))
        if not records:
            return ErrorCode.none
        order = self._ask_classic_append(group_id, None) if group_tombstone else None
        tombstones_at = self._take_record_offset()
        error = await self.offsets_topic.append(self.partition_for(group_id), records)
        if error == ErrorCode.none:
            self._json_offsets.difference_update(legacy)
            now_committed = self.coordinator.committed_offsets(group_id)
            for topic, partition in partitions:
                committed = now_committed.get((topic, partition))
                if committed is None or committed.record_offset < tombstones_at:  # not one written after
                    self.coordinator.apply_offset(group_id, topic, partition, None)
            if order is not None:
                self._classic_appended(group_id, order, None)
        return normalize_append_error(error)

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group this broker coordinates."""
        return [
            (g.group_id, g.protocol_type or "", str(g.state))
            for g in self.coordinator.groups.values()
            if self.coordinator_error(g.group_id) == ErrorCode.none
        ]


def _note_live(
    group_id: str | None, key: bytes, value: bytes | None, live: dict[str, dict[bytes, bytes]]
) -> None:
    """A group's record that its next write must tombstone (a JSON one written before Kafka's format, or
    one of Kafka's this coordinator does not write): counted as written while its key is live, as
    compaction would keep it and a later load replay it."""
    if group_id is None:
        return
    if value is None:
        live.get(group_id, {}).pop(key, None)
    else:
        live.setdefault(group_id, {})[key] = value


def _committed(entry: OffsetCommitEntry, now_ms: int, record_offset: int) -> CommittedOffset:
    """No metadata is kept as the empty string, as Kafka's OffsetAndMetadata.fromRequest: OffsetFetch
    answers the same before and after the record is loaded again."""
    return CommittedOffset(entry.offset, entry.leader_epoch, entry.metadata or "", now_ms, record_offset)
