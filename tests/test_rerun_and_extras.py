"""What a user meets on a second run or without an optional extra: a chaos work dir used before starts
clean (or is refused in one line while its cluster still runs), and `epochkraft analyze` without PySpark
says what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochkraft.chaos.runner import WorkDirBusy, start_clean
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.processes import LocalProcess


def leftovers(work: Path) -> None:
    """What an earlier run leaves: data dirs of another cluster and its events."""
    (work / "cluster" / "broker-1").mkdir(parents=True)
    (work / "cluster" / "broker-1" / "meta.properties").write_text("cluster.id=epochkraft-earlier\n")
    (work / "metrics" / "dt=2026-01-01" / "node=0").mkdir(parents=True)
    (work / "metrics" / "dt=2026-01-01" / "node=0" / "events-1.jsonl").write_text("{}\n")


def test_a_second_run_starts_from_an_empty_cluster_and_metrics_dir(tmp_path):
    leftovers(tmp_path)
    (tmp_path / "report.json").write_text("{}")
    start_clean(tmp_path)
    assert not (tmp_path / "cluster").exists() and not (tmp_path / "metrics").exists()
    assert (tmp_path / "report.json").exists(), "only the run's own cluster and metrics dirs go"


def test_a_work_dir_whose_cluster_still_runs_is_refused_in_one_line(tmp_path):
    leftovers(tmp_path)
    cluster = LocalCluster(data_dir=tmp_path / "cluster")
    cluster.controller = LocalProcess("controller", [], tmp_path / "c.log", pid=os.getpid(), port=1)
    cluster.save()
    try:
        start_clean(tmp_path)
    except WorkDirBusy as exc:
        message = str(exc)
    else:
        raise AssertionError("a running cluster's work dir was cleaned")
    assert str(os.getpid()) in message and "\n" not in message
    assert (tmp_path / "cluster" / "broker-1" / "meta.properties").exists()


@pytest.mark.net
def test_chaos_cli_refuses_a_busy_work_dir_without_a_traceback(tmp_path):
    run_dir = tmp_path / "pre-kip903"
    leftovers(run_dir)
    cluster = LocalCluster(data_dir=run_dir / "cluster")
    cluster.controller = LocalProcess("controller", [], tmp_path / "c.log", pid=os.getpid(), port=1)
    cluster.save()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochkraft.cli",
            "chaos",
            "--scenario",
            "kafka-14139",
            "--work-dir",
            tmp_path,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "still running" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.net
def test_analyze_without_the_analytics_extra_says_what_to_install(tmp_path):
    hide_pyspark = (
        "import sys; sys.modules['pyspark'] = None; from epochkraft.cli import main; "
        f"sys.exit(main(['analyze', '--metrics', {str(tmp_path)!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", hide_pyspark], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "pyspark is not installed" in result.stderr and "pip install" in result.stderr
    assert "[analytics]" in result.stderr
