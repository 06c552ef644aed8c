"""LeaveGroup (key 13), versions 0-5, broker listener.

- v0-2 name one ``member_id``; v3+ a batch of members with per-member errors (KIP-345); v5 adds a
  reason per member (KIP-800, not kept).
- Leaving members trigger a rebalance of the rest; classic members of a KIP-848 consumer group leave it
  (by member id, or by instance id), and the group epoch is bumped.
- A classic group's member named with an instance id must be that instance's (FENCED_INSTANCE_ID, else
  UNKNOWN_MEMBER_ID); an empty member id with an instance id removes that static member (an admin's
  removal, KIP-345).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.leave_group.v0.request import LeaveGroupRequest as LeaveGroupRequestV0
from kio.schema.leave_group.v1.request import LeaveGroupRequest as LeaveGroupRequestV1
from kio.schema.leave_group.v2.request import LeaveGroupRequest as LeaveGroupRequestV2
from kio.schema.leave_group.v5.response import LeaveGroupResponse, MemberResponse

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import response_class
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, build

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


ONE_MEMBER = (LeaveGroupRequestV0, LeaveGroupRequestV1, LeaveGroupRequestV2)


@api(key=13, name="LeaveGroup", versions=(0, 5), listeners=(BROKER,))
async def handle(request: rt.LeaveGroup, ctx: RequestContext):
    version = ctx.api_version
    members: list[tuple[str, str | None]]
    if isinstance(request, ONE_MEMBER):
        members = [(request.member_id, None)]
    else:  # v3+ (KIP-345): a batch of members
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    groups = ctx.broker.groups
    error = groups.coordinator_error(request.group_id)
    top: ErrorCode
    errors: list[ErrorCode]
    if error != ErrorCode.none:
        top, errors = error, [error] * len(members)
    else:
        top, errors = await groups.leave(group_id=request.group_id, members=members)
    if version < 3:
        return build(response_class(13, version), throttle_time=NO_THROTTLE, error_code=top)
    response = LeaveGroupResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none if error == ErrorCode.none else error,
        members=tuple(
            MemberResponse(member_id=mid, group_instance_id=instance, error_code=err)
            for (mid, instance), err in zip(members, errors, strict=True)
        ),
    )
    return downgrade_response(response, version)
