"""A short real cluster run with a broker restart, analysed with PySpark: `epochkraft analyze` and the
notebook (executed headlessly) find the restart, the ISR shrink and the rejoin."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from epochkraft.chaos.kio_client import MiniClient
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
    from epochkraft.chaos.cluster import LocalCluster
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
