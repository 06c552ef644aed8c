"""``epochkraft analyze --metrics DIR [--master URL] [--out DIR]``: PySpark analysis of a metrics dir."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="epochkraft analyze", description="Analyse a metrics dir with PySpark."
    )
    parser.add_argument("--metrics", required=True, help="the metrics dir the daemons wrote")
    parser.add_argument("--master", help="Spark master URL (default local[*])")
    parser.add_argument(
        "--out", default="analysis", help="where the report and plots go (default ./analysis)"
    )
    args = parser.parse_args(argv)
    if not Path(args.metrics).is_dir():
        print(f"epochkraft analyze: no metrics dir at {args.metrics}", file=sys.stderr)
        return 2
    try:
        from epochkraft.analytics.report import analyze
    except ModuleNotFoundError as exc:
        print(
            f"epochkraft analyze: {(exc.name or 'a module').split('.')[0]} is not installed; it comes with the analytics extra:"
            " pip install -c constraints.txt -e '.[analytics]' from a clone (scripts/venv installs it"
            " into .venv), and Spark needs Java 17",
            file=sys.stderr,
        )
        return 2

    results = analyze(args.metrics, args.out, args.master)
    seconds = results.pop("_seconds")["seconds"][0]
    for name, frame in results.items():
        print(f"\n== {name} ==")
        print(frame.to_string(index=False) if not frame.empty else "(none)")
    print(f"\nreport: {Path(args.out) / 'report.md'} (Spark part took {seconds:.1f} s)")
    return 0
