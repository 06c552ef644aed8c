"""IncrementalAlterConfigs (key 44), versions 0-1, on both listeners.

- Per key SET, DELETE, APPEND or SUBTRACT (the last two only for LIST configs, else INVALID_CONFIG),
  atomic per resource, written as ConfigRecords; validate_only checks without writing.
- Same resources, validation and effects as AlterConfigs (key 33): min.insync.replicas applies to acks=all
  at once; unclean.leader.election.enable turned on elects leaders for offline partitions at once.
- GROUP resources: the group's configs as they would stand after the change are validated together
  (Kafka's GroupConfig.validate against the controller's group.consumer.min/max.* bounds), INVALID_CONFIG
  with Kafka's message; the empty group name is INVALID_REQUEST.
- The broker listener answers a resource with a null value itself (other than a DELETE's), INVALID_REQUEST
  "Null value not supported for : name" as Kafka's ConfigAdminManager.preprocess, and forwards the rest to
  the controller; the controller takes a null value as the config's deletion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server import config_preprocess
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=44, name="IncrementalAlterConfigs", versions=(0, 1), listeners=(BROKER,))
async def handle_on_broker(request: rt.IncrementalAlterConfigs, ctx: RequestContext):
    upgraded = convert(request, IncrementalAlterConfigsRequest)
    response = await config_preprocess.through_controller(
        upgraded,
        lambda remaining: ctx.broker.forward_to_controller(remaining, IncrementalAlterConfigsResponse, ctx),
    )
    return downgrade_response(response, ctx.api_version)


@api(key=44, name="IncrementalAlterConfigs", versions=(0, 1), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.IncrementalAlterConfigs, ctx: RequestContext):
    upgraded = convert(request, IncrementalAlterConfigsRequest)
    response = ctx.controller_node.controller.incremental_alter_configs(ctx.now_ms(), upgraded)
    return downgrade_response(response, ctx.api_version)
