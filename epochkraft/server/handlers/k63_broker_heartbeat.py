"""BrokerHeartbeat (key 63), versions 0-1, controller listener.

- Keeps the broker's session; its contact time is taken as it arrives, before it waits for its turn among
  the controller's writes (Kafka's trackBrokerHeartbeat), so a backlog of writes fences no broker.
- STALE_BROKER_EPOCH for an unknown broker or another epoch.
- Unfences a broker that has caught up to its own registration record and no longer wants to be fenced;
  WantShutDown starts a controlled shutdown (leaderships move away) and ShouldShutDown turns true once it
  leads nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def track(request: rt.BrokerHeartbeat, ctx: RequestContext) -> None:
    """The heartbeat's contact time as it arrives, before it waits behind the quorum's other writes."""
    node = ctx.controller_node
    node.controller.track_heartbeat(node.now_ms(), convert(request, BrokerHeartbeatRequest))


@api(key=63, name="BrokerHeartbeat", versions=(0, 1), listeners=(CONTROLLER,), on_arrival=track)
async def handle(request: rt.BrokerHeartbeat, ctx: RequestContext):
    node = ctx.controller_node
    response = node.controller.heartbeat(node.now_ms(), convert(request, BrokerHeartbeatRequest))
    return downgrade_response(response, ctx.api_version)
