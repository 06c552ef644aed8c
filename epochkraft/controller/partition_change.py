"""PartitionChangeBuilder: one partition's next state in, a PartitionChangeRecord (or None) out.

As Kafka's builder of the same name, its steps run in a fixed order: take the targets (ISR, replicas,
adding and removing replicas); complete a reassignment (KIP-455) if the target ISR, less the replicas being
removed, now holds every target replica: the removed replicas leave the replica list and the ISR; with
eligible leader replicas on (KIP-966), work out the target ELR: while the target ISR is below min ISR, the
members leaving the ISR join the ELR (they hold every committed record, since the high watermark does not
advance under min ISR), less the replicas that shut down uncleanly; at or above min ISR the ELR is empty;
elect a leader (keep the current one if it is still valid; else the first target replica, in replica
order, that is in the target ISR, or in the ELR when the ISR is empty, and acceptable; else the last known
leader when the ISR and the ELR are both empty; else, when unclean election is allowed, the first
acceptable target replica, which shrinks the ISR to itself and sets LeaderRecoveryState RECOVERING); a
leader elected from the ELR becomes the ISR; bump the leader epoch when replicas leave the replica list;
then emit only the fields that changed. Without ELR the ISR is never written empty (its last member
stays, KIP-903's noted exception); with it the ISR may empty, and the last leader is kept as the last
known ELR. Replaying the record bumps the partition epoch, and the leader epoch only when the leader field
is set (an ISR change alone does not bump it).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypedDict

from epochkraft.metadata.registrations import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
)
from epochkraft.protocol.metadata_records import PartitionChangeRecord

# UNSAFE, for the simulator's tests only: a replica that shut down uncleanly stays in the ELR (its
# unflushed records are gone, so electing it from the ELR can lose acknowledged records).
UNSAFE_KEEP_UNCLEAN_SHUTDOWN_IN_ELR_FOR_TESTS = False


class Election(Enum):
    """How a leader may be chosen."""

    CLEAN = "clean"  # only from the target ISR (or the ELR, or the last known leader, with ELR on)
    UNCLEAN = "unclean"  # from the ISR, else any acceptable replica (data may be lost)
    PREFERRED = "preferred"  # move leadership to the first replica if it is in the ISR and acceptable


class ChangedFields(TypedDict, total=False):
    """The PartitionChangeRecord fields a build sets: only those that changed."""

    isr: tuple[int, ...]
    leader: int
    replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader_recovery_state: int
    eligible_leader_replicas: tuple[int, ...]
    last_known_elr: tuple[int, ...]


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
        *,
        min_isr: int = 1,
        elr_enabled: bool = False,
        use_last_known_leader: bool = True,
    ) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.election = election
        self.min_isr = min_isr
        self.elr_enabled = elr_enabled
        # Kafka's useLastKnownLeaderInBalancedRecovery: the last known ELR holds only the last leader.
        self.use_last_known_leader = use_last_known_leader
        self.target_isr: tuple[int, ...] = partition.isr
        self.target_recovery_state = partition.leader_recovery_state
        self.target_replicas: tuple[int, ...] = partition.replicas
        self.target_removing: tuple[int, ...] = partition.removing_replicas
        self.target_adding: tuple[int, ...] = partition.adding_replicas
        self.target_elr: tuple[int, ...] = partition.elr
        self.target_last_known_elr: tuple[int, ...] = partition.last_known_elr
        self.unclean_shutdown_replicas: tuple[int, ...] = ()
        self.removed_brokers: tuple[int, ...] = ()

    def set_target_isr(self, isr: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_isr = tuple(isr)
        return self

    def set_target_recovery_state(self, state: LeaderRecoveryState) -> PartitionChangeBuilder:
        self.target_recovery_state = state
        return self

    def set_unclean_shutdown_replicas(self, replicas: tuple[int, ...]) -> PartitionChangeBuilder:
        """Replicas whose broker came back from an unclean shutdown: they leave the ELR."""
        self.unclean_shutdown_replicas = tuple(replicas)
        return self

    def set_removed_brokers(self, brokers: tuple[int, ...]) -> PartitionChangeBuilder:
        """Brokers unregistered (or registering anew without a registration): they leave the ELR and the
        last known ELR, since the disk that registers as that id next may hold nothing."""
        self.removed_brokers = tuple(brokers)
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

    def _populate_target_elr(self) -> None:
        """Kafka's maybePopulateTargetElr."""
        if not self.elr_enabled:
            return
        if len(self.target_isr) >= self.min_isr:
            self.target_elr = self.target_last_known_elr = ()
            return
        isr = set(self.target_isr)
        unclean = () if UNSAFE_KEEP_UNCLEAN_SHUTDOWN_IN_ELR_FOR_TESTS else self.unclean_shutdown_replicas
        candidates = (set(self.target_elr) | set(self.partition.isr)) - set(self.removed_brokers)
        self.target_elr = tuple(sorted(b for b in candidates if b not in isr and b not in unclean))
        candidates |= set(self.target_last_known_elr) - set(self.removed_brokers)
        elr = set(self.target_elr)
        self.target_last_known_elr = tuple(sorted(b for b in candidates if b not in isr and b not in elr))

    def _is_valid_new_leader(self, replica: int) -> bool:
        """In the target ISR, or in the ELR when the ISR is empty; and acceptable."""
        isr = self.target_isr
        in_line = replica in isr or (not isr and replica in self.target_elr)
        return in_line and self.is_acceptable_leader(replica)

    def _can_elect_last_known_leader(self) -> bool:
        """Kafka's canElectLastKnownLeader: ISR and ELR empty, and the last leader recorded alone."""
        if not self.elr_enabled or not self.use_last_known_leader:
            return False
        if self.target_elr or self.target_isr or len(self.partition.last_known_elr) != 1:
            return False
        return self.is_acceptable_leader(self.partition.last_known_elr[0])

    def _elect(self) -> tuple[int, bool]:
        """(leader, unclean): Kafka's electLeader (electPreferredLeader / electAnyLeader)."""
        current = self.partition.leader
        replicas = self.target_replicas
        if self.election == Election.PREFERRED and replicas and self._is_valid_new_leader(replicas[0]):
            return replicas[0], False
        if current != NO_LEADER and self._is_valid_new_leader(current):
            return current, False
        for replica in replicas:
            if self._is_valid_new_leader(replica):
                return replica, False
        if self._can_elect_last_known_leader():
            return self.partition.last_known_elr[0], True
        if self.election == Election.UNCLEAN:
            for replica in replicas:
                if self.is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    def build(self) -> PartitionChange | None:
        partition = self.partition
        self._complete_reassignment_if_needed()
        self._populate_target_elr()
        leader, unclean = self._elect()
        fields: ChangedFields = {}
        isr = self.target_isr
        if leader != partition.leader:
            if leader in self.target_elr:
                # Elected from the ELR: it alone is known to hold every committed record.
                isr = (leader,)
                self.target_elr = tuple(b for b in self.target_elr if b != leader)
            if unclean:
                isr = (leader,)
        else:
            unclean = False
        if not isr and not self.elr_enabled:
            isr = partition.isr  # without ELR the ISR keeps its last member
        recovery = LeaderRecoveryState.RECOVERING if unclean else self.target_recovery_state
        if isr != partition.isr:
            fields["isr"] = isr
        replicas_changed = self.target_replicas != partition.replicas
        if leader != partition.leader or (
            replicas_changed and not set(partition.replicas).issubset(self.target_replicas)
        ):
            # A replica leaving the replica list bumps the leader epoch even when the leader stays
            # (Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded).
            fields["leader"] = leader
        self._elr_fields(fields, clean=not unclean)
        self._last_known_leader_field(fields)
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

    def _elr_fields(self, fields: ChangedFields, *, clean: bool) -> None:
        """Kafka's maybeUpdateRecordElr: an unclean election, or ELR off, clears both lists."""
        partition = self.partition
        if not clean or not self.elr_enabled:
            self.target_elr = self.target_last_known_elr = ()
        if self.target_elr != partition.elr:
            fields["eligible_leader_replicas"] = self.target_elr
        if self.use_last_known_leader:
            return  # the last known ELR holds the last leader, set by _last_known_leader_field
        if self.target_last_known_elr != partition.last_known_elr:
            fields["last_known_elr"] = self.target_last_known_elr

    def _last_known_leader_field(self, fields: ChangedFields) -> None:
        """Kafka's maybeUpdateLastKnownLeader: the leader when the ISR first empties, cleared once the
        partition has a leader again."""
        if not self.use_last_known_leader or not self.elr_enabled:
            if not self.elr_enabled and self.partition.last_known_elr:
                fields["last_known_elr"] = ()
            return
        partition = self.partition
        leader = fields.get("leader", NO_LEADER_CHANGE)
        if fields.get("isr") == () and partition.last_known_elr != (partition.leader,):
            fields["last_known_elr"] = (partition.leader,)
        elif (
            leader >= 0 or (partition.leader != NO_LEADER and leader != NO_LEADER)
        ) and partition.last_known_elr:
            fields["last_known_elr"] = ()
        if self.removed_brokers:
            last_known = fields.get("last_known_elr", partition.last_known_elr)
            kept = tuple(b for b in last_known if b not in self.removed_brokers)
            if kept != partition.last_known_elr:
                fields["last_known_elr"] = kept
            else:
                fields.pop("last_known_elr", None)
