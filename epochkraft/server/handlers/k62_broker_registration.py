"""BrokerRegistration (key 62), versions 0-4 (v4 as v3: KAFKA-17011), controller listener.

- The broker epoch is the metadata-log offset of the RegisterBrokerRecord (KIP-380); a new incarnation
  gets a new, higher epoch and starts fenced; the same incarnation retrying keeps its epoch.
- INCONSISTENT_CLUSTER_ID for another cluster id; DUPLICATE_BROKER_REGISTRATION while another incarnation
  still holds a valid session (unless it presents that incarnation's epoch as previous_broker_epoch, v3).
- A new incarnation of a registered broker first leaves every ISR and leadership. With ELR on, one whose
  previous_broker_epoch (its clean shutdown marker) is not the registered epoch came back from an unclean
  shutdown and leaves every ELR too (Kafka's handleBrokerShutdown, KIP-966).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=62, name="BrokerRegistration", versions=(0, 4), listeners=(CONTROLLER,))
async def handle(request: rt.BrokerRegistration, ctx: RequestContext):
    node = ctx.controller_node
    response = node.controller.register_broker(node.now_ms(), convert(request, BrokerRegistrationRequest))
    return downgrade_response(response, ctx.api_version)
