"""KAFKA-14139 staged on real processes (the race KIP-903 closes).

Leader A (broker 1) and follower B (broker 2) replicate ``race`` (min.insync.replicas 1). Each broker
reaches the controller through its own fault proxy.

1. Records are acknowledged by both; B shuts down cleanly and A acknowledges more records alone.
2. A's proxy starts holding AlterPartition. B restarts on its disk, catches up, and A proposes adding it
   back (NewIsrWithEpochs names B's current broker epoch): that request is held.
3. A is paused (SIGSTOP) so nobody can replicate from it. B's disk is replaced: it restarts empty and
   registers with a new broker epoch.
4. The held AlterPartition is released. With KIP-903 the controller sees B's old epoch and answers
   INELIGIBLE_REPLICA. Before KIP-903 (the brokers' unsafe switch: AlterPartition v2, no epochs) it
   accepts, and the empty B joins the ISR.
5. A dies (SIGKILL) and is fenced when its session expires. KIP-903: A was the last ISR member, the
   partition waits offline and A comes back as leader with every record (with eligible leader replicas
   on, as the last known leader: SIGKILLed, A leaves the ELR, which is then empty). Before: B is elected from the
   ISR and the acknowledged records are gone, also from A, which truncates to B's empty log.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from epochkraft.chaos.checker import History, Report, check
from epochkraft.chaos.proxy import FaultProxy
from epochkraft.chaos.runner import controller_rejections
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.protocol.errors import ErrorCode

A, B = 1, 2
TOPIC = "race"
ALTER_PARTITION = 56
SESSION_TIMEOUT_MS = 8000
BROKER_CONFIG = """broker.heartbeat.interval.ms=200
replica.lag.time.max.ms=1500
replica.fetch.wait.max.ms=200
group.initial.rebalance.delay.ms=0
"""


async def until(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Awaits ``predicate()`` every ``interval`` until it returns something true, which it returns."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await predicate()
        if result:
            return result
        await asyncio.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


async def run_kafka_14139(work_dir: Path, *, unsafe: bool, log: Any = print) -> Report:
    work_dir.mkdir(parents=True, exist_ok=True)
    broker_cfg = work_dir / "broker.properties"
    broker_cfg.write_text(BROKER_CONFIG + ("unsafe.pre.kip903.mode=true\n" if unsafe else ""))
    controller_cfg = work_dir / "controller.properties"
    controller_cfg.write_text(f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}\n")
    cluster = LocalCluster(
        data_dir=work_dir / "cluster",
        brokers=2,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        metrics_dir=work_dir / "metrics",
    )
    proxies: dict[int, FaultProxy] = {}
    client: MiniClient | None = None
    history = History(replication_factor=2)
    mode = "pre-KIP-903 (unsafe switch on)" if unsafe else "KIP-903 (default)"
    try:
        await asyncio.to_thread(cluster.start_controller)
        assert cluster.controller is not None
        for broker in (A, B):
            proxy = FaultProxy(0, ("127.0.0.1", cluster.controller.port), name=f"proxy-{broker}")
            await proxy.start()
            proxies[broker] = proxy
            cluster.controller_for[broker] = f"127.0.0.1:{proxy.port}"
        await asyncio.to_thread(cluster.start_brokers)
        client = MiniClient(cluster.bootstrap)
        error = await client.create_topic(TOPIC, configs={"min.insync.replicas": "1"}, assignment=[[A, B]])
        assert error == ErrorCode.none, error

        async def produce(start: int, count: int) -> None:
            for i in range(start, start + count):
                value = f"{i}".encode()
                history.attempted += 1
                error, offset = await client.produce(TOPIC, 0, [value])
                if error == ErrorCode.none:
                    history.acked[value] = (0, offset)
                else:
                    history.failed_produces += 1

        async def isr() -> tuple[int, ...]:
            state, _ = await client.partition_state(TOPIC)
            history.isr_sizes.append((0, len(state.isr_nodes)))
            return tuple(state.isr_nodes)

        await produce(0, 20)
        log(f"[{mode}] 20 records acknowledged by A and B")
        await asyncio.to_thread(cluster.node(B).stop)
        await until(lambda: _eq(isr(), (A,)), 15, "the ISR to shrink to A")
        await produce(20, 20)
        log(f"[{mode}] B shut down; 20 more records acknowledged by A alone (ISR [A])")

        proxies[A].hold(ALTER_PARTITION)
        await asyncio.to_thread(cluster.node(B).start)
        await until(lambda: _true(proxies[A].held_frames >= 1), 20, "A's AlterPartition adding B")
        log(f"[{mode}] B caught up; A's AlterPartition adding B is held by the proxy")

        cluster.node(A).signal("STOP")
        await asyncio.to_thread(lambda: cluster.node(B).restart(wipe=True, clean=True))
        log(f"[{mode}] A paused; B restarted with an empty disk and a new broker epoch")

        proxies[A].release()
        await asyncio.sleep(1.0)
        after_release = await isr()
        log(f"[{mode}] held AlterPartition delivered: ISR is now {list(after_release)}")

        cluster.node(A).kill()
        await until(lambda: _leader_changed(client), SESSION_TIMEOUT_MS / 1000 + 10, "A to be fenced")
        state, _ = await client.partition_state(TOPIC)
        log(f"[{mode}] A killed and fenced: leader {state.leader_id}, ISR {list(state.isr_nodes)}")
        await asyncio.to_thread(cluster.node(A).start)
        await until(lambda: _has_leader(client), 20, "a leader")
        await asyncio.sleep(1.0)  # A, if a follower now, truncates to the leader's log
        history.consumed = [(0, offset, value) for offset, value in await client.read_all(TOPIC)]
        await isr()
    finally:
        if client is not None:
            await client.close()
        await asyncio.to_thread(cluster.kill_all)
        for proxy in proxies.values():
            await proxy.stop()
    await asyncio.sleep(0.5)
    history.rejected_alter_partitions = controller_rejections(work_dir / "metrics")
    report = check(history)
    report.faults = ["clean-stop B", "hold AlterPartition", "pause A", "wipe+restart B", "release", "kill A"]
    return report


async def _eq(awaitable: Any, expected: Any) -> bool:
    return (await awaitable) == expected


async def _true(value: bool) -> bool:
    return value


async def _leader_changed(client: MiniClient) -> bool:
    state, _ = await client.partition_state(TOPIC)
    return state.leader_id != A


async def _has_leader(client: MiniClient) -> bool:
    state, _ = await client.partition_state(TOPIC)
    return state.leader_id >= 0
