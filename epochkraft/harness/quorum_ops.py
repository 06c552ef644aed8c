"""An operator's steps on a dynamic quorum (KIP-853), as ``kafka-metadata-quorum`` takes them: a controller
restarted on a new disk has a new directory id and fetches as an observer; its old key is removed from the
voter set (RemoveRaftVoter) and its new one added (AddRaftVoter, which the leader grants once the observer
has caught up). Each request goes to the leader DescribeQuorum names and is retried until answered, as an
operator would retry through an election.

Used by ``epochkraft cluster restart controller-N --wipe`` and the chaos runner's controller-disk-loss.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.add_raft_voter.v1 import request as add_req
from kio.schema.add_raft_voter.v1.response import AddRaftVoterResponse
from kio.schema.describe_quorum.v2 import request as describe_req
from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse
from kio.schema.remove_raft_voter.v0 import request as remove_req
from kio.schema.remove_raft_voter.v0.response import RemoveRaftVoterResponse
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta, u16

from epochkraft.controller.storage import kafka_uuid, read_meta_properties
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode, ProtocolError

if TYPE_CHECKING:
    from epochkraft.harness.cluster import LocalCluster

METADATA_TOPIC = TopicName("__cluster_metadata")
RETRY_S = 0.2


@dataclass(frozen=True, slots=True)
class QuorumView:
    leader: int
    voters: dict[int, uuid.UUID | None]
    observers: dict[tuple[int, uuid.UUID | None], int]  # key -> log end offset
    listener: str  # the name of the voters' controller listener


async def describe(cluster: LocalCluster, timeout_s: float = 2.0) -> QuorumView | None:
    """DescribeQuorum v2 from the leader (asking each voter until one is it); None when none answers."""
    request = describe_req.DescribeQuorumRequest(
        topics=(
            describe_req.TopicData(
                topic_name=METADATA_TOPIC, partitions=(describe_req.PartitionData(partition_index=i32(0)),)
            ),
        )
    )
    for voter in sorted(cluster.voters):
        if not cluster.voters[voter].alive:
            continue
        host, port = cluster.voter_address(voter).rsplit(":", 1)
        try:
            async with KafkaClient(host, int(port), request_timeout_ms=int(timeout_s * 1000)) as client:
                answer = await client.send(request, DescribeQuorumResponse)
        except (NetworkError, ProtocolError, OSError, TimeoutError):
            continue
        partition = answer.topics[0].partitions[0] if answer.topics else None
        if partition is None or partition.error_code != ErrorCode.none:
            continue
        listener = next((ep.name for node in answer.nodes for ep in node.listeners), "CONTROLLER")
        return QuorumView(
            partition.leader_id,
            {r.replica_id: r.replica_directory_id for r in partition.current_voters},
            {(r.replica_id, r.replica_directory_id): r.log_end_offset for r in partition.observers},
            listener,
        )
    return None


async def _to_leader(
    cluster: LocalCluster,
    leader: int,
    request: add_req.AddRaftVoterRequest | remove_req.RemoveRaftVoterRequest,
) -> ErrorCode:
    host, port = cluster.voter_address(leader).rsplit(":", 1)
    try:
        async with KafkaClient(host, int(port), request_timeout_ms=10_000) as client:
            answer: AddRaftVoterResponse | RemoveRaftVoterResponse
            if isinstance(request, add_req.AddRaftVoterRequest):
                answer = await client.send(request, AddRaftVoterResponse)
            else:
                answer = await client.send(request, RemoveRaftVoterResponse)
    except (NetworkError, ProtocolError, OSError, TimeoutError):
        return ErrorCode.network_exception
    return ErrorCode(answer.error_code)


async def replace_voter_async(cluster: LocalCluster, voter: int, timeout_s: float) -> str:
    """Removes ``voter``'s old key from the voter set and adds the key of its new disk; returns what was
    done. RuntimeError when the quorum has not taken the new key within ``timeout_s``."""
    data_dir = cluster.voters[voter].data_dir
    assert data_dir is not None
    meta = read_meta_properties(data_dir)
    if meta is None:
        raise RuntimeError(f"controller {voter}'s data dir is not formatted")
    new = meta.directory_id
    host, port = cluster.voter_address(voter).rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    steps: list[str] = []
    while time.monotonic() < deadline:
        view = await describe(cluster)
        if view is None:
            await asyncio.sleep(RETRY_S)
            continue
        current = view.voters.get(voter, "absent")
        if current == new:
            return f"controller {voter} is a voter again with directory id {kafka_uuid(new)} ({', '.join(steps)})"
        if isinstance(current, uuid.UUID):
            error = await _to_leader(
                cluster,
                view.leader,
                remove_req.RemoveRaftVoterRequest(
                    cluster_id=cluster.cluster_id, voter_id=i32(voter), voter_directory_id=current
                ),
            )
            if error == ErrorCode.none:
                steps.append(f"removed {voter}:{kafka_uuid(current)}")
        else:
            error = await _to_leader(
                cluster,
                view.leader,
                add_req.AddRaftVoterRequest(
                    cluster_id=cluster.cluster_id,
                    timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
                    voter_id=i32(voter),
                    voter_directory_id=new,
                    listeners=(add_req.Listener(name=view.listener, host=host, port=u16(int(port))),),
                ),
            )
            if error == ErrorCode.none:
                steps.append(f"added {voter}:{kafka_uuid(new)}")
        if error != ErrorCode.none:
            await asyncio.sleep(RETRY_S)  # an election, a change in flight, the observer still catching up
    raise RuntimeError(
        f"controller {voter}'s new disk is not a voter after {timeout_s:.0f} s ({', '.join(steps)})"
    )


def replace_voter(cluster: LocalCluster, voter: int, timeout_s: float = 60.0) -> str:
    """``replace_voter_async`` from synchronous code (the cluster CLI, a worker thread of the runner)."""
    return asyncio.run(replace_voter_async(cluster, voter, timeout_s))
