"""Asyncio Kafka protocol server: frames in, one handler per API key, responses out in request order.

Each connection is an ``asyncio.BufferedProtocol`` receiving straight into a sans-IO FrameDecoder's
buffers. Responses are written strictly in request order, as Kafka requires. A client's requests run one at
a time per connection, as Kafka's SocketServer reads one request per connection at a time (the channel is
muted until its response is sent; a producer's Produce requests pipeline, up to PRODUCE_PIPELINE; on a
controller, a request that has decided and waits only for its records to be durable no longer holds the next
back, so a broker's forwarded requests share fsyncs), and at most REQUESTS_STARTED_PER_TURN of them start in one turn of the
event loop, as Kafka's bounded request queue is served by num.io.threads: asyncio runs every ready callback
before it polls the sockets again, so a pipelining flood would otherwise make one turn take seconds and
hold back the broker's heartbeat answers and its replica fetches with it. The daemons' own requests (the
cluster actions, a follower's Fetch) are neither held nor queued: a Raft or follower long poll must not
stall the requests behind it. Connections are
limited per listener (max.connections) and per client address (max.connections.per.ip and its
overrides); the last slots are kept for the daemons' own clients, so a flood of connections cannot keep
a follower or a broker's registration out. On a broker the rate of new connections is limited too
(KIP-612, broker/connection_quotas.py): each listening socket has an accept loop of its own, as Kafka's
Acceptor, which over the broker's or its listener's rate waits before it serves the connection it took and
takes the next (those behind it wait in the kernel's listen backlog); a connection over its address's rate
is closed after that address's throttle time. Hostile input never reaches beyond its connection: a malformed frame, an unknown API key or version, or an oversized size prefix closes that connection
after one log line (ApiVersions at an unknown version is answered instead, per KIP-511). A request that decoded but whose handler raised gets its error response (UNKNOWN_SERVER_ERROR,
as Kafka's ``getErrorResponse``) and the connection stays open; identical failures are logged once a minute.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Generic, Literal, TypeAlias, TypeVar, overload

import structlog
from kio.static.primitive import i32Timedelta
from kio.static.protocol import RequestPayload, ResponsePayload
from structlog.typing import FilteringBoundLogger

from epochkraft.broker.client_quotas import ClientQuotas
from epochkraft.broker.connection_quotas import ConnectionQuotas
from epochkraft.net.failure_log import FailureLog, failure_key
from epochkraft.protocol.api import ApiSpec
from epochkraft.protocol.error_response import error_response
from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.protocol.framing import (
    API_VERSIONS_KEY,
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    decode_request_body,
    encode_entity,
    encode_response,
    encode_response_entity,
    encode_response_pieces,
    parse_request_header,
    response_class,
)
from epochkraft.security.principal import ANONYMOUS, principal_from_peer_certificate
from epochkraft.security.sasl import PRE_AUTHENTICATION_APIS, SaslServerSession
from epochkraft.server.apis import BrokerApis, ControllerApis
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers import k01_fetch, served
from epochkraft.server.request_rules import listener_refusal

if TYPE_CHECKING:
    from epochkraft.controller.group_commit import GroupCommit
    from epochkraft.controller.quorum_driver import QuorumDriver

MAX_IN_FLIGHT_PER_CONNECTION = 64  # requests read but not answered, before the connection is not read
# Client requests started in one turn of the event loop, across connections (Kafka's num.io.threads, 8): a
# turn then takes a few requests' time, whatever the number of connections flooding.
REQUESTS_STARTED_PER_TURN = 8
# A connection's Produce requests that may run at once while no quota is set: as many as it may have read.
# librdkafka pipelines Produce without bound (max.in.flight 1,000,000; 5 when idempotent) and a turn of the
# event loop per batch cost it about half its throughput in scripts/bench --parts produce (RF 3 acks=all
# 1 KiB: 54.6 MB/s before, 23.7 one at a time, 26.7 five at a time, 68.0 with this; a loaded machine).
PRODUCE_PIPELINE = MAX_IN_FLIGHT_PER_CONNECTION
QUIET_RELEASE_S = 10.0  # a connection quiet this long gives back its receive buffers
UNLIMITED = 2**31 - 1  # Kafka's default max.connections.per.ip
LISTEN_BACKLOG = 1024  # connections the kernel holds for a listener's accept loop
ACCEPT_RETRY_S = 1.0  # out of file handles: the accept loop waits this long, as asyncio's servers
# Request frames larger than this for APIs whose real requests are small (a list of names) close the
# connection, as an oversized frame does: decoding and answering e.g. a Metadata request naming a million
# topics would hold the event loop for seconds (512 KiB: about 12,000 topic names, 0.2 s here).
MAX_REQUEST_BYTES_PER_API = {
    18: 64 * 1024,  # ApiVersions
    3: 512 * 1024,  # Metadata
    10: 512 * 1024,  # FindCoordinator
    15: 512 * 1024,  # DescribeGroups
    20: 512 * 1024,  # DeleteTopics
}
# Client ids the daemons' own clients use (replica fetchers; a broker's controller and metadata clients):
# the reserved connection slots admit only these, so a flood of clients cannot lock out replication.
INTER_BROKER_CLIENT_PREFIXES = ("replica-fetcher-", "broker-")
Response = bytes | list[bytes | memoryview] | None  # an encoded response frame, whole or in pieces
# What a handler answers: its response, or its body already encoded (whole or in pieces, on a hot path), or
# nothing (Produce with acks=0)
Answer: TypeAlias = ResponsePayload | bytes | list[bytes | memoryview] | None
T = TypeVar("T")

# Requests no client quota measures or throttles: ApiVersions and SASL come before a client is known, and
# the cluster actions of Kafka's ApiKeys (clusterAction: the brokers' and controllers' own requests), which
# Kafka answers with sendResponseExemptThrottle.
CLUSTER_ACTIONS = frozenset({4, 5, 6, 7, 27, 52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82})
UNTHROTTLED_APIS = frozenset({17, 18, 36}) | CLUSTER_ACTIONS
ADD_PARTITIONS_TO_TXN_KEY = 24
BROKER_ADD_PARTITIONS_FROM = 4  # v4+ carries a broker's batch of transactions (a cluster action, KIP-890)
PRODUCE_KEY, FETCH_KEY = 0, 1
_THROTTLE_FIELD = struct.Struct(">i")  # a Fetch response body opens with throttle_time_ms
# Tests only: client quotas are measured but never enforced (no throttle time answered, no connection muted),
# so a test can show its checks catch a broker that does not throttle. A daemon takes it from the environment
# variable of the same name.
UNSAFE_NO_QUOTA_ENFORCEMENT_FOR_TESTS = os.environ.get("UNSAFE_NO_QUOTA_ENFORCEMENT_FOR_TESTS") == "1"

# Fetch of the committed metadata log, ApiVersions, SASL, DescribeCluster (the cluster id a broker asks
# for first), the Raft RPCs, DescribeQuorum and FetchSnapshot: answered by every controller of a quorum,
# active or not.
ANY_VOTER_ANSWERS = frozenset({1, 17, 18, 36, 52, 53, 54, 55, 59, 60})


def parse_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: ``ADDRESS:COUNT,...`` (the count after the last colon, so IPv6
    addresses work) -> {address: count}; ValueError on a malformed entry."""
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        address, sep, count = item.rpartition(":")
        if not sep or not address or not count.isdigit():
            raise ValueError(f"max.connections.per.ip.overrides entry {item!r} is not ADDRESS:COUNT")
        overrides[address] = int(count)
    return overrides


class KafkaServer:
    """One listener (``broker`` or ``controller``) bound to host:port, dispatching to ``node``."""

    def __init__(
        self,
        listener: str,
        node: BrokerApis | ControllerApis,
        host: str,
        port: int,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_connections: int = 1000,
        idle_timeout_ms: int = 600_000,
        log: FilteringBoundLogger | None = None,
        listener_name: str = "PLAINTEXT",
        max_connections_per_ip: int = UNLIMITED,
        max_connections_per_ip_overrides: dict[str, int] | None = None,
        reserved_connections: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        sasl: Callable[[], SaslServerSession] | None = None,
        quotas: ClientQuotas | None = None,
        connection_quotas: ConnectionQuotas | None = None,
        turns: TurnGate | None = None,
        listen_backlog: int = LISTEN_BACKLOG,
    ) -> None:
        """``turns``: the gate client requests start through, shared by a daemon's listeners (one event
        loop); a gate of its own by default. ``listen_backlog``: connections the kernel holds while the
        accept loop waits (Kafka's socket.listen.backlog.size)."""
        self.listener = listener
        self.ssl_context = ssl_context  # an SSL or SASL_SSL listener
        self.sasl = sasl  # a SASL listener: a new session per connection
        self.listener_name = listener_name  # the named listener (listeners property) it serves
        self.quotas = quotas  # the daemon's client quotas (None: nothing is throttled)
        self.connection_quotas = connection_quotas  # a broker's connection creation rates (KIP-612)
        self.delayed_connections = 0  # served late: over a creation rate, the accept loop waited
        self.throttled_connections = 0  # closed after a delay: over their address's creation rate
        self.node = node
        self.host = host
        self.requested_port = port
        self.listen_backlog = listen_backlog
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.max_connections_per_ip_overrides = max_connections_per_ip_overrides or {}
        self.reserved_connections = min(reserved_connections, max_connections)
        self.connections_per_ip: dict[str, int] = {}
        self.unidentified: dict[
            _Connection, None
        ] = {}  # reserved slots before their first request, oldest first
        self.refused_connections = 0
        self.idle_timeout_ms = idle_timeout_ms
        self.log = log or structlog.get_logger().bind(listener=listener)
        self.apis: dict[int, ApiSpec] = served(listener)
        self.connections: set[_Connection] = set()
        self._sockets: list[socket.socket] = []  # bound, listening once serving
        self._accept_tasks: list[asyncio.Task[None]] = []
        self._handing: dict[asyncio.Task[None], socket.socket] = {}  # to their protocol (a TLS handshake)
        self.throttled_sockets: dict[socket.socket, asyncio.TimerHandle] = {}  # closed after their throttle
        self._idle_task: asyncio.Task[None] | None = None
        self.requests_served = 0
        self.failures = FailureLog()
        self.turns = turns or TurnGate()

    def ip_limit(self, ip: str) -> int:
        return self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)

    def refuse(self, conn: _Connection, reason: str) -> None:
        """Closes a connection over a limit; logged once a minute per reason, whatever the flood."""
        self.refused_connections += 1
        suppressed = self.failures.admit(("connection", 0, reason, ""), time.monotonic())
        if suppressed is not None:
            self.log.warning("connection refused", reason=reason, refused_since_last=suppressed)
        conn.close(reason, quiet=True)

    @property
    def port(self) -> int:
        assert self._sockets, "server not started"
        return int(self._sockets[0].getsockname()[1])

    async def start(self, serving: bool = True) -> None:
        """Binds the listener; with ``serving`` False the port is bound but not listening (a client's
        connection is refused, as by a broker that is down) until ``start_serving``: a broker binds first to
        register its ports, then serves once caught up."""
        self._sockets = await _bind(self.host, self.requested_port)
        self._idle_task = asyncio.create_task(self._close_idle_connections(), name=f"{self.listener}-idle")
        if serving:
            await self.start_serving()

    async def start_serving(self) -> None:
        assert self._sockets, "server not started"
        if self._accept_tasks:
            return
        for sock in self._sockets:
            sock.listen(self.listen_backlog)
            task = asyncio.create_task(self._accept_loop(sock), name=f"{self.listener}-accept")
            self._accept_tasks.append(task)

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
        # A connection being handed over is closed by asyncio when cancelled, unless its task never started.
        tasks, handing = [*self._accept_tasks, *self._handing], [*self._handing.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sock in [*self._sockets, *handing]:
            sock.close()
        for sock, timer in self.throttled_sockets.items():
            timer.cancel()
            sock.close()
        self._accept_tasks.clear()
        self._handing.clear()
        self.throttled_sockets.clear()
        for conn in list(self.connections):
            conn.close("server stopping", quiet=True)

    # ---- accepting (Kafka's Acceptor) -------------------------------------------------------------------
    async def _accept_loop(self, sock: socket.socket) -> None:
        """Takes one connection at a time; over a creation rate it waits before it serves that connection and
        takes the next, so the connections behind it wait in the kernel's listen backlog, holding no slot,
        file handle or memory here; when the backlog is full the kernel takes no more, so a flood delays a
        later connection by the backlog's worth at most."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(sock)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as exc:  # out of file handles, say: the connections wait in the backlog meanwhile
                self._accept_failed(exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            try:
                admitted = await self._admitted(conn, str(address[0]))
            except BaseException:  # stopped while waiting
                conn.close()
                raise
            if admitted:
                task = asyncio.create_task(self._hand_over(conn), name=f"{self.listener}-connection")
                self._handing[task] = conn
                task.add_done_callback(lambda done: self._handing.pop(done, None))

    async def _admitted(self, conn: socket.socket, ip: str) -> bool:
        """Kafka's ConnectionQuotas.inc on a broker's listener: the connection counted in the creation rates
        now; over the broker's or this listener's, the accept loop waits the throttle time before serving it
        (waitForConnectionSlot); over its address's, it is closed once that throttle time is over (False)."""
        quotas = self.connection_quotas
        if quotas is None:
            return True
        wait_ms = quotas.record_connection(self.listener_name, _now_ms())
        if wait_ms:
            self.delayed_connections += 1
            await asyncio.sleep(wait_ms / 1000)
        throttle_ms = quotas.record_ip(self.listener_name, ip, _now_ms())
        if not throttle_ms:
            return True
        self.throttled_connections += 1
        suppressed = self.failures.admit(("connection", 0, "creation rate", ""), time.monotonic())
        if suppressed is not None:
            reason = f"connection_creation_rate {quotas.ip_rate(ip)} of {ip} exceeded"
            self.log.info("connection throttled", reason=reason, throttled_since_last=suppressed)
        # Kafka's DelayedCloseSocket: nothing is read; closed once the throttle time is over.
        timer = asyncio.get_running_loop().call_later(throttle_ms / 1000, self._close_throttled, conn)
        self.throttled_sockets[conn] = timer
        return False

    def _close_throttled(self, conn: socket.socket) -> None:
        self.throttled_sockets.pop(conn, None)
        conn.close()

    async def _hand_over(self, conn: socket.socket) -> None:
        """The connection to its protocol, as Kafka's acceptor hands it to a processor; a TLS handshake runs
        here, so it never holds the accept loop. A failed handshake closes the socket (asyncio does)."""
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: _Connection(self), conn, ssl=self.ssl_context
            )
        except (TimeoutError, OSError) as exc:
            self.log.debug("connection lost before it was served", error=f"{type(exc).__name__}: {exc}")

    def _accept_failed(self, exc: OSError) -> None:
        suppressed = self.failures.admit(("accept", 0, str(exc.errno), ""), time.monotonic())
        if suppressed is not None:
            self.log.error("accepting a connection failed", error=str(exc), failed_since_last=suppressed)

    async def _close_idle_connections(self) -> None:
        """Closes connections idle past connections.max.idle.ms, and gives back the receive buffers of
        those quiet for QUIET_RELEASE_S (a producer that sent large batches and went quiet would keep
        them: up to 256 KiB plus its largest frame)."""
        interval = max(min(self.idle_timeout_ms / 4000, QUIET_RELEASE_S / 2), 0.05)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.pending:
                    continue
                quiet = now - conn.last_progress
                if quiet > self.idle_timeout_ms / 1000:
                    conn.close("idle connection (connections.max.idle.ms)")
                elif quiet > QUIET_RELEASE_S:
                    conn.decoder.release_buffers()


async def _bind(host: str, port: int) -> list[socket.socket]:
    """A socket bound, not listening, on each address ``host`` names (every interface for an empty host), as
    asyncio's create_server binds them."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio: an IPv6 socket does not take the IPv4 addresses
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class TurnGate:
    """Starts at most ``per_turn`` client requests in one turn of the event loop; the others wait, in arrival
    order, for the next turns, as requests wait in Kafka's request queue for one of num.io.threads. Each
    connection has at most one client request here, so waiting is round-robin over connections. A turn ends
    when ``_next_turn``, put by call_soon behind the callbacks already ready, runs."""

    def __init__(self, per_turn: int = REQUESTS_STARTED_PER_TURN) -> None:
        self.per_turn = per_turn
        self.started = 0  # in this turn
        self.waiting: deque[Callable[[], None]] = deque()
        self._turn_scheduled = False

    def start(self, run: Callable[[], None]) -> None:
        if self.started < self.per_turn and not self.waiting:
            self.started += 1
            run()
        else:
            self.waiting.append(run)
        self._schedule_next_turn()

    def _schedule_next_turn(self) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._turn_scheduled = False
        self.started = 0
        while self.waiting and self.started < self.per_turn:
            self.started += 1
            self.waiting.popleft()()
        if self.started:  # this turn's count is reset by the next
            self._schedule_next_turn()


class _BusyTime(Generic[T]):
    """Awaits a coroutine, adding up the time the event loop spends running it (its steps, not its waits):
    the analogue of the request handler thread time Kafka's request_percentage measures."""

    __slots__ = ("busy_ns", "coro")

    def __init__(self, coro: Coroutine[object, object, T]) -> None:
        self.coro = coro
        self.busy_ns = 0

    def __await__(self) -> Generator[object, object, T]:
        coro, clock = self.coro, time.perf_counter_ns
        value: object = None
        error: BaseException | None = None
        while True:
            start = clock()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.busy_ns += clock() - start
                return stop.value
            except BaseException:
                self.busy_ns += clock() - start
                raise
            self.busy_ns += clock() - start
            try:
                value, error = (yield yielded), None
            except BaseException as exc:  # a cancellation goes on into the coroutine
                value, error = None, exc


def _fetch_replica_id(request: RequestPayload, version: int) -> int:
    """A Fetch's replica id: ReplicaState's from v15 (KIP-903), else the ReplicaId field."""
    state = getattr(request, "replica_state", None) if version >= 15 else None
    return state.replica_id if state is not None else getattr(request, "replica_id", -1)


def _throttle_of(response: Answer) -> int:
    """The throttle time a handler put in its response itself (KIP-599's controller mutation quota)."""
    throttle = getattr(response, "throttle_time", None)
    return 0 if throttle is None else int(throttle / datetime.timedelta(milliseconds=1))


def _with_throttle(response: Answer, throttle_ms: int) -> Answer:
    """The response with ``throttle_ms`` as its throttle_time_ms: a kio entity's field, or the first field
    of a Fetch body in pieces."""
    if isinstance(response, list):
        return [_THROTTLE_FIELD.pack(throttle_ms) + bytes(response[0][4:]), *response[1:]]
    if dataclasses.is_dataclass(response) and hasattr(response, "throttle_time"):
        return dataclasses.replace(
            response,
            throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms)),
        )
    return response


def _api_key(frame: bytes | memoryview) -> int:
    """The API key a request frame opens with (-1 for a frame too short to hold one)."""
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1


class _NoErrorResponse(Exception):
    """A failed request Kafka answers by closing the connection (Produce with acks=0)."""


class _Connection(asyncio.BufferedProtocol):
    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.max_frame_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[object, ...] | None = None
        self.pending: deque[asyncio.Future[Response]] = deque()
        self.last_progress = time.monotonic()
        self.closed = False
        self.paused = False  # not read: too many requests in flight
        self.muted = False  # not read: throttled (KIP-219), until muted_until
        self.muted_until = 0.0
        self._unmute_timer: asyncio.TimerHandle | None = None
        self.mutes: dict[asyncio.Future[Response], int] = {}  # response -> ms to mute once it is sent
        # Once a connection sent a client request, its requests run one at a time, as Kafka's broker reads
        # one request per connection at a time: a pipelining client cannot put more than one request's work
        # before other clients' (nor start more work while it is throttled). Frames read meanwhile wait here.
        self.sequential = False
        self.in_flight = 0
        # Of in_flight, requests whose handler has decided and that wait only for the controller's write gate
        # to make their records durable: they no longer hold the connection's next request back.
        self.awaiting_disk = 0
        self.produce_in_flight = 0  # of in_flight, client Produce requests
        self.held: deque[bytes] = deque()
        self.log = server.log
        self.ip = "?"
        self.reserved_slot = False  # holds one of the slots kept for inter-broker traffic
        self.principal = ANONYMOUS
        self.sasl = server.sasl() if server.sasl is not None else None

    # ---- asyncio.BufferedProtocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:  # the TLS handshake is done: the client certificate names the principal
            self.principal = principal_from_peer_certificate(ssl_object.getpeercert())
        self.log = self.server.log.bind(peer=f"{self.peer[0]}:{self.peer[1]}" if self.peer else "?")
        server = self.server
        ip = str(self.peer[0]) if self.peer else "?"
        if server.connections_per_ip.get(ip, 0) >= server.ip_limit(ip):
            server.refuse(self, f"max.connections.per.ip {server.ip_limit(ip)} reached for {ip}")
            return
        if len(server.connections) >= server.max_connections:
            if not server.unidentified:
                server.refuse(self, f"max.connections {server.max_connections} reached")
                return
            # Every slot is taken: the reserved slot held longest without a first request goes to this
            # connection instead, so idle connections cannot keep the daemons' own clients out.
            oldest = next(iter(server.unidentified))
            server.refuse(oldest, "reserved connection slot sent no request before a newer connection came")
        # In the reserved slots, only the daemons' own clients are served (checked on the first request).
        self.reserved_slot = len(server.connections) >= server.max_connections - server.reserved_connections
        self.ip = ip
        if self.reserved_slot:
            server.unidentified[self] = None
        server.connections.add(self)
        server.connections_per_ip[ip] = server.connections_per_ip.get(ip, 0) + 1

    def _release(self) -> None:
        self.server.unidentified.pop(self, None)
        if self in self.server.connections:
            self.server.connections.discard(self)
            left = self.server.connections_per_ip.get(self.ip, 1) - 1
            if left > 0:
                self.server.connections_per_ip[self.ip] = left
            else:
                self.server.connections_per_ip.pop(self.ip, None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_unmute()
        self._release()
        for future in self.pending:
            future.cancel()
        self.pending.clear()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:
            return
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except ProtocolError as exc:
            self.close(f"bad frame: {exc}")
            return
        if frames:
            self.last_progress = time.monotonic()
        for frame in frames:
            if self.closed:
                return
            if self.held or self._holding(frame):
                self.held.append(bytes(frame))  # the frame's view is valid only until the next read
                continue
            self._dispatch(frame)
        if (
            len(self.pending) + len(self.held) >= MAX_IN_FLIGHT_PER_CONNECTION
            and not self.paused
            and self.transport
        ):
            self.paused = True
            if not self.muted:
                self.transport.pause_reading()

    def _holding(self, frame: bytes | memoryview) -> bool:
        """Whether ``frame`` waits: the connection is muted, or a client request runs and this is not a
        Produce that may join a pipeline of Produce requests."""
        if self.muted:
            return True
        if not self.sequential or self.in_flight == self.awaiting_disk:
            return False
        return not (
            _api_key(frame) == PRODUCE_KEY
            and self.produce_in_flight == self.in_flight < PRODUCE_PIPELINE
            and not (self.server.quotas is not None and self.server.quotas.active())
        )

    def _release_held(self) -> None:
        """Starts the frames held back while the connection was muted or a client request ran."""
        while self.held and not self.closed and not self._holding(self.held[0]):
            self._dispatch(self.held.popleft())

    # ---- requests -----------------------------------------------------------------------------------
    def _dispatch(self, frame: bytes | memoryview) -> None:
        try:
            header = parse_request_header(frame)
        except ProtocolError as exc:
            self.close(f"malformed request header: {exc}")
            return
        if (
            self.sasl is not None
            and not self.sasl.authenticated
            and header.api_key not in PRE_AUTHENTICATION_APIS
        ):
            self.close(f"unexpected request (API key {header.api_key}) during SASL authentication")
            return
        if self.reserved_slot:
            if not (header.client_id or "").startswith(INTER_BROKER_CLIENT_PREFIXES):
                self.server.refuse(self, "connection slot reserved for inter-broker traffic")
                return
            self.reserved_slot = False
            self.server.unidentified.pop(self, None)
        limit = MAX_REQUEST_BYTES_PER_API.get(header.api_key)
        if limit is not None and len(frame) > limit:
            self.close(f"API key {header.api_key} request of {len(frame)} bytes exceeds its limit of {limit}")
            return
        spec = self.server.apis.get(header.api_key)
        if spec is None:
            self.close(f"API key {header.api_key} is not served on the {self.server.listener} listener")
            return
        if not spec.supports(header.api_version):
            if header.api_key == API_VERSIONS_KEY:
                self._queue_ready(self._unsupported_api_versions(header.correlation_id))
                return
            self.close(
                f"{spec.name} v{header.api_version} unsupported (serving v{spec.min_version}-v{spec.max_version})"
            )
            return
        try:
            request = decode_request_body(header, frame)
        except ProtocolError as exc:
            self.close(f"malformed {spec.name} v{header.api_version} body: {exc}")
            return
        ctx = RequestContext(
            self.server.listener,
            header,
            header.api_version,
            self.server.node,
            self.peer,
            self.log,
            self.server.listener_name,
            self.sasl.principal
            if self.sasl is not None and self.sasl.principal is not None
            else self.principal,
            getattr(self.server.node, "authorizer", None),
            self.sasl,
        )
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        self.in_flight += 1
        if not self._client_request(spec, request, ctx):
            self._start(self._run(spec, request, ctx), future)
            return
        self.sequential = True
        quotas = self.server.quotas
        size = len(frame)
        produce = spec.key == PRODUCE_KEY
        self.produce_in_flight += produce

        def start() -> None:
            if self.closed:
                return
            if quotas is not None and quotas.active() and spec.key not in UNTHROTTLED_APIS:
                run = self._run_with_quotas(spec, request, ctx, size, future, quotas)
                self._start(run, future, produce)
            else:
                self._start(self._run(spec, request, ctx), future, produce)

        self.server.turns.start(start)

    def _start(
        self,
        run: Coroutine[object, object, Response],
        future: asyncio.Future[Response],
        produce: bool = False,
    ) -> None:
        task = asyncio.ensure_future(run)
        task.add_done_callback(lambda t: self._settle(t, future, produce))

    async def _run(self, spec: ApiSpec, request: RequestPayload, ctx: RequestContext) -> Response:
        try:
            return await self._handle(spec, request, ctx)
        except Exception as exc:
            return self._failed(spec, request, ctx, exc)

    # ---- client quotas (KIP-13, KIP-124, KIP-219) ---------------------------------------------------------
    @staticmethod
    def _client_request(spec: ApiSpec, request: RequestPayload, ctx: RequestContext) -> bool:
        """Clients' requests run one at a time per connection, through the turn gate, and count against
        their quotas (ApiVersions and SASL excepted from quotas only); what is exempt goes by the request, as
        in Kafka, never by the client id: the cluster actions, a broker's AddPartitionsToTxn (v4+, which
        needs CLUSTER_ACTION), and a follower's Fetch (ReplicaId >= 0, which needs CLUSTER_ACTION to read
        anything with an authorizer)."""
        if spec.key in CLUSTER_ACTIONS:
            return False
        if spec.key == ADD_PARTITIONS_TO_TXN_KEY and ctx.api_version >= BROKER_ADD_PARTITIONS_FROM:
            return False
        return not (spec.key == FETCH_KEY and _fetch_replica_id(request, ctx.api_version) >= 0)

    async def _run_with_quotas(
        self,
        spec: ApiSpec,
        request: RequestPayload,
        ctx: RequestContext,
        size: int,
        future: asyncio.Future[Response],
        quotas: ClientQuotas,
    ) -> Response:
        """Handles the request as ``_run``, then records it against the client's quotas: the request
        frame's bytes for a Produce, the response's for a Fetch, and the event loop's time running it
        (request_percentage). The largest throttle time goes in the response, and the connection is
        muted that long once the response is sent (Kafka's KafkaApis.sendResponseMaybeThrottle)."""
        user, client_id = ctx.principal.name, ctx.header.client_id or ""
        throttle = 0
        if spec.key == PRODUCE_KEY:
            throttle = quotas.produce.record(user, client_id, size, ctx.now_ms())
        timed = _BusyTime(self._handle(spec, request, ctx, encode=False))
        try:
            response = await timed
        except Exception as exc:
            return self._failed(spec, request, ctx, exc)
        now_ms = ctx.now_ms()
        if not (spec.key == PRODUCE_KEY and getattr(request, "acks", -1) == 0):
            # acks=0 is exempt from the request quota, its produce bytes still count (handleProduceRequest)
            throttle = max(throttle, quotas.request.record_time(user, client_id, timed.busy_ns, now_ms))
        if spec.key == FETCH_KEY and isinstance(response, list):
            size = sum(map(len, response))
            fetch_throttle = quotas.fetch.record(user, client_id, size, now_ms)
            throttle = max(throttle, fetch_throttle)
            if throttle > 0 and not UNSAFE_NO_QUOTA_ENFORCEMENT_FOR_TESTS:
                # A fetch throttled by either quota is answered empty and its bytes taken back
                # (KafkaApis.handleFetchRequest); its fetch session forgets the answer.
                quotas.fetch.unrecord(user, client_id, size, now_ms)
                response = k01_fetch.throttled_response(ctx, request, response)
        throttle = max(throttle, _throttle_of(response))
        if throttle > 0 and not UNSAFE_NO_QUOTA_ENFORCEMENT_FOR_TESTS:
            response = _with_throttle(response, throttle)
            self.mutes[future] = throttle
        return self._encode(response, ctx)

    def _mute(self, throttle_ms: int) -> None:
        """KIP-219: the connection is not read for the throttle time after the throttled response."""
        if self.transport is None or self.closed:
            return
        until = time.monotonic() + throttle_ms / 1000
        if until <= self.muted_until:
            return
        self.muted_until = until
        if not self.muted:
            self.muted = True
            if not self.paused:
                self.transport.pause_reading()
        self._unmute_after(throttle_ms / 1000)

    def _unmute_after(self, seconds: float) -> None:
        """One timer per connection, cancelled when it closes (a closed connection is not kept for it)."""
        self._cancel_unmute()
        self._unmute_timer = asyncio.get_running_loop().call_later(seconds, self._unmute)

    def _cancel_unmute(self) -> None:
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()
            self._unmute_timer = None

    def _unmute(self) -> None:
        self._unmute_timer = None
        if not self.muted or self.closed or self.transport is None:
            return
        left = self.muted_until - time.monotonic()
        if left > 0.001:  # a later throttle extended the mute
            self._unmute_after(left)
            return
        self.muted = False
        if not self.paused:
            self.transport.resume_reading()
        self._release_held()

    @overload
    async def _handle(
        self, spec: ApiSpec, request: RequestPayload, ctx: RequestContext, encode: Literal[True] = True
    ) -> Response: ...

    @overload
    async def _handle(
        self, spec: ApiSpec, request: RequestPayload, ctx: RequestContext, encode: Literal[False]
    ) -> Answer: ...

    async def _handle(
        self, spec: ApiSpec, request: RequestPayload, ctx: RequestContext, encode: bool = True
    ) -> Response | Answer:
        """The request's answer, encoded into its response frame unless ``encode`` is False."""
        refused = self._refusal(spec, request, ctx)
        gate = self._write_gate(spec)
        if refused is not None:
            self.log.info("request refused", api=spec.name, principal=str(ctx.principal), error=refused.name)
            response: Answer = error_response(request, response_class(spec.key, ctx.api_version), refused)
        elif gate is not None:
            if spec.on_arrival is not None:
                spec.on_arrival(request, ctx)
            response = await self._write(gate, spec, request, ctx)
        else:
            response = await spec.handler(request, ctx)
        return self._encode(response, ctx) if encode else response

    async def _write(
        self, gate: QuorumDriver | GroupCommit, spec: ApiSpec, request: RequestPayload, ctx: RequestContext
    ) -> Answer:
        """The request through the controller's write gate. Once its handler has decided (its records
        appended) the connection's next request may start: decisions stay one at a time and in order,
        answers stay in order and each still waits for its records to be durable; only the waits for the
        disk overlap, so a broker forwarding many clients' requests on its one connection gets an fsync
        for many, not one each (as Kafka's controller puts many requests' records in one append)."""
        waiting = False

        def decided() -> None:
            nonlocal waiting
            waiting = True
            self.awaiting_disk += 1
            self._release_held()

        try:
            return await gate.write(
                lambda: spec.handler(request, ctx),
                lambda code: error_response(request, response_class(spec.key, ctx.api_version), code),
                decided,
            )
        finally:
            if waiting:
                self.awaiting_disk -= 1

    @staticmethod
    def _encode(response: Answer, ctx: RequestContext) -> Response:
        if response is None:  # e.g. Produce with acks=0 sends no response
            return None
        header = ctx.header
        # A handler on a hot path may hand back its body already encoded, whole or in pieces.
        if isinstance(response, bytes):
            return encode_response(header.correlation_id, header.api_key, ctx.api_version, response)
        if isinstance(response, list):
            return encode_response_pieces(header.correlation_id, header.api_key, ctx.api_version, response)
        return encode_response_entity(header.correlation_id, header.api_key, ctx.api_version, response)

    def _write_gate(self, spec: ApiSpec) -> QuorumDriver | GroupCommit | None:
        """A controller in a Raft quorum answers requests as the active controller only, once what they
        wrote is committed (controller/quorum_driver.py), except those any voter answers itself; a single
        controller every request once what it wrote or read is on disk (controller/group_commit.py, a
        broker's Fetch of the metadata log included); None elsewhere."""
        write_gate = getattr(self.server.node, "write_gate", None)
        gate = write_gate() if write_gate is not None else None
        if gate is None or (spec.key in ANY_VOTER_ANSWERS and not gate.gates_reads):
            return None
        return gate

    def _refusal(self, spec: ApiSpec, request: RequestPayload, ctx: RequestContext) -> ErrorCode | None:
        """The authorization error a request gets before its handler runs (None: an authorizer allows it,
        or there is none)."""
        return listener_refusal(self.server.listener, spec.key, request, ctx)

    def _failed(
        self, spec: ApiSpec, request: RequestPayload, ctx: RequestContext, exc: Exception
    ) -> Response:
        """The request's error response (Kafka's getErrorResponse); raises to close the connection where
        Kafka has none to send (Produce with acks=0)."""
        suppressed = self.server.failures.admit(
            failure_key(spec.name, ctx.api_version, exc), time.monotonic()
        )
        if suppressed is not None:
            self.log.error(
                "request failed; answering UNKNOWN_SERVER_ERROR",
                api=spec.name,
                api_version=ctx.api_version,
                error=f"{type(exc).__name__}: {exc}",
                identical_failures_not_logged=suppressed,
                exc_info=exc,
            )
        try:
            body = error_response(request, response_class(spec.key, ctx.api_version))
        except Exception as failure:
            raise RuntimeError(f"no error response for {spec.name} v{ctx.api_version}") from failure
        if body is None:
            raise _NoErrorResponse(f"{spec.name} v{ctx.api_version} failed and has no response to send")
        return encode_response_entity(ctx.header.correlation_id, spec.key, ctx.api_version, body)

    def _settle(
        self, task: asyncio.Task[Response], future: asyncio.Future[Response], produce: bool = False
    ) -> None:
        self.in_flight -= 1
        self.produce_in_flight -= produce
        if future.done():
            return
        if task.cancelled():
            future.cancel()
        elif (exc := task.exception()) is not None:
            if not isinstance(exc, _NoErrorResponse):
                self.log.error(
                    "error response failed; closing connection",
                    error=f"{type(exc).__name__}: {exc}",
                    exc_info=exc,
                )
            future.set_result(None)
            self._flush()
            self.close("handler error", quiet=True)
            return
        else:
            future.set_result(task.result())
        self._flush()
        if self.held:
            self._release_held()

    def _queue_ready(self, data: bytes) -> None:
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        future.set_result(data)
        self.pending.append(future)
        self._flush()

    def _flush(self) -> None:
        """Writes every finished response at the head of the queue, keeping request order."""
        chunks: list[bytes | memoryview] = []
        served = 0
        mute = 0
        while self.pending and self.pending[0].done():
            future = self.pending.popleft()
            if self.mutes:
                mute = max(mute, self.mutes.pop(future, 0))
            if not future.cancelled() and (data := future.result()) is not None:
                if isinstance(data, list):
                    chunks.extend(data)
                else:
                    chunks.append(data)
                served += 1
        if chunks and self.transport is not None and not self.closed:
            # One writev of every piece: record bytes are not joined into a single buffer first.
            self.transport.writelines(chunks)
            self.server.requests_served += served
            self.last_progress = time.monotonic()
        if mute:
            self._mute(mute)
        if (
            self.paused
            and len(self.pending) + len(self.held) < MAX_IN_FLIGHT_PER_CONNECTION // 2
            and self.transport
        ):
            self.paused = False
            if not self.muted:
                self.transport.resume_reading()

    def _unsupported_api_versions(self, correlation_id: int) -> bytes:
        """KIP-511: an ApiVersions request at an unknown version gets a v0 body with UNSUPPORTED_VERSION."""
        from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
        from kio.static.primitive import i16

        from epochkraft.protocol.errors import ErrorCode

        self.log.info("ApiVersions at an unsupported version; answering with our range (KIP-511)")
        body = ApiVersionsResponse(
            error_code=ErrorCode.unsupported_version,
            api_keys=tuple(
                ApiVersion(api_key=i16(key), min_version=i16(s.min_version), max_version=i16(s.max_version))
                for key, s in self.server.apis.items()
            ),
        )
        return encode_response(correlation_id, API_VERSIONS_KEY, 0, encode_entity(body))

    def close(self, reason: str, quiet: bool = False) -> None:
        if self.closed:
            return
        if not quiet:
            self.log.warning("closing connection", reason=reason)
        self.closed = True
        self._cancel_unmute()
        self._release()
        if self.transport is not None:
            self.transport.close()
