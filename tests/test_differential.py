"""Differential conformance against Apache Kafka: every API and version the broker listener serves (and
Kafka serves too), each with its error paths, sent as the same kio-built bytes to a real Kafka cluster and
to epochkraft; the answers must match field by field, except the masked fields and the differences listed
in ``KNOWN_DIFFERENCES`` (each with its reason, as the known-differences table in
docs/kafka-compatibility.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.alter_configs.v2 import request as ac
from kio.schema.alter_partition_reassignments.v0 import request as ar
from kio.schema.alter_partition_reassignments.v0.response import AlterPartitionReassignmentsResponse
from kio.schema.create_partitions.v3 import request as cp
from kio.schema.create_topics.v7 import request as ct
from kio.schema.elect_leaders.v2 import request as el
from kio.schema.elect_leaders.v2.response import ElectLeadersResponse
from kio.schema.incremental_alter_configs.v1 import request as ia
from kio.schema.offset_commit.v9 import request as oc
from kio.schema.produce.v9 import request as pr

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.net.errors import NetworkError
from epochkraft.peers.differential import (
    KNOWN_DIFFERENCES,
    LIST_GROUPS,
    USED,
    Difference,
    Side,
    differences,
    error_codes,
    unexplained,
)
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import API_VERSIONS_KEY
from epochkraft.protocol.kio_extra import ApiVersionsRequestV5
from epochkraft.protocol.records import TIMESTAMP_TYPE_BIT, build_batch, decode_batches
from epochkraft.server.handlers import served
from tests.support.kio_requests import Scenario, request_for

pytestmark = [pytest.mark.slow, pytest.mark.peers, pytest.mark.timeout(300)]

TOPIC = "diff"
UNKNOWN_TOPIC = "diff-no-such-topic"
ERRORS_GROUP = "diff-errors"
DELETE_TOPICS_KEY = 20
# A timestamp of today: records years old would be deleted by retention.ms (7 days) within the run.
RECORDS = build_batch([(b"k", b"differential", (), int(time.time() * 1000))])


@dataclasses.dataclass
class Pair:
    """Kafka and epochkraft, each with the swept topic created the same way, and Kafka's API versions."""

    kafka: Side
    ours: Side
    kafka_versions: dict[int, tuple[int, int]]
    topic_ids: dict[str, uuid.UUID]  # side name -> the swept topic's id there
    loop: asyncio.AbstractEventLoop  # the connections' loop, shared by the module's tests

    def run(self, coro):
        return self.loop.run_until_complete(coro)


async def _prepare(side: Side) -> uuid.UUID:
    client = MiniClient(f"{side.bootstrap[0]}:{side.bootstrap[1]}")
    try:
        error = await client.create_topic(TOPIC, -1, -1, assignment=[[1, 2, 3]])
        assert error in (ErrorCode.none, ErrorCode.topic_already_exists), (side.name, error)
        for _ in range(100):  # every broker knows the topic and its leader
            metadata = await side.metadata(TOPIC)
            partitions = metadata.topics[0].partitions
            if partitions and partitions[0].leader_id == 1 and len(partitions[0].isr_nodes) == 3:
                break
            await asyncio.sleep(0.1)
        error, _offset, _ = await client.produce_batch(TOPIC, 0, RECORDS)
        assert error == ErrorCode.none, (side.name, error)
        return metadata.topics[0].topic_id
    finally:
        await client.close()


@pytest.fixture(scope="module")
def pair(kafka_peer: KafkaPeer, epochkraft_peer_cluster: LocalCluster) -> Iterator[Pair]:
    kafka = Side("kafka", kafka_peer.bootstrap)
    ours = Side("epochkraft", epochkraft_peer_cluster.bootstrap)

    async def setup() -> Pair:
        ids = {side.name: await _prepare(side) for side in (kafka, ours)}
        versions = await kafka.client(kafka.bootstrap).api_versions()
        kafka_versions = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        return Pair(kafka, ours, kafka_versions, ids, loop)

    loop = asyncio.new_event_loop()
    try:
        yield loop.run_until_complete(setup())
        loop.run_until_complete(kafka.close())
        loop.run_until_complete(ours.close())
    finally:
        loop.close()


# The ACL APIs with valid enums (the sweep's zeros are UNKNOWN, which Kafka fails to parse and answers by
# closing the connection; see ERROR_CASES): READ, ALLOW, LITERAL, TOPIC, one principal and any host.
ACL_FIELDS = {
    "operation": 3,
    "permission_type": 3,
    "pattern_type_filter": 3,
    "resource_pattern_type": 3,
    "resource_type_filter": 2,
    "principal": "User:alice",
    "principal_filter": "User:alice",
    "host": "*",
    "host_filter": "*",
}
ACL_KEYS = frozenset({29, 30, 31})


def scenarios(
    key: int, version: int, topic_id: uuid.UUID, topic: str = TOPIC, unknown_topic: str = UNKNOWN_TOPIC
) -> list[Scenario]:
    common: dict = {"records": RECORDS}
    if key in ACL_KEYS:
        common["overrides"] = ACL_FIELDS
    # A name of its own: Metadata v0-3 creates the topics it names, and no other request may find it.
    unknown = f"{unknown_topic}-{key}-v{version}"
    cases = [
        Scenario("existing", topic, topic_id, **common),
        Scenario("unknown-topic", unknown, uuid.UUID(int=7), **common),
        Scenario("out-of-range", topic, topic_id, offset=10**12, **common),
        Scenario("unknown-partition", topic, topic_id, partition=7, **common),
        Scenario(
            "future-leader-epoch",
            topic,
            topic_id,
            **{**common, "overrides": {**common.get("overrides", {}), "current_leader_epoch": 99}},
        ),
    ]
    if key == DELETE_TOPICS_KEY:  # the swept topic must survive: deletion is compared on unknown topics
        cases = [c for c in cases if c.topic == unknown]
    return cases


async def compare(pair: Pair, key: int, version: int, scenario: Scenario) -> list[Difference]:
    answers = []
    for side in (pair.kafka, pair.ours):
        topic_id = pair.topic_ids[side.name] if scenario.topic == TOPIC else scenario.topic_id
        s = dataclasses.replace(scenario, topic_id=topic_id)
        answers.append(await _send(side, key, s, request_for(key, version, s)))
    theirs, ours = answers
    if isinstance(theirs, str) or isinstance(ours, str):
        return [] if theirs == ours else [Difference("connection", ours, theirs)]
    return differences(ours, theirs)


# The JoinGroup sweep's groups: members that never sync or heartbeat, and pending members that never rejoin,
# whose groups change state on session timers the sweep does not control, so that when ListGroups reads them
# decides their state on each side. ListGroups compares the other sweeps' groups.
TIMER_DRIVEN_GROUPS = "diff-11-"


async def _send(side: Side, key: int, s: Scenario, request) -> object:
    try:
        answer = await side.exchange(key, request, TOPIC if s.topic == TOPIC else None, s.group)
    except NetworkError:
        return "closed"
    if key == LIST_GROUPS:
        answer = dataclasses.replace(
            answer, groups=tuple(g for g in answer.groups if not g.group_id.startswith(TIMER_DRIVEN_GROUPS))
        )
    return answer


def common_versions(pair: Pair, key: int) -> range:
    spec = served(BROKER)[key]
    low, high = pair.kafka_versions.get(key, (1, 0))
    return range(max(low, spec.min_version), min(high, spec.max_version) + 1)


@pytest.mark.parametrize(
    "key", [k for k in served(BROKER) if k != API_VERSIONS_KEY], ids=lambda k: served(BROKER)[k].name
)
def test_same_answers_as_kafka(pair: Pair, key: int) -> None:
    found: list[str] = []

    async def sweep() -> None:
        for version in common_versions(pair, key):
            for scenario in scenarios(key, version, pair.topic_ids["epochkraft"]):
                group = f"diff-{key}-v{version}-{scenario.label}"
                scenario = dataclasses.replace(scenario, group=group)
                for d in unexplained(
                    key, version, scenario.label, await compare(pair, key, version, scenario)
                ):
                    found.append(f"v{version} {scenario.label}: {d}")

    pair.run(sweep())
    assert not found, "\n".join(found)


# ---- error paths a sweep's realistic values do not reach ------------------------------------------------
def _create(name: str, partitions=1, rf=1, configs=(), assignment=()) -> ct.CreateTopicsRequest:
    topic = ct.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=tuple(
            ct.CreatableReplicaAssignment(partition_index=i, broker_ids=tuple(r))
            for i, r in enumerate(assignment)
        ),
        configs=tuple(ct.CreatableTopicConfig(name=k, value=v) for k, v in configs),
    )
    return ct.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=True)


def _incremental(configs, resource=TOPIC, resource_type=2) -> ia.IncrementalAlterConfigsRequest:
    return ia.IncrementalAlterConfigsRequest(
        resources=(
            ia.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=resource,
                configs=tuple(
                    ia.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in configs
                ),
            ),
        ),
        validate_only=True,
    )


def _alter(configs, resource=TOPIC, resource_type=2) -> ac.AlterConfigsRequest:
    return ac.AlterConfigsRequest(
        resources=(
            ac.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=resource,
                configs=tuple(ac.AlterableConfig(name=k, value=v) for k, v in configs),
            ),
        ),
        validate_only=True,
    )


def _produce(records: bytes, topic: str = TOPIC, acks: int = -1) -> pr.ProduceRequest:
    return pr.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            pr.TopicProduceData(
                name=topic, partition_data=(pr.PartitionProduceData(index=0, records=records),)
            ),
        ),
    )


def _offset_commit(topic: str, metadata: str, group: str) -> oc.OffsetCommitRequest:
    """A standalone commit (generation -1, no member) of partition 0."""
    partition = oc.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=metadata
    )
    return oc.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(oc.OffsetCommitRequestTopic(name=topic, partitions=(partition,)),),
    )


def _corrupt(batch: bytes) -> bytes:
    broken = bytearray(batch)
    broken[-1] ^= 0xFF  # the last record byte: the CRC no longer matches
    return bytes(broken)


BROKER_ID, CLUSTER_DEFAULT = (
    "1",
    "",
)  # a broker's own configs (TOPIC's leader answers), the cluster-wide default
# Dynamic broker configs (Kafka's DynamicBrokerConfig.validateConfigs), validated only: accepted dynamic
# configs, read-only ones, SSL stores without a listener prefix, listener configs cluster-wide, bad values.
BROKER_CONFIG_CASES = {
    "IncrementalAlterConfigs-broker-dynamic": _incremental(
        [("log.retention.ms", 0, "3600000"), ("log.cleaner.threads", 0, "2"), ("max.connections", 0, "100")],
        resource=BROKER_ID,
        resource_type=4,
    ),
    "IncrementalAlterConfigs-cluster-dynamic": _incremental(
        [("log.message.timestamp.type", 0, "LogAppendTime"), ("message.max.bytes", 0, "2000")],
        resource=CLUSTER_DEFAULT,
        resource_type=4,
    ),
    "IncrementalAlterConfigs-broker-listener-config": _incremental(
        [("listener.name.plaintext.sasl.enabled.mechanisms", 0, "PLAIN")], resource=BROKER_ID, resource_type=4
    ),
    "IncrementalAlterConfigs-broker-unknown-config": _incremental(
        [("no.such.config", 0, "1")], resource=BROKER_ID, resource_type=4
    ),
    "IncrementalAlterConfigs-broker-read-only": _incremental(
        [("broker.id", 0, "7")], resource=BROKER_ID, resource_type=4
    ),
    "IncrementalAlterConfigs-broker-ssl-without-listener-prefix": _incremental(
        [("ssl.keystore.location", 0, "/x.jks")], resource=BROKER_ID, resource_type=4
    ),
    "IncrementalAlterConfigs-cluster-per-broker-config": _incremental(
        [("sasl.enabled.mechanisms", 0, "PLAIN")], resource=CLUSTER_DEFAULT, resource_type=4
    ),
    "IncrementalAlterConfigs-broker-invalid-value": _incremental(
        [("num.io.threads", 0, "0")], resource=BROKER_ID, resource_type=4
    ),
    "IncrementalAlterConfigs-cluster-invalid-value": _incremental(
        [("log.message.timestamp.type", 0, "Later")], resource=CLUSTER_DEFAULT, resource_type=4
    ),
    "AlterConfigs-broker-dynamic": _alter(
        [("log.cleaner.threads", "2"), ("message.max.bytes", "2000")], BROKER, 4
    ),
    "AlterConfigs-broker-read-only": _alter([("log.retention.hours", "5")], BROKER_ID, 4),
    # dynamic broker configs Kafka 4.4 added, and one of its new read-only ones
    "IncrementalAlterConfigs-cluster-dynamic-4.4": _incremental(
        [
            ("max.decompressed.message.bytes", 0, "1000000"),
            ("log.remote.copy.lag.ms", 0, "-1"),
            ("errors.deadletterqueue.topic.name.prefix", 0, "dead."),
        ],
        resource=CLUSTER_DEFAULT,
        resource_type=4,
    ),
    "IncrementalAlterConfigs-broker-invalid-value-4.4": _incremental(
        [("log.remote.copy.lag.bytes", 0, "-2")], resource=BROKER_ID, resource_type=4
    ),
    "IncrementalAlterConfigs-broker-read-only-4.4": _incremental(
        [("group.streams.assignors", 0, "sticky")], resource=BROKER_ID, resource_type=4
    ),
}


def error_cases(
    topic: str = TOPIC, unknown: str = UNKNOWN_TOPIC, group: str = ERRORS_GROUP
) -> dict[str, object]:
    """The error cases, about ``topic`` (which must exist) and ``unknown`` (which must not); the group
    ones about ``group``, the group they are routed by."""
    return {
        "CreateTopics-invalid-config-value": _create("diff-new", configs=[("retention.ms", "soon")]),
        "CreateTopics-unknown-config": _create("diff-new", configs=[("no.such.config", "1")]),
        "CreateTopics-replication-factor-above-brokers": _create("diff-new", rf=5),
        "CreateTopics-zero-partitions": _create("diff-new", partitions=0),
        "CreateTopics-assignment-with-partition-count": _create("diff-new", 1, 3, assignment=[[1, 2, 3]]),
        "CreateTopics-assignment-unknown-broker": _create("diff-new", -1, -1, assignment=[[1, 77]]),
        "CreateTopics-invalid-name": _create("not a topic name!"),
        "CreateTopics-existing": _create(topic),
        "CreateTopics-min-isr-invalid": _create("diff-new", configs=[("min.insync.replicas", "0")]),
        "CreateTopics-cleanup-policy-invalid": _create("diff-new", configs=[("cleanup.policy", "shred")]),
        "IncrementalAlterConfigs-invalid-value": _incremental([("retention.ms", 0, "soon")], resource=topic),
        "IncrementalAlterConfigs-unknown-config": _incremental([("no.such.config", 0, "1")], resource=topic),
        "IncrementalAlterConfigs-append-to-non-list": _incremental(
            [("retention.ms", 2, "5")], resource=topic
        ),
        "IncrementalAlterConfigs-unknown-topic": _incremental([("retention.ms", 0, "5")], resource=unknown),
        "IncrementalAlterConfigs-valid": _incremental([("retention.ms", 0, "3600000")], resource=topic),
        # topic configs Kafka 4.4 added: max.decompressed.message.bytes, remote.copy.lag.ms (KIP-1241)
        "IncrementalAlterConfigs-max-decompressed-invalid": _incremental(
            [("max.decompressed.message.bytes", 0, "0")], resource=topic
        ),
        "IncrementalAlterConfigs-remote-copy-lag-invalid": _incremental(
            [("remote.copy.lag.ms", 0, "-2")], resource=topic
        ),
        "IncrementalAlterConfigs-remote-copy-lag-valid": _incremental(
            [("remote.copy.lag.bytes", 0, "1048576"), ("remote.copy.lag.ms", 0, "-1")], resource=topic
        ),
        **BROKER_CONFIG_CASES,
        # group configs (resource type GROUP, KIP-848), judged against the broker's default bounds
        "IncrementalAlterConfigs-group-valid": _incremental(
            [("consumer.session.timeout.ms", 0, "50000")], resource="diff-cfg-group", resource_type=32
        ),
        "IncrementalAlterConfigs-group-below-min-session": _incremental(
            [("consumer.session.timeout.ms", 0, "1000")], resource="diff-cfg-group", resource_type=32
        ),
        "IncrementalAlterConfigs-group-unknown-config": _incremental(
            [("no.such.config", 0, "1")], resource="diff-cfg-group", resource_type=32
        ),
        "IncrementalAlterConfigs-group-empty-name": _incremental(
            [("consumer.session.timeout.ms", 0, "50000")], resource="", resource_type=32
        ),
        # a null value: the broker's own INVALID_REQUEST (ConfigAdminManager.preprocess), before forwarding
        "IncrementalAlterConfigs-group-null-value": _incremental(
            [("consumer.session.timeout.ms", 0, None)], resource="diff-cfg-group", resource_type=32
        ),
        "IncrementalAlterConfigs-topic-null-value": _incremental(
            [("retention.ms", 0, None), ("segment.ms", 0, None)], resource=topic
        ),
        "AlterConfigs-group-null-value": _alter(
            [("consumer.session.timeout.ms", None)], resource="diff-cfg-group", resource_type=32
        ),
        "AlterConfigs-invalid-value": _alter([("segment.bytes", "tiny")], resource=topic),
        "AlterConfigs-unknown-config": _alter([("no.such.config", "1")], resource=topic),
        "AlterConfigs-unknown-topic": _alter([("retention.ms", "5")], resource=unknown),
        "CreatePartitions-not-increasing": cp.CreatePartitionsRequest(
            topics=(cp.CreatePartitionsTopic(name=topic, count=1, assignments=None),),
            timeout=datetime.timedelta(seconds=10),
            validate_only=True,
        ),
        "CreatePartitions-unknown-topic": cp.CreatePartitionsRequest(
            topics=(cp.CreatePartitionsTopic(name=unknown, count=3, assignments=None),),
            timeout=datetime.timedelta(seconds=10),
            validate_only=True,
        ),
        "Produce-message-too-large": _produce(
            build_batch([(None, b"x" * (1 << 20), (), int(time.time() * 1000))]), topic=topic
        ),
        "Produce-corrupt-crc": _produce(_corrupt(RECORDS), topic=topic),
        "Produce-invalid-acks": _produce(RECORDS, topic=topic, acks=2),
        "Produce-two-batches": _produce(RECORDS + RECORDS, topic=topic),
        "Produce-no-batch": _produce(b"", topic=topic),
        "Produce-unknown-topic": _produce(RECORDS, topic=unknown),
        "OffsetCommit-metadata-too-large": _offset_commit(topic, "m" * 5000, group),
        "DescribeAcls-unknown-pattern-type": request_for(
            29, 3, Scenario("acl", topic, overrides={**ACL_FIELDS, "pattern_type_filter": 0})
        ),
    }


ERROR_CASES = error_cases()
ERROR_KEYS = {name: type(request).__api_key__ for name, request in ERROR_CASES.items()}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_same_error_answers_as_kafka(pair: Pair, case: str) -> None:
    request = ERROR_CASES[case]
    key = ERROR_KEYS[case]
    version = type(request).__version__

    async def both() -> list[Difference]:
        answers = []
        for side in (pair.kafka, pair.ours):
            try:
                answers.append(await side.exchange(key, request, TOPIC, ERRORS_GROUP))
            except NetworkError:
                answers.append("closed")
        theirs, ours = answers
        if isinstance(theirs, str) or isinstance(ours, str):
            return [] if theirs == ours else [Difference("connection", ours, theirs)]
        return differences(ours, theirs)

    found = unexplained(key, version, case, pair.run(both()))
    assert not found, "\n".join(map(str, found))


async def _frame_over_limit(side: Side) -> str:
    """A request frame announcing more than socket.request.max.bytes (100 MiB): the broker hangs up."""
    reader, writer = await asyncio.open_connection(*side.bootstrap)
    try:
        writer.write(struct.pack(">i", 100 * 1024 * 1024 + 1) + b"\x00" * 64)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(64), timeout=20)
        return "closed" if data == b"" else f"answered {data!r}"
    except (ConnectionError, TimeoutError) as exc:
        return "closed" if isinstance(exc, ConnectionError) else "kept open"
    finally:
        writer.close()


def test_a_frame_over_the_request_size_limit_closes_the_connection_as_kafka(pair: Pair) -> None:
    assert pair.run(_frame_over_limit(pair.kafka)) == "closed"
    assert pair.run(_frame_over_limit(pair.ours)) == "closed"


async def _commit_answer(side: Side, metadata: str) -> str:
    try:
        response = await side.exchange(8, _offset_commit(TOPIC, metadata, ERRORS_GROUP), TOPIC, ERRORS_GROUP)
    except NetworkError:
        return "closed"
    return ErrorCode(response.topics[0].partitions[0].error_code).name


def test_a_string_over_32767_bytes_closes_the_connection_as_kafka(pair: Pair) -> None:
    """An OffsetCommit v9 whose committedMetadata is 900,000 bytes: Kafka's generated parser refuses the
    string (``string field committedMetadata had invalid length 900000``) and closes the connection; 5,000
    bytes, under the limit, is answered OFFSET_METADATA_TOO_LARGE by both."""
    for metadata, expected in (("m" * 900_000, "closed"), ("m" * 5000, "offset_metadata_too_large")):
        assert pair.run(_commit_answer(pair.kafka, metadata)) == expected
        assert pair.run(_commit_answer(pair.ours, metadata)) == expected


# ---- a fenced leader epoch: a request naming an epoch older than the partition's leader's ------------
FENCED_TOPIC = "diff-fenced"
# The APIs that carry the client's current leader epoch, and the first version that does.
EPOCH_APIS = {1: 9, 2: 4, 23: 2}


async def _move_leadership(side: Side) -> uuid.UUID:
    """FENCED_TOPIC led by broker 1, then by broker 2 (reassigned to [2, 1, 3], preferred election), so
    its leader epoch is above 0 and epoch 0 is fenced."""
    client = MiniClient(f"{side.bootstrap[0]}:{side.bootstrap[1]}")
    timeout = datetime.timedelta(seconds=10)
    try:
        error = await client.create_topic(FENCED_TOPIC, -1, -1, assignment=[[1, 2, 3]])
        assert error in (ErrorCode.none, ErrorCode.topic_already_exists), (side.name, error)
        await _wait_partition(side, lambda p: p.leader_id == 1 and len(p.isr_nodes) == 3)
        assert (await client.produce_batch(FENCED_TOPIC, 0, RECORDS))[0] == ErrorCode.none
        reassign = ar.AlterPartitionReassignmentsRequest(
            timeout=timeout,
            topics=(
                ar.ReassignableTopic(
                    name=FENCED_TOPIC,
                    partitions=(ar.ReassignablePartition(partition_index=0, replicas=(2, 1, 3)),),
                ),
            ),
        )
        response = await client.any_send(reassign, AlterPartitionReassignmentsResponse)
        assert response.error_code == ErrorCode.none, (side.name, response)
        await _wait_partition(side, lambda p: tuple(p.replica_nodes) == (2, 1, 3) and len(p.isr_nodes) == 3)
        elect = el.ElectLeadersRequest(
            election_type=0,
            topic_partitions=(el.TopicPartitions(topic=FENCED_TOPIC, partitions=(0,)),),
            timeout=timeout,
        )
        await client.any_send(elect, ElectLeadersResponse)
        partition = await _wait_partition(side, lambda p: p.leader_id == 2 and p.leader_epoch > 0)
        assert partition.leader_epoch > 0
        return (await side.metadata(FENCED_TOPIC)).topics[0].topic_id
    finally:
        await client.close()


async def _wait_partition(side: Side, ready) -> object:
    for _ in range(300):
        topics = (await side.metadata(FENCED_TOPIC)).topics
        partitions = topics[0].partitions if topics else ()
        if partitions and ready(partitions[0]):
            return partitions[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{side.name}: {FENCED_TOPIC} never got there: {partitions}")


def test_a_fenced_leader_epoch_gets_the_same_answers_as_kafka(pair: Pair) -> None:
    """Fetch, ListOffsets and OffsetForLeaderEpoch naming leader epoch 0 after the leader moved:
    FENCED_LEADER_EPOCH at every version that carries the epoch (KIP-320), as Kafka answers."""
    found: list[str] = []

    async def sweep() -> None:
        ids = {side.name: await _move_leadership(side) for side in (pair.kafka, pair.ours)}
        for key, first in EPOCH_APIS.items():
            for version in common_versions(pair, key):
                if version < first:
                    continue
                # a read_committed Fetch too: its refused partition's aborted transactions are null
                for isolation in (0, 1) if key == 1 else (0,):
                    answers = []
                    for side in (pair.kafka, pair.ours):
                        scenario = Scenario(
                            "fenced",
                            FENCED_TOPIC,
                            ids[side.name],
                            records=RECORDS,
                            overrides={"current_leader_epoch": 0, "isolation_level": isolation},
                        )
                        answers.append(
                            await side.exchange(key, request_for(key, version, scenario), FENCED_TOPIC, "")
                        )
                    theirs, ours = answers
                    assert ErrorCode.fenced_leader_epoch in error_codes(theirs), (key, version, theirs)
                    for d in unexplained(key, version, "fenced", differences(ours, theirs)):
                        found.append(f"{served(BROKER)[key].name} v{version} isolation {isolation}: {d}")
                if (
                    key == 1 and version >= 16
                ):  # KIP-951: the new leader (masked above) named, with its endpoint
                    assert ours.responses[0].partitions[0].current_leader.leader_id == 2, (version, ours)
                    assert [(n.node_id, n.port) for n in ours.node_endpoints] == [
                        (2, pair.ours.brokers[2][1])
                    ]

    pair.run(sweep())
    assert not found, "\n".join(found)


# ---- message.timestamp.type=LogAppendTime -------------------------------------------------------------
LOG_APPEND_TIME_TOPIC = f"diff-log-append-time-{uuid.uuid4().hex[:8]}"  # new on a reused peer too


async def _produce_and_fetch_log_append_time(side: Side) -> tuple[object, list[bool]]:
    """The Produce answer for a batch sent to a LogAppendTime topic, and whether each fetched batch is
    stamped LogAppendTime with a max timestamp past the producer's create time."""
    client = MiniClient(f"{side.bootstrap[0]}:{side.bootstrap[1]}")
    try:
        configs = {"message.timestamp.type": "LogAppendTime"}
        error = await client.create_topic(LOG_APPEND_TIME_TOPIC, -1, -1, configs, assignment=[[1, 2, 3]])
        assert error in (ErrorCode.none, ErrorCode.topic_already_exists), (side.name, error)
        for _ in range(100):
            metadata = await side.metadata(LOG_APPEND_TIME_TOPIC)
            if metadata.topics[0].partitions and metadata.topics[0].partitions[0].leader_id == 1:
                break
            await asyncio.sleep(0.1)
        create_time = int(time.time() * 1000) - 60_000
        batch = build_batch([(b"k", b"v", (), create_time)])
        answer = await side.exchange(0, _produce(batch, LOG_APPEND_TIME_TOPIC), LOG_APPEND_TIME_TOPIC, "")
        fetch = request_for(1, 12, Scenario("log-append-time", LOG_APPEND_TIME_TOPIC, records=RECORDS))
        fetched = await side.exchange(1, fetch, LOG_APPEND_TIME_TOPIC, "")
        records = decode_batches(fetched.responses[0].partitions[0].records or b"")
        return answer, [
            b.attributes & TIMESTAMP_TYPE_BIT != 0 and b.max_timestamp > create_time for b in records
        ]
    finally:
        await client.close()


def test_a_log_append_time_topic_gets_the_same_answers_as_kafka(pair: Pair) -> None:
    """Produce to a topic with message.timestamp.type=LogAppendTime: the same answer as Kafka (the
    log_append_time field compared by its presence), and the batch read back stamped LogAppendTime."""
    (theirs, kafka_batches), (ours, our_batches) = (
        pair.run(_produce_and_fetch_log_append_time(side)) for side in (pair.kafka, pair.ours)
    )
    assert theirs.responses[0].partition_responses[0].log_append_time is not None
    assert differences(ours, theirs) == []
    assert kafka_batches == our_batches == [True]


# ---- a request sent to a follower: NOT_LEADER_OR_FOLLOWER --------------------------------------------
FOLLOWER = 3  # TOPIC's replicas are [1, 2, 3], led by 1
LEADER_APIS = (0, 1, 2, 21, 23)  # Produce, Fetch, ListOffsets, DeleteRecords, OffsetForLeaderEpoch


def test_a_request_to_a_follower_gets_the_same_answers_as_kafka(pair: Pair) -> None:
    found: list[str] = []

    async def sweep() -> None:
        for key in LEADER_APIS:
            for version in common_versions(pair, key):
                answers = []
                for side in (pair.kafka, pair.ours):
                    scenario = Scenario("follower", TOPIC, pair.topic_ids[side.name], records=RECORDS)
                    answers.append(await side.send_to(FOLLOWER, request_for(key, version, scenario)))
                theirs, ours = answers
                if not (key == 1 and version >= 11):  # consumers may fetch from followers (KIP-392)
                    assert ErrorCode.not_leader_or_follower in error_codes(theirs), (key, version, theirs)
                for d in unexplained(key, version, "follower", differences(ours, theirs)):
                    found.append(f"{served(BROKER)[key].name} v{version}: {d}")
                if key == 0 and version >= 10:  # KIP-951: the leader (masked above) named, with its endpoint
                    hint = ours.responses[0].partition_responses[0].current_leader
                    assert hint.leader_id == 1, (version, ours)
                    assert [(n.node_id, n.port) for n in ours.node_endpoints] == [
                        (1, pair.ours.brokers[1][1])
                    ]

    pair.run(sweep())
    assert not found, "\n".join(found)


# ---- ApiVersions v5 (KIP-1242): the cluster and node a client means to reach ---------------------------
def _v5_cases(cluster_id: str, node_id: int) -> dict[str, ApiVersionsRequestV5]:
    def ask(cluster: str | None, node: int) -> ApiVersionsRequestV5:
        return ApiVersionsRequestV5(
            client_software_name="diff", client_software_version="1", cluster_id=cluster, node_id=node
        )

    other = "AAAAAAAAAAAAAAAAAAAAAA"
    return {
        "both-right": ask(cluster_id, node_id),
        "other-node": ask(cluster_id, node_id + 1),
        "other-cluster": ask(other, node_id),
        "cluster-only": ask(cluster_id, -1),
        "node-only": ask(None, node_id),
        "neither": ask(None, -1),
    }


def _v5_answer(response) -> tuple[int, bool]:
    return int(response.error_code), bool(response.api_keys)


def test_api_versions_v5_checks_the_cluster_and_node_as_kafka(
    pair: Pair, controllers: dict[str, tuple]
) -> None:
    """A broker answers REBOOTSTRAP_REQUIRED to a cluster or node id not its own and INVALID_REQUEST to one
    without the other, with no API list; a controller checks only that both or neither are given."""
    answers: dict[str, dict[str, tuple[int, bool]]] = {}

    async def ask() -> None:
        for side in (pair.kafka, pair.ours):
            metadata = await side.metadata()
            node = min(side.brokers)
            address, cluster_id = controllers[side.name]
            for case, request in _v5_cases(metadata.cluster_id, node).items():
                answers.setdefault(f"broker {case}", {})[side.name] = _v5_answer(
                    await side.send_to(node, request)
                )
            for case, request in _v5_cases(cluster_id, 0).items():
                answers.setdefault(f"controller {case}", {})[side.name] = _v5_answer(
                    await side.client(address).send(request)
                )

    pair.run(ask())
    found = {case: a for case, a in answers.items() if a["kafka"] != a["epochkraft"]}
    assert not found, found
    assert answers["broker other-node"]["kafka"] == (ErrorCode.rebootstrap_required, False)
    assert answers["controller other-cluster"]["kafka"] == (ErrorCode.none, True)


# ---- the controller listener: the broker lifecycle and admin APIs against Kafka's own controller -------
SPARE_BROKER = 99  # registrations and heartbeats name a broker neither cluster has


@pytest.fixture(scope="module")
def controllers(pair: Pair, kafka_peer: KafkaPeer, epochkraft_peer_cluster: LocalCluster) -> dict[str, tuple]:
    """(address, cluster id) of each side's controller listener."""

    def split(address: str) -> tuple[str, int]:
        host, _, port = address.rpartition(":")
        return host, int(port)

    return {
        "kafka": (split(kafka_peer.controller_address), kafka_peer.cluster_id),
        "epochkraft": (split(epochkraft_peer_cluster.controller_address), epochkraft_peer_cluster.cluster_id),
    }


def controller_keys() -> list[int]:
    return [k for k in served(CONTROLLER) if k not in (API_VERSIONS_KEY, 1)]  # 1: Fetch of the metadata log


@pytest.mark.parametrize("key", controller_keys(), ids=lambda k: served(CONTROLLER)[k].name)
def test_same_controller_answers_as_kafka(pair: Pair, controllers: dict[str, tuple], key: int) -> None:
    found: list[str] = []

    async def sweep() -> None:
        versions = {}
        for side in (pair.kafka, pair.ours):
            address, _ = controllers[side.name]
            answer = await side.client(address).api_versions()
            versions[side.name] = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        low = (
            max(v[key][0] for v in versions.values() if key in v)
            if all(key in v for v in versions.values())
            else 1
        )
        high = min(v[key][1] for v in versions.values()) if all(key in v for v in versions.values()) else 0
        if high < low:
            found.append(
                f"not served by both: {versions['kafka'].get(key)} / {versions['epochkraft'].get(key)}"
            )
            return
        for version in range(low, high + 1):
            for label, topic in (
                ("existing", TOPIC),
                ("unknown-topic", f"{UNKNOWN_TOPIC}-c{key}-v{version}"),
            ):
                answers = []
                for side in (pair.kafka, pair.ours):
                    address, cluster_id = controllers[side.name]
                    scenario = Scenario(
                        label,
                        topic,
                        pair.topic_ids[side.name] if topic == TOPIC else uuid.UUID(int=7),
                        broker_id=SPARE_BROKER,
                        cluster_id=cluster_id,
                        records=RECORDS,
                        overrides=ACL_FIELDS if key in ACL_KEYS else {},
                    )
                    if key == DELETE_TOPICS_KEY and topic == TOPIC:
                        continue
                    try:
                        answers.append(await side.client(address).send(request_for(key, version, scenario)))
                    except NetworkError:
                        answers.append("closed")
                if len(answers) < 2:
                    continue
                theirs, ours = answers
                if isinstance(theirs, str) or isinstance(ours, str):
                    diffs = [] if theirs == ours else [Difference("connection", ours, theirs)]
                else:
                    diffs = differences(ours, theirs)
                found.extend(
                    f"v{version} {label}: {d}"
                    for d in unexplained(key, version, f"controller-{label}", diffs)
                )

    pair.run(sweep())
    assert not found, "\n".join(found)


# ---- the comparison itself, without peers --------------------------------------------------------------
def test_differences_name_each_field_and_skip_the_masked_ones() -> None:
    from kio.schema.metadata.v12 import response as md

    def answer(error: ErrorCode, leader: int, partitions: int, host: str) -> md.MetadataResponse:
        return md.MetadataResponse(
            throttle_time=datetime.timedelta(milliseconds=leader),
            brokers=(md.MetadataResponseBroker(node_id=leader, host=host, port=leader, rack=None),),
            cluster_id=host,
            controller_id=leader,
            topics=(
                md.MetadataResponseTopic(
                    error_code=error,
                    name="t",
                    topic_id=uuid.uuid4(),
                    is_internal=False,
                    partitions=tuple(
                        md.MetadataResponsePartition(
                            error_code=ErrorCode.none,
                            partition_index=i,
                            leader_id=leader,
                            leader_epoch=0,
                            replica_nodes=(leader,),
                            isr_nodes=(leader,),
                            offline_replicas=(),
                        )
                        for i in range(partitions)
                    ),
                    topic_authorized_operations=-2147483648,
                ),
            ),
        )

    ours, theirs = answer(ErrorCode.none, 1, 2, "a"), answer(ErrorCode.none, 3, 2, "b")
    assert differences(ours, theirs) == []  # ids, hosts, ports, throttle times and leaders are masked
    theirs = answer(ErrorCode.leader_not_available, 3, 1, "b")
    assert [str(d) for d in differences(ours, theirs)] == [
        "topics[t].error_code: ours <ErrorCode.none: 0>, Kafka <ErrorCode.leader_not_available: 5>",
        "topics[t].partitions[1]: ours True, Kafka False",
    ]
    found = differences(ours, theirs)
    assert unexplained(3, 0, "unknown-topic", found) == []  # the auto-creation entry covers v0-3
    assert unexplained(3, 12, "unknown-topic", found) == found


def test_a_log_append_time_is_compared_by_its_presence() -> None:
    from kio.schema.produce.v9 import response as pr9

    def answer(at: datetime.datetime | None) -> pr9.ProduceResponse:
        partition = pr9.PartitionProduceResponse(
            index=0, error_code=ErrorCode.none, base_offset=0, log_append_time=at, record_errors=()
        )
        return pr9.ProduceResponse(
            responses=(pr9.TopicProduceResponse(name="t", partition_responses=(partition,)),),
            throttle_time=datetime.timedelta(0),
        )

    now = datetime.datetime.now(tz=datetime.UTC)
    assert differences(answer(now), answer(now + datetime.timedelta(seconds=1))) == []
    assert [str(d) for d in differences(answer(None), answer(now))] == [
        "responses[t].partition_responses[0].log_append_time: ours 'none', Kafka \"the leader's append time\""
    ]


def test_every_known_difference_is_still_seen(request: pytest.FixtureRequest) -> None:
    """Runs last: each KNOWN_DIFFERENCES entry explained at least one difference in this run, so the table
    (and the one in docs/kafka-compatibility.md) lists only what still differs. Only meaningful when the
    whole module ran."""
    selected = [i for i in request.session.items if i.module is request.module]
    sweeps = (
        len([k for k in served(BROKER) if k != API_VERSIONS_KEY]) + len(ERROR_CASES) + len(controller_keys())
    )
    single = 5  # the frame, fenced epoch, follower, comparison tests, and this one
    if len(selected) < sweeps + single or request.session.testsfailed:
        pytest.skip("only part of the differential module ran, or some of it failed")
    stale = [k for k in KNOWN_DIFFERENCES if k not in USED]
    assert not stale, "\n".join(f"{k.api_key} {k.case} {k.path}: {k.reason}" for k in stale)
