"""OffsetFetch (key 9), versions 1-10, broker listener.

- Returns the group's committed offsets (-1 and empty metadata where nothing is committed); v2+ accept null
  topics meaning every partition the group committed, and carry a top-level error.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while the group is elsewhere or loading.
- v7+ with require_stable: UNSTABLE_OFFSET_COMMIT for a partition whose offset a transaction has
  committed but not yet completed (KIP-447); the consumer retries until the marker lands.
- v8+ ask for several groups at once, each answered with its own error; v9 adds the member id and epoch of
  KIP-848's consumer groups, checked as ConsumerGroup.validateOffsetFetch (UNKNOWN_MEMBER_ID,
  STALE_MEMBER_EPOCH; a null member id with epoch -1 is an admin's fetch); v10 names topics by id
  (UNKNOWN_TOPIC_ID for an id the broker does not know).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kio.schema.offset_fetch.v1.request import OffsetFetchRequest as OffsetFetchRequestV1
from kio.schema.offset_fetch.v2.request import OffsetFetchRequest as OffsetFetchRequestV2
from kio.schema.offset_fetch.v3.request import OffsetFetchRequest as OffsetFetchRequestV3
from kio.schema.offset_fetch.v4.request import OffsetFetchRequest as OffsetFetchRequestV4
from kio.schema.offset_fetch.v5.request import OffsetFetchRequest as OffsetFetchRequestV5
from kio.schema.offset_fetch.v6.request import OffsetFetchRequest as OffsetFetchRequestV6
from kio.schema.offset_fetch.v7 import response as v7
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest as OffsetFetchRequestV7
from kio.schema.offset_fetch.v8.request import OffsetFetchRequestGroup as OffsetFetchRequestGroupV8
from kio.schema.offset_fetch.v9 import response as v9
from kio.schema.offset_fetch.v10 import response as v10
from kio.schema.types import TopicName
from kio.static.primitive import i32, i64

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.apis import BrokerApis
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

GROUPS_FROM, TOPIC_IDS_FROM = 8, 10  # and a member's id and epoch from v9 (KIP-848)
ONE_GROUP = (
    OffsetFetchRequestV1,
    OffsetFetchRequestV2,
    OffsetFetchRequestV3,
    OffsetFetchRequestV4,
    OffsetFetchRequestV5,
    OffsetFetchRequestV6,
    OffsetFetchRequestV7,
)  # before GROUPS_FROM
Partition = tuple[int, int, int, str, ErrorCode]  # index, offset, leader epoch, metadata, error
TopicOffsets = tuple[str | None, uuid.UUID | None, list[Partition]]  # name, id, partitions


def _group_offsets(
    node: BrokerApis,
    group_id: str,
    topics,
    version: int,
    member: tuple[str | None, int] | None = None,
    require_stable: bool = False,
) -> tuple[ErrorCode, list[TopicOffsets]]:
    """The group's error and its committed offsets for ``topics`` (None: every committed partition);
    ``member`` is the (member id, member epoch) a v9+ request names; with ``require_stable``,
    UNSTABLE_OFFSET_COMMIT for a partition an open transaction commits."""
    groups, image = node.groups, node.cache.image
    by_id = version >= TOPIC_IDS_FROM
    unknown: list[TopicOffsets] = []
    requested: list[tuple[str, int]] | None = None
    if topics is not None:
        requested = []
        for t in topics:
            info = image.topics.get(t.topic_id) if by_id else None
            name = info.name if info else None if by_id else t.name
            if name is None:
                missing = [(p, -1, -1, "", ErrorCode.unknown_topic_id) for p in t.partition_indexes]
                unknown.append((None, t.topic_id, missing))
                continue
            requested += [(name, p) for p in t.partition_indexes]
    error = groups.coordinator_error(group_id)
    if error == ErrorCode.none and member is not None:
        refused = groups.consumer_groups.validate_offset_fetch(group_id, *member)
        if refused not in (None, ErrorCode.none):
            return refused, []
    offsets = groups.fetch_offsets(group_id, requested) if error == ErrorCode.none else {}
    if error != ErrorCode.none and requested is not None:
        offsets = dict.fromkeys(requested)
    partition_error = error if version < 2 else ErrorCode.none  # v1 has no top-level error
    by_topic: dict[str, list[Partition]] = {}
    for (topic, partition), committed in sorted(offsets.items()):
        unstable = require_stable and error == ErrorCode.none and groups.unstable(group_id, topic, partition)
        by_topic.setdefault(topic, []).append(
            (partition, -1, -1, "", ErrorCode.unstable_offset_commit)
            if unstable
            else (partition, -1, -1, "", partition_error)
            if committed is None  # Kafka writes "" (OffsetFetchResponse.NO_METADATA), never null
            else (
                partition,
                committed.offset,
                committed.leader_epoch,
                committed.metadata or "",
                partition_error,
            )
        )
    found: list[TopicOffsets] = []
    for name, partitions in by_topic.items():
        info = image.topic(name)
        if by_id and info is None:
            continue  # a deleted topic has no id to answer with
        found.append((name, info.topic_id if info else None, partitions))
    return error, found + unknown


@api(key=9, name="OffsetFetch", versions=(1, TOPIC_IDS_FROM), listeners=(BROKER,))
async def handle(request: rt.OffsetFetch, ctx: RequestContext):
    version = ctx.api_version
    if isinstance(request, ONE_GROUP):
        require_stable = getattr(request, "require_stable", False)
        error, topics = _group_offsets(
            ctx.broker, request.group_id, request.topics, version, require_stable=require_stable
        )
        response = v7.OffsetFetchResponse(
            throttle_time=NO_THROTTLE,
            topics=tuple(
                v7.OffsetFetchResponseTopic(
                    name=TopicName(name or ""),  # by name before v8: every topic has one
                    partitions=tuple(
                        v7.OffsetFetchResponsePartition(
                            partition_index=i32(index),
                            committed_offset=i64(offset),
                            committed_leader_epoch=i32(epoch),
                            metadata=metadata,
                            error_code=partition_error,
                        )
                        for index, offset, epoch, metadata, partition_error in partitions
                    ),
                )
                for name, _, partitions in topics
            ),
            error_code=error,
        )
        return downgrade_response(response, version)
    schema = v10 if version >= TOPIC_IDS_FROM else v9
    answers = []
    for group in request.groups:
        member = (
            None if isinstance(group, OffsetFetchRequestGroupV8) else (group.member_id, group.member_epoch)
        )
        error, topics = _group_offsets(
            ctx.broker, group.group_id, group.topics, version, member, request.require_stable
        )
        answers.append(
            schema.OffsetFetchResponseGroup(
                group_id=group.group_id,
                topics=tuple(
                    schema.OffsetFetchResponseTopics(
                        **({"topic_id": topic_id} if version >= TOPIC_IDS_FROM else {"name": name}),
                        partitions=tuple(
                            schema.OffsetFetchResponsePartitions(
                                partition_index=index,
                                committed_offset=offset,
                                committed_leader_epoch=epoch,
                                metadata=metadata,
                                error_code=partition_error,
                            )
                            for index, offset, epoch, metadata, partition_error in partitions
                        ),
                    )
                    for name, topic_id, partitions in topics
                ),
                error_code=error,
            )
        )
    response = schema.OffsetFetchResponse(throttle_time=NO_THROTTLE, groups=tuple(answers))
    return downgrade_response(response, version)
