"""A test context for the Raft core in the style of Kafka's RaftClientTestContext: one RaftClient,
a clock the test moves, requests and responses delivered by hand, and what it sent collected."""

from __future__ import annotations

import random
import uuid
from typing import TypeVar

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.client import RaftClient
from epochkraft.raft.log import LeaderChangeMessage, LogEntry, RaftLog
from epochkraft.raft.messages import (
    BeginQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from epochkraft.raft.quorum_state import QuorumStateData
from epochkraft.raft.replication import RaftSettings
from epochkraft.raft.voter_set import Endpoints, VoterSet

M = TypeVar("M")

SETTINGS = RaftSettings(
    election_timeout_ms=1000,
    fetch_timeout_ms=2000,
    election_backoff_max_ms=500,
    request_timeout_ms=2000,
    retry_backoff_ms=20,
    fetch_max_wait_ms=500,
)


class RaftTestContext:
    def __init__(
        self,
        local_id: int = 1,
        voters: tuple[int, ...] = (1, 2, 3),
        *,
        log: list[tuple[int, bytes]] | None = None,
        persisted: QuorumStateData | None = None,
        settings: RaftSettings = SETTINGS,
        directory_id: uuid.UUID | None = None,
        bootstrap: VoterSet | None = None,
        local_endpoints: Endpoints = (),
    ) -> None:
        """``bootstrap``: a dynamic quorum, the log formatted with these initial voters (no static ones)."""
        self.now_ms = 0
        self.log = RaftLog()
        if bootstrap is not None:
            self.log.bootstrap(bootstrap)
            voters = ()
        for epoch, value in log or []:
            self.log.append(LogEntry(epoch, value))
        self.client = RaftClient(
            local_id,
            voters,
            self.log,
            self.now_ms,
            persisted=persisted,
            settings=settings,
            rng=random.Random(0),
            directory_id=directory_id,
            bootstrap_servers=bootstrap.ids if bootstrap is not None else (),
            local_endpoints=local_endpoints,
        )
        self.local_id = local_id
        self.voters = voters
        self.sent: list[Envelope] = []
        self.persisted: list[QuorumStateData] = []
        self._correlation = 1000

    # ---- driving ----------------------------------------------------------------------------------------
    def _collect(self, output) -> None:
        if output.persist is not None:
            self.persisted.append(output.persist)
        self.sent.extend(output.sends)

    def poll(self, advance_ms: int = 0) -> None:
        self.now_ms += advance_ms
        self._collect(self.client.poll(self.now_ms))

    def poll_until_deadline(self) -> None:
        self.now_ms = max(self.now_ms, self.client.next_deadline_ms())
        self._collect(self.client.poll(self.now_ms))

    def resign(self) -> None:
        self._collect(self.client.resign(self.now_ms))

    def deliver(self, source: int, message: Message) -> int:
        self._correlation += 1
        self._collect(
            self.client.handle(self.now_ms, Envelope(source, self.local_id, self._correlation, message))
        )
        return self._correlation

    def respond(self, request: Envelope, message: Message) -> None:
        envelope = Envelope(request.destination, self.local_id, request.correlation_id, message, True)
        self._collect(self.client.handle(self.now_ms, envelope))

    def take(self, kind: type[M], destination: int | None = None) -> list[Envelope]:
        taken = [
            e
            for e in self.sent
            if isinstance(e.message, kind) and (destination is None or e.destination == destination)
        ]
        self.sent = [e for e in self.sent if e not in taken]
        return taken

    def reply_to(self, correlation_id: int) -> Message:
        replies = [e for e in self.sent if e.is_response and e.correlation_id == correlation_id]
        assert len(replies) == 1, self.sent
        self.sent.remove(replies[0])
        return replies[0].message

    # ---- domain verbs -------------------------------------------------------------------------------------
    def become_candidate(self) -> None:
        """Election timeout, then pre-votes granted by the other voters: a candidate in epoch + 1."""
        self.poll_until_deadline()
        assert self.client.role == "prospective", self.client.role
        for request in self.take(VoteRequest):
            assert request.message.pre_vote
            self.respond(request, VoteResponse(ErrorCode.none, -1, self.client.epoch, True))
        assert self.client.role == "candidate", self.client.role

    def become_leader(self) -> None:
        self.become_candidate()
        for request in self.take(VoteRequest):
            assert not request.message.pre_vote
            self.respond(request, VoteResponse(ErrorCode.none, -1, self.client.epoch, True))
        assert self.client.is_leader

    def acknowledge_begin_quorum(self) -> None:
        from epochkraft.raft.messages import BeginQuorumEpochRequest

        for request in self.take(BeginQuorumEpochRequest):
            self.respond(request, BeginQuorumEpochResponse(ErrorCode.none, self.local_id, self.client.epoch))

    def fetch_from(
        self,
        replica: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        max_wait_ms: int = 0,
        directory_id: uuid.UUID | None = None,
    ) -> FetchResponse:
        request = FetchRequest(
            replica, self.client.epoch, fetch_offset, last_fetched_epoch, max_wait_ms, directory_id
        )
        correlation = self.deliver(replica, request)
        reply = self.reply_to(correlation)
        assert isinstance(reply, FetchResponse)
        return reply


def leader_change(epoch: int, leader: int, voters: tuple[int, ...] = (1, 2, 3)) -> LogEntry:
    return LogEntry(epoch, LeaderChangeMessage(leader, voters))
