"""Classic protocol members inside a KIP-848 consumer group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup
served from the consumer group's state, as Kafka's GroupMetadataManager classicGroupJoinToConsumerGroup,
classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup and classicGroupLeaveToConsumerGroup.

A classic member's JoinGroup is its heartbeat: its subscription (the consumer protocol metadata) updates the
member, may bump the group epoch and recompute the target assignment, and the member is reconciled with
the partitions its subscription says it owns (none for an eager assignor, which revoked everything before
rejoining). The JoinGroup answers the member epoch as the generation and no leader; SyncGroup hands the
member its assigned partitions, serialized in its subscription's version. Its Heartbeat answers
REBALANCE_IN_PROGRESS when it should rejoin: the group epoch moved past it, it has partitions to revoke, or
the partitions it waited for were released. A member told to rejoin must do so within its rebalance
timeout, and one that joined must sync within it, or it is fenced (``ConsumerGroup.join_deadlines``,
``sync_deadlines``); its session timeout is the one it joined with.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass

from epochkraft.broker.consumer_group import (
    ConsumerGroup,
    ConsumerGroupCoordinator,
    GroupError,
    TopicsImage,
    known_static_member,
)
from epochkraft.broker.consumer_protocol import (
    PROTOCOL_TYPE,
    MalformedConsumerProtocol,
    Subscription,
    parse_subscription,
)
from epochkraft.broker.current_assignment import (
    ClassicMemberMetadata,
    ConsumerGroupMember,
    CurrentAssignmentBuilder,
    MemberState,
)
from epochkraft.broker.group_coordinator import JoinResult, SyncResult
from epochkraft.broker.group_migration import assignment_bytes, to_topic_ids
from epochkraft.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    group_id: str
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True
    skip_assignment_supported: bool = False  # JoinGroup v9+


def join(
    coordinator: ConsumerGroupCoordinator, now_ms: int, request: ClassicJoin, topics: TopicsImage
) -> JoinResult:
    """classicGroupJoinToConsumerGroup; the group must have members (an empty one is the classic
    coordinator's to take over)."""
    group = coordinator.groups[request.group_id]
    member_id = request.member_id or str(uuid.uuid4())
    before = group.copy()  # a refused join changes nothing (Kafka drops its records)
    try:
        _check_joinable(coordinator, group, member_id, request)
        if request.require_known_member_id and not request.member_id and request.instance_id is None:
            return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        replaced = _replaced_consumer_protocol_member(group, request)
        epoch = group.group_epoch
        member = _member_for(coordinator, group, member_id, request)
        subscription = _subscription(request)
        member = _joined(coordinator, now_ms, group, member, request, subscription, topics)
    except GroupError as exc:
        coordinator.groups[request.group_id] = before
        return JoinResult(exc.error, member_id=request.member_id)
    if replaced:
        coordinator.downgrade_on_replacement(now_ms, group, rebalance=group.group_epoch != epoch)
    return JoinResult(
        ErrorCode.none,
        generation_id=member.member_epoch,
        protocol_type=PROTOCOL_TYPE,
        protocol_name=request.protocols[0][0],
        leader="",  # no member assigns: the coordinator does
        member_id=member.member_id,
    )


def _subscription(request: ClassicJoin) -> Subscription:
    """GroupMetadataManager.deserializeSubscription: a subscription that cannot be read is the server's
    error to Kafka (an IllegalStateException, UNKNOWN_SERVER_ERROR to the client)."""
    try:
        return parse_subscription(request.protocols[0][1])
    except MalformedConsumerProtocol:
        raise GroupError(
            ErrorCode.unknown_server_error,
            "Malformed embedded consumer protocol in subscription deserialization.",
        ) from None


def _check_joinable(
    coordinator: ConsumerGroupCoordinator, group: ConsumerGroup, member_id: str, request: ClassicJoin
) -> None:
    """throwIfConsumerGroupIsFull and throwIfClassicProtocolIsNotSupported."""
    coordinator.check_not_full(group, member_id)
    if not supports_classic_protocols(group, request.protocol_type, {name for name, _ in request.protocols}):
        raise GroupError(
            ErrorCode.inconsistent_group_protocol, f"Member {member_id}'s protocols are not supported."
        )


def supports_classic_protocols(group: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
    """ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and a protocol every classic
    member of the group supports."""
    if protocol_type != PROTOCOL_TYPE or not names:
        return False
    classic = [set(dict(m.classic.protocols)) for m in group.members.values() if m.classic is not None]
    return any(all(name in supported for supported in classic) for name in names)


def _replaced_consumer_protocol_member(group: ConsumerGroup, request: ClassicJoin) -> bool:
    """Whether the join replaces a static member of the consumer protocol (it then may downgrade the
    group, as Kafka's classicGroupJoinToConsumerGroup step 4)."""
    if request.instance_id is None or request.member_id:
        return False
    existing_id = group.static_members.get(request.instance_id)
    existing = group.members.get(existing_id) if existing_id is not None else None
    return existing is not None and not existing.uses_classic_protocol


def _member_for(
    coordinator: ConsumerGroupCoordinator, group: ConsumerGroup, member_id: str, request: ClassicJoin
) -> ConsumerGroupMember:
    """getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember for a classic member: a dynamic member is
    created if unknown; a static member joining without a member id replaces the instance's member."""
    if request.instance_id is None:
        return group.members.get(member_id) or ConsumerGroupMember(member_id)
    existing_id = group.static_members.get(request.instance_id)
    existing = group.members.get(existing_id) if existing_id is not None else None
    if not request.member_id:
        if existing is None:
            return ConsumerGroupMember(member_id)
        return coordinator._replace_static_member(group, existing, member_id)
    return known_static_member(existing, member_id, request.instance_id)


def _joined(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    request: ClassicJoin,
    subscription: Subscription,
    topics: TopicsImage,
) -> ConsumerGroupMember:
    """Steps 1-3 of classicGroupJoinToConsumerGroup: update the member and maybe the group epoch, the
    target assignment, then reconcile the member with what its subscription says it owns."""
    rebalance_timeout_ms = request.rebalance_timeout_ms
    if rebalance_timeout_ms <= 0:
        rebalance_timeout_ms = request.session_timeout_ms  # JoinGroup v0 has no rebalance timeout
    updated = dataclasses.replace(
        member,
        instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
        rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=subscription.topics,
        client_id=request.client_id,
        client_host=request.client_host,
        classic=ClassicMemberMetadata(request.session_timeout_ms, request.protocols),
    )
    is_new = member.member_id not in group.members
    bump = is_new or coordinator._subscription_changed(member, updated)
    if coordinator.update_subscription(now_ms, group, updated, topics, None, bump):
        group.group_epoch += 1
    if group.group_epoch > group.assignment_epoch:
        coordinator._update_target_assignment(group, updated)
    updated = coordinator._drop_deleted_topics(updated, topics)

    def topic_id_of(name: str) -> uuid.UUID | None:
        topic = topics.by_name(name)
        return None if topic is None else topic.topic_id

    reconciled = CurrentAssignmentBuilder(
        updated,
        group.assignment_epoch,
        group.target_assignment.get(updated.member_id, {}),
        group.partition_epoch,
        to_topic_ids(subscription.owned_partitions or {}, topic_id_of),
    ).build()
    group.update_member(reconciled)
    group.session_deadlines[reconciled.member_id] = now_ms + request.session_timeout_ms
    group.join_deadlines.pop(reconciled.member_id, None)
    group.revocation_deadlines.pop(reconciled.member_id, None)
    group.sync_deadlines[reconciled.member_id] = now_ms + rebalance_timeout_ms
    return reconciled


def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
    """validateConsumerGroupMember, then throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
            )
    else:
        static_id = group.static_members.get(instance_id)
        if static_id is None:
            raise GroupError(
                ErrorCode.unknown_member_id,
                f"Member with instance id {instance_id} is not a member of group {group.group_id}.",
            )
        if static_id != member_id:
            raise GroupError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} was fenced by member {static_id}.",
            )
        member = group.members[static_id]
    if member.classic is None:
        raise GroupError(
            ErrorCode.unknown_member_id, f"Member {member.member_id} does not use the classic protocol."
        )
    return member


def _check_generation(member: ConsumerGroupMember, generation_id: int) -> None:
    if member.member_epoch != generation_id:
        raise GroupError(
            ErrorCode.illegal_generation,
            f"The request generation id {generation_id} is not equal to the member epoch "
            f"{member.member_epoch} of member {member.member_id}.",
        )


def _ask_to_rejoin(now_ms: int, group: ConsumerGroup, member: ConsumerGroupMember) -> GroupError:
    """scheduleConsumerGroupJoinTimeoutIfAbsent, and the REBALANCE_IN_PROGRESS that tells it to rejoin."""
    group.join_deadlines.setdefault(member.member_id, now_ms + member.rebalance_timeout_ms)
    return GroupError(
        ErrorCode.rebalance_in_progress,
        f"A new rebalance is triggered in group {group.group_id} and member {member.member_id} should rejoin "
        "to catch up.",
    )


def sync(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    *,
    group_id: str,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
    protocol_type: str | None,
    protocol_name: str | None,
    topics: TopicsImage,
) -> SyncResult:
    """classicGroupSyncToConsumerGroup: the member's assigned partitions."""
    group = coordinator.groups[group_id]
    try:
        member = _classic_member(group, member_id, instance_id)
        assert member.classic is not None
        _check_generation(member, generation_id)
        name, subscription = member.classic.protocols[0]
        if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != name
        ):
            raise GroupError(ErrorCode.inconsistent_group_protocol, "Inconsistent protocol type or name.")
        if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            raise _ask_to_rejoin(now_ms, group, member)
    except GroupError as exc:
        return SyncResult(exc.error)
    group.sync_deadlines.pop(member.member_id, None)
    group.session_deadlines[member.member_id] = now_ms + member.classic.session_timeout_ms

    def topic_name_of(topic_id: uuid.UUID) -> str | None:
        topic = topics.by_id(topic_id)
        return None if topic is None else topic.name

    return SyncResult(
        ErrorCode.none, PROTOCOL_TYPE, name, assignment_bytes(member.assigned, subscription, topic_name_of)
    )


def heartbeat(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    *,
    group_id: str,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
) -> ErrorCode:
    """classicGroupHeartbeatToConsumerGroup: keeps the session; REBALANCE_IN_PROGRESS when the member
    should rejoin (a newer group epoch, partitions to revoke, or released partitions to collect)."""
    group = coordinator.groups[group_id]
    try:
        member = _classic_member(group, member_id, instance_id)
        assert member.classic is not None
        _check_generation(member, generation_id)
        group.session_deadlines[member.member_id] = now_ms + member.classic.session_timeout_ms
        if (
            member.member_epoch < group.group_epoch
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (
                member.state == MemberState.UNRELEASED_PARTITIONS
                and not _waiting_on_unreleased(group, member)
            )
        ):
            raise _ask_to_rejoin(now_ms, group, member)
    except GroupError as exc:
        return exc.error
    return ErrorCode.none


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """ConsumerGroup.waitingOnUnreleasedPartition: a partition of its target another member still owns."""
    for topic_id, partitions in group.target_assignment.get(member.member_id, {}).items():
        owned = member.assigned.get(topic_id, frozenset())
        if any(p not in owned and group.partition_epoch(topic_id, p) != -1 for p in partitions):
            return True
    return False


def leave(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group_id: str,
    members: list[tuple[str, str | None]],
) -> tuple[ErrorCode, list[ErrorCode]]:
    """classicGroupLeaveToConsumerGroup: each member named (by member id, or by instance id with the member
    id optional, as an admin's removal) is fenced, whatever protocol it speaks (Kafka 4.x: an admin's
    --delete-members reaches consumer protocol members too); all of them at once, which may downgrade the
    group (consumerGroupFenceMembers)."""
    group = coordinator.groups[group_id]
    errors, leaving = [], set()
    for member_id, instance_id in members:
        try:
            leaving.add(_leaving_member(group, member_id, instance_id).member_id)
        except GroupError as exc:
            errors.append(exc.error)
            continue
        errors.append(ErrorCode.none)
    coordinator.fence_members(now_ms, group, leaving)
    top = errors[0] if len(members) == 1 else ErrorCode.none  # versions 0-2 name one member
    return top, errors


def _leaving_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
    """The member a LeaveGroup names: by member id, or by instance id (its member id, if given, must be the
    instance's)."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
            )
        return member
    static_id = group.static_members.get(instance_id)
    if static_id is None:
        raise GroupError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
    if member_id and member_id != static_id:
        raise GroupError(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {instance_id} was fenced by member {static_id}.",
        )
    return group.members[static_id]
