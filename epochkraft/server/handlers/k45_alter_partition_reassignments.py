"""AlterPartitionReassignments (key 45), versions 0-1, on both listeners (the broker listener forwards).

- A partition given replicas starts a reassignment (KIP-455): the new replicas join the replica list as
  adding replicas (those left out become removing replicas), fetch from the leader and join the ISR under
  the usual KIP-841/903 conditions; once the ISR holds every target replica the controller drops the
  removing replicas (moving leadership if the leader is one of them). Already satisfied: done at once.
- A partition given null replicas cancels its reassignment (NO_REASSIGNMENT_IN_PROGRESS if none).
- INVALID_REPLICA_ASSIGNMENT for empty, repeated or unregistered replicas, UNKNOWN_TOPIC_OR_PARTITION, and
  in v1 INVALID_REPLICATION_FACTOR for a replica count change when allow_replication_factor_change is false.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.alter_partition_reassignments.v1.request import AlterPartitionReassignmentsRequest
from kio.schema.alter_partition_reassignments.v1.response import AlterPartitionReassignmentsResponse

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _v1(request: rt.AlterPartitionReassignments, version: int) -> AlterPartitionReassignmentsRequest:
    """v0 has no allow_replication_factor_change: allowed."""
    upgraded = convert(request, AlterPartitionReassignmentsRequest)
    if version == 0:
        upgraded = AlterPartitionReassignmentsRequest(
            timeout=upgraded.timeout, allow_replication_factor_change=True, topics=upgraded.topics
        )
    return upgraded


@api(key=45, name="AlterPartitionReassignments", versions=(0, 1), listeners=(BROKER,))
async def handle_on_broker(request: rt.AlterPartitionReassignments, ctx: RequestContext):
    response = await ctx.broker.forward_to_controller(
        _v1(request, ctx.api_version), AlterPartitionReassignmentsResponse, ctx
    )
    return downgrade_response(response, ctx.api_version)


@api(key=45, name="AlterPartitionReassignments", versions=(0, 1), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.AlterPartitionReassignments, ctx: RequestContext):
    upgraded = _v1(request, ctx.api_version)
    response = ctx.controller_node.controller.alter_partition_reassignments(ctx.now_ms(), upgraded)
    return downgrade_response(response, ctx.api_version)
