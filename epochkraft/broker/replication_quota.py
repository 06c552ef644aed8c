"""Follower-side replication throttle, as Kafka's: a reassignment's copy can be bounded in bytes per second.

The broker's dynamic config ``follower.replication.throttled.rate`` bounds the bytes this broker fetches
per second for the replicas a topic's ``follower.replication.throttled.replicas`` names (``*`` or
``partition:broker`` pairs naming this broker). As Kafka's ReplicaFetcherThread.shouldFollowerThrottle, a
throttled replica that is not in the ISR is left out of the next Fetch while the measured rate is above the
bound, and only its bytes count; replicas in the ISR are never slowed down. The rate is measured as
Kafka's ReplicationQuotaManager measures it (``Rate`` over 11 one-second windows, elapsed time at least 10
windows), so the first few seconds' worth of bytes go at full speed. Sans-IO: time comes in as an argument.
"""

from __future__ import annotations

from collections.abc import Callable

from epochkraft.metadata.config_schema import ResourceType

FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
WINDOWS = 11  # replication.quota.window.num
WINDOW_S = 1.0  # replication.quota.window.size.seconds
DynamicConfigs = Callable[[int, str], dict[str, str]]  # (resource type, name) -> dynamic configs


class ReplicationQuota:
    """Bytes recorded per window of the last ``WINDOWS``; ``exceeded`` compares their rate with a bound."""

    def __init__(self) -> None:
        self._windows: list[list[float]] = []  # [start, bytes], oldest first

    def record(self, size: int, now: float) -> None:
        self._expire(now)
        if not self._windows or now >= self._windows[-1][0] + WINDOW_S:
            self._windows.append([now, 0.0])
        self._windows[-1][1] += size

    def rate(self, now: float) -> float:
        """Kafka's Rate.measure: the bytes of the retained windows over their elapsed time, counting at
        least ``WINDOWS - 1`` full windows so that one burst does not read as an enormous rate."""
        self._expire(now)
        if not self._windows:
            return 0.0
        elapsed = max(now - self._windows[0][0], (WINDOWS - 1) * WINDOW_S)
        return sum(size for _, size in self._windows) / elapsed

    def exceeded(self, bound: int, now: float) -> bool:
        return self.rate(now) > bound

    def _expire(self, now: float) -> None:
        while self._windows and self._windows[0][0] + WINDOWS * WINDOW_S <= now:
            self._windows.pop(0)


def follower_rate(dynamic_config: DynamicConfigs, node_id: int) -> int | None:
    """This broker's ``follower.replication.throttled.rate`` (its own value, else the cluster default);
    None when unset. ``dynamic_config(resource_type, name)`` reads the metadata image's dynamic configs."""
    for name in (str(node_id), ""):
        value = dynamic_config(ResourceType.BROKER, name).get(FOLLOWER_RATE)
        if value is not None:
            return int(value)
    return None


def is_throttled(replicas_config: str | None, partition: int, node_id: int) -> bool:
    """Whether a topic's ``follower.replication.throttled.replicas`` names this broker's replica of the
    partition (Kafka's ThrottledReplicaListValidator format: ``*`` or ``partition:broker`` pairs)."""
    if not replicas_config:
        return False
    items = [item.strip() for item in replicas_config.split(",")]
    if items == ["*"]:
        return True
    wanted = f"{partition}:{node_id}"
    return any(item.replace(" ", "") == wanted for item in items)
