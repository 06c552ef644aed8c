"""A broker's metrics: Kafka-named gauges and counters, produce/fetch latency histograms, and the
periodic snapshot events the analytics read (see SCHEMA.md)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram

from epochkraft.metrics.documents import PartitionMetrics
from epochkraft.metrics.registry import FunctionCollector

if TYPE_CHECKING:
    from epochkraft.server.broker_daemon import BrokerNode

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)
SNAPSHOT_INTERVAL_S = 2.0
HW_SAMPLE_INTERVAL_MS = 1000


class BrokerMetrics:
    def __init__(self, node: BrokerNode) -> None:
        self.node = node
        self.registry = CollectorRegistry()
        self.registry.register(FunctionCollector(self.gauges, self.counters, self.partition_gauges))
        self.produce_latency = Histogram(
            "kafka_ProduceRequestLatencySeconds",
            "Produce request latency",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.fetch_latency = Histogram(
            "kafka_FetchRequestLatencySeconds",
            "Fetch request latency",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._produce_window: list[float] = []
        self._fetch_window: list[float] = []
        self._last_hw: dict[tuple[str, int], tuple[int, int]] = {}
        self._task: asyncio.Task[None] | None = None
        self._started = time.monotonic()

    # ---- values ---------------------------------------------------------------------------------------
    def _leaders(self) -> list[PartitionMetrics]:
        return [p for p in self.node.replica_manager.partition_metrics() if p["role"] == "leader"]

    def gauges(self) -> dict[str, float]:
        leaders = self._leaders()
        sessions = self.node.replica_manager.fetch_manager.cache
        return {
            "UnderReplicatedPartitions": float(sum(len(p["isr"]) < len(p["replicas"]) for p in leaders)),
            "UnderMinIsrPartitionCount": float(
                sum(len(p["isr"]) < p["min_insync_replicas"] for p in leaders)
            ),
            "LeaderCount": float(len(leaders)),
            "PartitionCount": float(len(self.node.replica_manager.replicas)),
            "BrokerEpoch": float(self.node.broker_epoch),
            "MetadataOffset": float(self.node.cache.next_offset),
            # KIP-227's sessions on this broker (FetchSessionCache's gauges)
            "NumIncrementalFetchSessions": float(len(sessions)),
            "NumIncrementalFetchPartitionsCached": float(sessions.total_partitions),
        }

    def counters(self) -> dict[str, float]:
        stats = self.node.replica_manager.stats
        return {
            "IsrShrinksPerSec": float(stats["isr_shrinks"]),
            "IsrExpandsPerSec": float(stats["isr_expands"]),
            "FailedIsrUpdatesPerSec": float(stats["failed_isr_updates"]),
            "IncrementalFetchSessionEvictionsPerSec": float(
                self.node.replica_manager.fetch_manager.cache.evictions
            ),
            # kafka.server:type=broker-metadata-metrics,name=metadata-load-error-count
            "MetadataLoadErrorCount": float(self.node.follower.load_errors),
        }

    def partition_gauges(self) -> list[tuple[str, dict[str, str], float]]:
        out = []
        for p in self.node.replica_manager.partition_metrics():
            labels = {"topic": p["topic"], "partition": str(p["partition"])}
            out += [
                ("LogEndOffset", labels, float(p["log_end_offset"])),
                ("LogStartOffset", labels, float(p["log_start_offset"])),  # Kafka's kafka.log:type=Log
                ("Size", labels, float(p["size_bytes"])),
                ("NumLogSegments", labels, float(p["segments"])),
                ("HighWatermark", labels, float(p["high_watermark"])),
                ("IsrSize", labels, float(len(p["isr"]))),
            ]
            if p["role"] == "leader":
                out.append(("FollowerLagMax", labels, float(max(p["follower_lag"].values(), default=0))))
        return out

    # ---- observations -----------------------------------------------------------------------------------
    def observe_produce_latency(self, seconds: float) -> None:
        self.produce_latency.observe(seconds)
        self._produce_window.append(seconds)

    def observe_fetch(self, is_follower: bool, seconds: float) -> None:
        self.fetch_latency.labels("follower" if is_follower else "consumer").observe(seconds)
        if not is_follower:
            self._fetch_window.append(seconds)

    def on_metadata(self, node: BrokerNode) -> None:
        """Metadata changed: nothing cached here (gauges are computed at scrape time)."""

    # ---- snapshots ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._snapshot_loop(), name="metrics-snapshots")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.snapshot()

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(SNAPSHOT_INTERVAL_S)
            self.snapshot()

    def snapshot(self) -> None:
        events = self.node.events
        if events is None:
            return
        events.emit_metrics("metrics_snapshot", self.gauges() | self.counters())
        now = int(time.time() * 1000)
        for p in self.node.replica_manager.partition_metrics():
            key = (p["topic"], p["partition"])
            events.emit(
                "partition_snapshot",
                topic=p["topic"],
                partition=p["partition"],
                role=p["role"],
                leader=p["leader"],
                leader_epoch=p["leader_epoch"],
                isr=p["isr"],
                isr_size=len(p["isr"]),
                replicas=p["replicas"],
                log_end_offset=p["log_end_offset"],
                high_watermark=p["high_watermark"],
                follower_lag_max=max(p["follower_lag"].values(), default=0),
            )
            last = self._last_hw.get(key)
            if p["role"] == "leader" and (
                last is None or (p["high_watermark"] > last[0] and now - last[1] >= HW_SAMPLE_INTERVAL_MS)
            ):
                events.emit(
                    "high_watermark_advanced",
                    topic=p["topic"],
                    partition=p["partition"],
                    high_watermark=p["high_watermark"],
                )
                self._last_hw[key] = (p["high_watermark"], now)
        for name, window in (
            ("produce_latency", self._produce_window),
            ("fetch_latency", self._fetch_window),
        ):
            if window:
                ordered = sorted(window)
                events.emit(
                    name,
                    count=len(ordered),
                    p50_ms=_pct(ordered, 0.5) * 1000,
                    p99_ms=_pct(ordered, 0.99) * 1000,
                    p999_ms=_pct(ordered, 0.999) * 1000,
                    max_ms=ordered[-1] * 1000,
                    interval_s=SNAPSHOT_INTERVAL_S,
                )
                window.clear()


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]
