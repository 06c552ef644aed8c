"""DescribeQuorum (55) from the Raft core: leader, epoch, high watermark and each voter's and observer's
progress, as KafkaRaftClient.handleDescribeQuorumRequest and LeaderState.describeQuorum answer it.

Only the leader describes the quorum; any other voter answers NOT_LEADER_OR_FOLLOWER. The leader reports
itself at its log end, fetched and caught up now. The answer is v2's (KIP-853: each replica's directory id,
and ``nodes``, the voters' listeners); the handler takes it down to the version asked for.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kio.schema.describe_quorum.v2 import response as v2
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64, u16

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.client import RaftClient
from epochkraft.raft.quorum_state import LeaderState, ReplicaState
from epochkraft.raft.voter_set import Endpoints

METADATA_TOPIC = "__cluster_metadata"


def _replica(replica_id: int, directory_id: uuid.UUID | None, state: ReplicaState) -> v2.ReplicaState:
    return v2.ReplicaState(
        replica_id=BrokerId(replica_id),
        replica_directory_id=directory_id,
        log_end_offset=i64(state.end_offset),
        last_fetch_timestamp=i64(state.last_fetch_ms),
        last_caught_up_timestamp=i64(state.last_caught_up_ms),
    )


def describe_quorum(
    client: RaftClient, now_ms: int, endpoints_of: Callable[[int], Endpoints] | None = None
) -> v2.DescribeQuorumResponse:
    """``endpoints_of``: where each voter is reached (the voter set's endpoints by default; a static
    quorum's come from its configuration)."""
    state = client.state
    nodes: tuple[v2.Node, ...] = ()
    if not isinstance(state, LeaderState):
        partition = v2.PartitionData(
            partition_index=i32(0),
            error_code=ErrorCode.not_leader_or_follower,
            error_message=None,
            leader_id=BrokerId(client.leader_id),
            leader_epoch=i32(client.epoch),
            high_watermark=i64(-1),
            current_voters=(),
            observers=(),
        )
    else:
        voters = []
        for key in client.voter_set.voters:
            if key.id == client.local_id:
                me = ReplicaState(client.log.end_offset, now_ms, now_ms)
                voters.append(_replica(key.id, client.local_key.directory_id, me))
            else:
                voters.append(_replica(key.id, key.directory_id, state.replicas[key.id]))
        hw = state.high_watermark
        partition = v2.PartitionData(
            partition_index=i32(0),
            error_code=ErrorCode.none,
            error_message=None,
            leader_id=BrokerId(client.local_id),
            leader_epoch=i32(state.epoch),
            high_watermark=i64(hw if hw is not None else -1),
            current_voters=tuple(voters),
            observers=tuple(
                _replica(key.id, key.directory_id, s) for key, s in sorted(state.observers.items())
            ),
        )
        lookup = endpoints_of or client.voter_set.endpoints_of
        nodes = tuple(
            v2.Node(
                node_id=BrokerId(voter),
                listeners=tuple(
                    v2.Listener(name=e.name, host=e.host, port=u16(e.port)) for e in lookup(voter)
                ),
            )
            for voter in client.voters
        )
    return v2.DescribeQuorumResponse(
        error_code=ErrorCode.none,
        error_message=None,
        topics=(v2.TopicData(topic_name=TopicName(METADATA_TOPIC), partitions=(partition,)),),
        nodes=nodes,
    )
