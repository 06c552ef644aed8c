"""PartitionChangeBuilder: one partition's next state in, a PartitionChangeRecord (or None) out.

As Kafka's builder of the same name, its steps run in a fixed order: take the targets (ISR, replicas,
adding and removing replicas); complete a reassignment (KIP-455) if the target ISR, less the replicas being
removed, now holds every target replica: the removed replicas leave the replica list and the ISR; elect a
leader (keep the current one if it is still in the target ISR and acceptable; else the first target
replica, in replica order, that is in the target ISR and acceptable; else, when unclean election is
allowed, the first acceptable target replica, which shrinks the ISR to itself and sets
LeaderRecoveryState RECOVERING); bump the leader epoch when replicas leave the replica list; then emit
only the fields that changed. Replaying the record bumps the partition epoch, and the leader epoch only
when the leader field is set (an ISR change alone does not bump it).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from epochkraft.controller.state import NO_LEADER, LeaderRecoveryState, PartitionRegistration
from epochkraft.protocol.metadata_records import PartitionChangeRecord


class Election(Enum):
    """How a leader may be chosen."""

    CLEAN = "clean"  # only from the target ISR
    UNCLEAN = "unclean"  # from the ISR, else any acceptable replica (data may be lost)
    PREFERRED = "preferred"  # move leadership to the first replica if it is in the ISR and acceptable


@dataclass(frozen=True, slots=True)
class PartitionChange:
    record: PartitionChangeRecord
    leader: int
    isr: tuple[int, ...]
    leader_recovery_state: LeaderRecoveryState
    unclean: bool


class PartitionChangeBuilder:
    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        election: Election = Election.CLEAN,
    ) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.election = election
        self.target_isr: tuple[int, ...] = partition.isr
        self.target_recovery_state = partition.leader_recovery_state
        self.target_replicas: tuple[int, ...] = partition.replicas
        self.target_removing: tuple[int, ...] = partition.removing_replicas
        self.target_adding: tuple[int, ...] = partition.adding_replicas

    def set_target_isr(self, isr: tuple[int, ...]) -> PartitionChangeBuilder:
        """The ISR is never written empty: removing the last member keeps it (KIP-903's noted exception)."""
        self.target_isr = tuple(isr) or self.partition.isr
        return self

    def set_target_recovery_state(self, state: LeaderRecoveryState) -> PartitionChangeBuilder:
        self.target_recovery_state = state
        return self

    def set_target_replicas(
        self, replicas: tuple[int, ...], removing: tuple[int, ...] = (), adding: tuple[int, ...] = ()
    ) -> PartitionChangeBuilder:
        """A new replica list with the replicas a reassignment removes and adds (both empty: none)."""
        self.target_replicas = tuple(replicas)
        self.target_removing = tuple(removing)
        self.target_adding = tuple(adding)
        return self

    def _complete_reassignment_if_needed(self) -> None:
        """Kafka's PartitionReassignmentReplicas.maybeCompleteReassignment."""
        if not self.target_removing and not self.target_adding:
            return
        isr = tuple(b for b in self.target_isr if b not in self.target_removing)
        replicas = tuple(b for b in self.target_replicas if b not in self.target_removing)
        if not isr or not replicas or not set(replicas).issubset(isr):
            return
        self.target_isr, self.target_replicas = isr, replicas
        self.target_removing = self.target_adding = ()

    def _elect(self) -> tuple[int, tuple[int, ...], bool]:
        """(leader, isr, unclean) after the election step."""
        current = self.partition.leader
        isr = self.target_isr
        replicas = self.target_replicas
        if self.election == Election.PREFERRED:
            preferred = replicas[0] if replicas else NO_LEADER
            if preferred in isr and self.is_acceptable_leader(preferred):
                return preferred, isr, False
        if current != NO_LEADER and current in isr and self.is_acceptable_leader(current):
            return current, isr, False
        for replica in replicas:
            if replica in isr and self.is_acceptable_leader(replica):
                return replica, isr, False
        if self.election == Election.UNCLEAN:
            for replica in replicas:
                if self.is_acceptable_leader(replica):
                    return replica, (replica,), True
        return NO_LEADER, isr, False

    def build(self) -> PartitionChange | None:
        self._complete_reassignment_if_needed()
        leader, isr, unclean = self._elect()
        recovery = LeaderRecoveryState.RECOVERING if unclean else self.target_recovery_state
        partition = self.partition
        fields: dict[str, object] = {}
        if isr != partition.isr:
            fields["isr"] = isr
        replicas_changed = self.target_replicas != partition.replicas
        if leader != partition.leader or (
            replicas_changed and not set(partition.replicas).issubset(self.target_replicas)
        ):
            # A replica leaving the replica list bumps the leader epoch even when the leader stays
            # (Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded).
            fields["leader"] = leader
        if recovery != partition.leader_recovery_state:
            fields["leader_recovery_state"] = int(recovery)
        if replicas_changed:
            fields["replicas"] = self.target_replicas
        if self.target_removing != partition.removing_replicas:
            fields["removing_replicas"] = self.target_removing
        if self.target_adding != partition.adding_replicas:
            fields["adding_replicas"] = self.target_adding
        if not fields:
            return None
        record = PartitionChangeRecord(partition_id=self.partition_id, topic_id=self.topic_id, **fields)
        return PartitionChange(record, leader, isr, recovery, unclean)
