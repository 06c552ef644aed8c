"""AllocateProducerIds (key 67), version 0, controller listener.

- A broker of the current broker epoch gets the next block of 1,000 producer ids; the ProducerIdsRecord
  that assigns it is in the metadata log before the answer (Kafka's ProducerIdControlManager).
- STALE_BROKER_EPOCH for an unknown broker or another epoch; UNKNOWN_SERVER_ERROR once the 64-bit space
  is used up, as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=67, name="AllocateProducerIds", versions=(0, 0), listeners=(CONTROLLER,))
async def handle(request: rt.AllocateProducerIds, ctx: RequestContext):
    return ctx.controller_node.controller.allocate_producer_ids(ctx.controller_node.now_ms(), request)
