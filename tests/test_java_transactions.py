"""The reference client's transactional producer (kafka-clients from the peers' jars) against epochkraft
with transaction.version 2 finalized, as a new cluster has it: the producer speaks KIP-890 part 2 (no
AddPartitionsToTxn or AddOffsetsToTxn: the partition leaders add the partitions; EndTxn v5 bumps the epoch
per transaction). A commit, an abort and a commit with the group's offsets; read_committed sees exactly
the committed records. The same program against Apache Kafka is the control, and the differential check
of the epochs EndTxn v5 hands out: both must end at epoch 3 after three transactions."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from epochkraft.harness.cluster import LocalCluster
from epochkraft.peers.fetch import PeerUnavailable, kafka_classpath
from epochkraft.peers.kafka import KafkaPeer

pytestmark = [pytest.mark.slow, pytest.mark.peers, pytest.mark.clients, pytest.mark.timeout(300)]

CHECK = Path(__file__).resolve().parents[1] / "scripts" / "clients" / "java" / "TransactionsCheck.java"
EXPECTED = [
    "OK transaction.version=2",
    "OK transaction 0 commit",
    "OK transaction 1 abort",
    "OK transaction 2 commit",
    "OK describeTransactions state=CompleteCommit producerEpoch=3",  # one bump per EndTxn
    "OK transactional offset committed=42",
    "OK read_committed per transaction=30,0,30",
    "OK read_uncommitted per transaction=30,30,30",
]


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


@pytest.fixture(scope="module")
def log4j(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = tmp_path_factory.mktemp("java-transactions") / "log4j2.properties"
    config.write_text("status = warn\nrootLogger.level = off\n")
    return config


def test_java_transactional_producer_v2_against_epochkraft(
    epochkraft_peer_cluster: LocalCluster, log4j: Path
) -> None:
    assert run_check(epochkraft_peer_cluster.bootstrap, "java-txn-v2", log4j) == EXPECTED


def test_java_transactional_producer_v2_against_kafka(kafka_peer: KafkaPeer, log4j: Path) -> None:
    assert run_check(kafka_peer.bootstrap, "java-txn-v2", log4j) == EXPECTED
