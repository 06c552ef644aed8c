"""DescribeGroups (key 15), versions 0-6, broker listener.

- State, protocol and members (metadata and assignment) of each named group; NOT_COORDINATOR for groups
  coordinated elsewhere; an unknown group is described as Dead with no members, as Kafka does, and from
  v6 also carries GROUP_ID_NOT_FOUND with a message (KIP-1043). A KIP-848 consumer group is described as
  Kafka 4.3 does: Dead, and from v6 GROUP_ID_NOT_FOUND "Group ... is not a classic group." (clients use
  ConsumerGroupDescribe for it).
- v3+ with include_authorized_operations: each group described without error carries the group operations
  the principal may perform (all of them without an authorizer), as Kafka's handleDescribeGroupsRequest.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from kio.schema.describe_groups.v0.request import DescribeGroupsRequest as DescribeGroupsRequestV0
from kio.schema.describe_groups.v1.request import DescribeGroupsRequest as DescribeGroupsRequestV1
from kio.schema.describe_groups.v2.request import DescribeGroupsRequest as DescribeGroupsRequestV2
from kio.schema.describe_groups.v6.response import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from kio.schema.types import GroupId
from kio.static.primitive import i32

from epochkraft.broker.group_coordinator import GroupState
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import OPERATIONS_NOT_REQUESTED, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _describe(service, group_id: str, version: int) -> DescribedGroup:
    error = service.coordinator_error(group_id)
    group = service.coordinator.groups.get(group_id) if error == ErrorCode.none else None
    consumer_group = error == ErrorCode.none and group_id in service.consumer_groups.groups
    if group is None or consumer_group:
        state = GroupState.DEAD if error == ErrorCode.none else ""
        message = None
        if error == ErrorCode.none and version >= GROUP_ID_NOT_FOUND_FROM:
            error = ErrorCode.group_id_not_found
            message = (
                f"Group {group_id} is not a classic group."
                if consumer_group
                else f"Group {group_id} not found."
            )
        return DescribedGroup(
            error_code=error,
            error_message=message,
            group_id=GroupId(group_id),
            group_state=str(state),
            protocol_type="",
            protocol_data="",
            members=(),
            authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
        )
    members = tuple(
        DescribedGroupMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata_for(group.protocol_name) if group.protocol_name else b"",
            member_assignment=m.assignment,
        )
        for m in group.members.values()
    )
    return DescribedGroup(
        error_code=ErrorCode.none,
        error_message=None,
        group_id=GroupId(group_id),
        group_state=str(group.state),
        protocol_type=group.protocol_type or "",
        protocol_data=group.protocol_name or "",
        members=members,
        authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
    )


GROUP_ID_NOT_FOUND_FROM = 6
# KIP-430 added include_authorized_operations in v3
BEFORE_AUTHORIZED_OPERATIONS = (DescribeGroupsRequestV0, DescribeGroupsRequestV1, DescribeGroupsRequestV2)


def _with_authorized_operations(ctx: RequestContext, group: DescribedGroup) -> DescribedGroup:
    """A group described without error carries the group operations the principal may perform
    (KafkaApis.handleDescribeGroupsRequest, AuthHelper.authorizedOperations)."""
    if group.error_code != ErrorCode.none:
        return group
    operations = ctx.authorized_operations(ResourceType.GROUP, group.group_id)
    return dataclasses.replace(group, authorized_operations=i32(operations))


@api(key=15, name="DescribeGroups", versions=(0, GROUP_ID_NOT_FOUND_FROM), listeners=(BROKER,))
async def handle(request: rt.DescribeGroups, ctx: RequestContext):
    groups = tuple(_describe(ctx.broker.groups, g, ctx.api_version) for g in request.groups)
    if not isinstance(request, BEFORE_AUTHORIZED_OPERATIONS) and request.include_authorized_operations:
        groups = tuple(_with_authorized_operations(ctx, g) for g in groups)
    response = DescribeGroupsResponse(throttle_time=NO_THROTTLE, groups=groups)
    return downgrade_response(response, ctx.api_version)
