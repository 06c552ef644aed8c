"""A local cluster: one controller and N brokers as processes on loopback, described in a state file
(``<data-dir>/cluster.json``) so ``epochkraft cluster status|kill|restart`` can act on it from another shell.

Ports, as Kafka's quick start (base_port 9092): broker 1 listens on ``base_port``, the controller on
``base_port + 1``, broker N > 1 on ``base_port + N`` (9092, 9093, then 9094, 9095...); each daemon's admin
HTTP port is its Kafka port + 100. Port 0 picks free ports (tests).
"""

from __future__ import annotations

import json
import re
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from epochkraft.chaos.processes import LocalProcess
from epochkraft.security.local_setup import CLIENT_LISTENER, LocalSecurity

STATE_FILE = "cluster.json"


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
    controller_for: dict[int, str] = field(default_factory=dict)  # broker -> controller address (a proxy)
    secure: bool = False  # mTLS between daemons, SCRAM over TLS for clients, the authorizer on
    controller: LocalProcess | None = None
    nodes: dict[int, LocalProcess] = field(default_factory=dict)
    _free_admin: dict[int, int] = field(default_factory=dict, repr=False)

    def _offset(self, node_id: int) -> int:
        """A daemon's port above base_port: broker 1 on base_port itself, the controller (0) next."""
        return {0: 1, 1: 0}.get(node_id, node_id)

    def _port(self, node_id: int) -> int:
        return 0 if self.base_port == 0 else self.base_port + self._offset(node_id)

    def _admin(self, node_id: int) -> int | None:
        """Admin HTTP port: the daemon's Kafka port + 100, or a free port when ports are picked freely."""
        if not self.admin_ports:
            return None
        if self.base_port:
            return self.base_port + 100 + self._offset(node_id)
        if node_id not in self._free_admin:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self._free_admin[node_id] = sock.getsockname()[1]
        return self._free_admin[node_id]

    @property
    def security(self) -> LocalSecurity | None:
        if not self.secure:
            return None
        return LocalSecurity.create(self.data_dir / "security", self.brokers)

    def _free_port(self) -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def _controller_process(self) -> LocalProcess:
        args = [
            "controller",
            "--listen",
            f"127.0.0.1:{self._port(0)}",
            "--cluster-id",
            self.cluster_id,
            "--data-dir",
            str(self.data_dir / "controller"),
        ]
        if self.session_timeout_ms is not None:
            args += ["--session-timeout-ms", str(self.session_timeout_ms)]
        if self.metrics_dir is not None:
            args += ["--metrics-dir", str(self.metrics_dir)]
        if self.controller_config is not None:
            args += ["--config", str(self.controller_config)]
        if (admin := self._admin(0)) is not None:
            args += ["--admin-port", str(admin)]
        if (security := self.security) is not None:
            args += security.controller_args()
        return LocalProcess(
            "controller", args, self.data_dir / "logs" / "controller.log", self.data_dir / "controller"
        )

    def _broker_process(self, node_id: int) -> LocalProcess:
        assert self.controller is not None
        data = self.data_dir / f"broker-{node_id}"
        security = self.security
        if security is None:
            listen = ["--listen", f"127.0.0.1:{self._port(node_id)}"]
        else:  # the client listener on the quick-start port, the inter-broker one on any free port
            listen = security.broker_args(
                node_id, self._port(node_id) or self._free_port(), self._free_port()
            )
        args = [
            "broker",
            "--node-id",
            str(node_id),
            *listen,
            "--controller",
            self.controller_for.get(node_id, f"127.0.0.1:{self.controller.port}"),
            "--data-dir",
            str(data),
        ]
        if self.metrics_dir is not None:
            args += ["--metrics-dir", str(self.metrics_dir)]
        if self.broker_config is not None:
            args += ["--config", str(self.broker_config)]
        if (admin := self._admin(node_id)) is not None:
            args += ["--admin-port", str(admin)]
        args += self.extra_broker_args
        return LocalProcess(f"broker-{node_id}", args, self.data_dir / "logs" / f"broker-{node_id}.log", data)

    def start(self, timeout: float = 60.0) -> None:
        self.start_controller(timeout)
        self.start_brokers(timeout)

    def start_controller(self, timeout: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.controller = self._controller_process()
        self.controller.start(timeout)

    def start_brokers(self, timeout: float = 60.0) -> None:
        self.nodes = {n: self._broker_process(n) for n in range(1, self.brokers + 1)}
        for proc in self.nodes.values():  # launch all, then wait: brokers register in parallel
            proc.launch()
        for proc in self.nodes.values():
            proc.wait_ready(timeout)
        self.save()

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
        assert self.controller is not None
        return f"127.0.0.1:{self.controller.port}"

    def node(self, name: str | int) -> LocalProcess:
        if str(name) in ("0", "controller"):
            assert self.controller is not None
            return self.controller
        return self.nodes[int(name)]

    def admin_port(self, node_id: int) -> int | None:
        """The admin HTTP port of broker ``node_id`` (0: the controller)."""
        return self._admin(node_id)

    def stop(self) -> None:
        for proc in self.nodes.values():
            proc.stop()
        if self.controller is not None:
            self.controller.stop()

    def kill_all(self) -> None:
        for proc in [*self.nodes.values(), *([self.controller] if self.controller else [])]:
            proc.kill()

    # ---- the state file -----------------------------------------------------------------------------
    def save(self) -> None:
        procs = {"controller": self.controller, **{str(n): p for n, p in self.nodes.items()}}
        state = {
            "cluster_id": self.cluster_id,
            "base_port": self.base_port,
            "admin_ports": self.admin_ports,
            "free_admin_ports": {str(k): v for k, v in self._free_admin.items()},
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
        )
        cluster._free_admin = {int(k): v for k, v in state.get("free_admin_ports", {}).items()}
        for name, info in state["nodes"].items():
            proc = LocalProcess(
                "controller" if name == "controller" else f"broker-{name}",
                info["args"],
                Path(info["log"]),
                Path(info["data_dir"]) if info["data_dir"] else None,
                pid=info["pid"],
                port=info["port"],
            )
            if name == "controller":
                cluster.controller = proc
            else:
                cluster.nodes[int(name)] = proc
        cluster.brokers = len(cluster.nodes)
        return cluster
