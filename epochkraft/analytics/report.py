"""Runs every job, prints the tables, writes PNG plots and a markdown summary."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

from epochkraft.analytics import jobs


def run_all(spark: Any, metrics_dir: str | Path) -> dict[str, pd.DataFrame]:
    events = jobs.load_events(spark, metrics_dir).cache()
    results = {name: job(events).toPandas() for name, job in jobs.JOBS.items()}
    results["event_counts"] = events.groupBy("event").count().orderBy("event").toPandas()
    events.unpersist()
    return results


def plot_isr(isr: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    if not isr.empty:
        for (topic, partition), group in isr.groupby(["topic", "partition"]):
            t = (group["ts_ms"] - isr["ts_ms"].min()) / 1000
            ax.step(t, group["isr_size"], where="post", label=f"{topic}-{partition}")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("seconds since first ISR change")
    ax.set_ylabel("ISR size")
    ax.set_title("ISR size over time")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_outcomes(outcomes: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    if not outcomes.empty:
        table = outcomes.fillna({"broker": -1}).pivot_table(
            index="outcome", columns="broker", values="count", fill_value=0
        )
        table.plot.bar(ax=ax)
    ax.set_title("AlterPartition outcomes by broker")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(results: dict[str, pd.DataFrame], out: Path, seconds: float) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plot_isr(results["isr_size_over_time"], out / "isr_size_over_time.png")
    plot_outcomes(results["alter_partition_outcomes"], out / "alter_partition_outcomes.png")
    lines = ["# epochkraft cluster health report", "", f"Spark analysis took {seconds:.1f} s.", ""]
    for name, frame in results.items():
        table = frame.to_string(index=False) if not frame.empty else "(none)"
        lines += [f"## {name.replace('_', ' ')}", "", "```", table, "```", ""]
    lines += [
        "![ISR size](isr_size_over_time.png)",
        "",
        "![AlterPartition outcomes](alter_partition_outcomes.png)",
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def analyze(metrics_dir: str | Path, out: str | Path, master: str | None = None) -> dict[str, pd.DataFrame]:
    started = time.monotonic()
    spark = jobs.session(master)
    try:
        results = run_all(spark, metrics_dir)
    finally:
        spark.stop()
    seconds = time.monotonic() - started
    write_report(results, Path(out), seconds)
    results["_seconds"] = pd.DataFrame({"seconds": [seconds]})
    return results
