"""What one acks=all append costs: single small batches (one record of 100 B, RF 3, min.insync.replicas 2)
produced one at a time, each awaited before the next, so each latency is a replication round trip (the
leader's append, the followers' fetches of it, the leader learning that they have it) and nothing else.
A transaction's markers and its ``__transaction_state`` writes are such appends, one after another.
``epochkraft bench --parts acks [--targets epochkraft,kafka]``."""

from __future__ import annotations

import time
from typing import Any

RECORD_BYTES = 100
WARM_UP = 20  # unmeasured: the producer's connections and metadata


def acks_all_latencies(bootstrap: str, topic: str, count: int) -> list[float]:
    """Milliseconds from produce to delivery report of ``count`` single-record batches, one at a time."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0})
    payload = b"x" * RECORD_BYTES
    latencies = []
    for n in range(WARM_UP + count):
        start = time.perf_counter()
        producer.produce(topic, payload)
        if producer.flush(30) != 0:
            raise RuntimeError("an acks=all produce was not acknowledged within 30 s")
        if n >= WARM_UP:
            latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def summary(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)], 2)

    return {"samples": len(ordered), "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99)}
