"""Idle connections against real daemons: connections.max.idle.ms closes them on the broker and the
controller (as Kafka's Selector.maybeCloseOldestConnection), busy ones stay, the daemons' own connections
(heartbeats, replica fetches) survive a short idle limit, and an idle connection costs a few KB."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest

from epochkraft.harness.kio_client import MiniClient, split
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode
from tests.test_broker_cluster import wait_for
from tests.test_fuzz import rss_mb

pytestmark = pytest.mark.slow

IDLE = "connections.max.idle.ms=1000\n"


async def _closed_after(client: KafkaClient, timeout: float = 15.0) -> float:
    """Seconds from ``client``'s last request until the daemon closed its connection."""
    await client.api_versions()
    sent = time.monotonic()
    deadline = sent + timeout
    while client.connected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not client.connected, "the idle connection was not closed"
    return time.monotonic() - sent


@pytest.mark.timeout(120)
async def test_idle_connections_are_closed_after_connections_max_idle_ms(make_cluster):
    cluster = make_cluster(2, broker_extra=IDLE, controller_extra=IDLE)
    client = MiniClient(cluster.bootstrap)
    try:
        assert (
            await client.create_topic("idle", configs={"min.insync.replicas": "2"}, assignment=[[1, 2]]) == 0
        )
        host, port = split(cluster.bootstrap)[0]
        controller = cluster.node("controller")
        for address in ((host, port), ("127.0.0.1", controller.port)):
            idle = KafkaClient(*address)
            try:
                waited = await _closed_after(idle)
            finally:
                await idle.close()
            print(f"{address}: idle connection closed {waited:.2f} s after its last request")
            assert waited >= 1.0

        busy = KafkaClient(host, port)
        try:
            await busy.api_versions()
            for _ in range(10):  # 3 s of a request every 0.3 s: never idle for 1 s
                await asyncio.sleep(0.3)
                assert busy.connected
                await busy.api_versions()
        finally:
            await busy.close()

        # The daemons' own connections stay in use: heartbeats keep broker 2 registered, its fetches
        # keep it in the ISR, and acks=all produces are acknowledged.
        for i in range(5):
            assert (await client.produce("idle", 0, [f"v{i}".encode()]))[0] == ErrorCode.none
            await asyncio.sleep(0.5)

        async def full_isr():
            state, _ = await client.partition_state("idle")
            return sorted(state.isr_nodes) == [1, 2] and state

        assert await wait_for(full_isr)
    finally:
        await client.close()


@pytest.mark.timeout(120)
async def test_idle_connections_cost_a_few_kilobytes(make_cluster):
    """500 connections that each sent ApiVersions grow the broker's RSS by a few MB (each held a zeroed
    256 KiB receive buffer before: 128 MB), and all of them are closed once idle."""
    cluster = make_cluster(1, broker_extra=IDLE.replace("1000", "3000") + "max.connections=2000\n")
    broker = cluster.node(1)
    host, port = split(cluster.bootstrap)[0]
    clients = [KafkaClient(host, port) for _ in range(500)]
    try:
        before = rss_mb(broker.pid)
        for i in range(0, len(clients), 100):
            await asyncio.gather(*(c.api_versions() for c in clients[i : i + 100]))
        grown = rss_mb(broker.pid) - before
        print(f"500 idle connections: broker RSS +{grown:.1f} MB ({grown * 1024 / 500:.1f} KB each)")
        assert grown < 30, grown

        async def all_closed():
            return not any(c.connected for c in clients)

        assert await wait_for(all_closed, timeout=30)
    finally:
        await asyncio.gather(*(c.close() for c in clients))


@pytest.mark.timeout(120)
async def test_quiet_connections_give_back_their_receive_buffers(make_cluster):
    """Connections that each sent a 600 KB Produce and went quiet hold that frame's buffer (about 30 MB
    for 50) until they have been quiet for 10 s; then the broker's RSS falls back."""
    from kio.schema.produce.v9 import request as pr

    from epochkraft.protocol.records import build_batch

    cluster = make_cluster(1, broker_extra="max.connections=2000\n")
    broker = cluster.node(1)
    host, port = split(cluster.bootstrap)[0]
    batch = build_batch([(None, bytes(600_000), (), 0)])
    data = pr.TopicProduceData(
        name="nowhere", partition_data=(pr.PartitionProduceData(index=0, records=batch),)
    )
    request = pr.ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10), topic_data=(data,)
    )
    clients = [KafkaClient(host, port) for _ in range(50)]
    try:
        await clients[0].api_versions()
        before = rss_mb(broker.pid)
        for c in clients:
            response = await c.send(request)
            assert response.responses[0].partition_responses[0].error_code != ErrorCode.none
        held = rss_mb(broker.pid) - before

        async def released():
            return rss_mb(broker.pid) - before < held / 3

        started = time.monotonic()
        await wait_for(released, timeout=40, interval=0.5)
        print(
            f"50 connections after a 600 KB Produce: broker RSS +{held:.1f} MB, given back "
            f"{time.monotonic() - started:.1f} s later (+{rss_mb(broker.pid) - before:.1f} MB)"
        )
        assert held > 20, held
        assert all(c.connected for c in clients)  # quiet, not idle past connections.max.idle.ms
    finally:
        await asyncio.gather(*(c.close() for c in clients))
