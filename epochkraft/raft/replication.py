"""Fetch (1) of the metadata log in the Raft core, on the leader and on the follower (the replication half
of KafkaRaftClient), as a part of ``RaftClient``.

Leader: handleFetchRequest with validateOffsetAndEpoch (a DivergingEpoch from the epoch cache when the
follower's last fetched epoch does not end where it says), the fetch purgatory (a fetch at the log end
waits for an append, a high watermark move or its max wait), and LeaderState.maybeUpdateHighWatermark:
the majority's end offset, taken only once it is past the epoch's start offset, so a leader commits
nothing before an entry of its own epoch (its LeaderChangeMessage) is on a majority.
Follower: handleFetchResponse with truncateToEndOffset on divergence, appendAsFollower, and the
high watermark as the smaller of the leader's and its own log end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.log import ValidOffsetAndEpoch
from epochkraft.raft.messages import (
    DivergingEpoch,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    SnapshotRef,
)
from epochkraft.raft.quorum_state import (
    NO_LEADER,
    EpochState,
    FollowerState,
    LeaderState,
    ReplicaState,
    UnattachedState,
    is_usable_epoch,
    majority,
)
from epochkraft.raft.voter_set import ReplicaKey, VoterSet

if TYPE_CHECKING:
    from epochkraft.raft.log import RaftLog

# Test-only: the Raft paper's figure-8 bug. The leader counts replicas of any entry, so it commits an
# entry of an earlier epoch before one of its own epoch is on a majority. The simulator finds it.
UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS = False


class RaftSafetyError(Exception):
    """A rule Kafka enforces with an exception (such as truncating below the high watermark)."""


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """Kafka's controller.quorum.* settings (QuorumConfig) and KafkaRaftClient's fetch wait."""

    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # KafkaRaftClient's fetchMaxWaitMs
    fetch_max_records: int = 1000  # how many entries one Fetch answer carries at most


@dataclass(slots=True)
class _ParkedFetch:
    envelope: Envelope
    deadline_ms: int


class Replication:
    """The Fetch half of RaftClient; the attributes below are RaftClient's."""

    local_id: int
    local_key: ReplicaKey
    log: RaftLog
    settings: RaftSettings
    state: EpochState
    known_high_watermark: int | None
    bootstrap_servers: tuple[int, ...]
    _bootstrap_turn: int
    _parked: list[_ParkedFetch]

    def _observe_epoch(self, now_ms: int, epoch: int, leader_id: int) -> bool:
        raise NotImplementedError

    def _send(self, destination: int, message: Message) -> int:
        raise NotImplementedError

    def _reply(self, request: Envelope, message: Message) -> None:
        raise NotImplementedError

    @property
    def leader_id(self) -> int:
        raise NotImplementedError

    @property
    def voter_set(self) -> VoterSet:
        raise NotImplementedError

    @property
    def voters(self) -> tuple[int, ...]:
        raise NotImplementedError

    @property
    def is_voter(self) -> bool:
        raise NotImplementedError

    def _after_high_watermark(self, now_ms: int, state: LeaderState) -> None:
        raise NotImplementedError

    # ---- Fetch (1) on the leader ------------------------------------------------------------------------------
    def _handle_fetch_request(self, now_ms: int, envelope: Envelope) -> None:
        request = envelope.message
        assert isinstance(request, FetchRequest)
        state = self.state
        if (
            not is_usable_epoch(request.current_leader_epoch)
            or not 0 <= request.last_fetched_epoch <= request.current_leader_epoch
            or request.fetch_offset < 0
            or request.max_wait_ms < 0
        ):
            # handleFetchRequest: INVALID_REQUEST for a negative offset, wait or last epoch, or a last
            # epoch above the request's; an epoch no voter can hold is refused alike
            self._reply(envelope, self._fetch_error(ErrorCode.invalid_request))
            return
        if request.current_leader_epoch > state.epoch:
            self._observe_epoch(now_ms, request.current_leader_epoch, NO_LEADER)
            self._reply(envelope, self._fetch_error(ErrorCode.unknown_leader_epoch))
            return
        if not isinstance(state, LeaderState):
            self._reply(envelope, self._fetch_error(ErrorCode.not_leader_or_follower))
            return
        if request.current_leader_epoch < state.epoch:
            self._reply(envelope, self._fetch_error(ErrorCode.fenced_leader_epoch))
            return
        if request.last_fetched_epoch > state.epoch:
            self._reply(envelope, self._fetch_error(ErrorCode.invalid_request))
            return
        # KafkaRaftClient.handleFetchRequest: a snapshot to fetch first, or a DivergingEpoch to truncate to
        validated = self.log.validate_offset_and_epoch(request.fetch_offset, request.last_fetched_epoch)
        if validated.kind == ValidOffsetAndEpoch.SNAPSHOT:
            self._reply(envelope, self._snapshot_answer(state))
            return
        if validated.kind == ValidOffsetAndEpoch.DIVERGING:
            self._reply(
                envelope,
                FetchResponse(
                    ErrorCode.none,
                    self.local_id,
                    state.epoch,
                    state.high_watermark if state.high_watermark is not None else -1,
                    diverging_epoch=DivergingEpoch(validated.epoch, validated.offset),
                ),
            )
            return
        replica = ReplicaKey(request.replica_id, request.replica_directory_id)
        # LeaderState.updateReplicaState: a fetch counts for a voter only from that voter's replica key; a
        # replica on another disk (a new directory id) is an observer
        if request.replica_id in state.replicas and self.voter_set.is_voter(replica):
            state.replicas[request.replica_id].update_fetch_state(
                now_ms, request.fetch_offset, self.log.end_offset
            )
            state.non_acknowledging.discard(request.replica_id)
            state.begin_retry_at_ms.pop(request.replica_id, None)
            state.fetched_since_check.add(request.replica_id)
        elif request.replica_id >= 0:
            observer = state.observers.setdefault(replica, ReplicaState())
            observer.update_fetch_state(now_ms, request.fetch_offset, self.log.end_offset)
        self._update_high_watermark(now_ms, state)
        if request.fetch_offset < self.log.end_offset or request.max_wait_ms <= 0:
            self._complete_fetch(envelope, state)
        else:
            # fetchPurgatory: answered when the log or the high watermark moves, or at max wait
            self._parked.append(_ParkedFetch(envelope, now_ms + request.max_wait_ms))

    def _complete_fetch(self, envelope: Envelope, state: LeaderState) -> None:
        request = envelope.message
        assert isinstance(request, FetchRequest)
        records = self.log.read(request.fetch_offset, self.settings.fetch_max_records)
        hw = state.high_watermark if state.high_watermark is not None else -1
        self._reply(envelope, FetchResponse(ErrorCode.none, self.local_id, state.epoch, hw, records))

    def _snapshot_answer(self, state: LeaderState) -> FetchResponse:
        hw = state.high_watermark if state.high_watermark is not None else -1
        snapshot = SnapshotRef(self.log.start_offset, self.log.snapshot_epoch)
        return FetchResponse(ErrorCode.none, self.local_id, state.epoch, hw, snapshot_id=snapshot)

    def _fetch_error(self, error: ErrorCode) -> FetchResponse:
        return FetchResponse(error, self.leader_id, self.state.epoch, -1)

    def _leader_progress(self, now_ms: int, state: LeaderState) -> None:
        state.replicas[self.local_id].end_offset = self.log.end_offset
        self._update_high_watermark(now_ms, state)
        self._release_parked(now_ms, force=True)

    def _update_high_watermark(self, now_ms: int, state: LeaderState) -> None:
        state.replicas[self.local_id].end_offset = self.log.end_offset
        ends = sorted((state.replicas[v].end_offset for v in self.voters), reverse=True)
        candidate = ends[majority(self.voters) - 1]
        if candidate <= state.epoch_start_offset and not UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS:
            return
        known = self.known_high_watermark if self.known_high_watermark is not None else -1
        if UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS and candidate <= known:
            return  # the unsafe rule differs from Kafka's only in the epoch-start check, never moving back
        if state.high_watermark is None or candidate > state.high_watermark:
            state.high_watermark = candidate
            self._note_high_watermark(candidate)
            self._after_high_watermark(now_ms, state)
            self._release_parked(now_ms, force=True)

    def _note_high_watermark(self, hw: int) -> None:
        if self.known_high_watermark is None or hw > self.known_high_watermark:
            self.known_high_watermark = hw

    def _release_parked(self, now_ms: int, *, force: bool) -> None:
        state = self.state
        if not isinstance(state, LeaderState):
            self._parked.clear()
            return
        keep = []
        for parked in self._parked:
            if force or now_ms >= parked.deadline_ms:
                self._complete_fetch(parked.envelope, state)
            else:
                keep.append(parked)
        self._parked = keep

    # ---- Fetch (1) on the follower ----------------------------------------------------------------------------
    def _send_fetch(self, now_ms: int, state: FollowerState) -> None:
        if state.fetch_in_flight is not None:
            if now_ms < state.fetch_sent_ms + self.settings.request_timeout_ms:
                return
            state.fetch_in_flight = None  # lost: ask again
        if now_ms < state.next_fetch_ms or state.snapshot_wanted is not None:
            return
        state.fetch_in_flight = self._send(state.leader_id, self._fetch_request(state.epoch))
        state.fetch_sent_ms = now_ms

    def _fetch_request(self, epoch: int) -> FetchRequest:
        return FetchRequest(
            self.local_id,
            epoch,
            self.log.end_offset,
            self.log.last_fetched_epoch,
            self.settings.fetch_max_wait_ms,
            self.local_key.directory_id,
        )

    def _fetch_from_bootstrap(self, now_ms: int, state: UnattachedState) -> None:
        """KafkaRaftClient.maybeSendFetchToAnyBootstrap: an observer that knows no leader fetches from a
        bootstrap server; the answer names the leader (or a newer epoch), which it then follows."""
        state.election_deadline_ms = now_ms + self.settings.request_timeout_ms
        servers = [server for server in self.bootstrap_servers if server != self.local_id]
        if servers:
            self._send(servers[self._bootstrap_turn % len(servers)], self._fetch_request(state.epoch))
            self._bootstrap_turn += 1

    def _handle_fetch_response(
        self, now_ms: int, source: int, correlation_id: int, response: FetchResponse
    ) -> None:
        state = self.state
        if isinstance(state, UnattachedState) and not self.is_voter:
            # an observer's fetch from a bootstrap server: it learns the leader or a newer epoch
            self._observe_epoch(now_ms, response.leader_epoch, response.leader_id)
            return
        if not isinstance(state, FollowerState) or state.fetch_in_flight != correlation_id:
            return  # an answer to a request of an earlier state (testFetchResponseIgnoredAfterBecomingCandidate)
        state.fetch_in_flight = None
        if response.error_code != ErrorCode.none:
            self._handle_fetch_error(now_ms, state, response)
            return
        ignored = self._observe_epoch(now_ms, response.leader_epoch, response.leader_id)
        if self.state is not state:
            return
        if ignored:  # an older epoch's answer, or one naming an epoch or leader no voter can hold
            state.next_fetch_ms = now_ms + self.settings.retry_backoff_ms
            return
        state.has_fetched_from_leader = True
        state.fetch_deadline_ms = now_ms + self.settings.fetch_timeout_ms
        if response.snapshot_id is not None:
            # the driver fetches the snapshot (FetchSnapshot) and calls install_snapshot, or
            # snapshot_unavailable to fetch again (KafkaRaftClient.handleFetchResponse: snapshotId)
            state.snapshot_wanted = (response.snapshot_id.end_offset, response.snapshot_id.epoch)
            return
        if response.diverging_epoch is not None:
            # the log below the truncation point is not known to match yet (another round may truncate
            # further), so the high watermark waits for an answer without divergence, as in Kafka
            self._truncate_to_end_offset(state, response.diverging_epoch)
            return
        for entry in response.records:
            self.log.append(entry)
        if response.high_watermark >= 0:
            hw = min(response.high_watermark, self.log.end_offset)
            if state.high_watermark is None or hw > state.high_watermark:
                state.high_watermark = hw
                self._note_high_watermark(hw)

    def _handle_fetch_error(self, now_ms: int, state: FollowerState, response: FetchResponse) -> None:
        """KafkaRaftClient.handleFetchResponse with maybeHandleCommonResponse and RequestManager: an answer
        that moves this voter to another epoch or leader is handled; any other error, a top-level one
        included (the whole request failed, no epoch named: handleTopLevelError, as a disconnect answered
        by KafkaNetworkChannel), puts the leader's connection in backoff for
        controller.quorum.retry.backoff.ms before the next Fetch."""
        if response.leader_epoch >= 0:
            self._observe_epoch(now_ms, response.leader_epoch, response.leader_id)
            if self.state is not state:
                return
        # the same epoch and leader, or an answer ignored: the next Fetch waits the backoff either way
        state.next_fetch_ms = now_ms + self.settings.retry_backoff_ms

    # ---- snapshots, for a follower behind the leader's log start -----------------------------------------
    @property
    def snapshot_wanted(self) -> tuple[int, int] | None:
        """(end offset, epoch) of the snapshot the leader said to fetch; None: none wanted."""
        state = self.state
        return state.snapshot_wanted if isinstance(state, FollowerState) else None

    def install_snapshot(
        self,
        now_ms: int,
        end_offset: int,
        epoch: int,
        voters: VoterSet | None = None,
        kraft_version: int = 0,
    ) -> None:
        """The driver has the snapshot it was told to fetch, whole and durable: the log becomes it and
        fetching goes on from its end (KafkaRaftClient.handleFetchSnapshotResponse on the last chunk).
        ``voters`` and ``kraft_version``: its control records (KRaftControlRecordStateMachine reads them
        back from a snapshot); none in a static quorum's."""
        state = self.state
        if not isinstance(state, FollowerState) or state.snapshot_wanted != (end_offset, epoch):
            return
        self.log.install_snapshot(end_offset, epoch, voters, kraft_version)
        state.snapshot_wanted = None
        state.next_fetch_ms = now_ms
        if state.high_watermark is None or end_offset > state.high_watermark:
            state.high_watermark = end_offset  # a snapshot holds only committed entries
            self._note_high_watermark(end_offset)

    def snapshot_progress(self, now_ms: int) -> None:
        """A chunk of the wanted snapshot arrived from the leader: contact, as a fetch answer is
        (FetchSnapshot answers reset the fetch timer in KafkaRaftClient)."""
        state = self.state
        if isinstance(state, FollowerState) and state.snapshot_wanted is not None:
            state.fetch_deadline_ms = now_ms + self.settings.fetch_timeout_ms

    def snapshot_unavailable(self, now_ms: int) -> None:
        """The leader no longer has that snapshot (SNAPSHOT_NOT_FOUND) or it could not be read: fetch
        again after the backoff and be told the current one."""
        state = self.state
        if isinstance(state, FollowerState) and state.snapshot_wanted is not None:
            state.snapshot_wanted = None
            state.next_fetch_ms = now_ms + self.settings.retry_backoff_ms

    def _truncate_to_end_offset(self, state: FollowerState, diverging: DivergingEpoch) -> None:
        # ReplicatedLog.truncateToEndOffset: to the smaller of the leader's and our end of that epoch, or to
        # our end of the epoch before it when we hold none of it
        if diverging.epoch == 0:
            offset = min(diverging.end_offset, self.log.end_offset)
        else:
            local_epoch, local_end = self.log.end_offset_for_epoch(diverging.epoch)
            offset = min(local_end, diverging.end_offset) if local_epoch == diverging.epoch else local_end
        if state.high_watermark is not None and offset < state.high_watermark:
            raise RaftSafetyError(
                f"the leader asked voter {self.local_id} to truncate to {offset}, "
                f"below its high watermark {state.high_watermark}"
            )
        self.log.truncate_to(offset)
