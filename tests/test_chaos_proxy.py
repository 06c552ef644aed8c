"""The fault proxy against a real echo server and a Kafka-framed server: pass, delay, drop, hold by API key."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from epochkraft.chaos.proxy import FaultProxy


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


def _frame(api_key: int, correlation_id: int) -> bytes:
    body = struct.pack(">hhi", api_key, 0, correlation_id) + b"\x00\x00"
    return struct.pack(">i", len(body)) + body


async def _framed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request frame with a 4-byte response carrying its correlation id."""
    try:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            correlation_id = struct.unpack_from(">i", frame, 4)[0]
            writer.write(struct.pack(">ii", 4, correlation_id))
            await writer.drain()
    except asyncio.IncompleteReadError:
        writer.close()


async def _with_proxy(handler, body) -> None:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    proxy = FaultProxy(0, ("127.0.0.1", server.sockets[0].getsockname()[1]))
    await proxy.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        await body(proxy, reader, writer)
    finally:
        writer.close()
        await proxy.stop()
        server.close()


@pytest.mark.net
def test_pass_delay_and_drop_with_an_echo_server():
    async def body(proxy: FaultProxy, reader, writer) -> None:
        writer.write(b"hello")
        assert await asyncio.wait_for(reader.readexactly(5), 2) == b"hello"
        proxy.set_delay(200)
        started = time.monotonic()
        writer.write(b"slow!")
        assert await asyncio.wait_for(reader.readexactly(5), 3) == b"slow!"
        assert time.monotonic() - started >= 0.2
        proxy.set_drop()
        writer.write(b"lost")
        try:
            await asyncio.wait_for(reader.read(4), 0.3)
            raise AssertionError("a dropped connection delivered bytes")
        except TimeoutError:
            pass
        proxy.set_pass()
        writer.write(b"again")
        assert await asyncio.wait_for(reader.readexactly(5), 2) == b"again"

    asyncio.run(_with_proxy(_echo, body))


@pytest.mark.net
def test_hold_by_api_key_lets_other_requests_through_until_release():
    async def body(proxy: FaultProxy, reader, writer) -> None:
        proxy.hold(56)
        writer.write(_frame(56, 1) + _frame(63, 2))
        response = await asyncio.wait_for(reader.readexactly(8), 2)
        assert struct.unpack(">ii", response)[1] == 2, "the heartbeat passed the held AlterPartition"
        try:
            await asyncio.wait_for(reader.readexactly(8), 0.3)
            raise AssertionError("the held request was answered before release")
        except TimeoutError:
            pass
        assert proxy.held_frames == 1
        proxy.release()
        response = await asyncio.wait_for(reader.readexactly(8), 2)
        assert struct.unpack(">ii", response)[1] == 1
        assert proxy.released_frames == 1

    asyncio.run(_with_proxy(_framed, body))


@pytest.mark.net
def test_http_control_switches_the_proxy():
    import aiohttp

    from epochkraft.chaos.proxy import serve_control

    async def body(proxy: FaultProxy, reader, writer) -> None:
        runner, port = await serve_control(proxy)
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"http://127.0.0.1:{port}/delay?ms=150") as resp:
                    assert (await resp.json())["mode"] == "delay"
                assert proxy.delay_ms == 150
                async with http.post(f"http://127.0.0.1:{port}/hold?api_key=56") as resp:
                    assert (await resp.json())["hold_api_key"] == 56
                async with http.post(f"http://127.0.0.1:{port}/release") as resp:
                    assert (await resp.json())["hold_api_key"] is None
                async with http.post(f"http://127.0.0.1:{port}/pass") as resp:
                    assert (await resp.json())["mode"] == "pass"
        finally:
            await runner.cleanup()

    asyncio.run(_with_proxy(_echo, body))
