"""AlterConfigs (key 33), versions 0-2, on both listeners.

- Replaces each resource's dynamic configs with the ones given (configs not named are deleted), as
  ConfigRecords in the metadata log; validate_only checks without writing.
- TOPIC resources take every topic config Kafka knows, validated as Kafka's LogConfig (INVALID_CONFIG with
  Kafka's message); UNKNOWN_TOPIC_OR_PARTITION for a missing topic. BROKER resources (an id, or the empty
  name for the cluster-wide default) take min.insync.replicas and unclean.leader.election.enable.
- A resource named twice is INVALID_REQUEST. Turning unclean.leader.election.enable on elects leaders for
  the topic's offline partitions at once.
- The broker listener answers a resource with a null value itself, INVALID_REQUEST "Null value not
  supported for : name" as Kafka's ConfigAdminManager.preprocess, and forwards the rest to the
  controller; the controller takes a null value as the config's deletion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.alter_configs.v2.request import AlterConfigsRequest
from kio.schema.alter_configs.v2.response import AlterConfigsResponse

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server import config_preprocess
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=33, name="AlterConfigs", versions=(0, 2), listeners=(BROKER,))
async def handle_on_broker(request: rt.AlterConfigs, ctx: RequestContext):
    upgraded = convert(request, AlterConfigsRequest)
    response = await config_preprocess.through_controller(
        upgraded, lambda remaining: ctx.broker.forward_to_controller(remaining, AlterConfigsResponse, ctx)
    )
    return downgrade_response(response, ctx.api_version)


@api(key=33, name="AlterConfigs", versions=(0, 2), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.AlterConfigs, ctx: RequestContext):
    upgraded = convert(request, AlterConfigsRequest)
    response = ctx.controller_node.controller.alter_configs(ctx.now_ms(), upgraded)
    return downgrade_response(response, ctx.api_version)
