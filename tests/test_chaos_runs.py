"""Chaos on real processes: one run applying every fault with the checker passing, and the KAFKA-14139
scenario with both outcomes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from epochkraft.chaos.runner import FAULTS, QUORUM_FAULTS
from epochkraft.metrics.events import read_events
from epochkraft.metrics.live_view import CHAOS_NODE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(520)]


def run_chaos_cli(
    command: list[str], *, timeout: float, capture_output: bool = True, text: bool = True
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(capture_output=True, text=True)`` in a process group of its own: a run cut off at its
    timeout takes the cluster's daemons it started with it, instead of leaving them running."""
    pipe = subprocess.PIPE if capture_output else None
    with subprocess.Popen(command, start_new_session=True, stdout=pipe, stderr=pipe, text=text) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_every_fault_once_and_the_checker_passes(tmp_path):
    result = run_chaos_cli(
        [
            sys.executable,
            "-m",
            "epochkraft.cli",
            "chaos",
            "--work-dir",
            str(tmp_path),
            "--seed",
            "7",
            "--no-progress",
            "--rate",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and report["lost_count"] == 0 and report["duplicated_count"] == 0
    assert report["acked"] > 500 and report["consumed"] == report["acked"]
    assert report["isr_shrank"] and report["isr_reexpanded"]
    assert len(report["faults"]) == len(FAULTS)
    assert "verdict" in result.stdout and "PASS" in result.stdout
    # each fault is also an event, which the controllers' live view puts on its timeline
    injected = [
        e["fault"] for e in read_events(tmp_path / "metrics", CHAOS_NODE) if e["event"] == "fault_injected"
    ]
    assert sorted(injected) == sorted(FAULTS)
    assert [e["elected_from_elr"] for e in report["elr_elections"]] == [True]


def test_elr_member_can_be_elected_in_a_chaos_run(tmp_path):
    """Kafka's EligibleLeaderReplicasIntegrationTest.testElrMemberCanBeElected as a chaos fault under the
    producer: a follower SIGKILLed, the other stopped cleanly (the ISR below min ISR 2, that follower in
    the ELR), the leader SIGKILLed; the cleanly stopped follower, started again, is elected from the ELR
    and nothing acknowledged is lost."""
    result = run_chaos_cli(
        [
            *(sys.executable, "-m", "epochkraft.cli", "chaos", "--faults", "elr"),
            *("--work-dir", str(tmp_path), "--seed", "3", "--no-progress", "--rate", "200"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and report["lost_count"] == 0 and report["duplicated_count"] == 0
    assert report["acked"] > 300 and report["consumed"] == report["acked"]
    [election] = report["elr_elections"]
    stopped, leader = election["follower_stopped"], election["leader_killed"]
    assert (election["isr_below_min"], election["elr_seen"]) == ([leader], [stopped])
    assert election["elected"] == stopped and election["elected_from_elr"]
    assert re.search(r"ELR member elected \(KIP-966\) +1 of 1", result.stdout)
    [event] = [e for e in read_events(tmp_path / "metrics", CHAOS_NODE) if e["event"] == "fault_injected"]
    assert (event["fault"], event["elr"], event["leader"]) == ("elr", [stopped], stopped)


def test_kafka_14139_scenario_shows_both_outcomes(tmp_path):
    # An earlier run's data in the same work dir: another cluster's data dir and old events.
    for run in ("pre-kip903", "kip903"):
        (tmp_path / run / "cluster" / "broker-2").mkdir(parents=True)
        (tmp_path / run / "cluster" / "broker-2" / "meta.properties").write_text("cluster.id=earlier\n")
        (tmp_path / run / "metrics" / "dt=2026-01-01" / "node=0").mkdir(parents=True)
    result = run_chaos_cli(
        [
            sys.executable,
            "-m",
            "epochkraft.cli",
            "chaos",
            "--scenario",
            "kafka-14139",
            "--work-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["pre_kip903"]["lost_count"] > 0, "the unsafe switch loses acknowledged records"
    assert report["kip903"]["lost_count"] == 0
    assert report["kip903"]["rejected_alter_partitions"].get("INELIGIBLE_REPLICA", 0) >= 1


def test_chaos_with_small_segments_and_short_retention_loses_nothing_retained(tmp_path):
    """Faults while retention deletes 4 KiB segments past 8 KiB on every replica: every acknowledged
    value still at or above its partition's log start offset is read back, once, and retention did
    remove some (the checker counts those apart)."""
    result = run_chaos_cli(
        [
            sys.executable,
            "-m",
            "epochkraft.cli",
            "chaos",
            "--work-dir",
            str(tmp_path),
            "--seed",
            "3",
            "--no-progress",
            "--rate",
            "200",
            "--retention",
            "--faults",
            "hard-bounce-follower,power-loss,disk-loss",
        ],
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and report["lost_count"] == 0 and report["duplicated_count"] == 0
    assert report["removed_by_retention"] > 0
    assert report["consumed"] + report["removed_by_retention"] == report["acked"]


def test_chaos_on_a_secured_cluster_passes(tmp_path):
    # `cluster up --secure`'s cluster: mTLS between the daemons (through the fault proxies too), the
    # workload on SCRAM over TLS, the authorizer on; the faults that restart and cut off daemons.
    result = run_chaos_cli(
        [
            *(sys.executable, "-m", "epochkraft.cli", "chaos", "--secure"),
            *("--work-dir", str(tmp_path), "--seed", "3", "--no-progress", "--rate", "200"),
            *("--faults", "hard-bounce-leader,controller-restart,partition,power-loss"),
        ],
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and report["lost_count"] == 0
    assert report["acked"] > 300 and report["consumed"] == report["acked"]


def test_chaos_on_a_controller_quorum_passes_and_the_quorum_heals(tmp_path):
    # Three controllers as a Raft quorum: SIGKILL of the active one, the active one cut off from the
    # other controllers (through the proxies between them), a voter restarted on an empty disk, under the
    # producer; then every acknowledged record is read back and the quorum has healed.
    result = run_chaos_cli(
        [
            *(sys.executable, "-m", "epochkraft.cli", "chaos", "--controllers", "3"),
            *("--work-dir", str(tmp_path), "--seed", "3", "--no-progress", "--rate", "200"),
            *("--faults", ",".join(QUORUM_FAULTS)),
        ],
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and report["lost_count"] == 0
    assert report["quorum_checked"] and report["quorum_problems"] == []
    assert report["acked"] > 300 and report["consumed"] == report["acked"]
    assert [f.split(" ")[0] for f in report["faults"]].count("SIGKILL") == 1
    assert any("cut off from the other controllers" in f for f in report["faults"])
    assert any("on an empty disk" in f for f in report["faults"])
    assert "controller quorum healed" in result.stdout


@pytest.mark.timeout(120)
def test_chaos_with_the_consumer_group_protocol_heals(tmp_path):
    """The workload's consumer group on KIP-848's protocol (group.protocol=consumer) through a SIGKILLed
    partition leader: after it, every partition is owned by a member again, as the coordinator describes
    the group, and the group read every acknowledged value."""
    result = run_chaos_cli(
        [
            *(sys.executable, "-m", "epochkraft.cli", "chaos", "--group-protocol", "consumer"),
            *("--work-dir", str(tmp_path), "--seed", "3", "--no-progress", "--rate", "200"),
            *("--faults", "hard-bounce-leader"),
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and report["lost_count"] == 0 and report["missed_by_group_count"] == 0
    (heal,) = report["group_heals"]
    assert heal["seconds"] is not None and sorted(heal["owned"]) == [0, 1, 2], heal
    assert "group healed (partitions owned)" in result.stdout


def test_transactional_workload_through_a_leader_kill(tmp_path):
    # --workload txn: consume-transform-produce in transactions (every fifth aborted on purpose) while the
    # leader of an output partition is SIGKILLed and restarted; read_committed sees each input once, no
    # aborted record, every committed transaction whole (the other faults by hand: docs/chaos-and-analytics.md).
    result = run_chaos_cli(
        [
            *(sys.executable, "-m", "epochkraft.cli", "chaos", "--workload", "txn"),
            # 100 inputs/s: the loop keeps up on a loaded machine, so the drain at the end is short
            *("--work-dir", str(tmp_path), "--seed", "3", "--no-progress", "--rate", "100"),
            *("--faults", "hard-bounce-leader"),
        ],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    txn = json.loads((tmp_path / "report.json").read_text())["transactions"]
    assert txn["ok"] and txn["drained"]
    assert txn["aborted_visible_count"] == txn["committed_lost_count"] == txn["partly_visible_count"] == 0
    assert txn["inputs_lost_count"] == txn["inputs_duplicated_count"] == 0
    assert txn["committed"] >= 10 and txn["aborted_deliberately"] >= 2
    assert txn["output_read_committed"] == txn["inputs_acked"] > 300
    # the aborted copies are in the log, hidden from read_committed only
    assert txn["output_read_uncommitted"] > txn["output_read_committed"]
    assert "ABORTED records visible" in result.stdout and "PASS" in result.stdout
