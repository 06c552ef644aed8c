"""The broker's quota managers, sans-IO, as Kafka's ClientQuotaManagerTest, ClientRequestQuotaManagerTest and
ControllerMutationQuotaManagerTest: the same figures from the same sequences of records and sleeps."""

from __future__ import annotations

import pytest

from epochkraft.broker.client_quotas import (
    ClientQuotaManager,
    ClientQuotas,
    ClientRequestQuotaManager,
    ControllerMutationQuotaManager,
)
from epochkraft.broker.quota_stats import Rate
from epochkraft.metadata.client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE

START = 1_700_000_000_000  # a wall clock, as Kafka's MockTime


def producer_quotas(quotas: dict) -> ClientQuotaManager:
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE)
    manager.update({entity: {PRODUCER_BYTE_RATE: value} for entity, value in quotas.items()})
    return manager


def test_quota_violation():
    """ClientQuotaManagerTest.testQuotaViolation: 400 B/s under a 500 B/s default client-id quota for 10 s,
    then a 2,300-byte spike half a second later: 6,300 bytes over 10.5 s is 600 B/s, throttled
    (600 - 500) / 500 * 10.5 s = 2,100 ms; unthrottled once the spike's sample has rolled over."""
    manager = producer_quotas({(("client-id", None),): 500.0})
    now = START
    for _ in range(10):
        assert manager.record("ANONYMOUS", "unknown", 400, now) == 0
        now += 1000
    now += 500
    assert manager.record("ANONYMOUS", "unknown", 2300, now) == 2100
    now += 2100
    for _ in range(10):
        manager.record("ANONYMOUS", "unknown", 400, now)
        now += 1000
    assert manager.record("ANONYMOUS", "unknown", 0, now) == 0


def test_request_percentage_quota_violation():
    """ClientRequestQuotaManagerTest.testRequestPercentageQuotaViolation: 1% is 10 ms a second; a throttle
    is at most one window (1,000 ms) however large the spike."""
    manager = ClientRequestQuotaManager()
    manager.update({(("client-id", "test-client"), ("user", "ANONYMOUS")): {"request_percentage": 1.0}})
    ms = 1_000_000  # ns
    now = START
    for _ in range(10):
        assert manager.record_time("ANONYMOUS", "test-client", 4 * ms, now) == 0
        now += 1000
    now += 500
    assert manager.record_time("ANONYMOUS", "test-client", int(67.1 * ms), now) == 210
    now += 210
    for _ in range(11):
        manager.record_time("ANONYMOUS", "test-client", 4 * ms, now)
        now += 1000
    assert manager.record_time("ANONYMOUS", "test-client", 0, now) == 0
    assert manager.record_time("ANONYMOUS", "test-client", 500 * ms, now) == 1000
    for _ in range(10):
        now += 1000
        assert manager.record_time("ANONYMOUS", "test-client", 0, now) == 1000
    now += 1000
    assert manager.record_time("ANONYMOUS", "test-client", 0, now) == 0


def check_quota(manager, user, client_id, bound, value, throttled, now):
    assert manager.quota(user, client_id) == bound
    throttle = manager.record(user, client_id, value * 11, now)
    assert (throttle > 0) == throttled, (user, client_id, throttle)


def test_quota_config_precedence():
    """ClientQuotaManagerTest.testQuotaConfigPrecedence: the eight entity combinations in Kafka's order,
    shared and exclusive rates, and what removing a default reverts to."""
    quotas = {
        (("user", None),): 1000.0,
        (("client-id", None),): 2000.0,
        (("client-id", None), ("user", None)): 3000.0,
        (("user", "userA"),): 4000.0,
        (("client-id", "client1"), ("user", "userA")): 5000.0,
        (("user", "userB"),): 6000.0,
        (("client-id", "client1"), ("user", "userB")): 7000.0,
        (("client-id", None), ("user", "userB")): 8000.0,
        (("user", "userC"),): 10000.0,
        (("client-id", "client1"),): 9000.0,
    }
    manager = producer_quotas(quotas)
    now = START
    check_quota(manager, "userA", "client1", 5000, 4500, False, now)  # <user, client> before <user>
    check_quota(manager, "userA", "client2", 4000, 4500, True, now)  # <user> before <client> and defaults
    check_quota(manager, "userA", "client3", 4000, 0, True, now)  # <user> is shared across its clients
    check_quota(manager, "userA", "client1", 5000, 0, False, now)  # <user, client> is its own
    check_quota(manager, "userB", "client1", 7000, 8000, True, now)
    check_quota(manager, "userB", "client2", 8000, 7000, False, now)  # <user, default client> per client
    check_quota(manager, "userB", "client3", 8000, 7000, False, now)
    check_quota(manager, "userD", "client1", 3000, 3500, True, now)  # <default user, default client>
    check_quota(manager, "userD", "client2", 3000, 2500, False, now)
    check_quota(manager, "userE", "client1", 3000, 2500, False, now)
    del quotas[(("client-id", None), ("user", None))]  # reverts to the <default user> quota
    manager.update({e: {PRODUCER_BYTE_RATE: v} for e, v in quotas.items()})
    check_quota(manager, "userD", "client1", 1000, 0, False, now)  # other tags: a new rate
    check_quota(manager, "userE", "client4", 1000, 1500, True, now)
    check_quota(manager, "userF", "client4", 1000, 800, False, now)  # <default user> shared by its clients
    check_quota(manager, "userF", "client5", 1000, 800, True, now)
    del quotas[(("user", None),)]  # reverts to the <default client-id> quota
    manager.update({e: {PRODUCER_BYTE_RATE: v} for e, v in quotas.items()})
    check_quota(manager, "userF", "client4", 2000, 0, False, now)
    check_quota(manager, "userF", "client5", 2000, 0, False, now)
    check_quota(manager, "userF", "client5", 2000, 2500, True, now)
    check_quota(manager, "userG", "client5", 2000, 0, True, now)  # shared across users of a client id


@pytest.mark.parametrize(
    ("quotas", "client", "expected"),
    [
        # testClientIdQuotaParsing, testUserQuotaParsing, testUserClientIdQuotaParsing
        ({(("client-id", "p1"),): 2000.0, (("client-id", None),): 10.0}, ("u", "p1"), 2000.0),
        ({(("client-id", "p1"),): 2000.0, (("client-id", None),): 10.0}, ("u", "other"), 10.0),
        ({(("user", "u1"),): 2000.0}, ("u2", "p1"), None),
        ({(("user", "u1"),): 2000.0, (("user", None),): 30.0}, ("u2", "p1"), 30.0),
        ({(("client-id", "p1"), ("user", "u1")): 2000.0}, ("u1", "p1"), 2000.0),
        ({(("client-id", "p1"), ("user", "u1")): 2000.0}, ("u1", "p2"), None),
        # testUserQuotaParsingWithDefaultClientIdQuota
        ({(("user", "u1"),): 2000.0, (("client-id", None),): 5.0}, ("u1", "p1"), 2000.0),
        ({(("user", "u1"),): 2000.0, (("client-id", None),): 5.0}, ("u2", "p1"), 5.0),
    ],
)
def test_quota_parsing(quotas, client, expected):
    assert producer_quotas(quotas).quota(*client) == expected


def test_set_and_remove_user_quota():
    """ClientQuotaManagerTest.testSetAndRemoveUserQuota: a quota removed is no longer enforced, and with
    none left nothing is measured."""
    manager = producer_quotas({(("user", "userA"),): 1000.0})
    assert manager.record("userA", "c", 20_000, START) > 0
    manager.update({})
    assert not manager.enabled and manager.record("userA", "c", 20_000, START) == 0


def test_controller_mutation_quota_violation():
    """ControllerMutationQuotaManagerTest.testControllerMutationQuotaViolation (10 samples: a burst of 100
    mutations at 10 a second): strict checks before recording, so the spike that empties the bucket passes
    and the next waits 10 / 10 = 1 s."""
    manager = ControllerMutationQuotaManager(samples=10)
    manager.update({(("client-id", "c"), ("user", "u")): {"controller_mutation_rate": 10.0}})
    now = START

    def record(partitions: int) -> int:
        quota = manager.new_quota_for("u", "c", api_version=6, strict_since=6, now_ms=now)
        return 0 if quota.record(partitions) else quota.throttle_time_ms(now)

    for _ in range(10):
        assert record(10) == 0
        now += 1000
    assert record(110) == 0
    assert record(110) == 1000
    now += 1000
    assert record(110) == 0


def test_throttle_time():
    """ControllerMutationQuotaManagerTest.testThrottleTime, and the permissive quota (versions before the
    strict one): never refused, its throttle time shrinks as time passes."""
    manager = ControllerMutationQuotaManager(samples=10)
    manager.update({(("user", "u"),): {"controller_mutation_rate": 10.0}})
    quota = manager.new_quota_for("u", "c", api_version=5, strict_since=6, now_ms=START)
    assert quota.record(120) and not quota.exceeded
    assert quota.throttle_time_ms(START) == 2000
    assert quota.throttle_time_ms(START + 500) == 1500


def test_expire_quota_sensors_of_the_controller_mutation_quota():
    """ClientQuotaManagerTest.testExpireQuotaSensors, for KIP-599's buckets: a client id gone for an hour
    leaves no bucket behind under a default client-id controller_mutation_rate; one in use keeps its own."""
    manager = ControllerMutationQuotaManager()
    manager.update({(("client-id", None),): {"controller_mutation_rate": 10.0}})
    for i in range(100):
        assert manager.new_quota_for("u", f"once-{i}", 6, 6, START).record(1)
    later = START + 3_600_001
    assert manager.new_quota_for("u", "kept", 6, 6, START + 1000).record(1)
    manager.new_quota_for("u", "newcomer", 6, 6, later)
    assert set(manager._buckets) == {("", "kept"), ("", "newcomer")}


def test_new_strict_quota_for_returns_unbounded_quota_when_quota_is_disabled():
    """ControllerMutationQuotaManagerTest.testNewStrictQuotaForReturnsUnboundedQuotaWhenQuotaIsDisabled."""
    manager = ControllerMutationQuotaManager()
    quota = manager.new_quota_for("u", "c", api_version=6, strict_since=6, now_ms=START)
    assert quota.record(1e9) and quota.throttle_time_ms(START) == 0


def test_rate_window_is_at_least_samples_minus_one_windows():
    """Rate.windowSize: a first burst is divided by 10 windows, not by the milliseconds elapsed."""
    rate = Rate()
    rate.record(10_000, START)
    assert rate.window_size_ms(START) == 10_000 and rate.measure(START) == 1000.0


def test_sampled_stat_keeps_quota_window_num_samples():
    """SampledStat.advance: the ring holds ``samples`` windows, a new one reuses the oldest, so the rate is
    measured over quota.window.num windows (here 3: the first window, still recent enough not to be purged
    as obsolete, has rolled out when the fourth began)."""
    rate = Rate(samples=3, window_ms=1000)
    rate.record(100, START)
    for ms in (999, 1000, 2000, 3000):
        rate.record(100, START + ms)
    assert rate.total_and_window_ms(START + 3000) == (300.0, 2000)
    assert rate.measure(START + 3000) == 150.0


def test_client_quotas_follow_the_image_and_cost_nothing_without_quotas():
    class Image:
        client_quotas: dict = {}
        client_quotas_version = 0

    image = Image()
    quotas = ClientQuotas(lambda: image)
    assert not quotas.active()
    image.client_quotas = {(("client-id", "app"),): {CONSUMER_BYTE_RATE: 100.0}}
    image.client_quotas_version = 1
    assert quotas.active() and quotas.fetch.enabled and not quotas.produce.enabled


def test_busy_time_counts_the_steps_of_a_request_not_its_waits():
    """request_percentage measures the event loop's time running a request: a handler that waits 100 ms
    and computes for about 20 ms is charged about 20 ms (Kafka charges request handler thread time)."""
    import asyncio
    import time

    from epochkraft.server.socket_server import _BusyTime

    async def handler() -> str:
        await asyncio.sleep(0.1)
        deadline = time.perf_counter() + 0.02
        while time.perf_counter() < deadline:
            pass
        return "answer"

    async def run() -> tuple[str, int]:
        timed = _BusyTime(handler())
        return await timed, timed.busy_ns

    answer, busy_ns = asyncio.run(run())
    assert answer == "answer"
    assert 0.02 <= busy_ns / 1e9 < 0.08, busy_ns


def test_exempt_requests_go_by_the_request_not_the_client_id():
    """Kafka exempts by request: cluster actions (sendResponseExemptThrottle) and a follower's Fetch
    (ReplicaId >= 0) are not measured, a client calling itself broker-3 or replica-fetcher-2 is, with or
    without an authorizer; ApiVersions is never measured."""
    from types import SimpleNamespace

    from epochkraft.protocol.api import BROKER
    from epochkraft.protocol.framing import RequestHeader
    from epochkraft.server.context import RequestContext
    from epochkraft.server.socket_server import UNTHROTTLED_APIS, _Connection, served

    apis = served(BROKER)

    def applies(key: int, version: int, client_id: str, request=None) -> bool:
        ctx = RequestContext(BROKER, RequestHeader(key, version, 1, client_id, 0), version, None, None, None)
        return _Connection._client_request(apis[key], request, ctx)

    assert applies(0, 9, "app") and applies(0, 9, "broker-3") and applies(0, 9, "replica-fetcher-2")
    consumer, follower = SimpleNamespace(replica_id=-1), SimpleNamespace(replica_id=2)
    assert applies(1, 12, "replica-fetcher-2", consumer)
    assert not applies(1, 12, "app", follower)
    assert not applies(1, 15, "app", SimpleNamespace(replica_state=SimpleNamespace(replica_id=2)))
    assert applies(1, 15, "app", SimpleNamespace(replica_state=SimpleNamespace(replica_id=-1)))
    assert not applies(27, 1, "app")  # WriteTxnMarkers, a cluster action
    # ApiVersions waits its turn like any client request, and is never measured
    assert applies(18, 3, "app") and 18 in UNTHROTTLED_APIS
