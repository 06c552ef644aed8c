"""The Raft RPCs as plain values, field for field the single-partition bodies of Kafka's Vote (52),
BeginQuorumEpoch (53), EndQuorumEpoch (54) and Fetch (1) of ``__cluster_metadata``.

The core exchanges these; a driver maps them to the wire (kio) or, in the simulator, hands them over as
they are. ``correlation_id`` pairs a response with its request, as the request header does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.log import LogEntry
from epochkraft.raft.voter_set import Endpoints


@dataclass(frozen=True, slots=True)
class VoteRequest:
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False
    candidate_directory_id: uuid.UUID | None = None  # Vote v1+
    voter_directory_id: uuid.UUID | None = None  # the receiver's, as the candidate's voter set has it


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    voter_directory_id: uuid.UUID | None = None  # BeginQuorumEpoch v1+: the receiver's, as the leader has it


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int = 0
    replica_directory_id: uuid.UUID | None = None  # Fetch v17+


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    records: tuple[LogEntry, ...] = ()
    diverging_epoch: DivergingEpoch | None = None
    log_start_offset: int = 0
    snapshot_id: SnapshotRef | None = None  # fetch this snapshot first: the offset is below the log start


@dataclass(frozen=True, slots=True)
class SnapshotRef:
    """A snapshot's id, as Kafka's OffsetAndEpoch: the offset after its last entry and that entry's epoch."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class AddRaftVoterRequest:
    """AddRaftVoter (80), from an operator to the leader (endpoints are the driver's business)."""

    voter_id: int
    voter_directory_id: uuid.UUID
    timeout_ms: int = 30_000
    listeners: Endpoints = ()  # where the new voter is reached (AddRaftVoter's Listeners)


@dataclass(frozen=True, slots=True)
class AddRaftVoterResponse:
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class RemoveRaftVoterRequest:
    """RemoveRaftVoter (81), from an operator to the leader."""

    voter_id: int
    voter_directory_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class RemoveRaftVoterResponse:
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateRaftVoterRequest:
    """UpdateRaftVoter (82), from a voter to the leader: the listeners it is reached on now."""

    current_leader_epoch: int
    voter_id: int
    voter_directory_id: uuid.UUID
    listeners: Endpoints
    kraft_version_range: tuple[int, int] = (0, 1)


@dataclass(frozen=True, slots=True)
class UpdateRaftVoterResponse:
    error_code: ErrorCode
    leader_id: int = -1
    leader_epoch: int = -1


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | AddRaftVoterRequest
    | RemoveRaftVoterRequest
    | UpdateRaftVoterRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | AddRaftVoterResponse
    | RemoveRaftVoterResponse
    | UpdateRaftVoterResponse
)
Message = Request | Response


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message between two voters. A response carries its request's ``correlation_id``."""

    source: int
    destination: int
    correlation_id: int
    message: Message
    is_response: bool = field(default=False)
