"""ElectLeaders (key 43), versions 0-2, on both listeners (the broker listener forwards to the controller).

- PREFERRED (type 0; the only type of v0): move leadership to the first replica when it is in the ISR and
  active (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE otherwise).
- UNCLEAN (type 1): for a leaderless partition, elect from the ISR if possible, else the first active
  replica, shrinking the ISR to it with LeaderRecoveryState RECOVERING (KIP-704);
  ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is active.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.elect_leaders.v2.response import ElectLeadersResponse
from kio.static.primitive import i8

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _v2(request: rt.ElectLeaders, version: int) -> ElectLeadersRequest:
    """v0 has no election type: preferred."""
    upgraded = convert(request, ElectLeadersRequest)
    if version == 0:
        upgraded = ElectLeadersRequest(
            election_type=i8(0), topic_partitions=upgraded.topic_partitions, timeout=upgraded.timeout
        )
    return upgraded


@api(key=43, name="ElectLeaders", versions=(0, 2), listeners=(BROKER,))
async def handle_on_broker(request: rt.ElectLeaders, ctx: RequestContext):
    response = await ctx.broker.forward_to_controller(
        _v2(request, ctx.api_version), ElectLeadersResponse, ctx
    )
    return downgrade_response(response, ctx.api_version)


@api(key=43, name="ElectLeaders", versions=(0, 2), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.ElectLeaders, ctx: RequestContext):
    response = ctx.controller_node.controller.elect_leaders(ctx.now_ms(), _v2(request, ctx.api_version))
    return downgrade_response(response, ctx.api_version)
