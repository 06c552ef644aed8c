"""UnregisterBroker (key 64), version 0, controller listener.

- BROKER_ID_NOT_REGISTERED for an unknown id; otherwise the broker leaves every ISR (the last member
  stays, leader -1) and its registration is removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=64, name="UnregisterBroker", versions=(0, 0), listeners=(CONTROLLER,))
async def handle(request: rt.UnregisterBroker, ctx: RequestContext):
    return ctx.controller_node.controller.unregister_broker(ctx.controller_node.now_ms(), request)
