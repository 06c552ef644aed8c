"""OffsetForLeaderEpoch (key 23), versions 2-4, broker listener.

- The end offset of the largest leader epoch at or below the one asked for (the start of the next epoch,
  or the log end for the latest), from the leader-epoch cache; clients use it to validate positions
  after a leader change (librdkafka sends v2). Leader epoch checks as Fetch; only leaders answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.offset_for_leader_epoch.v4 import response as r4

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.apis import BrokerApis
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _answer(node: BrokerApis, topic: str, p) -> r4.EpochEndOffset:
    def result(error, epoch=-1, offset=-1):
        return r4.EpochEndOffset(
            error_code=error, partition=p.partition, leader_epoch=epoch, end_offset=offset
        )

    replica, error = node.replica_manager.leader_replica(topic, p.partition, p.current_leader_epoch)
    if replica is None:
        return result(error)
    epoch, end = replica.log.epochs.end_offset_for(p.leader_epoch)
    return result(ErrorCode.none, epoch, end)


@api(key=23, name="OffsetForLeaderEpoch", versions=(2, 4), listeners=(BROKER,))
async def handle(request: rt.OffsetForLeaderEpoch, ctx: RequestContext):
    response = r4.OffsetForLeaderEpochResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            r4.OffsetForLeaderTopicResult(
                topic=t.topic, partitions=tuple(_answer(ctx.broker, t.topic, p) for p in t.partitions)
            )
            for t in request.topics
        ),
    )
    return downgrade_response(response, ctx.api_version)
