"""Connection creation rates (KIP-612), sans-IO (time comes in as an argument): Kafka's ConnectionQuotas
(core/.../network/SocketServer.scala) for the rates; the connection counts stay in the socket server.

Three rates are measured, each a Kafka ``Rate`` over quota.window.num samples of quota.window.size.seconds:
- broker-wide, ``max.connection.creation.rate``: every listener's new connections but the inter-broker
  listener's while the broker has more than one listener (Kafka's protectedListener);
- per listener, ``listener.name.<listener>.max.connection.creation.rate``;
- per client address, the ``ip`` entity's ``connection_creation_rate`` client quota (a specific address, else
  the default ip entity), from the metadata image.

Over the broker or listener rate Kafka's acceptor blocks for the throttle time before it takes the next
connection (waitForConnectionSlot): connections are delayed, never refused. Over an address's rate the
connection is accepted, held for the throttle time and closed (ConnectionThrottledException), and it is
taken back out of every rate it was recorded in. A throttle time is Kafka's QuotaUtils.boundedThrottleTime:
how long until the rate is back at its bound, at most one quota window.

A connection is recorded when its listener's accept loop takes it (``record_connection``, then, once the
loop has waited, ``record_ip``): the connections behind a waiting loop stay in the kernel's listen backlog,
unmeasured, as behind Kafka's blocked acceptor.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping

from epochkraft.broker.client_quotas import QuotaImage
from epochkraft.broker.quota_stats import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_MS, Rate
from epochkraft.metadata.client_quotas import CONNECTION_CREATION_RATE, IP, QuotaEntity

UNLIMITED_RATE = (
    2**31 - 1
)  # Kafka's default max.connection.creation.rate and QuotaConfig.IP_CONNECTION_RATE_DEFAULT
MAX_CONNECTION_CREATION_RATE = "max.connection.creation.rate"
IP_RATE_EXPIRATION_MS = 3_600_000  # an address's rate idle this long is forgotten (Kafka's sensor expiry)
EXPIRY_CHECK_INTERVAL_MS = 60_000


class _RateQuota:
    """One rate and its bound: Kafka's sensor with a Rate and an upper Quota."""

    __slots__ = ("bound", "last_ms", "rate")

    def __init__(self, bound: int, samples: int, window_ms: int) -> None:
        self.bound = bound
        self.rate = Rate(samples, window_ms)
        self.last_ms = 0

    def record(self, now_ms: int, max_throttle_ms: int) -> int:
        """Records one connection; the throttle time if the rate is now over its bound, else 0
        (ConnectionQuotas.recordAndGetThrottleTimeMs)."""
        self.last_ms = now_ms
        self.rate.record(1.0, now_ms)
        total, window_ms = self.rate.total_and_window_ms(now_ms)
        observed = total / (window_ms / 1000)
        if observed <= self.bound:
            return 0
        if self.bound <= 0:
            return max_throttle_ms
        return min(round((observed - self.bound) / self.bound * window_ms), max_throttle_ms)

    def unrecord(self, now_ms: int) -> None:
        self.rate.unrecord(1.0, now_ms)

    def measure(self, now_ms: int) -> float:
        return self.rate.measure(now_ms)


class ConnectionQuotas:
    """The connection creation rates of one broker's listeners."""

    def __init__(
        self,
        listeners: Iterable[str],
        inter_broker_listener: str,
        samples: int = QUOTA_WINDOW_NUM,
        window_ms: int = QUOTA_WINDOW_SIZE_MS,
        broker_rate: int = UNLIMITED_RATE,
        current_image: Callable[[], QuotaImage] | None = None,
    ) -> None:
        """``current_image``: the metadata image (the one published last) whose ip entities' quotas are
        followed (re-read when they changed)."""
        self.current_image = current_image
        self._image_version = -1
        self.samples = samples
        self.window_ms = window_ms
        self.max_throttle_ms = window_ms  # ConnectionQuotas.maxThrottleTimeMs: one quota window
        self.listeners = tuple(listeners)
        self.inter_broker_listener = inter_broker_listener
        self.broker = _RateQuota(broker_rate, samples, window_ms)
        self.per_listener = {name: _RateQuota(UNLIMITED_RATE, samples, window_ms) for name in self.listeners}
        self.default_ip_rate = UNLIMITED_RATE
        self.ip_rates: dict[str, int] = {}  # address -> its own connection_creation_rate
        self._ips: dict[str, _RateQuota] = {}
        self._next_expiry_ms = 0

    # ---- configuration ---------------------------------------------------------------------------------
    def update_broker_rate(self, rate: int) -> None:
        """max.connection.creation.rate (dynamic: ConnectionQuotas.updateBrokerMaxConnectionRate)."""
        self.broker.bound = rate

    def update_listener_rate(self, listener: str, rate: int) -> None:
        """listener.name.<listener>.max.connection.creation.rate (ListenerConnectionQuota.reconfigure)."""
        self.per_listener[listener].bound = rate

    def update_ip_quotas(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """The ip entities' connection_creation_rate of the image's client quotas, the default ip entity's
        for every address without one of its own (ConnectionQuotas.updateIpConnectionRateQuota)."""
        default = UNLIMITED_RATE
        rates: dict[str, int] = {}
        for entity, values in quotas.items():
            if len(entity) != 1 or entity[0][0] != IP or CONNECTION_CREATION_RATE not in values:
                continue
            name, rate = entity[0][1], int(values[CONNECTION_CREATION_RATE])
            if name is None:
                default = rate
            else:
                rates[_canonical(name)] = rate
        self.default_ip_rate, self.ip_rates = default, rates
        for ip, quota in self._ips.items():
            quota.bound = self.ip_rate(ip)

    def ip_rate(self, ip: str) -> int:
        """ConnectionQuotas.connectionRateForIp."""
        return self.ip_rates.get(_canonical(ip), self.default_ip_rate)

    # ---- new connections ------------------------------------------------------------------------------
    def record_connection(self, listener: str, now_ms: int) -> int:
        """A new connection taken by ``listener``'s acceptor at ``now_ms``: how long the acceptor waits before
        it serves this connection and takes the next, 0 for not at all (ConnectionQuotas.waitForConnectionSlot
        with recordConnectionAndGetThrottleTimeMs): the larger of the broker-wide throttle time (the
        inter-broker listener exempt) and the listener's."""
        throttle = 0
        if not self.protected(listener):
            throttle = self.broker.record(now_ms, self.max_throttle_ms)
        quota = self.per_listener.get(listener)
        if quota is not None:
            throttle = max(throttle, quota.record(now_ms, self.max_throttle_ms))
        return throttle

    def record_ip(self, listener: str, ip: str, now_ms: int) -> int:
        """The connection from ``ip``, once its acceptor waited: 0 when it is served, else its address's
        throttle time, after which it is closed unserved; a throttled connection is taken back out of every
        rate (ConnectionQuotas.recordIpConnectionMaybeThrottle with updateListenerMetrics)."""
        self._follow_image()
        ip = _canonical(ip)
        bound = self.ip_rate(ip)
        if bound == UNLIMITED_RATE:
            return 0
        quota = self._ip_quota(ip, bound, now_ms)
        throttle = quota.record(now_ms, self.max_throttle_ms)
        if throttle:
            quota.unrecord(now_ms)
            if not self.protected(listener):
                self.broker.unrecord(now_ms)
            if (listener_quota := self.per_listener.get(listener)) is not None:
                listener_quota.unrecord(now_ms)
        return throttle

    def _follow_image(self) -> None:
        if self.current_image is None:
            return
        image = self.current_image()
        if image.client_quotas_version != self._image_version:
            self._image_version = image.client_quotas_version
            self.update_ip_quotas(image.client_quotas)

    def protected(self, listener: str) -> bool:
        """The inter-broker listener, when there are others: exempt from the broker-wide rate."""
        return listener == self.inter_broker_listener and len(self.listeners) > 1

    def _ip_quota(self, ip: str, bound: int, now_ms: int) -> _RateQuota:
        quota = self._ips.get(ip)
        if quota is None:
            self._expire_ips(now_ms)
            quota = self._ips[ip] = _RateQuota(bound, self.samples, self.window_ms)
        return quota

    def _expire_ips(self, now_ms: int) -> None:
        """Forgets the rates of addresses idle for an hour, so a scan from many addresses leaves nothing."""
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + EXPIRY_CHECK_INTERVAL_MS
        for ip in [ip for ip, quota in self._ips.items() if now_ms - quota.last_ms > IP_RATE_EXPIRATION_MS]:
            del self._ips[ip]

    # ---- observation ----------------------------------------------------------------------------------
    def broker_rate(self, now_ms: int) -> float:
        return self.broker.measure(now_ms)

    def listener_rate(self, listener: str, now_ms: int) -> float:
        return self.per_listener[listener].measure(now_ms)

    def ip_rate_observed(self, ip: str, now_ms: int) -> float:
        quota = self._ips.get(_canonical(ip))
        return 0.0 if quota is None else quota.measure(now_ms)


def _canonical(ip: str) -> str:
    """One spelling per address (Kafka keys by InetAddress): ``::ffff:127.0.0.1`` is 127.0.0.1."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def listener_rate_key(listener: str) -> str:
    """The per-listener property, with the listener name lower-cased as Kafka's ListenerName.configPrefix."""
    return f"listener.name.{listener.lower()}.{MAX_CONNECTION_CREATION_RATE}"


def creation_rates(
    listeners: Iterable[str], levels: Iterable[Mapping[str, str]]
) -> tuple[int, dict[str, int]]:
    """(max.connection.creation.rate, each listener's rate) from config levels, the first that sets a key
    winning (this broker's dynamic configs, the cluster-wide default, the static settings). A listener
    without a rate of its own takes the broker-wide value, as Kafka configures a ListenerConnectionQuota
    from valuesWithPrefixOverride: the inter-broker listener is left out of the broker-wide rate, not
    unlimited."""
    ordered = list(levels)

    def first(key: str) -> int | None:
        for level in ordered:
            value = level.get(key)
            if value is not None and value.strip().isdigit():  # checked where it was set; never fatal here
                return int(value)
        return None

    broker = first(MAX_CONNECTION_CREATION_RATE)
    broker = UNLIMITED_RATE if broker is None else broker
    per_listener = {}
    for listener in listeners:
        own = first(listener_rate_key(listener))
        per_listener[listener] = broker if own is None else own
    return broker, per_listener
