"""The election states of one voter (Kafka's QuorumState with UnattachedState, ProspectiveState,
CandidateState, LeaderState, FollowerState and ResignedState) and the persisted ``quorum-state``
(Kafka's QuorumStateData, written by FileQuorumStateStore as JSON).

The states hold timers as absolute deadlines in ms; nothing here reads a clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epochkraft.raft.voter_set import ReplicaKey

if TYPE_CHECKING:
    from epochkraft.raft.messages import Envelope

NO_LEADER = -1
INT32_MAX = 2**31 - 1


def is_usable_epoch(epoch: int) -> bool:
    """An epoch a voter can hold: 0 up to 2^31-2, so that raising it for an election still fits the
    wire's int32. Epochs from peers outside this range are refused before use, and a voter stands only
    when its next epoch is usable too, so it never holds (or writes to quorum-state) one it cannot use."""
    return 0 <= epoch < INT32_MAX


def is_leader_id(node: int) -> bool:
    """A node id, or NO_LEADER."""
    return node == NO_LEADER or 0 <= node <= INT32_MAX


def unattached_or_prospective_can_grant_vote(
    state: UnattachedState | ProspectiveState, candidate_id: int, log_up_to_date: bool, pre_vote: bool
) -> bool:
    """QuorumState.unattachedOrProspectiveCanGrantVote: a pre-vote for any up-to-date log; a vote once per
    epoch, and none while a leader of the epoch is known."""
    if pre_vote:
        return log_up_to_date
    if state.voted_id != NO_LEADER:
        return state.voted_id == candidate_id
    if state.leader_id != NO_LEADER:
        return False
    return log_up_to_date


@dataclass(frozen=True, slots=True)
class QuorumStateData:
    """What survives a restart: the epoch, its leader (-1: unknown) and this voter's vote (-1: none)."""

    leader_epoch: int = 0
    leader_id: int = NO_LEADER
    voted_id: int = NO_LEADER
    current_voters: tuple[int, ...] = ()
    cluster_id: str = ""

    def to_json(self) -> str:
        """The file body as FileQuorumStateStore writes it (QuorumStateData v0 plus data_version)."""
        return json.dumps(
            {
                "clusterId": self.cluster_id,
                "leaderId": self.leader_id,
                "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id,
                "appliedOffset": 0,
                "currentVoters": [{"voterId": voter} for voter in self.current_voters],
                "data_version": 0,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> QuorumStateData:
        raw = json.loads(text)
        return cls(
            leader_epoch=int(raw["leaderEpoch"]),
            leader_id=int(raw["leaderId"]),
            voted_id=int(raw["votedId"]),
            current_voters=tuple(int(v["voterId"]) for v in raw.get("currentVoters") or ()),
            cluster_id=str(raw.get("clusterId") or ""),
        )


@dataclass(slots=True)
class UnattachedState:
    """No leader known to follow; may have voted in this epoch (Kafka's Unattached and Voted states)."""

    epoch: int
    election_deadline_ms: int
    voted_id: int = NO_LEADER
    leader_id: int = NO_LEADER

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        return unattached_or_prospective_can_grant_vote(self, candidate_id, log_up_to_date, pre_vote)


@dataclass(slots=True)
class ProspectiveState:
    """Asking for pre-votes (KIP-996) before raising the epoch; remembers a leader it may go back to."""

    epoch: int
    election_deadline_ms: int
    voters: tuple[int, ...]
    local_id: int
    voted_id: int = NO_LEADER
    leader_id: int = NO_LEADER
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    in_flight: dict[int, int] = field(default_factory=dict)  # voter -> correlation id
    retry_at_ms: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.granted.add(self.local_id)

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        return unattached_or_prospective_can_grant_vote(self, candidate_id, log_up_to_date, pre_vote)


@dataclass(slots=True)
class CandidateState:
    """Voted for itself in ``epoch``; collects votes, then backs off if the election is lost."""

    epoch: int
    election_deadline_ms: int
    voters: tuple[int, ...]
    local_id: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    in_flight: dict[int, int] = field(default_factory=dict)
    retry_at_ms: dict[int, int] = field(default_factory=dict)
    backoff_until_ms: int | None = None

    def __post_init__(self) -> None:
        self.granted.add(self.local_id)

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        return False  # CandidateState.canGrantVote: it voted for itself


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one voter or observer (LeaderState.ReplicaState)."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_end_offset: int = -1

    def update_fetch_state(self, now_ms: int, fetch_offset: int, leader_end_offset: int) -> None:
        """ReplicaState.updateFetchState: caught up when it fetched from the leader's end, or from where
        the leader's log ended at its previous fetch (then as of that fetch)."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif self.last_fetch_leader_end_offset > 0 and fetch_offset >= self.last_fetch_leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.end_offset = fetch_offset
        self.last_fetch_leader_end_offset = leader_end_offset
        self.last_fetch_ms = now_ms


@dataclass(slots=True)
class PendingVoterChange:
    """An AddRaftVoter or RemoveRaftVoter the leader is serving (LeaderState's AddVoterHandlerState and
    RemoveVoterHandlerState): answered when its VotersRecord at ``offset`` commits, or at ``deadline_ms``."""

    request: Envelope
    offset: int
    deadline_ms: int


@dataclass(slots=True)
class LeaderState:
    epoch: int
    epoch_start_offset: int
    voters: tuple[int, ...]
    local_id: int
    check_quorum_deadline_ms: int
    high_watermark: int | None = None
    replicas: dict[int, ReplicaState] = field(default_factory=dict)
    # replicas that fetch but are not voters (brokers, controllers on a new disk), by replica key
    observers: dict[ReplicaKey, ReplicaState] = field(default_factory=dict)
    non_acknowledging: set[int] = field(default_factory=set)  # voters not yet told by BeginQuorumEpoch
    begin_retry_at_ms: dict[int, int] = field(default_factory=dict)
    fetched_since_check: set[int] = field(default_factory=set)
    granting_voters: tuple[int, ...] = ()
    voter_change: PendingVoterChange | None = None
    resign_requested: bool = False  # LeaderState.requestResign: its own removal committed

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        return False


@dataclass(slots=True)
class FollowerState:
    epoch: int
    leader_id: int
    fetch_deadline_ms: int
    voted_id: int = NO_LEADER
    high_watermark: int | None = None
    has_fetched_from_leader: bool = False
    fetch_in_flight: int | None = None  # correlation id
    fetch_sent_ms: int = 0
    next_fetch_ms: int = 0
    snapshot_wanted: tuple[int, int] | None = None  # (end offset, epoch) the leader said to fetch first
    # FollowerState.hasUpdatedLeader: this voter's UpdateRaftVoter answered by this leader (in flight: its
    # correlation id; next_update_ms: when to send it again after a failure)
    updated_leader: bool = False
    update_in_flight: int | None = None
    next_update_ms: int = 0

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        # FollowerState.canGrantVote: a pre-vote only while it has not heard from its leader
        return pre_vote and not self.has_fetched_from_leader and log_up_to_date


@dataclass(slots=True)
class ResignedState:
    """A leader that stepped down (graceful shutdown, lost quorum or restarted as leader)."""

    epoch: int
    election_deadline_ms: int
    preferred_successors: tuple[int, ...]
    unacknowledged: set[int] = field(default_factory=set)
    retry_at_ms: dict[int, int] = field(default_factory=dict)

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        return False


EpochState = UnattachedState | ProspectiveState | CandidateState | LeaderState | FollowerState | ResignedState


def majority(voters: tuple[int, ...]) -> int:
    return len(voters) // 2 + 1
