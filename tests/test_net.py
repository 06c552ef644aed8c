"""The TCP server and client: ApiVersions per listener, pipelining in order, hostile input, reconnects."""

import asyncio
import os
import random
import struct
import types

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1

from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import ConnectionLost, RequestTimedOut
from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import encode_request, parse_response_header
from epochkraft.protocol.kio_extra import ApiVersionsRequestV5 as ApiVersionsV5
from epochkraft.server.handlers import served
from epochkraft.server.socket_server import KafkaServer

pytestmark = [pytest.mark.net, pytest.mark.timeout(30)]


@pytest.fixture
async def controller_server():
    server = KafkaServer(CONTROLLER, node=None, host="127.0.0.1", port=0, max_frame_bytes=1 << 20)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def raw_exchange(port: int, payload: bytes, read_timeout: float = 2.0) -> bytes:
    """Sends raw bytes; returns what comes back before the server closes or the timeout."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    chunks = []
    try:
        while True:
            data = await asyncio.wait_for(reader.read(65536), read_timeout)
            if not data:
                break
            chunks.append(data)
    except TimeoutError:
        pass
    except ConnectionResetError:  # closed with bytes of ours unread: the kernel resets rather than ends it
        pass
    finally:
        writer.close()
    return b"".join(chunks)


async def assert_still_serving(port: int) -> None:
    async with KafkaClient("127.0.0.1", port) as client:
        response = await client.api_versions(0)
        assert response.error_code == ErrorCode.none


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
async def test_api_versions_lists_the_listener_table(controller_server, version):
    async with KafkaClient("127.0.0.1", controller_server.port) as client:
        response = await client.api_versions(version)
    assert response.error_code == ErrorCode.none
    table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert table == {key: (s.min_version, s.max_version) for key, s in served(CONTROLLER).items()}
    assert table[18] == (0, 5)


def _v5(cluster_id: str | None, node_id: int) -> ApiVersionsV5:
    return ApiVersionsV5(
        client_software_name="t", client_software_version="1", cluster_id=cluster_id, node_id=node_id
    )


@pytest.mark.parametrize(
    ("cluster_id", "node_id", "error"),
    [
        ("cluster-a", 1, ErrorCode.none),
        (None, -1, ErrorCode.none),
        ("cluster-a", 2, ErrorCode.rebootstrap_required),
        ("cluster-b", 1, ErrorCode.rebootstrap_required),
        ("cluster-a", -1, ErrorCode.invalid_request),
        (None, 1, ErrorCode.invalid_request),
    ],
)
async def test_api_versions_v5_on_a_broker_checks_the_cluster_and_node_named(cluster_id, node_id, error):
    """KIP-1242, as KafkaApis.handleApiVersionsRequest answers (tests/test_differential.py): another
    cluster or node is REBOOTSTRAP_REQUIRED, one id without the other INVALID_REQUEST, with no API list."""
    response = await _broker_answer(
        types.SimpleNamespace(node_id=1, cluster_id="cluster-a", cache=MetadataCache(1)), cluster_id, node_id
    )
    assert response.error_code == error
    assert bool(response.api_keys) == (error == ErrorCode.none)


async def _broker_answer(node, cluster_id: str | None, node_id: int):
    server = KafkaServer(BROKER, node=node, host="127.0.0.1", port=0, max_frame_bytes=1 << 20)
    await server.start()
    try:
        async with KafkaClient("127.0.0.1", server.port) as client:
            return await client.send(_v5(cluster_id, node_id))
    finally:
        await server.stop()


async def test_api_versions_v5_before_the_broker_knows_its_cluster_id_judges_the_node_id_only():
    node = types.SimpleNamespace(
        node_id=1, cluster_id=None, cache=MetadataCache(1)
    )  # listening, not yet told by the controller
    assert (await _broker_answer(node, "cluster-a", 1)).error_code == ErrorCode.none
    assert (await _broker_answer(node, "cluster-a", 2)).error_code == ErrorCode.rebootstrap_required


async def test_api_versions_v5_on_a_controller_checks_only_that_both_ids_or_neither_are_named(
    controller_server,
):
    async with KafkaClient("127.0.0.1", controller_server.port) as client:
        other = await client.send(_v5("another-cluster", 42))
        half = await client.send(_v5("another-cluster", -1))
    assert other.error_code == ErrorCode.none and other.api_keys  # ControllerApis does not compare them
    assert half.error_code == ErrorCode.invalid_request and half.api_keys == ()


def test_listeners_serve_different_tables():
    assert 0 not in served(CONTROLLER)  # no Produce on the controller listener
    assert 18 in served(BROKER) and 18 in served(CONTROLLER)


async def test_api_versions_at_unknown_version_gets_unsupported_version_in_v0(controller_server):
    frame = encode_request(18, 99, 7, "future-client", b"\x00\x00")  # v99: header parsed as v1
    data = await raw_exchange(controller_server.port, frame, read_timeout=1.0)
    size = struct.unpack(">i", data[:4])[0]
    payload = data[4 : 4 + size]
    correlation_id, header_size = parse_response_header(18, 0, payload)
    assert correlation_id == 7 and header_size == 4
    error_code, count = struct.unpack(">hi", payload[4:10])
    assert error_code == ErrorCode.unsupported_version
    assert count == len(served(CONTROLLER))


async def test_pipelined_requests_are_answered_in_order(controller_server):
    async with KafkaClient("127.0.0.1", controller_server.port) as client:
        responses = await client.send_many([ApiVersionsV0() for _ in range(200)], ApiVersionsResponseV0)
    assert len(responses) == 200
    assert all(r.error_code == ErrorCode.none for r in responses)


HOSTILE = {
    "random bytes": lambda: random.Random(1).randbytes(5000),
    "truncated frame then close": lambda: struct.pack(">i", 100) + b"\x00\x12",
    "huge size prefix": lambda: struct.pack(">i", 2**31 - 1),
    "negative size": lambda: struct.pack(">i", -5),
    "unknown api key": lambda: encode_request(999, 0, 1, "x", b""),
    "client api on controller listener": lambda: encode_request(3, 1, 1, "x", b"\x00\x00\x00\x00"),
    "unsupported version of a served key": lambda: encode_request(56, 0, 1, "x", b""),
    "garbage body": lambda: encode_request(18, 3, 1, "x", os.urandom(3) + b"\xff\xff\xff\xff"),
    "header shorter than its fields": lambda: struct.pack(">i", 3) + b"\x00\x12\x00",
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_hostile_input_closes_only_that_connection(controller_server, name):
    await raw_exchange(controller_server.port, HOSTILE[name](), read_timeout=0.5)
    await assert_still_serving(controller_server.port)


async def test_huge_array_count_does_not_allocate():
    server = KafkaServer(BROKER, node=None, host="127.0.0.1", port=0)
    await server.start()
    try:
        body = struct.pack(">i", 2**31 - 1)  # MetadataRequest v1: topics array claiming 2^31-1 entries
        await raw_exchange(server.port, encode_request(3, 1, 1, "x", body), read_timeout=0.5)
        await assert_still_serving(server.port)
    finally:
        await server.stop()


async def test_connection_cap():
    server = KafkaServer(CONTROLLER, node=None, host="127.0.0.1", port=0, max_connections=2)
    await server.start()
    try:
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await asyncio.wait_for(reader.read(10), 2) == b""  # closed at once
        writer.close()
        for _, w in held:
            w.close()
    finally:
        await server.stop()


async def test_idle_and_slowloris_connections_are_closed():
    server = KafkaServer(CONTROLLER, node=None, host="127.0.0.1", port=0, idle_timeout_ms=300)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(struct.pack(">i", 50) + b"\x00")  # a frame that never completes
        await writer.drain()
        assert await asyncio.wait_for(reader.read(10), 3) == b""
        writer.close()
        await assert_still_serving(server.port)
    finally:
        await server.stop()


async def test_client_times_out_and_reconnects_after_server_restart():
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    client = KafkaClient("127.0.0.1", port, request_timeout_ms=200)
    with pytest.raises(RequestTimedOut):
        await client.send(ApiVersionsV0())
    silent.close()
    await silent.wait_closed()
    await client.close()
    with pytest.raises(ConnectionLost):
        await client.send(ApiVersionsV0())
    server = KafkaServer(CONTROLLER, node=None, host="127.0.0.1", port=port)
    await server.start()
    try:
        assert (await client.send(ApiVersionsV0())).error_code == ErrorCode.none
    finally:
        await client.close()
        await server.stop()


async def test_metadata_request_class_is_refused_on_controller():
    server = KafkaServer(CONTROLLER, node=None, host="127.0.0.1", port=0)
    await server.start()
    try:
        client = KafkaClient("127.0.0.1", server.port, request_timeout_ms=2000)
        with pytest.raises(ConnectionLost):
            await client.send(MetadataV1(topics=None))
        await client.close()
    finally:
        await server.stop()


async def test_on_frame_sees_the_frame_its_errors_fail_one_request_and_late_frames_are_not_applied():
    """``send(on_frame=...)`` (how followers append fetched records straight from the receive buffer): its
    result is the answer, its exception fails only that request, and a frame arriving after its caller
    gave up is not handed to it (a stopped fetcher must not append)."""
    delays = [0.0, 0.0, 0.5, 0.0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                request = await reader.readexactly(size)
            except asyncio.IncompleteReadError:
                return
            await asyncio.sleep(delays.pop(0))
            body = request[4:8] + struct.pack(">hi", 0, 0)  # correlation id; ApiVersions v0, no keys
            writer.write(struct.pack(">i", len(body)) + body)
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    seen: list[bytes] = []

    def on_frame(frame, pos):
        seen.append(bytes(frame[pos:]))
        return "applied"

    def failing(frame, pos):
        raise OSError("disk full")

    try:
        async with KafkaClient("127.0.0.1", port) as client:
            assert await client.send(ApiVersionsV0(), on_frame=on_frame) == "applied"
            assert seen == [struct.pack(">hi", 0, 0)]
            with pytest.raises(OSError, match="disk full"):
                await client.send(ApiVersionsV0(), on_frame=failing)
            with pytest.raises(RequestTimedOut):
                await client.send(ApiVersionsV0(), on_frame=on_frame, timeout_ms=100)
            await asyncio.sleep(0.6)  # the late answer arrives now
            assert len(seen) == 1, "a frame whose caller gave up was applied"
            assert await client.send(ApiVersionsV0(), on_frame=on_frame) == "applied"
            assert len(seen) == 2
    finally:
        server.close()
        await server.wait_closed()
