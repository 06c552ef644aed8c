"""CreateTopics (key 19), versions 2-7, on both listeners.

- Controller listener: creates topics with explicit replica assignments or a partition count and
  replication factor (-1: the cluster default), placing replicas round robin over active brokers; the
  initial ISR is the active replicas. Topic configs such as min.insync.replicas and
  unclean.leader.election.enable are validated as Kafka validates them and stored as ConfigRecords. TOPIC_ALREADY_EXISTS,
  INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_PARTITIONS, INVALID_CONFIG,
  INVALID_TOPIC_EXCEPTION as Kafka.
- Broker listener: forwarded to the controller (clients send it to Metadata's controller id, a broker).
"""

from __future__ import annotations

from kio.schema.create_topics.v7.request import CreateTopicsRequest

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response


@api(key=19, name="CreateTopics", versions=(2, 7), listeners=(BROKER, CONTROLLER))
async def handle(request, ctx):
    if ctx.listener == BROKER:
        response = await ctx.node.forward_to_controller(convert(request, CreateTopicsRequest))
    else:
        response = ctx.node.controller.create_topics(ctx.node.now_ms(), convert(request, CreateTopicsRequest))
    return downgrade_response(response, ctx.api_version)
