"""SyncGroup (key 14), versions 0-5, broker listener.

- The leader sends every member's assignment; followers wait for it; in Stable each member gets its
  assignment back at once. REBALANCE_IN_PROGRESS while a new rebalance runs, ILLEGAL_GENERATION and
  UNKNOWN_MEMBER_ID as Kafka.
- A classic member of a KIP-848 consumer group gets its assigned partitions at once, in its subscription's
  consumer protocol version (the leader's assignments are ignored: the coordinator assigns); v5's
  protocol type and name must match its own (INCONSISTENT_GROUP_PROTOCOL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.sync_group.v5.response import SyncGroupResponse

from epochkraft.broker.topics_image import CacheTopics
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=14, name="SyncGroup", versions=(0, 5), listeners=(BROKER,))
async def handle(request: rt.SyncGroup, ctx: RequestContext):
    groups = ctx.broker.groups
    error = groups.coordinator_error(request.group_id)
    if error != ErrorCode.none:
        response = SyncGroupResponse(throttle_time=NO_THROTTLE, error_code=error, assignment=b"")
    else:
        result = await groups.sync(
            CacheTopics(ctx.broker.cache),
            group_id=request.group_id,
            instance_id=getattr(request, "group_instance_id", None),
            protocol_type=getattr(request, "protocol_type", None),
            protocol_name=getattr(request, "protocol_name", None),
            generation_id=request.generation_id,
            member_id=request.member_id,
            assignments={a.member_id: a.assignment for a in request.assignments},
        )
        response = SyncGroupResponse(
            throttle_time=NO_THROTTLE,
            error_code=result.error,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            assignment=result.assignment,
        )
    return downgrade_response(response, ctx.api_version)
