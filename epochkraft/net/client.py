"""Async Kafka protocol client: one connection, correlation ids, in-flight futures, timeouts, reconnects.

``send(request, response_type)`` takes any kio request object (its class carries the API key and version),
frames it, and returns the decoded response as the ``response_type`` the caller names: for the type checker
only, as the response is decoded by the request's API key and version and not checked on arrival (a
follower's fetches pay nothing for it). With ``on_frame`` it returns what that function makes of the raw
frame while it is still in the receive buffer. Requests pipeline on the one connection; responses are
matched by correlation id. A failed connection fails every in-flight request with ConnectionLost and is reopened
lazily by the next ``send``. Responses are received straight into the frame buffers (no stream copies).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import ssl
from collections.abc import Callable, Sequence
from typing import Literal, TypeAlias, TypeVar, cast, overload

from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v1.response import ApiVersionsResponse as ApiVersionsResponseV1
from kio.schema.api_versions.v2.response import ApiVersionsResponse as ApiVersionsResponseV2
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.api_versions.v4.response import ApiVersionsResponse as ApiVersionsResponseV4
from kio.static.protocol import RequestPayload, ResponsePayload

from epochkraft.net.errors import ConnectionLost, RequestTimedOut
from epochkraft.protocol.errors import ProtocolError
from epochkraft.protocol.framing import (
    FrameDecoder,
    decode_entity,
    encode_entity,
    encode_request,
    parse_response_header,
    response_class,
)

R = TypeVar("R", bound=ResponsePayload)
T = TypeVar("T")
Frame: TypeAlias = bytes | memoryview
OnFrame: TypeAlias = Callable[[Frame, int], T]
ApiVersionsResponse: TypeAlias = (
    ApiVersionsResponseV0
    | ApiVersionsResponseV1
    | ApiVersionsResponseV2
    | ApiVersionsResponseV3
    | ApiVersionsResponseV4
)


class _Connection(asyncio.BufferedProtocol):
    """One TCP connection: receives straight into the FrameDecoder's buffers and hands frames to the
    client; write flow control for ``drain``."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client
        self.decoder = FrameDecoder(client.max_frame_bytes)
        self.transport: asyncio.Transport | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            for frame in self.decoder.buffer_updated(nbytes):
                self.client._deliver(frame)
        except ProtocolError as exc:
            self.client._lost(self, ConnectionLost(f"connection to {self.client.address} failed: {exc}"))
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self.client._lost(self, ConnectionLost(f"connection to {self.client.address} closed{reason}"))
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def drain(self) -> None:
        await self._writable.wait()


class KafkaClient:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "epochkraft",
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        max_frame_bytes: int = 512 * 1024 * 1024,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.ssl_context = ssl_context  # TLS to an SSL listener
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_frame_bytes = max_frame_bytes
        self._correlation = itertools.count(1)
        self._in_flight: dict[int, tuple[asyncio.Future[object], int, int, OnFrame[object] | None]] = {}
        self._connection: _Connection | None = None
        self._connect_lock = asyncio.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        c = self._connection
        return c is not None and c.transport is not None and not c.transport.is_closing()

    async def connect(self) -> None:
        async with self._connect_lock:
            if self.connected:
                return
            loop = asyncio.get_running_loop()
            try:
                _, connection = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: _Connection(self),
                        self.host,
                        self.port,
                        ssl=self.ssl_context,
                        server_hostname=self.host if self.ssl_context is not None else None,
                    ),
                    self.connect_timeout_ms / 1000,
                )
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                raise ConnectionLost(f"cannot connect to {self.address}: {exc}") from exc
            self._connection = connection

    def _lost(self, connection: _Connection, error: Exception) -> None:
        """Fails every request in flight on a connection that failed or closed."""
        if self._connection is not connection:
            return
        self._connection = None
        for future, *_ in self._in_flight.values():
            if not future.done():
                future.set_exception(error)
        self._in_flight.clear()

    def _deliver(self, frame: Frame) -> None:
        if len(frame) < 4:
            raise ProtocolError("response shorter than its header")
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        entry = self._in_flight.pop(correlation_id, None)
        if entry is None:
            return  # a response to a request that already timed out
        future, api_key, version, on_frame = entry
        if future.done():
            return  # e.g. the caller was cancelled: nothing is applied
        try:
            _, header_size = parse_response_header(api_key, version, frame)
            if on_frame is None:
                future.set_result(decode_entity(response_class(api_key, version), frame, header_size))
            else:
                future.set_result(on_frame(frame, header_size))
        except Exception as exc:  # a malformed response (or on_frame's own error) fails this request only
            future.set_exception(exc)

    def _write(
        self, request: RequestPayload, expect_response: bool, on_frame: OnFrame[object] | None = None
    ) -> tuple[int, asyncio.Future[object] | None]:
        api_key, version = int(request.__api_key__), int(request.__version__)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        data = encode_request(api_key, version, correlation_id, self.client_id, encode_entity(request))
        connection = self._connection
        assert connection is not None and connection.transport is not None
        try:
            connection.transport.write(data)
        except RuntimeError as exc:
            # uvloop closes a failed transport's handle before it delivers connection_lost; a write in
            # between raises RuntimeError. It is a lost connection like any other.
            error = ConnectionLost(f"connection to {self.address} closed: {exc}")
            self._lost(connection, error)
            raise error from exc
        future: asyncio.Future[object] | None = None
        if expect_response:  # registered after the write; no response is read before we yield
            future = asyncio.get_running_loop().create_future()
            self._in_flight[correlation_id] = (future, api_key, version, on_frame)
        return correlation_id, future

    @overload
    async def send(
        self, request: RequestPayload, response_type: type[R], *, timeout_ms: int | None = None
    ) -> R: ...

    @overload
    async def send(
        self, request: RequestPayload, *, on_frame: OnFrame[T], timeout_ms: int | None = None
    ) -> T: ...

    @overload
    async def send(
        self, request: RequestPayload, *, expect_response: Literal[False], timeout_ms: int | None = None
    ) -> None: ...

    async def send(
        self,
        request: RequestPayload,
        response_type: type[object] | None = None,
        *,
        timeout_ms: int | None = None,
        expect_response: bool = True,
        on_frame: OnFrame[object] | None = None,
    ) -> object:
        """The response to ``request``, a ``response_type`` (which the overloads require of typed callers;
        unused at run time). ``on_frame(frame, body_position)``, if given, replaces kio's decoding: it runs
        as the frame arrives, while views into the frame are valid (a follower appends the records it
        fetched straight from the receive buffer), and its result is returned."""
        if not self.connected:
            await self.connect()
        correlation_id, future = self._write(request, expect_response, on_frame)
        if future is None:
            assert self._connection is not None
            await self._connection.drain()
            return None
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            self._in_flight.pop(correlation_id, None)
            raise RequestTimedOut(f"{type(request).__name__} timed out after {timeout:.1f}s") from exc

    async def send_many(
        self,
        requests: Sequence[RequestPayload],
        response_type: type[R],
        *,
        timeout_ms: int | None = None,
    ) -> list[R]:
        """Pipelines requests on the connection and returns their responses, each a ``response_type``, in
        order."""
        if not self.connected:
            await self.connect()
        futures = [self._write(r, True)[1] for r in requests]
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        try:
            responses = await asyncio.wait_for(asyncio.gather(*futures), timeout)  # type: ignore[arg-type]
        except TimeoutError as exc:
            raise RequestTimedOut(f"{len(requests)} pipelined requests timed out") from exc
        return cast(list[R], responses)

    async def api_versions(self, version: int = 3) -> ApiVersionsResponse:
        from epochkraft.protocol.framing import request_class
        from epochkraft.protocol.versions import response_for

        cls = request_class(18, version)
        fields = {"client_software_name": "epochkraft", "client_software_version": "0.1.0"}
        names = {f.name for f in dataclasses.fields(cls)}
        answer = await self.send(
            cls(**{k: v for k, v in fields.items() if k in names}), response_for(18, version)
        )
        return cast(ApiVersionsResponse, answer)  # the ApiVersions response of ``version`` (v0-v4)

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.transport is not None:
            connection.transport.close()
        for future, *_ in self._in_flight.values():
            if not future.done():
                future.set_exception(ConnectionLost("client closed"))
        self._in_flight.clear()

    async def __aenter__(self) -> KafkaClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
