"""ListPartitionReassignments (key 46), version 0, on both listeners (the broker listener forwards).

- The reassignments in progress (all, or of the partitions asked for): replicas, adding and removing
  replicas, as the controller holds them.
"""

from __future__ import annotations

from epochkraft.protocol.api import BROKER, CONTROLLER, api


@api(key=46, name="ListPartitionReassignments", versions=(0, 0), listeners=(BROKER, CONTROLLER))
async def handle(request, ctx):
    if ctx.listener == BROKER:
        return await ctx.node.forward_to_controller(request)
    return ctx.node.controller.list_partition_reassignments(request)
