"""Heartbeat (key 12), versions 0-4, broker listener.

- Keeps a member's session alive. REBALANCE_IN_PROGRESS tells it to rejoin; ILLEGAL_GENERATION and
  UNKNOWN_MEMBER_ID as Kafka; NOT_COORDINATOR when the group moved.
- A classic member of a KIP-848 consumer group is told to rejoin when the group epoch moved past its own,
  it has partitions to revoke, or partitions it waited for were released (v3+ name its instance id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.heartbeat.v4.response import HeartbeatResponse

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=12, name="Heartbeat", versions=(0, 4), listeners=(BROKER,))
async def handle(request: rt.Heartbeat, ctx: RequestContext):
    groups = ctx.broker.groups
    error = groups.coordinator_error(request.group_id)
    if error == ErrorCode.none:
        error = groups.heartbeat(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            instance_id=getattr(request, "group_instance_id", None),
        )
    return downgrade_response(HeartbeatResponse(throttle_time=NO_THROTTLE, error_code=error), ctx.api_version)
