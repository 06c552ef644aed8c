"""The admin APIs through real clients: confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and
aiokafka's admin client against one real cluster."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kio.schema.incremental_alter_configs.v1 import request as ia

from epochkraft.harness.cluster import LocalCluster
from epochkraft.net.client import KafkaClient
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admin")
    # The controller writes its min.insync.replicas as the cluster-level dynamic default at bootstrap
    # (ELR on, as Kafka 4.x), which then outranks the brokers' static value: both say 2.
    broker_cfg, controller_cfg = write_fast_configs(
        tmp / "config",
        broker_extra="min.insync.replicas=2\n",
        controller_extra="min.insync.replicas=2\n",
    )
    cluster = LocalCluster(
        data_dir=tmp / "cluster", brokers=3, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    yield cluster
    cluster.kill_all()


@pytest.fixture(scope="module")
def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def eventually(check: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    """Polls ``check`` until it returns a truthy value (brokers apply metadata shortly after a write)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def create(admin: AdminClient, name: str, partitions: int = 1, rf: int = 3, **config: str) -> None:
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config)])[
        name
    ].result(15)


def describe_topic(admin: AdminClient, name: str) -> dict:
    resource = ConfigResource("topic", name)
    return admin.describe_configs([resource], request_timeout=10)[resource].result(10)


# ---- configs ------------------------------------------------------------------------------------------
def test_confluent_describe_and_alter_topic_configs(admin):
    create(admin, "cfg-confluent", **{"retention.ms": "3600000"})
    configs = describe_topic(admin, "cfg-confluent")
    assert len(configs) >= 25, "every topic config Kafka knows is described"
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    # log.retention.ms has no default in Kafka, so no broker synonym is listed (as Kafka 4.4.0 answers)
    assert [(s.name, s.source) for s in retention.synonyms.values()] == [
        ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
    ]
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    min_isr = configs["min.insync.replicas"]
    assert (min_isr.value, min_isr.source) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    # confluent-kafka keys synonyms by name, so the broker property's two entries show as its last one
    assert min_isr.synonyms["min.insync.replicas"].source == ConfigSource.DEFAULT_CONFIG.value

    resource = ConfigResource(
        "topic",
        "cfg-confluent",
        incremental_configs=[
            ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(10)

    def applied() -> dict | None:
        configs = describe_topic(admin, "cfg-confluent")
        return (
            configs
            if configs["min.insync.replicas"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            else None
        )

    configs = eventually(applied, what="the altered configs to be described")
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = ConfigResource(
        "topic",
        "cfg-confluent",
        incremental_configs=[
            ConfigEntry("min.insync.replicas", "0", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception) as caught:
        admin.incremental_alter_configs([bad])[bad].result(10)
    error = caught.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "Value must be at least 1" in error.str()

    missing = ConfigResource("topic", "no-such-topic")
    with pytest.raises(Exception) as caught:
        admin.describe_configs([missing])[missing].result(10)
    assert caught.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_describe_broker_configs(admin):
    resource = ConfigResource("broker", "1")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["min.insync.replicas"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert configs["replica.lag.time.max.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["replica.lag.time.max.ms"].is_read_only
    assert configs["socket.request.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["min.insync.replicas"].is_read_only


def test_kafka_python_describe_and_alter_configs(cluster, admin):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    create(admin, "cfg-kafka-python")
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    try:
        result = client.alter_configs(
            [KConfigResource(ConfigResourceType.TOPIC, "cfg-kafka-python", {"segment.ms": "60000"})]
        )
        assert result == {"topic": {"cfg-kafka-python": "OK"}}

        def described() -> dict | None:
            found = client.describe_configs(
                [KConfigResource(ConfigResourceType.TOPIC, "cfg-kafka-python")], config_filter="all"
            )
            configs = found["topic"]["cfg-kafka-python"]
            return configs if configs["segment.ms"]["value"] == "60000" else None

        configs = eventually(described, what="kafka-python to see segment.ms")
        assert len(configs) >= 25
        refused = client.alter_configs(
            [KConfigResource(ConfigResourceType.TOPIC, "cfg-kafka-python", {"segment.ms": "zero"})]
        )
        assert "InvalidConfig" in repr(refused["topic"]["cfg-kafka-python"]), refused
    finally:
        client.close()


def test_aiokafka_describe_and_alter_configs(cluster, admin):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource as AConfigResource
    from aiokafka.admin.config_resource import ConfigResourceType as AType

    create(admin, "cfg-aiokafka")

    async def run() -> tuple[Any, Any]:
        client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await client.start()
        try:
            altered = await client.alter_configs(
                [AConfigResource(AType.TOPIC, "cfg-aiokafka", {"retention.bytes": "1000000"})]
            )
            for _ in range(100):
                described = await client.describe_configs([AConfigResource(AType.TOPIC, "cfg-aiokafka")])
                if "1000000" in str(described):
                    break
                await asyncio.sleep(0.2)
            return altered, described
        finally:
            await client.close()

    altered, described = asyncio.run(run())
    assert all(r[0] == 0 for response in altered for r in response.resources), altered
    entries = {c[0]: c for c in described[0].resources[0][4]}
    assert entries["retention.bytes"][1] == "1000000"
    assert len(entries) >= 25


def test_min_insync_replicas_changed_live_is_seen_by_an_acks_all_producer(cluster, admin):
    """With one of three replicas down (ISR of 2), raising the topic's min.insync.replicas to 3 refuses
    acks=all produces at once (NOT_ENOUGH_REPLICAS); set back to 2, the same producer is acknowledged."""
    create(admin, "live-min-isr", rf=3)
    partition = admin.list_topics("live-min-isr", timeout=10).topics["live-min-isr"].partitions[0]
    follower = next(r for r in partition.replicas if r != partition.leader)
    # A produce that reaches the leader before the new min.insync.replicas does is appended, and then waits:
    # the ISR below the new minimum holds the high watermark (KIP-966), so Kafka answers it only at its
    # timeout; kept short here, the next produce meets the new minimum before it is appended.
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "retries": 0,
            "linger.ms": 0,
            "request.timeout.ms": 3000,
            "message.timeout.ms": 3000,
        }
    )

    def produce_one() -> KafkaError | None:
        outcome: list = []
        producer.produce("live-min-isr", b"v", partition=0, on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(10)
        return outcome[0]

    def set_min_isr(value: str) -> None:
        resource = ConfigResource(
            "topic",
            "live-min-isr",
            incremental_configs=[
                ConfigEntry("min.insync.replicas", value, incremental_operation=AlterConfigOpType.SET)
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(10)

    cluster.node(follower).kill()
    try:

        def isr_of_two() -> bool:
            # and the follower fenced: until then Metadata may name it the controller (Kafka's brokers name
            # one at random), and librdkafka sends the topic configs below to the controller it last heard of
            metadata = admin.list_topics("live-min-isr", timeout=10)
            p = metadata.topics["live-min-isr"].partitions[0]
            return len(p.isrs) == 2 and follower not in metadata.brokers

        eventually(isr_of_two, what="the ISR to shrink to two and the follower to be fenced")
        assert produce_one() is None, "two in-sync replicas satisfy the static min.insync.replicas=2"
        set_min_isr("3")

        def refused() -> KafkaError | None:
            error = produce_one()
            return error if error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS else None

        eventually(refused, what="acks=all to be refused NOT_ENOUGH_REPLICAS")
        set_min_isr("2")
        eventually(lambda: produce_one() is None, what="acks=all to be accepted again")
    finally:
        cluster.node(follower).start()


# ---- dynamic broker configs ---------------------------------------------------------------------------
SET = AlterConfigOpType.SET


def alter_broker(
    cluster, broker: str, op: int, validate_only: bool = False, **configs: str
) -> tuple[int, str]:
    """IncrementalAlterConfigs (op: 0 SET, 1 DELETE) of broker ``broker``, "" the cluster-wide default:
    (error code, message). Sent with kio, as librdkafka refuses an empty broker name."""
    entries = tuple(
        ia.AlterableConfig(name=k.replace("_", "."), config_operation=op, value=v or None)
        for k, v in configs.items()
    )
    request = ia.IncrementalAlterConfigsRequest(
        resources=(ia.AlterConfigsResource(resource_type=4, resource_name=broker, configs=entries),),
        validate_only=validate_only,
    )

    async def send() -> tuple[int, str]:
        host, port = cluster.bootstrap.split(",")[0].split(":")
        client = KafkaClient(host, int(port))
        try:
            answer = (await client.send(request)).responses[0]
            return answer.error_code, answer.error_message or ""
        finally:
            await client.close()

    return asyncio.run(send())


def refusal(cluster, admin: AdminClient, broker: str, name: str, value: str) -> str:
    """The INVALID_REQUEST message (Kafka's answer to a refused broker config) a SET of ``name=value`` on ``broker`` gets ("" if accepted): through
    confluent-kafka for a broker id, kio for the cluster-wide default."""
    if broker == "":
        error, message = alter_broker(cluster, "", 0, validate_only=True, **{name: value})
        assert error in (0, KafkaError.INVALID_REQUEST), (error, message)
        return message
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("broker", broker, incremental_configs=[entry])
    try:
        admin.incremental_alter_configs([resource], validate_only=True)[resource].result(10)
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.INVALID_REQUEST, exc
        return exc.args[0].str()
    return ""


def test_every_dynamic_broker_config_kafka_lists_is_accepted_per_broker_and_cluster_wide(cluster, admin):
    """Kafka's DynamicBrokerConfig: its dynamic configs are stored per broker and cluster-wide, with their
    types and validators; read-only ones, SSL stores without a listener prefix, and listener configs
    cluster-wide get Kafka's INVALID_REQUEST with its message (the same answers Kafka 4.4.0 gives)."""
    dynamic = {
        "log.retention.ms": "3600000",
        "log.cleaner.threads": "2",
        "max.connections": "1000",
        "num.io.threads": "8",
        "compression.type": "zstd",
        "log.cleanup.policy": "compact,delete",
    }
    for broker in ("1", ""):
        for name, value in dynamic.items():
            assert refusal(cluster, admin, broker, name, value) == "", (broker, name)
    assert refusal(cluster, admin, "1", "listener.name.plaintext.sasl.enabled.mechanisms", "PLAIN") == ""
    assert refusal(cluster, admin, "1", "sasl.enabled.mechanisms", "PLAIN") == ""
    assert "dynamically: [broker.id]" in refusal(cluster, admin, "1", "broker.id", "7")
    assert "dynamically: [log.retention.hours]" in refusal(cluster, admin, "", "log.retention.hours", "5")
    assert "listener prefix" in refusal(cluster, admin, "1", "ssl.keystore.location", "/x.jks")
    assert "broker id must be specified" in refusal(cluster, admin, "", "sasl.enabled.mechanisms", "PLAIN")
    assert "at least 1" in refusal(cluster, admin, "1", "num.io.threads", "0")
    assert "Not a number" in refusal(cluster, admin, "", "log.retention.ms", "soon")
    assert "CreateTime, LogAppendTime" in refusal(cluster, admin, "", "log.message.timestamp.type", "Later")

    # AlterConfigs (the legacy API) alike
    legacy = ConfigResource("broker", "1", set_config={"log.cleaner.threads": "2", "max.connections": "9"})
    admin.alter_configs([legacy], validate_only=True)[legacy].result(10)
    read_only = ConfigResource("broker", "1", set_config={"broker.id": "7"})
    with pytest.raises(KafkaException, match=r"dynamically: \[broker.id\]"):
        admin.alter_configs([read_only], validate_only=True)[read_only].result(10)
    one = ConfigResource(
        "broker",
        "1",
        incremental_configs=[ConfigEntry("log.cleaner.threads", "2", incremental_operation=SET)],
    )
    admin.incremental_alter_configs([one])[one].result(10)
    assert alter_broker(cluster, "", 0, max_connections="1234") == (0, "")
    try:
        resource = ConfigResource("broker", "1")

        def described() -> dict | None:
            configs = admin.describe_configs([resource])[resource].result(10)
            return configs if configs["max.connections"].value == "1234" else None

        configs = eventually(described, what="the dynamic configs to reach broker 1")
        threads, connections = configs["log.cleaner.threads"], configs["max.connections"]
        assert (threads.value, threads.source) == ("2", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert connections.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        assert not threads.is_read_only and configs["replica.lag.time.max.ms"].is_read_only
    finally:
        alter_broker(cluster, "1", 1, log_cleaner_threads="")
        alter_broker(cluster, "", 1, max_connections="")


def test_cluster_wide_log_message_timestamp_type_and_message_max_bytes_take_effect(cluster, admin):
    """The cluster-wide dynamic defaults of topic configs apply to topics without their own value (the
    topic config's broker synonyms): log.message.timestamp.type=LogAppendTime stamps a new topic's
    records with the append time; message.max.bytes refuses a larger batch (MESSAGE_TOO_LARGE)."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer

    create(admin, "dyn-timestamps", rf=3)
    assert alter_broker(cluster, "", 0, log_message_timestamp_type="LogAppendTime") == (0, "")
    assert alter_broker(cluster, "", 0, message_max_bytes="2000") == (0, "")
    try:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0})

        def produce(value: bytes) -> KafkaError | None:
            outcome: list = []
            producer.produce("dyn-timestamps", value, partition=0, timestamp=1_700_000_000_000,
                             on_delivery=lambda err, _msg: outcome.append(err))  # fmt: skip
            producer.flush(10)
            return outcome[0]

        too_large = eventually(lambda: produce(b"x" * 5000), what="message.max.bytes to apply")
        assert too_large.code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert produce(b"small") is None
        consumer = Consumer(
            {"bootstrap.servers": cluster.bootstrap, "group.id": "dyn-ts", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["dyn-timestamps"])
        message = eventually(lambda: consumer.poll(0.5), what="the record")
        consumer.close()
        kind, timestamp = message.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and timestamp > 1_700_000_000_000
    finally:
        alter_broker(cluster, "", 1, log_message_timestamp_type="", message_max_bytes="")


# ---- partitions, groups, log dirs, producers, elections ------------------------------------------------
def kafka_python_admin(cluster):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15000)


def produce_to(bootstrap: str, topic: str, partitions: list[int], **conf) -> list[tuple[int, int]]:
    """(partition, offset) of one acknowledged record per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    acked: list[tuple[int, int]] = []
    errors: list = []

    def done(err, msg) -> None:
        (errors.append(err) if err else acked.append((msg.partition(), msg.offset())))

    for partition in partitions:
        producer.produce(topic, f"to-{partition}".encode(), partition=partition, on_delivery=done)
    assert producer.flush(20) == 0
    assert not errors, errors
    return sorted(acked)


def test_create_partitions_then_produce_to_the_new_partitions(cluster, admin):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewPartitions as ANewPartitions
    from confluent_kafka.admin import NewPartitions
    from kafka.admin import NewPartitions as KNewPartitions

    create(admin, "grow", partitions=1, rf=2)
    admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(15)
    client = kafka_python_admin(cluster)
    try:
        client.create_partitions({"grow": KNewPartitions(total_count=4)})
        with pytest.raises(Exception, match=r"(?i)invalid.?partitions"):
            client.create_partitions({"grow": KNewPartitions(total_count=2)})
    finally:
        client.close()

    async def grow_with_aiokafka() -> None:
        client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await client.start()
        try:
            await client.create_partitions({"grow": ANewPartitions(total_count=5)})
        finally:
            await client.close()

    asyncio.run(grow_with_aiokafka())
    topic = eventually(
        lambda: (t := admin.list_topics("grow", timeout=10).topics["grow"]) and len(t.partitions) == 5 and t,
        what="five partitions in Metadata",
    )
    assert all(len(p.replicas) == 2 and len(p.isrs) == 2 for p in topic.partitions.values())
    assert produce_to(cluster.bootstrap, "grow", [1, 2, 3, 4]) == [(1, 0), (2, 0), (3, 0), (4, 0)]


def commit_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, p, 1) for p in range(partitions)], asynchronous=False)
    consumer.close()


def committed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request)[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def test_delete_groups_and_offsets(cluster, admin):
    create(admin, "grouped-admin", partitions=2, rf=3)
    produce_to(cluster.bootstrap, "grouped-admin", [0, 1])
    for group in ("gone-confluent", "gone-kafka-python", "trimmed"):
        commit_offsets(cluster.bootstrap, group, "grouped-admin", 2)
    assert committed_offsets(admin, "trimmed") == {("grouped-admin", 0): 1, ("grouped-admin", 1): 1}

    admin.delete_consumer_groups(["gone-confluent"])["gone-confluent"].result(10)
    with pytest.raises(Exception) as caught:
        admin.delete_consumer_groups(["never-existed"])["never-existed"].result(10)
    assert caught.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    assert committed_offsets(admin, "gone-confluent") == {}

    from kafka import TopicPartition as KTopicPartition

    client = kafka_python_admin(cluster)
    try:
        results = client.delete_groups(["gone-kafka-python", "never"])
        assert results["gone-kafka-python"] == "OK", results
        assert "GroupIdNotFound" in results["never"], results
        deleted = client.delete_group_offsets("trimmed", [KTopicPartition("grouped-admin", 0)])
        assert {tp: e.__name__ for tp, e in deleted.items()} == {
            KTopicPartition("grouped-admin", 0): "NoError"
        }
    finally:
        client.close()
    assert committed_offsets(admin, "gone-kafka-python") == {}
    assert committed_offsets(admin, "trimmed") == {("grouped-admin", 1): 1}


def alter_offset_error(admin: AdminClient, group: str, topic: str) -> int:
    """The error of an AlterConsumerGroupOffsets of the topic's partition 0 to offset 0 (an OffsetCommit
    with generation -1 and no member id)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])]
    try:
        result = admin.alter_consumer_group_offsets(request)[group].result(10)
    except KafkaException as e:
        return e.args[0].code()
    errors = [tp.error.code() for tp in result.topic_partitions if tp.error is not None]
    return errors[0] if errors else KafkaError.NO_ERROR


def test_alter_offsets_of_a_classic_group_with_members_is_refused(cluster, admin):
    """ClassicGroup.validateOffsetCommit: an admin's commit without a member may not overwrite the offsets
    of a group with members (UNKNOWN_MEMBER_ID); once the group is Empty it may."""
    from confluent_kafka import Consumer

    create(admin, "live-offsets", partitions=1, rf=3)
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "live-offsets", "enable.auto.commit": False}
    )
    try:
        consumer.subscribe(["live-offsets"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment(), "the consumer joined the group"
        assert alter_offset_error(admin, "live-offsets", "live-offsets") == KafkaError.UNKNOWN_MEMBER_ID
    finally:
        consumer.close()
    eventually(
        lambda: alter_offset_error(admin, "live-offsets", "live-offsets") == KafkaError.NO_ERROR,
        what="the Empty group's offsets altered",
    )


def test_describe_log_dirs_topic_partitions_and_producers(cluster, admin):
    from kafka import TopicPartition as KTopicPartition

    create(admin, "described", partitions=5, rf=3)
    produce_to(cluster.bootstrap, "described", [0], **{"enable.idempotence": True})
    client = kafka_python_admin(cluster)
    try:
        log_dirs = client.describe_log_dirs()
        assert sorted(answer["broker"] for answer in log_dirs) == [1, 2, 3], "one answer per broker"
        for answer in log_dirs:
            (log_dir,) = answer["log_dirs"]
            assert log_dir["error_code"] == 0 and log_dir["usable_bytes"] > 0
            (topic,) = [t for t in log_dir["topics"] if t["name"] == "described"]
            sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
            assert sizes[0] > 0 and sizes[1] == 0, "every replica holds the one record of partition 0"

        first = client.describe_topic_partitions(["described"], response_partition_limit=2)
        assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
        assert first["next_cursor"] == {"topic_name": "described", "partition_index": 2}
        rest = client.describe_topic_partitions(
            ["described"], response_partition_limit=10, cursor=first["next_cursor"]
        )
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2, 3, 4]
        assert rest["next_cursor"] is None
        assert all(len(p["isr_nodes"]) == 3 for p in rest["topics"][0]["partitions"])

        producers = client.describe_producers([KTopicPartition("described", 0)])
        (active,) = producers[KTopicPartition("described", 0)].active_producers
        assert (active.producer_epoch, active.last_sequence) == (0, 0)
    finally:
        client.close()


def test_elect_leaders_on_the_broker_listener(cluster, admin):
    from confluent_kafka import ElectionType, TopicPartition

    create(admin, "elected", partitions=1, rf=3)
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elected", 0)]).result(10)
    assert result[TopicPartition("elected", 0)].code() == KafkaError.ELECTION_NOT_NEEDED
    client = kafka_python_admin(cluster)
    try:
        response = client.elect_leaders(0, {"elected": [0]}, raise_errors=False)
        (topic,) = response.replica_election_results
        assert [(p.partition_id, p.error_code) for p in topic.partition_result] == [(0, 84)]  # NOT_NEEDED
    finally:
        client.close()


# ---- Go's sarama ---------------------------------------------------------------------------------------
SARAMA_ADMIN = Path(__file__).resolve().parent.parent / "scripts" / "clients" / "sarama_admin"


def test_sarama_cluster_admin(cluster, tmp_path):
    """sarama's ClusterAdmin: ListTopics (which calls DescribeConfigs), IncrementalAlterConfig,
    AlterConfig, CreatePartitions, DeleteConsumerGroupOffset, DeleteConsumerGroup, DescribeLogDirs,
    AlterPartitionReassignments and ListPartitionReassignments (scripts/clients/sarama_admin/main.go).
    The sarama module is fetched from the Go module proxy at the version go.sum pins (as the peers are);
    skipped only where there is no Go toolchain or the proxy cannot be reached."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain")
    binary = tmp_path / "sarama_admin"
    build = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=SARAMA_ADMIN,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if build.returncode != 0:
        pytest.skip(f"sarama could not be fetched or built: {build.stderr[-300:]}")
    run = subprocess.run([str(binary), cluster.bootstrap], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "FAILED" not in run.stdout, run.stdout + run.stderr
    # PlaintextAdminIntegrationTest.testNullConfigs: a null value is the broker's INVALID_REQUEST
    # (ConfigAdminManager.preprocess), for a topic and for a group config
    # (sarama words INVALID_REQUEST "This most likely occurs because of a request being malformed...")
    assert "malformed by the client library" in run.stdout, run.stdout
    assert "Null value not supported for : min.insync.replicas" in run.stdout, run.stdout
    assert (
        "null group value refused: Null value not supported for : consumer.session.timeout.ms" in run.stdout
    )
