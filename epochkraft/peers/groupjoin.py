"""Join time of one more member in a stable consumer group, classic against consumer protocol (part of
``scripts/bench_peers``, ``--parts groupjoin``).

Each round creates a topic of ``partitions`` partitions (RF 3), starts ``members`` confluent-kafka consumers
in one group (each polling in its own thread) and waits until the group is stable: every partition owned
by exactly one member and every member owning some, as the consumers' own assignments say. Then one more
consumer subscribes, and its assignment and the others' are sampled every 20 ms until the same holds for
all of them: the time from its subscribe to that moment is the figure. The classic protocol runs with
``partition.assignment.strategy=cooperative-sticky`` (incremental, as the consumer protocol is), the
consumer protocol with ``group.protocol=consumer`` and the broker's assignor (uniform). Both clusters keep
their default group settings (heartbeat interval 5 s for consumer groups; 3 s client heartbeats and no
initial rebalance delay for a group that is not empty, for classic ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from epochkraft.peers.latency import fmt_ratio, ratio
from epochkraft.peers.perf import create_topic

PROTOCOLS = ("classic", "consumer")
SAMPLE_S = 0.02


def consumer_config(bootstrap: str, group: str, protocol: str) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "log_level": 0,
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = "cooperative-sticky"
    return conf


def is_stable(assignments: list[set[int]], partitions: int) -> bool:
    """Every partition owned by exactly one member, and every member owning at least one."""
    counts = Counter(p for owned in assignments for p in owned)
    return (
        all(owned for owned in assignments)
        and set(counts) == set(range(partitions))
        and all(n == 1 for n in counts.values())
    )


class Member:
    """One consumer polling in its own thread, which also reads its assignment after each poll (a call
    into the consumer from another thread can wait on its poll indefinitely)."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(conf)
        self.topic = topic
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self._owned: frozenset[int] = frozenset()

    def start(self) -> None:
        self.consumer.subscribe([self.topic])
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(SAMPLE_S)
            owned = {tp.partition for tp in self.consumer.assignment() if tp.topic == self.topic}
            self._owned = frozenset(owned)

    def owned(self) -> set[int]:
        return set(self._owned)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        with contextlib.suppress(Exception):  # a broker already gone: nothing to leave
            self.consumer.close()


def wait_stable(members: list[Member], partitions: int, timeout_s: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if is_stable([m.owned() for m in members], partitions):
            return time.monotonic() - start
        time.sleep(SAMPLE_S)
    return None


@contextmanager
def group_of(members: list[Member]) -> Iterator[list[Member]]:
    try:
        yield members
    finally:
        for member in members:
            member.close()


def join_round(
    bootstrap: str, protocol: str, round_: int, members: int, partitions: int, timeout_s: float = 120
) -> float:
    """Seconds until a stable group of ``members`` is stable again with one more (NaN: not within the
    timeout)."""
    topic = f"groupjoin-{protocol}-{round_}"
    group = f"groupjoin-{protocol}-{round_}"
    asyncio.run(create_topic(bootstrap, topic, partitions, 3, 1))
    conf = consumer_config(bootstrap, group, protocol)
    with group_of([Member(conf, topic) for _ in range(members)]) as group_members:
        for member in group_members:
            member.start()
        if wait_stable(group_members, partitions, timeout_s) is None:
            raise TimeoutError(f"the {protocol} group of {members} did not settle in {timeout_s:.0f} s")
        newcomer = Member(conf, topic)
        group_members.append(newcomer)
        newcomer.start()
        seconds = wait_stable(group_members, partitions, timeout_s)
    return float("nan") if seconds is None else seconds


def measure_group_join(
    target: str, bootstrap: str, rounds: int, members: int = 10, partitions: int = 30
) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {}
    for protocol in PROTOCOLS:
        figures[protocol] = []
        for round_ in range(rounds):
            seconds = join_round(bootstrap, protocol, round_, members, partitions)
            figures[protocol].append(seconds)
            print(f"  {target:<11} groupjoin {protocol:<8} round {round_ + 1}: {seconds:.2f} s", flush=True)
    return figures


def report_group_join(results: dict[str, dict[str, list[float]]], members: int, partitions: int) -> None:
    if not results:
        return
    print(
        f"\none more member joining a stable group of {members} (confluent-kafka, {partitions} partitions), "
        "seconds until every partition is owned once and every member owns some:"
    )
    medians: dict[tuple[str, str], float] = {}
    for target, by_protocol in results.items():
        for protocol, rounds in by_protocol.items():
            medians[(target, protocol)] = statistics.median(rounds)
            shown = [round(s, 2) for s in rounds]
            print(f"  {target:<11} {protocol:<8} median {medians[(target, protocol)]:.2f} s {shown}")
    if "kafka" in results and "epochkraft" in results:
        ratios = ", ".join(
            f"{protocol} {fmt_ratio(ratio(medians[('epochkraft', protocol)], medians[('kafka', protocol)]))}"
            for protocol in PROTOCOLS
        )
        print(f"ratio epochkraft/kafka, groupjoin: {ratios}")
