"""``epochkraft sim``: run the deterministic cluster simulation over many seeds.

``--faults random`` draws any mix of crashes, power losses, disk replacements, controller restarts,
partitions, slow links, held AlterPartitions and replica fetcher failures; ``--faults kafka-14139`` draws random timings of the
KAFKA-14139 fault grammar. ``--unsafe`` turns on the pre-KIP-903 switches (brokers send AlterPartition v2
without epochs and skip the epoch comparison; the controller skips the KIP-841 check). The first
violation is shrunk to the fewest faults that still break an invariant and printed with its trace.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial

from epochkraft.sim.cluster import SCHEDULES, RunResult, run_seed, shrink


def _run(seed: int, unsafe: bool, faults: str) -> tuple[int, str | None, int, int]:
    result = run_seed(seed, unsafe=unsafe, faults=faults)
    return seed, result.violation, result.acked, result.events


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="epochkraft sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--faults", choices=sorted(SCHEDULES), default="random")
    parser.add_argument("--unsafe", action="store_true", help="pre-KIP-903 switches on")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="write a JSON summary here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    seeds = range(args.start, args.start + args.seeds)
    violations: list[tuple[int, str]] = []
    acked = events = run = 0
    work = partial(_run, unsafe=args.unsafe, faults=args.faults)
    with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
        for seed, violation, seed_acked, seed_events in pool.map(work, seeds, chunksize=8):
            run += 1
            acked += seed_acked
            events += seed_events
            if violation is not None:
                violations.append((seed, violation))
    seconds = time.monotonic() - started
    mode = "pre-KIP-903 switches ON" if args.unsafe else "default (KIP-903)"
    print(
        f"{run} seeds ({args.faults} faults, {mode}) in {seconds:.1f}s: {run / seconds:.1f} seeds/s, "
        f"{events / max(run, 1):.0f} events and {acked / max(run, 1):.0f} acknowledged records per seed"
    )
    summary = {
        "seeds": run,
        "seconds": round(seconds, 1),
        "seeds_per_second": round(run / seconds, 2),
        "faults": args.faults,
        "unsafe": args.unsafe,
        "violations": len(violations),
    }
    if violations:
        seed, violation = violations[0]
        print(f"{len(violations)} seeds violated an invariant; first: seed {seed}: {violation}")
        shrunk: RunResult = shrink(run_seed(seed, unsafe=args.unsafe, faults=args.faults), unsafe=args.unsafe)
        print("shrunk schedule:")
        for fault in shrunk.schedule:
            print(f"  {fault.describe()}")
        print("trace (last events):")
        for line in shrunk.trace[-16:]:
            print(f"  {line}")
        summary |= {
            "first_seed": seed,
            "violation": shrunk.violation,
            "shrunk_schedule": [f.describe() for f in shrunk.schedule],
        }
    else:
        print("no invariant violated")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 1 if violations else 0
