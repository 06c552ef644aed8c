"""KIP-219 at the server edge: a request over its client's quota is answered with the throttle time, and the
connection is not read for that long after the response is sent; other clients are served meanwhile. A
real listener on loopback with a broker stand-in holding only the metadata image DescribeClientQuotas reads."""

from __future__ import annotations

import datetime
import time
from types import SimpleNamespace

import pytest
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest

from epochkraft.broker.client_quotas import ClientQuotas
from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.metadata.image import Changes
from epochkraft.net import server as server_module
from epochkraft.net.client import KafkaClient
from epochkraft.net.server import KafkaServer
from epochkraft.protocol.api import BROKER
from epochkraft.protocol.metadata_records import ClientQuotaRecord, EntityData

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
    cache.replay(record, Changes())
    node = SimpleNamespace(cache=cache)
    server = KafkaServer(BROKER, node, "127.0.0.1", 0, quotas=ClientQuotas(cache, window_ms=WINDOW_MS))
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
            responses = await slow.send_many([REQUEST] * 3)
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
