"""Hostile clients against real daemons: produce batches that lie about their records are refused with
Kafka's error code and leave nothing in the log, on the leader and its followers, while other clients keep
being served and the broker's memory stays bounded."""

from __future__ import annotations

import pytest

from epochkraft.chaos.kio_client import MiniClient
from epochkraft.protocol.errors import ErrorCode
from tests.support.lying_batches import LYING_BATCHES, lying_batch
from tests.test_broker_cluster import wait_for
from tests.test_fuzz import rss_mb


@pytest.mark.timeout(180)
async def test_produce_with_invalid_records_is_refused(make_cluster):
    """As Kafka's ProduceRequestTest.testCorruptLz4ProduceRequest and LogValidatorTest's invalid batches:
    each lying batch gets INVALID_RECORD with a message, nothing is appended, the ISR stays full, and a
    compression bomb does not grow the leader's memory beyond the decompression bound."""
    cluster = make_cluster(3)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("lies", 1, 3, {"min.insync.replicas": "2"}) == ErrorCode.none
        error, first = await client.produce("lies", 0, [b"before"])
        assert (error, first) == (ErrorCode.none, 0)
        p, _ = await client.partition_state("lies")
        leader = cluster.node(p.leader_id)
        rss_before = rss_mb(leader.pid)
        for name in LYING_BATCHES:
            error, _, message = await client.produce_batch("lies", 0, lying_batch(name))
            assert error == ErrorCode.invalid_record, (name, error, message)
            assert message, name
        rss_grown = rss_mb(leader.pid) - rss_before
        error, after = await client.produce("lies", 0, [b"after"])
        assert (error, after) == (ErrorCode.none, 1)  # nothing was appended in between
        assert [v for _, v in await client.read_all("lies")] == [b"before", b"after"]

        async def full_isr():
            state, _ = await client.partition_state("lies")
            return sorted(state.isr_nodes) == [1, 2, 3] and state

        assert await wait_for(full_isr)
        assert all(cluster.node(b).alive for b in (1, 2, 3))
        assert rss_grown < 120, f"leader grew by {rss_grown:.0f} MB on lying batches"
    finally:
        await client.close()
