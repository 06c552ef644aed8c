"""Floods of legitimate requests against real daemons: the cluster's liveness signals (broker heartbeats,
replica fetches) keep flowing, so no broker is fenced and another client is still served."""

from __future__ import annotations

import pytest

from epochkraft.bench.floods import create_topics_flood

FLOOD_TOPICS = 2000  # single-partition RF 3 topics: 6,000 replicas over three brokers
PER_REQUEST = 500


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_create_topics_flood_fences_no_broker(make_cluster, tmp_path):
    """Thousands of topics created in big CreateTopics requests, one after another, with the 2 s session
    timeout of the test configs: every broker keeps its session (the controller fences none), every
    creation succeeds, and another client's acks=all produces all succeed meanwhile."""
    cluster = make_cluster(3, metrics=True)
    result = await create_topics_flood(
        cluster.bootstrap, tmp_path / "cluster-metrics", FLOOD_TOPICS, PER_REQUEST
    )
    print("create_topics flood:", result.summary())
    assert result.fences == 0, result.summary()
    assert result.created == FLOOD_TOPICS and not result.failed_creations, result.summary()
    assert result.produce_latencies_s and not result.failed_produces, result.summary()
    assert all(cluster.node(b).alive for b in (1, 2, 3))
