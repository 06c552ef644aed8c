"""What ordinary metadata changes cost on a cluster of many partitions (the scale part's second half).

On a cluster already holding the scale part's topic: ``--scale-changes`` topic config writes
(IncrementalAlterConfigs of ``retention.ms`` on that topic, one at a time, through a broker) with their
latency and the CPU seconds each broker and the controller spent per change; then one-partition changes (a
small topic's replicas reordered by AlterPartitionReassignments, the same replica set, so only a
PartitionChangeRecord) timed until every broker's Metadata shows the new order. The load average is
taken with each, since both are latencies on a shared machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.types import TopicName

from epochkraft.harness.cluster import LocalCluster
from epochkraft.net.client import KafkaClient

PROBE = "scale-probe"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[int(q * (len(ordered) - 1))], 1)


def _pids(cluster: LocalCluster) -> dict[str, int]:
    pids = {f"broker-{n}": p.pid for n, p in cluster.nodes.items() if p.pid is not None}
    if cluster.controller is not None and cluster.controller.pid is not None:
        pids["controller"] = cluster.controller.pid
    return pids


def wait_settled(cluster: LocalCluster, partitions: int, timeout_s: float = 600) -> float:
    """Seconds until every broker hosts ``partitions`` replicas (its admin /v1/state): a topic's
    creation is answered once the metadata holds it, before the brokers have opened its logs and
    become leaders and followers."""
    started = time.monotonic()
    pending = [n for n in cluster.nodes]
    while pending and time.monotonic() - started < timeout_s:
        time.sleep(3)  # a broker's state of 10,000 partitions is a few MB of JSON: not too often
        pending = [n for n in pending if len(_state(cluster, n).get("partitions", ())) < partitions]
    return round(time.monotonic() - started, 1)


def _state(cluster: LocalCluster, node_id: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.admin_port(node_id)}/v1/state", timeout=30) as r:
        state: dict[str, Any] = json.load(r)
    return state


def config_changes(cluster: LocalCluster, topic: str, changes: int) -> dict[str, Any]:
    """``changes`` retention.ms writes to ``topic``, each answered before the next is sent."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    pids = _pids(cluster)
    cpu_before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    latencies = []
    started = time.monotonic()
    for n in range(changes):
        entry = ConfigEntry("retention.ms", str(86_400_000 + n), incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource("topic", topic, incremental_configs=[entry])
        sent = time.monotonic()
        admin.incremental_alter_configs([resource])[resource].result(60)
        latencies.append(time.monotonic() - sent)
    elapsed = time.monotonic() - started
    return {
        "changes": changes,
        "changes_per_s": round(changes / elapsed, 1),
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
        "cpu_ms_per_change": {
            name: round(1000 * (_cpu_seconds(pid) - cpu_before[name]) / changes, 1)
            for name, pid in pids.items()
        },
        "load_average_1m": round(os.getloadavg()[0], 1),
    }


async def _replicas_everywhere(addresses: list[tuple[str, int]], wanted: list[int]) -> None:
    """Returns once every broker's Metadata shows the probe partition's replicas in ``wanted`` order."""
    request = md.MetadataRequest(
        topics=(md.MetadataRequestTopic(topic_id=None, name=TopicName(PROBE)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    clients = [KafkaClient(host, port, request_timeout_ms=15_000) for host, port in addresses]
    try:
        pending = list(clients)
        while pending:
            answers = await asyncio.gather(*(c.send(request, MetadataResponse) for c in pending))
            pending = [c for c, answer in zip(pending, answers, strict=True) if _replicas(answer) != wanted]
            if pending:
                await asyncio.sleep(0.002)
    finally:
        for client in clients:
            await client.close()


def _replicas(answer: Any) -> list[int]:
    """The probe partition's replicas in a Metadata answer (none while the broker has no partition)."""
    partitions = answer.topics[0].partitions if answer.topics else ()
    return list(partitions[0].replica_nodes) if partitions else []


def one_partition_changes(cluster: LocalCluster, changes: int) -> dict[str, Any]:
    """``changes`` reorderings of a one-partition topic's replicas, each timed from the request until
    every broker's Metadata shows it (the controller's commit plus every broker's fetch and apply)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(PROBE, 1, 3)])[PROBE].result(60)
    replicas: list[int] = []
    while len(replicas) < 3:
        time.sleep(0.1)
        partitions = admin.list_topics(PROBE, timeout=10).topics[PROBE].partitions
        replicas = list(partitions[0].replicas) if 0 in partitions else []
    addresses = [(h, int(p)) for h, _, p in (a.rpartition(":") for a in cluster.bootstrap.split(","))]
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    latencies = []
    try:
        for _ in range(changes):
            replicas = replicas[1:] + replicas[:1]
            sent = time.monotonic()
            client.alter_partition_reassignments({TopicPartition(PROBE, 0): replicas})
            asyncio.run(_replicas_everywhere(addresses, replicas))
            latencies.append(time.monotonic() - sent)
    finally:
        client.close()
    return {
        "changes": changes,
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
        "load_average_1m": round(os.getloadavg()[0], 1),
    }
