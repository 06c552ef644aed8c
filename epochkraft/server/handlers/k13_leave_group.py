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

from kio.schema.leave_group.v5.response import LeaveGroupResponse, MemberResponse

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import response_class
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, build


@api(key=13, name="LeaveGroup", versions=(0, 5), listeners=(BROKER,))
async def handle(request, ctx: RequestContext):
    version = ctx.api_version
    if version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
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
