"""``epochkraft bench --parts tls``: produce throughput over TLS against plaintext, in one run.

Two 3-broker clusters in turn, each measured ``rounds`` times (median reported): (a) the default, PLAINTEXT
everywhere; (b) ``cluster up --secure``: the clients' listener SASL_SSL (SCRAM-SHA-512 at connect, then TLS
for every byte), the inter-broker listener and the controller listener TLS with client certificates, and the
StandardAuthorizer on. RF 3, acks=all, min.insync.replicas 2, 1 KiB records from librdkafka. Besides MB/s
each reports the brokers' and the client's CPU seconds per acknowledged GB, which says where TLS costs:
every record is encrypted by the client, decrypted by the leader, and encrypted and decrypted again for
each follower's fetch.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.procfs import cpu_seconds

TOPIC = "tls-bench"
RECORD = 1024


def _start(work: Path, secure: bool, fast: str) -> tuple[LocalCluster, dict[str, str]]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "broker.properties").write_text(fast)
    (work / "controller.properties").write_text("broker.session.timeout.ms=4000\n")
    cluster = LocalCluster(
        data_dir=work / "cluster",
        brokers=3,
        broker_config=work / "broker.properties",
        controller_config=work / "controller.properties",
        secure=secure,
    )
    cluster.start()
    conf = {"bootstrap.servers": cluster.client_bootstrap}
    if (security := cluster.security) is not None:
        conf |= {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": security.admin_password,
            "ssl.ca.location": str(security.truststore),
        }
    return cluster, conf


def _create(conf: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**conf})
    admin.create_topics([NewTopic(TOPIC, 3, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)


def _client_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _measure(cluster: LocalCluster, conf: dict[str, str], seconds: float) -> dict[str, float]:
    from epochkraft.bench.cli import _produce_rate

    pids = [p.pid for p in cluster.nodes.values() if p.pid is not None]
    brokers_before, client_before = cpu_seconds(pids), _client_cpu()
    rate = _produce_rate({**conf, "acks": "all"}, TOPIC, RECORD, seconds)
    gb = rate["mb_per_s"] * rate["seconds"] / 1000
    brokers = cpu_seconds(pids) - brokers_before
    client = _client_cpu() - client_before
    return {
        "mb_per_s": rate["mb_per_s"],
        "records_per_s": rate["records_per_s"],
        "broker_cpu_s_per_gb": round(brokers / gb, 1) if gb else 0.0,
        "client_cpu_s_per_gb": round(client / gb, 1) if gb else 0.0,
    }


def part_tls(work: Path, seconds: float, rounds: int, fast: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, secure in (("plaintext", False), ("tls_sasl_ssl", True)):
        cluster, conf = _start(work / name, secure, fast)
        try:
            _create(conf)
            _measure(cluster, conf, 1.0)  # warm up: connections, metadata, the ISR
            runs = [_measure(cluster, conf, seconds) for _ in range(rounds)]
        finally:
            cluster.kill_all()
        median = statistics.median(r["mb_per_s"] for r in runs)
        results[name] = next(r for r in runs if r["mb_per_s"] == median) | {"runs": rounds}
        time.sleep(0.5)
    plain, tls = results["plaintext"]["mb_per_s"], results["tls_sasl_ssl"]["mb_per_s"]
    results["tls_throughput_ratio"] = round(tls / plain, 2) if plain else None
    return results
