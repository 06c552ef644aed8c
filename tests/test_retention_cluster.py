"""Retention, DeleteRecords and lookups by timestamp on a 3-broker cluster with real clients: segments go
on every replica, the log start offset moves everywhere, consumers below it reset, a follower restarted
after the leader deleted what it still needed starts at the leader's log start and rejoins the ISR."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from epochkraft.broker.log.checkpoints import read_offsets
from epochkraft.harness.cluster import LocalCluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(180)]

RETENTION = """
log.retention.check.interval.ms=200
log.segment.delete.delay.ms=300
log.flush.start.offset.checkpoint.interval.ms=200
replica.fetch.max.bytes=4096
"""  # followers append what one fetch brings in one go, as Kafka's: small fetches keep their segments small
BASE_TS = int(time.time() * 1000) - 600_000  # recent: retention.ms (7 days) does not apply


def create_topic(bootstrap: str, name: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=int(config.pop("rf", "3")), config=config)]
    )
    futures[name].result(15)


def produce(bootstrap: str, topic: str, start: int, count: int, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all", "batch.size": 2048})
    errors: list[str] = []
    for i in range(start, start + count):
        value = f"{i:08d}".encode().ljust(size, b".")
        producer.produce(
            topic,
            value=value,
            timestamp=BASE_TS + i,
            on_delivery=lambda err, _msg: err and errors.append(str(err)),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors


def segment_bases(cluster: LocalCluster, broker: int, topic: str) -> list[int]:
    directory = cluster.data_dir / f"broker-{broker}" / f"{topic}-0"
    return sorted(int(p.stem) for p in directory.glob("*.log"))


def checkpointed_start(cluster: LocalCluster, broker: int, topic: str) -> int:
    path = Path(cluster.data_dir / f"broker-{broker}" / "log-start-offset-checkpoint")
    return read_offsets(path).get((topic, 0), 0) if path.exists() else 0


def consume_from(bootstrap: str, topic: str, offset: int, until: int) -> list[tuple[int, int, bytes]]:
    """(offset, timestamp, value) from ``offset`` (auto.offset.reset=earliest) up to ``until``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, offset)])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while (not out or out[-1][0] < until - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.offset(), msg.timestamp()[1], msg.value()))
        return out
    finally:
        consumer.close()


def test_retention_on_every_replica_consumers_reset_and_a_restarted_follower_follows_the_log_start(
    make_cluster,
):
    """Kafka's LogRetentionIntegrationTest / ReplicaFetcherThreadTest.shouldFetchLeaderEpochOnFirstFetch-
    OnlyIfLeaderEpochKnownToBoth's out-of-range path: retention.bytes deletes segments on all three
    replicas under produce load, the log start offset moves everywhere, a consumer at offset 0 resets to
    it, lookups by timestamp answer from the time indexes, and a follower that was down while the leader
    deleted what it still needed restarts at the leader's log start and rejoins the ISR."""
    cluster = make_cluster(3, broker_extra=RETENTION)
    bootstrap = cluster.bootstrap
    create_topic(
        bootstrap,
        "sized",
        **{"segment.bytes": "8192", "retention.bytes": "32768", "min.insync.replicas": "2"},
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    leader = admin.list_topics("sized", timeout=10).topics["sized"].partitions[0].leader
    follower = next(b for b in (1, 2, 3) if b != leader)
    cluster.node(follower).kill()
    produce(bootstrap, "sized", 0, 3000)

    def leader_deleted():
        bases = segment_bases(cluster, leader, "sized")
        return bases and bases[0] > 0 and bases

    wait_until(leader_deleted, what="the leader deleting segments past retention.bytes")
    cluster.node(follower).start()
    produce(bootstrap, "sized", 3000, 1000)

    def every_replica_retained():
        starts = [segment_bases(cluster, b, "sized") for b in (1, 2, 3)]
        sizes = [
            sum(p.stat().st_size for p in (cluster.data_dir / f"broker-{b}" / "sized-0").glob("*.log"))
            for b in (1, 2, 3)
        ]
        return all(s and s[0] > 0 for s in starts) and all(size <= 32768 + 2 * 8192 for size in sizes)

    wait_until(every_replica_retained, what="segments past retention.bytes gone on every replica")

    def full_isr():
        meta = admin.list_topics("sized", timeout=10).topics["sized"].partitions[0]
        return sorted(meta.isrs) == [1, 2, 3]

    wait_until(full_isr, what="the restarted follower back in the ISR")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    low, high = consumer.get_watermark_offsets(TopicPartition("sized", 0), timeout=10)
    assert low > 0 and high == 4000

    # A consumer asking for offset 0 gets OFFSET_OUT_OF_RANGE and resets to the (current) log start.
    records = consume_from(bootstrap, "sized", 0, 4000)
    first = records[0][0]
    assert first >= low
    assert [o for o, _, _ in records] == list(range(first, 4000))
    assert all(v.startswith(f"{o:08d}".encode()) for o, _, v in records)

    # ListOffsets by timestamp: the first retained record at or after each timestamp, through the time index.
    consumer.close()
    targets = [BASE_TS, BASE_TS + first + 10, BASE_TS + 3500, BASE_TS + 3999, BASE_TS + 5000]
    lookup = Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    found = [  # one lookup per call: librdkafka keeps one per partition
        lookup.offsets_for_times([TopicPartition("sized", 0, t)], timeout=10)[0] for t in targets
    ]
    lookup.close()
    expected = [max(t - BASE_TS, first) if t - BASE_TS < 4000 else -1 for t in targets]
    assert [(tp.offset, tp.error) for tp in found] == [(o, None) for o in expected]


def test_retention_by_time_deletes_old_segments_on_every_replica(make_cluster):
    """UnifiedLogTest.shouldDeleteTimeBasedSegmentsReadyToBeDeleted on a cluster: segments whose newest
    record is older than retention.ms go on all three replicas; the active one stays."""
    cluster = make_cluster(3, broker_extra=RETENTION)
    create_topic(cluster.bootstrap, "timed", **{"segment.bytes": "4096", "retention.ms": "3000"})
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2, "batch.size": 2048}
    )
    for i in range(400):
        producer.produce("timed", value=f"{i:06d}".encode().ljust(100, b"."))
        producer.poll(0)
    assert producer.flush(30) == 0
    total = 400

    def all_but_the_newest_gone():
        bases = [segment_bases(cluster, b, "timed") for b in (1, 2, 3)]
        return all(len(b) == 1 and b[0] > 0 for b in bases) and bases

    bases = wait_until(all_but_the_newest_gone, timeout=40, what="time-based deletion on every replica")
    assert all(b[0] < total for b in bases)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "wm"})
    low, high = consumer.get_watermark_offsets(TopicPartition("timed", 0), timeout=10)
    consumer.close()
    assert (low, high) == (bases[0][0], total)


def test_delete_records_through_confluent_kafka_and_kafka_python_moves_every_replicas_log_start(
    make_cluster,
):
    """Kafka's DeleteRecordsRequestTest: the leader answers with the low watermark once the followers'
    log start offsets have moved too; beyond the high watermark is OFFSET_OUT_OF_RANGE; consumers below
    the new start reset to it."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KpTopicPartition

    cluster = make_cluster(3, broker_extra=RETENTION)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "trimmed", **{"segment.bytes": "2048"})
    produce(bootstrap, "trimmed", 0, 200)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.delete_records([TopicPartition("trimmed", 0, 70)])
    deleted = next(iter(result.values())).result(15)
    assert deleted.low_watermark == 70
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        next(iter(admin.delete_records([TopicPartition("trimmed", 0, 500)]).values())).result(15)

    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = kp_admin.delete_records({KpTopicPartition("trimmed", 0): 120}, timeout_ms=15_000)
    finally:
        kp_admin.close()
    assert next(iter(answer.values()))["low_watermark"] == 120

    wait_until(
        lambda: all(checkpointed_start(cluster, b, "trimmed") == 120 for b in (1, 2, 3)),
        what="every replica checkpointing log start offset 120",
    )
    wait_until(
        lambda: all(0 < segment_bases(cluster, b, "trimmed")[0] <= 120 for b in (1, 2, 3)),
        what="segments below the log start deleted on every replica",
    )
    records = consume_from(bootstrap, "trimmed", 0, 200)
    assert [o for o, _, _ in records] == list(range(120, 200))


def test_a_compacted_consumer_offsets_still_resumes_every_group_after_a_full_restart(make_cluster):
    """LogCleanerIntegrationTest with GroupMetadataManagerTest.testLoadOffsetsAndGroup's restart: groups
    commit over and over, __consumer_offsets (cleanup.policy=compact, small segments) is compacted on
    every replica, every broker is killed at once and restarted on its disk, and every group reads back
    its last committed offsets."""
    cluster = make_cluster(3, broker_extra="offsets.topic.segment.bytes=1024\nlog.cleaner.backoff.ms=200\n")
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("work", num_partitions=3, replication_factor=3)])["work"].result(15)
    groups = [f"group-{g}" for g in range(4)]
    last: dict[str, list[int]] = {}
    for g, group in enumerate(groups):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        for round_ in range(40):
            offsets = [TopicPartition("work", p, 1 + round_ * 7 + p + g) for p in range(3)]
            consumer.commit(offsets=offsets, asynchronous=False)
        last[group] = [o.offset for o in offsets]
        consumer.close()

    def compacted_everywhere():
        def dropped_records(line: str) -> bool:
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            return int(fields["records_kept"]) < int(fields["records_read"])

        logs = [(cluster.data_dir / "logs" / f"broker-{b}.log").read_text() for b in (1, 2, 3)]
        return all(
            any(
                dropped_records(line)
                for line in text.splitlines()
                if "log compacted" in line and "topic=__consumer_offsets" in line
            )
            for text in logs
        )

    wait_until(compacted_everywhere, what="__consumer_offsets compacted on every broker")
    for node in cluster.nodes.values():
        node.kill()
    for node in cluster.nodes.values():
        node.launch()
    for node in cluster.nodes.values():
        node.wait_ready(60)
    for group in groups:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})

        def resumed(consumer=consumer, expected=last[group]):
            result = consumer.committed([TopicPartition("work", p) for p in range(3)], timeout=5)
            return result is not None and [tp.offset for tp in result] == expected

        wait_until(resumed, what=f"{group} resumed")
        consumer.close()
