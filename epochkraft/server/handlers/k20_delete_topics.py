"""DeleteTopics (key 20), versions 1-6, on both listeners.

- By name (v1-5) or by name or topic id (v6); UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID for unknown
  topics. The broker listener forwards to the controller in an Envelope, at the client's version.
- On either listener, before anything is deleted: ``__cluster_metadata`` is never deleted
  (INVALID_REQUEST, as ControllerApis refuses to create it); with an authorizer a topic needs DELETE
  (TOPIC_AUTHORIZATION_FAILED, ControllerApis.deleteTopics), and an internal topic (``__consumer_offsets``)
  a super user.
- v6: an entry with both a name and a topic id, or with neither, is INVALID_REQUEST and the others are
  deleted (Kafka's ControllerApis.deleteTopics).
- KIP-599 at the controller: a client's controller_mutation_rate is charged each topic's partitions;
  from v5 a topic over the quota gets THROTTLING_QUOTA_EXCEEDED (handlers/_mutation_quota.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from kio.schema.delete_topics.v6 import response as r6
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.types import TopicName
from kio.static.protocol import RequestPayload

from epochkraft.metadata.registrations import TopicInfo
from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import request_class
from epochkraft.protocol.versions import convert, downgrade_response, response_for
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.security.topics import CLUSTER_METADATA_TOPIC, INTERNAL_TOPICS
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._mutation_quota import (
    DELETE_TOPICS_STRICT_SINCE,
    THROTTLED_MESSAGE,
    mutation_quota,
    with_throttle,
)
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

TopicsById = Mapping[uuid.UUID, TopicInfo]
# The node's topics by id, reached only for a state naming an id (a request refused outright needs no node)
TopicsOf = Callable[[RequestContext], TopicsById]


def _broker_topics(ctx: RequestContext) -> TopicsById:
    return ctx.broker.cache.image.topics


def _controller_topics(ctx: RequestContext) -> TopicsById:
    return ctx.controller_node.controller.replication.topics


def _topic_name(ctx: RequestContext, topics_of: TopicsOf, state: DeleteTopicState) -> TopicName | None:
    """The topic a state names, by name or by id in the node's topics."""
    if state.name is not None:
        return TopicName(state.name)
    if state.topic_id is None:
        return None
    info = topics_of(ctx).get(state.topic_id)
    return TopicName(info.name) if info is not None else None


def _refusal(
    ctx: RequestContext, topics_of: TopicsOf, state: DeleteTopicState
) -> tuple[ErrorCode, str | None] | None:
    if state.name is not None and state.topic_id is not None:
        return ErrorCode.invalid_request, "You may not specify both topic name and topic id."
    if state.name is None and state.topic_id is None:
        return ErrorCode.invalid_request, "Neither topic name nor id were specified."
    name = _topic_name(ctx, topics_of, state)
    if name is None:
        return None  # an unknown id: the controller answers UNKNOWN_TOPIC_ID
    if name == CLUSTER_METADATA_TOPIC:
        return (
            ErrorCode.invalid_request,
            f"Deletion of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
        )
    if not ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, name):
        return ErrorCode.topic_authorization_failed, None
    if name in INTERNAL_TOPICS and not ctx.is_super_user:
        return ErrorCode.topic_authorization_failed, f"Deleting internal topic {name} takes a super user."
    return None


def _v6(request, version: int) -> DeleteTopicsRequest:
    """Before v6 topics are named only."""
    if version >= 6:
        return request
    return DeleteTopicsRequest(
        topics=tuple(DeleteTopicState(name=name, topic_id=None) for name in request.topic_names),
        timeout=request.timeout,
    )


def _sorted_out(ctx: RequestContext, topics_of: TopicsOf, request: DeleteTopicsRequest) -> tuple[list, list]:
    """(the states to delete, the refused ones' results), checked on either listener before anything is
    deleted."""
    allowed, refused = [], []
    for state in request.topics:
        refusal = _refusal(ctx, topics_of, state)
        if refusal is None:
            allowed.append(state)
        else:
            refused.append(
                r6.DeletableTopicResult(
                    name=_topic_name(ctx, topics_of, state),
                    topic_id=state.topic_id,
                    error_code=refusal[0],
                    error_message=refusal[1],
                )
            )
    return allowed, refused


def _with_refused(response, refused: list):
    return replace(response, responses=response.responses + tuple(refused)) if refused else response


NOTHING_DELETED = r6.DeleteTopicsResponse(throttle_time=NO_THROTTLE, responses=())


@api(key=20, name="DeleteTopics", versions=(1, 6), listeners=(BROKER,))
async def handle_on_broker(request: rt.DeleteTopics, ctx: RequestContext):
    upgraded = _v6(request, ctx.api_version)
    allowed, refused = _sorted_out(ctx, _broker_topics, upgraded)
    if not allowed and refused:
        response = NOTHING_DELETED
    else:
        # at the client's version: the controller's quota is strict or permissive by it
        forwarded = _at_version(replace(upgraded, topics=tuple(allowed)), ctx.api_version)
        answer = await ctx.broker.forward_to_controller(forwarded, response_for(20, ctx.api_version), ctx)
        response = convert(answer, r6.DeleteTopicsResponse)
    return downgrade_response(_with_refused(response, refused), ctx.api_version)


@api(key=20, name="DeleteTopics", versions=(1, 6), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.DeleteTopics, ctx: RequestContext):
    upgraded = _v6(request, ctx.api_version)
    allowed, refused = _sorted_out(ctx, _controller_topics, upgraded)
    quota = mutation_quota(ctx, DELETE_TOPICS_STRICT_SINCE) if allowed else None  # nothing to charge
    if quota is not None:
        allowed = _charge(ctx, allowed, quota, refused)
    if not allowed and refused:
        response = NOTHING_DELETED
    else:
        response = ctx.controller_node.controller.delete_topics(
            ctx.now_ms(), replace(upgraded, topics=tuple(allowed))
        )
    response = with_throttle(_with_refused(response, refused), quota, ctx.now_ms())
    return downgrade_response(response, ctx.api_version)


def _at_version(request: DeleteTopicsRequest, version: int) -> RequestPayload:
    """The request at the client's version (before v6 the topics are named only, and named here)."""
    if version >= 6:
        return request
    names = tuple(TopicName(state.name or "") for state in request.topics)
    return request_class(20, version)(topic_names=names, timeout=request.timeout)


def _charge(ctx, states: list, quota, refused: list) -> list:
    """KIP-599: each topic to delete charges its partitions; those over a strict quota are refused
    (THROTTLING_QUOTA_EXCEEDED) and left out of what is deleted."""
    kept = []
    for state in states:
        image = ctx.controller_node.controller.image
        topic = image.topic(_topic_name(ctx, _controller_topics, state) or "")
        if topic is None or quota.record(len(topic.partitions)):
            kept.append(state)
            continue
        refused.append(
            r6.DeletableTopicResult(
                name=topic.name,
                topic_id=state.topic_id,
                error_code=ErrorCode.throttling_quota_exceeded,
                error_message=THROTTLED_MESSAGE,
            )
        )
    return kept
