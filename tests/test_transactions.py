"""Transactions with real clients on real processes: confluent-kafka's transactional producer finds its
coordinator, initializes (epoch bumps), is fenced by a second producer with the same transactional.id,
and commits and aborts consume-transform-produce transactions.

The end-to-end test needs the partition leaders' side (transactional produce, WriteTxnMarkers, control
batches, read_committed Fetch): it is skipped while the broker does not serve WriteTxnMarkers.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(120)]

TXN_BROKER = """
transaction.state.log.num.partitions=3
transaction.abort.timed.out.transaction.cleanup.interval.ms=500
"""
WRITE_TXN_MARKERS = 27
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from epochkraft.harness.cluster import LocalCluster
    from tests.conftest import write_fast_configs

    tmp = tmp_path_factory.mktemp("txn")
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config", TXN_BROKER)
    cluster = LocalCluster(
        data_dir=tmp / "cluster", brokers=1, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    yield cluster
    cluster.kill_all()


def producer(cluster, transactional_id: str) -> Producer:
    return Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )


def group_metadata(cluster, group: str):
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    return consumer, consumer.consumer_group_metadata()


def serves_write_txn_markers() -> bool:
    """Whether the brokers of this tree serve WriteTxnMarkers (the registry ApiVersions is built from)."""
    from epochkraft.protocol.api import BROKER
    from epochkraft.server.handlers import served

    return WRITE_TXN_MARKERS in served(BROKER)


NO_MARKERS = "the broker does not serve WriteTxnMarkers (27): partition leaders cannot take markers yet"


def test_confluent_init_transactions_and_zombie_fencing(cluster):
    """init_transactions finds the coordinator (FindCoordinator key type 1, __transaction_state created
    on first use) and gets an epoch; a second producer with the same transactional.id bumps it, and the
    first one's next transactional request is refused as fenced, fatally
    (TransactionCoordinatorTest.shouldFenceProducer..., as a client sees it)."""
    txn_id = f"fence-{uuid.uuid4()}"
    consumer, metadata = group_metadata(cluster, "fence-group")
    zombie = producer(cluster, txn_id)
    zombie.init_transactions(60)
    fresh = producer(cluster, txn_id)
    fresh.init_transactions(60)
    zombie.begin_transaction()
    with pytest.raises(KafkaException) as raised:
        zombie.send_offsets_to_transaction([TopicPartition("fence-in", 0, 5)], metadata, 30)
    error = raised.value.args[0]
    assert error.code() in FENCED, error
    assert error.fatal(), error
    consumer.close()


@pytest.mark.skipif(not serves_write_txn_markers(), reason=NO_MARKERS)
def test_confluent_transaction_commit_and_abort_end_to_end(cluster):
    """Consume-transform-produce: a committed transaction's records and offsets are visible to
    read_committed readers, an aborted one's are not; a producer with an open transaction is fenced by
    a new one, whose init aborts the zombie's transaction."""
    txn_id, group, topic = f"etl-{uuid.uuid4()}", f"etl-{uuid.uuid4()}", f"out-{uuid.uuid4()}"
    consumer, metadata = group_metadata(cluster, group)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce("etl-in", b"input")  # creates the input topic whose offsets the transactions commit
    plain.flush(30)
    p = producer(cluster, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.send_offsets_to_transaction([TopicPartition("etl-in", 0, 10)], metadata, 30)
    p.commit_transaction(60)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.send_offsets_to_transaction([TopicPartition("etl-in", 0, 20)], metadata, 30)
    p.abort_transaction(60)
    p.begin_transaction()
    p.produce(topic, b"left open by a zombie")
    p.flush(30)
    successor = producer(cluster, txn_id)
    successor.init_transactions(60)  # aborts the open transaction first
    successor.begin_transaction()
    successor.produce(topic, b"after fencing")
    successor.commit_transaction(60)

    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe([topic])
    seen: list[bytes] = []
    for _ in range(60):
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
        if len(seen) >= 2:
            break
    assert seen == [b"committed", b"after fencing"]
    committed = consumer.committed([TopicPartition("etl-in", 0)], 30)
    assert committed[0].offset == 10
    reader.close()
    consumer.close()


def unstable_offset_fetch(cluster, group: str, topic: str) -> tuple[int, int]:
    """(committed offset, error) of partition 0 from OffsetFetch v7 with require_stable."""
    from kio.schema.offset_fetch.v7 import request as of7

    async def ask() -> tuple[int, int]:
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        request = of7.OffsetFetchRequest(
            group_id=group,
            topics=(of7.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
            require_stable=True,
        )
        async with KafkaClient(host, int(port)) as client:
            response = await client.send(request)
        partition = response.topics[0].partitions[0]
        return partition.committed_offset, partition.error_code

    return asyncio.run(ask())


def test_open_transaction_offsets_and_kafka_transactions_tool(cluster, tmp_path):
    """Two TxnOffsetCommits in one transaction are written (transactional batches of the producer) and
    pending: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT (KIP-447). Kafka's own
    ``kafka-transactions`` (TransactionsCommand) against ours: ``list`` shows the transactional id in
    state Ongoing (ListTransactions on every broker), ``describe`` finds its coordinator (FindCoordinator
    key type 1) and shows the open transaction's partition (DescribeTransactions)."""
    from tests.test_metadata_snapshot import kafka_tool

    txn_id = f"tool-{uuid.uuid4()}"
    consumer, metadata = group_metadata(cluster, "tool-group")
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce("tool-in", b"input")
    plain.flush(30)
    p = producer(cluster, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("tool-in", 0, 1)], metadata, 30)  # now Ongoing
    p.send_offsets_to_transaction([TopicPartition("tool-in", 0, 2)], metadata, 30)
    assert unstable_offset_fetch(cluster, "tool-group", "tool-in") == (-1, ErrorCode.unstable_offset_commit)

    listed = kafka_tool(
        "org.apache.kafka.tools.TransactionsCommand",
        ["--bootstrap-server", cluster.bootstrap, "list"],
        tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    (row,) = [line.split() for line in listed.stdout.splitlines() if txn_id in line]
    assert row[-1] == "Ongoing", listed.stdout
    described = kafka_tool(
        "org.apache.kafka.tools.TransactionsCommand",
        ["--bootstrap-server", cluster.bootstrap, "describe", "--transactional-id", txn_id],
        tmp_path,
    )
    assert described.returncode == 0, described.stderr
    assert "Ongoing" in described.stdout and "__consumer_offsets-" in described.stdout, described.stdout
    consumer.close()


def describe_transaction(cluster, txn_id: str):
    """DescribeTransactions from the broker (one broker: the coordinator), retried while it loads."""
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

    async def ask():
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        for _ in range(100):
            try:
                async with KafkaClient(host, int(port)) as client:
                    response = await client.send(DescribeTransactionsRequest(transactional_ids=(txn_id,)))
                (state,) = response.transaction_states
                if state.error_code == ErrorCode.none:
                    return state
            except Exception:  # the broker is still starting
                pass
            await asyncio.sleep(0.2)
        raise AssertionError(f"{txn_id} not described")

    return asyncio.run(ask())


def test_coordinator_state_survives_a_broker_restart(cluster):
    """The coordinator reloads ``__transaction_state`` when it leads its partitions again (Kafka's
    TransactionStateManager.loadTransactionsForTxnTopicPartition): the open transaction keeps its producer
    id, epoch, state and partitions; the group coordinator reloads the transaction's offsets from their
    transactional batches as still pending (UNSTABLE_OFFSET_COMMIT)."""
    txn_id = f"restart-{uuid.uuid4()}"
    consumer, metadata = group_metadata(cluster, "restart-group")
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce("restart-in", b"input")
    plain.flush(30)
    p = producer(cluster, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("restart-in", 0, 1)], metadata, 30)
    before = describe_transaction(cluster, txn_id)
    assert before.transaction_state == "Ongoing"
    consumer.close()

    broker = cluster.node(1)
    broker.kill()
    broker.start()
    after = describe_transaction(cluster, txn_id)
    assert (after.producer_id, after.producer_epoch, after.transaction_state) == (
        before.producer_id,
        before.producer_epoch,
        "Ongoing",
    )
    assert [(t.topic, t.partitions) for t in after.topics] == [(t.topic, t.partitions) for t in before.topics]
    assert unstable_offset_fetch(cluster, "restart-group", "restart-in") == (
        -1,
        ErrorCode.unstable_offset_commit,
    )


@pytest.mark.skipif(not serves_write_txn_markers(), reason=NO_MARKERS)
def test_transactions_across_a_kill_of_the_coordinator(make_cluster):
    """Kafka's coordinator failover (TransactionStateManager loading on the new leader, markers resent with
    its coordinator epoch): 3 brokers, 20 transactions of 5 records; the transaction coordinator is
    killed (SIGKILL) with a transaction's records written and its commit not yet asked for. Every
    transaction commits (the client retries through the new coordinator) and a read_committed reader
    sees each record once."""
    cluster = make_cluster(3, broker_extra="transaction.state.log.num.partitions=3\n")
    # RF 3: the killed coordinator may also lead the output's partition (an auto-created topic has RF 1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    created = admin.create_topics([NewTopic("failover-out", 1, 3, config={"min.insync.replicas": "2"})])
    created["failover-out"].result(30)
    txn_id = f"failover-{uuid.uuid4()}"
    p = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 10000}
    )
    p.init_transactions(60)
    for i in range(20):
        p.begin_transaction()
        for j in range(5):
            p.produce("failover-out", f"{i}-{j}".encode())
        if i == 10:
            p.flush(30)
            cluster.node(describe_coordinator(cluster, txn_id)).kill()
        p.commit_transaction(60)
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe(["failover-out"])
    seen: list[bytes] = []
    for _ in range(120):
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
        if len(seen) >= 100:
            break
    reader.close()
    assert sorted(seen) == sorted(f"{i}-{j}".encode() for i in range(20) for j in range(5))


def describe_coordinator(cluster, txn_id: str) -> int:
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    async def ask() -> int:
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        async with KafkaClient(host, int(port)) as client:
            response = await client.send(FindCoordinatorRequest(key_type=1, coordinator_keys=(txn_id,)))
        return response.coordinators[0].node_id

    return asyncio.run(ask())


def txn_offset_commit(cluster, txn_id: str, group: str, producer_id: int, epoch: int, topic: str) -> int:
    """The error of a TxnOffsetCommit v3 of offset 1 on partition 0 (one broker: every coordinator)."""
    from kio.schema.txn_offset_commit.v3 import request as tc3

    async def ask() -> int:
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        request = tc3.TxnOffsetCommitRequest(
            transactional_id=txn_id,
            group_id=group,
            producer_id=producer_id,
            producer_epoch=epoch,
            topics=(
                tc3.TxnOffsetCommitRequestTopic(
                    name=topic,
                    partitions=(
                        tc3.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=1, committed_metadata=None
                        ),
                    ),
                ),
            ),
        )
        async with KafkaClient(host, int(port)) as client:
            response = await client.send(request)
        return response.topics[0].partitions[0].error_code

    return asyncio.run(ask())


def offsets_only_transaction(cluster, txn_id: str, group: str):
    """A librdkafka producer's open transaction holding only ``group``'s offsets partition (an offset of
    verify-in sent to it): the group's consumer, the producer and the coordinator's description of it."""
    consumer, metadata = group_metadata(cluster, group)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce("verify-in", b"input")
    plain.flush(30)
    p = producer(cluster, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("verify-in", 0, 1)], metadata, 30)
    return consumer, p, describe_transaction(cluster, txn_id)


def test_txn_offset_commit_is_verified_with_the_transaction_coordinator(cluster):
    """KIP-890 part 1 (Kafka's transaction.partition.verification.enable): a TxnOffsetCommit needs the
    group's offsets partition in the producer's ongoing transaction at its current epoch. An older epoch
    (a zombie) is INVALID_PRODUCER_EPOCH; a group whose offsets partition the transaction does not hold is
    INVALID_TXN_STATE; nothing is written for either."""
    txn_id = f"verify-{uuid.uuid4()}"
    consumer, _producer, state = offsets_only_transaction(cluster, txn_id, "verify-group")
    pid, epoch = state.producer_id, state.producer_epoch
    assert txn_offset_commit(cluster, txn_id, "verify-group", pid, epoch, "verify-in") == ErrorCode.none
    zombie = txn_offset_commit(cluster, txn_id, "verify-group", pid, epoch - 1, "verify-in")
    assert zombie == ErrorCode.invalid_producer_epoch
    held = {(t.topic, i) for t in state.topics for i in t.partitions}
    other = next(
        g for g in (f"other-{i}" for i in range(100)) if ("__consumer_offsets", partition_of(g)) not in held
    )
    assert txn_offset_commit(cluster, txn_id, other, pid, epoch, "verify-in") == ErrorCode.invalid_txn_state
    consumer.close()


def transactional_produce(cluster, version: int, txn_id: str, producer_id: int, epoch: int, topic: str):
    """(error, message) of a Produce of ``version`` carrying one transactional batch to partition 0."""
    import importlib

    from epochkraft.protocol.records import build_batch

    schema = importlib.import_module(f"kio.schema.produce.v{version}.request")
    batch = build_batch(
        [(None, b"late", (), 0)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
    )

    async def ask():
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        request = schema.ProduceRequest(
            transactional_id=txn_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                schema.TopicProduceData(
                    name=topic, partition_data=(schema.PartitionProduceData(index=0, records=batch),)
                ),
            ),
        )
        async with KafkaClient(host, int(port)) as client:
            response = await client.send(request)
        answer = response.responses[0].partition_responses[0]
        return answer.error_code, answer.error_message

    return asyncio.run(ask())


def test_produce_below_v12_is_verified_with_the_transaction_coordinator(cluster):
    """KIP-890 part 1 for Produce (ReplicaManager.appendRecordsWithTransactionVerification with
    transaction.partition.verification.enable): a transactional batch for a partition the producer's ongoing
    transaction does not hold (a late batch of an ended transaction would open a hanging one) is refused
    and not written: INVALID_TXN_STATE with Kafka's message below v11, TRANSACTION_ABORTABLE at v11. The
    librdkafka producer's own batches, to partitions it added, go through (the other tests)."""
    txn_id = f"produce-verify-{uuid.uuid4()}"
    consumer, p, state = offsets_only_transaction(cluster, txn_id, "produce-verify-group")
    pid, epoch = state.producer_id, state.producer_epoch
    assert ("verify-in", 0) not in {(t.topic, i) for t in state.topics for i in t.partitions}
    before = end_offset(cluster, "verify-in")
    assert transactional_produce(cluster, 10, txn_id, pid, epoch, "verify-in") == (
        ErrorCode.invalid_txn_state,
        "Partition was not added to the transaction",
    )
    assert (
        transactional_produce(cluster, 11, txn_id, pid, epoch, "verify-in")[0]
        == ErrorCode.transaction_abortable
    )
    assert end_offset(cluster, "verify-in") == before
    p.abort_transaction(30)
    consumer.close()


def end_offset(cluster, topic: str) -> int:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"end-{uuid.uuid4()}"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def partition_of(group: str) -> int:
    from epochkraft.broker.group_coordinator import coordinator_partition

    return coordinator_partition(group, 3)  # offsets.topic.num.partitions of the test brokers
