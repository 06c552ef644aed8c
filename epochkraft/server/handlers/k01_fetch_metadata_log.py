"""Fetch (key 1) of ``__cluster_metadata``, versions 12-17, controller listener.

- Brokers follow the metadata log by long polling partition 0 of ``__cluster_metadata`` (topic id
  00000000-0000-0000-0000-000000000001; v12 names the topic): batches from fetch_offset, answered as soon
  as the log grows past it or after max_wait.
- From below the log's start (the records went once a snapshot held them): no records and the
  snapshot's id (SnapshotId), to be fetched with FetchSnapshot (59), as Kafka answers an observer.
- OFFSET_OUT_OF_RANGE beyond the log end; UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID for any other
  topic. The high watermark is the log end: with one controller every batch is committed once written;
  in a Raft quorum brokers read only the committed log, from any voter; the leader counts a broker that
  names itself (ReplicaState, as Kafka's brokers do) among DescribeQuorum's observers.
- A controller of the quorum (v15+, its id in ReplicaState and the cluster id named; v17: its directory
  id), voter or observer, fetches the Raft log itself: the Raft core answers (KafkaRaftClient
  .handleFetchRequest: DivergingEpoch, the high watermark, the leader it knows, and in NodeEndpoints where
  that leader is reached), records as the RecordBatches of raft/batches.py.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.fetch.v12 import response as v12
from kio.schema.fetch.v12.request import FetchRequest as FetchRequestV12
from kio.schema.fetch.v12.request import FetchTopic as FetchTopicV12
from kio.schema.fetch.v13.request import FetchRequest as FetchRequestV13
from kio.schema.fetch.v14.request import FetchRequest as FetchRequestV14
from kio.schema.fetch.v15.request import FetchRequest as FetchRequestV15
from kio.schema.fetch.v16 import response as v16
from kio.schema.fetch.v16.request import FetchRequest as FetchRequestV16
from kio.schema.fetch.v17 import response as v17
from kio.schema.fetch.v17.request import FetchRequest as FetchRequestV17
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i32, i64
from kio.static.protocol import ResponsePayload

from epochkraft.controller.metadata_log import METADATA_TOPIC, METADATA_TOPIC_ID_INT
from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.raft import wire
from epochkraft.raft.messages import FetchResponse
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, ms

if TYPE_CHECKING:
    from epochkraft.controller.quorum_driver import QuorumDriver
    from epochkraft.protocol import request_types as rt

METADATA_TOPIC_ID = uuid.UUID(int=METADATA_TOPIC_ID_INT)
BEFORE_REPLICA_STATE = (FetchRequestV12, FetchRequestV13, FetchRequestV14)  # KIP-903 (v15): ReplicaState
# A controller's fetch of the Raft log names itself in ReplicaState (v15+)
VoterFetch: TypeAlias = FetchRequestV15 | FetchRequestV16 | FetchRequestV17


def _partition(
    index: int, error: ErrorCode, hw: int, records: bytes = b"", snapshot: tuple[int, int] | None = None
) -> v16.PartitionData:
    return v16.PartitionData(
        partition_index=i32(index),
        error_code=error,
        high_watermark=i64(hw),
        last_stable_offset=i64(hw),
        log_start_offset=i64(0),
        aborted_transactions=None,
        preferred_read_replica=BrokerId(-1),
        records=Records(records),
        snapshot_id=v16.SnapshotId()
        if snapshot is None
        else v16.SnapshotId(end_offset=i64(snapshot[0]), epoch=i32(snapshot[1])),
    )


@api(key=1, name="Fetch", versions=(12, 17), listeners=(CONTROLLER,))
async def handle(request: rt.FetchOnController, ctx: RequestContext):
    node = ctx.controller_node
    log = node.metadata_log
    version = ctx.api_version
    if (
        node.quorum is not None
        and not isinstance(request, BEFORE_REPLICA_STATE)
        and request.replica_state.replica_id >= 0
        and request.cluster_id is not None  # controllers name the cluster (KIP-595); brokers fetching do not
    ):
        return await _voter_fetch(request, node.quorum)
    wanted = [(topic, p) for topic in request.topics for p in topic.partitions]
    is_metadata = [
        (
            topic.topic == METADATA_TOPIC
            if isinstance(topic, FetchTopicV12)
            else topic.topic_id == METADATA_TOPIC_ID
        )
        and p.partition == 0
        for topic, p in wanted
    ]
    # Long poll on the metadata partition when the follower is at the end of the log.
    waits = [p.fetch_offset for (_, p), ok in zip(wanted, is_metadata, strict=True) if ok]
    observer = (
        request.replica_id if isinstance(request, BEFORE_REPLICA_STATE) else request.replica_state.replica_id
    )
    if node.quorum is not None and observer >= 0 and waits:
        node.quorum.observe(observer, min(waits))  # a broker, shown as an observer by DescribeQuorum
    if waits and all(offset >= log.next_offset for offset in waits):
        await node.wait_for_records(min(waits), ms(request.max_wait))
    answered = []
    for (topic, p), ok in zip(wanted, is_metadata, strict=True):
        hw = log.next_offset
        if not ok:
            error = ErrorCode.unknown_topic_or_partition if version < 13 else ErrorCode.unknown_topic_id
            data = _partition(p.partition, error, -1)
        elif p.fetch_offset > hw or p.fetch_offset < 0:
            data = _partition(p.partition, ErrorCode.offset_out_of_range, hw)
        elif p.fetch_offset < log.start_offset:  # dropped below a snapshot: fetch that first
            data = _partition(
                p.partition, ErrorCode.none, hw, snapshot=(log.start_offset, log.snapshot_epoch)
            )
        else:
            data = _partition(
                p.partition, ErrorCode.none, hw, log.read(p.fetch_offset, p.partition_max_bytes)
            )
        name, topic_id = (topic.topic, None) if isinstance(topic, FetchTopicV12) else (None, topic.topic_id)
        answered.append((name, topic_id, data))
    if version == 12:
        topics = tuple(
            v12.FetchableTopicResponse(
                topic=TopicName(name or ""),  # by name in v12: every topic has one
                partitions=(convert(data, v12.PartitionData),),
            )
            for name, _, data in answered
        )
        return v12.FetchResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=i32(0), responses=topics
        )
    responses = tuple(
        v16.FetchableTopicResponse(topic_id=topic_id, partitions=(data,)) for _, topic_id, data in answered
    )
    response = v16.FetchResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=i32(0), responses=responses
    )
    return downgrade_response(response, version)


async def _voter_fetch(request: VoterFetch, quorum: QuorumDriver) -> ResponsePayload:
    topics = request.topics
    if len(topics) != 1 or topics[0].topic_id != METADATA_TOPIC_ID or len(topics[0].partitions) != 1:
        return _voter_fetch_error(ErrorCode.invalid_request, request)
    if request.cluster_id != quorum.cluster_id:
        return _voter_fetch_error(ErrorCode.inconsistent_cluster_id, request)
    partition = topics[0].partitions[0]
    message = wire.decode_fetch_request(request.replica_state.replica_id, ms(request.max_wait), partition)
    answer = await quorum.exchange(message.replica_id, message)
    if not isinstance(answer, FetchResponse):  # the core answers a Fetch with a Fetch response
        raise TypeError(f"the Raft core answered a Fetch with {type(answer).__name__}")
    data = wire.encode_fetch_partition(answer, partition.fetch_offset)
    response = v17.FetchResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=i32(0),
        responses=(v17.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=(data,)),),
        node_endpoints=wire.node_endpoints(
            answer.leader_id, quorum.endpoints_of(answer.leader_id), quorum.listener_name
        ),
    )
    return downgrade_response(response, request.__version__)


def _voter_fetch_error(error: ErrorCode, request: VoterFetch) -> ResponsePayload:
    response = v17.FetchResponse(throttle_time=NO_THROTTLE, error_code=error, session_id=i32(0), responses=())
    return downgrade_response(response, request.__version__)
