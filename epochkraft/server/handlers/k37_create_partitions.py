"""CreatePartitions (key 37), versions 0-3, on both listeners.

- Raises a topic's partition count; the new partitions get the topic's replication factor, placed round
  robin over active brokers, or the replicas given per new partition. Their ISR is the active replicas.
- INVALID_PARTITIONS for a count that is not an increase, INVALID_REPLICA_ASSIGNMENT for assignments of
  the wrong number or size, unregistered or repeated brokers, or only fenced ones,
  INVALID_REPLICATION_FACTOR when too few brokers are active, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST
  for a topic named twice; validate_only checks without writing (Kafka's messages throughout).
- The broker listener forwards to the controller in an Envelope, as the client sent it, and answers once its own metadata has the new
  partitions, so the client's next Metadata call sees them.
- KIP-599 at the controller: a client's controller_mutation_rate is charged the partitions each topic
  gains; from v3 a topic over the quota gets THROTTLING_QUOTA_EXCEEDED (handlers/_mutation_quota.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kio.schema.create_partitions.v3 import response as r3
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response, response_for, upgrade_request
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._mutation_quota import (
    CREATE_PARTITIONS_STRICT_SINCE,
    THROTTLED_MESSAGE,
    mutation_quota,
    with_throttle,
)
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=37, name="CreatePartitions", versions=(0, 3), listeners=(BROKER,))
async def handle_on_broker(request: rt.CreatePartitions, ctx: RequestContext):
    # as the client sent it: the controller's quota is strict or permissive by its version
    forwarded = upgrade_request(request, ctx.api_version)
    answer = await ctx.broker.forward_to_controller(forwarded, response_for(37, ctx.api_version), ctx)
    response = convert(answer, r3.CreatePartitionsResponse)
    if not request.validate_only:
        counts = {t.name: t.count for t in request.topics}
        grown = [r.name for r in response.results if r.error_code == ErrorCode.none]

        def applied() -> bool:
            image = ctx.broker.cache.image  # the image published last: the wait is for the growth
            return all(len(getattr(image.topic(n), "partitions", ())) >= counts[n] for n in grown)

        await ctx.broker.wait_for_metadata(applied)
    return downgrade_response(response, ctx.api_version)


@api(key=37, name="CreatePartitions", versions=(0, 3), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.CreatePartitions, ctx: RequestContext):
    upgraded = convert(request, CreatePartitionsRequest)
    quota = mutation_quota(ctx, CREATE_PARTITIONS_STRICT_SINCE)
    throttled = _throttled(ctx, upgraded, quota) if quota is not None and not upgraded.validate_only else []
    if throttled:
        names = {r.name for r in throttled}
        upgraded = replace(upgraded, topics=tuple(t for t in upgraded.topics if t.name not in names))
    if upgraded.topics or not throttled:
        response = ctx.controller_node.controller.create_partitions(ctx.now_ms(), upgraded)
    else:
        response = r3.CreatePartitionsResponse(throttle_time=NO_THROTTLE, results=())
    response = replace(response, results=response.results + tuple(throttled))
    return downgrade_response(with_throttle(response, quota, ctx.now_ms()), ctx.api_version)


def _throttled(ctx, request: rt.CreatePartitions, quota) -> list[r3.CreatePartitionsTopicResult]:
    """KIP-599: each topic charges the partitions it gains; those over a strict quota are refused."""
    throttled = []
    for topic in request.topics:
        current = ctx.controller_node.controller.image.topic(topic.name)
        if current is None or topic.count <= len(current.partitions):
            continue  # the controller answers these, uncharged
        if not quota.record(topic.count - len(current.partitions)):
            throttled.append(
                r3.CreatePartitionsTopicResult(
                    name=topic.name,
                    error_code=ErrorCode.throttling_quota_exceeded,
                    error_message=THROTTLED_MESSAGE,
                )
            )
    return throttled
