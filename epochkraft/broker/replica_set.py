"""Sans-IO replica set: the partitions one broker hosts and the AlterPartition sender between them and the
controller (the decisions of Kafka's ReplicaManager and Partition, without their IO).

Events in: metadata changes, leader appends, follower fetches, AlterPartition answers and ticks, each with
``now_ms``. Actions out: each of those calls returns a ``ReplicaOutputs`` (as the Raft core returns its
``Output``): the ``Transition``s (become leader or follower, drop a replica) for the driver to carry out on
its logs and fetchers, the partitions whose high watermark moved (wake their waiters) and the ``IsrEvent``s
(ISR change requested / rejected / committed). Nothing is left in the object for a driver to drain.
``ReplicaManager`` drives it with asyncio, real logs and sockets; the simulator drives the same object over
its simulated logs and network.

A change the AlterPartition sender refuses (one for the partition is still queued or in flight) fails at
once with OPERATION_NOT_ATTEMPTED and the partition reverts to its committed state, as Kafka's
AlterPartitionManager.submit; a later fetch or tick proposes it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.alter_partition.v3.response import AlterPartitionResponse

from epochkraft.broker.alter_partition_manager import AlterPartitionManager, AlterPartitionRequest
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.partition import AlterPartitionItem, Partition, Role
from epochkraft.metadata.config_schema import MIN_INSYNC
from epochkraft.metadata.image import MetadataImage
from epochkraft.metadata.registrations import PartitionRegistration
from epochkraft.protocol.errors import ErrorCode

Key = tuple[str, int]


class ReplicaHost(Protocol):
    """What the replica set asks of the driver's storage."""

    def open_replica(self, key: Key) -> int:
        """Creates the replica's log if needed; returns its checkpointed high watermark."""
        ...

    def log_end_offset(self, key: Key) -> int: ...


@dataclass(frozen=True, slots=True)
class Transition:
    """What the driver must do for one partition after a metadata change."""

    key: Key
    kind: str  # "leader", "follower" or "removed"
    new_term: bool = False  # leader: a new leadership or leader epoch; follower: a new leader to fetch from
    was_leader: bool = False
    leader: int = -1


@dataclass(frozen=True, slots=True)
class IsrEvent:
    key: Key
    kind: str  # "requested", "rejected", "changed"
    item: AlterPartitionItem | None = None
    error: ErrorCode = ErrorCode.none
    isr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicaOutputs:
    """What one call to the replica set left for its driver to carry out, in the order it happened."""

    transitions: tuple[Transition, ...] = ()
    hw_moved: tuple[Key, ...] = ()  # each once: wake the partition's waiters
    isr_events: tuple[IsrEvent, ...] = ()  # log and count; send the requested ones


# Returned whenever nothing happened: a follower's fetch of every partition allocates nothing then.
NO_OUTPUTS = ReplicaOutputs()


class _Collector:
    """The outputs of a call that visits several partitions, gathered as they happen."""

    __slots__ = ("hw_moved", "isr_events")

    def __init__(self) -> None:
        self.hw_moved: dict[Key, None] = {}  # a set keeping the order of the moves
        self.isr_events: list[IsrEvent] = []

    def add(self, key: Key, event: IsrEvent | None, hw_moved: bool) -> None:
        if event is not None:
            self.isr_events.append(event)
        if hw_moved:
            self.hw_moved[key] = None

    def outputs(self, transitions: tuple[Transition, ...] = ()) -> ReplicaOutputs:
        if not (transitions or self.hw_moved or self.isr_events):
            return NO_OUTPUTS
        return ReplicaOutputs(transitions, tuple(self.hw_moved), tuple(self.isr_events))


@dataclass
class ReplicaSet:
    broker_id: int
    broker_epoch: Callable[[], int]
    cache: MetadataCache
    host: ReplicaHost
    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1  # the broker's default for topics without their own
    unsafe_pre_kip903: bool = False
    alter_retry_backoff_ms: int = 100
    partitions: dict[Key, Partition] = field(default_factory=dict)
    stats: dict[str, int] = field(
        default_factory=lambda: {"isr_shrinks": 0, "isr_expands": 0, "failed_isr_updates": 0}
    )

    def __post_init__(self) -> None:
        self.alter = AlterPartitionManager(
            self.broker_id,
            self.broker_epoch,
            unsafe_pre_kip903=self.unsafe_pre_kip903,
            retry_backoff_ms=self.alter_retry_backoff_ms,
        )
        self._keys: dict[tuple[uuid.UUID, int], Key] = {}
        # Per hosted partition, its "only the HW moved" outputs, built once: a follower's fetch or an
        # append that moves the HW allocates nothing either (a frozen dataclass costs ~1 us to build).
        self._hw_moved_only: dict[Key, ReplicaOutputs] = {}

    # ---- metadata ----------------------------------------------------------------------------------------
    def apply_metadata(self, now_ms: int, changes: Changes) -> ReplicaOutputs:
        """Applies partition changes from the metadata log: become leader, follower, or drop the replica."""
        out = _Collector()
        transitions: list[Transition] = []
        image = self.cache.image
        for topic in changes.deleted_topics:
            for index in topic.partitions:
                if self._drop((topic.name, index)) is not None:
                    transitions.append(Transition((topic.name, index), "removed"))
        for key in sorted(changes.partitions):
            registration = image.partition(*key)
            info = image.topic(key[0])
            if registration is None or info is None:
                continue
            if self.broker_id not in registration.replicas:
                was = self._drop(key)
                if was is not None:
                    transitions.append(Transition(key, "removed", was_leader=was.role == Role.LEADER))
                continue
            partition = self.partitions.get(key)
            if partition is None:
                partition = self._open(key, info.topic_id)
            if registration.leader == self.broker_id:
                transition = self._become_leader(now_ms, key, partition, registration, out, image)
            else:
                transition = self._become_follower(key, partition, registration)
            if transition is not None:
                transitions.append(transition)
        if changes.brokers:
            # A broker's fencing or new epoch can make a follower eligible, or free a stuck HW.
            for key, partition in self.partitions.items():
                if partition.role == Role.LEADER:
                    out.add(key, None, self._advance_hw(now_ms, key, partition, image))
        self._apply_min_insync_changes(now_ms, changes, out, image)
        return out.outputs(tuple(transitions))

    def _apply_min_insync_changes(
        self, now_ms: int, changes: Changes, out: _Collector, image: MetadataImage
    ) -> None:
        """A min.insync.replicas change reaches the hosted partitions of its topic (all of them for a
        broker-level one) and nothing else: no transition, no partition re-applied. Other configs are
        not the replica set's (Kafka's Partition reads the value from its log's config; the driver's
        log configs follow ``changes.topic_configs`` themselves)."""
        if MIN_INSYNC in changes.broker_configs:
            keys: list[Key] = list(self.partitions)
        else:
            keys = [
                key
                for topic, names in changes.topic_configs.items()
                if MIN_INSYNC in names
                for key in self._hosted(topic, image)
            ]
        for key in keys:
            p = self.partitions[key]
            p.min_insync_replicas = image.min_insync(key[0], self.min_insync_replicas)
            if p.role == Role.LEADER:
                out.add(key, None, self._advance_hw(now_ms, key, p, image))

    def _hosted(self, topic_name: str, image: MetadataImage) -> list[Key]:
        """This broker's partitions of the topic, found through the topic's own partitions."""
        topic = image.topic(topic_name)
        if topic is None:
            return []
        return [key for key in ((topic_name, i) for i in topic.partitions) if key in self.partitions]

    def _open(self, key: Key, topic_id: uuid.UUID) -> Partition:
        checkpointed = self.host.open_replica(key)
        partition = Partition(
            key[0],
            topic_id,
            key[1],
            self.broker_id,
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            unsafe_pre_kip903=self.unsafe_pre_kip903,
        )
        partition.high_watermark = min(checkpointed, self.host.log_end_offset(key))
        self.partitions[key] = partition
        self._keys[(topic_id, key[1])] = key
        self._hw_moved_only[key] = ReplicaOutputs(hw_moved=(key,))
        return partition

    def _drop(self, key: Key) -> Partition | None:
        partition = self.partitions.pop(key, None)
        if partition is not None:
            self._keys.pop((partition.topic_id, partition.index), None)
            del self._hw_moved_only[key]
        return partition

    def _become_leader(
        self,
        now_ms: int,
        key: Key,
        p: Partition,
        reg: PartitionRegistration,
        out: _Collector,
        image: MetadataImage,
    ) -> Transition | None:
        was_leader = p.role == Role.LEADER
        same_term = was_leader and p.leader_epoch == reg.leader_epoch
        previous_isr = set(p.isr)
        applied = p.make_leader(
            now_ms,
            leader_epoch=reg.leader_epoch,
            partition_epoch=reg.partition_epoch,
            replicas=reg.replicas,
            isr=reg.isr,
            leader_recovery_state=int(reg.leader_recovery_state),
            log_end_offset=self.host.log_end_offset(key),
            min_insync_replicas=image.min_insync(key[0], self.min_insync_replicas),
        )
        if not applied:
            return None
        event = None
        if same_term:
            # ISR changes decided by the controller (fencing, shutdown) count like our own.
            self._count_isr_change(previous_isr, set(p.isr))
        else:
            event = self._submit(key, p, p.maybe_report_recovered(image, self.broker_epoch()))
        out.add(key, event, self._advance_hw(now_ms, key, p, image))
        return Transition(key, "leader", new_term=not same_term, was_leader=was_leader, leader=self.broker_id)

    def _become_follower(self, key: Key, p: Partition, reg: PartitionRegistration) -> Transition | None:
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
            return None
        p.high_watermark = min(p.high_watermark, self.host.log_end_offset(key))
        new_leader = was != (Role.FOLLOWER, p.leader_id, p.leader_epoch)
        return Transition(
            key, "follower", new_term=new_leader, was_leader=was[0] == Role.LEADER, leader=p.leader_id
        )

    # ---- leader side ---------------------------------------------------------------------------------------
    def on_append(self, now_ms: int, key: Key) -> ReplicaOutputs:
        """The leader appended: a single-replica ISR moves the high watermark at once."""
        p = self.partitions.get(key)
        if p is None or not self._advance_hw(now_ms, key, p, self.cache.image):
            return NO_OUTPUTS
        return self._hw_moved_only[key]

    def on_follower_fetch(
        self,
        now_ms: int,
        key: Key,
        replica_id: int,
        replica_epoch: int,
        fetch_offset: int,
        leader_log_end: int,
        log_start_offset: int = -1,
    ) -> ReplicaOutputs:
        """Records a follower's position (a read the leader answered): may expand the ISR and move the HW.
        Runs for every partition of every follower fetch: unless the ISR changes, it returns a prebuilt value
        (``NO_OUTPUTS``, or the partition's "HW moved") and allocates nothing."""
        p = self.partitions.get(key)
        if p is None:
            return NO_OUTPUTS
        image = self.cache.image
        item = p.update_follower_fetch(
            now_ms,
            replica_id,
            replica_epoch,
            fetch_offset,
            leader_log_end,
            image,
            self.broker_epoch(),
            log_start_offset,
        )
        event = self._submit(key, p, item)
        moved = self._advance_hw(now_ms, key, p, image)
        if event is None:
            return self._hw_moved_only[key] if moved else NO_OUTPUTS
        return ReplicaOutputs(hw_moved=(key,) if moved else (), isr_events=(event,))

    def tick(self, now_ms: int) -> ReplicaOutputs:
        """Every replica.lag.time.max.ms / 2: shrink ISRs of lagging followers, repeat a RECOVERED report."""
        out = _Collector()
        image = self.cache.image
        for key, p in self.partitions.items():
            if p.role != Role.LEADER:
                continue
            item = p.maybe_shrink_isr(now_ms, self.host.log_end_offset(key), image, self.broker_epoch())
            event = self._submit(key, p, item)
            out.add(key, event, self._advance_hw(now_ms, key, p, image))
        return out.outputs()

    def _advance_hw(self, now_ms: int, key: Key, p: Partition, image: MetadataImage) -> bool:
        """Whether the partition's high watermark moved."""
        return p.maybe_increment_high_watermark(now_ms, self.host.log_end_offset(key), image) is not None

    # ---- AlterPartition --------------------------------------------------------------------------------------
    def _submit(self, key: Key, p: Partition, item: AlterPartitionItem | None) -> IsrEvent | None:
        """Hands a proposed ISR change to the sender: the "requested" event, or None if there was none to
        send or the sender refused it."""
        if item is None:
            return None
        if self.alter.submit(item):
            return IsrEvent(key, "requested", item)
        # Kafka: the sender refuses a second change for a partition (OPERATION_NOT_ATTEMPTED) and the
        # partition reverts to its committed state instead of waiting for an answer that never comes.
        p.on_alter_partition_result(item, ErrorCode.operation_not_attempted)
        self.stats["failed_isr_updates"] += 1
        return None

    def poll_alter_partition(self, now_ms: int) -> AlterPartitionRequest | None:
        """The next AlterPartition request to send, or None."""
        return self.alter.poll(now_ms)

    def on_alter_partition_network_error(self, now_ms: int) -> None:
        self.alter.on_network_error(now_ms)

    def on_alter_partition_response(self, now_ms: int, response: AlterPartitionResponse) -> ReplicaOutputs:
        out = _Collector()
        image = self.cache.image
        for result in self.alter.on_response(now_ms, response):
            key = self._keys.get((result.item.topic_id, result.item.partition))
            p = self.partitions.get(key) if key is not None else None
            if key is None or p is None:
                continue
            previous_isr = set(p.isr)
            changed = p.on_alter_partition_result(
                result.item,
                result.error,
                leader_epoch=result.leader_epoch,
                isr=result.isr,
                partition_epoch=result.partition_epoch,
                leader_recovery_state=result.leader_recovery_state,
            )
            event = None
            if result.error != ErrorCode.none:
                self.stats["failed_isr_updates"] += 1
                event = IsrEvent(key, "rejected", result.item, result.error)
            elif changed:
                self._count_isr_change(previous_isr, set(p.isr))
                event = IsrEvent(key, "changed", result.item, isr=p.isr)
            out.add(key, event, self._advance_hw(now_ms, key, p, image))
        return out.outputs()

    def _count_isr_change(self, before: set[int], after: set[int]) -> None:
        if after - before:
            self.stats["isr_expands"] += 1
        if before - after:
            self.stats["isr_shrinks"] += 1

    @property
    def pending_alter_partitions(self) -> int:
        """Changes queued or in flight (a liveness check: none once the cluster is quiet)."""
        return len(self.alter.queue) + len(self.alter.in_flight or ())
