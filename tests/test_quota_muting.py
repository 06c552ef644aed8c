"""KIP-219 at the server edge: a request over its client's quota is answered with the throttle time, and the
connection is not read for that long after the response is sent; other clients are served meanwhile. A
real listener on loopback with a broker stand-in holding only the metadata image DescribeClientQuotas reads."""

from __future__ import annotations

import datetime
import time
from types import SimpleNamespace

import pytest
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from kio.schema.describe_client_quotas.v1.response import DescribeClientQuotasResponse

from epochkraft.broker.client_quotas import ClientQuotas
from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.metadata.image import Changes
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.api import BROKER
from epochkraft.protocol.metadata_records import ClientQuotaRecord, EntityData
from epochkraft.server import socket_server as server_module
from epochkraft.server.socket_server import KafkaServer

pytestmark = pytest.mark.net

WINDOW_MS = 300  # a request_percentage throttle is at most one window
REQUEST = DescribeClientQuotasRequest(components=(), strict=False)


async def serve() -> KafkaServer:
    cache = MetadataCache(1)
    # a share of the event loop no request fits in: every request of client "slow" is throttled a window
    record = ClientQuotaRecord(
        entity=(EntityData(entity_type="client-id", entity_name="slow"),),
        key="request_percentage",
        value=1e-6,
    )
    cache.apply(0, record, Changes())
    node = SimpleNamespace(cache=cache)
    server = KafkaServer(
        BROKER, node, "127.0.0.1", 0, quotas=ClientQuotas(lambda: cache.image, window_ms=WINDOW_MS)
    )
    await server.start()
    return server


async def timed(client: KafkaClient) -> tuple[float, float]:
    """(seconds to the response, its throttle time in ms)."""
    started = time.monotonic()
    response = await client.send(REQUEST)
    return time.monotonic() - started, response.throttle_time / datetime.timedelta(milliseconds=1)


async def test_a_throttled_connection_is_muted_for_the_throttle_time():
    server = await serve()
    try:
        async with (
            KafkaClient("127.0.0.1", server.port, client_id="slow") as slow,
            KafkaClient("127.0.0.1", server.port, client_id="fast") as fast,
        ):
            _, throttle = await timed(slow)
            assert throttle == WINDOW_MS
            waited, _ = await timed(slow)  # sent at once, read only once the mute is over
            assert waited >= 0.8 * WINDOW_MS / 1000, waited
            await timed(slow)
            waited, throttle = await timed(fast)  # another client is neither throttled nor muted
            assert waited < 0.5 * WINDOW_MS / 1000 and throttle == 0, (waited, throttle)
    finally:
        await server.stop()


async def test_a_throttled_client_pipelining_gets_one_request_served_per_throttle_time():
    """Three requests sent at once by a client whose every request is throttled a window: they are started
    one at a time (as Kafka reads one request per connection at a time), so each waits for the previous
    one's mute, and the last is answered two windows later, not at once with the first."""
    server = await serve()
    try:
        async with KafkaClient("127.0.0.1", server.port, client_id="slow") as slow:
            started = time.monotonic()
            responses = await slow.send_many([REQUEST] * 3, DescribeClientQuotasResponse)
            waited = time.monotonic() - started
            assert [r.throttle_time / datetime.timedelta(milliseconds=1) for r in responses] == [
                WINDOW_MS
            ] * 3
            assert waited >= 2 * 0.8 * WINDOW_MS / 1000, waited
    finally:
        await server.stop()


async def test_without_enforcement_nothing_is_throttled_or_muted(monkeypatch):
    """UNSAFE_NO_QUOTA_ENFORCEMENT_FOR_TESTS: the checks above fail (no throttle time, no wait)."""
    monkeypatch.setattr(server_module, "UNSAFE_NO_QUOTA_ENFORCEMENT_FOR_TESTS", True)
    server = await serve()
    try:
        async with KafkaClient("127.0.0.1", server.port, client_id="slow") as slow:
            _, throttle = await timed(slow)
            waited, _ = await timed(slow)
            assert throttle == 0 and waited < 0.8 * WINDOW_MS / 1000, (throttle, waited)
    finally:
        await server.stop()


def quotas_of(records: dict[tuple[str, str], float]) -> ClientQuotas:
    cache = MetadataCache(1)
    for (client_id, key), value in records.items():
        entity = (EntityData(entity_type="client-id", entity_name=client_id),)
        cache.apply(cache.next_offset, ClientQuotaRecord(entity=entity, key=key, value=value), Changes())
    return ClientQuotas(lambda: cache.image)


async def run_with_quotas(quotas: ClientQuotas, key: int, version: int, request, answer):
    """(the encoded response, the mute it asks for) of one request through the server's quota path, its
    handler answering ``answer``."""
    import asyncio

    from epochkraft.protocol.framing import RequestHeader
    from epochkraft.server.context import RequestContext
    from epochkraft.server.handlers import served
    from epochkraft.server.socket_server import _Connection

    assert quotas.active()
    server = SimpleNamespace(log=None, sasl=None, max_frame_bytes=1 << 20, quotas=quotas)
    connection = _Connection(server)  # type: ignore[arg-type]

    async def handle(spec, request, ctx, encode=True):
        return answer

    connection._handle = handle  # type: ignore[method-assign]
    ctx = RequestContext(BROKER, RequestHeader(key, version, 7, "c", 0), version, None, None, None)
    future = asyncio.get_running_loop().create_future()
    response = await connection._run_with_quotas(served(BROKER)[key], request, ctx, 100, future, quotas)
    return response, connection.mutes.get(future, 0)


async def test_fetch_throttled_by_the_request_quota_alone_is_answered_empty():
    """KafkaApis.handleFetchRequest: with max(fetch throttle, request throttle) > 0 the response is the
    empty throttled one and its bytes are taken back from the fetch quota, whichever quota throttled."""
    from epochkraft.protocol import fetch_response
    from epochkraft.protocol.fetch_response import Answer

    quotas = quotas_of({("c", "request_percentage"): 1e-6, ("c", "consumer_byte_rate"): 1e9})
    records = b"r" * 5000
    answer = fetch_response.encode_response(12, [("t", [Answer(0, 0, 10, 0, [records])])])
    response, mute = await run_with_quotas(quotas, 1, 12, SimpleNamespace(replica_id=-1), answer)
    assert mute > 0
    assert records not in b"".join(bytes(p) for p in response), "a throttled fetch carries no records"
    assert quotas.fetch.observed("ANONYMOUS", "c", int(time.time() * 1000)) == 0.0


async def test_acks_zero_produce_is_exempt_from_the_request_quota():
    """KafkaApis.handleProduceRequest: acks=0 sends no response and is exempt from the request quota
    (sendNoOpResponseExemptThrottle); the same request with acks=1 is throttled."""
    quotas = quotas_of({("c", "request_percentage"): 1e-6})
    _, mute = await run_with_quotas(quotas, 0, 9, SimpleNamespace(acks=0), None)
    assert mute == 0 and quotas.request.observed("ANONYMOUS", "c", int(time.time() * 1000)) == 0.0
    _, mute = await run_with_quotas(quotas, 0, 9, SimpleNamespace(acks=1), None)
    assert mute > 0
