"""The deterministic simulation: reproducible per seed, no invariant broken with the defaults, and the
KAFKA-14139 loss found and shrunk with the pre-KIP-903 switches on; with one controller and against a
controller quorum (three controllers, each the controller daemon's Raft core and ControllerQuorum, crashed,
restarted and cut off from each other or from everyone), where the checks also find a controller that
answers before its records are committed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from epochkraft.broker import fetch_rules
from epochkraft.controller import partition_change
from epochkraft.controller.quorum import ControllerQuorum
from epochkraft.sim import quorum
from epochkraft.sim.cluster import (
    TOPOLOGIES,
    Fault,
    SimCluster,
    quorum_schedule,
    random_schedule,
    run_seed,
    shrink,
)
from epochkraft.sim.quorum import SimQuorum

# 1,500 seeds take about 55 s on 2 quiet cores (100 s in a CI run); the deadlines leave room for a machine
# several times slower. The quorum sweep (below) runs the random broker faults against three controllers.
pytestmark = pytest.mark.timeout(600)


def test_a_seed_replays_exactly():
    first, second = run_seed(11), run_seed(11)
    assert first.trace == second.trace and first.acked == second.acked and first.events == second.events
    assert run_seed(12).trace != first.trace
    assert random_schedule(11) == random_schedule(11)


def test_staged_race_loses_data_only_with_the_unsafe_switches():
    schedule = [
        Fault(2000, "crash", 2, 0, 600),
        Fault(2800, "hold-alter-partition", 1, 2500, 2500),
        Fault(3600, "wipe", 2, 0, 300),
        Fault(3700, "partition", 2, 1, 4000),
        Fault(5600, "crash", 1, 0, 3000),
    ]
    unsafe = SimCluster(5, schedule, unsafe=True).run()
    assert (
        unsafe.violation is not None
        and "lost" in unsafe.violation
        and "stale replica admitted" in unsafe.violation
    )
    assert SimCluster(5, schedule, unsafe=False).run().violation is None


def run_cli(*args: str, tmp_path) -> dict:
    out = tmp_path / "sim.json"
    result = subprocess.run(
        [sys.executable, "-m", "epochkraft.cli", "sim", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(result.stdout)
    summary = json.loads(out.read_text())
    summary["stdout"] = result.stdout
    summary["returncode"] = result.returncode
    return summary


@pytest.mark.sweep
@pytest.mark.parametrize(("faults", "seeds"), [("random", 1500), ("kafka-14139", 200)])
def test_defaults_hold_every_invariant(tmp_path, faults, seeds):
    summary = run_cli("--seeds", str(seeds), "--faults", faults, tmp_path=tmp_path)
    assert summary["returncode"] == 0 and summary["violations"] == 0, summary["stdout"]


@pytest.mark.sweep
def test_unsafe_switches_let_the_simulator_find_kafka_14139(tmp_path):
    summary = run_cli("--seeds", "40", "--faults", "kafka-14139", "--unsafe", tmp_path=tmp_path)
    assert summary["returncode"] == 1 and summary["violations"] >= 1
    assert "lost" in summary["violation"] and "stale replica admitted" in summary["violation"]
    assert 2 <= len(summary["shrunk_schedule"]) <= 5
    assert "shrunk schedule" in summary["stdout"]


LAST_ISR_MEMBER_ON_AN_EMPTY_DISK = [
    Fault(1500, "power-loss", 3, 0, 300),  # noise the shrinking drops
    Fault(2000, "crash", 2, 0, 5000),  # the follower leaves the ISR and stays down
    Fault(4000, "wipe", 1, 0, 500),  # the last ISR member comes back empty and is re-elected
    Fault(5000, "fetcher-failure", 1, 0, 0),  # noise
]


def test_liveness_check_finds_and_shrinks_a_follower_that_never_rejoins(monkeypatch):
    """The liveness check, shown able to fail: with the old answer to a follower whose last fetched epoch
    is older than the leader's first (DivergingEpoch(-1, -1), ignored by the follower) switched back on,
    the follower that comes back after the last ISR member returned on an empty disk never rejoins; the
    simulator reports it and shrinks the schedule to the two faults that matter. Without it, it heals."""
    healthy = SimCluster(3, LAST_ISR_MEMBER_ON_AN_EMPTY_DISK).run()
    assert healthy.violation is None and healthy.healthy_after_ms is not None
    monkeypatch.setattr(fetch_rules, "LEGACY_UNDEFINED_DIVERGENCE_FOR_TESTS", True)
    found = run_seed(3, schedule=LAST_ISR_MEMBER_ON_AN_EMPTY_DISK)
    assert found.violation is not None and "not healed" in found.violation
    assert "without progress" in found.violation and "does not hold every replica" in found.violation
    shrunk = shrink(found, unsafe=False)
    assert "not healed" in shrunk.violation
    assert [f.kind for f in shrunk.schedule] == ["crash", "wipe"]


# ---- eligible leader replicas (KIP-966): three replicas, min.insync.replicas 2 -------------------------
THE_ISSUES_SCENARIO = [
    Fault(2000, "crash", 3, 0, 6000),  # a follower SIGKILLed (fenced a session timeout later)
    Fault(3500, "clean-stop", 2, 0, 2000),  # the other stopped cleanly: below min ISR, into the ELR
    Fault(4500, "crash", 1, 0, 4000),  # the leader SIGKILLed; broker 2 is back first, at 5.5 s
]
AN_UNCLEAN_ELR_MEMBER_ELECTED = [  # found by `epochkraft sim --faults elr --unsafe`, shrunk
    Fault(1858, "crash", 3, 0, 2922),
    Fault(2975, "power-loss", 1, 0, 367),
    Fault(3233, "partition", 2, 0, 2666),
]


def test_elr_elects_the_cleanly_stopped_follower_while_the_leader_is_down():
    """The issue's scenario: with ELR the partition is back once the clean follower returns; without it,
    only once the dead leader does. Nothing acknowledged is lost either way."""
    on = SimCluster(7, THE_ISSUES_SCENARIO, topology=TOPOLOGIES["elr"]).run()
    off = SimCluster(7, THE_ISSUES_SCENARIO, elr=False, topology=TOPOLOGIES["elr"]).run()
    assert on.violation is None and off.violation is None
    assert any("broker-2 leads epoch 2" in line for line in on.trace)
    assert any("broker-1 leads epoch 2" in line for line in off.trace)
    assert on.offline_ms < 1000 < 3000 < off.offline_ms
    assert on.lost_without_fsync == off.lost_without_fsync == 0


def test_unsafe_elr_switch_loses_acknowledged_records(monkeypatch):
    """The check shown able to fail: a broker back from a power loss kept in the ELR (the unsafe switch)
    is elected from it without the records it had not flushed, which the other replicas still hold."""
    assert run_seed(2, faults="elr", schedule=AN_UNCLEAN_ELR_MEMBER_ELECTED).violation is None
    monkeypatch.setattr(partition_change, "UNSAFE_KEEP_UNCLEAN_SHUTDOWN_IN_ELR_FOR_TESTS", True)
    found = run_seed(2, faults="elr", schedule=AN_UNCLEAN_ELR_MEMBER_ELECTED)
    assert found.violation is not None and "lost" in found.violation
    assert run_seed(2, faults="elr", schedule=AN_UNCLEAN_ELR_MEMBER_ELECTED, elr=False).violation is None


@pytest.mark.sweep
def test_elr_on_and_off_hold_every_invariant_and_unsafe_elr_is_found(tmp_path):
    summary = run_cli("--seeds", "30", "--faults", "elr", tmp_path=tmp_path)
    assert summary["returncode"] == 0 and summary["violations"] == 0, summary["stdout"]
    assert "time with no leader" in summary["stdout"]
    summary = run_cli("--seeds", "30", "--faults", "elr", "--unsafe", tmp_path=tmp_path)
    assert summary["returncode"] == 1 and "lost" in summary["violation"], summary["stdout"]
    assert len(summary["shrunk_schedule"]) <= 4


# ---- against a controller quorum ---------------------------------------------------------------------
# found by `epochkraft sim --faults random --controllers 3` before a new cluster's feature levels were
# appended at activation, shrunk: the restarted quorum's activation left metadata.version and ELR unset
# when a broker's registration was let in first, and a fenced ISR was then handled without ELR
BOOTSTRAP_RACE = [
    Fault(7161, "wipe", 2, 0, 2339),
    Fault(7795, "controller-restart", 0, 0, 0),
    Fault(7858, "crash", 1, 0, 1894),
]


def test_a_quorum_seed_replays_exactly():
    first, second = run_seed(4, faults="quorum"), run_seed(4, faults="quorum")
    assert first.trace == second.trace and first.acked == second.acked and first.events == second.events
    assert any("active controller" in line for line in first.trace)
    assert quorum_schedule(4) == quorum_schedule(4)
    assert any(f.kind.startswith("controller-") for f in quorum_schedule(4))


def test_brokers_follow_the_committed_metadata_of_the_quorum():
    sim = SimCluster(1, quorum_schedule(1), topology=TOPOLOGIES["quorum"], controllers=3)
    result = sim.run()
    assert result.violation is None and result.acked > 100
    controllers = sim.controllers
    assert isinstance(controllers, SimQuorum)
    assert controllers.image.elr_enabled  # the bootstrap's feature levels are committed
    topic = controllers.topic("sim")
    assert topic is not None and set(topic.partitions[0].isr) == {1, 2}
    for broker in sim.brokers.values():  # every broker caught up with the committed log
        assert broker.cache.next_offset == controllers.committed_end


def test_a_new_clusters_feature_levels_come_before_any_broker(monkeypatch):
    """The race the simulator found: with the activation's bootstrap records left to a later write, a
    broker registered first and the cluster ran without metadata.version or ELR (seen as an
    acknowledged record lost once the last ISR member came back on an empty disk). Shown here with no
    bootstrap at all, the state that race left."""
    assert run_seed(66, schedule=BOOTSTRAP_RACE, controllers=3).violation is None
    monkeypatch.setattr(ControllerQuorum, "needs_bootstrap", lambda self: False)
    found = run_seed(66, schedule=BOOTSTRAP_RACE, controllers=3)
    assert found.violation is not None and "lost" in found.violation


def test_answering_before_commit_is_found(monkeypatch):
    """The quorum's glue shown checked: an active controller that answers brokers before its records are
    committed (registrations, ISR changes a crash then takes back) loses acknowledged records."""
    monkeypatch.setattr(quorum, "UNSAFE_ANSWER_BEFORE_COMMIT_FOR_TESTS", True)
    found = next((s for s in range(40) if run_seed(s, faults="quorum").violation is not None), None)
    assert found is not None, "no seed of 40 found a controller answering before commit"
    monkeypatch.setattr(quorum, "UNSAFE_ANSWER_BEFORE_COMMIT_FOR_TESTS", False)
    assert run_seed(found, faults="quorum").violation is None


@pytest.mark.sweep
def test_quorum_faults_hold_every_invariant(tmp_path):
    summary = run_cli("--seeds", "200", "--faults", "quorum", tmp_path=tmp_path)
    assert summary["returncode"] == 0 and summary["violations"] == 0, summary["stdout"]


@pytest.mark.sweep
def test_unsafe_switches_find_kafka_14139_against_a_quorum(tmp_path):
    summary = run_cli(
        "--seeds", "40", "--faults", "kafka-14139", "--controllers", "3", "--unsafe", tmp_path=tmp_path
    )
    assert summary["returncode"] == 1 and summary["violations"] >= 1
    assert "lost" in summary["violation"] and "stale replica admitted" in summary["violation"]
    assert "active controller" in summary["stdout"]  # the shrunk run's trace is the quorum's
