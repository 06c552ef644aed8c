"""What a client can make a cluster hold or use up is bounded, against real daemons on loopback: offset
metadata (offset.metadata.max.bytes), producer ids (blocks from the controller)."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from epochkraft.chaos.cluster import LocalCluster
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def create_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)]
    )
    futures[name].result(30)


def test_offset_commit_with_5_kb_metadata_is_refused(make_cluster):
    """confluent-kafka commits 5 KB of metadata on one partition and 4,000 bytes on another: the first gets
    OFFSET_METADATA_TOO_LARGE and is not stored, the second is committed (librdkafka sends a string's
    terminating NUL too, so 4,096 characters from it are 4,097)."""
    cluster = make_cluster(brokers=1)
    create_topic(cluster.bootstrap, "meta", partitions=2)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "meta-group"})
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.commit(
                offsets=[
                    TopicPartition("meta", 0, 7, metadata="x" * 5000),
                    TopicPartition("meta", 1, 8, metadata="y" * 4000),
                ],
                asynchronous=False,
            )
        assert refused.value.args[0].code() == KafkaError.OFFSET_METADATA_TOO_LARGE
        committed = consumer.committed([TopicPartition("meta", 0), TopicPartition("meta", 1)], timeout=15)
        assert [tp.offset for tp in committed] == [-1001, 8]
    finally:
        consumer.close()


INIT_PRODUCER_ID = InitProducerIdRequest(
    transactional_id=None,
    transaction_timeout=datetime.timedelta(seconds=60),
    producer_id=-1,
    producer_epoch=-1,
)


async def init_producer_ids(cluster: LocalCluster, count: int, deadline: float) -> tuple[list[int], set[str]]:
    """``count`` producer ids from the brokers in turn; COORDINATOR_LOAD_IN_PROGRESS and a broker that is
    down are retried, as clients do. Returns the ids and the errors seen."""
    ids: list[int] = []
    errors: set[str] = set()
    clients = {n: KafkaClient("127.0.0.1", p.port, client_id="pid-flood") for n, p in cluster.nodes.items()}
    try:
        while len(ids) < count and time.monotonic() < deadline:
            for client in clients.values():
                try:
                    response = await client.send(INIT_PRODUCER_ID)
                except NetworkError:
                    await asyncio.sleep(0.1)
                    continue
                if response.error_code == ErrorCode.none:
                    ids.append(response.producer_id)
                else:
                    errors.add(ErrorCode(response.error_code).name)
                    await asyncio.sleep(0.01)
    finally:
        for client in clients.values():
            await client.close()
    return ids, errors


def test_init_producer_ids_across_blocks_failover_and_restart_stay_unique(tmp_path: Path):
    """Two brokers draw 6,000 producer ids (several blocks of 1,000 each) from a quorum of three
    controllers while the active controller is killed and a broker restarts: no id is handed out twice
    and the only error is the retriable COORDINATOR_LOAD_IN_PROGRESS."""
    broker_cfg, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(
        data_dir=tmp_path / "cluster",
        brokers=2,
        controllers=3,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
    )
    deadline = time.monotonic() + 150
    try:
        cluster.start()
        first, errors = asyncio.run(init_producer_ids(cluster, 2500, deadline))
        cluster.node("controller-active").kill()
        second, more = asyncio.run(init_producer_ids(cluster, 2000, deadline))
        cluster.nodes[1].restart()
        third, most = asyncio.run(init_producer_ids(cluster, 1500, deadline))
    finally:
        cluster.kill_all()
    ids = first + second + third
    assert len(ids) >= 6000
    assert len(set(ids)) == len(ids), "a producer id was handed out twice"
    assert max(ids) > 5000  # more than the first block of each broker
    assert errors | more | most <= {"coordinator_load_in_progress"}
