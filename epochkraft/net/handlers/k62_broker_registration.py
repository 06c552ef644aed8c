"""BrokerRegistration (key 62), versions 0-3, controller listener.

- The broker epoch is the metadata-log offset of the RegisterBrokerRecord (KIP-380); a new incarnation
  gets a new, higher epoch and starts fenced; the same incarnation retrying keeps its epoch.
- INCONSISTENT_CLUSTER_ID for another cluster id; DUPLICATE_BROKER_REGISTRATION while another incarnation
  still holds a valid session (unless it presents that incarnation's epoch as previous_broker_epoch, v3).
"""

from __future__ import annotations

from kio.schema.broker_registration.v3.request import BrokerRegistrationRequest

from epochkraft.net.context import RequestContext
from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response


@api(key=62, name="BrokerRegistration", versions=(0, 3), listeners=(CONTROLLER,))
async def handle(request, ctx: RequestContext):
    node = ctx.controller_node
    response = node.controller.register_broker(node.now_ms(), convert(request, BrokerRegistrationRequest))
    return downgrade_response(response, ctx.api_version)
