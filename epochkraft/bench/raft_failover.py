"""``python -m epochkraft.bench.raft_failover``: how long a controller quorum is without a leader after
the leader is SIGKILLed, by settings, in the deterministic simulation of the Raft core (simulated time,
loopback-like links of 0-1 ms; the real daemons add their event-loop and fsync time on top).

For each settings set and seed: a quorum of ``--voters`` under a steady stream of appends (one every
20 ms to whichever voter leads); at a seeded moment the leader crashes and stays down. Reported: time to
the next leader elected (a voter becomes leader in a higher epoch), and time until an append sent after
the crash is committed (the client retries every 20 ms against whichever voter leads), p50/p99/max.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics

from epochkraft.raft.replication import RaftSettings
from epochkraft.sim.raft_cluster import RaftFault, RaftSimCluster
from epochkraft.sim.world import LinkPolicy

SETTINGS = {
    "kafka defaults (election 1000, fetch 2000)": RaftSettings(
        election_timeout_ms=1000, fetch_timeout_ms=2000, election_backoff_max_ms=1000, fetch_max_wait_ms=500
    ),
    "election 500, fetch 1000": RaftSettings(
        election_timeout_ms=500, fetch_timeout_ms=1000, election_backoff_max_ms=500, fetch_max_wait_ms=250
    ),
    "election 250, fetch 500": RaftSettings(
        election_timeout_ms=250, fetch_timeout_ms=500, election_backoff_max_ms=250, fetch_max_wait_ms=100
    ),
}
LOOPBACK = LinkPolicy(min_delay_ms=0, max_delay_ms=1)


def one_failover(seed: int, settings: RaftSettings, voters: int) -> tuple[int, int]:
    crash_at = 4000 + random.Random(seed).randint(0, 1000)
    cluster = RaftSimCluster(
        seed, [RaftFault(crash_at, "crash", 0, 0, 10**9)], voters=voters, settings=settings, link=LOOPBACK
    )
    for voter in cluster.voters.values():
        cluster.start(voter)
    for fault in cluster.schedule:
        cluster.world.at(fault.at_ms, functools.partial(cluster._apply_fault, fault), "fault")
    cluster.world.after(20, cluster._append_loop)
    cluster._run_until(crash_at)
    old_epoch = max(v.client.epoch for v in cluster.voters.values() if v.client is not None)
    acked_before = len(cluster.acked)
    elected = committed = None
    while cluster.world.now_ms < crash_at + 30_000 and committed is None:
        cluster._run_until(cluster.world.now_ms + 1)
        leader = cluster._current_leader()
        if (
            elected is None
            and leader is not None
            and leader.client is not None
            and leader.client.epoch > old_epoch
        ):
            elected = cluster.world.now_ms - crash_at
        if elected is not None and len(cluster.acked) > acked_before:
            committed = cluster.world.now_ms - crash_at
    if elected is None or committed is None:
        raise RuntimeError(f"seed {seed}: no failover within 30 s")
    return elected, committed


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m epochkraft.bench.raft_failover", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    figures = {}
    print(f"leader crash with {args.voters} voters, {args.seeds} seeds each (simulated ms)")
    print(f"{'settings':44} {'elected p50/p99/max':>22} {'committed p50/p99/max':>24}")
    for name, settings in SETTINGS.items():
        runs = [one_failover(seed, settings, args.voters) for seed in range(args.seeds)]
        elected = [e for e, _ in runs]
        committed = [c for _, c in runs]
        e = [percentile(elected, 0.5), percentile(elected, 0.99), max(elected)]
        c = [percentile(committed, 0.5), percentile(committed, 0.99), max(committed)]
        figures[name] = {
            "elected_ms": e,
            "committed_ms": c,
            "elected_mean_ms": round(statistics.mean(elected)),
        }
        print(f"{name:44} {e[0]:>8}/{e[1]}/{e[2]:<8} {c[0]:>10}/{c[1]}/{c[2]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
