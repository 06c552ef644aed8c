"""CreatePartitions (key 37), versions 0-3, on both listeners.

- Raises a topic's partition count; the new partitions get the topic's replication factor, placed round
  robin over active brokers, or the replicas given per new partition. Their ISR is the active replicas.
- INVALID_PARTITIONS for a count that is not an increase, INVALID_REPLICA_ASSIGNMENT for assignments of
  the wrong number or size, unregistered or repeated brokers, or only fenced ones,
  INVALID_REPLICATION_FACTOR when too few brokers are active, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST
  for a topic named twice; validate_only checks without writing (Kafka's messages throughout).
- The broker listener forwards to the controller and answers once its own metadata has the new
  partitions, so the client's next Metadata call sees them.
"""

from __future__ import annotations

from kio.schema.create_partitions.v3.request import CreatePartitionsRequest

from epochkraft.net.context import RequestContext
from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response


@api(key=37, name="CreatePartitions", versions=(0, 3), listeners=(BROKER, CONTROLLER))
async def handle(request, ctx: RequestContext):
    upgraded = convert(request, CreatePartitionsRequest)
    if ctx.listener == CONTROLLER:
        response = ctx.controller_node.controller.create_partitions(ctx.now_ms(), upgraded)
        return downgrade_response(response, ctx.api_version)
    response = await ctx.broker.forward_to_controller(upgraded)
    if not upgraded.validate_only:
        counts = {t.name: t.count for t in upgraded.topics}
        grown = [r.name for r in response.results if r.error_code == ErrorCode.none]
        cache = ctx.broker.cache

        def applied() -> bool:
            return all(len(getattr(cache.topic(n), "partitions", ())) >= counts[n] for n in grown)

        await ctx.broker.wait_for_metadata(applied)
    return downgrade_response(response, ctx.api_version)
