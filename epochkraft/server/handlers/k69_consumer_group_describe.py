"""ConsumerGroupDescribe (key 69), versions 0-1, broker listener: KIP-848's consumer groups described.

- Per group: state (Empty, Assigning, Reconciling, Stable), group epoch, target assignment epoch, the
  assignor in use, and each member's epoch, subscription, current and target assignment (topic ids and
  names), as Kafka's ConsumerGroup.asDescribedGroup; v1 adds the member type (1: consumer protocol, 0: a
  classic member of the group).
- GROUP_ID_NOT_FOUND for an unknown group or a classic one; NOT_COORDINATOR as the other group APIs.
- DESCRIBE on each group (checked before the handler); with include_authorized_operations, the group
  operations the principal may perform.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from kio.schema.consumer_group_describe.v1 import response as r1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32

from epochkraft.broker.assignors import Assignment
from epochkraft.broker.consumer_group import ConsumerGroup
from epochkraft.broker.current_assignment import ConsumerGroupMember
from epochkraft.broker.topics_image import CacheTopics
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import OPERATIONS_NOT_REQUESTED, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = i8(0), i8(1)  # v1's MemberType


def _assignment(assignment: Assignment, topics: CacheTopics) -> r1.Assignment:
    described = []
    for topic_id, parts in sorted(assignment.items()):
        topic = topics.by_id(topic_id)
        if topic is not None:
            described.append(
                r1.TopicPartitions(
                    topic_id=topic_id,
                    topic_name=TopicName(topic.name),
                    partitions=tuple(i32(p) for p in sorted(parts)),
                )
            )
    return r1.Assignment(topic_partitions=tuple(described))


def _member(member: ConsumerGroupMember, target: Assignment, topics: CacheTopics) -> r1.Member:
    return r1.Member(
        member_id=member.member_id,
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        member_epoch=i32(member.member_epoch),
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=tuple(TopicName(n) for n in member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex,
        assignment=_assignment(member.assigned, topics),
        target_assignment=_assignment(target, topics),
        member_type=CLASSIC_MEMBER_TYPE if member.uses_classic_protocol else CONSUMER_MEMBER_TYPE,
    )


def _described(group: ConsumerGroup, default_assignor: str, topics: CacheTopics) -> r1.DescribedGroup:
    return r1.DescribedGroup(
        error_code=ErrorCode.none,
        group_id=GroupId(group.group_id),
        group_state=str(group.state),
        group_epoch=i32(group.group_epoch),
        assignment_epoch=i32(group.assignment_epoch),
        assignor_name=group.preferred_assignor(default_assignor),
        members=tuple(
            _member(m, group.target_assignment.get(m.member_id, {}), topics) for m in group.members.values()
        ),
        authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
    )


def _not_described(group_id: str, error: ErrorCode, message: str | None = None) -> r1.DescribedGroup:
    return r1.DescribedGroup(
        error_code=error,
        error_message=message,
        group_id=GroupId(group_id),
        group_state="",  # as Kafka's DescribedGroup() with only the id, error and message set
        group_epoch=i32(0),
        assignment_epoch=i32(0),
        assignor_name="",
        members=(),
        authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
    )


def _describe(ctx: RequestContext, group_id: str, include_operations: bool) -> r1.DescribedGroup:
    service = ctx.broker.groups
    error = service.coordinator_error(group_id)
    if error != ErrorCode.none:
        return _not_described(group_id, error)
    group = service.consumer_groups.groups.get(group_id)
    if group is None:
        if service.coordinator.has_members(group_id):
            return _not_described(
                group_id, ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
            )
        return _not_described(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.")
    described = _described(
        group, service.consumer_groups.settings.assignors[0], CacheTopics(ctx.broker.cache)
    )
    if include_operations:
        operations = ctx.authorized_operations(ResourceType.GROUP, group_id)
        described = dataclasses.replace(described, authorized_operations=i32(operations))
    return described


@api(key=69, name="ConsumerGroupDescribe", versions=(0, 1), listeners=(BROKER,))
async def handle(request: rt.ConsumerGroupDescribe, ctx: RequestContext):
    groups = tuple(_describe(ctx, g, request.include_authorized_operations) for g in request.group_ids)
    response = r1.ConsumerGroupDescribeResponse(throttle_time=NO_THROTTLE, groups=groups)
    return downgrade_response(response, ctx.api_version)
