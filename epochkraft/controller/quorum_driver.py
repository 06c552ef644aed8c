"""The async edge of a controller in a Raft quorum: drives the sans-IO Raft core (raft/client.py) and the
ControllerQuorum with the clock, the network and the disk.

Every step of the core runs the same way: call it with the time, let the ControllerQuorum publish what was
committed, write ``quorum-state`` if the step changed it, flush the log, then send. Requests to other
voters go over one KafkaClient each (Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch on their controller
listeners, kio-encoded by raft/wire.py); their answers are handed back to the core. Requests from other
voters arrive through the handlers (``exchange``) and are answered with what the core replies. A timer
wakes the core at its next deadline.

Writes from brokers and admin clients pass ``write``: one at a time, only on the active controller, and
answered once their records are committed (NOT_CONTROLLER otherwise), as QuorumController's write events
complete on commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kio.schema.begin_quorum_epoch.v1.response import BeginQuorumEpochResponse
from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse
from kio.schema.end_quorum_epoch.v1.response import EndQuorumEpochResponse
from kio.schema.fetch.v17.response import FetchResponse as KafkaFetchResponse
from kio.schema.update_raft_voter.v0.response import UpdateRaftVoterResponse
from kio.schema.vote.v2.response import VoteResponse
from structlog.typing import FilteringBoundLogger

from epochkraft.config import ConfigError, parse_host_port
from epochkraft.controller.quorum import ControllerQuorum
from epochkraft.metadata.fetch_snapshot import SnapshotUnavailable, fetch_snapshot
from epochkraft.metadata.snapshot import SnapshotId, decode_snapshot, snapshot_filename
from epochkraft.metadata.snapshot_file import write_snapshot_file
from epochkraft.metrics.documents import QuorumDescription
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.raft import wire
from epochkraft.raft.batches import read_membership
from epochkraft.raft.client import Output, RaftClient
from epochkraft.raft.describe_quorum import describe_quorum
from epochkraft.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    UpdateRaftVoterRequest,
    VoteRequest,
)
from epochkraft.raft.quorum_state import NO_LEADER, LeaderState, ReplicaState
from epochkraft.raft.state_store import FileQuorumStateStore
from epochkraft.raft.voter_set import Endpoint, Endpoints, ReplicaKey

T = TypeVar("T")
BOOTSTRAP_ID_BASE = -2  # the core's id of the first bootstrap server (Kafka's bootstrap nodes: -2, -3, ...)
EXCHANGE_TIMEOUT_S = 30.0


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters``: ``id@host:port`` separated by commas."""
    voters: dict[int, tuple[str, int]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        node, sep, address = item.partition("@")
        if not sep:
            raise ConfigError(f"controller.quorum.voters: {item!r} is not id@host:port")
        try:
            voter = int(node)
        except ValueError as exc:
            raise ConfigError(f"controller.quorum.voters: {node!r} is not a node id") from exc
        if voter < 0 or voter in voters:
            raise ConfigError(f"controller.quorum.voters: node id {voter} negative or repeated")
        voters[voter] = parse_host_port(address)
    if not voters:
        raise ConfigError("controller.quorum.voters is empty")
    return voters


class QuorumDriver:
    gates_reads = False  # the requests any voter answers (Fetch, Vote, ...) do not pass its write gate

    def __init__(
        self,
        quorum: ControllerQuorum,
        store: FileQuorumStateStore | None,
        voters: dict[int, tuple[str, int]],
        cluster_id: str,
        log: FilteringBoundLogger,
        ssl_context: ssl.SSLContext | None = None,
        request_timeout_ms: int = 5000,
        *,
        bootstrap: tuple[tuple[str, int], ...] = (),
        listener_name: str = "",
        local_endpoints: Endpoints = (),
        overrides: dict[int, tuple[str, int]] | None = None,
    ) -> None:
        """``voters``: a static quorum's addresses (controller.quorum.voters); a dynamic quorum reaches its
        voters on the endpoints of the voter set in its log, and ``bootstrap`` (controller.quorum
        .bootstrap.servers, the core's ids -2, -3, ... as Kafka's bootstrap nodes) until it knows a leader.
        ``listener_name``: the controller listener whose endpoints are used; ``local_endpoints``: this
        controller's own (what it tells others); ``overrides``: addresses that take the place of a
        controller's endpoints (fault injection: a proxy per link)."""
        self.quorum = quorum
        self.raft: RaftClient = quorum.raft
        self.store = store
        self.cluster_id = cluster_id
        self.log = log
        self.local_id = self.raft.local_id
        self.voters = voters
        self.bootstrap = bootstrap
        self.listener_name = listener_name
        self.local_endpoints = local_endpoints
        self.overrides = overrides or {}
        self.learned: dict[int, tuple[str, int]] = {}  # leaders' addresses from Fetch answers (NodeEndpoints)
        self.ssl_context = ssl_context
        self.request_timeout_ms = request_timeout_ms
        self.clients: dict[tuple[str, int], KafkaClient] = {}
        self._incoming_ids = itertools.count(1 << 40)  # apart from the core's own correlation ids
        self._replies: dict[tuple[int, int], asyncio.Future[Message]] = {}
        self._commit_waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._write_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.failure: BaseException | None = None
        self._snapshot_fetch: asyncio.Future[None] | None = None
        self.installed: list[Callable[[SnapshotId], None]] = []  # told of each snapshot installed
        self.role = self.raft.role
        self.leader_id = self.raft.leader_id

    # ---- where the other controllers are -------------------------------------------------------------------
    def endpoints_of(self, node: int) -> Endpoints:
        """A controller's endpoints as this one knows them: its own, the voter set's, or a static voter's."""
        if node == self.local_id and self.local_endpoints:
            return self.local_endpoints
        endpoints = self.raft.voter_set.endpoints_of(node)
        if endpoints:
            return endpoints
        address = self.voters.get(node) or self.learned.get(node)
        return () if address is None else (Endpoint(self.listener_name or "CONTROLLER", *address),)

    def _directory_of(self, voter: int) -> uuid.UUID | None:
        key = self.raft.voter_set.key_of(voter)
        return None if key is None else key.directory_id

    def address_of(self, node: int) -> tuple[str, int] | None:
        if node <= BOOTSTRAP_ID_BASE:  # -2, -3, ...: a bootstrap server
            index = BOOTSTRAP_ID_BASE - node
            return self.bootstrap[index] if index < len(self.bootstrap) else None
        endpoint = wire.pick_endpoint(self.endpoints_of(node), self.listener_name)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def client_for(self, node: int) -> KafkaClient | None:
        if node == self.local_id:
            return None
        address = self.overrides.get(node) or self.address_of(node)
        if address is None:
            return None
        client = self.clients.get(address)
        if client is None:
            client = self.clients[address] = KafkaClient(
                address[0],
                address[1],
                client_id=f"controller-{self.local_id}-raft",
                request_timeout_ms=self.request_timeout_ms,
                connect_timeout_ms=min(self.request_timeout_ms, 2000),
                ssl_context=self.ssl_context,
            )
        return client

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    # ---- stepping the core --------------------------------------------------------------------------------
    def step(self, call: Callable[[RaftClient, int], Output]) -> None:
        try:
            self._step(call)
        except Exception as exc:
            # the core has moved on and what it owed may be lost (a quorum-state not written, say),
            # wherever the step ran (a handler's exchange too): the driver stops, ``run`` raises it and
            # the daemon exits non-zero
            if self.failure is None:
                self.failure = exc
            self._wake.set()
            raise

    def _step(self, call: Callable[[RaftClient, int], Output]) -> None:
        now = self.now_ms()
        output = self.quorum.after(now, call(self.raft, now))
        if output.persist is not None and self.store is not None:
            self.store.write(output.persist)
        self.quorum.log.flush()
        for envelope in output.sends:
            if envelope.is_response:
                waiter = self._replies.pop((envelope.destination, envelope.correlation_id), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(envelope.message)
            else:
                self._spawn(self._send(envelope))
        self._settle_commits()
        wanted = self.raft.snapshot_wanted
        if wanted is not None and self._snapshot_fetch is None:
            self._snapshot_fetch = asyncio.ensure_future(self._fetch_snapshot(wanted))
            self._snapshot_fetch.add_done_callback(self._sent)
        if (self.raft.role, self.raft.leader_id) != (self.role, self.leader_id):
            self.role, self.leader_id = self.raft.role, self.raft.leader_id
            self.log.info(
                "quorum role",
                role=self.role,
                epoch=self.raft.epoch,
                leader=self.leader_id,
                active=self.quorum.active,
            )
        self._wake.set()

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # a step that failed on an answer: the core's state can no longer be trusted; ``run`` raises
            # it, and the daemon logs it and stops
            self.failure = exc
            self._wake.set()

    async def _send(self, envelope: Envelope) -> None:
        client = self.client_for(envelope.destination)
        if client is None:
            return
        message = envelope.message
        answer: Message
        try:
            answer = await self._exchange(client, message, envelope.destination)
        except (NetworkError, ProtocolError, OSError, wire.InvalidRaftRequest) as exc:
            self.log.debug(
                "raft request failed", to=envelope.destination, api=type(message).__name__, error=str(exc)
            )
            if not isinstance(message, FetchRequest):
                return  # no answer: the core's own timers retry (as a lost message in the simulator)
            # A failed Fetch is answered with a top-level error at once, so the follower asks again after
            # its retry backoff rather than at the request timeout (KafkaNetworkChannel.sendOnComplete
            # answers a disconnect with BROKER_NOT_AVAILABLE).
            answer = FetchResponse(ErrorCode.broker_not_available, NO_LEADER, -1, -1)
        reply = Envelope(
            envelope.destination, self.local_id, envelope.correlation_id, answer, is_response=True
        )
        self.step(lambda raft, now: raft.handle(now, reply))

    async def _exchange(self, client: KafkaClient, message: Message, destination: int) -> Message:
        """``message`` sent as its Kafka request, and the answer as the core's message."""
        if isinstance(message, VoteRequest):
            vote = wire.encode_vote_request(message, self.cluster_id, destination)
            return wire.decode_vote_response(await client.send(vote, VoteResponse))
        if isinstance(message, BeginQuorumEpochRequest):
            begin = wire.encode_begin_quorum_epoch_request(
                message, self.cluster_id, destination, self.endpoints_of(self.local_id)
            )
            answer = await client.send(begin, BeginQuorumEpochResponse)
            return wire.decode_begin_quorum_epoch_response(answer)
        if isinstance(message, EndQuorumEpochRequest):
            end = wire.encode_end_quorum_epoch_request(
                message, self.cluster_id, self._directory_of, self.endpoints_of(self.local_id)
            )
            return wire.decode_end_quorum_epoch_response(await client.send(end, EndQuorumEpochResponse))
        if isinstance(message, FetchRequest):
            fetched = await client.send(
                wire.encode_fetch_request(message, self.cluster_id), KafkaFetchResponse
            )
            for node in fetched.node_endpoints:
                if node.node_id >= 0:
                    self.learned[node.node_id] = (node.host, node.port)
            return wire.decode_fetch_response(fetched)
        if isinstance(message, UpdateRaftVoterRequest):
            update = wire.encode_update_raft_voter_request(message, self.cluster_id)
            return wire.decode_update_raft_voter_response(await client.send(update, UpdateRaftVoterResponse))
        raise TypeError(f"not a request: {type(message).__name__}")

    async def _fetch_snapshot(self, wanted: tuple[int, int]) -> None:
        """The snapshot the leader named, fetched with FetchSnapshot, made durable, installed: the
        controller's state, the log brokers fetch and the Raft log then start at its end."""
        snapshot_id = SnapshotId(*wanted)
        client = self.client_for(self.raft.leader_id)
        directory = self.quorum.log.directory
        try:
            if client is None or directory is None:
                raise SnapshotUnavailable("no leader to fetch it from, or no data dir")
            data = await fetch_snapshot(
                client.send,
                snapshot_id,
                cluster_id=self.cluster_id,
                replica_id=self.local_id,
                leader_epoch=self.raft.epoch,
                progress=lambda: self.raft.snapshot_progress(self.now_ms()),
                directory_id=self.raft.local_key.directory_id,
            )
            snapshot = decode_snapshot(data, snapshot_id)
            await asyncio.to_thread(write_snapshot_file, directory, snapshot_id, [data])
        except (NetworkError, ProtocolError, OSError) as exc:
            self.log.warning("snapshot fetch failed", snapshot=str(snapshot_id), error=str(exc))
            self._snapshot_fetch = None

            def unavailable(raft: RaftClient, now: int) -> Output:
                raft.snapshot_unavailable(now)
                return raft.poll(now)

            self.step(unavailable)
            return
        self._snapshot_fetch = None
        if self.raft.snapshot_wanted != wanted:
            return  # the state moved on meanwhile: the next fetch says what is wanted now
        self.quorum.install(snapshot)
        voters, kraft_version = read_membership(snapshot.membership)

        def install(raft: RaftClient, now: int) -> Output:
            raft.install_snapshot(now, *wanted, voters, kraft_version)
            return raft.poll(now)

        self.step(install)
        self.log.info(
            "metadata snapshot installed", file=snapshot_filename(snapshot_id), records=len(snapshot.records)
        )
        for listener in self.installed:
            listener(snapshot_id)

    async def exchange(self, source: int, request: Message) -> Message:
        """A request from voter ``source`` through the core; returns the core's answer (a Fetch may be
        parked until the log moves or its max wait ends)."""
        correlation_id = next(self._incoming_ids)
        waiter: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._replies[(source, correlation_id)] = waiter
        envelope = Envelope(source, self.local_id, correlation_id, request)
        try:
            self.step(lambda raft, now: raft.handle(now, envelope))
            return await asyncio.wait_for(waiter, EXCHANGE_TIMEOUT_S)
        finally:
            self._replies.pop((source, correlation_id), None)

    async def run(self, stop: asyncio.Event) -> None:
        """Polls the core at its deadlines until ``stop``; raises what a step on an answer raised."""
        while not stop.is_set():
            if self.failure is not None:
                raise self.failure
            self._wake.clear()
            delay = max(self.raft.next_deadline_ms() - self.now_ms(), 0) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(delay, 1.0))
            self.step(lambda raft, now: raft.poll(now))

    async def resign(self, grace_s: float = 0.5) -> None:
        """Graceful shutdown of a leader: EndQuorumEpoch to the others, given a moment to go out."""
        if self.raft.is_leader:
            self.step(lambda raft, now: raft.resign(now))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), grace_s)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for client in self.clients.values():
            with contextlib.suppress(Exception):
                await client.close()
        self._fail_commits()

    # ---- writes through the active controller -------------------------------------------------------------
    async def write(
        self,
        call: Callable[[], Awaitable[T]],
        refuse: Callable[[ErrorCode], T],
        decided: Callable[[], None] = lambda: None,
    ) -> T:
        """Runs ``call`` (a handler that may append records) as the active controller and answers once
        what it appended is committed; ``refuse(NOT_CONTROLLER)`` when this controller is not active or
        loses leadership first. ``decided`` is not called: writes are committed one at a time under the
        lock anyway, and releasing the connection's next request early would let a request any voter
        answers (ApiVersions' finalized features, DescribeCluster) read a decision not yet committed."""
        del decided
        async with self._write_lock:
            if not self.quorum.active:
                return refuse(ErrorCode.not_controller)
            answer = await call()
            end = self.quorum.log.end_offset
            if self.quorum.committed(end):
                return answer
            self.step(lambda raft, now: raft.poll(now))  # sends what the append released
            if not await self.wait_committed(end):
                return refuse(ErrorCode.not_controller)
            return answer

    async def wait_committed(self, offset: int) -> bool:
        """True once every entry below ``offset`` is committed; False when leadership goes first."""
        if self.quorum.committed(offset):
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._commit_waiters.append((offset, waiter))
        return await waiter

    def _settle_commits(self) -> None:
        if not self._commit_waiters:
            return
        if not self.quorum.active:
            self._fail_commits()
            return
        still = []
        for offset, waiter in self._commit_waiters:
            if self.quorum.committed(offset):
                if not waiter.done():
                    waiter.set_result(True)
            else:
                still.append((offset, waiter))
        self._commit_waiters = still

    def _fail_commits(self) -> None:
        for _offset, waiter in self._commit_waiters:
            if not waiter.done():
                waiter.set_result(False)
        self._commit_waiters = []

    def observe(self, broker_id: int, fetch_offset: int) -> None:
        """A broker fetching the committed log: an observer in the leader's DescribeQuorum answer (Kafka's
        brokers fetch from the leader as observers; ours may fetch from any voter, and the leader counts
        those that fetch from it)."""
        state = self.raft.state
        if isinstance(state, LeaderState):
            replica = state.observers.setdefault(ReplicaKey(broker_id), ReplicaState())
            replica.update_fetch_state(self.now_ms(), fetch_offset, self.quorum.applied)

    def describe_quorum(self, now_ms: int) -> DescribeQuorumResponse:
        """DescribeQuorum's answer, offsets as they are (Kafka's: the Raft log's offsets are its own)."""
        return describe_quorum(self.raft, now_ms, self.endpoints_of)

    def describe(self) -> QuorumDescription:
        return {
            "node_id": self.local_id,
            "role": self.raft.role,
            "epoch": self.raft.epoch,
            "leader": self.raft.leader_id,
            "active": self.quorum.active,
            "high_watermark": self.raft.high_watermark,
            "log_end_offset": self.quorum.log.end_offset,
            "voters": list(self.raft.voters),
        }
