"""A chaos run: a workload and a seeded sequence of faults against a local cluster, then the checker.

Workload (as Kafka's replication system test): a confluent-kafka producer (acks=all, idempotent) writes
sequential values to ``chaos`` (3 partitions, RF 3, min.insync.replicas 2) while a consumer group reads
them. Every broker reaches the controller through a fault proxy. The ``elr`` fault (elr_fault.py) takes
a partition below min ISR and brings it back through its eligible leader replicas (KIP-966). After the
faults the cluster is stopped cleanly and the checker compares the acknowledged values with a full read
and the replicas' logs up to the high watermark.

With ``controllers=3`` the controllers are a Raft quorum. Every broker reaches every controller through
its own proxy, and every controller reaches every other through one proxy per direction (the voters'
addresses in ``--quorum-voters`` are those proxies), so one controller can be cut off from the others
while brokers still reach it. The quorum faults: SIGKILL of the active controller (restarted once another
leads), the active controller cut off from the other controllers, a controller restarted on an empty
disk. After every fault the quorum must heal too (one active controller that every voter names, every
high watermark equal), and the checker judges its state at the end.

With ``workload="txn"`` the workload is txn_workload.py's consume-transform-produce loop from
``chaos-in`` to ``chaos`` in transactions instead (``__transaction_state`` of 3 partitions here), and
txn_checker.py judges the read_committed output; the faults and the replica checks are the same.
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

from epochkraft.chaos.checker import History, Report, check, quorum_problems
from epochkraft.chaos.elr_fault import apply_elr_fault
from epochkraft.chaos.group_heal import GROUP, wait_healed
from epochkraft.chaos.proxy import FaultProxy
from epochkraft.chaos.sequence import produce_sequence
from epochkraft.chaos.txn_checker import TxnHistory
from epochkraft.chaos.txn_workload import INPUT_TOPIC, TxnWorkload, read_output
from epochkraft.harness.cluster import STATE_FILE, STATIC_DISK_LOSS, LocalCluster, voter_ids
from epochkraft.harness.kio_client import MiniClient
from epochkraft.harness.quorum_ops import replace_voter_async
from epochkraft.metrics.events import EventLog, read_events
from epochkraft.metrics.live_view import CHAOS_NODE
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
    "elr",
)
# Faults of a controller quorum (controllers > 1); "controller-restart" there restarts the active one.
QUORUM_FAULTS = (
    "controller-kill-active",
    "controller-partition-active",
    "controller-disk-loss",
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
WORKLOADS = ("plain", "txn")


def txn_broker_config(brokers: int) -> str:
    """``__transaction_state`` small (3 partitions) and as replicated as the cluster allows."""
    return (
        "transaction.state.log.num.partitions=3\n"
        f"transaction.state.log.replication.factor={min(3, brokers)}\n"
        f"transaction.state.log.min.isr={min(2, brokers)}\n"
    )


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
        procs = [] if earlier is None else [*earlier.controller_procs.values(), *earlier.nodes.values()]
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

    def __init__(
        self,
        bootstrap: str,
        rate: int = 300,
        conf: dict[str, str] | None = None,
        topic: str = TOPIC,
        group_protocol: str = "classic",
    ) -> None:
        self.bootstrap = bootstrap
        self.group_protocol = group_protocol  # the consumer group's: classic, or consumer (KIP-848)
        self.group_values: set[bytes] = set()  # every value the group returned
        self.topic = topic
        self.conf = conf or {}  # security settings of a secured cluster
        self.rate = rate
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.attempted = 0
        self.failed = 0
        self.consumed = 0
        self._stop = threading.Event()
        self._stop_producing = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._stop_producing.set()
        for thread in self._threads:
            thread.join(60)

    def stop_producing(self) -> None:
        """The producer flushes and stops; the group reads on (to be judged on all that was acknowledged)."""
        self._stop_producing.set()
        self._threads[0].join(60)

    def _produce(self) -> None:
        conf = {"bootstrap.servers": self.bootstrap, **self.conf, "log_level": 0}
        produce_sequence(conf, self.topic, self.rate, self._stop_producing, self)

    def _consume(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                **self.conf,
                "group.id": GROUP,
                "group.protocol": self.group_protocol,
                "auto.offset.reset": "earliest",
                "log_level": 0,
            }
        )
        consumer.subscribe([self.topic])
        while not self._stop.is_set():
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.consumed += 1
                self.group_values.add(msg.value() or b"")
        consumer.close()


class Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled

    def show(self, done: int, label: str, workload: Workload | TxnWorkload) -> None:
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


async def _wait_group_healed(workload: Workload, fault: str) -> dict[str, Any]:
    heal = await asyncio.to_thread(wait_healed, workload.bootstrap, workload.conf, TOPIC, PARTITIONS, fault)
    log.debug("group after %s: %s", fault, heal)
    return heal.to_json()


async def _wait_group_caught_up(workload: Workload, timeout: float = 30.0) -> None:
    """Stops the producer and lets the group read everything acknowledged before it stops too (the
    checker judges what the group missed)."""
    await asyncio.to_thread(workload.stop_producing)
    wanted = set(workload.acked)
    deadline = time.monotonic() + timeout
    while not wanted <= workload.group_values and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


async def _quorum_views(cluster: LocalCluster) -> dict[int, dict[str, Any] | None]:
    return await asyncio.to_thread(cluster.quorum_states)


async def _wait_quorum(cluster: LocalCluster, timeout: float = 40.0) -> dict[int, dict[str, Any] | None]:
    """Until the quorum has healed (checker.quorum_problems finds nothing); the last views either way."""
    deadline = time.monotonic() + timeout
    while True:
        views = await _quorum_views(cluster)
        problems = quorum_problems(views)
        if not problems or time.monotonic() > deadline:
            if problems:
                log.debug("the controller quorum did not heal: %s", problems)
            return views
        await asyncio.sleep(0.2)


async def _wait_active(cluster: LocalCluster, other_than: int | None, timeout: float = 20.0) -> int:
    """The voter that is the active controller, once one other than ``other_than`` is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = await asyncio.to_thread(cluster.active_voter)
        if active is not None and active != other_than:
            return active
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no controller other than {other_than} became active within {timeout}s")


async def _apply_quorum(
    fault: str, cluster: LocalCluster, links: dict[tuple[int, int], FaultProxy], rng: random.Random
) -> str:
    if fault == "controller-disk-loss" and cluster.static_quorum:
        raise ValueError(f"controller-disk-loss: {STATIC_DISK_LOSS}")
    active = await _wait_active(cluster, None)
    if fault == "controller-restart":
        node = cluster.voters[active]
        await asyncio.to_thread(node.stop)
        await asyncio.to_thread(node.start)
        return f"clean restart of the active controller {active}"
    if fault == "controller-kill-active":
        node = cluster.voters[active]
        killed = time.monotonic()
        await asyncio.to_thread(node.kill)
        successor = await _wait_active(cluster, active)
        took = time.monotonic() - killed
        await asyncio.sleep(1)
        await asyncio.to_thread(node.start)
        return f"SIGKILL of the active controller {active} ({successor} active after {took:.1f}s), restarted"
    if fault == "controller-partition-active":
        cut = [proxy for (a, b), proxy in links.items() if active in (a, b)]
        for proxy in cut:
            proxy.set_drop()
        started = time.monotonic()
        try:
            successor = await _wait_active(cluster, active)
            took = time.monotonic() - started
            await asyncio.sleep(1)  # the old leader, still cut off, has resigned by now
        finally:
            for proxy in cut:
                proxy.set_pass()
        return f"active controller {active} cut off from the other controllers ({successor} active after {took:.1f}s)"
    if fault == "controller-disk-loss":
        victim = rng.choice(sorted(cluster.voters))
        await asyncio.to_thread(lambda: cluster.voters[victim].restart(wipe=True))
        was = " (it was active)" if victim == active else ""
        done = await replace_voter_async(cluster, victim, 60.0)
        return f"controller {victim} restarted on an empty disk{was}: {done}"
    raise ValueError(f"unknown quorum fault {fault!r}")


async def _apply(
    fault: str,
    cluster: LocalCluster,
    proxies: dict[int, list[FaultProxy]],
    client: MiniClient,
    rng: random.Random,
    links: dict[tuple[int, int], FaultProxy] | None = None,
) -> str:
    if fault in QUORUM_FAULTS or (fault == "controller-restart" and cluster.quorum):
        if not cluster.quorum:
            raise ValueError(f"{fault} needs a controller quorum (controllers > 1)")
        return await _apply_quorum(fault, cluster, links or {}, rng)
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
        for proxy in proxies[victim]:
            proxy.set_drop()
        await asyncio.sleep(SESSION_TIMEOUT_MS / 1000 + 1.5)
        for proxy in proxies[victim]:
            proxy.set_pass()
        return f"broker {victim} cut off from the controller{'s' if cluster.quorum else ''}"
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


def fault_plan(
    faults: list[str], rounds: int | None, rng: random.Random, *, static_quorum: bool = False
) -> list[str]:
    """The faults to apply, in a seeded order: ``rounds`` of them (default one of each), cycling through
    ``faults``. A static quorum's plan has no controller-disk-loss (cluster.STATIC_DISK_LOSS)."""
    if static_quorum:
        faults = [f for f in faults if f != "controller-disk-loss"]
    if not faults:
        return []
    rounds = rounds or len(faults)
    plan = [faults[i % len(faults)] for i in range(rounds)]
    rng.shuffle(plan)
    return plan


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
    controllers: int = 1,
    static_quorum: bool = False,
    group_protocol: str = "classic",
    workload_kind: str = "plain",
    sabotage: str | None = None,
) -> Report:
    rng = random.Random(seed)
    txn = workload_kind == "txn"
    if static_quorum and "controller-disk-loss" in faults:
        log(f"controller-disk-loss left out: {STATIC_DISK_LOSS}")
    plan = fault_plan(faults, rounds, rng, static_quorum=static_quorum)
    work_dir.mkdir(parents=True, exist_ok=True)
    broker_cfg = work_dir / "broker.properties"
    broker_cfg.write_text(
        BROKER_CONFIG
        + (RETENTION_BROKER_CONFIG if retention else "")
        + (txn_broker_config(brokers) if txn else "")
    )
    controller_cfg = work_dir / "controller.properties"
    controller_cfg.write_text(f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}\n")
    # min ISR 2 of RF 3: a follower's loss leaves the ISR at min ISR, a second one takes it below (the elr fault)
    topic_config = {"min.insync.replicas": "2", **(RETENTION_TOPIC_CONFIG if retention else {})}
    cluster = LocalCluster(
        data_dir=work_dir / "cluster",
        brokers=brokers,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        metrics_dir=work_dir / "metrics",
        secure=secure,
        controllers=controllers,
        static_quorum=static_quorum,
        admin_ports=True,  # the controllers' live view shows the run, its faults on the timeline
    )
    fault_log = EventLog(work_dir / "metrics", CHAOS_NODE)
    proxies: dict[int, list[FaultProxy]] = {}  # broker -> its proxies to the controller(s)
    links: dict[tuple[int, int], FaultProxy] = {}  # (voter, other voter) -> the proxy between them
    history = History(replication_factor=min(3, brokers))
    applied: list[str] = []
    client: MiniClient | None = None
    workload: Workload | TxnWorkload | None = None
    bar = Progress(len(plan), progress)
    try:
        voters = voter_ids(controllers)
        for a in voters:  # the voters' own links first: their addresses are fixed before they start
            for b in voters:
                if a != b:
                    link = FaultProxy(0, ("127.0.0.1", cluster.voter_port(b)), name=f"link-{a}-{b}")
                    await link.start()
                    links[(a, b)] = link
                    cluster.voter_address_for[(a, b)] = f"127.0.0.1:{link.port}"
        await asyncio.to_thread(cluster.start_controller)
        upstreams = (
            [cluster.voter_port(v) for v in voters] if voters else [cluster.controller.port]  # type: ignore[union-attr]
        )
        for broker in range(1, brokers + 1):
            proxies[broker] = []
            for upstream in upstreams:
                proxy = FaultProxy(0, ("127.0.0.1", upstream), name=f"proxy-{broker}-{upstream}")
                await proxy.start()
                proxies[broker].append(proxy)
            cluster.controller_for[broker] = ",".join(f"127.0.0.1:{p.port}" for p in proxies[broker])
        await asyncio.to_thread(cluster.start_brokers)
        if progress:
            views = voters or [0]
            print("live view: " + "  ".join(cluster.admin_url(v, "/view/") for v in views), file=sys.stderr)
        security = cluster.security
        # A secured cluster: the checker's client is the admin on the inter-broker (mTLS) listener, the
        # workload the admin with SCRAM over TLS on the clients' listener.
        client = MiniClient(cluster.bootstrap, security.admin_tls() if security else None)
        error = await client.create_topic(TOPIC, PARTITIONS, history.replication_factor, topic_config)
        assert error == ErrorCode.none, error
        conf = security.librdkafka(cluster.client_bootstrap) if security else {}
        bootstrap = conf.pop("bootstrap.servers", cluster.bootstrap)
        if txn:
            error = await client.create_topic(
                INPUT_TOPIC, PARTITIONS, history.replication_factor, topic_config
            )
            assert error == ErrorCode.none, error
            workload = TxnWorkload(bootstrap, TOPIC, rate, conf, sabotage)
        else:
            workload = Workload(bootstrap, rate, conf, group_protocol=group_protocol)
        workload.start()

        async def watch_isr() -> None:
            while True:
                try:
                    for p in await _partition_states(client):
                        history.isr_sizes.append((p.partition_index, len(p.isr_nodes)))
                except Exception as exc:  # a broker under a fault: this sample is missing, the next one comes
                    logging.getLogger(__name__).debug("ISR sample failed: %r", exc)  # `log` here is print
                await asyncio.sleep(0.2)

        watcher = asyncio.create_task(watch_isr())
        await asyncio.sleep(2)
        for done, fault in enumerate(plan):
            bar.show(done, fault, workload)
            if fault == "elr":
                election = await apply_elr_fault(cluster, client, TOPIC, rng)
                history.elr_elections.append(election.to_json())
                applied.append(election.detail())
                fault_log.emit(
                    "fault_injected",
                    fault=fault,
                    detail=applied[-1],
                    topic=TOPIC,
                    partition=election.partition,
                    elr=election.elr_seen,
                    leader=election.elected,
                )
            else:
                applied.append(await _apply(fault, cluster, proxies, client, rng, links))
                fault_log.emit("fault_injected", fault=fault, detail=applied[-1])
            await _wait_healthy(client, history.replication_factor)
            if cluster.quorum and quorum_problems(await _wait_quorum(cluster)):
                raise TimeoutError(f"the controller quorum did not heal after {applied[-1]}")
            if isinstance(workload, Workload):  # the plain workload's consumer group must heal
                history.group_heals.append(await _wait_group_healed(workload, fault))
            await asyncio.sleep(1)
        bar.show(len(plan), "done", workload)
        watcher.cancel()
        if isinstance(workload, Workload):
            await _wait_group_caught_up(workload)
        await asyncio.to_thread(workload.stop)
        if isinstance(workload, TxnWorkload):
            history.transactions = await asyncio.to_thread(_read_transactions, workload, bootstrap, conf)
            history.consumed = list(history.transactions.committed_read)
        else:
            history.consumed = []
            for p in range(PARTITIONS):
                start, records = await client.read_retained(TOPIC, p)
                history.log_start_offsets[p] = start
                history.consumed += [(p, offset, value) for offset, value in records]
        if cluster.quorum:
            history.quorum = await _wait_quorum(cluster)
    finally:
        if isinstance(workload, TxnWorkload):
            workload.stop(drain_timeout=0)  # drained above, unless the run was cut short
        elif workload is not None:
            workload.stop()
        if client is not None:
            await client.close()
        await asyncio.to_thread(cluster.stop)
        await asyncio.to_thread(cluster.kill_all)
        for proxy in [*(p for ps in proxies.values() for p in ps), *links.values()]:
            await proxy.stop()
        await fault_log.aclose()
    if isinstance(workload, Workload):  # the transactional workload's inputs are judged by txn_checker
        history.acked = dict(workload.acked)
        history.group_consumed = set(workload.group_values)
        history.attempted = workload.attempted
        history.failed_produces = workload.failed
    history.replicas, history.high_watermarks = _replica_logs(cluster)
    history.rejected_alter_partitions = controller_rejections(work_dir / "metrics")
    report = check(history)
    report.faults = applied
    return report


def _read_transactions(workload: TxnWorkload, bootstrap: str, conf: dict[str, str]) -> TxnHistory:
    """What the loop recorded, and the output as a new reader sees it, read_committed (read_uncommitted
    under the ``read-uncommitted`` sabotage) and read_uncommitted."""
    committed = workload.sabotage != "read-uncommitted"
    return TxnHistory(
        inputs_attempted=workload.attempted,
        inputs_acked=dict(workload.acked),
        transactions=dict(workload.transactions),
        committed_read=read_output(bootstrap, conf, TOPIC, PARTITIONS, committed=committed),
        uncommitted_records=len(read_output(bootstrap, conf, TOPIC, PARTITIONS, committed=False)),
        drained=workload.drained,
        loop_errors=list(workload.errors),
    )


def controller_rejections(metrics_dir: Path) -> dict[str, int]:
    """AlterPartition rejections by Kafka error name, from the controller's event log."""
    counts: dict[str, int] = {}
    for event in read_events(metrics_dir, "controller-*"):
        if event["event"] == "isr_change_rejected":
            counts[event["error"]] = counts.get(event["error"], 0) + 1
    return counts
