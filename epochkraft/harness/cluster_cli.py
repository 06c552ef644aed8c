"""``epochkraft cluster up|status|kill|restart``: a local cluster of daemon processes on loopback.

``up`` starts a controller (``--controllers 3``: a Raft quorum of three) and brokers, waits until every broker
is RUNNING, prints the bootstrap servers and stops them all on Ctrl-C or SIGTERM; ``up --secure`` secures the cluster
(``epochkraft.security.local_setup``) and prints the client settings. The other commands act on a running cluster through
its state file (``<data-dir>/cluster.json``), from another shell; ``status --bootstrap/--admin`` asks any
running cluster (``epochkraft.harness.remote_status``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from epochkraft.harness.cluster import STATE_FILE, LocalCluster
from epochkraft.harness.processes import SIGNALS, LocalProcess
from epochkraft.security.local_setup import ADMIN_USER

if TYPE_CHECKING:
    from epochkraft.harness.remote_status import AdminCredentials

DEFAULT_DATA_DIR = "data/cluster"
DEFAULT_BASE_PORT = 9092
CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


def _up(args: argparse.Namespace) -> int:
    data = Path(args.data_dir)
    config_dir = Path(args.config_dir) if args.config_dir else CONFIG_DIR
    broker_cfg = config_dir / "broker.properties"
    controller_cfg = config_dir / "controller.properties"
    cluster = LocalCluster(
        data_dir=data,
        brokers=args.brokers,
        base_port=args.base_port,
        metrics_dir=Path(args.metrics_dir) if args.metrics_dir else None,
        broker_config=broker_cfg if broker_cfg.exists() else None,
        controller_config=controller_cfg if controller_cfg.exists() else None,
        admin_ports=True,
        secure=args.secure,
        controllers=args.controllers,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    what = "a controller" if args.controllers == 1 else f"a quorum of {args.controllers} controllers"
    print(f"starting {what} and {args.brokers} brokers (data in {data}) ...", flush=True)
    try:
        cluster.start()
    except Exception as exc:
        cluster.kill_all()
        print(f"epochkraft cluster up: {exc}", file=sys.stderr)
        return 1
    if cluster.quorum:
        for voter in cluster.voters:
            print(
                f"controller {voter}:   {cluster.voter_address(voter)}"
                f"  admin {cluster.admin_url(voter, '/v1/state')}"
                f"  live view {cluster.admin_url(voter, '/view/')}"
            )
    else:
        print(f"controller:        {cluster.controller_address}")
        if cluster.admin_port(0) is not None:
            print(f"live view:         {cluster.admin_url(0, '/view/')}")
    print(f"bootstrap servers: {cluster.client_bootstrap}")
    if (security := cluster.security) is not None:
        print(
            f"admin ports:       HTTPS for super users: log in as {ADMIN_USER} with the password in "
            f"{security.directory / 'admin.password'} (the browser warns of the local CA "
            f"{security.truststore} until it is trusted), or present {security.keystore('admin')}"
        )
        settings = security.client_properties(cluster.client_bootstrap)
        path = security.directory / "client.properties"
        path.write_text(settings)
        path.chmod(0o600)
        print(f"client settings (also in {path}):")
        print("".join(f"    {line}\n" for line in settings.splitlines()), end="")
    for node_id in cluster.nodes:
        print(f"broker {node_id} admin:    {cluster.admin_url(node_id, '/metrics')}")
    print("every broker is RUNNING. Ctrl-C stops the cluster.", flush=True)
    stop.wait()
    print("\nstopping (controlled shutdown of every broker) ...", flush=True)
    # Nodes restarted from another shell have new pids: stop what the state file names, then our children.
    LocalCluster.load(data).stop()
    cluster.kill_all()
    return 0


def _load(args: argparse.Namespace) -> LocalCluster:
    path = Path(args.data_dir)
    if not (path / STATE_FILE).exists():
        raise SystemExit(f"no cluster state in {path} (start one with `epochkraft cluster up`)")
    return LocalCluster.load(path)


def _status(args: argparse.Namespace) -> int:
    if args.bootstrap or args.admin:
        from epochkraft.harness.remote_status import remote_status

        status = remote_status(args.bootstrap, args.admin, _admin_credentials(args))
        print("\n".join(status.lines))
        return 0 if status.reached else 1
    cluster = _load(args)
    print(f"cluster {cluster.cluster_id}   bootstrap {cluster.bootstrap}")
    print(f"{'node':<17}{'pid':>8}  {'alive':<6}{'port':>6}  state")
    procs = {**cluster.controller_procs, **{str(n): p for n, p in cluster.nodes.items()}}
    for name, proc in procs.items():
        state = "-"
        admin = cluster.admin_port(_node_id(name))
        if proc.alive and admin:
            try:
                state = _describe(cluster.admin_get(_node_id(name), "/v1/state"))
            except (OSError, ValueError):
                state = "no answer"
        elif not proc.alive and name.startswith("controller-"):
            state = "down"
        print(f"{name:<17}{proc.pid or 0:>8}  {proc.alive!s:<6}{proc.port:>6}  {state}")
    if cluster.quorum:
        print(_quorum_summary(cluster))
    return 0


def _admin_credentials(args: argparse.Namespace) -> AdminCredentials | None:
    """HTTPS for ``--admin`` when any of its TLS or credential flags is given."""
    if not (args.cacert or args.cert or args.user):
        return None
    if args.user and not args.password_file:
        raise SystemExit("cluster status: --user needs --password-file")
    from epochkraft.harness.remote_status import AdminCredentials

    password = Path(args.password_file).read_text().strip() if args.password_file else ""
    return AdminCredentials(args.cacert, args.cert, args.user, password)


def _node_id(name: str) -> int:
    """The node id behind a state-file name: 0 for the single controller, 3000... for quorum voters."""
    if name == "controller":
        return 0
    return int(name.removeprefix("controller-"))


def _describe(data: dict) -> str:
    """One line of a daemon's /v1/state: a broker's state and epoch, a controller's metadata offset, and
    a quorum voter's role, epoch, leader and high watermark."""
    quorum = data.get("quorum")
    if quorum is not None:
        active = ", active" if quorum.get("active") else ""
        return (
            f"{quorum['role']}{active}, epoch {quorum['epoch']}, leader {quorum['leader']}, "
            f"high watermark {quorum['high_watermark']}, log end {quorum['log_end_offset']}"
        )
    state = data.get("state") or f"metadata offset {data.get('metadata_offset')}"
    if "broker_epoch" in data:
        state += f", epoch {data['broker_epoch']}"
    return state


def _quorum_summary(cluster: LocalCluster) -> str:
    states = cluster.quorum_states()
    up = [s for s in states.values() if s is not None]
    leaders = sorted({s["leader"] for s in up if s["leader"] >= 0})
    active = [v for v, s in states.items() if s is not None and s.get("active")]
    hws = sorted(
        {s["high_watermark"] for s in up}, key=lambda hw: -1 if hw is None else hw
    )  # None: not known yet
    return (
        f"quorum: {len(up)}/{len(states)} voters answering, active controller "
        f"{active[0] if len(active) == 1 else active or 'none'}, leader(s) named {leaders or 'none'}, "
        f"high watermarks {hws}"
    )


def _node(cluster: LocalCluster, name: str) -> LocalProcess:
    try:
        return cluster.node(name)
    except LookupError as exc:
        raise SystemExit(f"epochkraft cluster: {exc}") from None
    except ValueError:
        raise SystemExit(f"epochkraft cluster: no node {name!r}") from None


def _named(node: LocalProcess, asked: str) -> str:
    """``controller-3001 (controller-active)`` when a name was resolved to a node."""
    return node.name if asked in (node.name, node.name.removeprefix("broker-")) else f"{node.name} ({asked})"


def _kill(args: argparse.Namespace) -> int:
    cluster = _load(args)
    node = _node(cluster, args.node)
    node.signal(args.signal)
    print(f"sent SIG{args.signal} to {_named(node, args.node)}")
    return 0


def _restart(args: argparse.Namespace) -> int:
    cluster = _load(args)
    node = _node(cluster, args.node)
    voter = next((v for v, proc in cluster.voters.items() if proc is node), None)
    if voter is not None:
        # a dynamic quorum's voter on a new disk: an observer, then its old key replaced by the new one
        try:
            done = cluster.restart_voter(voter, wipe=args.wipe, power_loss=args.power_loss)
        except RuntimeError as exc:
            cluster.save()
            raise SystemExit(f"epochkraft cluster: {exc}") from None
    else:
        node.restart(wipe=args.wipe, power_loss=args.power_loss)
        done = ""
    cluster.save()
    print(
        f"{_named(node, args.node)} restarted (pid {node.pid}){' with an empty data dir' if args.wipe else ''}"
        f"{' after a simulated power loss' if args.power_loss else ''}"
    )
    if done and done != "restarted":
        print(done)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="epochkraft cluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a controller and brokers, stop them on Ctrl-C")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument(
        "--controllers",
        type=int,
        default=1,
        help="controllers: 1 (default) or a Raft quorum of N voters, node ids 3000.., on ports base-1, "
        "base-2, ... (9091, 9090, 9089); brokers are given every controller's address",
    )
    up.add_argument(
        "--base-port",
        type=int,
        default=DEFAULT_BASE_PORT,
        help="broker 1's port (default 9092, as Kafka's quick start); the controller gets base+1, broker N>1 "
        "base+N, and each daemon's admin HTTP port is its port+100",
    )
    up.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    up.add_argument("--metrics-dir", help="where daemons write their events (for `epochkraft analyze`)")
    up.add_argument("--config-dir", help="directory with broker.properties and controller.properties")
    up.add_argument(
        "--secure",
        action="store_true",
        help="TLS with client certificates between the daemons, SCRAM-SHA-512 over TLS for clients and the "
        "StandardAuthorizer (a local CA, certificates and the admin's password under DATA_DIR/security)",
    )
    for name, help_ in (
        ("status", "show every node"),
        ("kill", "signal a node"),
        ("restart", "restart a node"),
    ):
        cmd = sub.add_parser(name, help=help_)
        cmd.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
        if name == "status":
            cmd.add_argument(
                "--bootstrap",
                help="HOST:PORT,... of brokers of a running cluster (e.g. under Docker Compose): ask them",
            )
            cmd.add_argument(
                "--admin",
                help="HOST:PORT,... of daemons' admin ports: their /v1/state (the controller's lists all)",
            )
            secured = cmd.add_argument_group(
                "a secure cluster (any of these flags: HTTPS to --admin, TLS to --bootstrap; with --user, SASL SCRAM-SHA-512 too)",
                "as `cluster up --secure` writes them: DATA_DIR/security/ca.pem, admin.pem, admin.password",
            )
            secured.add_argument(
                "--cacert",
                metavar="FILE",
                help="the CA the listeners' and admin ports' certificates are from",
            )
            secured.add_argument(
                "--cert", metavar="FILE", help="a client certificate and its key, in one PEM file"
            )
            secured.add_argument(
                "--user",
                help="a user with a SCRAM credential: HTTP Basic to --admin (a super user), SCRAM to --bootstrap",
            )
            secured.add_argument("--password-file", metavar="FILE", help="the --user's password")
        if name != "status":
            cmd.add_argument(
                "node",
                help="broker id, 'controller', or in a quorum 'controller-3001' (a voter) or "
                "'controller-active' (the active controller now; 'controller' means it too)",
            )
        if name == "kill":
            cmd.add_argument("--signal", default="KILL", choices=sorted(SIGNALS), type=str.upper)
        if name == "restart":
            group = cmd.add_mutually_exclusive_group()
            group.add_argument(
                "--wipe", action="store_true", help="start with an empty data dir (disk replaced)"
            )
            group.add_argument(
                "--power-loss", action="store_true", help="cut logs back to their recovery point"
            )
    args = parser.parse_args(argv)
    return {"up": _up, "status": _status, "kill": _kill, "restart": _restart}[args.command](args)
