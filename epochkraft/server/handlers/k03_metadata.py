"""Metadata (key 3), versions 0-13, broker listener (v13 adds a top-level error code, KIP-1102: none).

- Brokers: every unfenced registered broker with an endpoint on the listener the request came in on, and
  that endpoint (named listeners: clients inside and outside a network each get addresses they reach; a
  broker without that listener is left out, as Kafka's getAliveBrokerNodes(listenerName)). Controller id: a broker that accepts CreateTopics (the lowest
  live broker id; brokers forward to the controller), so admin clients work unchanged.
- Topics (null: all; v0: an empty list means all) with topic ids (v10+), partitions with leader, leader
  epoch (v7+), replicas, ISR and offline replicas (fenced or unregistered). LEADER_NOT_AVAILABLE for a
  leaderless partition; UNKNOWN_TOPIC_OR_PARTITION for an unknown topic unless auto.create.topics.enable
  is on (the default, as Kafka) and the client allows it, in which case the topic is created
  (LEADER_NOT_AVAILABLE meanwhile). INVALID_TOPIC_EXCEPTION for a name no topic can have, whether or not
  the client asked for creation (Kafka's AutoTopicCreationManager and Topic.validate), so an
  auto-creating producer fails at once instead of timing out.
  A leader without the request's listener: no leader, LISTENER_NOT_FOUND from v6 on and LEADER_NOT_AVAILABLE
  before (KafkaApis.handleTopicMetadataRequest, errorUnavailableListeners).
- Topic ids in the request: before v12 a topic id (or a null name) makes the whole request INVALID_REQUEST
  (Kafka's error response: each topic with the error, no brokers); from v12 on, when any topic id is
  given, topics are looked up by id alone and an unknown id is UNKNOWN_TOPIC_ID with a null name, never
  created (KafkaApis.handleTopicMetadataRequest, useTopicId).
- Authorized operations (v8+, when asked): each topic answered for the principal carries the bitfield of
  the topic operations it may perform (all of them without an authorizer), v8-10 the cluster's too (0
  without DESCRIBE on the cluster); not asked, the schema's default -2147483648 (AuthHelper.authorizedOperations).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from kio.schema.metadata.v8.request import MetadataRequest as MetadataRequestV8
from kio.schema.metadata.v8.response import MetadataResponse as MetadataResponseV8
from kio.schema.metadata.v9.request import MetadataRequest as MetadataRequestV9
from kio.schema.metadata.v9.response import MetadataResponse as MetadataResponseV9
from kio.schema.metadata.v10.request import MetadataRequest as MetadataRequestV10
from kio.schema.metadata.v10.request import MetadataRequestTopic as MetadataRequestTopicV10
from kio.schema.metadata.v10.response import MetadataResponse as MetadataResponseV10
from kio.schema.metadata.v11.request import MetadataRequest as MetadataRequestV11
from kio.schema.metadata.v11.request import MetadataRequestTopic as MetadataRequestTopicV11
from kio.schema.metadata.v12 import response as r12
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataRequestTopicV12
from kio.schema.metadata.v13.request import MetadataRequest as MetadataRequestV13
from kio.schema.metadata.v13.request import MetadataRequestTopic as MetadataRequestTopicV13
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from epochkraft.metadata.image import MetadataImage
from epochkraft.metadata.registrations import TopicInfo
from epochkraft.metadata.topic_names import valid_topic_name
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType
from epochkraft.security.topics import CLUSTER_METADATA_TOPIC
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state"}
# KIP-430 added include_topic_authorized_operations in v8
WITH_AUTHORIZED_OPERATIONS = (
    MetadataRequestV8,
    MetadataRequestV9,
    MetadataRequestV10,
    MetadataRequestV11,
    MetadataRequestV12,
    MetadataRequestV13,
)
TOPICS_BY_ID = (
    MetadataRequestTopicV10,
    MetadataRequestTopicV11,
    MetadataRequestTopicV12,
    MetadataRequestTopicV13,
)  # v10+ (KIP-516): a topic may be named by id
# v8-v10 carry the cluster's authorized operations; v11 dropped them (KIP-700: DescribeCluster answers them)
WITH_CLUSTER_OPERATIONS = (MetadataResponseV8, MetadataResponseV9, MetadataResponseV10)


def _topic(
    image: MetadataImage, info: TopicInfo, listener_name: str, version: int
) -> r12.MetadataResponseTopic:
    partitions = []
    for index, reg in sorted(info.partitions.items()):
        offline = tuple(BrokerId(b) for b in reg.replicas if image.is_fenced(b))
        leader, error = reg.leader, ErrorCode.none if reg.leader >= 0 else ErrorCode.leader_not_available
        if leader >= 0 and image.endpoint(leader, listener_name) is None and leader in image.brokers:
            leader = -1
            error = ErrorCode.listener_not_found if version >= 6 else ErrorCode.leader_not_available
        partitions.append(
            r12.MetadataResponsePartition(
                error_code=error,
                partition_index=i32(index),
                leader_id=BrokerId(leader),
                leader_epoch=i32(reg.leader_epoch),
                replica_nodes=tuple(BrokerId(b) for b in reg.replicas),
                isr_nodes=tuple(BrokerId(b) for b in reg.isr),
                offline_replicas=offline,
            )
        )
    return r12.MetadataResponseTopic(
        error_code=ErrorCode.none,
        name=TopicName(info.name),
        topic_id=info.topic_id,
        is_internal=info.name in INTERNAL_TOPICS,
        partitions=tuple(partitions),
        topic_authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
    )


def _missing(name: str | None, error: ErrorCode, topic_id=None) -> r12.MetadataResponseTopic:
    return r12.MetadataResponseTopic(
        error_code=error,
        name=None if name is None else TopicName(name),
        topic_id=topic_id,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
    )


def _creates(ctx: RequestContext, image: MetadataImage, name: str | None, allow_create: bool) -> bool:
    """Whether the request auto-creates ``name``: unknown, valid, not the metadata log, auto-creation on and
    asked for, and CREATE allowed (on the cluster or the topic)."""
    return (
        name is not None
        and image.topic(name) is None
        and valid_topic_name(name) is None
        and name != CLUSTER_METADATA_TOPIC
        and ctx.broker.settings.auto_create_topics_enable
        and allow_create
        and (
            ctx.authorized_cluster(AclOperation.CREATE)
            or ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, name)
        )
    )


def _answer_topic(
    ctx: RequestContext,
    image: MetadataImage,
    name: str | None,
    allow_create: bool,
    version: int,
    created: set[str],
) -> r12.MetadataResponseTopic:
    """One named topic's answer from the request's image: its metadata or its error. ``created``: the
    topics this request created (answered whatever DESCRIBE says, as before; LEADER_NOT_AVAILABLE while
    not yet in the image)."""
    if name is None:
        return _missing(None, ErrorCode.unknown_topic_id)
    if (info := image.topic(name)) is not None:
        if name in created or ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            return _topic(image, info, ctx.listener_name, version)
        return _missing(name, ErrorCode.topic_authorization_failed)
    if name in created:
        return _missing(name, ErrorCode.leader_not_available)
    if valid_topic_name(name) is not None:
        return _missing(name, ErrorCode.invalid_topic_exception)
    if name == CLUSTER_METADATA_TOPIC:  # never created by a client, auto-creation included
        return _missing(name, ErrorCode.unknown_topic_or_partition)
    if ctx.broker.settings.auto_create_topics_enable and allow_create:
        return _missing(name, ErrorCode.topic_authorization_failed)  # _creates refused CREATE
    return _missing(name, ErrorCode.unknown_topic_or_partition)


def _with_authorized_operations(
    ctx: RequestContext, topics: list[r12.MetadataResponseTopic]
) -> list[r12.MetadataResponseTopic]:
    """Each topic answered for the principal carries the operations it may perform on it; those refused
    (TOPIC_AUTHORIZATION_FAILED) or unknown by id keep the schema's default (KafkaApis.handleTopicMetadataRequest,
    AuthHelper.authorizedOperations)."""
    return [
        t
        if t.name is None or t.error_code == ErrorCode.topic_authorization_failed
        else dataclasses.replace(
            t, topic_authorized_operations=i32(ctx.authorized_operations(ResourceType.TOPIC, t.name))
        )
        for t in topics
    ]


def _cluster_authorized_operations(ctx: RequestContext) -> int:
    """Metadata v8-10: the cluster operations the principal may perform, 0 without DESCRIBE on the
    cluster (KafkaApis.handleTopicMetadataRequest)."""
    if not ctx.authorized_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER)


@api(key=3, name="Metadata", versions=(0, 13), listeners=(BROKER,))
async def handle(request: rt.Metadata, ctx: RequestContext):
    node = ctx.broker
    image = node.cache.image  # one image answers the request (the one after its auto-creations)
    version = ctx.api_version
    ids = [t.topic_id for t in request.topics or () if isinstance(t, TOPICS_BY_ID) and t.topic_id is not None]
    if version < 12 and request.topics and (ids or any(t.name is None for t in request.topics)):
        return downgrade_response(
            r12.MetadataResponse(
                throttle_time=NO_THROTTLE,
                brokers=(),
                cluster_id=None,
                controller_id=BrokerId(-1),
                topics=tuple(
                    _missing(t.name, ErrorCode.invalid_request, getattr(t, "topic_id", None))
                    for t in request.topics
                ),
            ),
            version,
        )
    unknown_ids = []
    if request.topics is None or (version == 0 and not request.topics):
        # every topic the principal may DESCRIBE (KafkaApis.handleTopicMetadataRequest)
        names: list[str | None] = [
            n for n in sorted(image.topic_ids) if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, n)
        ]
    elif ids:  # by id alone, as Kafka when any id is given
        names = []
        for topic_id in dict.fromkeys(ids):
            info = image.topics.get(topic_id)
            if info is None:
                unknown_ids.append(topic_id)
            else:
                names.append(info.name)
        names = list(dict.fromkeys(names))
    else:
        names = []
        for t in request.topics:
            name = getattr(t, "name", None)
            if name is None and isinstance(t, TOPICS_BY_ID) and t.topic_id is not None:
                info = image.topics.get(t.topic_id)
                name = info.name if info else None
            names.append(name)
        names = list(dict.fromkeys(names))  # each topic answered once, as Kafka's set of names
    allow_create = getattr(request, "allow_auto_topic_creation", True)
    # Topics to auto-create are created first; the whole answer then comes from the image their creation
    # published (the creation waits for this broker's cache to hold them), so the leaders answered are
    # among the brokers answered.
    to_create = [name for name in names if name is not None and _creates(ctx, image, name, allow_create)]
    for name in to_create:
        await node.auto_create_topic(name)
    if to_create:
        image = node.cache.image
    created = set(to_create)
    topics = [_missing(None, ErrorCode.unknown_topic_id, topic_id) for topic_id in unknown_ids]
    topics += [_answer_topic(ctx, image, name, allow_create, version, created) for name in names]
    brokers = tuple(
        r12.MetadataResponseBroker(
            node_id=BrokerId(reg.broker_id), host=ep.host, port=i32(ep.port), rack=reg.rack
        )
        for reg in image.alive_brokers()
        for ep in reg.endpoints
        if ep.name == ctx.listener_name
    )
    controller_id = brokers[0].node_id if brokers else BrokerId(-1)
    if isinstance(request, WITH_AUTHORIZED_OPERATIONS) and request.include_topic_authorized_operations:
        topics = _with_authorized_operations(ctx, topics)
    response = r12.MetadataResponse(
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=node.cluster_id,
        controller_id=controller_id,
        topics=tuple(topics),
    )
    answer = downgrade_response(response, version)
    if isinstance(answer, WITH_CLUSTER_OPERATIONS) and getattr(
        request, "include_cluster_authorized_operations", False
    ):
        operations = i32(_cluster_authorized_operations(ctx))
        answer = dataclasses.replace(answer, cluster_authorized_operations=operations)
    return answer
