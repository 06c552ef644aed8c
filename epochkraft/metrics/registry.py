"""Kafka-named metrics on prometheus-client, one registry per daemon (never the global one).

Gauges are computed from the daemon's state at scrape time by a custom collector, so they can never go
stale; counters and latency histograms are updated as things happen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

PREFIX = "kafka_"

# Kafka's metric names, as gauges of the whole daemon.
CONTROLLER_GAUGES = (
    "OfflinePartitionsCount",
    "FencedBrokerCount",
    "ActiveBrokerCount",
    "GlobalPartitionCount",
    "GlobalTopicCount",
    "UnderReplicatedPartitions",
    "UnderMinIsrPartitionCount",
)


class FunctionCollector(Collector):
    """Collects ``{name: value}`` gauges and counters from a function called at scrape time."""

    def __init__(
        self,
        gauges: Callable[[], dict[str, float]],
        counters: Callable[[], dict[str, float]] | None = None,
        labelled: Callable[[], list[tuple[str, dict[str, str], float]]] | None = None,
    ) -> None:
        self.gauges = gauges
        self.counters = counters or dict
        self.labelled = labelled or list

    def collect(self):
        for name, value in self.gauges().items():
            yield GaugeMetricFamily(f"{PREFIX}{name}", f"Kafka's {name}", value=value)
        for name, value in self.counters().items():
            yield CounterMetricFamily(f"{PREFIX}{name}", f"Kafka's {name} (cumulative)", value=value)
        families: dict[str, GaugeMetricFamily] = {}
        for name, labels, value in self.labelled():
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(
                    f"{PREFIX}{name}", f"Kafka's {name}", labels=sorted(labels)
                )
            family.add_metric([labels[k] for k in sorted(labels)], value)
        yield from families.values()


class StateSource(Protocol):
    """What the controller's gauges are read from: its /v1/state (the controller sits above this layer)."""

    def state(self) -> Mapping[str, object]: ...


def controller_registry(controller: StateSource) -> CollectorRegistry:
    registry = CollectorRegistry()

    def gauges() -> dict[str, float]:
        state = controller.state()
        return {name: _number(state.get(name, 0)) for name in CONTROLLER_GAUGES} | {
            "MetadataLogEndOffset": _number(state["metadata_offset"])
        }

    registry.register(FunctionCollector(gauges))
    return registry


def _number(value: object) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"a gauge of {type(value).__name__}")
    return float(value)
