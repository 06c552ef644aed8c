"""A controller quorum on real processes against what a stranger or a failing disk does to it: a forged
BeginQuorumEpoch with the last int32 epoch sent to every voter is refused (INVALID_REQUEST) and the quorum
still elects and commits afterwards; a voter whose Raft driver fails stops with a non-zero exit status."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from epochkraft.chaos.scenarios import until
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import describe_quorum, split
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft import wire
from epochkraft.raft.messages import BeginQuorumEpochRequest
from epochkraft.raft.state_store import FileQuorumStateStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

LAST_INT32 = 2**31 - 1


def quorum_cluster(tmp_path: Path) -> LocalCluster:
    return LocalCluster(data_dir=tmp_path / "cluster", brokers=0, controllers=3)


async def active(cluster: LocalCluster, other_than: int | None = None) -> int | None:
    voter = await asyncio.to_thread(cluster.active_voter)
    return voter if voter is not None and voter != other_than else None


async def forge_begin_quorum_epoch(cluster: LocalCluster, voter: int, leader: int) -> ErrorCode:
    """BeginQuorumEpoch (53) v0 naming ``leader`` in epoch 2^31-1, kio-encoded, as any client could."""
    host, port = split(cluster.voter_address(voter))[0]
    client = KafkaClient(host, port, request_timeout_ms=5000, connect_timeout_ms=5000)
    try:
        request = wire.encode_begin_quorum_epoch_request(
            BeginQuorumEpochRequest(leader, LAST_INT32), cluster.cluster_id
        )
        response = await client.send(request)
        assert response.error_code == ErrorCode.none, response
        return response.topics[0].partitions[0].error_code
    finally:
        await client.close()


def stored_epochs(cluster: LocalCluster) -> dict[int, int]:
    epochs = {}
    for voter, proc in cluster.voters.items():
        assert proc.data_dir is not None
        [path] = proc.data_dir.rglob("quorum-state")
        state = FileQuorumStateStore(path.parent).read()
        assert state is not None
        epochs[voter] = state.leader_epoch
    return epochs


async def forged_scenario(cluster: LocalCluster) -> None:
    first = await until(lambda: active(cluster), 20, "an active controller")
    before = await describe_quorum(cluster.voter_address(first))
    for voter in cluster.voters:
        named = first if voter != first else next(v for v in cluster.voters if v != first)
        assert await forge_begin_quorum_epoch(cluster, voter, named) == ErrorCode.invalid_request
    await asyncio.sleep(0.5)
    assert all(proc.alive for proc in cluster.voters.values())
    assert all(epoch < LAST_INT32 for epoch in (await asyncio.to_thread(stored_epochs, cluster)).values())
    still = await describe_quorum(cluster.voter_address(first))
    assert (still.leader_id, still.leader_epoch) == (first, before.leader_epoch)

    cluster.voters[first].kill()  # the quorum elects again, and commits the new leader's first entry
    second = await until(lambda: active(cluster, first), 20, "a new active controller")

    async def committed_in_a_new_epoch() -> Any:
        after = await describe_quorum(cluster.voter_address(second))
        ok = after.leader_epoch > before.leader_epoch and after.high_watermark > before.high_watermark
        return after if ok else None

    after = await until(committed_in_a_new_epoch, 20, "a commit in the new leader's epoch")
    assert after.leader_id == second and after.leader_epoch < LAST_INT32
    await asyncio.to_thread(cluster.voters[first].start)  # restarts from its quorum-state
    await until(lambda: _caught_up(cluster, first, second), 20, "the restarted voter following")


async def _caught_up(cluster: LocalCluster, voter: int, leader: int) -> bool:
    state = await asyncio.to_thread(cluster.voter_state, voter)
    return state is not None and state.get("leader") == leader


def test_a_forged_begin_quorum_epoch_with_the_last_int32_epoch_harms_no_voter(tmp_path: Path) -> None:
    cluster = quorum_cluster(tmp_path)
    try:
        cluster.start_controller()
        asyncio.run(forged_scenario(cluster))
    finally:
        cluster.stop()
        cluster.kill_all()


def test_a_voter_whose_raft_driver_fails_exits_non_zero(tmp_path: Path) -> None:
    """A follower whose quorum-state can no longer be written (its temporary file's name taken by a
    directory) fails at the next epoch change, when the leader dies: the daemon logs it and exits 1."""
    cluster = quorum_cluster(tmp_path)
    try:
        cluster.start_controller()
        leader = asyncio.run(until(lambda: active(cluster), 20, "an active controller"))
        follower = next(v for v in cluster.voters if v != leader)
        proc = cluster.voters[follower]
        assert proc.data_dir is not None and proc.proc is not None
        [state_file] = proc.data_dir.rglob("quorum-state")
        (state_file.parent / "quorum-state.tmp").mkdir()
        cluster.voters[leader].kill()
        deadline = time.monotonic() + 30
        while proc.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.proc.returncode == 1, proc.log_text()[-3000:]
        assert "the Raft driver failed" in proc.log_text()
    finally:
        cluster.stop()
        cluster.kill_all()
