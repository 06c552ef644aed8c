"""OffsetFetch (key 9), versions 1-7, broker listener.

- Returns the group's committed offsets (-1 and empty metadata where nothing is committed); v2+ accept null
  topics meaning every partition the group committed, and carry a top-level error.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while the group is elsewhere or loading.
"""

from __future__ import annotations

from kio.schema.offset_fetch.v7.response import (
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)

from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response


@api(key=9, name="OffsetFetch", versions=(1, 7), listeners=(BROKER,))
async def handle(request, ctx):
    groups = ctx.node.groups
    requested = (
        None if request.topics is None else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    )
    error = groups.coordinator_error(request.group_id)
    offsets = groups.fetch_offsets(request.group_id, requested) if error == ErrorCode.none else {}
    if error != ErrorCode.none and requested is not None:
        offsets = dict.fromkeys(requested)
    by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
    for (topic, partition), committed in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            OffsetFetchResponsePartition(
                partition_index=partition,
                committed_offset=-1 if committed is None else committed.offset,
                committed_leader_epoch=-1 if committed is None else committed.leader_epoch,
                # Kafka writes "" (OffsetFetchResponse.NO_METADATA), never null.
                metadata="" if committed is None else committed.metadata or "",
                # v1 has no top-level error: coordinator errors go on each partition.
                error_code=error if ctx.api_version < 2 else ErrorCode.none,
            )
        )
    response = OffsetFetchResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(OffsetFetchResponseTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        error_code=error,
    )
    return downgrade_response(response, ctx.api_version)
