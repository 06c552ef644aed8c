"""OffsetCommit (key 8), versions 2-8, broker listener.

- Validates membership and generation (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS);
  generation -1 with an empty member id is a standalone commit.
- Writes the offsets to the replicated ``__consumer_offsets`` partition with acks=all and answers once they
  are committed, so they survive broker restarts and leader changes.
- v6+ carry the committed leader epoch; v2-4 a retention time (ignored, as Kafka 2.1+ does).
"""

from __future__ import annotations

from kio.schema.offset_commit.v8.response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

from epochkraft.broker.group_service import OffsetCommitEntry
from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response


@api(key=8, name="OffsetCommit", versions=(2, 8), listeners=(BROKER,))
async def handle(request, ctx):
    groups = ctx.node.groups
    entries = [
        OffsetCommitEntry(
            topic.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    error = groups.coordinator_error(request.group_id)
    if error == ErrorCode.none:
        error = await groups.commit(
            group_id=request.group_id,
            generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            entries=entries,
        )
    response = OffsetCommitResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            OffsetCommitResponseTopic(
                name=topic.name,
                partitions=tuple(
                    OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=error)
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )
    return downgrade_response(response, ctx.api_version)
