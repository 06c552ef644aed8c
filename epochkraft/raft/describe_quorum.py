"""DescribeQuorum (55) from the Raft core: leader, epoch, high watermark and each voter's and observer's
progress, as KafkaRaftClient.handleDescribeQuorumRequest and LeaderState.describeQuorum answer it.

Only the leader describes the quorum; any other voter answers NOT_LEADER_OR_FOLLOWER. The leader reports
itself at its log end, fetched and caught up now.
"""

from __future__ import annotations

from kio.schema.describe_quorum.v1 import response as v1
from kio.static.primitive import i32, i64

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.client import RaftClient
from epochkraft.raft.quorum_state import LeaderState, ReplicaState

METADATA_TOPIC = "__cluster_metadata"


def _replica(replica_id: int, state: ReplicaState) -> v1.ReplicaState:
    return v1.ReplicaState(
        replica_id=i32(replica_id),
        log_end_offset=i64(state.end_offset),
        last_fetch_timestamp=i64(state.last_fetch_ms),
        last_caught_up_timestamp=i64(state.last_caught_up_ms),
    )


def describe_quorum(client: RaftClient, now_ms: int) -> v1.DescribeQuorumResponse:
    state = client.state
    if not isinstance(state, LeaderState):
        partition = v1.PartitionData(
            partition_index=i32(0),
            error_code=ErrorCode.not_leader_or_follower,
            leader_id=i32(client.leader_id),
            leader_epoch=i32(client.epoch),
            high_watermark=i64(-1),
            current_voters=(),
            observers=(),
        )
    else:
        voters = []
        for voter in client.voters:
            if voter == client.local_id:
                me = ReplicaState(client.log.end_offset, now_ms, now_ms)
                voters.append(_replica(voter, me))
            else:
                voters.append(_replica(voter, state.replicas[voter]))
        hw = state.high_watermark
        partition = v1.PartitionData(
            partition_index=i32(0),
            error_code=ErrorCode.none,
            leader_id=i32(client.local_id),
            leader_epoch=i32(state.epoch),
            high_watermark=i64(hw if hw is not None else -1),
            current_voters=tuple(voters),
            observers=tuple(_replica(key.id, s) for key, s in sorted(state.observers.items())),
        )
    return v1.DescribeQuorumResponse(
        error_code=ErrorCode.none,
        topics=(v1.TopicData(topic_name=METADATA_TOPIC, partitions=(partition,)),),
    )
