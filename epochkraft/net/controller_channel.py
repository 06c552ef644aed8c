"""A broker's requests to the active controller, when the controllers are a Raft quorum.

As Kafka's NodeToControllerChannelManager: the broker knows every controller's address; it sends to the
one that answered last, and moves to the next when the connection fails or the answer is NOT_CONTROLLER
(a standby, or a controller that just lost leadership), trying each controller once per request. When none
is active yet (an election is under way) the last NOT_CONTROLLER answer is returned, and the caller retries
after its backoff as it does for any error. With one address this is a plain client.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Callable

from kio.static.protocol import RequestPayload, ResponsePayload

from epochkraft.config import ConfigError, parse_host_port
from epochkraft.net.client import KafkaClient, R
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode


def parse_controllers(text: str) -> list[tuple[str, int]]:
    """``--controller``: HOST:PORT of each controller, separated by commas."""
    addresses = [parse_host_port(part.strip()) for part in text.split(",") if part.strip()]
    if not addresses:
        raise ConfigError("--controller names no controller")
    return addresses


def not_controller(response: ResponsePayload) -> bool:
    """Whether an answer says NOT_CONTROLLER, at the top level or in its first entry (a refused request's
    error response carries it in every error field)."""
    if getattr(response, "error_code", None) == ErrorCode.not_controller:
        return True
    if not dataclasses.is_dataclass(response):
        return False
    for field in dataclasses.fields(response):
        value = getattr(response, field.name)
        first = value[0] if isinstance(value, tuple) and value else None
        if dataclasses.is_dataclass(first) and getattr(first, "error_code", None) == ErrorCode.not_controller:
            return True
    return False


class ControllerChannel:
    def __init__(
        self,
        addresses: list[tuple[str, int]],
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        ssl_context: ssl.SSLContext | None = None,
        follow: ControllerChannel | None = None,
    ) -> None:
        """``follow``: another channel whose controller this one starts each request at (a broker's
        metadata fetches go where its heartbeats found the active controller, as Kafka's brokers fetch
        from the leader: fresher than a standby, which learns of commits a fetch later)."""
        self.follow = follow
        self.clients = [
            KafkaClient(
                host,
                port,
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                ssl_context=ssl_context,
            )
            for host, port in addresses
        ]
        self.current = 0

    @property
    def address(self) -> str:
        return self.clients[self.current].address

    async def send(
        self,
        request: RequestPayload,
        response_type: type[R],
        *,
        elsewhere: Callable[[ResponsePayload], bool] = not_controller,
        timeout_ms: int | None = None,
    ) -> R:
        """The answer of the first controller, from the one that answered last, whose answer is not
        ``elsewhere`` (by default NOT_CONTROLLER: the request belongs to the active controller); a
        ``response_type`` (for the type checker, as ``KafkaClient.send``)."""
        if self.follow is not None and len(self.follow.clients) == len(self.clients):
            self.current = self.follow.current
        answer: R | None = None
        failure: NetworkError | None = None
        for _ in range(len(self.clients)):
            client = self.clients[self.current]
            try:
                answer = await client.send(request, response_type, timeout_ms=timeout_ms)
            except NetworkError as exc:
                failure = exc
                self._next()
                continue
            if len(self.clients) > 1 and elsewhere(answer):
                self._next()
                continue
            return answer
        if answer is None:
            assert failure is not None
            raise failure
        return answer

    def _next(self) -> None:
        self.current = (self.current + 1) % len(self.clients)

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
