"""Rejoin time of a restarted broker, Apache Kafka and epochkraft at the same ``broker.session.timeout.ms``
(part of ``scripts/bench_peers``, ``--parts rejoin``).

Each round creates a topic of ``partitions`` partitions with RF 3 and min.insync.replicas 2 on three
brokers (every broker hosts every partition), starts a light acks=all load (librdkafka, ``rate`` records/s
of 1 KiB), SIGKILLs one broker (never the controller, which is a process of its own on both sides) and
waits until the survivors' Metadata no longer lists it and it is out of every ISR: the controller fenced
it when its heartbeats stopped. The broker is then started again, and the survivors' Metadata is polled
every 20 ms for two times from that start: until it lists the broker (registered and unfenced: both list
only unfenced brokers), and until the broker is back in the ISR of every partition it hosts, having
fetched what the load wrote while it was down. Both include the process's own start (a JVM for Kafka).
kfake runs its brokers in one process, so it has no broker to kill alone.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from epochkraft.harness.kio_client import MiniClient
from epochkraft.peers.failover import Brokers
from epochkraft.peers.latency import fmt_ratio, ratio
from epochkraft.peers.perf import create_topic


@dataclass
class RejoinRound:
    broker: int
    fenced_s: float  # from the kill until the survivors' Metadata shows it fenced and out of every ISR
    unfenced_s: float  # from the start until the survivors' Metadata lists it again
    in_isr_s: float  # from the start until it is in the ISR of every partition it hosts
    records_acked: int  # by the load during the round


@dataclass(frozen=True)
class BrokerState:
    listed: bool  # in Metadata's broker list: registered and unfenced
    in_every_isr: bool  # in the ISR of every partition that has it as a replica
    in_no_isr: bool


def broker_state(
    listed_brokers: Iterable[int], partitions: Sequence[tuple[Sequence[int], Sequence[int]]], broker: int
) -> BrokerState:
    """``partitions`` as (replicas, ISR) pairs. A broker hosting no partition is in every and in no ISR."""
    hosted = [isr for replicas, isr in partitions if broker in replicas]
    return BrokerState(
        broker in set(listed_brokers),
        all(broker in isr for isr in hosted),
        not any(broker in isr for isr in hosted),
    )


async def _state(client: MiniClient, topic: str, broker: int, partitions: int) -> BrokerState | None:
    """The broker's state as a survivor sees it; None while the answer is incomplete (a survivor busy,
    or the topic's partitions not all known)."""
    try:
        response = await client.metadata(topic)
    except Exception:  # a survivor reconnecting: ask again
        return None
    found = response.topics[0].partitions if response.topics else ()
    if len(found) != partitions:
        return None
    return broker_state(
        (b.node_id for b in response.brokers), [(p.replica_nodes, p.isr_nodes) for p in found], broker
    )


async def _wait_fenced(survivors: str, topic: str, broker: int, partitions: int, timeout_s: float) -> float:
    client = MiniClient(survivors)
    start = time.monotonic()
    try:
        while time.monotonic() - start < timeout_s:
            state = await _state(client, topic, broker, partitions)
            if state is not None and not state.listed and state.in_no_isr:
                return time.monotonic() - start
            await asyncio.sleep(0.05)
    finally:
        await client.close()
    raise RuntimeError(f"{topic}: broker {broker} still listed or in an ISR {timeout_s:.0f} s after SIGKILL")


async def _watch_rejoin(
    survivors: str, topic: str, broker: int, partitions: int, started: float, timeout_s: float
) -> tuple[float, float]:
    client = MiniClient(survivors)
    unfenced: float | None = None
    try:
        while time.monotonic() - started < timeout_s:
            state = await _state(client, topic, broker, partitions)
            now = time.monotonic() - started
            if state is not None and state.listed and unfenced is None:
                unfenced = now
            if state is not None and state.in_every_isr and not state.in_no_isr:
                return unfenced if unfenced is not None else now, now
            await asyncio.sleep(0.02)
    finally:
        await client.close()
    raise RuntimeError(f"{topic}: broker {broker} not back in every ISR {timeout_s:.0f} s after its start")


class _Load(threading.Thread):
    """acks=all records at a steady rate until stopped; the count acknowledged."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.acked = 0
        self.halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0}
        )

        def on_delivery(err: object, _msg: object) -> None:
            if err is None:
                self.acked += 1

        payload = b"r" * 1024
        start, sent = time.monotonic(), 0
        while not self.halt.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while sent < due:
                try:
                    producer.produce(self.topic, payload, on_delivery=on_delivery)
                except BufferError:  # the cluster is behind the rate: the queue is full
                    break
                sent += 1
            producer.poll(0.01)
        producer.flush(10)


def _round(
    brokers: Brokers, topic: str, victim: int, partitions: int, rate: int, timeout_s: float
) -> RejoinRound:
    bootstrap = ",".join(brokers.addresses.values())
    survivors = ",".join(a for i, a in brokers.addresses.items() if i != victim)
    asyncio.run(create_topic(bootstrap, topic, partitions, 3, 2))
    load = _Load(bootstrap, topic, rate)
    load.start()
    try:
        time.sleep(1)
        brokers.kill(victim)
        fenced = asyncio.run(_wait_fenced(survivors, topic, victim, partitions, timeout_s))
        started = time.monotonic()
        brokers.launch(victim)
        unfenced, in_isr = asyncio.run(
            _watch_rejoin(survivors, topic, victim, partitions, started, timeout_s)
        )
    finally:
        load.halt.set()
        load.join(30)
    brokers.ready(victim)
    return RejoinRound(victim, fenced, unfenced, in_isr, load.acked)


def measure_rejoin(
    target: str, brokers: Brokers, rounds: int, partitions: int, rate: int, timeout_s: float = 120
) -> list[RejoinRound]:
    results = []
    ids = sorted(brokers.addresses)
    for round_ in range(rounds):
        victim = ids[round_ % len(ids)]
        result = _round(brokers, f"rejoin-{round_}", victim, partitions, rate, timeout_s)
        results.append(result)
        print(
            f"  {target:<11} rejoin round {round_ + 1}: broker {victim} fenced after {result.fenced_s:.2f} s; "
            f"restarted: unfenced {result.unfenced_s:.2f} s, in every ISR {result.in_isr_s:.2f} s",
            flush=True,
        )
    return results


def report_rejoin(rejoin: dict[str, list[RejoinRound]], partitions: int, rate: int) -> None:
    if not rejoin:
        return
    print(
        f"\nrestarted broker (SIGKILL, fenced, started again), {partitions} partitions RF 3 on 3 brokers, "
        f"{rate} records/s of 1 KiB acks=all meanwhile; seconds from its start:"
    )
    medians = {}
    for target, rounds in rejoin.items():
        unfenced = statistics.median(r.unfenced_s for r in rounds)
        in_isr = statistics.median(r.in_isr_s for r in rounds)
        medians[target] = (unfenced, in_isr)
        print(
            f"  {target:<11} unfenced median {unfenced:.2f} s {[round(r.unfenced_s, 2) for r in rounds]}, "
            f"in every ISR median {in_isr:.2f} s {[round(r.in_isr_s, 2) for r in rounds]}"
        )
    if "kafka" in medians and "epochkraft" in medians:
        (ku, ki), (eu, ei) = medians["kafka"], medians["epochkraft"]
        print(
            f"ratio epochkraft/kafka, rejoin: unfenced {fmt_ratio(ratio(eu, ku))}, "
            f"in every ISR {fmt_ratio(ratio(ei, ki))}"
        )
