"""KIP-599 on a real cluster: a client's CreateTopics sent to each of three brokers in turn, and then to the
controller's own listener (KIP-919), all draw on one controller_mutation_rate bucket kept by the active
controller, as Kafka's ControllerMutationQuotaTest expects of a cluster: the quota holds cluster-wide, not
once per broker. Run against brokers that charged the quota themselves, all six were created (each broker had
its own burst, and the controller's listener charged none)."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.create_topics.v7 import request as ct7
from kio.static.primitive import f64

from epochkraft.config import parse_host_port
from epochkraft.harness.cluster import LocalCluster
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CLIENT = "spreading-admin"
RATE = 2.0  # partitions a second: with Kafka's 11 windows of a second, a burst of 22
PARTITIONS = 10


async def set_mutation_rate(port: int) -> None:
    request = acq.AlterClientQuotasRequest(
        entries=(
            acq.EntryData(
                entity=(acq.EntityData(entity_type="client-id", entity_name=CLIENT),),
                ops=(acq.OpData(key="controller_mutation_rate", value=f64(RATE), remove=False),),
            ),
        ),
        validate_only=False,
    )
    async with KafkaClient("127.0.0.1", port) as client:
        response = await client.send(request)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]


async def create(client: KafkaClient, name: str) -> tuple[ErrorCode, float]:
    topic = ct7.CreatableTopic(
        name=name, num_partitions=PARTITIONS, replication_factor=1, assignments=(), configs=()
    )
    request = ct7.CreateTopicsRequest(
        topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False
    )
    response = await client.send(request)
    return response.topics[0].error_code, response.throttle_time / datetime.timedelta(milliseconds=1)


async def spread(cluster: LocalCluster) -> list[tuple[ErrorCode, float]]:
    ports = [node.port for node in cluster.nodes.values()]
    await set_mutation_rate(ports[0])
    clients = [KafkaClient("127.0.0.1", port, client_id=CLIENT) for port in ports]
    host, port = parse_host_port(cluster.controller_address)
    clients.append(KafkaClient(host, port, client_id=CLIENT))
    try:
        # brokers 1, 2, 3, 1, 2 (each connection used before a throttled answer mutes it), then the controller
        order = [clients[0], clients[1], clients[2], clients[0], clients[1], clients[3]]
        return [await create(client, f"spread-{i}") for i, client in enumerate(order)]
    finally:
        for client in clients:
            await client.close()


def test_strict_create_topics_request_spread_over_brokers(make_cluster):
    """ControllerMutationQuotaTest.testStrictCreateTopicsRequest with each request to another broker: 30
    partitions empty the burst of 22 (a strict quota checks before recording: the request that empties it
    passes), then every
    request is THROTTLING_QUOTA_EXCEEDED with a throttle time, through any broker or the controller."""
    answers = asyncio.run(spread(make_cluster(3)))
    errors = [error for error, _ in answers]
    assert errors == [ErrorCode.none] * 3 + [ErrorCode.throttling_quota_exceeded] * 3, answers
    assert all(throttle > 0 for _, throttle in answers[3:]), answers
