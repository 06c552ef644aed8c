"""DescribeQuorum (key 55), versions 0-2, on both listeners (v2, KIP-853: each replica's directory id and
the voters' listeners).

- Broker listener: forwarded to the controllers (as Kafka's brokers forward it), the one the broker talks
  to first and then the others until the leader answers; what ``kafka-metadata-quorum --bootstrap-server``
  asks.
- In a Raft quorum: the leader's view, as KafkaRaftClient.handleDescribeQuorumRequest and
  LeaderState.describeQuorum answer it (raft/describe_quorum.py): leader, epoch, high watermark, each
  voter's and observer's log end offset and last fetch and caught-up times; another voter answers
  NOT_LEADER_OR_FOLLOWER naming the leader it knows.
- A single controller is a quorum of one: itself, leading epoch 0 (every batch it writes carries epoch 0),
  its log end the high watermark.
- ``__cluster_metadata``-0 only; any other partition gets UNKNOWN_TOPIC_OR_PARTITION
  (KafkaRaftClient.handleDescribeQuorumRequest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.describe_quorum.v2 import response as v2
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response, response_for
from epochkraft.raft.describe_quorum import METADATA_TOPIC
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _unknown_partitions(topics) -> v2.DescribeQuorumResponse:
    """Kafka's DescribeQuorumRequest.getPartitionLevelErrorResponse: UNKNOWN_TOPIC_OR_PARTITION in every
    partition asked for, the other fields zero."""
    return v2.DescribeQuorumResponse(
        error_code=ErrorCode.none,
        error_message=None,
        nodes=(),
        topics=tuple(
            v2.TopicData(
                topic_name=t.topic_name,
                partitions=tuple(
                    v2.PartitionData(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.unknown_topic_or_partition,
                        error_message=None,
                        leader_id=BrokerId(0),
                        leader_epoch=i32(0),
                        high_watermark=i64(0),
                        current_voters=(),
                        observers=(),
                    )
                    for p in t.partitions
                ),
            )
            for t in topics
        ),
    )


def _single_controller(node_id: int, end_offset: int, now_ms: int) -> v2.DescribeQuorumResponse:
    me = v2.ReplicaState(
        replica_id=BrokerId(node_id),
        replica_directory_id=None,
        log_end_offset=i64(end_offset),
        last_fetch_timestamp=i64(now_ms),
        last_caught_up_timestamp=i64(now_ms),
    )
    partition = v2.PartitionData(
        partition_index=i32(0),
        error_code=ErrorCode.none,
        error_message=None,
        leader_id=BrokerId(node_id),
        leader_epoch=i32(0),
        high_watermark=i64(end_offset),
        current_voters=(me,),
        observers=(),
    )
    return v2.DescribeQuorumResponse(
        error_code=ErrorCode.none,
        error_message=None,
        topics=(v2.TopicData(topic_name=TopicName(METADATA_TOPIC), partitions=(partition,)),),
        nodes=(),
    )


def _asks_for_the_metadata_partition(topics) -> bool:
    return (
        len(topics) == 1
        and topics[0].topic_name == METADATA_TOPIC
        and [p.partition_index for p in topics[0].partitions] == [0]
    )


@api(key=55, name="DescribeQuorum", versions=(0, 2), listeners=(BROKER,))
async def handle_on_broker(request: rt.DescribeQuorum, ctx: RequestContext):
    if not _asks_for_the_metadata_partition(request.topics):
        return downgrade_response(_unknown_partitions(request.topics), ctx.api_version)
    return await ctx.broker.control.send(request, response_for(55, ctx.api_version), elsewhere=_not_leader)


@api(key=55, name="DescribeQuorum", versions=(0, 2), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.DescribeQuorum, ctx: RequestContext):
    if not _asks_for_the_metadata_partition(request.topics):
        return downgrade_response(_unknown_partitions(request.topics), ctx.api_version)
    node = ctx.controller_node
    if node.quorum is None:
        response = _single_controller(node.controller.node_id, node.metadata_log.next_offset, node.now_ms())
    else:
        response = node.quorum.describe_quorum(node.now_ms())
    return downgrade_response(response, ctx.api_version)


def _not_leader(answer) -> bool:
    """A voter other than the leader answered: the channel asks the next controller."""
    partitions = [p for t in answer.topics for p in t.partitions]
    return bool(partitions) and partitions[0].error_code == ErrorCode.not_leader_or_follower
