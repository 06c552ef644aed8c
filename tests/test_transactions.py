"""Transactions with real clients on real processes: confluent-kafka's transactional producer finds its
coordinator, initializes (epoch bumps), is fenced by a second producer with the same transactional.id,
and commits and aborts consume-transform-produce transactions.

The end-to-end test needs the partition leaders' side (transactional produce, WriteTxnMarkers, control
batches, read_committed Fetch): it is skipped while the broker does not serve WriteTxnMarkers.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from epochkraft.net.client import KafkaClient

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(120)]

TXN_BROKER = """
transaction.state.log.num.partitions=3
transaction.abort.timed.out.transaction.cleanup.interval.ms=500
"""
WRITE_TXN_MARKERS = 27
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from epochkraft.chaos.cluster import LocalCluster
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


def serves_write_txn_markers(cluster) -> bool:
    async def ask() -> bool:
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        async with KafkaClient(host, int(port)) as client:
            versions = await client.api_versions()
        return any(k.api_key == WRITE_TXN_MARKERS for k in versions.api_keys)

    return asyncio.run(ask())


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


def test_confluent_transaction_commit_and_abort_end_to_end(cluster):
    """Consume-transform-produce: a committed transaction's records and offsets are visible to
    read_committed readers, an aborted one's are not; a producer with an open transaction is fenced by
    a new one, whose init aborts the zombie's transaction."""
    if not serves_write_txn_markers(cluster):
        pytest.skip(
            "the broker does not serve WriteTxnMarkers (27): partition leaders cannot take markers yet"
        )
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
