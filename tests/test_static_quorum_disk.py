"""A static quorum (controller.quorum.voters, kraft.version 0) cannot replace a voter's disk: the wiped voter
would vote at once with an empty log, and RemoveRaftVoter/AddRaftVoter need kraft.version 1. As Kafka, the
daemon has no guard; `cluster restart controller-N --wipe` and the chaos fault controller-disk-loss refuse
it, and a static quorum's chaos plan leaves that fault out."""

from __future__ import annotations

import asyncio
import random

import pytest

from epochkraft.chaos import runner
from epochkraft.harness.cluster import LocalCluster


class Untouchable:
    """A voter process that must not be restarted."""

    alive = True

    def restart(self, **_kwargs: object) -> None:
        raise AssertionError("restarted")

    def kill(self) -> None:
        raise AssertionError("killed")


def test_restart_with_wipe_refuses_a_static_quorum(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=3, static_quorum=True)
    cluster.voters = {3000: Untouchable()}  # type: ignore[dict-item]
    with pytest.raises(RuntimeError, match="static quorum"):
        cluster.restart_voter(3000, wipe=True)


def test_controller_disk_loss_refuses_a_static_quorum(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=3, static_quorum=True)
    cluster.voters = {3000: Untouchable()}  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="static quorum"):
        asyncio.run(runner._apply_quorum("controller-disk-loss", cluster, {}, random.Random(1)))


def test_a_static_quorums_plan_has_no_controller_disk_loss():
    from epochkraft.harness.cluster import STATIC_DISK_LOSS

    faults = ["pause", *runner.QUORUM_FAULTS]
    static = runner.fault_plan(faults, 12, random.Random(3), static_quorum=True)
    assert len(static) == 12 and "controller-disk-loss" not in static
    dynamic = runner.fault_plan(faults, 12, random.Random(3))
    assert "controller-disk-loss" in dynamic
    assert runner.fault_plan(["controller-disk-loss"], None, random.Random(3), static_quorum=True) == []
    assert "kraft.version 0" in STATIC_DISK_LOSS
