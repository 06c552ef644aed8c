"""Apache Kafka's own command-line tools against epochkraft, each run by its main class from the Kafka
jars the peers use (the shell scripts are not in the Maven artifacts): topics, configs, the console
producer and consumer, consumer groups, partition reassignment, leader election, log dirs, the
producer/consumer performance tools and the metadata quorum tool. One test each, bounded by the tool's own options and a timeout."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from epochkraft.harness.cluster import LocalCluster
from epochkraft.peers.fetch import PeerUnavailable, java_command, kafka_libs

pytestmark = [pytest.mark.slow, pytest.mark.peers, pytest.mark.timeout(180)]

QUIET_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = ERR
"""


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        kafka_libs()
    except PeerUnavailable as exc:
        pytest.skip(f"Apache Kafka's jars unavailable: {exc}")
    config = tmp_path_factory.mktemp("tools") / "log4j2.properties"
    config.write_text(QUIET_LOG4J2)
    return config


@pytest.fixture(scope="module")
def bootstrap(epochkraft_peer_cluster: LocalCluster) -> str:
    return epochkraft_peer_cluster.bootstrap


def run_tool(log4j: Path, main_class: str, *args: str, stdin: str | None = None, timeout: float = 120):
    # C1 only: a tool's JVM starts and finishes sooner, and none runs long enough for C2 to pay off
    jvm = [f"-Dlog4j2.configurationFile={log4j}", "-XX:TieredStopAtLevel=1"]
    command = java_command(main_class, list(args), heap_mb=256, jvm=jvm)
    result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (
        f"{main_class} {args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def run_until(log4j: Path, main_class: str, *args: str, ready, tries: int = 10) -> str:
    """Runs a describing tool until its output shows ``ready``: a change is acknowledged by the controller
    and reaches the broker the tool asks shortly after, with Kafka's brokers as with ours."""
    for _ in range(tries):
        out = run_tool(log4j, main_class, *args)
        if ready(out):
            return out
        time.sleep(0.5)
    return out


def create_topic(tools: Path, bootstrap: str, topic: str, partitions: int = 1, rf: int = 3) -> None:
    run_tool(
        tools, TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", topic,
        "--partitions", str(partitions), "--replication-factor", str(rf),
    )  # fmt: skip


def test_kafka_topics_create_describe_alter_partitions(tools: Path, bootstrap: str) -> None:
    create_topic(tools, bootstrap, "tool-topics", partitions=2)
    describe = ["--bootstrap-server", bootstrap, "--describe", "--topic", "tool-topics"]
    described = run_until(tools, TOPICS, *describe, ready=lambda out: "PartitionCount: 2" in out)
    assert "PartitionCount: 2" in described and "ReplicationFactor: 3" in described, described
    run_tool(
        tools,
        TOPICS,
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--topic",
        "tool-topics",
        "--partitions",
        "4",
    )
    described = run_until(tools, TOPICS, *describe, ready=lambda out: "PartitionCount: 4" in out)
    assert "PartitionCount: 4" in described, described
    listed = run_tool(tools, TOPICS, "--bootstrap-server", bootstrap, "--list")
    assert "tool-topics" in listed.split()


def test_kafka_configs_alter_and_describe(tools: Path, bootstrap: str) -> None:
    create_topic(tools, bootstrap, "tool-configs")
    entity = ["--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", "tool-configs"]
    run_tool(tools, CONFIGS, *entity, "--alter", "--add-config", "retention.ms=3600000,min.insync.replicas=2")
    described = run_until(
        tools, CONFIGS, *entity, "--describe", ready=lambda out: "min.insync.replicas=2" in out
    )
    assert "retention.ms=3600000" in described and "min.insync.replicas=2" in described, described
    run_tool(tools, CONFIGS, *entity, "--alter", "--delete-config", "retention.ms")
    described = run_until(
        tools, CONFIGS, *entity, "--describe", ready=lambda out: "retention.ms=3600000" not in out
    )
    assert "retention.ms=3600000" not in described and "min.insync.replicas=2" in described, described


def test_kafka_configs_groups(tools: Path, bootstrap: str) -> None:
    """kafka-configs --entity-type groups (IncrementalAlterConfigs and DescribeConfigs on GROUP): a group's
    consumer.session.timeout.ms and heartbeat interval set, described with Kafka's sources, one refused
    below the broker's group.consumer.min.session.timeout.ms with Kafka's message, and one deleted."""
    entity = ["--bootstrap-server", bootstrap, "--entity-type", "groups", "--entity-name", "tool-cg"]
    run_tool(tools, CONFIGS, *entity, "--alter", "--add-config",
             "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")  # fmt: skip
    described = run_until(tools, CONFIGS, *entity, "--describe", ready=lambda out: "=6000" in out)
    assert (
        "consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}"
    ) in described, described
    assert "consumer.heartbeat.interval.ms=6000" in described, described
    refused = subprocess.run(
        java_command(CONFIGS, [*entity, "--alter", "--add-config", "consumer.session.timeout.ms=1000"],
                     jvm=[f"-Dlog4j2.configurationFile={tools}", "-XX:TieredStopAtLevel=1"]),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode != 0
    assert (
        "InvalidConfigurationException: consumer.session.timeout.ms must be greater than or equal to "
        "group.consumer.min.session.timeout.ms"
    ) in refused.stdout + refused.stderr
    run_tool(tools, CONFIGS, *entity, "--alter", "--delete-config", "consumer.heartbeat.interval.ms")
    described = run_until(tools, CONFIGS, *entity, "--describe", ready=lambda out: "=6000" not in out)
    assert "=6000" not in described and "consumer.session.timeout.ms=50000" in described, described


def test_kafka_configs_client_quotas(tools: Path, bootstrap: str) -> None:
    """kafka-configs --entity-type users|clients (AlterClientQuotas, then DescribeClientQuotas): a user's,
    a client id's and a (user, client id)'s quotas added, described and deleted."""
    entities = {
        "user": ["--entity-type", "users", "--entity-name", "tool-alice"],
        "client": ["--entity-type", "clients", "--entity-name", "tool-app"],
        "both": ["--entity-type", "users", "--entity-name", "tool-bob", "--entity-type", "clients", "--entity-name", "tool-app"],
    }  # fmt: skip
    for entity in entities.values():
        run_tool(tools, CONFIGS, "--bootstrap-server", bootstrap, *entity, "--alter",
                 "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152,request_percentage=50")  # fmt: skip
    for entity in entities.values():
        describe = ["--bootstrap-server", bootstrap, *entity, "--describe"]
        described = run_until(
            tools, CONFIGS, *describe, ready=lambda out: "producer_byte_rate=1048576" in out
        )
        for quota in ("producer_byte_rate=1048576", "consumer_byte_rate=2097152", "request_percentage=50"):
            assert quota in described, described
    user = ["--bootstrap-server", bootstrap, *entities["user"]]
    run_tool(tools, CONFIGS, *user, "--alter", "--delete-config", "producer_byte_rate")
    described = run_until(
        tools, CONFIGS, *user, "--describe", ready=lambda out: "producer_byte_rate" not in out
    )
    assert "producer_byte_rate" not in described and "consumer_byte_rate=2097152" in described, described


# ApiVersions v0 (key 18), correlation id 1, client id "flood": answered by a connection being served
API_VERSIONS_V0 = struct.pack(">ihhih5s", 15, 18, 0, 1, 5, b"flood")


def answered_connections(broker: str, source_ip: str, count: int) -> int:
    """Opens ``count`` connections to ``broker`` from ``source_ip`` at once, each sending ApiVersions; how many
    are answered (the others are closed unanswered: throttled by their address's creation rate)."""
    host, port = broker.rsplit(":", 1)
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((source_ip, 0))
            sock.settimeout(5)
            sock.connect((host, int(port)))
            sock.sendall(API_VERSIONS_V0)
            sockets.append(sock)
        answered = 0
        for sock in sockets:
            with contextlib.suppress(OSError):
                answered += len(sock.recv(4)) == 4
        return answered
    finally:
        for sock in sockets:
            sock.close()


def test_kafka_configs_ip_connection_creation_rate(tools: Path, bootstrap: str) -> None:
    """kafka-configs --entity-type ips (KIP-612's connection_creation_rate, as ClientQuotaRecords in the
    metadata log): a broker closes the connections of the address over its rate, unanswered. The clients
    connect from 127.0.0.2 so the other tests' clients (127.0.0.1) are left alone."""
    entity = ["--bootstrap-server", bootstrap, "--entity-type", "ips", "--entity-name", "127.0.0.2"]
    broker = bootstrap.split(",")[0]
    assert answered_connections(broker, "127.0.0.2", 80) == 80, "no quota yet"
    run_tool(tools, CONFIGS, *entity, "--alter", "--add-config", "connection_creation_rate=5")
    described = run_until(
        tools, CONFIGS, *entity, "--describe", ready=lambda out: "connection_creation_rate=5" in out
    )
    assert "connection_creation_rate=5" in described, described
    try:
        # 5 a second over quota.window.num (11) one-second samples: about 50 of a burst are let in (a
        # burst may reach the broker before the quota does: it is not measured then)
        answered = [answered_connections(broker, "127.0.0.2", 80)]
        if answered[0] == 80:
            answered.append(answered_connections(broker, "127.0.0.2", 80))
        assert 0 < answered[-1] <= 5 * 11 + 1, answered
        assert answered_connections(broker, "127.0.0.3", 20) == 20, "another address is not held"
    finally:
        run_tool(tools, CONFIGS, *entity, "--alter", "--delete-config", "connection_creation_rate")
    for _ in range(20):  # once the broker has the removal, nothing holds the address
        if answered_connections(broker, "127.0.0.2", 20) == 20:
            break
        time.sleep(0.5)
    else:
        pytest.fail("connections from 127.0.0.2 still throttled after the quota was removed")


def test_kafka_console_producer_and_consumer(tools: Path, bootstrap: str) -> None:
    create_topic(tools, bootstrap, "tool-console")
    lines = [f"line-{i}" for i in range(5)]
    run_tool(
        tools,
        PRODUCER,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "tool-console",
        stdin="\n".join(lines) + "\n",
    )
    out = run_tool(
        tools, CONSUMER, "--bootstrap-server", bootstrap, "--topic", "tool-console", "--from-beginning",
        "--max-messages", "5", "--timeout-ms", "60000",
    )  # fmt: skip
    assert out.split() == lines


def test_kafka_consumer_groups_describe_and_reset_offsets(tools: Path, bootstrap: str) -> None:
    create_topic(tools, bootstrap, "tool-groups")
    run_tool(tools, PRODUCER, "--bootstrap-server", bootstrap, "--topic", "tool-groups", stdin="a\nb\nc\n")
    run_tool(
        tools, CONSUMER, "--bootstrap-server", bootstrap, "--topic", "tool-groups", "--from-beginning",
        "--group", "tool-group", "--max-messages", "3", "--timeout-ms", "60000",
    )  # fmt: skip
    group = ["--bootstrap-server", bootstrap, "--group", "tool-group"]
    described = run_tool(tools, GROUPS, *group, "--describe")
    row = next(line.split() for line in described.splitlines() if "tool-groups" in line)
    assert row[:5] == ["tool-group", "tool-groups", "0", "3", "3"], described  # offset 3, end 3, lag 0
    reset = run_tool(
        tools, GROUPS, *group, "--reset-offsets", "--topic", "tool-groups", "--to-earliest", "--execute"
    )
    assert any(line.split()[-1] == "0" for line in reset.splitlines() if "tool-groups" in line), reset
    described = run_tool(tools, GROUPS, *group, "--describe")
    row = next(line.split() for line in described.splitlines() if "tool-groups" in line)
    assert row[3:6] == ["0", "3", "3"], described
    assert "tool-group" in run_tool(tools, GROUPS, "--bootstrap-server", bootstrap, "--list").split()


def test_kafka_reassign_partitions(tools: Path, bootstrap: str, tmp_path: Path) -> None:
    create_topic(tools, bootstrap, "tool-reassign", rf=2)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "tool-reassign", "partition": 0, "replicas": [3, 1]}]}
        )
    )
    main = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    run_tool(tools, main, "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), "--execute")
    for _ in range(30):
        verified = run_tool(
            tools, main, "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), "--verify"
        )
        if "Reassignment of partition tool-reassign-0 is completed" in verified:
            break
    else:
        pytest.fail(f"reassignment not completed: {verified}")
    described = run_tool(
        tools, TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", "tool-reassign"
    )
    assert "Replicas: 3,1" in described, described


def test_kafka_leader_election(tools: Path, bootstrap: str) -> None:
    create_topic(tools, bootstrap, "tool-election")
    out = run_tool(
        tools, "org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", bootstrap,
        "--election-type", "preferred", "--topic", "tool-election", "--partition", "0",
    )  # fmt: skip
    # The preferred replica already leads: Kafka's tool reports that, not a failure.
    assert "Valid replica already elected for partitions tool-election-0" in out, out


def test_kafka_log_dirs(tools: Path, bootstrap: str) -> None:
    create_topic(tools, bootstrap, "tool-logdirs")
    out = run_tool(
        tools, "org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", bootstrap, "--describe",
        "--broker-list", "1,2,3", "--topic-list", "tool-logdirs",
    )  # fmt: skip
    report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert sorted(b["broker"] for b in report["brokers"]) == [1, 2, 3]
    for broker in report["brokers"]:
        (log_dir,) = broker["logDirs"]
        assert log_dir["error"] is None
        assert [p["partition"] for p in log_dir["partitions"]] == ["tool-logdirs-0"]


def test_kafka_producer_and_consumer_performance(tools: Path, bootstrap: str) -> None:
    create_topic(tools, bootstrap, "tool-perf")
    out = run_tool(
        tools, "org.apache.kafka.tools.ProducerPerformance", "--topic", "tool-perf", "--num-records", "2000",
        "--record-size", "1024", "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5",
    )  # fmt: skip
    assert "2000 records sent" in out, out
    out = run_tool(
        tools, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
        "--topic", "tool-perf", "--messages", "2000", "--timeout", "60000",
    )  # fmt: skip
    header, row = [line for line in out.splitlines() if line.strip()][-2:]
    fields = dict(
        zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")], strict=False)
    )
    assert int(fields["data.consumed.in.nMsg"]) == 2000, out


FEATURES = "org.apache.kafka.tools.FeatureCommand"
ELR_FEATURE = "eligible.leader.replicas.version"
TV_FEATURE = "transaction.version"


def feature_line(out: str, name: str) -> str:
    return next((line for line in out.splitlines() if line.split()[:2] == ["Feature:", name]), "")


def test_kafka_features_describe_downgrade_upgrade(tools: Path, bootstrap: str) -> None:
    """kafka-features (FeatureCommand) through the Admin client: describeFeatures (ApiVersions' finalized
    features) and updateFeatures (UpdateFeatures, forwarded to the controller), two features in one
    request; the cluster ends with ELR on and transaction.version 2 again, as it started."""
    described = run_tool(tools, FEATURES, "--bootstrap-server", bootstrap, "describe")
    elr, tv = feature_line(described, ELR_FEATURE), feature_line(described, TV_FEATURE)
    assert "SupportedMinVersion: 0" in elr and "SupportedMaxVersion: 1" in elr, described
    assert "FinalizedVersionLevel: 1" in elr, described
    assert "SupportedMaxVersion: 2" in tv and "FinalizedVersionLevel: 2" in tv, described
    assert "FinalizedVersionLevel: 4.0-IV3" in feature_line(described, "metadata.version"), described
    run_tool(
        tools, FEATURES, "--bootstrap-server", bootstrap, "downgrade",
        "--feature", f"{ELR_FEATURE}=0", "--feature", f"{TV_FEATURE}=0",
    )  # fmt: skip
    described = run_tool(tools, FEATURES, "--bootstrap-server", bootstrap, "describe")
    assert "FinalizedVersionLevel: 0" in feature_line(described, ELR_FEATURE), described
    assert "FinalizedVersionLevel: 0" in feature_line(described, TV_FEATURE), described
    run_tool(
        tools, FEATURES, "--bootstrap-server", bootstrap, "upgrade",
        "--feature", f"{ELR_FEATURE}=1", "--feature", f"{TV_FEATURE}=2",
    )  # fmt: skip
    described = run_tool(tools, FEATURES, "--bootstrap-server", bootstrap, "describe")
    assert "FinalizedVersionLevel: 1" in feature_line(described, ELR_FEATURE), described
    assert "FinalizedVersionLevel: 2" in feature_line(described, TV_FEATURE), described


METADATA_QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"


def quorum_status(out: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v}


def test_kafka_metadata_quorum_describe_a_single_controller(tools: Path, bootstrap: str) -> None:
    """One controller is a quorum of one: itself, leading epoch 0, its log end the high watermark."""
    status = quorum_status(
        run_tool(tools, METADATA_QUORUM, "--bootstrap-server", bootstrap, "describe", "--status")
    )
    assert status["LeaderId"] == "0" and status["LeaderEpoch"] == "0", status
    assert int(status["HighWatermark"]) > 0 and status["CurrentVoters"] == '[{"id": 0}]', status


def test_kafka_metadata_quorum_describe_a_raft_quorum(tools: Path, tmp_path: Path) -> None:
    """kafka-metadata-quorum describe --status and --replication, through a broker and straight to the
    controllers (bootstrap.controllers: DescribeCluster finds the leader), against three voters."""
    cluster = LocalCluster(data_dir=tmp_path / "quorum", brokers=1, controllers=3)
    try:
        cluster.start()
        via_broker = run_until(
            tools, METADATA_QUORUM, "--bootstrap-server", cluster.bootstrap, "describe", "--status",
            ready=lambda out: "LeaderId" in out,
        )  # fmt: skip
        status = quorum_status(via_broker)
        assert status["LeaderId"] in ("3000", "3001", "3002"), status
        # DescribeQuorum v2: each voter with its directory id and endpoints (a dynamic quorum's)
        assert re.findall(r'"id": (\d+)', status["CurrentVoters"]) == ["3000", "3001", "3002"], status
        assert status["CurrentVoters"].count('"directoryId"') == 3, status
        # the broker follows the active controller's log as Kafka's brokers do: an observer of the leader
        replication = run_until(
            tools, METADATA_QUORUM, "--bootstrap-controller", cluster.controller_addresses,
            "describe", "--replication", ready=lambda out: "Observer" in out,
        )  # fmt: skip
        rows = [line.split() for line in replication.splitlines()[1:] if line.strip()]
        assert sorted(row[0] for row in rows if row[-1] != "Observer") == ["3000", "3001", "3002"], (
            replication
        )
        assert [row[0] for row in rows if row[-1] == "Observer"] == ["1"], replication
        assert [row[0] for row in rows if row[-1] == "Leader"] == [status["LeaderId"]], replication
        assert all(int(row[2]) > 0 for row in rows), replication  # each voter's log end offset
    finally:
        cluster.stop()
        cluster.kill_all()
