"""CreateTopics (key 19), versions 2-7, on both listeners.

- Controller listener: creates topics with explicit replica assignments or a partition count and
  replication factor (-1: the cluster default), placing replicas round robin over active brokers; the
  initial ISR is the active replicas. Topic configs such as min.insync.replicas and
  unclean.leader.election.enable are validated as Kafka validates them and stored as ConfigRecords. TOPIC_ALREADY_EXISTS,
  INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_PARTITIONS, INVALID_CONFIG,
  INVALID_TOPIC_EXCEPTION as Kafka.
- Broker listener: forwarded to the controller in an Envelope, at the client's version and as the client
  (clients send it to Metadata's controller id, a broker).
- On either listener, before anything is created (ControllerApis.createTopics): ``__cluster_metadata`` is
  never created (INVALID_REQUEST), and with an authorizer a topic needs CREATE on the cluster or on the
  topic (TOPIC_AUTHORIZATION_FAILED).
- KIP-599 at the controller: a client's controller_mutation_rate is charged each topic's partitions; from
  v6 a topic over the quota gets THROTTLING_QUOTA_EXCEEDED (handlers/_mutation_quota.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kio.schema.create_topics.v7 import response as r7
from kio.schema.create_topics.v7.request import CreateTopicsRequest

from epochkraft.controller.controller import refused_topic
from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response, response_for, upgrade_request
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.security.topics import CLUSTER_METADATA_TOPIC
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._mutation_quota import (
    CREATE_TOPICS_STRICT_SINCE,
    mutation_quota,
    with_throttle,
)
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _refusals(request: CreateTopicsRequest, ctx: RequestContext) -> list:
    """The topics refused on either listener before anything is created (ControllerApis.createTopics)."""
    cluster_create = ctx.authorized_cluster(AclOperation.CREATE)
    refused = []
    for topic in request.topics:
        if topic.name == CLUSTER_METADATA_TOPIC:
            refused.append(
                refused_topic(
                    topic.name,
                    ErrorCode.invalid_request,
                    f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
                )
            )
        elif not cluster_create and not ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, topic.name):
            refused.append(
                refused_topic(topic.name, ErrorCode.topic_authorization_failed, "Authorization failed.")
            )
    return refused


def _without(request: CreateTopicsRequest, refused: list) -> CreateTopicsRequest:
    if not refused:
        return request
    names = {r.name for r in refused}
    return replace(request, topics=tuple(t for t in request.topics if t.name not in names))


def _with_refused(response, refused: list):
    """The answer to the topics created, with the refused ones (None: nothing was left to create)."""
    if not refused:
        return response
    results = (response.topics if response is not None else ()) + tuple(refused)
    return r7.CreateTopicsResponse(
        throttle_time=response.throttle_time if response is not None else NO_THROTTLE, topics=results
    )


@api(key=19, name="CreateTopics", versions=(2, 7), listeners=(BROKER,))
async def handle_on_broker(request: rt.CreateTopics, ctx: RequestContext):
    upgraded = convert(request, CreateTopicsRequest)
    refused = _refusals(upgraded, ctx)
    remaining = _without(upgraded, refused)
    response = None
    if remaining.topics or not refused:
        # at the client's version: the controller's quota is strict or permissive by it
        at_version = upgrade_request(remaining, ctx.api_version)
        forwarded = await ctx.broker.forward_to_controller(at_version, response_for(19, ctx.api_version), ctx)
        response = convert(forwarded, r7.CreateTopicsResponse)
    return downgrade_response(_with_refused(response, refused), ctx.api_version)


@api(key=19, name="CreateTopics", versions=(2, 7), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.CreateTopics, ctx: RequestContext):
    request = convert(request, CreateTopicsRequest)
    refused = _refusals(request, ctx)
    quota = mutation_quota(ctx, CREATE_TOPICS_STRICT_SINCE)
    charge = quota.record if quota is not None else None
    response = ctx.controller_node.controller.create_topics(ctx.now_ms(), _without(request, refused), charge)
    response = with_throttle(_with_refused(response, refused), quota, ctx.now_ms())
    return downgrade_response(response, ctx.api_version)
