"""``epochkraft sim``: run the deterministic cluster simulation over many seeds.

``--faults random`` draws any mix of crashes, power losses, disk replacements, controller restarts,
partitions, slow links, held AlterPartitions and replica fetcher failures; ``--faults kafka-14139`` draws random timings of the
KAFKA-14139 fault grammar. ``--unsafe`` turns on the pre-KIP-903 switches (brokers send AlterPartition v2
without epochs and skip the epoch comparison; the controller skips the KIP-841 check).

``--faults raft``, ``raft-churn``, ``raft-snapshots`` and ``raft-reconfig`` simulate a quorum of ``--voters``
controllers instead (the Raft core in ``epochkraft/raft``): crashes, partitions, lossy links, resignations,
leaders crashing soon after their election, voters dropping their logs below snapshots and followers
installing the leader's, or (raft-reconfig) a
dynamic quorum whose controllers lose their disks, come back as observers with new directory ids and are
removed and added back by an operator, among one-way and pairwise partitions and restarts at any step;
there ``--unsafe`` makes the leader commit entries of an earlier epoch by counting replicas (the Raft
paper's figure 8), or, with raft-reconfig, brings a controller that lost its disk back as its old voter
(what a static quorum does with a new disk). The first
violation is shrunk to the fewest faults that still break an invariant and printed with its trace.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial

from epochkraft.raft import replication as raft_client
from epochkraft.sim import raft_cluster
from epochkraft.sim.cluster import SCHEDULES, run_seed, shrink
from epochkraft.sim.raft_cluster import RAFT_SCHEDULES, run_raft_seed, shrink_raft

DISK_LOSS_SCHEDULES = ("raft-reconfig",)


def _set_raft_unsafe(faults: str, unsafe: bool) -> None:
    """--unsafe for a quorum: come back as the old voter after losing the disk (raft-reconfig); commit by
    counting replicas (the other schedules)."""
    raft_cluster.UNSAFE_REJOIN_WITH_OLD_KEY_FOR_TESTS = unsafe and faults == "raft-reconfig"
    raft_client.UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS = unsafe and faults not in DISK_LOSS_SCHEDULES


def _run(seed: int, unsafe: bool, faults: str, voters: int) -> tuple[int, str | None, int, int]:
    if faults in RAFT_SCHEDULES:
        _set_raft_unsafe(faults, unsafe)
        raft_result = run_raft_seed(seed, faults=faults, voters=voters)
        return seed, raft_result.violation, raft_result.acked, raft_result.events
    result = run_seed(seed, unsafe=unsafe, faults=faults)
    return seed, result.violation, result.acked, result.events


def _shrunk(seed: int, unsafe: bool, faults: str, voters: int) -> tuple[str | None, list[str], list[str]]:
    if faults in RAFT_SCHEDULES:
        _set_raft_unsafe(faults, unsafe)
        raft_result = shrink_raft(run_raft_seed(seed, faults=faults, voters=voters), voters=voters)
        return raft_result.violation, [f.describe() for f in raft_result.schedule], raft_result.trace
    result = shrink(run_seed(seed, unsafe=unsafe, faults=faults), unsafe=unsafe)
    return result.violation, [f.describe() for f in result.schedule], result.trace


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="epochkraft sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--faults", choices=sorted(SCHEDULES) + sorted(RAFT_SCHEDULES), default="random")
    parser.add_argument(
        "--unsafe", action="store_true", help="pre-KIP-903 switches on (raft: commit by counting replicas)"
    )
    parser.add_argument("--voters", type=int, default=5, help="controllers in the quorum (raft faults)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="write a JSON summary here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    seeds = range(args.start, args.start + args.seeds)
    violations: list[tuple[int, str]] = []
    acked = events = run = 0
    work = partial(_run, unsafe=args.unsafe, faults=args.faults, voters=args.voters)
    with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
        for seed, violation, seed_acked, seed_events in pool.map(work, seeds, chunksize=8):
            run += 1
            acked += seed_acked
            events += seed_events
            if violation is not None:
                violations.append((seed, violation))
    seconds = time.monotonic() - started
    if args.faults in RAFT_SCHEDULES:
        if args.faults == "raft-reconfig":
            rule = (
                "a controller on a new disk comes back as its old voter"
                if args.unsafe
                else "a controller on a new disk is an observer until added back"
            )
        else:
            rule = "figure-8 commit rule ON" if args.unsafe else "Kafka's commit rule"
        mode = f"{args.voters} voters, {rule}"
    else:
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
        shrunk_violation, shrunk_schedule, trace = _shrunk(seed, args.unsafe, args.faults, args.voters)
        print("shrunk schedule:")
        for fault in shrunk_schedule:
            print(f"  {fault}")
        print("trace (last events):")
        for line in trace[-16:]:
            print(f"  {line}")
        summary |= {"first_seed": seed, "violation": shrunk_violation, "shrunk_schedule": shrunk_schedule}
    else:
        print("no invariant violated")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 1 if violations else 0
