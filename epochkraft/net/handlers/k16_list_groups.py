"""ListGroups (key 16), versions 0-4, broker listener.

- Lists the groups this broker coordinates (clients ask every broker); v4 filters by state.
"""

from __future__ import annotations

from kio.schema.list_groups.v4.response import ListedGroup, ListGroupsResponse

from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response


@api(key=16, name="ListGroups", versions=(0, 4), listeners=(BROKER,))
async def handle(request, ctx):
    wanted = {s.lower() for s in getattr(request, "states_filter", ())}
    groups = tuple(
        ListedGroup(group_id=gid, protocol_type=ptype, group_state=state)
        for gid, ptype, state in ctx.node.groups.list_groups()
        if not wanted or state.lower() in wanted
    )
    response = ListGroupsResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)
    return downgrade_response(response, ctx.api_version)
