"""Eligible leader replicas (KIP-966) on real processes: the user's scenario of a topic with RF 3 and
min.insync.replicas 2 whose follower is SIGKILLed, whose other follower shuts down cleanly, whose leader is
then SIGKILLed: the cleanly stopped follower, started again, is elected from the ELR with every acknowledged
record; a follower back from an unclean shutdown (SIGKILL, no clean shutdown marker) left the ELR instead.
The Java Admin's describeTopics (kafka-topics --describe) shows the ELR when Kafka's jars are at hand."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from kio.schema.describe_topic_partitions.v0 import request as dtp
from kio.schema.describe_topic_partitions.v0.response import DescribeTopicPartitionsResponse

from epochkraft.harness.kio_client import MiniClient
from epochkraft.peers.fetch import PeerUnavailable, java_command, kafka_libs
from epochkraft.protocol.errors import ErrorCode
from tests.test_broker_cluster import produce_values

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
TOPIC = "elr"


async def wait_for(predicate, timeout: float = 30.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await predicate()
        if result:
            return result
        await asyncio.sleep(interval)
    raise AssertionError("condition not met in time")


async def elr_state(client: MiniClient) -> tuple[int, list[int], list[int], list[int]] | None:
    """(leader, ISR, ELR, last known ELR) as DescribeTopicPartitions answers, from any live broker."""
    request = dtp.DescribeTopicPartitionsRequest(
        topics=(dtp.TopicRequest(name=TOPIC),), response_partition_limit=10, cursor=None
    )
    try:
        response = await client.any_send(request, DescribeTopicPartitionsResponse)
    except Exception:  # every broker asked may be down for a moment
        return None
    p = response.topics[0].partitions[0]
    return p.leader_id, sorted(p.isr_nodes), sorted(p.eligible_leader_replicas), sorted(p.last_known_elr)


def java_describe(bootstrap: str) -> str | None:
    """kafka-topics --describe (TopicCommand, the Java Admin's describeTopics), or None without the jars."""
    try:
        kafka_libs()
    except PeerUnavailable:
        return None
    args = ["--bootstrap-server", bootstrap, "--describe", "--topic", TOPIC]
    command = java_command(
        "org.apache.kafka.tools.TopicCommand", args, heap_mb=256, jvm=["-XX:TieredStopAtLevel=1"]
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=90).stdout


async def test_a_cleanly_stopped_follower_is_elected_from_the_elr(make_cluster):
    cluster = make_cluster(3)
    client = MiniClient(cluster.bootstrap)
    try:
        configs = {"min.insync.replicas": "2"}
        assert await client.create_topic(TOPIC, configs=configs, assignment=[[1, 2, 3]]) == ErrorCode.none
        acked = await produce_values(client, TOPIC, 0, 20)

        cluster.node(3).kill()  # a follower SIGKILLed: the ISR shrinks to min ISR, writes go on
        await wait_for(lambda: _is(client, lambda s: s[1] == [1, 2]))
        acked += await produce_values(client, TOPIC, 20, 20)

        cluster.node(2).stop()  # the other follower shut down cleanly: below min ISR, into the ELR
        state = await wait_for(lambda: _is(client, lambda s: s[1] == [1] and s[2] == [2]))
        assert state == (1, [1], [2], [])
        described = java_describe(cluster.bootstrap)
        if described is not None:
            assert "Elr: 2" in described, described

        cluster.node(1).kill()  # the leader SIGKILLed: once fenced, no ISR left, the partition offline
        cluster.node(3).start()  # back from an unclean shutdown: not in the ELR, not elected
        offline = (-1, [], [1, 2], [1])  # the last leader is the last known ELR
        await wait_for(lambda: _is(client, lambda s: s == offline), timeout=20)
        cluster.node(2).start()  # back from a clean shutdown: elected from the ELR
        await wait_for(lambda: _is(client, lambda s: s[0] == 2))
        # Alone in the ISR, 2 is under min ISR and its high watermark stays where it was (KIP-966); the
        # last records it fetched become readable once 3 rejoins the ISR.
        await wait_for(lambda: _is(client, lambda s: s[1] == [2, 3]))
        values = await wait_for(lambda: _values_if(client, acked))
        assert values == acked, "every acknowledged record, once, in order"
        acked += await wait_for(lambda: _produce_once(client, 40))  # 3 rejoins the ISR, writes resume
        assert [v for _, v in await client.read_all(TOPIC)] == acked
    finally:
        await client.close()


async def _values_if(client: MiniClient, expected: list[bytes]) -> list[bytes] | None:
    """The partition's values up to the high watermark once they are ``expected`` (a leader's high
    watermark catches up a fetch later)."""
    values = [v for _, v in await client.read_all(TOPIC)]
    return values if values == expected else None


async def _is(client: MiniClient, check) -> tuple | None:
    state = await elr_state(client)
    return state if state is not None and check(state) else None


async def _produce_once(client: MiniClient, index: int) -> list[bytes] | None:
    value = f"value-{index}".encode()
    error, _ = await client.produce(TOPIC, 0, [value], retries=2)
    return [value] if error == ErrorCode.none else None
