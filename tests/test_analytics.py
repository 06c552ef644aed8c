"""A short real cluster run with a broker restart, analysed with PySpark: `epochkraft analyze` and the
notebook (executed headlessly) find the restart, the ISR shrink and the rejoin; the ISR and ELR history of
the KIP-966 scenario from the controller's events."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from epochkraft.harness.kio_client import MiniClient
from epochkraft.protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parent.parent


async def run_with_restart(cluster) -> int:
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("health", 2, 3, {"min.insync.replicas": "2"}) == ErrorCode.none
        for i in range(20):
            await client.produce("health", i % 2, [f"{i}".encode()])
        victim = 2
        cluster.node(victim).kill()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            p, _ = await client.partition_state("health")
            if victim not in p.isr_nodes:
                break
            await asyncio.sleep(0.2)
        for i in range(20, 40):
            await client.produce("health", i % 2, [f"{i}".encode()])
        cluster.node(victim).start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            states = [(await client.partition_state("health", i))[0] for i in (0, 1)]
            if all(victim in s.isr_nodes for s in states):
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.5)  # one more metrics snapshot
        return victim
    finally:
        await client.close()


@pytest.fixture(scope="module")
def metrics_run(tmp_path_factory):
    from epochkraft.harness.cluster import LocalCluster
    from tests.conftest import write_fast_configs

    tmp = tmp_path_factory.mktemp("analytics")
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config")
    cluster = LocalCluster(
        data_dir=tmp / "cluster",
        brokers=3,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        metrics_dir=tmp / "metrics",
    )
    cluster.start()
    try:
        victim = asyncio.run(run_with_restart(cluster))
    finally:
        cluster.stop()
    return tmp / "metrics", victim, tmp


def test_analyze_finds_the_restart_the_shrink_and_the_rejoin(metrics_run):
    metrics, victim, tmp = metrics_run
    out = tmp / "analysis"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "epochkraft.cli", "analyze", "--metrics", str(metrics), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    print(f"epochkraft analyze took {time.monotonic() - started:.1f}s")
    assert result.returncode == 0, result.stderr[-3000:]
    # pyarrow comes with the analytics extra: Spark's Arrow path for toPandas, without its warning.
    assert "PyArrow" not in result.stdout + result.stderr, result.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert (out / "isr_size_over_time.png").stat().st_size > 1000
    assert (out / "alter_partition_outcomes.png").exists()
    # The tables in the report: the restart with its rejoin time, the shrink in the ISR history.
    rejoin_section = report.split("## restart to rejoin")[1].split("##")[0]
    assert f"\n{victim:>6}" in rejoin_section or f" {victim} " in rejoin_section
    assert "seconds_to_rejoin" in rejoin_section and "NaN" not in rejoin_section
    isr_section = report.split("## isr size over time")[1].split("##")[0]
    assert "health" in isr_section
    under = report.split("## under replicated durations")[1].split("##")[0]
    assert "health" in under


def test_jobs_directly(metrics_run):
    from epochkraft.analytics import jobs

    metrics, victim, _ = metrics_run
    spark = jobs.session()
    try:
        events = jobs.load_events(spark, metrics)
        isr = jobs.isr_size_over_time(events).toPandas()
        health = isr[isr.topic == "health"]
        assert (health.isr_size == 2).any(), "the ISR shrank to 2"
        for _, group in health.sort_values("ts_ms").groupby("partition"):
            sizes = list(group.isr_size)
            assert 3 in sizes[sizes.index(2) :], "and grew back to 3 after the restart"
        rejoin = jobs.restart_to_rejoin(events).toPandas()
        row = rejoin[rejoin.broker == victim].iloc[0]
        assert 0 < row.seconds_to_rejoin < 20 and row.partitions_rejoined >= 2
        outcomes = jobs.alter_partition_outcomes(events).toPandas()
        assert outcomes[outcomes.outcome == "COMMITTED"]["count"].sum() >= 2
        assert jobs.unclean_elections(events).count() == 0
        latency = jobs.produce_latency_percentiles(events).toPandas()
        assert latency.requests.sum() >= 20  # the killed broker loses its unreported window
    finally:
        spark.stop()


def test_notebook_executes_headlessly(metrics_run):
    metrics, _, tmp = metrics_run
    notebook = nbformat.read(ROOT / "notebooks" / "cluster_health.ipynb", as_version=4)
    os.environ["EPOCHKRAFT_METRICS_DIR"] = str(metrics)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    client = NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp)}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the ISR plot was drawn"


def write_events(metrics: Path, node: str, events: list[dict]) -> None:
    folder = metrics / "dt=2026-11-27" / f"node={node}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events-1-0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def change(event: str, offset: int, ts_ms: int, **lists: list[int]) -> dict:
    """One committed partition change of ``elr``-0 as the controller writes it."""
    where = {"topic": "elr", "partition": 0, "offset": offset, "partition_epoch": offset}
    return {"schema_version": 1, "ts_ms": ts_ms, "node": "controller-0", "event": event} | where | lists


def isr(offset: int, isr: list[int], previous: list[int], ts_ms: int) -> dict:
    return change("isr_change_committed", offset, ts_ms, isr=isr, previous_isr=previous)


def elr(offset: int, elr: list[int], last_known: list[int], ts_ms: int) -> dict:
    return change("elr_change_committed", offset, ts_ms, elr=elr, last_known_elr=last_known)


def test_isr_and_elr_over_time(tmp_path):
    """The controller's events of the chaos run's elr fault (tests/test_elr_cluster.py's scenario): one
    row per metadata record, the list a record did not change carried over from the one before."""
    from epochkraft.analytics import jobs
    from epochkraft.analytics.schema import validate_event

    events = [
        isr(10, [1, 2], [1, 2, 3], 1_000),  # follower 3 fenced: the ISR at min ISR 2
        isr(11, [1], [1, 2], 2_000),  # follower 2 stopped cleanly: below min ISR, into the ELR
        elr(11, [2], [], 2_000),
        isr(12, [], [1], 3_000),  # leader 1 fenced: no ISR; the last leader is the last known ELR
        elr(12, [1, 2], [1], 3_000),
        elr(13, [2], [1], 4_000),  # 1 back from an unclean shutdown: out of the ELR, the ISR unchanged
        isr(14, [2], [], 5_000),  # 2 elected from the ELR
        elr(14, [], [], 5_000),
        isr(15, [2, 3], [2], 6_000),
    ]
    assert not [p for e in events for p in validate_event(e)]
    write_events(tmp_path, "controller-0", events)
    spark = jobs.session()
    try:
        rows = jobs.isr_and_elr_over_time(jobs.load_events(spark, tmp_path)).toPandas()
    finally:
        spark.stop()

    def listed(value) -> list[int] | None:
        return None if value is None else list(value)

    table = [
        (r.offset, listed(r.isr), listed(r.elr), listed(r.last_known_elr), r.isr_size, r.elr_size)
        for r in rows.itertuples()
    ]
    assert table == [
        (10, [1, 2], [], [], 2, 0),
        (11, [1], [2], [], 1, 1),
        (12, [], [1, 2], [1], 0, 2),
        (13, [], [2], [1], 0, 1),
        (14, [2], [], [], 1, 0),
        (15, [2, 3], [], [], 2, 0),
    ]
    assert list(rows.last_known_elr_size) == [0, 0, 1, 1, 0, 0]
