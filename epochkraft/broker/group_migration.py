"""Online migration between the classic and the consumer group protocol (KIP-848), as Kafka 4.x's
``group.consumer.migration.policy``: the member conversions both ways.

Upgrade (ConsumerGroup.fromClassicGroup): each classic member becomes a consumer group member at the
classic generation, Stable, owning the partitions of its last assignment (the last one synced, even while
the group completes a rebalance), with its JoinGroup protocols kept
(``ClassicMemberMetadata``) so it goes on speaking JoinGroup/SyncGroup/Heartbeat inside the consumer group.
Downgrade (ClassicGroup.fromConsumerGroup): the classic members left, each given its part of the consumer
group's target assignment serialized in its own subscription's version.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable
from enum import StrEnum

from epochkraft.broker.assignors import Assignment
from epochkraft.broker.consumer_protocol import (
    MalformedConsumerProtocol,
    parse_assignment_with_user_data,
    parse_subscription,
    serialize_assignment,
    version_of,
)
from epochkraft.broker.current_assignment import ClassicMemberMetadata, ConsumerGroupMember, MemberState
from epochkraft.broker.group_coordinator import Group, Member


class MigrationPolicy(StrEnum):
    """Kafka's ConsumerGroupMigrationPolicy."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)

    @classmethod
    def parse(cls, value: str) -> MigrationPolicy:
        """Case-insensitive; ValueError for another name (Kafka's config validator refuses it)."""
        try:
            return cls(value.strip().lower())
        except ValueError:
            known = ", ".join(policy.value for policy in cls)
            raise ValueError(f"group.consumer.migration.policy: {value!r} is not one of {known}") from None


class CustomAssignorUserData(ValueError):
    """An assignment carries user data of a client-side assignor, which a consumer group would lose."""


def consumer_members_from_classic(
    group: Group, topic_id_of: Callable[[str], uuid.UUID | None]
) -> list[ConsumerGroupMember]:
    """ConsumerGroup.fromClassicGroup's members; MalformedConsumerProtocol if a member's subscription or
    assignment cannot be read, CustomAssignorUserData if an assignment has user data (Kafka 4.x's
    UnsupportedVersionException). Topics that no longer exist are dropped from the assignments."""
    members = []
    for classic in group.members.values():
        protocol = group.protocol_name or classic.protocols[0][0]
        subscription = parse_subscription(classic.metadata_for(protocol))
        partitions, user_data = parse_assignment_with_user_data(classic.synced_assignment)
        if user_data:
            raise CustomAssignorUserData(classic.member_id)
        members.append(
            ConsumerGroupMember(
                classic.member_id,
                instance_id=classic.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=classic.client_id,
                client_host=classic.client_host,
                rebalance_timeout_ms=classic.rebalance_timeout_ms,
                subscribed_topic_names=subscription.topics,
                state=MemberState.STABLE,
                member_epoch=group.generation_id,
                previous_member_epoch=group.generation_id,
                assigned=to_topic_ids(partitions, topic_id_of),
                classic=ClassicMemberMetadata(classic.session_timeout_ms, classic.protocols),
            )
        )
    return members


def classic_members_from_consumer(
    members: Iterable[ConsumerGroupMember], leaving: Collection[str], now_ms: int
) -> list[Member]:
    """ClassicGroup.fromConsumerGroup's members: every classic protocol member but those leaving."""
    return [
        Member(
            member.member_id,
            member.instance_id,
            member.client_id,
            member.client_host,
            member.classic.session_timeout_ms,
            member.rebalance_timeout_ms,
            member.classic.protocols,
            now_ms,
        )
        for member in members
        if member.member_id not in leaving and member.classic is not None
    ]


def assignment_bytes(
    partitions: Assignment, subscription: bytes, topic_name_of: Callable[[uuid.UUID], str | None]
) -> bytes:
    """The partitions as a consumer protocol Assignment in the version of the member's subscription."""
    try:
        version = version_of(subscription)
    except MalformedConsumerProtocol:
        version = 0
    return serialize_assignment(to_topic_names(partitions, topic_name_of), version)


def to_topic_ids(
    partitions: dict[str, frozenset[int]], topic_id_of: Callable[[str], uuid.UUID | None]
) -> Assignment:
    assignment: dict[uuid.UUID, frozenset[int]] = {}
    for name, parts in partitions.items():
        topic_id = topic_id_of(name)
        if topic_id is not None and parts:
            assignment[topic_id] = assignment.get(topic_id, frozenset()) | parts
    return assignment


def to_topic_names(
    assignment: Assignment, topic_name_of: Callable[[uuid.UUID], str | None]
) -> dict[str, frozenset[int]]:
    partitions = {}
    for topic_id, parts in assignment.items():
        name = topic_name_of(topic_id)
        if name is not None and parts:
            partitions[name] = parts
    return partitions
