"""A local cluster: one controller, or a Raft quorum of controllers, and N brokers as processes on loopback,
described in a state file (``<data-dir>/cluster.json``) so ``epochkraft cluster status|kill|restart`` can act
on it from another shell.

Ports, as Kafka's quick start (base_port 9092): broker 1 listens on ``base_port``, the controller on
``base_port + 1``, broker N > 1 on ``base_port + N`` (9092, 9093, then 9094, 9095...); each daemon's admin
HTTP port is its Kafka port + 100. Port 0 picks free ports (tests).

With ``controllers > 1`` the controllers are voters of a Raft quorum, node ids 3000, 3001, ... (apart from
the brokers' 1..N), named ``controller-3000`` and so on; voter i listens below broker 1's port, on
``base_port - 1 - i`` (9091, 9090, 9089), its admin port again + 100. The quorum is dynamic (KIP-853): each
voter's data dir is formatted once before the first start (``--format-only --initial-controllers``: every
voter's id, address and a directory id picked up front; the daemons run without it) and finds the others through ``controller.quorum.bootstrap.servers``; ``static_quorum``
runs ``--quorum-voters`` instead. A voter's address must be known before it starts, so with port 0 free
ports are picked up front. Every broker is given every controller's address and follows the active one.

A voter restarted on a wiped disk (``restart_voter(wipe=True)``) is formatted with no initial controllers:
it gets a new directory id and comes back an observer; the cluster then replaces its old key in the voter
set with the new one, as an operator would (RemoveRaftVoter, then AddRaftVoter once it has caught up:
harness/quorum_ops.py).
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochkraft.harness.ports import free_port
from epochkraft.harness.processes import LocalProcess
from epochkraft.security.local_setup import CLIENT_LISTENER, LocalSecurity

STATE_FILE = "cluster.json"
FIRST_VOTER_ID = 3000  # quorum controllers' node ids start here, apart from the brokers' 1..N
ACTIVE = "controller-active"  # names the quorum's current leader in node()
STATIC_DISK_LOSS = (
    "a static quorum (controller.quorum.voters, kraft.version 0) cannot replace a voter's disk: the voter "
    "would come back with an empty log and vote at once, and the voter set cannot change (no RemoveRaftVoter "
    "or AddRaftVoter before kraft.version 1); Kafka has no safe way either. Use a dynamic quorum."
)


def voter_ids(controllers: int) -> list[int]:
    return [FIRST_VOTER_ID + i for i in range(controllers)] if controllers > 1 else []


@dataclass
class LocalCluster:
    data_dir: Path
    brokers: int = 3
    base_port: int = 0
    metrics_dir: Path | None = None
    broker_config: Path | None = None
    controller_config: Path | None = None
    session_timeout_ms: int | None = None
    cluster_id: str = field(default_factory=lambda: f"epochkraft-{uuid.uuid4().hex[:12]}")
    admin_ports: bool = False
    extra_broker_args: list[str] = field(default_factory=list)
    controller_for: dict[int, str] = field(default_factory=dict)  # broker -> controller address(es) (proxies)
    secure: bool = False  # mTLS between daemons, SCRAM over TLS for clients, the authorizer on
    controllers: int = 1  # > 1: a Raft quorum of controllers (voters FIRST_VOTER_ID, ...)
    static_quorum: bool = False  # a quorum of controller.quorum.voters (kraft.version 0), not a dynamic one
    directory_ids: dict[int, str] = field(default_factory=dict)  # each voter's first disk (Kafka's uuid text)
    # (voter, other voter) -> the address ``voter`` reaches the other at (a proxy, to cut the link)
    voter_address_for: dict[tuple[int, int], str] = field(default_factory=dict)
    controller: LocalProcess | None = None
    voters: dict[int, LocalProcess] = field(default_factory=dict)  # quorum controllers by node id
    nodes: dict[int, LocalProcess] = field(default_factory=dict)
    _free_admin: dict[int, int] = field(default_factory=dict, repr=False)
    _fixed_ports: dict[int, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.controllers > 1:
            self.admin_ports = True  # the quorum's state (role, leader, high watermark) is read there

    @property
    def quorum(self) -> bool:
        return self.controllers > 1

    def _offset(self, node_id: int) -> int:
        """A daemon's port above base_port: broker 1 on base_port itself, the controller (0) next, quorum
        voter i below base_port."""
        if node_id >= FIRST_VOTER_ID:
            return -1 - (node_id - FIRST_VOTER_ID)
        return {0: 1, 1: 0}.get(node_id, node_id)

    def _port(self, node_id: int) -> int:
        """Every daemon's port is fixed before it first starts (voters name each other's; a restarted daemon
        binds its old port again), from below the ephemeral range where no client socket can take it."""
        if self.base_port:
            return self.base_port + self._offset(node_id)
        if node_id not in self._fixed_ports:
            self._fixed_ports[node_id] = free_port()
        return self._fixed_ports[node_id]

    def _admin(self, node_id: int) -> int | None:
        """Admin HTTP port: the daemon's Kafka port + 100, or a free port when ports are picked freely."""
        if not self.admin_ports:
            return None
        if self.base_port:
            return self.base_port + 100 + self._offset(node_id)
        if node_id not in self._free_admin:
            self._free_admin[node_id] = free_port()
        return self._free_admin[node_id]

    @property
    def _admin_secure(self) -> list[str]:
        """A secure cluster's admin ports serve HTTPS to super users only (metrics/admin_auth.py)."""
        return ["--admin-secure"] if self.secure else []

    def admin_url(self, node_id: int, path: str) -> str:
        """``path`` on the admin port of ``node_id`` (0: the controller; 3000...: a quorum voter)."""
        scheme = "https" if self.secure else "http"
        return f"{scheme}://127.0.0.1:{self._admin(node_id)}{path}"

    def admin_get(self, node_id: int, path: str, timeout: float = 2.0) -> dict[str, Any]:
        """The JSON ``path`` answers on ``node_id``'s admin port; on a secure cluster over TLS with the
        admin's certificate. OSError or ValueError when it does not answer."""
        security = self.security
        context = security.admin_tls() if security is not None else None
        with urllib.request.urlopen(
            self.admin_url(node_id, path), timeout=timeout, context=context
        ) as answer:
            return dict(json.loads(answer.read()))

    @property
    def security(self) -> LocalSecurity | None:
        if not self.secure:
            return None
        return LocalSecurity.create(self.data_dir / "security", self.brokers)

    def voter_port(self, voter: int) -> int:
        """Quorum voter ``voter``'s Kafka port, fixed before it starts."""
        return self._port(voter)

    def voter_address(self, voter: int) -> str:
        return f"127.0.0.1:{self.voter_port(voter)}"

    def directory_id(self, voter: int) -> str:
        """The directory id voter ``voter``'s first disk is formatted with (--initial-controllers)."""
        if voter not in self.directory_ids:
            from epochkraft.controller.storage import kafka_uuid, random_directory_id

            self.directory_ids[voter] = kafka_uuid(random_directory_id())
        return self.directory_ids[voter]

    def restart_voter(
        self, voter: int, *, wipe: bool = False, power_loss: bool = False, timeout: float = 60.0
    ) -> str:
        """Restarts a quorum voter; on a wiped disk of a dynamic quorum it comes back an observer with a new
        directory id, and its old key in the voter set is replaced by the new one (RemoveRaftVoter, then
        AddRaftVoter). Returns what was done. RuntimeError, before anything is done, for a wiped disk in a
        static quorum (STATIC_DISK_LOSS)."""
        if wipe and self.static_quorum:
            raise RuntimeError(f"controller-{voter} not restarted: {STATIC_DISK_LOSS}")
        proc = self.voters[voter]
        proc.restart(wipe=wipe, power_loss=power_loss)
        if not wipe:
            return "restarted"
        from epochkraft.harness.quorum_ops import replace_voter

        return replace_voter(self, voter, timeout)

    def _controller_args(self, node_id: int, data: Path) -> list[str]:
        args = [
            "controller",
            "--listen",
            f"127.0.0.1:{self._port(node_id)}",
            "--cluster-id",
            self.cluster_id,
            "--data-dir",
            str(data),
        ]
        if self.quorum and self.static_quorum:
            voters = ",".join(
                f"{v}@{self.voter_address_for.get((node_id, v), self.voter_address(v))}"
                for v in voter_ids(self.controllers)
            )
            args += ["--node-id", str(node_id), "--quorum-voters", voters]
        elif self.quorum:
            bootstrap = ",".join(
                self.voter_address_for.get((node_id, v), self.voter_address(v))
                for v in voter_ids(self.controllers)
            )
            args += [
                "--node-id",
                str(node_id),
                "--override",
                f"controller.quorum.bootstrap.servers={bootstrap}",
            ]
            for (source, target), address in sorted(self.voter_address_for.items()):
                if source == node_id:
                    args += ["--voter-address", f"{target}@{address}"]
        if self.session_timeout_ms is not None:
            args += ["--session-timeout-ms", str(self.session_timeout_ms)]
        if self.metrics_dir is not None:
            args += ["--metrics-dir", str(self.metrics_dir)]
        if self.controller_config is not None:
            args += ["--config", str(self.controller_config)]
        if (admin := self._admin(node_id)) is not None:
            args += ["--admin-port", str(admin), *self._admin_secure]
            brokers = ",".join(f"{b}=127.0.0.1:{self._admin(b)}" for b in range(1, self.brokers + 1))
            args += ["--view-broker-admin", brokers]
        if (security := self.security) is not None:
            args += security.controller_args()
        return args

    def initial_controllers(self) -> str:
        """--initial-controllers of a dynamic quorum: every voter's id, address and first directory id."""
        return ",".join(
            f"{v}@{self.voter_address(v)}:{self.directory_id(v)}" for v in voter_ids(self.controllers)
        )

    def format_voter(self, proc: LocalProcess) -> None:
        """Formats a dynamic quorum voter's data dir once, before its first start, as kafka-storage format
        does (``epochkraft controller --format-only --initial-controllers ...``). Its daemon is started
        without --initial-controllers, so a restart on a wiped disk comes back an observer with a new
        directory id, never as the voter it was."""
        import contextlib
        import io

        from epochkraft.server.controller_daemon import main as controller_main

        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = controller_main(
                [*proc.args[1:], "--initial-controllers", self.initial_controllers(), "--format-only"]
            )
        if code != 0:
            raise RuntimeError(f"formatting {proc.name}'s data dir failed ({code}): {out.getvalue()}")

    def _controller_process(self) -> LocalProcess:
        data = self.data_dir / "controller"
        return LocalProcess(
            "controller", self._controller_args(0, data), self.data_dir / "logs" / "controller.log", data
        )

    def _voter_process(self, voter: int) -> LocalProcess:
        name = f"controller-{voter}"
        data = self.data_dir / name
        return LocalProcess(
            name, self._controller_args(voter, data), self.data_dir / "logs" / f"{name}.log", data
        )

    @property
    def controller_addresses(self) -> str:
        """Every controller's address, as brokers are given it (comma-separated for a quorum)."""
        if self.quorum:
            return ",".join(self.voter_address(v) for v in voter_ids(self.controllers))
        assert self.controller is not None
        return f"127.0.0.1:{self.controller.port}"

    def _broker_process(self, node_id: int) -> LocalProcess:
        data = self.data_dir / f"broker-{node_id}"
        security = self.security
        if security is None:
            listen = ["--listen", f"127.0.0.1:{self._port(node_id)}"]
        else:  # the client listener on the quick-start port, the inter-broker one on any free port
            listen = security.broker_args(node_id, self._port(node_id), free_port())
        args = [
            "broker",
            "--node-id",
            str(node_id),
            *listen,
            "--controller",
            self.controller_for.get(node_id, self.controller_addresses),
            "--data-dir",
            str(data),
        ]
        if self.metrics_dir is not None:
            args += ["--metrics-dir", str(self.metrics_dir)]
        if self.broker_config is not None:
            args += ["--config", str(self.broker_config)]
        if (admin := self._admin(node_id)) is not None:
            args += ["--admin-port", str(admin), *self._admin_secure]
        args += self.extra_broker_args
        return LocalProcess(f"broker-{node_id}", args, self.data_dir / "logs" / f"broker-{node_id}.log", data)

    def start(self, timeout: float = 60.0) -> None:
        """Every process, or none: a cluster that fails to start stops what it had started."""
        try:
            self.start_controller(timeout)
            self.start_brokers(timeout)
        except BaseException:
            self.kill_all()
            raise

    def start_controller(self, timeout: float = 60.0) -> None:
        """The controller, or every voter of the quorum (launched together: none elects alone)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.quorum:
            self.controller = self._controller_process()
            self.controller.start(timeout)
            return
        self.voters = {v: self._voter_process(v) for v in voter_ids(self.controllers)}
        if not self.static_quorum:
            for proc in self.voters.values():
                self.format_voter(proc)
        for proc in self.voters.values():
            proc.launch()
        for proc in self.voters.values():
            proc.wait_ready(timeout)

    def start_brokers(self, timeout: float = 60.0) -> None:
        self.nodes = {n: self._broker_process(n) for n in range(1, self.brokers + 1)}
        for proc in self.nodes.values():  # launch all, then wait: brokers register in parallel
            proc.launch()
        try:
            for proc in self.nodes.values():
                proc.wait_ready(timeout)
        except TimeoutError as exc:  # a broker that stays fenced: what the controllers saw meanwhile
            raise TimeoutError(f"{exc}\n{self._controller_log_tails()}") from None
        self.save()

    def _controller_log_tails(self, chars: int = 3000) -> str:
        controllers = list(self.voters.values()) or ([self.controller] if self.controller else [])
        return "\n".join(f"--- {p.name}:\n{p.log_text()[-chars:]}" for p in controllers)

    @property
    def bootstrap(self) -> str:
        """The brokers' ports as their ready lines name them: the inter-broker listener's."""
        return ",".join(f"127.0.0.1:{p.port}" for p in self.nodes.values())

    @property
    def client_bootstrap(self) -> str:
        """Where clients connect: the SASL_SSL listener of a secure cluster, else ``bootstrap``."""
        if not self.secure:
            return self.bootstrap
        found = []
        for proc in self.nodes.values():
            match = re.search(rf"{CLIENT_LISTENER}://([\w.\-]+):(\d+)", proc.log_text())
            if match:
                found.append(f"localhost:{match.group(2)}")
        return ",".join(found)

    @property
    def controller_address(self) -> str:
        return self.controller_addresses

    @property
    def controller_procs(self) -> dict[str, LocalProcess]:
        """Every controller process by its name in the state file (``controller``, ``controller-3000``...)."""
        if self.controller is not None:
            return {"controller": self.controller}
        return {proc.name: proc for proc in self.voters.values()}

    def node(self, name: str | int) -> LocalProcess:
        """A daemon by name: a broker id, ``controller`` (the single controller, or in a quorum the
        active one), ``controller-3001`` (a quorum voter), ``controller-active``."""
        text = str(name)
        if self.quorum and text in ("controller", ACTIVE):
            leader = self.active_voter()
            if leader is None:
                raise LookupError("the quorum has no active controller right now")
            return self.voters[leader]
        if text in ("0", "controller"):
            assert self.controller is not None
            return self.controller
        if text.startswith("controller-"):
            voter = int(text.removeprefix("controller-"))
            if voter not in self.voters:
                raise LookupError(f"no controller {voter} (controllers: {', '.join(self.controller_procs)})")
            return self.voters[voter]
        return self.nodes[int(name)]

    def admin_port(self, node_id: int) -> int | None:
        """The admin HTTP port of broker ``node_id`` (0: the controller; 3000...: a quorum voter)."""
        return self._admin(node_id)

    # ---- the quorum -----------------------------------------------------------------------------------
    def voter_state(self, voter: int, timeout: float = 2.0) -> dict[str, Any] | None:
        """The voter's own view of the quorum (its /v1/state "quorum": role, epoch, leader, active,
        high_watermark, log_end_offset); None when it does not answer."""
        if not self.voters[voter].alive:
            return None
        try:
            return self.admin_get(voter, "/v1/state", timeout).get("quorum")
        except (OSError, ValueError):
            return None

    def quorum_states(self) -> dict[int, dict[str, Any] | None]:
        return {voter: self.voter_state(voter) for voter in self.voters}

    def active_voter(self) -> int | None:
        """The voter that says it is the active controller (None: none does now)."""
        for voter, state in self.quorum_states().items():
            if state is not None and state.get("active"):
                return voter
        return None

    def stop(self) -> None:
        for proc in self.nodes.values():
            proc.stop()
        for proc in self.controller_procs.values():
            proc.stop()

    def kill_all(self) -> None:
        for proc in [*self.nodes.values(), *self.controller_procs.values()]:
            proc.kill()

    # ---- the state file -----------------------------------------------------------------------------
    def save(self) -> None:
        procs = {**self.controller_procs, **{str(n): p for n, p in self.nodes.items()}}
        state = {
            "cluster_id": self.cluster_id,
            "base_port": self.base_port,
            "admin_ports": self.admin_ports,
            "secure": self.secure,
            "controllers": self.controllers,
            "static_quorum": self.static_quorum,
            "directory_ids": {str(k): v for k, v in self.directory_ids.items()},
            "free_admin_ports": {str(k): v for k, v in self._free_admin.items()},
            "fixed_ports": {str(k): v for k, v in self._fixed_ports.items()},
            "bootstrap": self.bootstrap,
            "nodes": {
                name: {
                    "pid": p.pid,
                    "port": p.port,
                    "args": p.args,
                    "log": str(p.log_path),
                    "data_dir": str(p.data_dir) if p.data_dir else None,
                }
                for name, p in procs.items()
                if p is not None
            },
        }
        (self.data_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, data_dir: Path) -> LocalCluster:
        state = json.loads((data_dir / STATE_FILE).read_text())
        cluster = cls(
            data_dir=data_dir,
            base_port=state["base_port"],
            cluster_id=state["cluster_id"],
            admin_ports=state.get("admin_ports", False),
            controllers=state.get("controllers", 1),
            static_quorum=state.get("static_quorum", True),
            secure=state.get("secure", False),
        )
        cluster.directory_ids = {int(k): v for k, v in state.get("directory_ids", {}).items()}
        cluster._free_admin = {int(k): v for k, v in state.get("free_admin_ports", {}).items()}
        cluster._fixed_ports = {int(k): v for k, v in state.get("fixed_ports", {}).items()}
        for name, info in state["nodes"].items():
            proc = LocalProcess(
                name if name.startswith("controller") else f"broker-{name}",
                info["args"],
                Path(info["log"]),
                Path(info["data_dir"]) if info["data_dir"] else None,
                pid=info["pid"],
                port=info["port"],
            )
            if name == "controller":
                cluster.controller = proc
            elif name.startswith("controller-"):
                cluster.voters[int(name.removeprefix("controller-"))] = proc
            else:
                cluster.nodes[int(name)] = proc
        cluster.brokers = len(cluster.nodes)
        return cluster
