"""``scripts/peers kafka up|down|status|diff`` and ``scripts/peers kfake up|down|status|diff``: the reference
peers started in the background on loopback, their state kept in a run directory (default ``.peers/``).
``diff`` runs the differential comparison with that peer (``tests/test_differential.py`` for Kafka,
``tests/test_differential_kfake.py``, Kafka, epochkraft and kfake three ways, for kfake), reusing the peers
already up in the run directory and starting the others for the run."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from epochkraft.peers.fetch import PEERS_DIR, PeerUnavailable, kafka_version
from epochkraft.peers.kafka import STATE_FILE as KAFKA_STATE
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.peers.kfake import STATE_FILE as KFAKE_STATE
from epochkraft.peers.kfake import KfakePeer


def _kafka(args: argparse.Namespace) -> int:
    run_dir = Path(args.dir) / "kafka"
    state = run_dir / KAFKA_STATE
    if args.action == "up":
        if state.exists() and any(n.alive for n in KafkaPeer.load(run_dir).all_nodes):
            print(f"a Kafka peer is already running from {run_dir}; `scripts/peers kafka down` first")
            return 1
        peer = KafkaPeer(run_dir=run_dir, brokers=args.brokers, heap_mb=args.heap_mb)
        print(f"starting Apache Kafka {kafka_version()}: 1 controller + {args.brokers} brokers ...")
        peer.start(timeout=args.timeout)
        print(f"bootstrap servers: {peer.bootstrap}")
        print(f"controller:        {peer.controller_address}")
        print(f"cluster id:        {peer.cluster_id}")
        print(f"logs:              {run_dir}/*/server.log")
        return 0
    if not state.exists():
        print(f"no Kafka peer in {run_dir}")
        return 0 if args.action == "down" else 1
    peer = KafkaPeer.load(run_dir)
    if args.action == "down":
        peer.stop(timeout=args.timeout)
        state.unlink()
        print("Kafka peer stopped")
        return 0
    for node in peer.all_nodes:
        print(f"{node.name:<12} 127.0.0.1:{node.port:<6} pid {node.pid:<8} {'up' if node.alive else 'DOWN'}")
    print(f"bootstrap servers: {peer.bootstrap}")
    return 0 if all(n.alive for n in peer.all_nodes) else 1


def _kfake(args: argparse.Namespace) -> int:
    run_dir = Path(args.dir) / "kfake"
    state = run_dir / KFAKE_STATE
    if args.action == "up":
        if state.exists() and KfakePeer.load(run_dir).alive:
            print(f"a kfake peer is already running from {run_dir}; `scripts/peers kfake down` first")
            return 1
        peer = KfakePeer(run_dir=run_dir, brokers=args.brokers)
        peer.start(timeout=args.timeout)
        print(f"bootstrap servers: {peer.bootstrap}")
        return 0
    if not state.exists():
        print(f"no kfake peer in {run_dir}")
        return 0 if args.action == "down" else 1
    peer = KfakePeer.load(run_dir)
    if args.action == "down":
        peer.stop()
        state.unlink()
        print("kfake peer stopped")
        return 0
    print(f"kfake pid {peer.pid} {'up' if peer.alive else 'DOWN'}; bootstrap servers: {peer.bootstrap}")
    return 0 if peer.alive else 1


DIFF_MODULES = {"kafka": "tests/test_differential.py", "kfake": "tests/test_differential_kfake.py"}


def _diff(args: argparse.Namespace) -> int:
    root = PEERS_DIR.parent
    if not (root / DIFF_MODULES[args.peer]).exists():
        print(f"no {DIFF_MODULES[args.peer]} in {root}: `diff` runs from a checkout", file=sys.stderr)
        return 2
    env = dict(os.environ)
    run_dir = Path(args.dir).resolve()
    if (run_dir / "kafka" / KAFKA_STATE).exists() and all(
        n.alive for n in KafkaPeer.load(run_dir / "kafka").all_nodes
    ):
        env["EPOCHKRAFT_KAFKA_PEER"] = str(run_dir / "kafka")
    if (run_dir / "kfake" / KFAKE_STATE).exists() and KfakePeer.load(run_dir / "kfake").alive:
        env["EPOCHKRAFT_KFAKE_PEER"] = str(run_dir / "kfake")
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", DIFF_MODULES[args.peer]]
    return subprocess.run(command, cwd=root, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peers", description=__doc__)
    parser.add_argument("peer", choices=["kafka", "kfake"])
    parser.add_argument("action", choices=["up", "down", "status", "diff"])
    parser.add_argument("--dir", default=".peers", help="run directory (state, logs, data)")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--heap-mb", type=int, default=512, help="each Kafka JVM's heap")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for up/down")
    args = parser.parse_args(argv)
    try:
        if args.action == "diff":
            return _diff(args)
        return _kafka(args) if args.peer == "kafka" else _kfake(args)
    except PeerUnavailable as exc:
        print(f"peer unavailable: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
