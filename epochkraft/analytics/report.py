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


MAX_PANELS = 12


def isr_and_elr_figure(frame: pd.DataFrame) -> Any:
    """A matplotlib Figure (no pyplot, so any backend shows or saves it): per partition that ever had an
    ELR (all partitions if none did, at most MAX_PANELS), its ISR size and ELR size over time as steps,
    the last known ELR size dotted; ``frame`` is jobs.isr_and_elr_over_time as pandas."""
    from matplotlib.figure import Figure

    keys = list(frame.groupby(["topic", "partition"]).groups) if not frame.empty else []
    with_elr = frame[(frame["elr_size"] > 0) | (frame["last_known_elr_size"] > 0)] if keys else frame
    shown = sorted(set(zip(with_elr["topic"], with_elr["partition"], strict=True))) or keys
    shown = shown[:MAX_PANELS]
    fig = Figure(figsize=(9, 1.8 * max(len(shown), 1) + 0.6))
    axes = fig.subplots(max(len(shown), 1), 1, sharex=True, squeeze=False)[:, 0]
    start = frame["ts_ms"].min() if keys else 0
    for ax, (topic, partition) in zip(axes, shown, strict=False):
        group = frame[(frame["topic"] == topic) & (frame["partition"] == partition)]
        t = (group["ts_ms"] - start) / 1000
        ax.step(t, group["isr_size"], where="post", label="ISR")
        ax.step(t, group["elr_size"], where="post", label="ELR")
        ax.step(t, group["last_known_elr_size"], where="post", linestyle=":", label="last known ELR")
        ax.set_ylabel(f"{topic}-{partition}", fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_title("ISR and ELR size over time (KIP-966)")
    axes[-1].set_xlabel("seconds since first ISR/ELR change")
    fig.tight_layout()
    return fig


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
    isr_and_elr_figure(results["isr_and_elr_over_time"]).savefig(out / "isr_and_elr_over_time.png")
    lines = ["# epochkraft cluster health report", "", f"Spark analysis took {seconds:.1f} s.", ""]
    for name, frame in results.items():
        table = frame.to_string(index=False) if not frame.empty else "(none)"
        lines += [f"## {name.replace('_', ' ')}", "", "```", table, "```", ""]
    lines += [
        "![ISR size](isr_size_over_time.png)",
        "",
        "![ISR and ELR size](isr_and_elr_over_time.png)",
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
