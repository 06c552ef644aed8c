"""PartitionChangeBuilder: one partition's next state in, a PartitionChangeRecord (or None) out.

As Kafka's builder of the same name, its steps run in a fixed order: take the target ISR, elect a leader
(keep the current one if it is still in the target ISR and acceptable; else the first replica, in replica
order, that is in the target ISR and acceptable; else, when unclean election is allowed, the first
acceptable replica, which shrinks the ISR to itself and sets LeaderRecoveryState RECOVERING), then emit
only the fields that changed. Replaying the record bumps the partition epoch, and the leader epoch only
when the leader changes (an ISR change alone does not bump it).
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

    def set_target_isr(self, isr: tuple[int, ...]) -> PartitionChangeBuilder:
        """The ISR is never written empty: removing the last member keeps it (KIP-903's noted exception)."""
        self.target_isr = tuple(isr) or self.partition.isr
        return self

    def set_target_recovery_state(self, state: LeaderRecoveryState) -> PartitionChangeBuilder:
        self.target_recovery_state = state
        return self

    def _elect(self) -> tuple[int, tuple[int, ...], bool]:
        """(leader, isr, unclean) after the election step."""
        current = self.partition.leader
        isr = self.target_isr
        if self.election == Election.PREFERRED:
            preferred = self.partition.replicas[0] if self.partition.replicas else NO_LEADER
            if preferred in isr and self.is_acceptable_leader(preferred):
                return preferred, isr, False
        if current != NO_LEADER and current in isr and self.is_acceptable_leader(current):
            return current, isr, False
        for replica in self.partition.replicas:
            if replica in isr and self.is_acceptable_leader(replica):
                return replica, isr, False
        if self.election == Election.UNCLEAN:
            for replica in self.partition.replicas:
                if self.is_acceptable_leader(replica):
                    return replica, (replica,), True
        return NO_LEADER, isr, False

    def build(self) -> PartitionChange | None:
        leader, isr, unclean = self._elect()
        recovery = LeaderRecoveryState.RECOVERING if unclean else self.target_recovery_state
        fields: dict[str, object] = {}
        if isr != self.partition.isr:
            fields["isr"] = isr
        if leader != self.partition.leader:
            fields["leader"] = leader
        if recovery != self.partition.leader_recovery_state:
            fields["leader_recovery_state"] = int(recovery)
        if not fields:
            return None
        record = PartitionChangeRecord(partition_id=self.partition_id, topic_id=self.topic_id, **fields)
        return PartitionChange(record, leader, isr, recovery, unclean)
