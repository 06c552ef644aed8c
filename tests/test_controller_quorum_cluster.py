"""A controller quorum on real processes: three controllers (a Raft quorum) and three brokers under an
idempotent acks=all producer. SIGKILL of the active controller: another voter is elected and becomes the
active controller, producing goes on, a broker killed after the failover is fenced by the new active
controller and its leaderships move, the killed controller comes back and catches up to the leader's
high watermark, and every acknowledged record is read back at the end."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from epochkraft.chaos.checker import History, check, quorum_problems
from epochkraft.chaos.runner import BROKER_CONFIG, PARTITIONS, TOPIC, Workload
from epochkraft.chaos.scenarios import until
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient, describe_quorum
from epochkraft.protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SESSION_TIMEOUT_MS = 2000


async def active_other_than(cluster: LocalCluster, old: int | None) -> int | None:
    active = await asyncio.to_thread(cluster.active_voter)
    return active if active is not None and active != old else None


async def partitions(client: MiniClient) -> list[Any]:
    try:
        return list((await client.metadata(TOPIC)).topics[0].partitions)
    except Exception:  # a broker just killed: ask again
        return []


async def scenario(cluster: LocalCluster) -> None:
    client = MiniClient(cluster.bootstrap)
    workload = Workload(cluster.bootstrap, rate=150)
    try:
        error = await client.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        assert error == ErrorCode.none, error
        workload.start()
        await until(lambda: _true(len(workload.acked) >= 100), 30, "the first acknowledged records")

        first = await until(lambda: active_other_than(cluster, None), 10, "an active controller")
        before = await describe_quorum(cluster.voter_address(first))
        assert before.error_code == ErrorCode.none and before.leader_id == first

        cluster.voters[first].kill()  # SIGKILL of the active controller under produce load
        killed_at = time.monotonic()
        second = await until(lambda: active_other_than(cluster, first), 15, "a new active controller")
        failover_s = time.monotonic() - killed_at
        after = await describe_quorum(cluster.voter_address(second))
        assert after.error_code == ErrorCode.none and after.leader_id == second
        assert after.leader_epoch > before.leader_epoch
        standby = next(v for v in cluster.voters if v not in (first, second))
        view = await describe_quorum(cluster.voter_address(standby))  # a follower names the new leader
        assert view.error_code == ErrorCode.not_leader_or_follower and view.leader_id == second

        acked = len(workload.acked)
        await until(lambda: _true(len(workload.acked) >= acked + 150), 20, "producing after the failover")

        # Only the new active controller can fence a dead broker and move its leaderships.
        leaders = {p.leader_id for p in await partitions(client)}
        victim = min(leaders)
        cluster.nodes[victim].kill()

        async def moved() -> bool:
            states = await partitions(client)
            return bool(states) and all(
                p.leader_id not in (victim, -1) and victim not in p.isr_nodes for p in states
            )

        await until(moved, SESSION_TIMEOUT_MS / 1000 + 10, f"broker {victim}'s leaderships to move")
        fenced = {b["id"]: b["fenced"] for b in await _state(cluster, second, "brokers")}
        assert fenced[victim] and not any(f for b, f in fenced.items() if b != victim), fenced

        await asyncio.to_thread(cluster.voters[first].start)  # on its disk: it catches up

        async def healed() -> dict[int, Any] | None:
            views = await asyncio.to_thread(cluster.quorum_states)
            return views if not quorum_problems(views) else None

        views = await until(healed, 20, "the restarted controller to reach the leader's high watermark")
        assert views[first]["leader"] == second and views[first]["role"] == "follower"

        await asyncio.to_thread(cluster.nodes[victim].start)
        await until(lambda: _full_isrs(client), 30, f"broker {victim} back in every ISR", interval=0.2)
        await asyncio.to_thread(workload.stop)
        history = History(acked=dict(workload.acked), attempted=workload.attempted)
        history.failed_produces = workload.failed
        for p in range(PARTITIONS):
            history.consumed += [(p, o, v) for o, v in await client.read_all(TOPIC, p)]
        report = check(history)
        assert report.ok, report.table()
        assert report.acked == report.consumed and report.acked > 300, report.table()
        print(f"failover {failover_s:.2f}s, {report.acked} records acknowledged and read back")
    finally:
        workload.stop()
        await client.close()


async def _true(value: bool) -> bool:
    return value


async def _state(cluster: LocalCluster, voter: int, key: str) -> Any:
    def get() -> Any:
        url = f"http://127.0.0.1:{cluster.admin_port(voter)}/v1/state"
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.loads(response.read())[key]

    return await asyncio.to_thread(get)


async def _full_isrs(client: MiniClient) -> bool:
    states = await partitions(client)
    return bool(states) and all(len(p.isr_nodes) == 3 for p in states)


def test_active_controller_failover_under_produce_load(tmp_path: Path) -> None:
    broker_cfg = tmp_path / "broker.properties"
    broker_cfg.write_text(BROKER_CONFIG)
    controller_cfg = tmp_path / "controller.properties"
    controller_cfg.write_text(f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}\n")
    cluster = LocalCluster(
        data_dir=tmp_path / "cluster",
        brokers=3,
        controllers=3,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
    )
    try:
        cluster.start()
        assert sorted(cluster.voters) == [3000, 3001, 3002]
        asyncio.run(scenario(cluster))
    finally:
        cluster.stop()
        cluster.kill_all()
