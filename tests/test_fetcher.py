"""The replica fetcher's lifecycle: a failure of any kind is logged and the fetcher starts again; once
stopped it stays stopped."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from epochkraft.broker.fetcher import ReplicaFetcher
from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.broker.settings import BrokerSettings


class FailingCache(MetadataCache):
    """A metadata cache whose endpoint lookup raises the first ``failures`` times (an injected fault)."""

    def __init__(self, failures: int) -> None:
        super().__init__(1)
        self.failures = failures
        self.lookups = 0

    def endpoint(self, broker_id: int, *args, **kwargs):
        self.lookups += 1
        if self.lookups <= self.failures:
            raise RuntimeError("injected fetcher failure")
        return super().endpoint(
            broker_id, *args, **kwargs
        )  # unknown broker: the fetcher waits and asks again


@dataclass
class Manager:
    cache: FailingCache
    node_id: int = 1
    settings: BrokerSettings = field(default_factory=BrokerSettings)


@dataclass
class Replica:
    key: tuple[str, int] = ("foo", 0)


async def test_a_failed_fetcher_logs_and_restarts_and_a_stopped_one_stays_stopped():
    manager = Manager(FailingCache(failures=2))
    with structlog.testing.capture_logs() as logs:
        fetcher = ReplicaFetcher(2, manager, lambda: 101, unsafe_pre_kip903=False)
        fetcher.add(Replica())
        for _ in range(100):
            if manager.cache.lookups > 2:
                break
            await asyncio.sleep(0.05)
    assert fetcher.restarts == 2 and not fetcher._task.done(), "restarted, not vanished"
    failures = [e for e in logs if e["event"] == "replica fetcher failed; restarting"]
    assert len(failures) == 2 and failures[0]["log_level"] == "error"
    await fetcher.stop()
    assert fetcher._task.done() and fetcher.stopped
    fetcher.add(Replica())
    assert fetcher.partitions == {}, "a stopped fetcher takes no partition"
    lookups = manager.cache.lookups
    await asyncio.sleep(0.3)
    assert manager.cache.lookups == lookups, "nothing runs after stop"
