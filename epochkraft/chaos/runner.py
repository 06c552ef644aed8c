"""A chaos run: a workload and a seeded sequence of faults against a local cluster, then the checker.

Workload (as Kafka's replication system test): a confluent-kafka producer (acks=all, idempotent) writes
sequential values to ``chaos`` (3 partitions, RF 3, min.insync.replicas 2) while a consumer group reads
them. Every broker reaches the controller through a fault proxy. After the faults the cluster is
stopped cleanly and the checker compares the acknowledged values with a full read and the replicas'
logs up to the high watermark.
"""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from epochkraft.chaos.checker import History, Report, check
from epochkraft.chaos.cluster import STATE_FILE, LocalCluster
from epochkraft.chaos.kio_client import MiniClient
from epochkraft.chaos.proxy import FaultProxy
from epochkraft.metrics.events import read_events
from epochkraft.protocol.errors import ErrorCode

# Debug lines through the standard library: silent unless a caller turns them on, so the progress bar stays clean.
log = logging.getLogger(__name__)

TOPIC = "chaos"
PARTITIONS = 3
FAULTS = (
    "clean-bounce",
    "hard-bounce-leader",
    "hard-bounce-follower",
    "pause",
    "power-loss",
    "disk-loss",
    "partition",
    "controller-restart",
)
BROKER_CONFIG = """broker.heartbeat.interval.ms=200
replica.lag.time.max.ms=1500
replica.fetch.wait.max.ms=200
replica.high.watermark.checkpoint.interval.ms=500
log.flush.offset.checkpoint.interval.ms=1000
group.initial.rebalance.delay.ms=0
offsets.topic.num.partitions=3
"""
SESSION_TIMEOUT_MS = 2000
# --retention: small segments, short retention, deletion checked often on every replica
RETENTION_BROKER_CONFIG = """log.retention.check.interval.ms=500
log.segment.delete.delay.ms=1000
"""
RETENTION_TOPIC_CONFIG = {"segment.bytes": "4096", "retention.bytes": "8192"}


class WorkDirBusy(Exception):
    """A cluster started by an earlier run in the same work dir is still running."""


def start_clean(work_dir: Path) -> None:
    """Removes an earlier run's cluster data and metrics from ``work_dir``: a new run's controller has a
    new cluster id, which the old data dirs would refuse, and the old events would be counted again."""
    cluster_dir = work_dir / "cluster"
    if (cluster_dir / STATE_FILE).exists():
        try:
            earlier = LocalCluster.load(cluster_dir)
        except (OSError, ValueError, KeyError):  # an unreadable state file names no process to wait for
            earlier = None
        procs = [] if earlier is None else [earlier.controller, *earlier.nodes.values()]
        pids = [str(p.pid) for p in procs if p is not None and p.alive]
        if pids:
            raise WorkDirBusy(
                f"a cluster from an earlier run in {cluster_dir} is still running (pids {', '.join(pids)}):"
                f" stop it, or remove {cluster_dir}, or choose another --work-dir"
            )
    for name in ("cluster", "metrics"):
        shutil.rmtree(work_dir / name, ignore_errors=True)


class Workload:
    """Producer and consumer threads (confluent-kafka), recording what was acknowledged and read."""

    def __init__(self, bootstrap: str, rate: int = 300, conf: dict[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.conf = conf or {}  # security settings of a secured cluster
        self.rate = rate
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.attempted = 0
        self.failed = 0
        self.consumed = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                **self.conf,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "log_level": 0,
            }
        )

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                self.acked[msg.value()] = (msg.partition(), msg.offset())
            else:
                self.failed += 1

        i = 0
        while not self._stop.is_set():
            producer.produce(TOPIC, value=str(i).encode(), key=str(i % 97).encode(), on_delivery=on_delivery)
            self.attempted += 1
            i += 1
            producer.poll(0)
            time.sleep(1 / self.rate)
        producer.flush(60)

    def _consume(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                **self.conf,
                "group.id": "chaos-readers",
                "auto.offset.reset": "earliest",
                "log_level": 0,
            }
        )
        consumer.subscribe([TOPIC])
        while not self._stop.is_set():
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.consumed += 1
        consumer.close()


class Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled

    def show(self, done: int, label: str, workload: Workload) -> None:
        if not self.enabled:
            return
        width = 24
        filled = int(width * done / max(self.total, 1))
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(
            f"\r[{bar}] {done}/{self.total} {label:<22} acked={len(workload.acked)} "
            f"read={workload.consumed}   "
        )
        sys.stderr.flush()
        if done == self.total:
            sys.stderr.write("\n")


async def _partition_states(client: MiniClient) -> list[Any]:
    response = await client.metadata(TOPIC)
    return list(response.topics[0].partitions)


async def _wait_healthy(client: MiniClient, rf: int, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            states = await _partition_states(client)
            if states and all(p.leader_id >= 0 and len(p.isr_nodes) == rf for p in states):
                return
        except Exception as exc:  # brokers restarting: ask again, and say why if it never recovers
            last_error = exc
            log.debug("metadata request failed while waiting for full ISRs: %r", exc)
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the cluster did not recover its full ISRs (last error: {last_error!r})")


async def _apply(
    fault: str, cluster: LocalCluster, proxies: dict[int, FaultProxy], client: MiniClient, rng: random.Random
) -> str:
    states = await _partition_states(client)
    target = rng.choice(states)
    leader = target.leader_id
    followers = [b for b in target.replica_nodes if b != leader] or [leader]
    if fault == "clean-bounce":
        node = cluster.node(leader)
        await asyncio.to_thread(node.stop)
        await asyncio.to_thread(node.start)
        return f"clean bounce of leader {leader}"
    if fault in ("hard-bounce-leader", "hard-bounce-follower"):
        victim = leader if fault.endswith("leader") else rng.choice(followers)
        await asyncio.to_thread(cluster.node(victim).restart)
        return f"SIGKILL + restart of broker {victim}"
    if fault == "pause":
        victim = rng.choice([leader, *followers])
        cluster.node(victim).signal("STOP")
        await asyncio.sleep(SESSION_TIMEOUT_MS / 1000 + 1)
        cluster.node(victim).signal("CONT")
        return f"SIGSTOP/SIGCONT of broker {victim}"
    if fault == "power-loss":
        victim = rng.choice(followers)
        await asyncio.to_thread(lambda: cluster.node(victim).restart(power_loss=True))
        return f"power loss of broker {victim}"
    if fault == "disk-loss":
        victim = rng.choice(followers)
        await asyncio.to_thread(lambda: cluster.node(victim).restart(wipe=True, clean=True))
        return f"disk replaced on broker {victim}"
    if fault == "partition":
        victim = rng.choice([leader, *followers])
        proxies[victim].set_drop()
        await asyncio.sleep(SESSION_TIMEOUT_MS / 1000 + 1.5)
        proxies[victim].set_pass()
        return f"broker {victim} cut off from the controller"
    if fault == "controller-restart":
        controller = cluster.node("controller")
        await asyncio.to_thread(controller.stop)
        await asyncio.to_thread(controller.start)
        return "controller restart"
    raise ValueError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")


def _replica_logs(
    cluster: LocalCluster,
) -> tuple[dict[int, dict[int, list[tuple[int, bytes]]]], dict[int, int]]:
    from epochkraft.broker.log import PartitionLog
    from epochkraft.broker.log.checkpoints import read_offsets
    from epochkraft.protocol.records import decode_batches

    replicas: dict[int, dict[int, list[tuple[int, bytes]]]] = {}
    hws: dict[int, int] = {}
    for broker, node in cluster.nodes.items():
        assert node.data_dir is not None
        checkpoint = read_offsets(node.data_dir / "replication-offset-checkpoint")
        for partition in range(PARTITIONS):
            path = node.data_dir / f"{TOPIC}-{partition}"
            if not path.exists():
                continue
            plog = PartitionLog.open(path)
            entries = [
                (b.offset_of(r), r.value or b"")
                for b in decode_batches(plog.read(0, 1 << 40))
                for r in b.records
            ]
            plog.close()
            replicas.setdefault(broker, {})[partition] = entries
            hw = checkpoint.get((TOPIC, partition), 0)
            hws[partition] = min(hws.get(partition, hw), hw)
    return replicas, hws


async def run_chaos(
    work_dir: Path,
    faults: list[str],
    *,
    seed: int = 1,
    rounds: int | None = None,
    brokers: int = 3,
    rate: int = 300,
    progress: bool = True,
    log: Any = print,
    retention: bool = False,
    secure: bool = False,
) -> Report:
    rng = random.Random(seed)
    rounds = rounds or len(faults)
    plan = [faults[i % len(faults)] for i in range(rounds)]
    rng.shuffle(plan)
    work_dir.mkdir(parents=True, exist_ok=True)
    broker_cfg = work_dir / "broker.properties"
    broker_cfg.write_text(BROKER_CONFIG + (RETENTION_BROKER_CONFIG if retention else ""))
    controller_cfg = work_dir / "controller.properties"
    controller_cfg.write_text(f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}\n")
    topic_config = {"min.insync.replicas": "2", **(RETENTION_TOPIC_CONFIG if retention else {})}
    cluster = LocalCluster(
        data_dir=work_dir / "cluster",
        brokers=brokers,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        metrics_dir=work_dir / "metrics",
        secure=secure,
    )
    proxies: dict[int, FaultProxy] = {}
    history = History(replication_factor=min(3, brokers))
    applied: list[str] = []
    client: MiniClient | None = None
    workload: Workload | None = None
    bar = Progress(len(plan), progress)
    try:
        await asyncio.to_thread(cluster.start_controller)
        assert cluster.controller is not None
        for broker in range(1, brokers + 1):
            proxy = FaultProxy(0, ("127.0.0.1", cluster.controller.port), name=f"proxy-{broker}")
            await proxy.start()
            proxies[broker] = proxy
            cluster.controller_for[broker] = f"127.0.0.1:{proxy.port}"
        await asyncio.to_thread(cluster.start_brokers)
        security = cluster.security
        # A secured cluster: the checker's client is the admin on the inter-broker (mTLS) listener, the
        # workload the admin with SCRAM over TLS on the clients' listener.
        client = MiniClient(cluster.bootstrap, security.admin_tls() if security else None)
        error = await client.create_topic(TOPIC, PARTITIONS, history.replication_factor, topic_config)
        assert error == ErrorCode.none, error
        conf = security.librdkafka(cluster.client_bootstrap) if security else {}
        workload = Workload(conf.pop("bootstrap.servers", cluster.bootstrap), rate, conf)
        workload.start()

        async def watch_isr() -> None:
            while True:
                try:
                    for p in await _partition_states(client):
                        history.isr_sizes.append((p.partition_index, len(p.isr_nodes)))
                except Exception as exc:  # a broker under a fault: this sample is missing, the next one comes
                    log.debug("ISR sample failed: %r", exc)
                await asyncio.sleep(0.2)

        watcher = asyncio.create_task(watch_isr())
        await asyncio.sleep(2)
        for done, fault in enumerate(plan):
            bar.show(done, fault, workload)
            applied.append(await _apply(fault, cluster, proxies, client, rng))
            await _wait_healthy(client, history.replication_factor)
            await asyncio.sleep(1)
        bar.show(len(plan), "done", workload)
        watcher.cancel()
        await asyncio.to_thread(workload.stop)
        history.consumed = []
        for p in range(PARTITIONS):
            start, records = await client.read_retained(TOPIC, p)
            history.log_start_offsets[p] = start
            history.consumed += [(p, offset, value) for offset, value in records]
    finally:
        if workload is not None:
            workload.stop()
        if client is not None:
            await client.close()
        await asyncio.to_thread(cluster.stop)
        await asyncio.to_thread(cluster.kill_all)
        for proxy in proxies.values():
            await proxy.stop()
    history.acked = dict(workload.acked) if workload else {}
    history.attempted = workload.attempted if workload else 0
    history.failed_produces = workload.failed if workload else 0
    history.replicas, history.high_watermarks = _replica_logs(cluster)
    history.rejected_alter_partitions = controller_rejections(work_dir / "metrics")
    report = check(history)
    report.faults = applied
    return report


def controller_rejections(metrics_dir: Path) -> dict[str, int]:
    """AlterPartition rejections by Kafka error name, from the controller's event log."""
    counts: dict[str, int] = {}
    for event in read_events(metrics_dir, "controller-*"):
        if event["event"] == "isr_change_rejected":
            counts[event["error"]] = counts.get(event["error"], 0) + 1
    return counts
