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
    assert result.succeeded == FLOOD_TOPICS and not result.flood_errors, result.summary()
    assert result.produce_latencies_s and not result.failed_produces, result.summary()
    assert all(cluster.node(b).alive for b in (1, 2, 3))


FLOOD_S = 8.0
# Windows of 1 s, two of them: the flooder's first burst is a quarter of a second's work, not the 2.5 s
# Kafka's 11 windows allow a client at 25% (tests/test_quotas_clients.py does the same)
SHORT_WINDOWS = "quota.window.num=2\n"


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_list_offsets_flood_is_held_to_its_request_percentage(make_cluster):
    """A cheap-request flood (four connections keeping 32 ListOffsets of 200 partitions each in flight) under
    a default client-id request_percentage of 25 (KIP-124, as ClientRequestQuotaManagerTest's quota, against
    real daemons): the flooder's responses come back throttled while another client's produces keep
    succeeding (its latency with and without the quota: scripts/bench --parts request_floods)."""
    from epochkraft.bench.floods import list_offsets_flood

    cluster = make_cluster(1, broker_extra=SHORT_WINDOWS)
    result = await list_offsets_flood(cluster.bootstrap, FLOOD_S, request_percentage=25.0)
    summary = result.summary()
    print("list_offsets flood:", summary)
    assert result.throttled > 0, summary
    assert summary["produces"] >= 20 and not summary["failed_produces"], summary
    assert summary["produce_p50_ms"] < 100, summary
