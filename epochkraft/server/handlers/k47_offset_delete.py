"""OffsetDelete (key 47), version 0, broker listener (the group's coordinator).

- Deletes a group's committed offsets for the partitions given (tombstones in __consumer_offsets, acks=all).
  A consumer group with members keeps the offsets of topics they subscribe to (GROUP_SUBSCRIBED_TO_TOPIC
  per partition); a non-empty group of another protocol is NON_EMPTY_GROUP; GROUP_ID_NOT_FOUND,
  NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS at the top level, as Kafka answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.offset_delete.v0 import response as r0

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=47, name="OffsetDelete", versions=(0, 0), listeners=(BROKER,))
async def handle(request: rt.OffsetDelete, ctx: RequestContext):
    wanted: list[tuple[str, int]] = [
        (t.name, p.partition_index) for t in request.topics for p in t.partitions
    ]
    error, results = await ctx.broker.groups.delete_offsets(request.group_id, wanted)
    topics: tuple[r0.OffsetDeleteResponseTopic, ...] = ()
    if error == ErrorCode.none:
        topics = tuple(
            r0.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=tuple(
                    r0.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=results[(t.name, p.partition_index)]
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
    return r0.OffsetDeleteResponse(error_code=error, throttle_time=NO_THROTTLE, topics=topics)
