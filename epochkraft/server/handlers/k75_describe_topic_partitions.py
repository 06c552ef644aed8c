"""DescribeTopicPartitions (key 75), version 0, broker listener.

- The topics asked for (none: every topic), sorted by name, from the cursor's topic and partition on,
  at most response_partition_limit partitions (capped at 2000, Kafka's max.request.partition.size.limit);
  where it stops, next_cursor names the next topic and partition, as Kafka's KRaftMetadataCache pages.
- Each partition: leader (-1 when fenced or unknown), leader epoch, replicas, ISR, offline replicas
  (fenced or unregistered), the eligible leader replicas and last known ELR (KIP-966; empty with the
  feature off), as Kafka's KRaftMetadataCache answers them.
- UNKNOWN_TOPIC_OR_PARTITION / INVALID_TOPIC_EXCEPTION per missing or badly named topic; a cursor whose
  topic is not in the list or whose partition is negative is INVALID_REQUEST for every topic asked for.
- Each topic answered carries the topic operations the principal may perform (all of them without an
  authorizer); a topic it may not DESCRIBE is left out of "every topic", and named, answered
  TOPIC_AUTHORIZATION_FAILED with a zero id (DescribeTopicPartitionsRequestHandler, AuthHelper.authorizedOperations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.describe_topic_partitions.v0 import response as r0
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from epochkraft.metadata.topic_names import valid_topic_name
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.security.authorizer import OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE
from epochkraft.server.handlers.k03_metadata import INTERNAL_TOPICS

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
NO_LEADER_ID = -1
TOPIC = ResourceType.TOPIC


def _topic(
    name: str,
    error: ErrorCode,
    topic_id=None,
    partitions: tuple = (),
    operations: int = OPERATIONS_NOT_REQUESTED,
) -> r0.DescribeTopicPartitionsResponseTopic:
    return r0.DescribeTopicPartitionsResponseTopic(
        error_code=error,
        name=TopicName(name),
        topic_id=topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=i32(operations),
    )


def _broker_ids(replicas: tuple[int, ...]) -> tuple[BrokerId, ...]:
    return tuple(BrokerId(b) for b in replicas)


@api(key=75, name="DescribeTopicPartitions", versions=(0, 0), listeners=(BROKER,))
async def handle(request: rt.DescribeTopicPartitions, ctx: RequestContext):
    image = ctx.broker.cache.image
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    every = not request.topics
    asked = sorted(image.topic_ids) if every else sorted({t.name for t in request.topics})
    names = [n for n in asked if n >= cursor_topic]
    if cursor is not None and (cursor.partition_index < 0 or (not every and cursor_topic not in names)):
        topics = tuple(_topic(t.name, ErrorCode.invalid_request) for t in request.topics)
        return r0.DescribeTopicPartitionsResponse(throttle_time=NO_THROTTLE, topics=topics, next_cursor=None)
    # Topics the principal may not DESCRIBE: left out of "every topic", refused by name (no id given).
    refused = [n for n in names if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, n)]
    names = [n for n in names if n not in refused]
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit), 1)
    results = []
    next_cursor = None
    for name in names:
        topic = image.topic(name)
        if topic is None:
            if not every:
                bad_name = valid_topic_name(name) is not None
                error = (
                    ErrorCode.invalid_topic_exception if bad_name else ErrorCode.unknown_topic_or_partition
                )
                results.append(_topic(name, error, operations=ctx.authorized_operations(TOPIC, name)))
            continue
        if remaining == 0:
            next_cursor = r0.Cursor(topic_name=TopicName(name), partition_index=i32(0))
            break
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        end = min(len(topic.partitions), start + remaining)
        partitions = []
        for index in range(start, end):
            p = topic.partitions.get(index)
            if p is None:
                continue
            leader = p.leader if p.leader >= 0 and not image.is_fenced(p.leader) else NO_LEADER_ID
            partitions.append(
                r0.DescribeTopicPartitionsResponsePartition(
                    error_code=ErrorCode.none,
                    partition_index=i32(index),
                    leader_id=BrokerId(leader),
                    leader_epoch=i32(p.leader_epoch),
                    replica_nodes=_broker_ids(p.replicas),
                    isr_nodes=_broker_ids(p.isr),
                    eligible_leader_replicas=_broker_ids(p.elr),
                    last_known_elr=_broker_ids(p.last_known_elr),
                    offline_replicas=tuple(BrokerId(b) for b in p.replicas if image.is_fenced(b)),
                )
            )
        operations = ctx.authorized_operations(TOPIC, name)
        results.append(_topic(name, ErrorCode.none, topic.topic_id, tuple(partitions), operations))
        remaining -= len(partitions)
        if end < len(topic.partitions):
            next_cursor = r0.Cursor(topic_name=TopicName(name), partition_index=i32(end))
            break
    if not every:
        results += [_topic(n, ErrorCode.topic_authorization_failed) for n in refused]
    return r0.DescribeTopicPartitionsResponse(
        throttle_time=NO_THROTTLE, topics=tuple(results), next_cursor=next_cursor
    )
