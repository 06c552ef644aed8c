"""Failover time after SIGKILL of a partition leader, Apache Kafka and epochkraft at the same
``broker.session.timeout.ms`` (part of ``scripts/bench_peers``, ``--failover``).

Each round creates a one-partition topic with RF 3 and min.insync.replicas 2, waits for the full ISR, kills
the leader's process with SIGKILL and polls Metadata on the surviving brokers every 20 ms until one names a
new leader; the figure is the time from the kill to that answer. The killed broker is then restarted and
rejoins before the next round. Neither side learns of the kill from a closed socket alone: the controller
fences the broker when its heartbeats stop for the session timeout and elects a new leader from the ISR.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.protocol.errors import ErrorCode


@dataclass
class Brokers:
    """What a round needs of a cluster: its brokers' addresses, and killing and restarting one.

    ``launch`` starts a killed broker and returns at once (the rejoin rounds time what follows);
    ``ready`` then waits until it serves; ``restart`` is the two together."""

    addresses: dict[int, str]
    kill: Callable[[int], None]
    launch: Callable[[int], None]
    ready: Callable[[int], None]

    def restart(self, node_id: int) -> None:
        self.launch(node_id)
        self.ready(node_id)


def kafka_brokers(peer: KafkaPeer) -> Brokers:
    return Brokers(
        {i: f"127.0.0.1:{n.port}" for i, n in peer.nodes.items()},
        lambda node_id: peer.signal(node_id, signal.SIGKILL),
        peer.restart_broker,
        lambda _node_id: peer.wait_ready(timeout=120),
    )


def epochkraft_brokers(cluster: LocalCluster) -> Brokers:
    return Brokers(
        {i: f"127.0.0.1:{p.port}" for i, p in cluster.nodes.items()},
        lambda i: cluster.nodes[i].kill(),
        lambda i: cluster.nodes[i].launch(),
        lambda i: cluster.nodes[i].wait_ready(timeout=60),
    )


async def _leader_and_isr(client: MiniClient, topic: str) -> tuple[int, int]:
    response = await client.metadata(topic)
    partitions = response.topics[0].partitions if response.topics else ()
    if not partitions or partitions[0].error_code != ErrorCode.none:
        return -1, 0
    return partitions[0].leader_id, len(partitions[0].isr_nodes)


async def _round(brokers: Brokers, topic: str, timeout_s: float) -> tuple[float, int]:
    """The failover time and the broker killed."""
    client = MiniClient(",".join(brokers.addresses.values()))
    try:
        error = await client.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
        if error not in (ErrorCode.none, ErrorCode.topic_already_exists):
            raise RuntimeError(f"creating {topic}: {error!r}")
        deadline = time.monotonic() + 60
        leader, isr = -1, 0
        while (leader < 0 or isr < 3) and time.monotonic() < deadline:
            leader, isr = await _leader_and_isr(client, topic)
            await asyncio.sleep(0.1)
        if leader < 0 or isr < 3:
            raise RuntimeError(f"{topic}: no full ISR after 60 s (leader {leader}, ISR size {isr})")
    finally:
        await client.close()
    survivors = MiniClient(",".join(a for i, a in brokers.addresses.items() if i != leader))
    try:
        killed_at = time.monotonic()
        brokers.kill(leader)
        while time.monotonic() - killed_at < timeout_s:
            try:
                new_leader, _ = await _leader_and_isr(survivors, topic)
            except Exception:  # a survivor busy or reconnecting: ask again
                new_leader = -1
            if new_leader not in (-1, leader):
                elapsed = time.monotonic() - killed_at
                break
            await asyncio.sleep(0.02)
        else:
            raise RuntimeError(f"{topic}: no new leader {timeout_s:.0f} s after killing broker {leader}")
    finally:
        await survivors.close()
    return elapsed, leader


def measure_failover(target: str, brokers: Brokers, rounds: int, timeout_s: float = 120) -> list[float]:
    times = []
    for round_ in range(rounds):
        elapsed, killed = asyncio.run(_round(brokers, f"failover-{round_}", timeout_s))
        times.append(elapsed)
        print(f"  {target:<11} failover round {round_ + 1}: {elapsed:.2f} s", flush=True)
        brokers.restart(killed)  # outside the event loop: Kafka's readiness check runs its own
    return times


def report(failover: dict[str, list[float]], session_timeout_ms: int) -> None:
    if not failover:
        return
    print(f"\nfailover after SIGKILL of the leader (broker.session.timeout.ms {session_timeout_ms}):")
    for target, times in failover.items():
        print(
            f"  {target:<11} median {statistics.median(times):.2f} s  rounds {[round(t, 2) for t in times]}"
        )
    if "kafka" in failover and "epochkraft" in failover:
        ratio = statistics.median(failover["epochkraft"]) / statistics.median(failover["kafka"])
        print(f"ratio epochkraft/kafka, failover time: {ratio:.2f}")
