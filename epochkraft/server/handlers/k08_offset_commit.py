"""OffsetCommit (key 8), versions 2-10, broker listener.

- Validates membership and generation (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS);
  generation -1 with an empty member id is a standalone commit.
- Writes the offsets to the replicated ``__consumer_offsets`` partition with acks=all and answers once they
  are committed, so they survive broker restarts and leader changes.
- v6+ carry the committed leader epoch; v2-4 a retention time (ignored, as Kafka 2.1+ does); v9 is v8 for
  classic groups; for a KIP-848 consumer group the generation is the member epoch (STALE_MEMBER_EPOCH,
  UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION below v9, as ConsumerGroup.validateOffsetCommit); v10 names
  topics by id (UNKNOWN_TOPIC_ID for an id the broker does not know).
- A partition the metadata does not know is UNKNOWN_TOPIC_OR_PARTITION and is not committed; the others
  are (KafkaApis.handleOffsetCommitRequest checks each against its metadata cache).
- Metadata longer than ``offset.metadata.max.bytes`` is OFFSET_METADATA_TOO_LARGE for that partition and
  is not committed; the other partitions are (Kafka's OffsetMetadataManager.commitOffset).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from kio.schema.offset_commit.v9 import response as v9
from kio.schema.offset_commit.v10 import response as v10
from kio.schema.offset_commit.v10.request import OffsetCommitRequest as OffsetCommitRequestV10

from epochkraft.broker.group_service import OffsetCommitEntry
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

TOPIC_IDS_FROM = 10


class _Partition(Protocol):
    """What the handler reads of a partition in every version (the leader epoch, v6+, apart)."""

    @property
    def partition_index(self) -> int: ...
    @property
    def committed_offset(self) -> int: ...
    @property
    def committed_metadata(self) -> str | None: ...


class _Topic(Protocol):
    """What the handler reads of a topic in every version (its name, or id from v10, apart)."""

    @property
    def partitions(self) -> Sequence[_Partition]: ...


@api(key=8, name="OffsetCommit", versions=(2, TOPIC_IDS_FROM), listeners=(BROKER,))
async def handle(request: rt.OffsetCommit, ctx: RequestContext):
    version = ctx.api_version
    by_id = version >= TOPIC_IDS_FROM
    groups, image = ctx.broker.groups, ctx.broker.cache.image
    topics: Sequence[_Topic] = request.topics
    names: list[str | None]
    keys: Sequence[uuid.UUID | str | None]  # each topic's id (v10) or name, as its answer names it
    if isinstance(request, OffsetCommitRequestV10):
        names, ids = [], []
        for with_id in request.topics:
            info = image.topics.get(with_id.topic_id) if with_id.topic_id is not None else None
            names.append(info.name if info else None)
            ids.append(with_id.topic_id)
        keys = ids
    else:
        names = [with_name.name for with_name in request.topics]
        keys = names

    def known(name: str | None, partition: int) -> bool:
        info = image.topic(name) if name is not None else None
        return info is not None and partition in info.partitions

    entries = [
        OffsetCommitEntry(
            name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for topic, name in zip(topics, names, strict=True)
        for p in topic.partitions
        if name is not None and known(name, p.partition_index)
    ]
    errors = dict.fromkeys(((e.topic, e.partition) for e in entries), ErrorCode.none)
    error = groups.coordinator_error(request.group_id)
    if error != ErrorCode.none:
        errors = dict.fromkeys(errors, error)
    elif entries:
        results = await groups.commit(
            group_id=request.group_id,
            generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            entries=entries,
            api_version=version,
            group_instance_id=getattr(request, "group_instance_id", None),
        )
        errors = {(e.topic, e.partition): r for e, r in zip(entries, results, strict=True)}
    schema = v10 if by_id else v9
    response = schema.OffsetCommitResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            schema.OffsetCommitResponseTopic(
                **({"topic_id": key} if by_id else {"name": key}),
                partitions=tuple(
                    schema.OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.unknown_topic_id
                        if name is None
                        else errors.get((name, p.partition_index), ErrorCode.unknown_topic_or_partition),
                    )
                    for p in topic.partitions
                ),
            )
            for topic, name, key in zip(topics, names, keys, strict=True)
        ),
    )
    return downgrade_response(response, version)
