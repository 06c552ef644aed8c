"""End-to-end latency against offered load, the same for Apache Kafka, epochkraft and kfake (part of
``scripts/bench_peers``, ``--parts e2e-curve``).

Per target, its maximum in configuration (a) (1 KiB records, RF 3, acks=all, min.insync.replicas 2, one
partition) is first measured with a short ProducerPerformance run at unlimited throughput, or taken from
``--e2e-max``; then ``measure_e2e`` runs at each fraction of it (``--e2e-fractions``), one new topic per
load on the same cluster. The p99 of each load goes into one plot, one line per target (``--plot``).

One run's p99 on this 2-core machine moves by tens of ms from one run to the next (a few busy spells of
the machine, the load generator's JVM among them, make the 1% tail), so ``--e2e-runs`` measures each load several times, in rounds over every
load, and reports the run of the median p99 with every run's p99 beside it. Each run's topic is deleted
after it, so the runs do not fill the disk.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from epochkraft.peers.latency import LatencyFigure, keeps_up, measure_e2e
from epochkraft.peers.perf import create_topic, producer_performance, scratch_topic

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DEFAULT_FRACTIONS = (0.1, 0.3, 0.5, 0.7, 0.9)


@dataclass(frozen=True)
class CurveSettings:
    fractions: tuple[float, ...]
    max_records_per_s: float | None  # None: measured on each target
    max_records: int  # records of the run that measures the maximum
    seconds: float  # measured seconds per load
    warm_up_s: float
    runs: int = 1  # runs per load

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"at least one run per load, not {self.runs}")


@dataclass
class CurvePoint:
    target: str
    max_records_per_s: float  # the target's (a) maximum the loads are fractions of
    fraction: float
    figure: LatencyFigure  # the run of the median p99 (the lower middle one of an even count)
    p99_runs_ms: list[float] = field(default_factory=list)  # every run's p99, in the order they ran

    @property
    def kept_up(self) -> bool:
        return keeps_up(self.figure.offered_records_per_s, self.figure.achieved_records_per_s)


def parse_fractions(text: str) -> tuple[float, ...]:
    """``"0.1,0.3,0.5"`` as fractions of the maximum, each in (0, 1], ascending and without repeats."""
    try:
        fractions = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"fractions are numbers separated by commas: {text!r}") from exc
    if not fractions:
        raise ValueError("no fractions given")
    if any(not 0 < f <= 1 for f in fractions):
        raise ValueError(f"each fraction is above 0 and at most 1: {text!r}")
    return tuple(sorted(set(fractions)))


def offered_rate(max_records_per_s: float, fraction: float) -> int:
    """The load offered at ``fraction`` of the maximum, whole records/s (at least 1)."""
    return max(1, round(max_records_per_s * fraction))


def measure_max(target: str, bootstrap: str, records: int, log4j: Path) -> float:
    """The target's (a) maximum: ProducerPerformance as fast as it goes on the curve's topic shape."""
    topic = "e2e-curve-max"
    asyncio.run(create_topic(bootstrap, topic, 1, 3, 2))
    result = producer_performance(bootstrap, topic, "all", records, log4j)
    print(f"  {target:<11} (a) maximum: {result.records_per_s:.0f} records/s", flush=True)
    return result.records_per_s


def measure_curve(target: str, bootstrap: str, settings: CurveSettings, log4j: Path) -> list[CurvePoint]:
    maximum = settings.max_records_per_s or measure_max(target, bootstrap, settings.max_records, log4j)
    runs: dict[float, list[LatencyFigure]] = {fraction: [] for fraction in settings.fractions}
    # Round by round over every load, so a slow spell of the machine falls on one run of several loads,
    # not on every run of one.
    for run in range(settings.runs):
        for fraction in settings.fractions:
            rate = offered_rate(maximum, fraction)
            with scratch_topic(bootstrap, f"e2e-curve-{round(fraction * 100)}-{run}") as topic:
                figure = measure_e2e(
                    target, bootstrap, rate, settings.seconds, settings.warm_up_s, log4j, topic=topic
                )
            runs[fraction].append(figure)
    return [median_point(target, maximum, fraction, figures) for fraction, figures in runs.items()]


def median_point(target: str, maximum: float, fraction: float, figures: list[LatencyFigure]) -> CurvePoint:
    """The load's point: the run of the median p99 (a run with no p99 counts as the slowest)."""
    ordered = sorted(figures, key=lambda f: math.inf if math.isnan(f.p99_ms) else f.p99_ms)
    return CurvePoint(
        target, maximum, fraction, ordered[(len(ordered) - 1) // 2], [f.p99_ms for f in figures]
    )


def report_curve(points: Sequence[CurvePoint], warm_up_s: float) -> None:
    if not points:
        return
    print(
        "\nend-to-end latency (create to consumer) against offered load, 1 KiB records, RF 3 acks=all "
        f"min.insync 2, the first {warm_up_s:g} s of each load left out; * = achieved < 95% of offered:"
    )
    print(
        f"  {'target':<11} {'max/s':>8} {'load':>5} {'offered/s':>10} {'achieved/s':>11} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'p99.9 ms':>9} {'ack p50':>8} {'ack p99':>8}  p99 of each run"
    )
    for p in points:
        f = p.figure
        print(
            f"  {p.target:<11} {p.max_records_per_s:>8.0f} {p.fraction:>5.0%} {f.offered_records_per_s:>10} "
            f"{f.achieved_records_per_s:>10.0f}{' ' if p.kept_up else '*'} {f.p50_ms:>7.1f} {f.p99_ms:>7.1f} "
            f"{f.p999_ms:>9.1f} {f.ack_p50_ms:>8.0f} {f.ack_p99_ms:>8.0f}  "
            + " ".join(f"{p99:.1f}" for p99 in p.p99_runs_ms)
        )


def write_plot(points: Sequence[CurvePoint], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    curve_figure(points).savefig(path, dpi=100)


def curve_figure(points: Sequence[CurvePoint]) -> Figure:
    """p99 against offered load, one line per target: absolute records/s on the left, the fraction of
    the target's own maximum on the right; a load not kept up with is an open marker."""
    from matplotlib.figure import Figure  # matplotlib is the analytics extra; no pyplot: no display
    from matplotlib.ticker import FuncFormatter

    figure = Figure(figsize=(12, 5), layout="constrained")
    absolute, relative = figure.subplots(1, 2, sharey=True)
    for target in dict.fromkeys(p.target for p in points):
        line = [p for p in points if p.target == target and not math.isnan(p.figure.p99_ms)]
        if not line:
            continue
        maximum = line[0].max_records_per_s
        label = f"{target} (max {maximum:,.0f}/s)"
        for axes, xs in (
            (absolute, [p.figure.offered_records_per_s for p in line]),
            (relative, [p.fraction * 100 for p in line]),
        ):
            p99 = [max(p.figure.p99_ms, 0.1) for p in line]  # a 0 ms figure stays on a log axis
            (drawn,) = axes.plot(xs, p99, marker="o", label=label)
            behind = [(x, y) for x, y, p in zip(xs, p99, line, strict=True) if not p.kept_up]
            if behind:
                axes.plot(
                    *zip(*behind, strict=True), linestyle="", marker="o", markersize=11,
                    markerfacecolor="none", color=drawn.get_color(),
                )  # fmt: skip
    for axes in (absolute, relative):
        _log_ms_axis(axes)
    absolute.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    absolute.set_xlabel("offered load (records/s of 1 KiB)")
    relative.set_xlabel("offered load (% of the target's own (a) maximum)")
    absolute.legend(title="open ring: achieved < 95% of offered", fontsize=9, title_fontsize=8)
    figure.suptitle("End-to-end p99 against offered load: RF 3, acks=all, min.insync.replicas 2, 1 partition")
    return figure


def _log_ms_axis(axes: Axes) -> None:
    """Milliseconds on a log scale spanning at least 1-100 ms, ticks at 1-2-5 written as plain numbers,
    and the issue's 10 ms goal as a dashed line."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axes.set_yscale("log")
    bottom, top = axes.get_ylim()
    axes.set_ylim(min(bottom, 1), max(top, 100))
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())
    axes.axhline(10, color="grey", linestyle="--", linewidth=1, label="_10 ms goal")
    axes.text(
        0.99, 10, "10 ms goal", transform=axes.get_yaxis_transform(), color="grey", fontsize=8,
        ha="right", va="bottom",
    )  # fmt: skip
    axes.grid(True, which="major", alpha=0.3)
    axes.set_ylabel("end-to-end p99 (ms, log scale)")
