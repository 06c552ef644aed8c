"""The chaos workloads' producer: the values 0, 1, 2, ... at a steady rate, idempotent and acks=all, each
acknowledged value recorded with where it landed, so a checker can say what was lost or written twice."""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol


class SequenceTally(Protocol):
    """What a workload keeps of its producer: acknowledged value -> (partition, offset), and the counts."""

    acked: dict[bytes, tuple[int, int]]
    attempted: int
    failed: int


def produce_sequence(
    conf: dict[str, Any], topic: str, rate: float, stop: threading.Event, tally: SequenceTally
) -> None:
    """Produces until ``stop`` is set (keyed over 97 keys, so every partition gets values), then flushes."""
    from confluent_kafka import Producer

    producer = Producer(
        {**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000}
    )

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            tally.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            tally.failed += 1

    i = 0
    while not stop.is_set():
        producer.produce(topic, value=str(i).encode(), key=str(i % 97).encode(), on_delivery=on_delivery)
        tally.attempted += 1
        i += 1
        producer.poll(0)
        time.sleep(1 / rate)
    producer.flush(60)
