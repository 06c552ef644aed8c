"""DescribeProducers (key 61), version 0, broker listener.

- For each partition asked for, the idempotent and transactional producers its replica on this broker
  remembers (leader or follower, as Kafka's Partition.activeProducerState): producer id, epoch, last
  sequence, the max timestamp of its last batch, the coordinator epoch of its last marker and the first
  offset of its open transaction (-1 for none), as Kafka's ProducerStateEntry. NOT_LEADER_OR_FOLLOWER
  from a broker without a replica of the partition, UNKNOWN_TOPIC_OR_PARTITION for one that does not
  exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.describe_producers.v0 import response as r0
from kio.schema.types import ProducerId
from kio.static.primitive import i32, i64

from epochkraft.broker.replica_views import active_producers
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=61, name="DescribeProducers", versions=(0, 0), listeners=(BROKER,))
async def handle(request: rt.DescribeProducers, ctx: RequestContext):
    image = ctx.broker.cache.image
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            error, producers = active_producers(ctx.broker.replica_manager.replicas.get((topic.name, index)))
            if image.partition(topic.name, index) is None:
                error, producers = ErrorCode.unknown_topic_or_partition, []
            partitions.append(
                r0.PartitionResponse(
                    partition_index=index,
                    error_code=error,
                    error_message=None,
                    active_producers=tuple(
                        r0.ProducerState(
                            producer_id=ProducerId(p.producer_id),
                            producer_epoch=i32(p.producer_epoch),
                            last_sequence=i32(p.last_sequence),
                            last_timestamp=i64(p.last_timestamp),
                            coordinator_epoch=i32(p.coordinator_epoch),
                            current_txn_start_offset=i64(p.current_txn_start_offset),
                        )
                        for p in producers
                    ),
                )
            )
        topics.append(r0.TopicResponse(name=topic.name, partitions=tuple(partitions)))
    return r0.DescribeProducersResponse(throttle_time=NO_THROTTLE, topics=tuple(topics))
