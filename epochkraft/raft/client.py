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
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft import replication
from epochkraft.raft.log import LeaderChangeMessage, LogEntry, RaftLog
from epochkraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from epochkraft.raft.quorum_state import (
    NO_LEADER,
    CandidateState,
    EpochState,
    FollowerState,
    LeaderState,
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
        rejoining: bool = False,
    ) -> None:
        self.local_id = local_id
        self.voters = tuple(sorted(voters))
        self.log = log
        self.settings = settings or RaftSettings()
        self.rng = rng or random.Random(local_id)
        self._correlation = itertools.count(first_correlation_id)
        self._output = Output()
        self._parked: list[_ParkedFetch] = []
        self._persisted = persisted or QuorumStateData(current_voters=self.voters)
        self.known_high_watermark: int | None = None  # the highest commit index seen since start
        # ``rejoining``: a voter restarted on a new, empty disk (Kafka formats it with
        # --no-initial-controllers). Its lost self may have voted in the current epoch and acknowledged
        # entries it no longer holds, so until it has fetched from a leader up to the leader's high
        # watermark it answers no candidate, as while it was down: it can neither vote twice in an epoch
        # nor complete a majority that lacks a committed entry (a candidate with an empty log included). (Kafka's static quorum
        # has no such guard; KIP-853's directory ids are its answer.)
        self.abstaining = rejoining
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
            if self._silent_after_disk_loss(message):
                return self._drain(now_ms)
            self._reply(envelope, self._handle_vote_request(now_ms, message))
        elif isinstance(message, BeginQuorumEpochRequest):
            self._reply(envelope, self._handle_begin_quorum_epoch(now_ms, message))
        elif isinstance(message, EndQuorumEpochRequest):
            self._reply(envelope, self._handle_end_quorum_epoch(now_ms, envelope.source, message))
        elif isinstance(message, FetchRequest):
            self._handle_fetch_request(now_ms, envelope)
        return self._drain(now_ms)

    def poll(self, now_ms: int) -> Output:
        state = self.state
        if isinstance(state, UnattachedState):
            if now_ms >= state.election_deadline_ms and self.local_id in self.voters:
                self._transition_to_prospective(now_ms)
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
            if now_ms >= state.check_quorum_deadline_ms:
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
        if self.local_id not in self.voters:
            return
        if not is_usable_epoch(state.epoch + 1):
            # its candidacy's epoch would be one no voter can raise again (or not fit an int32): it waits
            # unattached instead of standing, and never holds such an epoch
            self._set_state(
                UnattachedState(
                    state.epoch,
                    now_ms + self._random_election_timeout_ms(),
                    voted_id=getattr(state, "voted_id", NO_LEADER),
                )
            )
            return
        self._set_state(
            ProspectiveState(
                state.epoch,
                now_ms + self._random_election_timeout_ms(),
                self.voters,
                self.local_id,
                voted_id=getattr(state, "voted_id", NO_LEADER),
                leader_id=getattr(state, "leader_id", NO_LEADER),
            )
        )
        self._maybe_won_pre_vote(now_ms)

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
        others = {v for v in self.voters if v != self.local_id}
        leader = LeaderState(
            epoch,
            start,
            self.voters,
            self.local_id,
            check_quorum_deadline_ms=now_ms + self._check_quorum_timeout_ms(),
            replicas={v: ReplicaState() for v in self.voters},
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
        # LeaderState.timeUntilCheckQuorumExpires: a leader no majority fetched from steps down
        if len(state.fetched_since_check | {self.local_id}) >= majority(self.voters):
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
    def _silent_after_disk_loss(self, request: VoteRequest) -> bool:
        """A rejoining voter (see ``abstaining``) answers no candidate, not even with a refusal, which
        would end a pre-vote early as if the quorum had decided: it is as if still down."""
        return self.abstaining and not replication.UNSAFE_VOTE_AFTER_DISK_LOSS_FOR_TESTS

    def _handle_vote_request(self, now_ms: int, request: VoteRequest) -> VoteResponse:
        if request.candidate_id not in self.voters:
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
        request = VoteRequest(
            state.epoch + 1 if pre_vote else state.epoch,
            self.local_id,
            self.log.last_fetched_epoch,
            self.log.end_offset,
            pre_vote,
        )
        for voter in self.voters:
            if voter == self.local_id or voter in state.granted or voter in state.rejected:
                continue
            if now_ms < state.retry_at_ms.get(voter, 0):
                continue  # in flight (sent again after the request timeout) or backing off
            correlation = self._send(voter, request)
            state.in_flight[voter] = correlation
            state.retry_at_ms[voter] = now_ms + self.settings.request_timeout_ms

    # ---- BeginQuorumEpoch (53) and EndQuorumEpoch (54) -------------------------------------------------------
    def _handle_begin_quorum_epoch(
        self, now_ms: int, request: BeginQuorumEpochRequest
    ) -> BeginQuorumEpochResponse:
        if request.leader_id not in self.voters:
            return BeginQuorumEpochResponse(
                ErrorCode.inconsistent_voter_set, self.leader_id, self.state.epoch
            )
        if not is_usable_epoch(request.leader_epoch):
            # an epoch no voter can hold (one 2^31-1 would be raised past an int32 at the next election)
            return BeginQuorumEpochResponse(ErrorCode.invalid_request, self.leader_id, self.state.epoch)
        # a newer epoch, or the leader of ours (for a candidate or unattached voter), is followed
        self._observe_epoch(now_ms, request.leader_epoch, request.leader_id)
        return BeginQuorumEpochResponse(ErrorCode.none, self.leader_id, self.state.epoch)

    def _handle_end_quorum_epoch(
        self, now_ms: int, source: int, request: EndQuorumEpochRequest
    ) -> EndQuorumEpochResponse:
        if request.leader_id not in self.voters:
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

    # ---- plumbing ---------------------------------------------------------------------------------------------
    def _handle_response(self, now_ms: int, envelope: Envelope) -> None:
        message = envelope.message
        if isinstance(message, VoteResponse):
            self._handle_vote_response(now_ms, envelope.source, envelope.correlation_id, message)
        elif isinstance(message, FetchResponse):
            self._handle_fetch_response(now_ms, envelope.source, envelope.correlation_id, message)
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
        elif isinstance(state, LeaderState):
            for voter in sorted(state.non_acknowledging):
                if now_ms >= state.begin_retry_at_ms.get(voter, 0):
                    self._send(voter, BeginQuorumEpochRequest(self.local_id, state.epoch))
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
