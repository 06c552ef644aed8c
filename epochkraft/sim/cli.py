"""``epochkraft sim``: run the deterministic cluster simulation over many seeds.

``--faults random`` draws any mix of crashes, power losses, disk replacements, controller restarts,
partitions, slow links, held AlterPartitions and replica fetcher failures; ``--faults kafka-14139`` draws random timings of the
KAFKA-14139 fault grammar. ``--unsafe`` turns on the pre-KIP-903 switches (brokers send AlterPartition v2
without epochs and skip the epoch comparison; the controller skips the KIP-841 check).

``--faults quorum`` runs the cluster against three controllers in a Raft quorum (the daemon's Raft core
and ControllerQuorum each), with the random broker faults and controllers crashed or cut off from each
other or from everyone; ``--controllers N`` runs any cluster schedule against N controllers.

``--faults elr`` runs every schedule (crashes, power losses, controlled shutdowns, brokers cut off from
the controller or from each other, on three replicas with min.insync.replicas 2) twice, with eligible
leader replicas (KIP-966) on and off, and prints the partition's unavailability side by side: the time
with no leader and the time under min ISR; there ``--unsafe`` keeps a broker back from an unclean
shutdown in the ELR.

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

from epochkraft.controller import partition_change
from epochkraft.raft import replication as raft_client
from epochkraft.sim import raft_cluster
from epochkraft.sim.cluster import SCHEDULES, RunResult, run_seed, shrink
from epochkraft.sim.raft_cluster import RAFT_SCHEDULES, run_raft_seed, shrink_raft

DISK_LOSS_SCHEDULES = ("raft-reconfig",)


def _set_raft_unsafe(faults: str, unsafe: bool) -> None:
    """--unsafe for a quorum: come back as the old voter after losing the disk (raft-reconfig); commit by
    counting replicas (the other schedules)."""
    raft_cluster.UNSAFE_REJOIN_WITH_OLD_KEY_FOR_TESTS = unsafe and faults == "raft-reconfig"
    raft_client.UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS = unsafe and faults not in DISK_LOSS_SCHEDULES


def _set_elr_unsafe(unsafe: bool) -> None:
    """--unsafe for the elr faults: a broker back from an unclean shutdown stays in the ELR."""
    partition_change.UNSAFE_KEEP_UNCLEAN_SHUTDOWN_IN_ELR_FOR_TESTS = unsafe


def _run_elr(seed: int, unsafe: bool, controllers: int | None) -> tuple[int, RunResult, RunResult]:
    """One schedule twice: ELR on, then off (the switch, when set, only changes the first)."""
    _set_elr_unsafe(unsafe)
    on = run_seed(seed, faults="elr", elr=True, controllers=controllers)
    off = run_seed(seed, faults="elr", elr=False, controllers=controllers)
    on.trace = off.trace = []  # not sent back from the worker: only the first violation's is printed
    return seed, on, off


def _run(
    seed: int, unsafe: bool, faults: str, voters: int, controllers: int | None
) -> tuple[int, str | None, int, int]:
    if faults in RAFT_SCHEDULES:
        _set_raft_unsafe(faults, unsafe)
        raft_result = run_raft_seed(seed, faults=faults, voters=voters)
        return seed, raft_result.violation, raft_result.acked, raft_result.events
    result = run_seed(seed, unsafe=unsafe, faults=faults, controllers=controllers)
    return seed, result.violation, result.acked, result.events


def _shrunk(
    seed: int, unsafe: bool, faults: str, voters: int, controllers: int | None
) -> tuple[str | None, list[str], list[str]]:
    if faults in RAFT_SCHEDULES:
        _set_raft_unsafe(faults, unsafe)
        raft_result = shrink_raft(run_raft_seed(seed, faults=faults, voters=voters), voters=voters)
        return raft_result.violation, [f.describe() for f in raft_result.schedule], raft_result.trace
    first = run_seed(seed, unsafe=unsafe, faults=faults, controllers=controllers)
    result = shrink(first, unsafe=unsafe, faults=faults, controllers=controllers)
    return result.violation, [f.describe() for f in result.schedule], result.trace


def _elr_table(results: list[tuple[int, RunResult, RunResult]]) -> list[str]:
    """The side-by-side figures of ELR on and off over the same schedules, as a Markdown table."""
    n = max(len(results), 1)
    on = [r[1] for r in results]
    off = [r[2] for r in results]

    def row(name: str, value: object) -> str:
        return f"| {name} | {value(on) if callable(value) else value} | {value(off) if callable(value) else value} |"

    return [
        "|  | ELR on (eligible.leader.replicas.version=1) | ELR off (=0, KIP-903's rule) |",
        "|---|---|---|",
        row(
            "seeds with an invariant violated (acknowledged record lost, ...)",
            lambda rs: sum(r.violation is not None for r in rs),
        ),
        row("acknowledged records per seed", lambda rs: f"{sum(r.acked for r in rs) / n:.0f}"),
        row(
            "acknowledged records lost as Kafka tolerates (power loss of every holder; KIP-903's exception)",
            lambda rs: sum(r.lost_without_fsync for r in rs),
        ),
        row("time with no leader, mean per seed (ms)", lambda rs: f"{sum(r.offline_ms for r in rs) / n:.0f}"),
        row("time with no leader, all seeds (s)", lambda rs: f"{sum(r.offline_ms for r in rs) / 1000:.1f}"),
        row("seeds with any time with no leader", lambda rs: sum(r.offline_ms > 0 for r in rs)),
        row("worst seed's time with no leader (ms)", lambda rs: max((r.offline_ms for r in rs), default=0)),
        row(
            "time under min ISR, mean per seed (ms)",
            lambda rs: f"{sum(r.under_min_isr_ms for r in rs) / n:.0f}",
        ),
        row(
            "time under min ISR, all seeds (s)",
            lambda rs: f"{sum(r.under_min_isr_ms for r in rs) / 1000:.1f}",
        ),
        f"| seeds with less time with no leader than the other setting | "
        f"{sum(a.offline_ms < b.offline_ms for a, b in zip(on, off, strict=True))} | "
        f"{sum(b.offline_ms < a.offline_ms for a, b in zip(on, off, strict=True))} |",
    ]


def _main_elr(args: argparse.Namespace) -> int:
    """--faults elr: every schedule with ELR on and off, the unavailability side by side, the first
    violation (of either) shrunk."""
    started = time.monotonic()
    seeds = range(args.start, args.start + args.seeds)
    with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
        work = partial(_run_elr, unsafe=args.unsafe, controllers=args.controllers)
        results = list(pool.map(work, seeds, chunksize=4))
    seconds = time.monotonic() - started
    rule = (
        "a broker back from an unclean shutdown kept in the ELR (UNSAFE)" if args.unsafe else "Kafka's rules"
    )
    print(
        f"{len(results)} seeds (elr faults: RF 3, min.insync.replicas 2; {rule}), each with ELR on and off, "
        f"in {seconds:.1f}s"
    )
    for line in _elr_table(results):
        print(line)
    violations = [(seed, on, off) for seed, on, off in results if on.violation or off.violation]
    summary: dict[str, object] = {
        "seeds": len(results),
        "seconds": round(seconds, 1),
        "faults": "elr",
        "unsafe": args.unsafe,
        "violations": len(violations),
        "elr_on": _figures([r[1] for r in results]),
        "elr_off": _figures([r[2] for r in results]),
    }
    if violations:
        seed, on, _off = violations[0]
        elr = on.violation is not None
        print(
            f"{len(violations)} seeds violated an invariant; first: seed {seed} (ELR {'on' if elr else 'off'})"
        )
        _set_elr_unsafe(args.unsafe)
        first = run_seed(seed, faults="elr", elr=elr, controllers=args.controllers)
        shrunk = shrink(first, unsafe=False, faults="elr", elr=elr, controllers=args.controllers)
        print(f"shrunk to: {shrunk.violation}")
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


def _figures(results: list[RunResult]) -> dict[str, int]:
    return {
        "violations": sum(r.violation is not None for r in results),
        "acked": sum(r.acked for r in results),
        "offline_ms": sum(r.offline_ms for r in results),
        "under_min_isr_ms": sum(r.under_min_isr_ms for r in results),
        "lost_without_fsync": sum(r.lost_without_fsync for r in results),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="epochkraft sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--faults", choices=sorted(SCHEDULES) + sorted(RAFT_SCHEDULES), default="random")
    parser.add_argument(
        "--unsafe",
        action="store_true",
        help="pre-KIP-903 switches on (raft: commit by counting replicas; elr: keep a broker back from an "
        "unclean shutdown in the ELR)",
    )
    parser.add_argument("--voters", type=int, default=5, help="controllers in the quorum (raft faults)")
    parser.add_argument(
        "--controllers",
        type=int,
        help="the cluster's controllers: 1, one with its own log; more, a Raft quorum "
        "(default: 3 for --faults quorum, 1 otherwise)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="write a JSON summary here")
    args = parser.parse_args(argv)
    if args.controllers is not None and args.controllers < (2 if args.faults == "quorum" else 1):
        parser.error(
            f"--faults {args.faults} needs --controllers {2 if args.faults == 'quorum' else 1} or more"
        )
    if args.faults == "elr":
        return _main_elr(args)
    started = time.monotonic()
    seeds = range(args.start, args.start + args.seeds)
    violations: list[tuple[int, str]] = []
    acked = events = run = 0
    work = partial(
        _run, unsafe=args.unsafe, faults=args.faults, voters=args.voters, controllers=args.controllers
    )
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
        mode = "pre-KIP-903 switches ON" if args.unsafe else "default (KIP-903, ELR on)"
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
        shrunk_violation, shrunk_schedule, trace = _shrunk(
            seed, args.unsafe, args.faults, args.voters, args.controllers
        )
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
