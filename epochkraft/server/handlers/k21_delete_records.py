"""DeleteRecords (key 21), versions 0-2, broker listener.

- The leader of each partition moves its log start offset to the requested offset (-1: the high
  watermark) and answers with the low watermark once every alive follower's log start offset (reported
  in its fetches) has moved as well, or REQUEST_TIMED_OUT after the request's timeout (Kafka's
  DelayedDeleteRecords). Segments wholly below the new start are deleted at the next retention pass.
- OFFSET_OUT_OF_RANGE above the high watermark, POLICY_VIOLATION for a topic whose cleanup.policy does not
  include delete, NOT_LEADER_OR_FOLLOWER on a non-leader, UNKNOWN_TOPIC_OR_PARTITION otherwise.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kio.schema.delete_records.v2 import response as r2
from kio.static.primitive import i64

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, ms

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=21, name="DeleteRecords", versions=(0, 2), listeners=(BROKER,))
async def handle(request: rt.DeleteRecords, ctx: RequestContext):
    lifecycle = ctx.broker.replica_manager.lifecycle
    timeout = ms(request.timeout)
    keys = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    results = await asyncio.gather(
        *(
            lifecycle.delete_records(t.name, p.partition_index, p.offset, timeout)
            for t in request.topics
            for p in t.partitions
        )
    )
    by_key = dict(zip(keys, results, strict=True))
    response = r2.DeleteRecordsResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            r2.DeleteRecordsTopicResult(
                name=t.name,
                partitions=tuple(
                    r2.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index,
                        low_watermark=i64(by_key[(t.name, p.partition_index)][1]),
                        error_code=by_key[(t.name, p.partition_index)][0],
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )
    return downgrade_response(response, ctx.api_version)
