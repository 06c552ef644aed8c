"""The socket server's accept path without the network: connections are socketpairs and fake transports.

A connection over its address's creation rate is held for its throttle time (at most one quota window) and
closed, or closed at once when the server stops (Kafka's Acceptor.throttledSockets and closeAll); a KIP-219
mute timer is cancelled when its connection closes; a connection refused for its address's limit evicts no
connection from a reserved slot."""

from __future__ import annotations

import asyncio
import gc
import socket
import time
import weakref

import pytest

from epochkraft.broker.connection_quotas import ConnectionQuotas
from epochkraft.protocol.api import BROKER
from epochkraft.server.socket_server import KafkaServer, _Connection

WINDOW_MS = 200
ADDRESS = "10.0.0.7"


def throttling_server(rate: float = 10.0, window_ms: int = WINDOW_MS) -> KafkaServer:
    """A listener whose client address may open ``rate`` connections a second over 2 samples of
    ``window_ms``."""
    quotas = ConnectionQuotas(["CLIENT"], "CLIENT", samples=2, window_ms=window_ms)
    quotas.update_ip_quotas({(("ip", ADDRESS),): {"connection_creation_rate": rate}})
    return KafkaServer(BROKER, None, "127.0.0.1", 0, listener_name="CLIENT", connection_quotas=quotas)  # type: ignore[arg-type]


async def closed_by_server(client: socket.socket, timeout_s: float) -> bool:
    """Whether the server's end of ``client``'s socketpair closes within ``timeout_s``."""
    client.setblocking(False)
    try:
        return await asyncio.wait_for(asyncio.get_running_loop().sock_recv(client, 1), timeout_s) == b""
    except TimeoutError:
        return False


async def test_connection_over_its_address_rate_is_closed_after_its_throttle_time():
    """Kafka's DelayedCloseSocket: closed once its throttle time is over, at most one quota window after it
    was taken."""
    server = throttling_server()
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        admitted = [await server._admitted(ours, ADDRESS) for ours, _ in pairs]
        taken = time.monotonic()
        assert admitted == [True, True, False]
        assert server.throttled_connections == 1 and pairs[2][0] in server.throttled_sockets
        assert await closed_by_server(pairs[2][1], 2 * WINDOW_MS / 1000)
        assert time.monotonic() - taken <= WINDOW_MS / 1000 + 0.05
        assert not server.throttled_sockets
    finally:
        await server.stop()
        for pair in pairs:
            for end in pair:
                end.close()


async def test_stop_closes_connections_held_for_their_address_rate():
    server = throttling_server(rate=0, window_ms=30_000)  # every connection held 30 s
    pairs = [socket.socketpair() for _ in range(2)]
    try:
        assert [await server._admitted(ours, ADDRESS) for ours, _ in pairs] == [False, False]
        await server.stop()
        assert not server.throttled_sockets
        assert [await closed_by_server(theirs, 0.5) for _, theirs in pairs] == [True, True]
    finally:
        for pair in pairs:
            for end in pair:
                end.close()


class FakeTransport(asyncio.Transport):
    def __init__(self, peer: tuple[str, int]) -> None:
        super().__init__()
        self.peer = peer
        self.closed = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.peer if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("closed_by", ["server", "client"])
async def test_mute_timer_does_not_outlive_its_connection(closed_by):
    """KIP-219: a throttled connection is not read for its throttle time; once it is closed (by us or by
    its client), the timer that would unmute it is cancelled, not left holding it for the throttle time."""
    server = KafkaServer(BROKER, None, "127.0.0.1", 0)  # type: ignore[arg-type]
    conn = _Connection(server)
    conn.connection_made(FakeTransport(("10.0.0.1", 5000)))
    conn._mute(60_000)
    assert conn.muted
    if closed_by == "server":
        conn.close("test", quiet=True)
    else:
        conn.connection_lost(None)
    alive = weakref.ref(conn)
    del conn
    gc.collect()
    assert alive() is None, "a closed connection held by its mute timer"


def test_connection_refused_for_its_address_evicts_no_reserved_slot():
    """Every slot is taken, one of them a reserved slot that sent nothing yet: a new connection from an
    address at its max.connections.per.ip is refused, and the reserved slot is kept."""
    server = KafkaServer(
        BROKER,
        None,  # type: ignore[arg-type]
        "127.0.0.1",
        0,
        max_connections=2,
        reserved_connections=1,
        max_connections_per_ip_overrides={"10.0.0.1": 1},
    )
    connections = [_Connection(server) for _ in range(3)]
    transports = [
        FakeTransport(("10.0.0.1", 5000)),
        FakeTransport(("10.0.0.2", 5000)),
        FakeTransport(("10.0.0.1", 5001)),
    ]
    for conn, transport in zip(connections, transports, strict=True):
        conn.connection_made(transport)
    ordinary, reserved, refused = connections
    assert reserved in server.unidentified and not reserved.closed
    assert refused.closed and not ordinary.closed
    assert server.refused_connections == 1
