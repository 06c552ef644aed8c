"""Connection creation rates (KIP-612) as Kafka's ConnectionQuotasTest, in virtual time: each listener's
client connects every ``interval`` ms, or as soon as the listener's accept loop serves its last connection
when that is later (Kafka's test threads block in ConnectionQuotas.inc). Like Kafka's test, 2 quota samples
of 1 s."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import pytest

from epochkraft.broker.connection_quotas import (
    UNLIMITED_RATE,
    ConnectionQuotas,
    creation_rates,
)

EXTERNAL, REPLICATION, ADMIN = "EXTERNAL", "REPLICATION", "ADMIN"
LISTENERS = (EXTERNAL, REPLICATION, ADMIN)
DEFAULT_IP = {EXTERNAL: "10.0.0.1", REPLICATION: "10.0.0.2", ADMIN: "10.0.0.3"}  # one client per listener


def connection_quotas(
    broker_rate: int = UNLIMITED_RATE, listener_rate: int | None = None
) -> ConnectionQuotas:
    quotas = ConnectionQuotas(LISTENERS, REPLICATION, samples=2, window_ms=1000, broker_rate=broker_rate)
    if listener_rate is not None:
        for listener in LISTENERS:
            quotas.update_listener_rate(listener, listener_rate)
    return quotas


@dataclass(frozen=True)
class Admission:
    """When a connection was served (its accept loop done waiting), and when it was closed instead."""

    serve_at_ms: int
    close_at_ms: int | None = None


def admit(quotas: ConnectionQuotas, listener: str, ip: str, now_ms: int) -> Admission:
    """The socket server's accept loop taking one connection at ``now_ms``: counted, waited for, then
    measured against its address's rate."""
    serve_ms = now_ms + quotas.record_connection(listener, now_ms)
    throttle_ms = quotas.record_ip(listener, ip, serve_ms)
    return Admission(serve_ms, serve_ms + throttle_ms if throttle_ms else None)


class Clients:
    """Clients connecting concurrently, one per (listener, ip), each every ``interval_ms``; each listener's
    accept loop takes one connection at a time (the others wait in its backlog)."""

    def __init__(self, quotas: ConnectionQuotas, start_ms: int = 0) -> None:
        self.quotas = quotas
        self.start_ms = start_ms
        self.admitted: dict[tuple[str, str], list[tuple[int, Admission]]] = {}
        self.accept_loop_free_ms: dict[str, int] = {}

    def run(self, clients: list[tuple[str, str, int, int]], stop_at_throttle: bool = False) -> None:
        """(listener, ip, connections, interval_ms) per client, in time order across clients."""
        queue = [(self.start_ms, i) for i in range(len(clients))]
        left = [n for _, _, n, _ in clients]
        while queue:
            now_ms, i = heapq.heappop(queue)
            listener, ip, _, interval_ms = clients[i]
            taken_ms = max(now_ms, self.accept_loop_free_ms.get(listener, 0))
            admission = admit(self.quotas, listener, ip, taken_ms)
            self.accept_loop_free_ms[listener] = admission.serve_at_ms
            self.admitted.setdefault((listener, ip), []).append((now_ms, admission))
            left[i] -= 1
            if left[i] and not (stop_at_throttle and admission.close_at_ms is not None):
                heapq.heappush(queue, (max(now_ms + interval_ms, admission.serve_at_ms), i))

    def accepted(self, listener: str, ip: str | None = None) -> int:
        ip = ip or DEFAULT_IP[listener]
        return sum(a.close_at_ms is None for _, a in self.admitted.get((listener, ip), []))

    def throttled(self, listener: str, ip: str | None = None) -> int:
        ip = ip or DEFAULT_IP[listener]
        return sum(a.close_at_ms is not None for _, a in self.admitted.get((listener, ip), []))

    def blocked_ms(self, listener: str) -> int:
        """The time connections on the listener waited for the acceptor (Kafka's BlockedPercentMeter)."""
        return sum(
            a.serve_at_ms - arrived
            for (name, _), admitted in self.admitted.items()
            if name == listener
            for arrived, a in admitted
        )

    def accepted_rate(self, listener: str, ip: str | None = None) -> float:
        """Accepted connections a second, from the first arrival to the last one served."""
        admitted = self.admitted[(listener, ip or DEFAULT_IP[listener])]
        elapsed_ms = max(a.serve_at_ms for _, a in admitted) - admitted[0][0]
        return self.accepted(listener, ip) / (elapsed_ms / 1000)


def every_listener(connections: int, interval_ms: int) -> list[tuple[str, str, int, int]]:
    return [(name, DEFAULT_IP[name], connections, interval_ms) for name in LISTENERS]


def test_no_connection_limits_by_default():
    clients = Clients(connection_quotas())
    clients.run(every_listener(1000, 0))
    assert all(clients.accepted(name) == 1000 and clients.blocked_ms(name) == 0 for name in LISTENERS)


def test_broker_connection_rate_limit_when_actual_rate_below_limit():
    clients = Clients(connection_quotas(broker_rate=125))
    clients.run(every_listener(200, 25))  # 40/s per listener, 80/s counted (the inter-broker one exempt)
    assert all(clients.accepted(name) == 200 and clients.blocked_ms(name) == 0 for name in LISTENERS)


def test_broker_connection_rate_limit_when_actual_rate_above_limit():
    """Over the broker-wide rate the acceptor waits, on every listener but the inter-broker one; every
    connection is accepted in the end."""
    clients = Clients(connection_quotas(broker_rate=90))
    clients.run(every_listener(400, 10))  # 100/s per listener
    assert clients.blocked_ms(EXTERNAL) > 0 and clients.blocked_ms(ADMIN) > 0
    assert clients.blocked_ms(REPLICATION) == 0
    assert all(clients.accepted(name) == 400 for name in LISTENERS)
    combined = clients.accepted_rate(EXTERNAL) + clients.accepted_rate(ADMIN)
    assert combined == pytest.approx(90, abs=8)


def test_listener_connection_rate_limit_when_actual_rate_below_limit():
    clients = Clients(connection_quotas(broker_rate=125, listener_rate=50))
    clients.run(every_listener(200, 25))
    assert all(clients.accepted(name) == 200 and clients.blocked_ms(name) == 0 for name in LISTENERS)


def test_listener_connection_rate_limit_when_actual_rate_above_limit():
    clients = Clients(connection_quotas(broker_rate=125, listener_rate=30))
    clients.run(every_listener(600, 25))  # 40/s per listener, over its 30/s
    for name in LISTENERS:
        assert clients.blocked_ms(name) > 0 and clients.accepted(name) == 600
        assert clients.accepted_rate(name) == pytest.approx(30, abs=7)


def test_ip_connection_rate_when_actual_rate_below_limit():
    quotas = connection_quotas()
    quotas.update_ip_quotas({(("ip", DEFAULT_IP[EXTERNAL]),): {"connection_creation_rate": 30.0}})
    clients = Clients(quotas)
    clients.run([(EXTERNAL, DEFAULT_IP[EXTERNAL], 200, 40), (ADMIN, DEFAULT_IP[ADMIN], 200, 20)])
    assert clients.accepted(EXTERNAL) == 200 and clients.accepted(ADMIN) == 200
    assert clients.accepted_rate(EXTERNAL) == pytest.approx(25, abs=1)
    assert clients.blocked_ms(EXTERNAL) == clients.blocked_ms(ADMIN) == 0


def test_ip_connection_rate_when_actual_rate_above_limit():
    """Over its address's rate a connection is closed after its throttle time, not waited for: the acceptor
    never blocks; the default ip entity's rate holds for addresses without their own."""
    quotas = connection_quotas()
    quotas.update_ip_quotas({(("ip", DEFAULT_IP[EXTERNAL]),): {"connection_creation_rate": 20.0}})
    clients = Clients(quotas)
    clients.run([(EXTERNAL, DEFAULT_IP[EXTERNAL], 80, 25)])
    assert clients.throttled(EXTERNAL) > 0
    assert clients.accepted_rate(EXTERNAL) == pytest.approx(20, abs=1)
    quotas.update_ip_quotas(
        {
            (("ip", DEFAULT_IP[EXTERNAL]),): {"connection_creation_rate": 20.0},
            (("ip", None),): {"connection_creation_rate": 20.0},
        }
    )
    clients = Clients(quotas, start_ms=10_000)
    clients.run([(ADMIN, DEFAULT_IP[ADMIN], 80, 25)])
    assert clients.throttled(ADMIN) > 0
    assert clients.accepted_rate(ADMIN) == pytest.approx(20, abs=1)
    assert clients.blocked_ms(EXTERNAL) == clients.blocked_ms(ADMIN) == 0
    for _, admission in clients.admitted[(ADMIN, DEFAULT_IP[ADMIN])]:
        if admission.close_at_ms is not None:
            assert 0 < admission.close_at_ms - admission.serve_at_ms <= 1000  # at most one quota window


def test_ip_connection_rate_with_listener_connection_rate():
    """A default ip rate of 25 and a listener rate of 35: at most one of two addresses connecting as fast
    as they can is throttled by its own rate before the acceptor blocks on the listener's."""
    quotas = connection_quotas(listener_rate=35)
    quotas.update_ip_quotas({(("ip", None),): {"connection_creation_rate": 25.0}})
    clients = Clients(quotas)
    clients.run([(EXTERNAL, "10.0.0.1", 35, 0), (EXTERNAL, "10.0.0.9", 35, 0)], stop_at_throttle=True)
    assert clients.blocked_ms(EXTERNAL) > 0
    assert (clients.throttled(EXTERNAL, "10.0.0.1") > 0) + (clients.throttled(EXTERNAL, "10.0.0.9") > 0) < 2


def test_rejected_ip_connection_unrecorded_from_connection_rate_quotas():
    """A throttled connection is taken back out of the address's, the listener's and the broker's rates,
    on the inter-broker listener as on the others."""
    quotas = connection_quotas()
    ip_external, ip_replication = DEFAULT_IP[EXTERNAL], DEFAULT_IP[REPLICATION]
    quotas.ip_rates = {ip_external: 0, ip_replication: 0}
    for listener, ip in ((EXTERNAL, ip_external), (REPLICATION, ip_replication)):
        assert admit(quotas, listener, ip, 1000).close_at_ms is not None
        assert quotas.ip_rate_observed(ip, 1000) == 0
        assert quotas.listener_rate(listener, 1000) == 0
        assert quotas.broker_rate(1000) == 0


def test_max_listener_connection_rate_reconfiguration():
    quotas = connection_quotas()
    quotas.update_listener_rate(EXTERNAL, 20)
    quotas.update_listener_rate(EXTERNAL, UNLIMITED_RATE)  # removed
    clients = Clients(quotas)
    clients.run([(EXTERNAL, DEFAULT_IP[EXTERNAL], 1000, 0)])
    assert clients.blocked_ms(EXTERNAL) == 0
    quotas.update_listener_rate(EXTERNAL, 10)
    clients = Clients(quotas, start_ms=60_000)
    clients.run([(EXTERNAL, DEFAULT_IP[EXTERNAL], 200, 5)])
    assert clients.blocked_ms(EXTERNAL) > 0
    assert clients.accepted_rate(EXTERNAL) == pytest.approx(10, abs=3)


def test_max_broker_connection_rate_reconfiguration():
    quotas = connection_quotas()
    quotas.update_broker_rate(50)
    clients = Clients(quotas)
    clients.run([(EXTERNAL, DEFAULT_IP[EXTERNAL], 400, 5)])  # 200/s
    assert clients.blocked_ms(EXTERNAL) > 0
    assert clients.accepted_rate(EXTERNAL) == pytest.approx(50, abs=20)


def test_ip_connection_rate_metric_update():
    """Kafka's testIpConnectionRateMetricUpdate, on the quota each address is held to."""
    quotas = connection_quotas()
    external, admin = DEFAULT_IP[EXTERNAL], DEFAULT_IP[ADMIN]
    default, own = (("ip", None),), (("ip", external),)
    quotas.update_ip_quotas({default: {"connection_creation_rate": 50.0}})
    assert quotas.ip_rate(external) == quotas.ip_rate(admin) == 50
    quotas.update_ip_quotas(
        {default: {"connection_creation_rate": 50.0}, own: {"connection_creation_rate": 30.0}}
    )
    assert quotas.ip_rate(external) == 30
    quotas.update_ip_quotas(
        {default: {"connection_creation_rate": 20.0}, own: {"connection_creation_rate": 30.0}}
    )
    assert (quotas.ip_rate(external), quotas.ip_rate(admin)) == (30, 20)
    quotas.update_ip_quotas({own: {"connection_creation_rate": 30.0}})
    assert (quotas.ip_rate(external), quotas.ip_rate(admin)) == (30, UNLIMITED_RATE)
    quotas.update_ip_quotas({})
    assert quotas.ip_rate(external) == UNLIMITED_RATE


def test_enforced_ip_connection_rate_quota_update():
    """At one instant, 40 connections against a rate of 20 (1 s of samples): 20 accepted; raised to 30, 10
    more; removed, all; a default ip entity then holds another address."""
    quotas = connection_quotas()
    external, admin = DEFAULT_IP[EXTERNAL], DEFAULT_IP[ADMIN]
    own = (("ip", external),)

    def accept(listener: str, ip: str, count: int) -> int:
        clients = Clients(quotas, start_ms=5000)
        clients.run([(listener, ip, count, 0)], stop_at_throttle=True)
        return clients.accepted(listener, ip)

    quotas.update_ip_quotas({own: {"connection_creation_rate": 20.0}})
    assert accept(EXTERNAL, external, 40) == 20
    quotas.update_ip_quotas({own: {"connection_creation_rate": 30.0}})
    assert accept(EXTERNAL, external, 40) == 10
    quotas.update_ip_quotas({})
    assert accept(EXTERNAL, external, 40) == 40
    assert accept(ADMIN, admin, 40) == 40
    quotas.update_ip_quotas({(("ip", None),): {"connection_creation_rate": 20.0}})
    assert accept(ADMIN, admin, 40) == 20, "connections made while no quota held it were not measured"


def test_ipv4_mapped_address_is_the_ipv4_address():
    quotas = connection_quotas()
    quotas.update_ip_quotas({(("ip", "127.0.0.1"),): {"connection_creation_rate": 1.0}})
    assert admit(quotas, EXTERNAL, "::ffff:127.0.0.1", 0).close_at_ms is None
    assert admit(quotas, EXTERNAL, "127.0.0.1", 0).close_at_ms is not None


def test_inter_broker_listener_counted_when_it_is_the_only_listener():
    """protectedListener: the inter-broker listener is left out of the broker-wide rate only when the
    broker has other listeners."""
    alone = ConnectionQuotas([REPLICATION], REPLICATION, samples=2, window_ms=1000, broker_rate=5)
    assert not alone.protected(REPLICATION)
    assert max(alone.record_connection(REPLICATION, 0) for _ in range(10)) > 0
    assert connection_quotas(broker_rate=5).protected(REPLICATION)


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        ([{}], (UNLIMITED_RATE, {EXTERNAL: UNLIMITED_RATE, REPLICATION: UNLIMITED_RATE})),
        (  # a listener without its own rate takes the broker-wide one (valuesWithPrefixOverride)
            [{"max.connection.creation.rate": "50"}],
            (50, {EXTERNAL: 50, REPLICATION: 50}),
        ),
        (  # the listener's own, named in lower case, at any level wins over the broker-wide value
            [
                {"max.connection.creation.rate": "50"},
                {"listener.name.external.max.connection.creation.rate": "7"},
            ],
            (50, {EXTERNAL: 7, REPLICATION: 50}),
        ),
        (  # this broker's dynamic value over the cluster default over the static setting
            [
                {"max.connection.creation.rate": "10"},
                {"max.connection.creation.rate": "20"},
                {"max.connection.creation.rate": "30"},
            ],
            (10, {EXTERNAL: 10, REPLICATION: 10}),
        ),
        (
            [{"max.connection.creation.rate": "x"}, {"max.connection.creation.rate": "3"}],
            (3, {EXTERNAL: 3, REPLICATION: 3}),
        ),
    ],
)
def test_creation_rates_from_config_levels(levels, expected):
    assert creation_rates([EXTERNAL, REPLICATION], levels) == expected


class Image:
    """The metadata image's client quotas, as the broker's cache holds them."""

    def __init__(self) -> None:
        self.client_quotas: dict = {}
        self.client_quotas_version = 0

    def set(self, entity, values) -> None:
        self.client_quotas[entity] = values
        self.client_quotas_version += 1


def test_ip_quotas_followed_from_the_image():
    """An ip entity's connection_creation_rate replayed into the image holds the next connection."""
    image = Image()
    quotas = ConnectionQuotas(LISTENERS, REPLICATION, samples=2, window_ms=1000, current_image=lambda: image)
    assert admit(quotas, EXTERNAL, "10.0.0.1", 0).close_at_ms is None
    image.set((("ip", "10.0.0.1"),), {"connection_creation_rate": 1.0})
    assert admit(quotas, EXTERNAL, "10.0.0.1", 0).close_at_ms is None
    assert admit(quotas, EXTERNAL, "10.0.0.1", 0).close_at_ms is not None


def test_broker_follows_dynamic_creation_rates():
    """The broker's rates from its dynamic configs (its own, then the cluster default), then its static
    settings, re-read on every metadata change (DynamicConnectionQuota.reconfigure)."""
    from types import SimpleNamespace

    from epochkraft.broker.metadata_cache import Changes, MetadataCache
    from epochkraft.broker.settings import BrokerSettings
    from epochkraft.config import load_settings
    from epochkraft.metadata.config_schema import ResourceType
    from epochkraft.protocol.metadata_records import ConfigRecord
    from epochkraft.server.broker_daemon import BrokerNode

    settings = load_settings(
        BrokerSettings,
        properties={
            "max.connection.creation.rate": "40",
            "listener.name.external.max.connection.creation.rate": "30",
        },
    )
    cache = MetadataCache(node_id=1)
    node = SimpleNamespace(settings=settings, cache=cache, node_id=1, connection_quotas=connection_quotas())
    BrokerNode.refresh_connection_quotas(node)
    quotas = node.connection_quotas
    assert quotas.broker.bound == 40
    assert {name: quotas.per_listener[name].bound for name in LISTENERS} == {
        EXTERNAL: 30,
        REPLICATION: 40,
        ADMIN: 40,
    }
    for name, value, broker in (
        ("max.connection.creation.rate", "20", ""),
        ("listener.name.admin.max.connection.creation.rate", "5", "1"),
        ("max.connection.creation.rate", "10", "1"),
    ):
        cache.apply(
            cache.next_offset,
            ConfigRecord(resource_type=ResourceType.BROKER, resource_name=broker, name=name, value=value),
            Changes(),
        )
    BrokerNode.refresh_connection_quotas(node)
    assert quotas.broker.bound == 10
    assert {name: quotas.per_listener[name].bound for name in LISTENERS} == {
        EXTERNAL: 30,
        REPLICATION: 10,
        ADMIN: 5,
    }
