"""A user-space TCP proxy for fault injection (``tc netem`` is not available here).

Sits between a broker and the controller (or any Kafka peers). Modes, switchable at run time:
``pass`` forwards; ``delay`` forwards after a fixed delay; ``drop`` black-holes traffic in both directions
(connections stay open, bytes vanish: a network partition). ``hold(api_key)`` parses the client's Kafka
request frames and holds back those with that API key until ``release()``, letting every other request
through (responses are matched by correlation id, so heartbeats keep flowing): the KAFKA-14139 tool for
delaying one AlterPartition.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger()
_SIZE = struct.Struct(">i")


@dataclass
class _Pipe:
    """Client-to-server bytes of one connection, cut into frames when holding by API key."""

    buffer: bytearray = field(default_factory=bytearray)
    held: list[bytes] = field(default_factory=list)


class FaultProxy:
    def __init__(self, listen_port: int, upstream: tuple[str, int], name: str = "proxy") -> None:
        self.listen_port = listen_port
        self.upstream = upstream
        self.name = name
        self.mode = "pass"
        self.delay_ms = 0
        self.hold_api_key: int | None = None
        self.held_frames = 0
        self.released_frames = 0
        self._release = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()

    # ---- control ---------------------------------------------------------------------------------------
    def set_pass(self) -> None:
        self.mode, self.delay_ms = "pass", 0

    def set_delay(self, delay_ms: int) -> None:
        self.mode, self.delay_ms = "delay", delay_ms

    def set_drop(self) -> None:
        self.mode = "drop"

    def hold(self, api_key: int) -> None:
        self.hold_api_key = api_key
        self._release = asyncio.Event()

    def release(self) -> None:
        self.hold_api_key = None
        self._release.set()

    # ---- plumbing --------------------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        tasks = [
            asyncio.create_task(self._client_to_server(reader, up_writer)),
            asyncio.create_task(self._copy(up_reader, writer)),
        ]
        self._tasks.update(tasks)
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
            self._tasks.discard(task)
        for w in (writer, up_writer):
            with contextlib.suppress(Exception):
                w.close()

    async def _forward(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if self.mode == "drop":
            return
        if self.mode == "delay" and self.delay_ms:
            await asyncio.sleep(self.delay_ms / 1000)
        writer.write(data)
        await writer.drain()

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            await self._forward(writer, data)

    async def _client_to_server(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pipe = _Pipe()
        while data := await reader.read(65536):
            if self.hold_api_key is None and not pipe.held and not pipe.buffer:
                await self._forward(writer, data)
                continue
            pipe.buffer += data
            while len(pipe.buffer) >= 6:
                (size,) = _SIZE.unpack_from(pipe.buffer, 0)
                if len(pipe.buffer) < 4 + size:
                    break
                frame = bytes(pipe.buffer[: 4 + size])
                del pipe.buffer[: 4 + size]
                (api_key,) = struct.unpack_from(">h", frame, 4)
                if self.hold_api_key is not None and api_key == self.hold_api_key:
                    if not pipe.held:
                        self.held_frames += 1
                        log.info("proxy holding a request", proxy=self.name, api_key=api_key)
                        task = asyncio.create_task(self._flush_on_release(pipe, writer))
                        self._tasks.add(task)
                        task.add_done_callback(self._tasks.discard)
                    pipe.held.append(frame)
                else:
                    await self._forward(writer, frame)
            if self.hold_api_key is None and not pipe.held and pipe.buffer:
                await self._forward(writer, bytes(pipe.buffer))
                pipe.buffer.clear()

    async def _flush_on_release(self, pipe: _Pipe, writer: asyncio.StreamWriter) -> None:
        await self._release.wait()
        frames, pipe.held = pipe.held, []
        self.released_frames += len(frames)
        for frame in frames:
            await self._forward(writer, frame)


async def serve_control(proxy: FaultProxy, port: int = 0):
    """HTTP control for a proxy running in another process: ``POST /pass``, ``/delay?ms=N``, ``/drop``,
    ``/hold?api_key=N``, ``/release``; ``GET /state``. Returns the aiohttp runner (cleanup() to stop) and
    the bound port."""
    from aiohttp import web

    async def state(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "mode": proxy.mode,
                "delay_ms": proxy.delay_ms,
                "hold_api_key": proxy.hold_api_key,
                "held_frames": proxy.held_frames,
                "released_frames": proxy.released_frames,
            }
        )

    async def control(request: web.Request) -> web.Response:
        action, query = request.match_info["action"], request.query
        if action == "pass":
            proxy.set_pass()
        elif action == "delay":
            proxy.set_delay(int(query.get("ms", "0")))
        elif action == "drop":
            proxy.set_drop()
        elif action == "hold":
            proxy.hold(int(query["api_key"]))
        elif action == "release":
            proxy.release()
        else:
            raise web.HTTPNotFound()
        return await state(request)

    app = web.Application()
    app.router.add_get("/state", state)
    app.router.add_post("/{action}", control)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
