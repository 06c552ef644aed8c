"""The Raft messages as Kafka's bodies: every one encodes, goes through kio's writer and reader whole,
one byte at a time and with trailing bytes, and decodes to the same core message; a request for another
topic or partition is refused."""

from __future__ import annotations

import io
import uuid

import pytest
from kio.schema.begin_quorum_epoch.v0 import request as bqe_v0
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft import wire
from epochkraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    VoteRequest,
    VoteResponse,
)
from epochkraft.raft.voter_set import Endpoint

CASES = [
    (
        VoteRequest(7, 2, 6, 120, pre_vote=True),
        lambda m: wire.encode_vote_request(m, "c1", 3),
        wire.decode_vote_request,
    ),
    (VoteRequest(7, 2, 6, 120), lambda m: wire.encode_vote_request(m, "c1", 3), wire.decode_vote_request),
    (VoteResponse(ErrorCode.none, 4, 7, True), wire.encode_vote_response, wire.decode_vote_response),
    (
        BeginQuorumEpochRequest(2, 9),
        lambda m: wire.encode_begin_quorum_epoch_request(m, "c1", 3, ()),
        wire.decode_begin_quorum_epoch_request,
    ),
    (
        BeginQuorumEpochRequest(2, 9, uuid.UUID(int=3)),
        lambda m: wire.encode_begin_quorum_epoch_request(m, "c1", 3, (Endpoint("CONTROLLER", "h", 9093),)),
        wire.decode_begin_quorum_epoch_request,
    ),
    (
        VoteRequest(7, 2, 6, 120, False, uuid.UUID(int=2), uuid.UUID(int=3)),
        lambda m: wire.encode_vote_request(m, "c1", 3),
        wire.decode_vote_request,
    ),
    (
        BeginQuorumEpochResponse(ErrorCode.fenced_leader_epoch, 3, 10),
        wire.encode_begin_quorum_epoch_response,
        wire.decode_begin_quorum_epoch_response,
    ),
    (
        EndQuorumEpochRequest(2, 9, (3, 1)),
        lambda m: wire.encode_end_quorum_epoch_request(m, "c1"),
        wire.decode_end_quorum_epoch_request,
    ),
    (
        EndQuorumEpochRequest(2, 9, (3, 1)),
        lambda m: wire.encode_end_quorum_epoch_request(
            m, "c1", lambda voter: uuid.UUID(int=voter), (Endpoint("CONTROLLER", "h", 9093),)
        ),
        wire.decode_end_quorum_epoch_request,
    ),
    (
        EndQuorumEpochResponse(ErrorCode.none, -1, 9),
        wire.encode_end_quorum_epoch_response,
        wire.decode_end_quorum_epoch_response,
    ),
]


def roundtrip(body, extra: bytes = b""):
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    data = buffer.getvalue()
    decoded, size = entity_reader(type(body))(memoryview(data + extra), 0)
    assert size == len(data)
    return decoded, data


@pytest.mark.parametrize(("message", "encode", "decode"), CASES)
def test_each_raft_message_survives_the_wire(message, encode, decode):
    body = encode(message)
    decoded, data = roundtrip(body)
    assert decode(decoded) == message
    assert roundtrip(body, b"\x00\x01trailing")[0] == decoded
    for cut in range(len(data)):  # a prefix never decodes to a whole body
        with pytest.raises(Exception):  # noqa: B017 (kio raises several kinds on short input)
            entity_reader(type(body))(memoryview(data[:cut]), 0)


def test_a_request_for_another_partition_is_invalid():
    body = wire.encode_vote_request(VoteRequest(1, 2, 0, 0), "c1", 1)
    other = type(body)(
        cluster_id="c1",
        voter_id=body.voter_id,
        topics=(type(body.topics[0])(topic_name="other", partitions=body.topics[0].partitions),),
    )
    with pytest.raises(wire.InvalidRaftRequest):
        wire.decode_vote_request(other)
    assert wire.invalid_vote_response().error_code == ErrorCode.invalid_request
    assert wire.decode_vote_response(wire.invalid_vote_response()) == VoteResponse(
        ErrorCode.invalid_request, -1, -1, False
    )


def test_fetch_v17_carries_the_replica_directory_id_and_the_leaders_endpoint():
    """Fetch v17 (KIP-853): the fetching replica's directory id in the partition (the leader tells a voter's
    disk from a new one by it); NodeEndpoints says where the leader named in the answer is reached."""
    request = FetchRequest(4, 2, 10, 1, 500, uuid.UUID(int=4))
    body = wire.encode_fetch_request(request, "c1")
    decoded, _data = roundtrip(body)
    partition = decoded.topics[0].partitions[0]
    assert wire.decode_fetch_request(4, 500, partition) == request
    endpoints = (Endpoint("OTHER", "h", 1), Endpoint("CONTROLLER", "h", 9093))
    [node] = wire.node_endpoints(1, endpoints, "CONTROLLER")
    assert (node.node_id, node.host, node.port) == (1, "h", 9093)
    assert wire.node_endpoints(-1, endpoints, "CONTROLLER") == ()


def test_end_quorum_epoch_v0_still_decodes():
    """EndQuorumEpoch v0 names the preferred successors by id only (v1 adds their directory ids)."""
    from kio.schema.end_quorum_epoch.v0 import request as v0

    v1_body = wire.encode_end_quorum_epoch_request(EndQuorumEpochRequest(2, 9, (3, 1)), "c1")
    body = v0.EndQuorumEpochRequest(
        cluster_id="c1",
        topics=tuple(
            v0.TopicData(
                topic_name=t.topic_name,
                partitions=tuple(
                    v0.PartitionData(
                        partition_index=p.partition_index,
                        leader_id=p.leader_id,
                        leader_epoch=p.leader_epoch,
                        preferred_successors=tuple(c.candidate_id for c in p.preferred_candidates),
                    )
                    for p in t.partitions
                ),
            )
            for t in v1_body.topics
        ),
    )
    assert wire.decode_end_quorum_epoch_request(roundtrip(body)[0]) == EndQuorumEpochRequest(2, 9, (3, 1))


def test_a_begin_quorum_epoch_v0_decodes_without_a_directory_id() -> None:
    """v0, a static quorum's (Kafka 3.x voters send it), decodes to the core message as v1 does."""
    request = bqe_v0.BeginQuorumEpochRequest(
        cluster_id="c1",
        topics=(
            bqe_v0.TopicData(
                topic_name=wire.METADATA_TOPIC,
                partitions=(
                    bqe_v0.PartitionData(partition_index=i32(0), leader_id=BrokerId(2), leader_epoch=i32(9)),
                ),
            ),
        ),
    )
    assert wire.decode_begin_quorum_epoch_request(request) == BeginQuorumEpochRequest(2, 9)


def test_a_fetch_v15_from_a_voter_decodes_without_a_directory_id() -> None:
    """Fetch v15 and v16 (KIP-595 voters, before KIP-853's directory id in v17) are served to a quorum's
    voters and observers as v17 is: the partition decodes with no directory id."""
    from kio.schema.fetch.v15 import request as fetch_v15
    from kio.static.primitive import i64

    partition = fetch_v15.FetchPartition(
        partition=i32(0),
        current_leader_epoch=i32(4),
        fetch_offset=i64(17),
        last_fetched_epoch=i32(3),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(1 << 20),
    )
    message = wire.decode_fetch_request(2, 500, partition)
    assert (message.replica_id, message.fetch_offset, message.last_fetched_epoch) == (2, 17, 3)
    assert message.replica_directory_id is None
