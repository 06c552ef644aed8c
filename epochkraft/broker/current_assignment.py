"""One consumer group member's reconciliation step (KIP-848), as Kafka's CurrentAssignmentBuilder.

A member moves towards its target assignment in steps: partitions it must give up are revoked first (it
stays in its epoch, UNREVOKED_PARTITIONS, until its heartbeat no longer reports them); partitions another
member still owns (their partition epoch is set) are held back (UNRELEASED_PARTITIONS) until released; the
member reaches the target epoch once nothing is left to revoke. A partition is thus never owned by two
members at once.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from epochkraft.broker.assignors import EMPTY_ASSIGNMENT, Assignment

# Hands out partitions another member still owns (ignores partition epochs): the rule this module exists
# to keep, switched off only to show the tests catch it.
UNSAFE_ASSIGN_UNRELEASED_PARTITIONS_FOR_TESTS = False


class MemberState(StrEnum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member of a consumer group that speaks the classic protocol (JoinGroup/SyncGroup) joined
    with: Kafka's ConsumerGroupMemberMetadataValue.ClassicMemberMetadata."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, consumer protocol Subscription), preferred first


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """Kafka's ConsumerGroupMember: immutable, replaced whole on every change."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None  # set for a member that uses the classic protocol

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def with_epoch(self, epoch: int) -> ConsumerGroupMember:
        """Kafka's Builder.updateMemberEpoch: the old epoch becomes the previous one."""
        return dataclasses.replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch)


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member's reported partitions include any of ``partitions`` (unknown = it may)."""
    if owned is None:
        return True
    return any(owned.get(topic, frozenset()) & parts for topic, parts in partitions.items())


def is_subset(owned: Assignment | None, target: Assignment) -> bool:
    if owned is None:
        return False
    return all(parts <= target.get(topic, frozenset()) for topic, parts in owned.items() if parts)


class CurrentAssignmentBuilder:
    def __init__(
        self,
        member: ConsumerGroupMember,
        target_epoch: int,
        target: Assignment,
        partition_epoch: Callable[[uuid.UUID, int], int],
        owned: Assignment | None,
    ) -> None:
        self.member = member
        self.target_epoch = target_epoch
        self.target = target
        self.partition_epoch = partition_epoch  # -1 when no member owns the partition
        self.owned = owned  # what the heartbeat reports, None when not sent

    def build(self) -> ConsumerGroupMember:
        member = self.member
        if member.state == MemberState.STABLE:
            if member.member_epoch == self.target_epoch:
                return member
            return self._next(member.member_epoch)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if owns_any(self.owned, member.pending_revocation):
                return member
            return self._next(member.member_epoch + 1)
        return self._next(member.member_epoch)

    def _next(self, epoch: int) -> ConsumerGroupMember:
        assigned: dict[uuid.UUID, frozenset[int]] = {}
        revoking: dict[uuid.UUID, frozenset[int]] = {}
        pending: dict[uuid.UUID, frozenset[int]] = {}
        unreleased = False
        for topic in set(self.target) | set(self.member.assigned):
            target = self.target.get(topic, frozenset())
            current = self.member.assigned.get(topic, frozenset())
            kept, revoke = current & target, current - target
            wanted = target - kept
            free = frozenset(p for p in wanted if self._is_free(topic, p))
            unreleased = unreleased or free != wanted
            for into, parts in ((assigned, kept), (revoking, revoke), (pending, free)):
                if parts:
                    into[topic] = parts
        if revoking and owns_any(self.owned, revoking):
            return dataclasses.replace(
                self.member.with_epoch(epoch),
                state=MemberState.UNREVOKED_PARTITIONS,
                assigned=assigned,
                pending_revocation=revoking,
            )
        for topic, parts in pending.items():
            assigned[topic] = assigned.get(topic, frozenset()) | parts
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return dataclasses.replace(
            self.member.with_epoch(self.target_epoch),
            state=state,
            assigned=assigned,
            pending_revocation=EMPTY_ASSIGNMENT,
        )

    def _is_free(self, topic: uuid.UUID, partition: int) -> bool:
        return UNSAFE_ASSIGN_UNRELEASED_PARTITIONS_FOR_TESTS or self.partition_epoch(topic, partition) == -1
