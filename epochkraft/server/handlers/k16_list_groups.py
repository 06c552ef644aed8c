"""ListGroups (key 16), versions 0-5, broker listener.

- Lists the groups this broker coordinates (clients ask every broker); v4 filters by state, v5 by type:
  "classic" (the JoinGroup/SyncGroup protocol) or "consumer" (KIP-848's ConsumerGroupHeartbeat groups,
  listed with protocol type "consumer" and their state: Empty, Assigning, Reconciling, Stable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.list_groups.v5.response import ListedGroup, ListGroupsResponse
from kio.schema.types import GroupId

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

CLASSIC = "classic"
CONSUMER = "consumer"  # KIP-848 groups: protocol type and group type


def _listed(service) -> list[tuple[str, str, str, str]]:
    """(group id, protocol type, state, group type): KIP-848 consumer groups, and the classic groups of
    the other ids (a consumer group's offsets are kept under the same id by the classic coordinator)."""
    consumer = service.consumer_groups.groups
    listed = [
        (gid, ptype, state, CLASSIC) for gid, ptype, state in service.list_groups() if gid not in consumer
    ]
    for group in consumer.values():
        if service.coordinator_error(group.group_id) == ErrorCode.none:
            listed.append((group.group_id, CONSUMER, str(group.state), CONSUMER))
    return listed


@api(key=16, name="ListGroups", versions=(0, 5), listeners=(BROKER,))
async def handle(request: rt.ListGroups, ctx: RequestContext):
    wanted = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    # DESCRIBE on the cluster lists every group, else only those the principal may DESCRIBE (KafkaApis).
    everything = ctx.authorized_cluster(AclOperation.DESCRIBE)
    groups = tuple(
        ListedGroup(group_id=GroupId(gid), protocol_type=ptype, group_state=state, group_type=gtype)
        for gid, ptype, state, gtype in _listed(ctx.broker.groups)
        if (not wanted or state.lower() in wanted)
        and (not types or gtype in types)
        and (everything or ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, gid))
    )
    response = ListGroupsResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)
    return downgrade_response(response, ctx.api_version)
