"""The controller-quorum simulation: reproducible per seed, every Raft safety property and liveness held
by the core, the Raft paper's figure-8 commit bug found and shrunk when switched on, and a dynamic quorum
(KIP-853) whose controllers lose their disks and are removed and added back, under one-way and pairwise
partitions and restarts at any step; with a wiped controller back as its old voter instead (what a static
quorum does with a new disk), the simulator finds and shrinks a leader without committed entries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from epochkraft.raft import replication as raft_client
from epochkraft.raft.voter_set import ReplicaKey
from epochkraft.sim import raft_cluster
from epochkraft.sim.raft_cluster import (
    RaftFault,
    RaftSimCluster,
    leader_churn_schedule,
    reconfig_schedule,
    run_raft_seed,
)

pytestmark = pytest.mark.timeout(600)


def test_a_raft_seed_replays_exactly():
    first, second = run_raft_seed(5), run_raft_seed(5)
    assert first.trace == second.trace and first.acked == second.acked and first.events == second.events
    assert run_raft_seed(6).trace != first.trace
    assert leader_churn_schedule(3) == leader_churn_schedule(3)


def test_quorum_elects_replicates_and_heals_after_a_leader_crash():
    result = RaftSimCluster(
        1, [RaftFault(2000, "crash", 0, 0, 1500), RaftFault(5000, "isolate", 0, 0, 1000)]
    ).run()
    assert result.violation is None, result.trace[-20:]
    assert result.elections >= 3 and result.acked > 200 and result.healthy_after_ms is not None


def run_cli(*args: str, tmp_path) -> dict:
    out = tmp_path / "sim.json"
    result = subprocess.run(
        [sys.executable, "-m", "epochkraft.cli", "sim", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(result.stdout, result.stderr)
    summary = json.loads(out.read_text())
    summary["stdout"] = result.stdout
    summary["returncode"] = result.returncode
    return summary


@pytest.mark.parametrize(
    ("faults", "seeds", "voters"),
    [
        ("raft", 200, 5),
        ("raft-churn", 200, 5),
        ("raft", 100, 3),
        ("raft-snapshots", 300, 5),
        # the KIP-853 grammar: 2,000 seeds in all (more with `epochkraft sim --faults raft-reconfig`)
        ("raft-reconfig", 1500, 3),
        ("raft-reconfig", 500, 5),
    ],
)
@pytest.mark.sweep
def test_kafkas_commit_rule_holds_every_raft_invariant(tmp_path, faults, seeds, voters):
    summary = run_cli("--seeds", str(seeds), "--faults", faults, "--voters", str(voters), tmp_path=tmp_path)
    assert summary["returncode"] == 0 and summary["violations"] == 0, summary["stdout"]


@pytest.mark.sweep
def test_figure_8_commit_rule_is_found_and_shrunk(tmp_path):
    """With the unsafe switch the leader counts replicas of an entry of an earlier epoch and commits it;
    a later leader elected without it breaks leader completeness. The simulator finds a seed and shrinks its
    schedule to the leader crashes that matter."""
    summary = run_cli("--seeds", "80", "--faults", "raft-churn", "--unsafe", tmp_path=tmp_path)
    assert summary["returncode"] == 1 and summary["violations"] >= 1
    assert "leader completeness" in summary["violation"] or "state machine safety" in summary["violation"]
    assert 1 <= len(summary["shrunk_schedule"]) <= 5
    assert any("crash" in fault for fault in summary["shrunk_schedule"])


def test_same_seed_is_safe_with_kafkas_rule(monkeypatch):
    monkeypatch.setattr(raft_client, "UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS", True)
    assert run_raft_seed(68, faults="raft-churn").violation is not None
    monkeypatch.setattr(raft_client, "UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS", False)
    assert run_raft_seed(68, faults="raft-churn").violation is None


def test_failover_benchmark_measures_election_then_commit():
    """The benchmark's own measurement (its figures are not asserted): a new leader only after the fetch
    timeout has let a follower notice, and the first commit after the crash no earlier than the election."""
    from epochkraft.bench.raft_failover import SETTINGS, one_failover

    settings = SETTINGS["election 250, fetch 500"]
    elected, committed = one_failover(1, settings, 3)
    assert 0 < elected <= committed
    assert elected >= settings.fetch_timeout_ms - settings.fetch_max_wait_ms


def test_snapshots_are_taken_and_installed():
    """raft-snapshots exercises what it is for: voters drop their logs below snapshots, and followers
    behind a leader's log start install the leader's snapshot."""
    from epochkraft.sim.raft_cluster import RaftSimCluster, raft_schedule

    cluster = RaftSimCluster(3, raft_schedule(3, 5), batched=True, snapshots=True)
    result = cluster.run()
    assert result.violation is None
    assert all(v.log.start_offset > 0 for v in cluster.voters.values())
    assert any("installs" in line for line in cluster.world.trace)


# ---- a dynamic quorum (KIP-853) ------------------------------------------------------------------------------
def test_a_reconfig_seed_replays_exactly():
    first, second = run_raft_seed(5, faults="raft-reconfig"), run_raft_seed(5, faults="raft-reconfig")
    assert first.trace == second.trace and first.acked == second.acked
    assert reconfig_schedule(9) == reconfig_schedule(9) and reconfig_schedule(9) != reconfig_schedule(10)
    kinds = {fault.kind for seed in range(20) for fault in reconfig_schedule(seed)}
    assert {"wipe", "crash", "partition", "one-way", "isolate"} <= kinds


@pytest.mark.parametrize(
    "schedule",
    [
        [RaftFault(2000, "wipe", 1, 0, 300)],
        # lost again before it caught up (and before the operator added it back)
        [RaftFault(2000, "wipe", 1, 0, 300), RaftFault(2400, "wipe", 1, 0, 20), RaftFault(2500, "crash", 0, 0, 700)],
    ],
)  # fmt: skip
def test_a_controller_on_a_new_disk_observes_until_the_operator_adds_it_back(schedule):
    cluster = RaftSimCluster(3, schedule, dynamic=True)
    old_key = ReplicaKey(1, cluster.voters[1].directory_id)
    result = cluster.run()
    assert result.violation is None and result.healthy_after_ms is not None, result.trace[-20:]
    new_key = ReplicaKey(1, cluster.voters[1].directory_id)
    leader = cluster._current_leader()
    assert leader is not None and leader.client is not None
    assert new_key != old_key and new_key in leader.client.voter_set.voters
    assert old_key not in leader.client.voter_set.voters
    assert any("RemoveRaftVoterResponse NONE" in line for line in result.trace)
    assert any("AddRaftVoterResponse NONE" in line for line in result.trace)
    # from its new disk until it is added back, voter-1 follows as an observer and never stands
    lost = next(i for i, line in enumerate(result.trace) if "voter-1 gets a new disk" in line)
    added = next(i for i, line in enumerate(result.trace) if "AddRaftVoterResponse NONE" in line)
    observing = result.trace[lost:added]
    assert any("voter-1 unattached" in line and "-> follower" in line for line in observing)
    assert not any(
        line.split("ms  ")[-1].startswith("voter-1 ") and "prospective" in line for line in observing
    )


# A schedule the simulator found with the unsafe switch (seed 25, 3 voters): voter-2 loses its disk three
# times and comes back as its old voter each time; with voter-1's messages to voter-3 lost, voter-2 and
# voter-3 elect voter-2 without a committed entry.
REJOIN_FINDING = [
    RaftFault(233, "wipe", 2, 0, 577),
    RaftFault(912, "wipe", 2, 0, 53),
    RaftFault(1138, "one-way", 1, 3, 1594),
    RaftFault(1792, "wipe", 2, 0, 85),
    RaftFault(2499, "crash", 0, 0, 1103),
]


def test_the_rejoin_rule_loses_a_committed_entry_where_the_observer_path_does_not(monkeypatch):
    monkeypatch.setattr(raft_cluster, "UNSAFE_REJOIN_WITH_OLD_KEY_FOR_TESTS", True)
    unsafe = RaftSimCluster(25, REJOIN_FINDING, voters=3, dynamic=True).run()
    assert unsafe.violation is not None and "leader completeness" in unsafe.violation
    monkeypatch.setattr(raft_cluster, "UNSAFE_REJOIN_WITH_OLD_KEY_FOR_TESTS", False)
    safe = RaftSimCluster(25, REJOIN_FINDING, voters=3, dynamic=True).run()
    assert safe.violation is None and safe.healthy_after_ms is not None


@pytest.mark.sweep
def test_the_rejoin_rule_is_found_and_shrunk(tmp_path):
    """With the unsafe switch a wiped controller comes back as its old voter, empty; over
    150 seeds of the KIP-853 grammar the simulator finds a broken invariant and shrinks the schedule to a
    handful of faults, disk losses among them."""
    summary = run_cli(
        "--seeds", "150", "--faults", "raft-reconfig", "--voters", "3", "--unsafe", tmp_path=tmp_path
    )
    assert summary["returncode"] == 1 and summary["violations"] >= 1
    assert any(
        word in summary["violation"] for word in ("leader completeness", "two leaders", "state machine")
    )
    assert 1 <= len(summary["shrunk_schedule"]) <= 6
    assert any("lose its disk" in fault for fault in summary["shrunk_schedule"])
