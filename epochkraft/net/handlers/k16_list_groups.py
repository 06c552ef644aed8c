"""ListGroups (key 16), versions 0-5, broker listener.

- Lists the groups this broker coordinates (clients ask every broker); v4 filters by state, v5 by type
  (every group here is a "classic" one, KIP-848's name for the JoinGroup/SyncGroup protocol).
"""

from __future__ import annotations

from kio.schema.list_groups.v5.response import ListedGroup, ListGroupsResponse
from kio.schema.types import GroupId

from epochkraft.net.context import RequestContext
from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import AclOperation, ResourceType

CLASSIC = "classic"


@api(key=16, name="ListGroups", versions=(0, 5), listeners=(BROKER,))
async def handle(request, ctx: RequestContext):
    wanted = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    # DESCRIBE on the cluster lists every group, else only those the principal may DESCRIBE (KafkaApis).
    everything = ctx.authorized_cluster(AclOperation.DESCRIBE)
    groups = tuple(
        ListedGroup(group_id=GroupId(gid), protocol_type=ptype, group_state=state, group_type=CLASSIC)
        for gid, ptype, state in ctx.broker.groups.list_groups()
        if (not wanted or state.lower() in wanted)
        and (not types or CLASSIC in types)
        and (everything or ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, gid))
    )
    response = ListGroupsResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)
    return downgrade_response(response, ctx.api_version)
