"""``scripts/franz_kgo_tests``: franz-go's own ``pkg/kgo`` tests against an epochkraft cluster.

The franz-go release is the one kfake is built with (``peers/kfake/go.mod``), fetched from the Go module
proxy into the peers cache. A three-broker epochkraft cluster starts on loopback, ``go test`` runs with
``KGO_SEEDS`` naming its brokers (franz-go's ``helpers_test.go`` reads it, and ``KGO_TEST_RECORDS`` bounds
the records each produce/consume test moves), within ``--timeout``, and the cluster stops. The table lists
every top-level test as passed, failed or skipped; a test still running at the timeout is listed as such.
Every test runs by default, ``TestTxnEtl`` (transactions, on both group protocols) among them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from epochkraft.harness.cluster import LocalCluster
from epochkraft.peers.fetch import PeerUnavailable, franz_go_source, franz_go_version


class GoTestResults:
    """Top-level tests' outcomes from ``go test -json`` events: pass, fail, skip, or running (a test that
    started and never ended, as when the timeout stops the binary); subtests count in their parent."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.output: dict[str, list[str]] = defaultdict(list)

    def feed(self, line: str) -> None:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return  # go's own messages (build output) between the events
        test = event.get("Test")
        if not test or "/" in test:
            return
        action = event.get("Action")
        if action == "run":
            self.outcomes[test] = "running"
        elif action in ("pass", "fail", "skip"):
            self.outcomes[test] = action
        elif action == "output":
            self.output[test].append(event.get("Output", ""))

    def failure_lines(self) -> dict[str, list[str]]:
        """The first assertion lines of each test that failed or did not finish."""
        return {
            test: [ln.strip() for ln in self.output[test] if "_test.go:" in ln or "panic" in ln][:3]
            for test, outcome in self.outcomes.items()
            if outcome in ("fail", "running")
        }


def run_go_test(
    source: Path, seeds: str, pattern: str, skip: str, timeout_s: int, records: int, log: Path
) -> dict:
    """Runs the kgo tests; answers {test: outcome} for top-level tests from ``go test -json`` events."""
    env = {
        **os.environ,
        "KGO_SEEDS": seeds,
        "KGO_TEST_RECORDS": str(records),
        "KGO_LOG_LEVEL": "none",
        "GOFLAGS": "-mod=readonly",
    }
    command = ["go", "test", "-json", "-count=1", f"-timeout={timeout_s}s", "-run", pattern]
    command += ["-skip", skip, "./pkg/kgo"] if skip else ["./pkg/kgo"]
    results = GoTestResults()
    with open(log, "w") as log_file:
        proc = subprocess.Popen(
            command, cwd=source, env=env, stdout=subprocess.PIPE, stderr=log_file, text=True
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log_file.write(line)
                results.feed(line)
            proc.wait(timeout=timeout_s + 120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {"outcomes": results.outcomes, "failures": results.failure_lines()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="franz_kgo_tests", description=__doc__)
    parser.add_argument("--run", default=".", help="go test -run pattern (default: every test)")
    parser.add_argument(
        "--skip",
        default="",
        help="go test -skip pattern (default: none)",
    )
    parser.add_argument("--timeout", type=int, default=1200, help="go test timeout, seconds")
    parser.add_argument("--records", type=int, default=20_000, help="KGO_TEST_RECORDS (franz-go: 500000)")
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    parser.add_argument("--log", type=Path, help="keep go test's JSON output here")
    args = parser.parse_args(argv)
    try:
        source = franz_go_source()
    except PeerUnavailable as exc:
        print(f"franz-go unavailable: {exc}")
        return 2
    print(
        f"franz-go {franz_go_version()} pkg/kgo tests against epochkraft (3 brokers), -run {args.run!r} -skip {args.skip!r}"
    )
    with tempfile.TemporaryDirectory(prefix="franz-kgo-") as tmp:
        cluster = LocalCluster(data_dir=Path(tmp) / "epochkraft", brokers=3)
        cluster.start()
        try:
            result = run_go_test(
                source,
                cluster.bootstrap,
                args.run,
                args.skip,
                args.timeout,
                args.records,
                args.log or Path(tmp) / "go.json",
            )
        finally:
            cluster.stop()
            cluster.kill_all()
    outcomes: dict[str, str] = result["outcomes"]
    by_outcome: dict[str, list[str]] = defaultdict(list)
    for test, outcome in sorted(outcomes.items()):
        by_outcome[outcome].append(test)
    for outcome in ("pass", "skip", "fail", "running"):
        tests = by_outcome.get(outcome, [])
        label = "unfinished at the timeout" if outcome == "running" else outcome
        print(f"\n{label} ({len(tests)}):")
        for test in tests:
            print(f"  {test}")
            for line in result["failures"].get(test, []):
                print(f"      {line}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if not by_outcome.get("fail") and not by_outcome.get("running") else 1


if __name__ == "__main__":
    sys.exit(main())
