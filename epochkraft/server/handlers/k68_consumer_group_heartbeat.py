"""ConsumerGroupHeartbeat (key 68), versions 0-1, broker listener: KIP-848's consumer group protocol.

- Joins (member epoch 0), heartbeats, and leaves (-1; -2 for a static member that will come back) a
  consumer group; answers the member epoch, the heartbeat interval (group.consumer.heartbeat.interval.ms)
  and, when it changed or the request was a full one, the member's assignment (broker/consumer_group.py).
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as the classic group APIs; READ on the group (checked
  before the handler) and DESCRIBE on every subscribed topic name (TOPIC_AUTHORIZATION_FAILED), as
  KafkaApis.handleConsumerGroupHeartbeatRequest; topics a subscribed regular expression matches are kept
  only with DESCRIBE for the principal, as Kafka 4.x's coordinator.
- The group's changes are written to ``__consumer_offsets`` (acks=all) before the answer, so a new
  coordinator resumes the group; a failed write answers its error as Kafka's GroupCoordinatorService
  normalizes it (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, UNKNOWN_SERVER_ERROR) and leaves the group as
  before the heartbeat.
- v0 lets the coordinator generate the member id; from v1 the consumer generates it (KIP-1082).
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING

from kio.schema.consumer_group_heartbeat.v1 import response as r1
from kio.static.primitive import i32, i32Timedelta

from epochkraft.broker.assignors import Assignment
from epochkraft.broker.consumer_group import HeartbeatRequest, HeartbeatResult
from epochkraft.broker.topics_image import CacheTopics
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ZERO_UUID
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, ms

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _owned(request: rt.ConsumerGroupHeartbeat) -> Assignment | None:
    """The partitions the member reports owning (None: not sent), a topic named twice with the union of
    its entries (Kafka reads every entry: CurrentAssignmentBuilder.ownsRevokedPartitions would otherwise
    take a revoked partition listed in an earlier entry as released). kio reads the zero topic id as None;
    it is kept as Kafka's Uuid.ZERO_UUID, a topic no assignment holds, which the reconciliation ignores;
    Kafka does not refuse the request for it."""
    if request.topic_partitions is None:
        return None
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for tp in request.topic_partitions:
        topic_id = ZERO_UUID if tp.topic_id is None else tp.topic_id
        owned[topic_id] = owned.get(topic_id, frozenset()) | frozenset(tp.partitions)
    return owned


def _unauthorized_topics(request: rt.ConsumerGroupHeartbeat, ctx: RequestContext) -> list[str]:
    if ctx.authorizer is None or not request.subscribed_topic_names:
        return []
    return sorted(
        name
        for name in set(request.subscribed_topic_names)
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
    )


def _response(result: HeartbeatResult, version: int):
    assignment = None
    if result.assignment is not None:
        assignment = r1.Assignment(
            topic_partitions=tuple(
                r1.TopicPartitions(topic_id=topic, partitions=tuple(i32(p) for p in sorted(parts)))
                for topic, parts in sorted(result.assignment.items())
            )
        )
    response = r1.ConsumerGroupHeartbeatResponse(
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=i32(result.member_epoch),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=result.heartbeat_interval_ms)),
        assignment=assignment,
    )
    return downgrade_response(response, version)


@api(key=68, name="ConsumerGroupHeartbeat", versions=(0, 1), listeners=(BROKER,))
async def handle(request: rt.ConsumerGroupHeartbeat, ctx: RequestContext):
    groups = ctx.broker.groups
    unauthorized = _unauthorized_topics(request, ctx)
    if unauthorized:
        message = f"The following topics are not authorized: {', '.join(unauthorized)}."
        return _response(HeartbeatResult(ErrorCode.topic_authorization_failed, message), ctx.api_version)
    heartbeat = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=ms(request.rebalance_timeout),
        subscribed_topic_names=None
        if request.subscribed_topic_names is None
        else tuple(request.subscribed_topic_names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),  # v1+
        server_assignor=request.server_assignor,
        owned=_owned(request),
        client_id=ctx.header.client_id or "",
        client_host=ctx.group_client_host,
        api_version=ctx.api_version,
        topic_authorized=None
        if ctx.authorizer is None
        else lambda name: ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name),
    )
    invalid = groups.consumer_groups.invalid_request(heartbeat)
    if invalid is not None:  # Kafka validates before it routes the request to the group's coordinator
        return _response(invalid, ctx.api_version)
    error = groups.coordinator_error(request.group_id)
    if error != ErrorCode.none:
        return _response(HeartbeatResult(error), ctx.api_version)
    result = await groups.consumer_heartbeat(heartbeat, CacheTopics(ctx.broker.cache))
    return _response(result, ctx.api_version)
