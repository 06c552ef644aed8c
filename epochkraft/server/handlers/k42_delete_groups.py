"""DeleteGroups (key 42), versions 0-3, broker listener (the group's coordinator).

- A group without members is deleted: tombstones for its committed offsets are written to
  __consumer_offsets with acks=all, then the group is forgotten. NON_EMPTY_GROUP while it has members,
  GROUP_ID_NOT_FOUND for an unknown group, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS elsewhere.
- v3 (Kafka 4.4) gives each group's result an error message: null, as the error code says it all here
  (Kafka fills it only where a cause needs telling, GROUP_DELETION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.delete_groups.v2 import response as r2

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=42, name="DeleteGroups", versions=(0, 3), listeners=(BROKER,))
async def handle(request: rt.DeleteGroups, ctx: RequestContext):
    results = []
    for group_id in request.groups_names:
        error = await ctx.broker.groups.delete_group(group_id)
        results.append(r2.DeletableGroupResult(group_id=group_id, error_code=error))
    response = r2.DeleteGroupsResponse(throttle_time=NO_THROTTLE, results=tuple(results))
    return downgrade_response(response, ctx.api_version)
