"""``epochkraft chaos``: a workload plus seeded faults against a local cluster (``--controllers 3``: with a
Raft quorum of controllers and its faults), judged by the checker; ``--workload txn``: a transactional
consume-transform-produce loop judged read_committed;
``--scenario kafka-14139`` stages the KIP-903 race twice (unsafe switch on, then the default)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from epochkraft.chaos.group_heal import PROTOCOLS
from epochkraft.chaos.runner import FAULTS, QUORUM_FAULTS, WORKLOADS, WorkDirBusy, start_clean
from epochkraft.chaos.txn_workload import SABOTAGES

T = TypeVar("T")


def _run(run: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(run)``, with SIGTERM cancelling it as Ctrl-C does: the run's finally blocks then stop the
    cluster it started (its daemons would outlive it)."""

    async def until_terminated() -> T:
        task = asyncio.ensure_future(run)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await task

    try:
        return asyncio.run(until_terminated())
    except asyncio.CancelledError:
        raise SystemExit(128 + signal.SIGTERM) from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="epochkraft chaos", description=__doc__)
    parser.add_argument("--scenario", choices=["kafka-14139"], help="run a staged scenario instead of faults")
    parser.add_argument(
        "--faults",
        help=f"comma-separated, from: {', '.join(FAULTS)}; with --controllers > 1 also "
        f"{', '.join(QUORUM_FAULTS)} (default: every fault the cluster has; elr needs --brokers 3 or more)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, help="number of faults to apply (default: one of each)")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument(
        "--controllers",
        type=int,
        default=1,
        help="1 (default) or a Raft quorum of N controllers, each reached through fault proxies by the brokers "
        "and by the other controllers",
    )
    parser.add_argument(
        "--static-quorum",
        action="store_true",
        help="with --controllers > 1: a static quorum (--quorum-voters, kraft.version 0) rather than a "
        "dynamic one; controller-disk-loss is left out (a static quorum cannot replace a voter's disk)",
    )
    parser.add_argument("--rate", type=int, default=300, help="produce rate, messages per second")
    parser.add_argument(
        "--work-dir",
        default="chaos-run",
        help="cluster data, logs, metrics and the report; an earlier run's data there is removed first",
    )
    parser.add_argument("--report", help="JSON report path (default <work-dir>/report.json)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--retention",
        action="store_true",
        help="small segments (4 KiB) and retention.bytes 8 KiB: the checker counts what retention removed",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="a secured cluster as `cluster up --secure`: mTLS between the daemons, SCRAM over TLS for the "
        "workload, the authorizer on",
    )
    parser.add_argument(
        "--group-protocol",
        choices=PROTOCOLS,
        default="classic",
        help="the workload's consumer group protocol: classic, or consumer (KIP-848, group.protocol=consumer); "
        "either way the group must own every partition again after each fault",
    )
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="plain",
        help="plain (default): an idempotent producer and a consumer group; txn: consume-transform-produce "
        "in transactions from chaos-in to chaos (some aborted on purpose), the output read read_committed",
    )
    parser.add_argument(
        "--txn-sabotage",
        choices=SABOTAGES,
        help="with --workload txn, break it on purpose to see the checker fail: duplicate (inputs committed "
        "twice), read-uncommitted (the output read without read_committed)",
    )
    args = parser.parse_args(argv)
    if args.txn_sabotage and args.workload != "txn":
        parser.error("--txn-sabotage needs --workload txn")
    if args.retention and args.workload == "txn":  # its checker reads the whole output
        parser.error("--retention is for the plain workload")
    work = Path(args.work_dir)
    report_path = Path(args.report) if args.report else work / "report.json"
    started = time.monotonic()
    try:
        for run_dir in [work / "pre-kip903", work / "kip903"] if args.scenario else [work]:
            start_clean(run_dir)
    except WorkDirBusy as exc:
        print(f"epochkraft chaos: {exc}", file=sys.stderr)
        return 2
    if args.scenario == "kafka-14139":
        from epochkraft.chaos.scenarios import run_kafka_14139

        unsafe = _run(run_kafka_14139(work / "pre-kip903", unsafe=True))
        safe = _run(run_kafka_14139(work / "kip903", unsafe=False))
        print("\n== brokers with unsafe.pre.kip903.mode=true ==\n" + unsafe.table())
        print("\n== default (KIP-903) ==\n" + safe.table())
        data = {
            "scenario": "kafka-14139",
            "pre_kip903": unsafe.to_json(),
            "kip903": safe.to_json(),
            "seconds": round(time.monotonic() - started, 1),
        }
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(data, indent=2))
        shown = unsafe.lost and not safe.lost and safe.rejected_alter_partitions.get("INELIGIBLE_REPLICA")
        print(f"\nreport: {report_path}")
        print(
            "race reproduced: pre-KIP-903 lost acknowledged records, KIP-903 rejected the stale replica"
            if shown
            else "race NOT reproduced as expected"
        )
        return 0 if shown else 1
    # the elr fault needs three replicas of a partition
    known = tuple(f for f in FAULTS if f != "elr" or args.brokers >= 3)
    known += QUORUM_FAULTS if args.controllers > 1 else ()
    faults = [f.strip() for f in (args.faults or ",".join(known)).split(",") if f.strip()]
    unknown = [f for f in faults if f not in known]
    if unknown:
        print(f"epochkraft chaos: unknown faults {unknown}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    if args.controllers > 1 and args.secure:
        print("epochkraft chaos: --secure runs one controller (no quorum with --secure yet)", file=sys.stderr)
        return 2
    from epochkraft.chaos.runner import run_chaos

    report = _run(
        run_chaos(
            work,
            faults,
            seed=args.seed,
            rounds=args.rounds,
            brokers=args.brokers,
            rate=args.rate,
            retention=args.retention,
            secure=args.secure,
            controllers=args.controllers,
            static_quorum=args.static_quorum,
            progress=not args.no_progress,
            group_protocol=args.group_protocol,
            workload_kind=args.workload,
            sabotage=args.txn_sabotage,
        )
    )
    print("\nfaults applied:\n  " + "\n  ".join(report.faults))
    print("\n" + report.table())
    data = report.to_json() | {"seed": args.seed, "seconds": round(time.monotonic() - started, 1)}
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(data, indent=2))
    print(f"\nreport: {report_path}")
    return 0 if report.ok else 1
