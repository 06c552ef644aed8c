"""A real Apache Kafka KRaft cluster on loopback: one controller and N brokers, each its own JVM started
from Kafka's jars by main class (``kafka.Kafka``), storage formatted by Kafka's ``kafka.tools.StorageTool``.

The controller's listener is PLAINTEXT, so tests can speak the controller-side protocol (broker
registration, heartbeats, AlterPartition) to Kafka's own controller. The state file in the run directory
lets ``scripts/peers kafka down|status`` act on a cluster another shell started.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from epochkraft.harness.ports import free_port
from epochkraft.peers.fetch import java_command, kafka_version

STATE_FILE = "kafka-peer.json"
CONTROLLER_ID = 0

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = info
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
"""


def random_cluster_id() -> str:
    """Kafka's cluster id form: a UUID in unpadded URL-safe base64 (``Uuid.randomUuid().toString()``),
    which, as Kafka's, never starts with '-' (the storage tool would take it for an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _properties(values: dict[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


@dataclass
class KafkaNode:
    node_id: int
    port: int
    role: str  # "controller" or "broker"
    pid: int | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return "controller" if self.role == "controller" else f"broker-{self.node_id}"

    @property
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


@dataclass
class KafkaPeer:
    """One controller (node 0) and brokers 1..N. ``broker_config``/``controller_config`` override or add
    Kafka properties (Kafka's names)."""

    run_dir: Path
    brokers: int = 3
    heap_mb: int = 512
    cluster_id: str = field(default_factory=random_cluster_id)
    broker_config: dict[str, object] = field(default_factory=dict)
    controller_config: dict[str, object] = field(default_factory=dict)
    jvm_options: list[str] = field(default_factory=list)  # added to every JVM, e.g. to start faster
    controller: KafkaNode | None = None
    nodes: dict[int, KafkaNode] = field(default_factory=dict)

    # ---- configuration ------------------------------------------------------------------------------
    def _voters(self) -> str:
        assert self.controller is not None
        return f"{CONTROLLER_ID}@127.0.0.1:{self.controller.port}"

    def _config(self, node: KafkaNode) -> dict[str, object]:
        common = {
            "node.id": node.node_id,
            "controller.quorum.voters": self._voters(),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": self.run_dir / node.name / "data",
        }
        if node.role == "controller":
            return {
                "process.roles": "controller",
                "listeners": f"CONTROLLER://127.0.0.1:{node.port}",
                **common,
                "num.partitions": 1,
                **self.controller_config,
            }
        replicas = min(3, self.brokers)
        return {
            "process.roles": "broker",
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            **common,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min(2, replicas),
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min(2, replicas),
            "group.initial.rebalance.delay.ms": 0,
            **self.broker_config,
        }

    def _config_path(self, node: KafkaNode) -> Path:
        return self.run_dir / node.name / "server.properties"

    def _log_path(self, node: KafkaNode) -> Path:
        return self.run_dir / node.name / "server.log"

    def _write_configs(self) -> None:
        (self.run_dir / "log4j2.properties").write_text(LOG4J2)
        for node in self.all_nodes:
            self._config_path(node).parent.mkdir(parents=True, exist_ok=True)
            self._config_path(node).write_text(_properties(self._config(node)))

    @property
    def all_nodes(self) -> list[KafkaNode]:
        return [*([self.controller] if self.controller else []), *self.nodes.values()]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())

    @property
    def controller_log(self) -> Path:
        assert self.controller is not None
        return self._log_path(self.controller)

    @property
    def controller_address(self) -> str:
        assert self.controller is not None
        return f"127.0.0.1:{self.controller.port}"

    # ---- lifecycle ----------------------------------------------------------------------------------
    def format(self) -> None:
        """Formats every node's log directory with Kafka's storage tool, all with the one cluster id."""

        def run(node: KafkaNode) -> None:
            cmd = java_command(
                "kafka.tools.StorageTool",
                ["format", "-t", self.cluster_id, "-c", str(self._config_path(node)), "--ignore-formatted"],
                heap_mb=128,
                jvm=[f"-Dlog4j2.configurationFile={self.run_dir / 'log4j2.properties'}", *self.jvm_options],
            )
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if result.returncode != 0:
                raise RuntimeError(f"formatting {node.name} failed: {result.stdout}{result.stderr}")

        with ThreadPoolExecutor(len(self.all_nodes)) as pool:
            list(pool.map(run, self.all_nodes))

    def _launch(self, node: KafkaNode) -> None:
        cmd = java_command(
            "kafka.Kafka",
            [str(self._config_path(node))],
            heap_mb=self.heap_mb,
            jvm=[
                f"-Dlog4j2.configurationFile={self.run_dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.run_dir / node.name}",
                f"-Depochkraft.peer={self.run_dir}",  # marks the process as ours for `down`
                *self.jvm_options,
            ],
        )
        with open(self._log_path(node), "ab") as log:
            node.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        node.pid = node.proc.pid

    def start(self, timeout: float = 180.0) -> None:
        """Formats fresh storage, starts the controller and the brokers, and returns once every broker is
        unfenced."""
        for old in self.run_dir.glob("*/data"):
            shutil.rmtree(old)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.controller = KafkaNode(CONTROLLER_ID, free_port(), "controller")
        self.nodes = {i: KafkaNode(i, free_port(), "broker") for i in range(1, self.brokers + 1)}
        self._write_configs()
        self.format()
        for node in self.all_nodes:
            self._launch(node)
        self.save()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop(timeout=10)
            raise

    def wait_ready(self, timeout: float = 180.0, brokers: int | None = None) -> None:
        """Waits until a broker's Metadata lists ``brokers`` (all by default) unfenced brokers."""
        want = self.brokers if brokers is None else brokers
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for node in self.all_nodes:
                if node.proc is not None and node.proc.poll() is not None:
                    tail = self._log_path(node).read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"Kafka {node.name} exited ({node.proc.returncode}):\n{tail}")
            for node in self.nodes.values():
                if node.alive:
                    seen = asyncio.run(_brokers_in_metadata(node.port))
                    if seen >= want:
                        return
                    break
            time.sleep(0.5)
        raise TimeoutError(
            f"Kafka peer: {seen} of {want} brokers after {timeout:.0f} s (logs: {self.run_dir})"
        )

    def signal(self, node_id: int, sig: signal.Signals) -> None:
        node = self.controller if node_id == CONTROLLER_ID else self.nodes[node_id]
        assert node is not None and node.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, sig)

    def restart_broker(self, node_id: int) -> None:
        """Starts a broker that was stopped or killed again, on the same port and log directory."""
        node = self.nodes[node_id]
        if node.alive:
            raise RuntimeError(f"{node.name} is still running")
        self._launch(node)
        self.save()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the brokers (controlled shutdown needs the controller), then the controller;
        SIGKILL to whatever is left after ``timeout``."""
        for group in (list(self.nodes.values()), [self.controller] if self.controller else []):
            for node in group:
                if _ours(node, self.run_dir):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(node.pid, signal.SIGTERM)  # type: ignore[arg-type]
            deadline = time.monotonic() + timeout
            for node in group:
                while _ours(node, self.run_dir) and time.monotonic() < deadline:
                    _reap(node)
                    time.sleep(0.1)
                if _ours(node, self.run_dir):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(node.pid, signal.SIGKILL)  # type: ignore[arg-type]
                _reap(node, wait=True)

    # ---- the state file -----------------------------------------------------------------------------
    def save(self) -> None:
        state = {
            "kafka_version": kafka_version(),
            "cluster_id": self.cluster_id,
            "bootstrap": self.bootstrap,
            "controller": self.controller_address,
            "nodes": {n.name: {"node_id": n.node_id, "port": n.port, "pid": n.pid} for n in self.all_nodes},
        }
        (self.run_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, run_dir: Path) -> KafkaPeer:
        state = json.loads((run_dir / STATE_FILE).read_text())
        peer = cls(run_dir=run_dir, cluster_id=state["cluster_id"])
        for name, info in state["nodes"].items():
            node = KafkaNode(
                info["node_id"], info["port"], "controller" if name == "controller" else "broker"
            )
            node.pid = info["pid"]
            if node.role == "controller":
                peer.controller = node
            else:
                peer.nodes[node.node_id] = node
        peer.brokers = len(peer.nodes)
        return peer


def _ours(node: KafkaNode, run_dir: Path) -> bool:
    """Alive and still the JVM we started (a pid can be reused after the state file was written)."""
    if not node.alive or node.pid is None:
        return False
    try:
        cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes()
    except OSError:
        return False
    return f"-Depochkraft.peer={run_dir}".encode() in cmdline


def _reap(node: KafkaNode, wait: bool = False) -> None:
    if node.proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.proc.wait(timeout=5 if wait else 0)


async def _brokers_in_metadata(port: int) -> int:
    from kio.schema.metadata.v12 import request as md
    from kio.schema.metadata.v12.response import MetadataResponse

    from epochkraft.net.client import KafkaClient
    from epochkraft.net.errors import NetworkError

    client = KafkaClient("127.0.0.1", port, request_timeout_ms=3000, connect_timeout_ms=1000)
    try:
        response = await client.send(
            md.MetadataRequest(
                topics=(),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
            MetadataResponse,
        )
        return len(response.brokers)
    except (NetworkError, OSError):
        return 0
    finally:
        await client.close()
