"""The Raft core's messages on the wire: Vote (52) v2 with KIP-996's pre_vote and KIP-853's directory ids,
BeginQuorumEpoch (53) v1 (the receiver's directory id, the leader's endpoints) and EndQuorumEpoch (54) v1
(the preferred successors with their directory ids, the leader's endpoints),
and Fetch (1) v17 (the fetching replica's directory id; the leader's endpoint in NodeEndpoints) between
controllers (records as the RecordBatches of
raft/batches.py), as kio's generated request and response bodies for the single partition
``__cluster_metadata``-0. A handler decodes with ``decode_*``, calls ``RaftClient.handle`` and encodes
its answer with ``encode_*``; a request naming another topic or partition gets INVALID_REQUEST at the top
level, as KafkaRaftClient's ``hasValidTopicPartition`` check answers.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.begin_quorum_epoch.v0 import request as bqe_req_v0
from kio.schema.begin_quorum_epoch.v1 import request as bqe_req
from kio.schema.begin_quorum_epoch.v1 import response as bqe_resp
from kio.schema.end_quorum_epoch.v0 import request as eqe_req_v0
from kio.schema.end_quorum_epoch.v1 import request as eqe_req
from kio.schema.end_quorum_epoch.v1 import response as eqe_resp
from kio.schema.fetch.v15 import request as fetch_req_v15
from kio.schema.fetch.v16 import request as fetch_req_v16
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.types import BrokerId, TopicName
from kio.schema.update_raft_voter.v0 import request as update_voter_req
from kio.schema.update_raft_voter.v0 import response as update_voter_resp
from kio.schema.vote.v2 import request as vote_req
from kio.schema.vote.v2 import response as vote_resp
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64, u16

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.batches import batch_entry, entry_batch, split_batches
from epochkraft.raft.log import LogEntry
from epochkraft.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    RemoveRaftVoterRequest,
    SnapshotRef,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
)
from epochkraft.raft.voter_set import Endpoint, Endpoints

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

METADATA_TOPIC = TopicName("__cluster_metadata")
NO_LEADER = -1


class InvalidRaftRequest(Exception):
    """A request for another topic or partition than ``__cluster_metadata``-0, or with none."""


VOTER_FETCH_PARTITIONS = (
    fetch_req_v15.FetchPartition,
    fetch_req_v16.FetchPartition,
    fetch_req.FetchPartition,
)


def _single_partition(topics: tuple) -> object:
    if len(topics) != 1 or topics[0].topic_name != METADATA_TOPIC or len(topics[0].partitions) != 1:
        raise InvalidRaftRequest("expected exactly __cluster_metadata-0")
    partition = topics[0].partitions[0]
    if partition.partition_index != 0:
        raise InvalidRaftRequest(f"partition {partition.partition_index} of __cluster_metadata")
    return partition


# ---- Vote (52) --------------------------------------------------------------------------------------------
def encode_vote_request(request: VoteRequest, cluster_id: str, voter_id: int) -> vote_req.VoteRequest:
    return vote_req.VoteRequest(
        cluster_id=cluster_id,
        voter_id=BrokerId(voter_id),
        topics=(
            vote_req.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    vote_req.PartitionData(
                        partition_index=i32(0),
                        replica_epoch=i32(request.candidate_epoch),
                        replica_id=BrokerId(request.candidate_id),
                        replica_directory_id=request.candidate_directory_id,
                        voter_directory_id=request.voter_directory_id,
                        last_offset_epoch=i32(request.last_offset_epoch),
                        last_offset=i64(request.last_offset),
                        pre_vote=request.pre_vote,
                    ),
                ),
            ),
        ),
    )


def decode_vote_request(request: vote_req.VoteRequest) -> VoteRequest:
    p = _single_partition(request.topics)
    assert isinstance(p, vote_req.PartitionData)
    return VoteRequest(
        p.replica_epoch,
        p.replica_id,
        p.last_offset_epoch,
        p.last_offset,
        p.pre_vote,
        p.replica_directory_id,
        p.voter_directory_id,
    )


def encode_vote_response(response: VoteResponse) -> vote_resp.VoteResponse:
    return vote_resp.VoteResponse(
        error_code=ErrorCode.none,
        topics=(
            vote_resp.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    vote_resp.PartitionData(
                        partition_index=i32(0),
                        error_code=response.error_code,
                        leader_id=BrokerId(response.leader_id),
                        leader_epoch=i32(response.leader_epoch),
                        vote_granted=response.vote_granted,
                    ),
                ),
            ),
        ),
    )


def decode_vote_response(response: vote_resp.VoteResponse) -> VoteResponse:
    if response.error_code != ErrorCode.none:
        return VoteResponse(response.error_code, NO_LEADER, -1, False)
    p = _single_partition(response.topics)
    assert isinstance(p, vote_resp.PartitionData)
    return VoteResponse(p.error_code, p.leader_id, p.leader_epoch, p.vote_granted)


def invalid_vote_response() -> vote_resp.VoteResponse:
    return vote_resp.VoteResponse(error_code=ErrorCode.invalid_request, topics=())


# ---- BeginQuorumEpoch (53) -------------------------------------------------------------------------------
def encode_begin_quorum_epoch_request(
    request: BeginQuorumEpochRequest, cluster_id: str, voter_id: int = -1, leader_endpoints: Endpoints = ()
) -> bqe_req.BeginQuorumEpochRequest:
    """BeginQuorumEpoch v1 to voter ``voter_id`` (its directory id as the leader's voter set has it)."""
    return bqe_req.BeginQuorumEpochRequest(
        cluster_id=cluster_id,
        voter_id=BrokerId(voter_id),
        topics=(
            bqe_req.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    bqe_req.PartitionData(
                        partition_index=i32(0),
                        voter_directory_id=request.voter_directory_id,
                        leader_id=BrokerId(request.leader_id),
                        leader_epoch=i32(request.leader_epoch),
                    ),
                ),
            ),
        ),
        leader_endpoints=tuple(
            bqe_req.LeaderEndpoint(name=e.name, host=e.host, port=u16(e.port)) for e in leader_endpoints
        ),
    )


def decode_begin_quorum_epoch_request(
    request: bqe_req_v0.BeginQuorumEpochRequest | bqe_req.BeginQuorumEpochRequest,
) -> BeginQuorumEpochRequest:
    """v0 (a static quorum's, KIP-595) has no voter directory id (KIP-853 added it in v1)."""
    p = _single_partition(request.topics)
    if isinstance(p, bqe_req.PartitionData):
        return BeginQuorumEpochRequest(p.leader_id, p.leader_epoch, p.voter_directory_id)
    assert isinstance(p, bqe_req_v0.PartitionData)
    return BeginQuorumEpochRequest(p.leader_id, p.leader_epoch)


def begin_quorum_epoch_leader_endpoints(request: bqe_req.BeginQuorumEpochRequest) -> Endpoints:
    return tuple(Endpoint(e.name, e.host, e.port) for e in request.leader_endpoints)


def encode_begin_quorum_epoch_response(
    response: BeginQuorumEpochResponse,
) -> bqe_resp.BeginQuorumEpochResponse:
    return bqe_resp.BeginQuorumEpochResponse(
        error_code=ErrorCode.none,
        topics=(
            bqe_resp.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    bqe_resp.PartitionData(
                        partition_index=i32(0),
                        error_code=response.error_code,
                        leader_id=BrokerId(response.leader_id),
                        leader_epoch=i32(response.leader_epoch),
                    ),
                ),
            ),
        ),
    )


def decode_begin_quorum_epoch_response(
    response: bqe_resp.BeginQuorumEpochResponse,
) -> BeginQuorumEpochResponse:
    if response.error_code != ErrorCode.none:
        return BeginQuorumEpochResponse(response.error_code, NO_LEADER, -1)
    p = _single_partition(response.topics)
    assert isinstance(p, bqe_resp.PartitionData)
    return BeginQuorumEpochResponse(p.error_code, p.leader_id, p.leader_epoch)


# ---- EndQuorumEpoch (54) ---------------------------------------------------------------------------------
def encode_end_quorum_epoch_request(
    request: EndQuorumEpochRequest,
    cluster_id: str,
    directory_of: Callable[[int], uuid.UUID | None] = lambda _voter: None,
    leader_endpoints: Endpoints = (),
) -> eqe_req.EndQuorumEpochRequest:
    """EndQuorumEpoch v1: each preferred successor with its directory id as the leader's voter set has it."""
    return eqe_req.EndQuorumEpochRequest(
        cluster_id=cluster_id,
        topics=(
            eqe_req.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    eqe_req.PartitionData(
                        partition_index=i32(0),
                        leader_id=BrokerId(request.leader_id),
                        leader_epoch=i32(request.leader_epoch),
                        preferred_candidates=tuple(
                            eqe_req.ReplicaInfo(
                                candidate_id=BrokerId(s), candidate_directory_id=directory_of(s)
                            )
                            for s in request.preferred_successors
                        ),
                    ),
                ),
            ),
        ),
        leader_endpoints=tuple(
            eqe_req.LeaderEndpoint(name=e.name, host=e.host, port=u16(e.port)) for e in leader_endpoints
        ),
    )


def decode_end_quorum_epoch_request(request: rt.EndQuorumEpoch) -> EndQuorumEpochRequest:
    """v0 names the preferred successors by id, v1 by id and directory id (the core goes by id)."""
    p = _single_partition(request.topics)
    if isinstance(p, eqe_req.PartitionData):
        successors = tuple(int(c.candidate_id) for c in p.preferred_candidates)
    else:
        assert isinstance(p, eqe_req_v0.PartitionData)
        successors = tuple(int(s) for s in p.preferred_successors)
    return EndQuorumEpochRequest(p.leader_id, p.leader_epoch, successors)


def encode_end_quorum_epoch_response(response: EndQuorumEpochResponse) -> eqe_resp.EndQuorumEpochResponse:
    return eqe_resp.EndQuorumEpochResponse(
        error_code=ErrorCode.none,
        topics=(
            eqe_resp.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    eqe_resp.PartitionData(
                        partition_index=i32(0),
                        error_code=response.error_code,
                        leader_id=BrokerId(response.leader_id),
                        leader_epoch=i32(response.leader_epoch),
                    ),
                ),
            ),
        ),
    )


def decode_end_quorum_epoch_response(response: eqe_resp.EndQuorumEpochResponse) -> EndQuorumEpochResponse:
    if response.error_code != ErrorCode.none:
        return EndQuorumEpochResponse(response.error_code, NO_LEADER, -1)
    p = _single_partition(response.topics)
    assert isinstance(p, eqe_resp.PartitionData)
    return EndQuorumEpochResponse(p.error_code, p.leader_id, p.leader_epoch)


# ---- Fetch (1) of __cluster_metadata between voters --------------------------------------------------------
METADATA_TOPIC_ID = uuid.UUID(int=1)
FETCH_MAX_BYTES = 8 * 1024 * 1024


def encode_fetch_request(request: FetchRequest, cluster_id: str) -> fetch_req.FetchRequest:
    """A controller's Fetch (v17: topic by id, the fetching replica in ReplicaState, its directory id in
    the partition), as KafkaRaftClient's buildFetchRequest."""
    return fetch_req.FetchRequest(
        cluster_id=cluster_id,
        replica_state=fetch_req.ReplicaState(replica_id=BrokerId(request.replica_id), replica_epoch=i64(-1)),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=request.max_wait_ms)),
        min_bytes=i32(0),
        max_bytes=i32(FETCH_MAX_BYTES),
        topics=(
            fetch_req.FetchTopic(
                topic_id=METADATA_TOPIC_ID,
                partitions=(
                    fetch_req.FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(request.current_leader_epoch),
                        fetch_offset=i64(request.fetch_offset),
                        last_fetched_epoch=i32(request.last_fetched_epoch),
                        partition_max_bytes=i32(FETCH_MAX_BYTES),
                        replica_directory_id=request.replica_directory_id,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def decode_fetch_request(replica_id: int, max_wait_ms: int, partition: object) -> FetchRequest:
    """A voter's or observer's Fetch partition, v15-v17 (a directory id only from v17, KIP-853)."""
    if not isinstance(partition, VOTER_FETCH_PARTITIONS):
        raise TypeError(f"not a Fetch v15-v17 partition: {type(partition).__name__}")
    return FetchRequest(
        replica_id,
        partition.current_leader_epoch,
        partition.fetch_offset,
        partition.last_fetched_epoch,
        max_wait_ms,
        getattr(partition, "replica_directory_id", None),  # v17+
    )


def fetch_records(entries: tuple[LogEntry, ...], fetch_offset: int) -> bytes:
    """The entries of a Fetch answer as the RecordBatches they are on disk (they start at the fetch
    offset: the leader reads whole entries from there)."""
    out = []
    base = fetch_offset
    for entry in entries:
        out.append(entry_batch(entry, base))
        base += entry.records
    return b"".join(out)


def encode_fetch_partition(response: FetchResponse, fetch_offset: int) -> fetch_resp.PartitionData:
    diverging = response.diverging_epoch
    snapshot = response.snapshot_id
    return fetch_resp.PartitionData(
        partition_index=i32(0),
        error_code=response.error_code,
        high_watermark=i64(response.high_watermark),
        last_stable_offset=i64(response.high_watermark),
        log_start_offset=i64(response.log_start_offset),
        diverging_epoch=fetch_resp.EpochEndOffset(
            epoch=i32(diverging.epoch if diverging else -1),
            end_offset=i64(diverging.end_offset if diverging else -1),
        ),
        current_leader=fetch_resp.LeaderIdAndEpoch(
            leader_id=BrokerId(response.leader_id), leader_epoch=i32(response.leader_epoch)
        ),
        snapshot_id=fetch_resp.SnapshotId(
            end_offset=i64(snapshot.end_offset if snapshot else -1),
            epoch=i32(snapshot.epoch if snapshot else -1),
        ),
        aborted_transactions=None,
        records=Records(fetch_records(response.records, fetch_offset)),
    )


def node_endpoints(
    leader_id: int, endpoints: Endpoints, listener: str
) -> tuple[fetch_resp.NodeEndpoint, ...]:
    """Fetch v17's NodeEndpoints: where the leader named in the answer is reached on ``listener``."""
    endpoint = pick_endpoint(endpoints, listener)
    if leader_id < 0 or endpoint is None:
        return ()
    return (
        fetch_resp.NodeEndpoint(node_id=BrokerId(leader_id), host=endpoint.host, port=i32(endpoint.port)),
    )


def pick_endpoint(endpoints: Endpoints, listener: str) -> Endpoint | None:
    """The endpoint of ``listener`` (KafkaRaftClient reaches voters on its first controller listener), else
    the first one."""
    return next((e for e in endpoints if e.name == listener), endpoints[0] if endpoints else None)


def decode_fetch_response(response: fetch_resp.FetchResponse) -> FetchResponse:
    """A voter's Fetch answer for the Raft core (an error for the whole request names no leader)."""
    if response.error_code != ErrorCode.none or len(response.responses) != 1:
        return FetchResponse(response.error_code or ErrorCode.unknown_server_error, NO_LEADER, -1, -1)
    partitions = response.responses[0].partitions
    if len(partitions) != 1:
        return FetchResponse(ErrorCode.unknown_server_error, NO_LEADER, -1, -1)
    p = partitions[0]
    diverging = None
    if p.diverging_epoch.epoch >= 0 and p.diverging_epoch.end_offset >= 0:
        diverging = DivergingEpoch(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
    records = tuple(batch_entry(batch) for batch in split_batches(p.records or b""))
    snapshot = None
    if p.snapshot_id.end_offset >= 0 and p.snapshot_id.epoch >= 0:
        snapshot = SnapshotRef(p.snapshot_id.end_offset, p.snapshot_id.epoch)
    return FetchResponse(
        p.error_code,
        p.current_leader.leader_id,
        p.current_leader.leader_epoch,
        p.high_watermark,
        records,
        diverging,
        p.log_start_offset,
        snapshot,
    )


# ---- AddRaftVoter (80), RemoveRaftVoter (81), UpdateRaftVoter (82) --------------------------------------------
def decode_add_raft_voter_request(request: rt.AddRaftVoter) -> AddRaftVoterRequest:
    if request.voter_directory_id is None:
        raise InvalidRaftRequest("AddRaftVoter without a directory id")
    return AddRaftVoterRequest(
        request.voter_id,
        request.voter_directory_id,
        int(request.timeout.total_seconds() * 1000),
        tuple(Endpoint(e.name, e.host, e.port) for e in request.listeners),
    )


def decode_remove_raft_voter_request(request: rt.RemoveRaftVoter) -> RemoveRaftVoterRequest:
    if request.voter_directory_id is None:
        raise InvalidRaftRequest("RemoveRaftVoter without a directory id")
    return RemoveRaftVoterRequest(request.voter_id, request.voter_directory_id)


def decode_update_raft_voter_request(request: rt.UpdateRaftVoter) -> UpdateRaftVoterRequest:
    if request.voter_directory_id is None:
        raise InvalidRaftRequest("UpdateRaftVoter without a directory id")
    feature = request.k_raft_version_feature
    return UpdateRaftVoterRequest(
        request.current_leader_epoch,
        request.voter_id,
        request.voter_directory_id,
        tuple(Endpoint(e.name, e.host, e.port) for e in request.listeners),
        (feature.min_supported_version, feature.max_supported_version),
    )


def encode_update_raft_voter_request(
    request: UpdateRaftVoterRequest, cluster_id: str
) -> update_voter_req.UpdateRaftVoterRequest:
    low, high = request.kraft_version_range
    return update_voter_req.UpdateRaftVoterRequest(
        cluster_id=cluster_id,
        current_leader_epoch=i32(request.current_leader_epoch),
        voter_id=i32(request.voter_id),
        voter_directory_id=request.voter_directory_id,
        listeners=tuple(
            update_voter_req.Listener(name=e.name, host=e.host, port=u16(e.port)) for e in request.listeners
        ),
        k_raft_version_feature=update_voter_req.KRaftVersionFeature(
            min_supported_version=i16(low), max_supported_version=i16(high)
        ),
    )


def encode_update_raft_voter_response(
    response: UpdateRaftVoterResponse, leader_endpoint: Endpoint | None
) -> update_voter_resp.UpdateRaftVoterResponse:
    return update_voter_resp.UpdateRaftVoterResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=response.error_code,
        current_leader=update_voter_resp.CurrentLeader(
            leader_id=BrokerId(response.leader_id),
            leader_epoch=i32(response.leader_epoch),
            host=leader_endpoint.host if leader_endpoint is not None else "",
            port=i32(leader_endpoint.port if leader_endpoint is not None else -1),
        ),
    )


def decode_update_raft_voter_response(
    response: update_voter_resp.UpdateRaftVoterResponse,
) -> UpdateRaftVoterResponse:
    leader = response.current_leader
    return UpdateRaftVoterResponse(response.error_code, leader.leader_id, leader.leader_epoch)
