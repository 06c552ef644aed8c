"""The Raft core of one controller: KafkaRaftClient's election, replication and commit rules, sans-IO.

The driver (the controller daemon or the simulator) calls ``handle`` with each message that arrives,
``poll`` when ``next_deadline_ms`` is due, ``append`` on the leader and ``resign`` on graceful shutdown,
each with the current time; each returns an ``Output``: the quorum state to persist (write it before
sending, as QuorumState.durableTransitionTo does) and the messages to send. The log is the driver's
durable store; the high watermark (``high_watermark``) is Raft's commit index.

Followed from apache/kafka's KafkaRaftClient: pollUnattached / pollProspective / pollCandidate /
pollLeader / pollFollower / pollResigned, handleVoteRequest and handleVoteResponse (with KIP-996
pre-votes), handleBeginQuorumEpochRequest, handleEndQuorumEpochRequest (endEpochElectionBackoff),
handleFetchRequest (validateOffsetAndEpoch: a DivergingEpoch from the epoch cache), handleFetchResponse
(truncateToEndOffset, appendAsFollower, the follower's high watermark), maybeHandleCommonResponse
(a higher epoch in any answer moves the voter on) and onBecomeLeader (a LeaderChangeMessage first).
Fetch, on the leader and on the follower, is in ``replication.py``.

The voters are the latest voter set in the log, committed or not (KRaftControlRecordStateMachine
.lastVoterSet), else the static ``voters`` (kraft.version 0). A replica whose key (id and directory id) is
not in that set is an observer: it fetches, from a bootstrap server until it knows the leader, and never
stands; the leader counts only voters' fetches toward the high watermark and check-quorum. The leader
serves AddRaftVoter and RemoveRaftVoter one at a time (AddVoterHandler, RemoveVoterHandler): the new set
takes effect once its VotersRecord is in the log, and the answer goes out once it commits.
"""

from __future__ import annotations

import itertools
import random
import uuid
from dataclasses import dataclass, field

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.log import LeaderChangeMessage, LogEntry, RaftLog
from epochkraft.raft.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
)
from epochkraft.raft.quorum_state import (
    NO_LEADER,
    CandidateState,
    EpochState,
    FollowerState,
    LeaderState,
    PendingVoterChange,
    ProspectiveState,
    QuorumStateData,
    ReplicaState,
    ResignedState,
    UnattachedState,
    is_leader_id,
    is_usable_epoch,
    majority,
)
from epochkraft.raft.replication import (
    RaftSettings,
    Replication,
    _ParkedFetch,
)
from epochkraft.raft.voter_set import (
    KRAFT_VERSION_1,
    Endpoints,
    KRaftVersionRecord,
    ReplicaKey,
    VoterSet,
    VotersRecord,
)

AN_HOUR_MS = 3_600_000  # LeaderState.isReplicaCaughtUp: fetched within the last hour


@dataclass(slots=True)
class Output:
    persist: QuorumStateData | None = None
    sends: list[Envelope] = field(default_factory=list)


class RaftClient(Replication):
    def __init__(
        self,
        local_id: int,
        voters: tuple[int, ...],
        log: RaftLog,
        now_ms: int,
        *,
        persisted: QuorumStateData | None = None,
        settings: RaftSettings | None = None,
        rng: random.Random | None = None,
        first_correlation_id: int = 1,
        directory_id: uuid.UUID | None = None,
        bootstrap_servers: tuple[int, ...] = (),
        local_endpoints: Endpoints = (),
    ) -> None:
        """``voters``: the static voter set (controller.quorum.voters; empty for a dynamic quorum, whose
        voter set is in the log). ``directory_id``: the id written when this replica's disk was formatted.
        ``bootstrap_servers``: where an observer that knows no leader fetches (controller.quorum
        .bootstrap.servers; the static voters by default). ``local_endpoints``: the listeners this replica is
        reached on, which a voter tells each new leader when the voter set has others (UpdateRaftVoter)."""
        self.local_id = local_id
        self.local_key = ReplicaKey(local_id, directory_id)
        self.local_endpoints = local_endpoints
        self.static_voters = VoterSet.static(tuple(voters))
        self.bootstrap_servers = bootstrap_servers or tuple(sorted(voters))
        self._bootstrap_turn = 0
        self.log = log
        self.settings = settings or RaftSettings()
        self.rng = rng or random.Random(local_id)
        self._correlation = itertools.count(first_correlation_id)
        self._output = Output()
        self._parked: list[_ParkedFetch] = []
        self._persisted = persisted or QuorumStateData(current_voters=self.voters)
        self.known_high_watermark: int | None = None  # the highest commit index seen since start
        self.state: EpochState = self._initial_state(self._persisted, now_ms)

    # ---- the state as a driver reads it ---------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int:
        if isinstance(self.state, LeaderState):
            return self.local_id
        return getattr(self.state, "leader_id", NO_LEADER)  # a resigned leader names none

    @property
    def voter_set(self) -> VoterSet:
        """KRaftControlRecordStateMachine.lastVoterSet: the latest voter set in the log, committed or not;
        the static voters when the log holds none."""
        voters = self.log.voter_history.last_value()
        return self.static_voters if voters is None else voters

    @property
    def voters(self) -> tuple[int, ...]:
        return self.voter_set.ids

    @property
    def kraft_version(self) -> int:
        return self.log.voter_history.kraft_version()

    @property
    def is_voter(self) -> bool:
        """QuorumState.isVoter: this replica's key (its id and directory id) is in the voter set."""
        return self.voter_set.is_voter(self.local_key)

    @property
    def high_watermark(self) -> int | None:
        """Raft's commit index: entries below it are committed (None: not known in this state)."""
        return getattr(self.state, "high_watermark", None)

    @property
    def is_leader(self) -> bool:
        return isinstance(self.state, LeaderState)

    @property
    def role(self) -> str:
        return type(self.state).__name__.removesuffix("State").lower()

    def quorum_state(self) -> QuorumStateData:
        return self._persisted

    # ---- entry points -----------------------------------------------------------------------------------
    def handle(self, now_ms: int, envelope: Envelope) -> Output:
        message = envelope.message
        if envelope.is_response:
            self._handle_response(now_ms, envelope)
        elif isinstance(message, VoteRequest):
            self._reply(envelope, self._handle_vote_request(now_ms, message))
        elif isinstance(message, BeginQuorumEpochRequest):
            self._reply(envelope, self._handle_begin_quorum_epoch(now_ms, message))
        elif isinstance(message, EndQuorumEpochRequest):
            self._reply(envelope, self._handle_end_quorum_epoch(now_ms, envelope.source, message))
        elif isinstance(message, FetchRequest):
            self._handle_fetch_request(now_ms, envelope)
        elif isinstance(message, AddRaftVoterRequest):
            self._handle_add_voter(now_ms, envelope, message)
        elif isinstance(message, RemoveRaftVoterRequest):
            self._handle_remove_voter(now_ms, envelope, message)
        elif isinstance(message, UpdateRaftVoterRequest):
            self._reply(envelope, self._handle_update_voter(now_ms, message))
        return self._drain(now_ms)

    def poll(self, now_ms: int) -> Output:
        state = self.state
        if isinstance(state, UnattachedState):
            if now_ms >= state.election_deadline_ms and self.is_voter:
                self._transition_to_prospective(now_ms)
            elif now_ms >= state.election_deadline_ms:
                self._fetch_from_bootstrap(now_ms, state)
        elif isinstance(state, FollowerState):
            if now_ms >= state.fetch_deadline_ms:
                self._transition_to_prospective(now_ms)
        elif isinstance(state, ProspectiveState):
            if now_ms >= state.election_deadline_ms or len(state.rejected) >= majority(self.voters):
                self._after_lost_pre_vote(now_ms)
        elif isinstance(state, CandidateState):
            if state.backoff_until_ms is not None:
                if now_ms >= state.backoff_until_ms:
                    self._transition_to_prospective(now_ms)
            elif now_ms >= state.election_deadline_ms or len(state.rejected) >= majority(self.voters):
                state.backoff_until_ms = now_ms + self._election_backoff_ms()
        elif isinstance(state, LeaderState):
            self._expire_voter_change(now_ms, state)
            if state.resign_requested:
                self._transition_to_resigned(now_ms, ())
            elif now_ms >= state.check_quorum_deadline_ms:
                self._check_quorum(now_ms, state)
        elif isinstance(state, ResignedState) and now_ms >= state.election_deadline_ms:
            self._transition_to_prospective(now_ms)
        return self._drain(now_ms)

    def append(self, now_ms: int, values: list[bytes], records: list[int] | None = None) -> int | None:
        """Appends on the leader (KafkaRaftClient.scheduleAppend); returns the last offset, None when not
        the leader. The entries are committed once ``high_watermark`` passes it in the same epoch.
        ``records``: the offsets each value takes (one each by default; a metadata batch takes one per
        record)."""
        state = self.state
        if not isinstance(state, LeaderState) or not values:
            return None
        offset = -1
        for value, count in zip(values, records or [1] * len(values), strict=True):
            offset = self.log.append(LogEntry(state.epoch, value, count))
        self._leader_progress(now_ms, state)
        return offset

    def resign(self, now_ms: int) -> Output:
        """Graceful resignation of the leader (KafkaRaftClient.resign and shutdown): EndQuorumEpoch to the
        voters, the most caught up first as preferred successors."""
        state = self.state
        if isinstance(state, LeaderState):
            successors = sorted(
                (v for v in self.voters if v != self.local_id),
                key=lambda v: -state.replicas.get(v, ReplicaState()).end_offset,
            )
            self._transition_to_resigned(now_ms, tuple(successors))
        return self._drain(now_ms)

    def next_deadline_ms(self) -> int:
        """When ``poll`` next has something to do."""
        state = self.state
        deadlines = [parked.deadline_ms for parked in self._parked]
        if isinstance(state, UnattachedState):
            deadlines.append(state.election_deadline_ms)
        elif isinstance(state, FollowerState):
            deadlines.append(state.fetch_deadline_ms)
            if state.fetch_in_flight is not None:
                deadlines.append(state.fetch_sent_ms + self.settings.request_timeout_ms)
            elif state.snapshot_wanted is None:  # else the driver is fetching the snapshot
                deadlines.append(state.next_fetch_ms)
        elif isinstance(state, ProspectiveState | CandidateState):
            if isinstance(state, CandidateState) and state.backoff_until_ms is not None:
                deadlines.append(state.backoff_until_ms)
            else:
                deadlines.append(state.election_deadline_ms)
                decided = state.granted | state.rejected
                deadlines += (at for voter, at in state.retry_at_ms.items() if voter not in decided)
        elif isinstance(state, LeaderState):
            deadlines.append(state.check_quorum_deadline_ms)
            deadlines += state.begin_retry_at_ms.values()
            if state.voter_change is not None:
                deadlines.append(state.voter_change.deadline_ms)
        elif isinstance(state, ResignedState):
            deadlines.append(state.election_deadline_ms)
            deadlines += state.retry_at_ms.values()
        return min(deadlines)

    # ---- transitions (QuorumState) ----------------------------------------------------------------------
    def _initial_state(self, persisted: QuorumStateData, now_ms: int) -> EpochState:
        # QuorumState.initialize: a voter that was leader comes back resigned; one that knew a leader
        # follows it; otherwise unattached, keeping its vote.
        epoch = persisted.leader_epoch
        if persisted.leader_id == self.local_id:
            others = {v for v in self.voters if v != self.local_id}
            return ResignedState(
                epoch,
                now_ms + self._random_election_timeout_ms(),
                (),
                unacknowledged=others,
                retry_at_ms=dict.fromkeys(others, now_ms),
            )
        if persisted.leader_id != NO_LEADER:
            return FollowerState(
                epoch,
                persisted.leader_id,
                now_ms + self.settings.fetch_timeout_ms,
                voted_id=persisted.voted_id,
            )
        return UnattachedState(
            epoch, now_ms + self._random_election_timeout_ms(), voted_id=persisted.voted_id
        )

    def _set_state(self, state: EpochState) -> None:
        if isinstance(self.state, LeaderState) and self.state.voter_change is not None:
            # LeaderState.close: a voter change in progress is answered NOT_LEADER_OR_FOLLOWER
            self._answer_voter_change(self.state, ErrorCode.not_leader_or_follower)
        self.state = state
        self._parked.clear()
        leader = (
            self.local_id
            if isinstance(state, LeaderState | ResignedState)
            else getattr(state, "leader_id", -1)
        )
        voted = getattr(state, "voted_id", NO_LEADER)
        if isinstance(state, CandidateState | LeaderState):
            voted = self.local_id
        elif isinstance(state, ProspectiveState):
            return  # pre-voting changes nothing durable
        if state.epoch == self._persisted.leader_epoch:
            voted = voted if voted != NO_LEADER else self._persisted.voted_id
        data = QuorumStateData(state.epoch, leader, voted, self.voters, self._persisted.cluster_id)
        if data != self._persisted:
            self._persisted = data
            self._output.persist = data

    def _transition_to_unattached(self, now_ms: int, epoch: int, leader_id: int = NO_LEADER) -> None:
        self._set_state(
            UnattachedState(epoch, now_ms + self._random_election_timeout_ms(), leader_id=leader_id)
        )

    def _transition_to_follower(self, now_ms: int, epoch: int, leader_id: int) -> None:
        voted = getattr(self.state, "voted_id", NO_LEADER) if self.state.epoch == epoch else NO_LEADER
        # the high watermark carries over (EpochState.highWatermark): committed entries stay committed
        self._set_state(
            FollowerState(
                epoch,
                leader_id,
                now_ms + self.settings.fetch_timeout_ms,
                voted_id=voted,
                high_watermark=self.known_high_watermark,
            )
        )

    def _transition_to_prospective(self, now_ms: int) -> None:
        state = self.state
        if not self.is_voter:
            # an observer never stands: it looks for the leader instead (a follower whose fetches time out,
            # a leader that removed itself and resigned)
            if not isinstance(state, UnattachedState):
                # keeping its vote in the epoch (a leader that removed itself voted for itself in it)
                self._set_state(UnattachedState(state.epoch, now_ms, voted_id=self._vote_in_this_epoch()))
            return
        if not is_usable_epoch(state.epoch + 1):
            # its candidacy's epoch would be one no voter can raise again (or not fit an int32): it waits
            # unattached instead of standing, and never holds such an epoch
            self._set_state(
                UnattachedState(
                    state.epoch,
                    now_ms + self._random_election_timeout_ms(),
                    voted_id=self._vote_in_this_epoch(),
                    leader_id=getattr(state, "leader_id", NO_LEADER),
                )
            )
            return
        self._set_state(
            ProspectiveState(
                state.epoch,
                now_ms + self._random_election_timeout_ms(),
                self.voters,
                self.local_id,
                voted_id=self._vote_in_this_epoch(),
                leader_id=getattr(state, "leader_id", NO_LEADER),
            )
        )
        self._maybe_won_pre_vote(now_ms)

    def _vote_in_this_epoch(self) -> int:
        """Whom this voter voted for in its current epoch (QuorumState.votedKey): itself as a candidate, a
        leader or a resigned leader, else the state's or the durable vote, so that a state of the same epoch
        that follows one of those never grants a second vote in it."""
        state = self.state
        if isinstance(state, CandidateState | LeaderState | ResignedState):
            return self.local_id
        voted = getattr(state, "voted_id", NO_LEADER)
        if voted == NO_LEADER and self._persisted.leader_epoch == state.epoch:
            return self._persisted.voted_id
        return voted

    def _after_lost_pre_vote(self, now_ms: int) -> None:
        # KafkaRaftClient.prospectiveTransitionAfterElectionTimeout
        state = self.state
        assert isinstance(state, ProspectiveState)
        if state.leader_id != NO_LEADER:
            self._transition_to_follower(now_ms, state.epoch, state.leader_id)
        else:
            self._set_state(
                UnattachedState(
                    state.epoch, now_ms + self._random_election_timeout_ms(), voted_id=state.voted_id
                )
            )

    def _maybe_won_pre_vote(self, now_ms: int) -> None:
        state = self.state
        if isinstance(state, ProspectiveState) and len(state.granted) >= majority(self.voters):
            self._set_state(
                CandidateState(
                    state.epoch + 1, now_ms + self._random_election_timeout_ms(), self.voters, self.local_id
                )
            )
            self._maybe_won_election(now_ms)

    def _maybe_won_election(self, now_ms: int) -> None:
        state = self.state
        if isinstance(state, CandidateState) and len(state.granted) >= majority(self.voters):
            self._become_leader(now_ms, tuple(sorted(state.granted)))

    def _become_leader(self, now_ms: int, granting: tuple[int, ...]) -> None:
        # KafkaRaftClient.onBecomeLeader: the LeaderChangeMessage opens the epoch; the high watermark stays
        # unknown until a majority holds it.
        epoch = self.state.epoch
        start = self.log.append(LogEntry(epoch, LeaderChangeMessage(self.local_id, self.voters, granting)))
        history = self.log.voter_history
        if self.kraft_version >= KRAFT_VERSION_1 and (history.last_offset() or 0) < 0:
            # LeaderState.appendStartOfEpochControlRecords: the bootstrap checkpoint's voter set and
            # kraft.version go into the log, so they are replicated and read back from it
            self.log.append(LogEntry(epoch, KRaftVersionRecord(self.kraft_version)))
            self.log.append(LogEntry(epoch, VotersRecord(self.voter_set)))
        others = {v for v in self.voters if v != self.local_id}
        leader = LeaderState(
            epoch,
            start,
            self.voters,
            self.local_id,
            check_quorum_deadline_ms=now_ms + self._check_quorum_timeout_ms(),
            replicas={v: ReplicaState() for v in (*self.voters, self.local_id)},
            non_acknowledging=others,
            begin_retry_at_ms=dict.fromkeys(others, now_ms),
            granting_voters=granting,
        )
        self._set_state(leader)
        self._leader_progress(now_ms, leader)

    def _transition_to_resigned(self, now_ms: int, successors: tuple[int, ...]) -> None:
        others = {v for v in self.voters if v != self.local_id}
        self._set_state(
            ResignedState(
                self.state.epoch,
                now_ms + self._random_election_timeout_ms(),
                successors,
                unacknowledged=others,
                retry_at_ms=dict.fromkeys(others, now_ms),
            )
        )

    def _check_quorum(self, now_ms: int, state: LeaderState) -> None:
        # LeaderState.timeUntilCheckQuorumExpires: a leader no majority of voters fetched from steps down
        fetched = state.fetched_since_check & set(self.voters)
        if self.is_voter:
            fetched.add(self.local_id)
        if len(fetched) >= majority(self.voters):
            state.fetched_since_check.clear()
            state.check_quorum_deadline_ms = now_ms + self._check_quorum_timeout_ms()
        else:
            self._transition_to_resigned(now_ms, ())

    def _observe_epoch(self, now_ms: int, epoch: int, leader_id: int) -> bool:
        """maybeHandleCommonResponse / maybeTransition: a higher epoch (or the leader of ours, newly
        learnt) moves this voter on. True when the message came from an older epoch, or names an epoch or
        leader no voter can hold (to be ignored)."""
        if epoch < self.state.epoch or not is_usable_epoch(epoch) or not is_leader_id(leader_id):
            return True
        if epoch > self.state.epoch:
            if leader_id not in (NO_LEADER, self.local_id):
                self._transition_to_follower(now_ms, epoch, leader_id)
            else:
                self._transition_to_unattached(now_ms, epoch)
        elif leader_id not in (NO_LEADER, self.local_id) and not isinstance(
            self.state, FollowerState | LeaderState | ResignedState
        ):
            self._transition_to_follower(now_ms, epoch, leader_id)
        return False

    # ---- Vote (52) -----------------------------------------------------------------------------------------
    def _handle_vote_request(self, now_ms: int, request: VoteRequest) -> VoteResponse:
        if self._unknown_static_voter(request.candidate_id):
            return self._vote_response(ErrorCode.inconsistent_voter_set, False)
        if (
            not is_usable_epoch(request.candidate_epoch)
            or not 0 <= request.last_offset_epoch < request.candidate_epoch
            or request.last_offset < 0
        ):
            # handleVoteRequest: INVALID_REQUEST for an invalid last epoch or offset; an epoch no voter
            # can hold is refused alike
            return self._vote_response(ErrorCode.invalid_request, False)
        if request.candidate_epoch < self.state.epoch:
            return self._vote_response(ErrorCode.none, False)
        if request.candidate_epoch > self.state.epoch and not request.pre_vote:
            self._transition_to_unattached(now_ms, request.candidate_epoch)
        if not self._is_valid_voter_key(request.voter_directory_id):
            # KafkaRaftClient.handleVoteRequest: the candidate asks another disk of this node (its voter
            # set names the lost one); this replica never voted as that key and must not answer for it
            return self._vote_response(ErrorCode.invalid_voter_key, False)
        candidate_end = (request.last_offset_epoch, request.last_offset)
        up_to_date = candidate_end >= (self.log.last_fetched_epoch, self.log.end_offset)
        granted = self.state.can_grant_vote(request.candidate_id, up_to_date, request.pre_vote)
        if granted and not request.pre_vote and isinstance(self.state, UnattachedState | ProspectiveState):
            if self.state.voted_id == NO_LEADER:
                self._set_state(
                    UnattachedState(
                        self.state.epoch,
                        now_ms + self._random_election_timeout_ms(),
                        voted_id=request.candidate_id,
                    )
                )
            elif isinstance(self.state, UnattachedState):
                # a vote granted again resets the election timer, as a Voted state's
                self.state.election_deadline_ms = now_ms + self._random_election_timeout_ms()
        return self._vote_response(ErrorCode.none, granted)

    def _unknown_static_voter(self, node: int) -> bool:
        """A static quorum (kraft.version 0) refuses a candidate or leader it does not know as a voter
        (INCONSISTENT_VOTER_SET); a dynamic one does not, since the sender may know a newer voter set."""
        return self.kraft_version < KRAFT_VERSION_1 and node not in self.voters

    def _is_valid_voter_key(self, directory_id: uuid.UUID | None) -> bool:
        """KafkaRaftClient.isValidVoterKey: a request for this node's voter names this disk or none."""
        return directory_id is None or directory_id == self.local_key.directory_id

    def _vote_response(self, error: ErrorCode, granted: bool) -> VoteResponse:
        return VoteResponse(error, self.leader_id, self.state.epoch, granted)

    def _handle_vote_response(
        self, now_ms: int, source: int, correlation_id: int, response: VoteResponse
    ) -> None:
        state = self.state
        if (
            not isinstance(state, ProspectiveState | CandidateState)
            or state.in_flight.get(source) != correlation_id
        ):
            return
        del state.in_flight[source]
        if response.error_code != ErrorCode.none:
            state.retry_at_ms[source] = now_ms + self.settings.retry_backoff_ms
            return
        # a pre-vote is answered in the voter's own epoch: only a higher epoch or a leader other than the
        # one it stopped hearing from moves a prospective voter on; any higher epoch moves a candidate on
        moves = not isinstance(state, ProspectiveState) or (
            response.leader_epoch > state.epoch
            or response.leader_id not in (NO_LEADER, self.local_id, state.leader_id)
        )
        if moves and (
            self._observe_epoch(now_ms, response.leader_epoch, response.leader_id) or self.state is not state
        ):
            return
        (state.granted if response.vote_granted else state.rejected).add(source)
        if isinstance(state, ProspectiveState):
            self._maybe_won_pre_vote(now_ms)
        else:
            self._maybe_won_election(now_ms)

    def _send_vote_requests(self, now_ms: int, state: ProspectiveState | CandidateState) -> None:
        if isinstance(state, CandidateState) and state.backoff_until_ms is not None:
            return
        pre_vote = isinstance(state, ProspectiveState)
        for voter in self.voter_set.voters:
            if voter.id == self.local_id or voter.id in state.granted or voter.id in state.rejected:
                continue
            if now_ms < state.retry_at_ms.get(voter.id, 0):
                continue  # in flight (sent again after the request timeout) or backing off
            request = VoteRequest(
                state.epoch + 1 if pre_vote else state.epoch,
                self.local_id,
                self.log.last_fetched_epoch,
                self.log.end_offset,
                pre_vote,
                self.local_key.directory_id,
                voter.directory_id,
            )
            state.in_flight[voter.id] = self._send(voter.id, request)
            state.retry_at_ms[voter.id] = now_ms + self.settings.request_timeout_ms

    # ---- BeginQuorumEpoch (53) and EndQuorumEpoch (54) -------------------------------------------------------
    def _handle_begin_quorum_epoch(
        self, now_ms: int, request: BeginQuorumEpochRequest
    ) -> BeginQuorumEpochResponse:
        if self._unknown_static_voter(request.leader_id):
            return BeginQuorumEpochResponse(
                ErrorCode.inconsistent_voter_set, self.leader_id, self.state.epoch
            )
        if not is_usable_epoch(request.leader_epoch):
            # an epoch no voter can hold (one 2^31-1 would be raised past an int32 at the next election)
            return BeginQuorumEpochResponse(ErrorCode.invalid_request, self.leader_id, self.state.epoch)
        if not self._is_valid_voter_key(request.voter_directory_id):
            # KafkaRaftClient.handleBeginQuorumEpochRequest: meant for another disk of this node
            return BeginQuorumEpochResponse(ErrorCode.invalid_voter_key, self.leader_id, self.state.epoch)
        # a newer epoch, or the leader of ours (for a candidate or unattached voter), is followed
        self._observe_epoch(now_ms, request.leader_epoch, request.leader_id)
        return BeginQuorumEpochResponse(ErrorCode.none, self.leader_id, self.state.epoch)

    def _handle_end_quorum_epoch(
        self, now_ms: int, source: int, request: EndQuorumEpochRequest
    ) -> EndQuorumEpochResponse:
        if self._unknown_static_voter(request.leader_id):
            return EndQuorumEpochResponse(ErrorCode.inconsistent_voter_set, self.leader_id, self.state.epoch)
        if not is_usable_epoch(request.leader_epoch):
            return EndQuorumEpochResponse(ErrorCode.invalid_request, self.leader_id, self.state.epoch)
        if not self._observe_epoch(now_ms, request.leader_epoch, request.leader_id):
            state = self.state
            if isinstance(state, FollowerState) and state.leader_id == request.leader_id:
                # endEpochElectionBackoff: the first preferred successor runs at once, the others later
                state.fetch_deadline_ms = now_ms + self._end_epoch_election_backoff_ms(
                    request.preferred_successors
                )
                state.has_fetched_from_leader = False
        return EndQuorumEpochResponse(ErrorCode.none, self.leader_id, self.state.epoch)

    def _end_epoch_election_backoff_ms(self, successors: tuple[int, ...]) -> int:
        if self.local_id not in successors:
            return self.settings.election_backoff_max_ms
        position = successors.index(self.local_id)
        if position == 0:
            return 0
        # strictExponentialElectionBackoffMs (the exponent bounded: the list comes from the wire)
        return min(
            self.settings.election_backoff_max_ms,
            self.settings.retry_backoff_ms * (2 ** min(position - 1, 31)),
        )

    # ---- AddRaftVoter (80) and RemoveRaftVoter (81) ------------------------------------------------------------
    def _handle_add_voter(self, now_ms: int, envelope: Envelope, request: AddRaftVoterRequest) -> None:
        """AddVoterHandler.handleAddVoterRequest: the checks in Kafka's order, then the new VotersRecord,
        answered once it commits (highWatermarkUpdated). Kafka's ApiVersions exchange with the new voter
        (its supported kraft.version) is the driver's to add."""
        voter = ReplicaKey(request.voter_id, request.voter_directory_id)
        state, refusal = self._voter_change_refusal(now_ms, AddRaftVoterResponse)
        if refusal is not None:
            self._reply(envelope, refusal)
            return
        assert state is not None
        added = self.voter_set.add_voter(voter, request.listeners)
        if added is None:
            message = f"The voter id for {voter} is already part of the set of voters {self.voter_set}."
            self._reply(envelope, AddRaftVoterResponse(ErrorCode.duplicate_voter, message))
            return
        if not self._is_replica_caught_up(state, voter, now_ms):
            message = f"Aborted add voter operation for {voter} since it is lagging behind"
            self._reply(envelope, AddRaftVoterResponse(ErrorCode.request_timed_out, message))
            return
        self._append_voters_record(now_ms, state, envelope, added)

    def _handle_remove_voter(self, now_ms: int, envelope: Envelope, request: RemoveRaftVoterRequest) -> None:
        """RemoveVoterHandler.handleRemoveVoterRequest: as AddRaftVoter without the catch-up; a leader that
        removed itself resigns once the removal commits."""
        voter = ReplicaKey(request.voter_id, request.voter_directory_id)
        state, refusal = self._voter_change_refusal(now_ms, RemoveRaftVoterResponse)
        if refusal is not None:
            self._reply(envelope, refusal)
            return
        assert state is not None
        remaining = self.voter_set.remove_voter(voter)
        if remaining is None:
            message = f"Cannot remove voter {voter} from the set of voters {self.voter_set}"
            self._reply(envelope, RemoveRaftVoterResponse(ErrorCode.voter_not_found, message))
            return
        self._append_voters_record(now_ms, state, envelope, remaining)

    def _handle_update_voter(self, now_ms: int, request: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
        """UpdateVoterHandler.handleUpdateVoterRequest: a voter's new listeners go into a VotersRecord,
        answered at once (not on commit); with kraft.version 0 there is nothing to write."""
        state = self.state

        def answer(error: ErrorCode) -> UpdateRaftVoterResponse:
            return UpdateRaftVoterResponse(error, self.leader_id, self.state.epoch)

        if not isinstance(state, LeaderState):
            return answer(ErrorCode.not_leader_or_follower)
        if request.current_leader_epoch != state.epoch:
            # KafkaRaftClient.validateLeaderOnlyRequest
            older = request.current_leader_epoch < state.epoch
            return answer(ErrorCode.fenced_leader_epoch if older else ErrorCode.unknown_leader_epoch)
        if state.high_watermark is None:
            return answer(ErrorCode.request_timed_out)
        if self.kraft_version < KRAFT_VERSION_1:
            return answer(ErrorCode.none)
        last = self.log.voter_history.last_offset()
        if last is None or last >= state.high_watermark:
            return answer(ErrorCode.request_timed_out)
        low, high = request.kraft_version_range
        if not low <= self.kraft_version <= high or not request.listeners:
            return answer(ErrorCode.invalid_request)
        voter = ReplicaKey(request.voter_id, request.voter_directory_id)
        if voter not in self.voter_set.voters:
            return answer(ErrorCode.voter_not_found)
        if self.voter_set.endpoints_of(voter.id) != request.listeners:
            updated = self.voter_set.with_endpoints(voter.id, request.listeners)
            self.log.append(LogEntry(state.epoch, VotersRecord(updated)))
            self._leader_progress(now_ms, state)
        return answer(ErrorCode.none)

    def _voter_change_refusal(
        self, now_ms: int, answer: type[AddRaftVoterResponse] | type[RemoveRaftVoterResponse]
    ) -> tuple[LeaderState | None, AddRaftVoterResponse | RemoveRaftVoterResponse | None]:
        """The checks AddVoterHandler and RemoveVoterHandler share, in their order: the leader, no change in
        progress, a high watermark in its epoch, kraft.version 1, the latest voter set committed."""
        state = self.state
        if not isinstance(state, LeaderState):
            return None, answer(ErrorCode.not_leader_or_follower, None)
        self._expire_voter_change(now_ms, state)
        if state.voter_change is not None:
            message = "Request timed out waiting for leader to handle previous voter change request"
            return None, answer(ErrorCode.request_timed_out, message)
        if state.high_watermark is None:
            message = "Request timed out waiting for leader to establish HWM and fence previous voter changes"
            return None, answer(ErrorCode.request_timed_out, message)
        if self.kraft_version < KRAFT_VERSION_1:
            message = f"Cluster doesn't support changing voters because kraft.version is {self.kraft_version}"
            return None, answer(ErrorCode.unsupported_version, message)
        last = self.log.voter_history.last_offset()
        if last is None or last >= state.high_watermark:
            message = f"Request timed out waiting for voters to commit the latest voter change at {last}"
            return None, answer(ErrorCode.request_timed_out, message)
        return state, None

    def _is_replica_caught_up(self, state: LeaderState, replica: ReplicaKey, now_ms: int) -> bool:
        """LeaderState.isReplicaCaughtUp: the observer has been at the leader's log end once and fetched
        within the last hour."""
        observer = state.observers.get(replica)
        return (
            observer is not None
            and observer.last_caught_up_ms > 0
            and observer.last_fetch_ms > 0
            and observer.last_fetch_ms > now_ms - AN_HOUR_MS
        )

    def _append_voters_record(
        self, now_ms: int, state: LeaderState, request: Envelope, voters: VoterSet
    ) -> None:
        """LeaderState.appendVotersRecord: the new set holds from its offset on, for the high watermark and
        check-quorum too (updateVoterAndObserverStates)."""
        offset = self.log.append(LogEntry(state.epoch, VotersRecord(voters)))
        deadline = now_ms + self.settings.request_timeout_ms
        state.voter_change = PendingVoterChange(request, offset, deadline)
        for voter in voters.voters:
            if voter.id not in state.replicas:
                state.replicas[voter.id] = state.observers.pop(voter, ReplicaState())
        for voter_id in [v for v in state.replicas if v not in voters.ids and v != self.local_id]:
            del state.replicas[voter_id]
            state.non_acknowledging.discard(voter_id)
            state.begin_retry_at_ms.pop(voter_id, None)
        self._leader_progress(now_ms, state)

    def _after_high_watermark(self, now_ms: int, state: LeaderState) -> None:
        """AddVoterHandler / RemoveVoterHandler.highWatermarkUpdated: the change committed is answered; a
        leader no longer in the committed voter set resigns (LeaderState.requestResign)."""
        change, hw = state.voter_change, state.high_watermark
        if change is not None and hw is not None and hw > change.offset:
            self._answer_voter_change(state, ErrorCode.none)
        last = self.log.voter_history.last_offset()
        if not self.is_voter and hw is not None and last is not None and hw > last:
            # also when the removal's answer had timed out: a leader outside the committed set steps down
            state.resign_requested = True

    def _expire_voter_change(self, now_ms: int, state: LeaderState) -> None:
        change = state.voter_change
        if change is not None and now_ms >= change.deadline_ms:
            self._answer_voter_change(state, ErrorCode.request_timed_out)

    def _answer_voter_change(self, state: LeaderState, error: ErrorCode) -> None:
        change, state.voter_change = state.voter_change, None
        if change is None:
            return
        if isinstance(change.request.message, AddRaftVoterRequest):
            self._reply(change.request, AddRaftVoterResponse(error))
        else:
            self._reply(change.request, RemoveRaftVoterResponse(error))

    def _maybe_update_voter(self, now_ms: int, state: FollowerState) -> None:
        """KafkaRaftClient.pollFollowerAsVoter: a voter of a kraft.version 1 quorum whose listeners in the
        voter set are not the ones it has tells its leader once it has fetched from it (UpdateRaftVoter),
        again after a failure (Kafka sends it to every new leader; we only when they differ, so a restart
        on the same address writes nothing)."""
        if (
            state.updated_leader
            or now_ms < state.next_update_ms  # answered by then, or sent again
            or not state.has_fetched_from_leader
            or not self.local_endpoints
            or self.kraft_version < KRAFT_VERSION_1
            or not self.is_voter
            or self.local_key.directory_id is None
        ):
            return
        if self.voter_set.endpoints_of(self.local_id) == self.local_endpoints:
            state.updated_leader = True
            return
        request = UpdateRaftVoterRequest(
            state.epoch, self.local_id, self.local_key.directory_id, self.local_endpoints
        )
        state.update_in_flight = self._send(state.leader_id, request)
        state.next_update_ms = now_ms + self.settings.request_timeout_ms  # sent again if unanswered

    def _handle_update_voter_response(
        self, now_ms: int, correlation_id: int, response: UpdateRaftVoterResponse
    ) -> None:
        state = self.state
        if not isinstance(state, FollowerState) or state.update_in_flight != correlation_id:
            return
        state.update_in_flight = None
        if response.error_code == ErrorCode.none:
            state.updated_leader = True
        else:
            state.next_update_ms = now_ms + self.settings.retry_backoff_ms

    # ---- plumbing ---------------------------------------------------------------------------------------------
    def _handle_response(self, now_ms: int, envelope: Envelope) -> None:
        message = envelope.message
        if isinstance(message, VoteResponse):
            self._handle_vote_response(now_ms, envelope.source, envelope.correlation_id, message)
        elif isinstance(message, FetchResponse):
            self._handle_fetch_response(now_ms, envelope.source, envelope.correlation_id, message)
        elif isinstance(message, UpdateRaftVoterResponse):
            self._handle_update_voter_response(now_ms, envelope.correlation_id, message)
        elif isinstance(message, BeginQuorumEpochResponse):
            if not self._observe_epoch(now_ms, message.leader_epoch, message.leader_id):
                state = self.state
                if isinstance(state, LeaderState) and message.error_code == ErrorCode.none:
                    state.non_acknowledging.discard(envelope.source)
                    state.begin_retry_at_ms.pop(envelope.source, None)
        elif isinstance(message, EndQuorumEpochResponse) and not self._observe_epoch(
            now_ms, message.leader_epoch, message.leader_id
        ):
            state = self.state
            if isinstance(state, ResignedState) and message.error_code == ErrorCode.none:
                state.unacknowledged.discard(envelope.source)
                state.retry_at_ms.pop(envelope.source, None)

    def _drain(self, now_ms: int) -> Output:
        """Sends what the current state owes (vote requests, fetches, BeginQuorumEpoch/EndQuorumEpoch
        retries, expired parked fetches) and hands over the output."""
        state = self.state
        if isinstance(state, ProspectiveState | CandidateState):
            self._send_vote_requests(now_ms, state)
        elif isinstance(state, FollowerState):
            self._send_fetch(now_ms, state)
            self._maybe_update_voter(now_ms, state)
        elif isinstance(state, LeaderState):
            for voter in sorted(state.non_acknowledging):
                if now_ms >= state.begin_retry_at_ms.get(voter, 0):
                    key = self.voter_set.key_of(voter)
                    directory_id = key.directory_id if key is not None else None
                    self._send(voter, BeginQuorumEpochRequest(self.local_id, state.epoch, directory_id))
                    state.begin_retry_at_ms[voter] = now_ms + self.settings.request_timeout_ms
            self._release_parked(now_ms, force=False)
        elif isinstance(state, ResignedState):
            for voter in sorted(state.unacknowledged):
                if now_ms >= state.retry_at_ms.get(voter, 0):
                    self._send(
                        voter, EndQuorumEpochRequest(self.local_id, state.epoch, state.preferred_successors)
                    )
                    state.retry_at_ms[voter] = now_ms + self.settings.request_timeout_ms
        output, self._output = self._output, Output()
        return output

    def _send(self, destination: int, message: Message) -> int:
        correlation = next(self._correlation)
        self._output.sends.append(Envelope(self.local_id, destination, correlation, message))
        return correlation

    def _reply(self, request: Envelope, message: Message) -> None:
        self._output.sends.append(
            Envelope(self.local_id, request.source, request.correlation_id, message, True)
        )

    def _random_election_timeout_ms(self) -> int:
        # QuorumState.randomElectionTimeoutMs
        timeout = self.settings.election_timeout_ms
        return timeout + self.rng.randrange(timeout) if timeout > 0 else 0

    def _election_backoff_ms(self) -> int:
        return self.rng.randrange(1, max(self.settings.election_backoff_max_ms, 2))

    def _check_quorum_timeout_ms(self) -> int:
        return self.settings.fetch_timeout_ms * 3 // 2
