"""The reference client, kafka-clients from the Kafka jars the peers use, against epochkraft: admin calls,
an idempotent producer with each codec (none, gzip, snappy, lz4, zstd), and a consumer group on the
classic protocol reading everything back and committing. The same program against Apache Kafka is the
control: a check that fails there is the check's fault, not ours."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from epochkraft.harness.cluster import LocalCluster
from epochkraft.peers.fetch import PeerUnavailable, kafka_classpath
from epochkraft.peers.kafka import KafkaPeer

pytestmark = [pytest.mark.slow, pytest.mark.peers, pytest.mark.clients, pytest.mark.timeout(300)]

CHECK = Path(__file__).resolve().parents[1] / "scripts" / "clients" / "java" / "JavaClientCheck.java"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def run_check(bootstrap: str, topic: str, log4j: Path) -> list[str]:
    try:
        classpath = kafka_classpath()
    except PeerUnavailable as exc:
        pytest.skip(f"kafka-clients unavailable: {exc}")
    result = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath,
         str(CHECK), bootstrap, topic],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"
    return [line for line in result.stdout.splitlines() if line.startswith("OK ")]


def expected_lines() -> list[str]:
    return [
        "OK createTopics",
        "OK describeCluster brokers=3",
        # No authorizer: every operation Kafka supports on each resource (AclEntry.supportedOperations).
        "OK describeCluster authorizedOperations=ALTER,ALTER_CONFIGS,CLUSTER_ACTION,CREATE,DESCRIBE,"
        "DESCRIBE_CONFIGS,IDEMPOTENT_WRITE",
        "OK describeTopics partitions=3 isr=3",
        "OK describeTopics authorizedOperations=ALTER,ALTER_CONFIGS,CREATE,DELETE,DESCRIBE,DESCRIBE_CONFIGS,"
        "READ,WRITE",
        "OK listTopics",
        "OK incrementalAlterConfigs+describeConfigs retention.ms=86400000",
        *(f"OK idempotent producer compression.type={codec} records=200" for codec in CODECS),
        "OK consumer group read=1000 assigned=3",
        "OK listConsumerGroupOffsets partitions=3 total=1000",
        "OK describeConsumerGroups state=Empty",
        "OK describeConsumerGroups authorizedOperations=ALTER_CONFIGS,DELETE,DESCRIBE,DESCRIBE_CONFIGS,READ",
        "OK deleteConsumerGroups",
        "OK deleteTopics",
    ]


@pytest.fixture(scope="module")
def log4j(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = tmp_path_factory.mktemp("java-client") / "log4j2.properties"
    config.write_text("status = warn\nrootLogger.level = off\n")
    return config


def test_java_client_against_epochkraft(epochkraft_peer_cluster: LocalCluster, log4j: Path) -> None:
    assert run_check(epochkraft_peer_cluster.bootstrap, "java-client", log4j) == expected_lines()


def test_java_client_against_kafka(kafka_peer: KafkaPeer, log4j: Path) -> None:
    assert run_check(kafka_peer.bootstrap, "java-client", log4j) == expected_lines()
