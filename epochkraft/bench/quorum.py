"""``scripts/bench_quorum`` (``python -m epochkraft.bench.quorum``): a controller quorum's failover and its
metadata commit latency, on real local processes.

1. failover, ``--rounds`` times on one cluster of 3 controllers (a Raft quorum) and 3 brokers, topic RF 3
   min.insync.replicas 2 under an idempotent acks=all producer: SIGKILL of the active controller and, at
   the same moment, of the broker leading partition 0. Measured from the kill:
   - elected: a surviving controller leads a higher epoch (its /v1/state, polled every 10 ms);
   - active: it is the active controller (its LeaderChangeMessage committed);
   - first heartbeat: the first broker heartbeat the new active controller answered (its brokers' last
     contact; sessions start afresh on activation);
   - first write: the first metadata write answered (IncrementalAlterConfigs retried every 20 ms through
     every controller's address, as a broker's controller channel does);
   - partitions moved: no partition is led by the killed broker any more (Metadata from a survivor); the
     new active controller fences it one session timeout (``--session-timeout-ms``) after it took over.
   Then both restart and the quorum heals (one leader, equal high watermarks) before the next round.
2. commits: metadata commit latency, p50/p99 of ``--commits`` IncrementalAlterConfigs round trips (one
   ConfigRecord each, answered once committed) to the active controller, with 3 voters (on the cluster
   above, the producer stopped) and with 1 controller (its own cluster, one broker); both with a data dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import structlog
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
from kio.static.primitive import i8

from epochkraft.chaos.checker import quorum_problems
from epochkraft.chaos.runner import BROKER_CONFIG, Workload
from epochkraft.chaos.scenarios import until
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.net.client import KafkaClient
from epochkraft.net.controller_channel import ControllerChannel
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode, ProtocolError

TOPIC = "bench-quorum"
TOPIC_RESOURCE = 2

log = structlog.get_logger("bench.quorum")


def _alter(value: int) -> iac.IncrementalAlterConfigsRequest:
    """One metadata write: the topic's retention.ms set (operation 0), a ConfigRecord once committed."""
    config = iac.AlterableConfig(name="retention.ms", config_operation=i8(0), value=str(value))
    resource = iac.AlterConfigsResource(
        resource_type=i8(TOPIC_RESOURCE), resource_name=TOPIC, configs=(config,)
    )
    return iac.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)


def _state(cluster: LocalCluster, node_id: int) -> dict[str, Any] | None:
    try:
        url = f"http://127.0.0.1:{cluster.admin_port(node_id)}/v1/state"
        with urllib.request.urlopen(url, timeout=1) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


async def _healed(cluster: LocalCluster, client: MiniClient) -> bool:
    if quorum_problems(await asyncio.to_thread(cluster.quorum_states)):
        return False
    try:
        states = (await client.metadata(TOPIC)).topics[0].partitions
    except Exception:  # a broker restarting
        return False
    return bool(states) and all(len(p.isr_nodes) == 3 for p in states)


async def _one_failover(cluster: LocalCluster, client: MiniClient, round_: int) -> dict[str, float]:
    active = await until(lambda: asyncio.to_thread(cluster.active_voter), 20, "an active controller")
    old_epoch = (await asyncio.to_thread(_state, cluster, active) or {})["quorum"]["epoch"]
    partition0 = next(
        p for p in (await client.metadata(TOPIC)).topics[0].partitions if p.partition_index == 0
    )
    victim = partition0.leader_id
    survivors = [v for v in cluster.voters if v != active]
    survivor_brokers = ",".join(f"127.0.0.1:{p.port}" for b, p in cluster.nodes.items() if b != victim)
    watcher = MiniClient(survivor_brokers)
    channel = ControllerChannel(
        [("127.0.0.1", cluster.voter_port(v)) for v in cluster.voters],
        client_id="bench-quorum",
        request_timeout_ms=2000,
    )
    marks: dict[str, float] = {}

    async def watch_quorum() -> None:
        while "first heartbeat" not in marks:
            for voter in survivors:
                state = await asyncio.to_thread(_state, cluster, voter)
                if state is None:
                    continue
                quorum = state["quorum"]
                now = time.time()
                if quorum["role"] == "leader" and quorum["epoch"] > old_epoch:
                    marks.setdefault("elected", now)
                if quorum["active"]:
                    marks.setdefault("active", now)
                    contacts = [
                        at for broker, at in state["last_heartbeat_ms"].items() if int(broker) != victim
                    ]
                    if contacts:
                        marks["first heartbeat"] = min(contacts) / 1000
            await asyncio.sleep(0.01)

    async def first_write() -> None:
        value = 86_400_000 + round_ * 1000
        while True:
            value += 1
            try:
                response = await channel.send(_alter(value), IncrementalAlterConfigsResponse)
                if response.responses[0].error_code == ErrorCode.none:
                    marks["first write"] = time.time()
                    return
            except NetworkError as exc:  # no active controller yet: ask again
                log.debug("metadata write failed; retrying", error=str(exc))
            await asyncio.sleep(0.02)

    async def moved() -> None:
        while True:
            try:
                states = (await watcher.metadata(TOPIC)).topics[0].partitions
                if states and all(p.leader_id not in (victim, -1) for p in states):
                    marks["partitions moved"] = time.time()
                    return
            except (NetworkError, ProtocolError, IndexError) as exc:
                # the survivor asked first may be down or catching up (no topic yet): ask again
                log.debug("metadata poll failed; retrying", error=str(exc))
            await asyncio.sleep(0.05)

    killed = time.time()
    cluster.voters[active].signal("KILL")
    cluster.nodes[victim].signal("KILL")
    try:
        await asyncio.wait_for(asyncio.gather(watch_quorum(), first_write(), moved()), 60)
    finally:
        await channel.close()
        await watcher.close()
    await asyncio.to_thread(cluster.voters[active].kill)  # reaped
    await asyncio.to_thread(cluster.nodes[victim].kill)
    figures = {name: round(at - killed, 3) for name, at in marks.items()}
    await asyncio.to_thread(cluster.voters[active].start)
    await asyncio.to_thread(cluster.nodes[victim].start)
    await until(lambda: _healed(cluster, client), 60, "the quorum and every ISR to heal", interval=0.2)
    return figures


async def _commit_latencies(address: tuple[str, int], commits: int) -> list[float]:
    client = KafkaClient(*address, client_id="bench-quorum-commits", request_timeout_ms=10_000)
    samples = []
    try:
        for i in range(commits):
            started = time.perf_counter()
            response = await client.send(_alter(3_600_000 + i), IncrementalAlterConfigsResponse)
            samples.append((time.perf_counter() - started) * 1000)
            assert response.responses[0].error_code == ErrorCode.none, response
    finally:
        await client.close()
    return samples


def _cluster(root: Path, controllers: int, brokers: int, session_timeout_ms: int) -> LocalCluster:
    root.mkdir(parents=True, exist_ok=True)
    broker_cfg = root / "broker.properties"
    broker_cfg.write_text(BROKER_CONFIG)
    controller_cfg = root / "controller.properties"
    controller_cfg.write_text(f"broker.session.timeout.ms={session_timeout_ms}\n")
    return LocalCluster(
        data_dir=root / "cluster",
        brokers=brokers,
        controllers=controllers,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        admin_ports=True,
    )


async def _quorum_part(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    client = MiniClient(cluster.bootstrap)
    workload = Workload(cluster.bootstrap, rate=args.rate, topic=TOPIC)
    try:
        assert await client.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"}) == ErrorCode.none
        await until(lambda: _healed(cluster, client), 30, "full ISRs")
        rounds = []
        if args.rounds:
            workload.start()
            await asyncio.sleep(2)
            for round_ in range(args.rounds):
                figures = await _one_failover(cluster, client, round_)
                print(f"  round {round_ + 1}: " + ", ".join(f"{k} {v:.3f}s" for k, v in figures.items()))
                rounds.append(figures)
                await asyncio.sleep(1)
            await asyncio.to_thread(workload.stop)
        active = await until(lambda: asyncio.to_thread(cluster.active_voter), 20, "an active controller")
        commits = await _commit_latencies(("127.0.0.1", cluster.voter_port(active)), args.commits)
        return {
            "rounds": rounds,
            "acked": len(workload.acked),
            "failed_produces": workload.failed,
            "commits": commits,
        }
    finally:
        workload.stop()
        await client.close()


async def _single_part(cluster: LocalCluster, commits: int) -> list[float]:
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic(TOPIC, 1, 1) == ErrorCode.none
    finally:
        await client.close()
    assert cluster.controller is not None
    return await _commit_latencies(("127.0.0.1", cluster.controller.port), commits)


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max_ms": round(ordered[-1], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench_quorum", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="failovers (SIGKILL of the active controller)")
    parser.add_argument("--commits", type=int, default=300, help="metadata writes timed, per quorum size")
    parser.add_argument("--rate", type=int, default=200, help="produce rate during the failovers, msg/s")
    parser.add_argument("--session-timeout-ms", type=int, default=2000, help="broker.session.timeout.ms")
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"session_timeout_ms": args.session_timeout_ms}
    with tempfile.TemporaryDirectory(prefix="bench-quorum-") as tmp:
        root = Path(tmp)
        quorum = _cluster(root / "quorum", 3, 3, args.session_timeout_ms)
        print(f"3 controllers (a Raft quorum), 3 brokers; {args.rounds} failovers under {args.rate} msg/s")
        try:
            quorum.start()
            part = asyncio.run(_quorum_part(quorum, args))
        finally:
            quorum.stop()
            quorum.kill_all()
        single = _cluster(root / "single", 1, 1, args.session_timeout_ms)
        try:
            single.start()
            single_commits = asyncio.run(_single_part(single, args.commits))
        finally:
            single.stop()
            single.kill_all()
    rounds = part["rounds"]
    if rounds:
        print(
            f"\nfailover of the active controller, seconds from SIGKILL ({len(rounds)} rounds; median, max):"
        )
        for name in ("elected", "active", "first heartbeat", "first write", "partitions moved"):
            values = [r[name] for r in rounds if name in r]
            if values:
                print(f"  {name:<18} {statistics.median(values):7.3f}  {max(values):7.3f}")
                results[name.replace(" ", "_")] = {
                    "median_s": statistics.median(values),
                    "max_s": max(values),
                }
        print(
            f"  (partitions moved: the killed broker's, {args.session_timeout_ms} ms session timeout; "
            f"{part['acked']} records acknowledged, {part['failed_produces']} failed)"
        )
    print(f"\nmetadata commit latency, {args.commits} IncrementalAlterConfigs round trips:")
    for name, samples in (("3 voters", part["commits"]), ("1 controller", single_commits)):
        figures = _percentiles(samples)
        results[f"commit_{name.replace(' ', '_')}"] = figures
        print(
            f"  {name:<13} p50 {figures['p50_ms']:6.2f} ms   p99 {figures['p99_ms']:6.2f} ms   max {figures['max_ms']:6.2f} ms"
        )
    results["rounds"] = rounds
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
