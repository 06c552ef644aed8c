"""Sans-IO replica logic of one partition on one broker: leader-side ISR management and high watermark,
follower state, acks=all completion (Kafka's Partition.scala, KIP-497/704/841/903).

No IO and no clock: every method takes ``now_ms`` and the facts it needs (log end offsets, the metadata
cache's view of brokers), and returns what the caller must do: an ``AlterPartitionItem`` to send, an
error code, a new high watermark.

ISR state, as Kafka's: the committed ISR is the last one the controller confirmed; while an
AlterPartition is in flight the state is PendingExpandIsr (maximal ISR = committed + the new member) or
PendingShrinkIsr (maximal ISR = committed). The high watermark advances over the maximal ISR, so a
replica being added already holds the HW back, and a replica being removed still does until the
controller confirms.

API (all sans-IO; ``brokers`` is a ``BrokerView``: the metadata image the caller read for its operation):
- ``make_leader(now_ms, *, leader_epoch, partition_epoch, replicas, isr, leader_recovery_state,
  log_end_offset, min_insync_replicas=1) -> bool`` / ``make_follower(*, leader, leader_epoch,
  partition_epoch, replicas, isr, leader_recovery_state=0) -> bool``: False if the partition epoch is stale.
- ``check_follower_fetch(replica_id, replica_epoch, current_leader_epoch, brokers) -> ErrorCode``.
- ``update_follower_fetch(now_ms, replica_id, replica_epoch, fetch_offset, leader_log_end, brokers,
  local_broker_epoch) -> AlterPartitionItem | None`` (an expansion to submit).
- ``maybe_shrink_isr(now_ms, leader_log_end, brokers, local_broker_epoch)`` and
  ``maybe_report_recovered(brokers, local_broker_epoch)`` (KIP-704) -> ``AlterPartitionItem | None``.
- ``maybe_increment_high_watermark(now_ms, leader_log_end, brokers) -> int | None`` (the new HW).
- acks=all: ``check_enough_replicas_before_append(acks)`` and ``acks_all_result(required_offset) ->
  ErrorCode | None`` (None: keep waiting for the HW), both against ``effective_min_isr``
  (min.insync.replicas capped at the replication factor, as Kafka).
- ``on_alter_partition_result(item, error, *, leader_epoch, isr, partition_epoch, leader_recovery_state)
  -> bool`` (True if the committed ISR changed); follower: ``update_follower_high_watermark``.
Divergence (LastFetchedEpoch) is checked by ``fetch_rules.plan_read`` against the log's epoch cache; the
AlterPartition glue (submit, refusal, answers, ticks) is ``replica_set.ReplicaSet``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from epochkraft.protocol.errors import ErrorCode

RECOVERED = 0
RECOVERING = 1
NO_EPOCH = -1


class BrokerView(Protocol):
    """What a metadata image knows about other brokers."""

    def is_fenced(self, broker_id: int) -> bool: ...

    def in_controlled_shutdown(self, broker_id: int) -> bool: ...

    def broker_epoch(self, broker_id: int) -> int | None: ...


class Role(Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    """One partition's proposed change, as sent in AlterPartition (NewIsrWithEpochs)."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch or -1)
    leader_recovery_state: int
    kind: str  # "expand", "shrink" or "recovered"

    @property
    def isr_ids(self) -> tuple[int, ...]:
        return tuple(b for b, _ in self.new_isr)


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one follower, updated by its fetches."""

    broker_id: int
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_log_end: int = -1
    broker_epoch: int = NO_EPOCH  # from the follower's last Fetch (ReplicaState, v15+)
    log_start_offset: int = -1  # the follower's, from its last Fetch (DeleteRecords waits on it)

    def update_fetch(
        self,
        now_ms: int,
        fetch_offset: int,
        leader_log_end: int,
        broker_epoch: int,
        log_start_offset: int = -1,
    ) -> None:
        # Kafka's lastCaughtUpTime: this fetch reached the leader's end, or the previous fetch reached the
        # end as of then.
        if fetch_offset >= leader_log_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end = leader_log_end
        self.last_fetch_ms = now_ms
        self.broker_epoch = broker_epoch
        self.log_start_offset = log_start_offset

    def is_caught_up(self, leader_log_end: int, now_ms: int, lag_max_ms: int) -> bool:
        return self.log_end_offset == leader_log_end or now_ms - self.last_caught_up_ms <= lag_max_ms


@dataclass(slots=True)
class Partition:
    topic: str
    topic_id: uuid.UUID
    index: int
    local_broker_id: int
    replica_lag_time_max_ms: int = 30_000
    unsafe_pre_kip903: bool = False
    role: Role = Role.NONE
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()  # committed ISR
    leader_recovery_state: int = RECOVERED
    pending: AlterPartitionItem | None = None
    high_watermark: int = 0
    leader_epoch_start_offset: int = 0
    min_insync_replicas: int = 1
    remote: dict[int, ReplicaState] = field(default_factory=dict)

    # ---- transitions from metadata ---------------------------------------------------------------------
    def make_leader(
        self,
        now_ms: int,
        *,
        leader_epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        leader_recovery_state: int,
        log_end_offset: int,
        min_insync_replicas: int = 1,
    ) -> bool:
        """Applies a leader registration from the metadata log; False (ignored) if it is stale."""
        if partition_epoch < self.partition_epoch:
            return False
        new_term = self.role != Role.LEADER or leader_epoch != self.leader_epoch
        self.role = Role.LEADER
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.leader_recovery_state = leader_recovery_state
        self.min_insync_replicas = min_insync_replicas
        self.pending = None  # metadata supersedes any in-flight change
        for broker_id in list(self.remote):
            if broker_id not in replicas:
                del self.remote[broker_id]
        for broker_id in replicas:
            if broker_id != self.local_broker_id:
                state = self.remote.setdefault(broker_id, ReplicaState(broker_id))
                if new_term:
                    # A new leader gives ISR members a full lag window before judging them (Kafka does too).
                    state.last_caught_up_ms = now_ms if broker_id in isr else 0
                    state.log_end_offset = -1
                    state.last_fetch_leader_log_end = -1
                    state.log_start_offset = -1
        if new_term:
            self.leader_epoch_start_offset = log_end_offset
        return True

    def make_follower(
        self,
        *,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        leader_recovery_state: int = RECOVERED,
    ) -> bool:
        if partition_epoch < self.partition_epoch:
            return False
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.leader_recovery_state = leader_recovery_state
        self.pending = None
        self.remote.clear()
        return True

    # ---- leader side: fetches ----------------------------------------------------------------------------
    def check_follower_fetch(
        self, replica_id: int, replica_epoch: int, current_leader_epoch: int, brokers: BrokerView
    ) -> ErrorCode:
        """The leader's checks on a follower's Fetch before it reads anything."""
        if current_leader_epoch != NO_EPOCH:
            if current_leader_epoch < self.leader_epoch:
                return ErrorCode.fenced_leader_epoch
            if current_leader_epoch > self.leader_epoch:
                return ErrorCode.unknown_leader_epoch
        if self.role != Role.LEADER:
            return ErrorCode.not_leader_or_follower
        if replica_id not in self.remote:
            # Not an assigned replica (Partition.followerReplicaOrThrow): with a leader epoch, the pair
            # (replica, epoch) may be valid soon (a reassignment adding it); without one, retry too.
            if current_leader_epoch != NO_EPOCH:
                return ErrorCode.unknown_leader_epoch
            return ErrorCode.not_leader_or_follower
        # v15+ names the broker epoch: only the incarnation the metadata holds may fetch (KIP-903); an
        # older one, a made-up one or an unregistered broker is refused, and the follower retries.
        if replica_epoch != NO_EPOCH and brokers.broker_epoch(replica_id) != replica_epoch:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.none

    def update_follower_fetch(
        self,
        now_ms: int,
        replica_id: int,
        replica_epoch: int,
        fetch_offset: int,
        leader_log_end: int,
        brokers: BrokerView,
        local_broker_epoch: int,
        log_start_offset: int = -1,
    ) -> AlterPartitionItem | None:
        """Records a follower's fetch position (and log start offset); may propose adding it to the ISR."""
        state = self.remote.get(replica_id)
        if state is None or self.role != Role.LEADER:
            return None
        state.update_fetch(now_ms, fetch_offset, leader_log_end, replica_epoch, log_start_offset)
        return self.maybe_expand_isr(state, brokers, local_broker_epoch)

    def is_replica_isr_eligible(self, state: ReplicaState, brokers: BrokerView) -> bool:
        """KIP-841: not fenced, not shutting down; KIP-903: the epoch of its fetch is the current one."""
        if brokers.is_fenced(state.broker_id) or brokers.in_controlled_shutdown(state.broker_id):
            return False
        if self.unsafe_pre_kip903:
            return True
        known = brokers.broker_epoch(state.broker_id)
        return known is not None and state.broker_epoch != NO_EPOCH and known == state.broker_epoch

    def maybe_expand_isr(
        self, state: ReplicaState, brokers: BrokerView, local_broker_epoch: int
    ) -> AlterPartitionItem | None:
        if self.pending is not None or state.broker_id in self.isr:
            return None
        if self.leader_recovery_state == RECOVERING:
            # KIP-704: report RECOVERED first (again, if an earlier report was dropped or refused).
            return self.maybe_report_recovered(brokers, local_broker_epoch)
        caught_up = (
            state.log_end_offset >= self.high_watermark
            and state.log_end_offset >= self.leader_epoch_start_offset
        )
        if not caught_up or not self.is_replica_isr_eligible(state, brokers):
            return None
        new_isr = (*self.isr, state.broker_id)
        return self._propose(new_isr, "expand", brokers, local_broker_epoch)

    def maybe_shrink_isr(
        self, now_ms: int, leader_log_end: int, brokers: BrokerView, local_broker_epoch: int
    ) -> AlterPartitionItem | None:
        """Every replica.lag.time.max.ms / 2: propose dropping followers that stopped keeping up; a leader
        still RECOVERING (KIP-704) reports RECOVERED instead, so a lost report is made again."""
        if self.role != Role.LEADER or self.pending is not None:
            return None
        if self.leader_recovery_state == RECOVERING:
            return self.maybe_report_recovered(brokers, local_broker_epoch)
        out_of_sync = [
            b
            for b in self.isr
            if b != self.local_broker_id
            and (state := self.remote.get(b)) is not None
            and not state.is_caught_up(leader_log_end, now_ms, self.replica_lag_time_max_ms)
        ]
        if not out_of_sync:
            return None
        new_isr = tuple(b for b in self.isr if b not in out_of_sync)
        return self._propose(new_isr, "shrink", brokers, local_broker_epoch)

    def maybe_report_recovered(
        self, brokers: BrokerView, local_broker_epoch: int
    ) -> AlterPartitionItem | None:
        """KIP-704: an uncleanly elected leader, once recovered, reports RECOVERED before expanding."""
        if self.role != Role.LEADER or self.pending is not None or self.leader_recovery_state != RECOVERING:
            return None
        return self._propose(self.isr, "recovered", brokers, local_broker_epoch, recovery=RECOVERED)

    def _propose(
        self,
        new_isr: tuple[int, ...],
        kind: str,
        brokers: BrokerView,
        local_broker_epoch: int,
        recovery: int | None = None,
    ) -> AlterPartitionItem:
        def epoch_of(b: int) -> int:
            if self.unsafe_pre_kip903:
                return NO_EPOCH
            if b == self.local_broker_id:
                return local_broker_epoch
            state = self.remote.get(b)
            return state.broker_epoch if state is not None else NO_EPOCH

        item = AlterPartitionItem(
            topic_id=self.topic_id,
            partition=self.index,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            new_isr=tuple((b, epoch_of(b)) for b in new_isr),
            leader_recovery_state=self.leader_recovery_state if recovery is None else recovery,
            kind=kind,
        )
        self.pending = item
        return item

    # ---- leader side: high watermark and acks=all ----------------------------------------------------------
    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas, capped at the replication factor (Kafka's effectiveMinIsr)."""
        return min(self.min_insync_replicas, max(len(self.replicas), 1))

    @property
    def is_under_min_isr(self) -> bool:
        return self.role == Role.LEADER and len(self.isr) < self.effective_min_isr

    @property
    def is_at_min_isr(self) -> bool:
        return self.role == Role.LEADER and len(self.isr) == self.effective_min_isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is not None and self.pending.kind == "expand":
            return tuple(dict.fromkeys((*self.isr, *self.pending.isr_ids)))
        return self.isr

    def maybe_increment_high_watermark(
        self, now_ms: int, leader_log_end: int, brokers: BrokerView
    ) -> int | None:
        """The new high watermark if it moved: min log end over the maximal ISR and over caught-up eligible
        replicas about to join; never backwards; frozen while the committed ISR is under min ISR."""
        if self.role != Role.LEADER or self.is_under_min_isr:
            return None
        new_hw = leader_log_end
        maximal = self.maximal_isr
        for broker_id, state in self.remote.items():
            waiting = broker_id in maximal or (
                state.is_caught_up(leader_log_end, now_ms, self.replica_lag_time_max_ms)
                and self.is_replica_isr_eligible(state, brokers)
                and state.log_end_offset >= 0
            )
            if waiting and state.log_end_offset < new_hw:
                new_hw = max(state.log_end_offset, 0)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return new_hw
        return None

    def check_enough_replicas_before_append(self, acks: int) -> ErrorCode:
        if self.role != Role.LEADER:
            return ErrorCode.not_leader_or_follower
        if acks == -1 and len(self.isr) < self.effective_min_isr:
            return ErrorCode.not_enough_replicas
        return ErrorCode.none

    def acks_all_result(self, required_offset: int) -> ErrorCode | None:
        """None while the HW is below the batch; then NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the
        maximal ISR shrank below min.insync.replicas meanwhile."""
        if self.role != Role.LEADER:
            return ErrorCode.not_leader_or_follower
        if self.high_watermark < required_offset:
            return None
        if len(self.maximal_isr) >= self.effective_min_isr:
            return ErrorCode.none
        return ErrorCode.not_enough_replicas_after_append

    # ---- AlterPartition results ----------------------------------------------------------------------------
    def on_alter_partition_result(
        self,
        item: AlterPartitionItem,
        error: ErrorCode,
        *,
        leader_epoch: int = -1,
        isr: tuple[int, ...] = (),
        partition_epoch: int = -1,
        leader_recovery_state: int = RECOVERED,
    ) -> bool:
        """Applies the controller's answer; True if the committed state changed."""
        if self.pending != item:
            return False  # superseded by metadata
        if error == ErrorCode.none:
            if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
                self.pending = None
                return False
            self.isr = tuple(isr)
            self.partition_epoch = partition_epoch
            self.leader_recovery_state = leader_recovery_state
            self.pending = None
            return True
        if error in (ErrorCode.ineligible_replica, ErrorCode.operation_not_attempted):
            self.pending = None  # back to the committed state; a later fetch may try again
        # Any other error: stay pending until the next metadata update for this partition.
        return False

    # ---- follower side ---------------------------------------------------------------------------------------
    def update_follower_high_watermark(self, leader_high_watermark: int, local_log_end: int) -> int | None:
        new_hw = min(leader_high_watermark, local_log_end)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return new_hw
        return None
