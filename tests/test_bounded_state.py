"""What a client can make a broker hold is bounded, against real daemons on loopback: offset metadata
(offset.metadata.max.bytes)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

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
