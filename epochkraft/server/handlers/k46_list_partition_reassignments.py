"""ListPartitionReassignments (key 46), version 0, on both listeners (the broker listener forwards).

- The reassignments in progress (all, or of the partitions asked for): replicas, adding and removing
  replicas, as the controller holds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.list_partition_reassignments.v0.response import ListPartitionReassignmentsResponse

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=46, name="ListPartitionReassignments", versions=(0, 0), listeners=(BROKER,))
async def handle_on_broker(request: rt.ListPartitionReassignments, ctx: RequestContext):
    return await ctx.broker.forward_to_controller(request, ListPartitionReassignmentsResponse, ctx)


@api(key=46, name="ListPartitionReassignments", versions=(0, 0), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.ListPartitionReassignments, ctx: RequestContext):
    return ctx.controller_node.controller.list_partition_reassignments(request)
