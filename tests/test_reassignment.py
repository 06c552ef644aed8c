"""Partition reassignment (KIP-455) on a real cluster: replicas added to a partition that holds data catch up
and join the ISR, the reassignment completes (leadership moving off a removed replica), it can be
cancelled, and a new replica restarted with an empty disk mid-catch-up loses nothing acknowledged."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient

from epochkraft.harness.cluster import LocalCluster
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(240)]
VALUE = b"r" * 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp: Path = tmp_path_factory.mktemp("reassignment")
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config")
    cluster = LocalCluster(
        data_dir=tmp / "cluster", brokers=4, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    yield cluster
    cluster.kill_all()


def eventually(check: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Load:
    """An acks=all idempotent producer writing numbered records until stopped; remembers what was acked."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
        )
        self.topic = topic
        self.acked: dict[int, bytes] = {}  # offset -> value
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        def done(err, msg) -> None:
            if err is None:
                self.acked[msg.offset()] = msg.value()

        sequence = 0
        while not self.stopping.is_set():
            self.producer.produce(self.topic, f"load-{sequence}".encode(), partition=0, on_delivery=done)
            sequence += 1
            self.producer.poll(0.002)
        self.producer.flush(30)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(60)


def preload(bootstrap: str, topic: str, count: int) -> dict[int, bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    acked: dict[int, bytes] = {}
    for i in range(count):
        producer.produce(
            topic, VALUE, partition=0, on_delivery=lambda e, m: e or acked.__setitem__(m.offset(), m.value())
        )
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return acked


def read_all(bootstrap: str, topic: str, end: int) -> dict[int, bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: dict[int, bytes] = {}
    deadline = time.monotonic() + 90
    while len(found) < end and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                found[msg.offset()] = msg.value()
    consumer.close()
    return found


def partition_state(admin: AdminClient, topic: str) -> Any:
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]


def setup_topic(cluster: LocalCluster, topic: str) -> tuple[AdminClient, KafkaAdminClient, list[int], int]:
    """A one-partition RF 3 topic; returns the admin clients, its replicas and the broker it lacks."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(15)
    replicas = list(partition_state(admin, topic).replicas)
    spare = ({1, 2, 3, 4} - set(replicas)).pop()
    return (
        admin,
        KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15000),
        replicas,
        spare,
    )


def throttle(admin: AdminClient, broker: int, rate: str | None) -> None:
    """Sets (or removes, with None) the broker's follower replication throttle, and throttles every
    replica of the topics this module moves on the follower side."""
    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    resources = [
        ConfigResource(
            ResourceType.BROKER,
            str(broker),
            incremental_configs=[
                ConfigEntry("follower.replication.throttled.rate", rate, incremental_operation=op)
            ],
        ),
        ConfigResource(
            ResourceType.TOPIC,
            "rebuilt",
            incremental_configs=[
                ConfigEntry("follower.replication.throttled.replicas", "*", incremental_operation=op)
            ],
        ),
    ]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(15)


def check_nothing_lost(cluster: LocalCluster, topic: str, acked: dict[int, bytes]) -> None:
    found = read_all(cluster.bootstrap, topic, max(acked) + 1)
    lost = [offset for offset, value in acked.items() if found.get(offset) != value]
    assert not lost, f"{len(lost)} acknowledged records lost or changed, first offsets {sorted(lost)[:5]}"


def test_reassignment_adds_a_replica_under_load_and_moves_leadership_off_a_removed_one(cluster):
    admin, client, replicas, spare = setup_topic(cluster, "moving")
    acked = preload(cluster.bootstrap, "moving", 5000)
    leader = partition_state(admin, "moving").leader
    target = [r for r in replicas if r != leader] + [spare]
    try:
        with Load(cluster.bootstrap, "moving") as load:
            eventually(lambda: len(load.acked) > 200, what="load to start")
            assert client.alter_partition_reassignments({KTopicPartition("moving", 0): target}) == {
                KTopicPartition("moving", 0): None
            }
            ongoing = client.list_partition_reassignments()
            if ongoing:  # it may already be done on a fast machine
                (state,) = ongoing.values()
                assert state["adding_replicas"] == [spare] and state["removing_replicas"] == [leader]
            eventually(lambda: not client.list_partition_reassignments(), what="the reassignment to complete")
            eventually(lambda: len(load.acked) > 1000, what="produces to go on")
        final = partition_state(admin, "moving")
        assert sorted(final.replicas) == sorted(target) and sorted(final.isrs) == sorted(target)
        assert final.leader != leader and final.leader in target
    finally:
        client.close()
    check_nothing_lost(cluster, "moving", acked | load.acked)


def test_reassignment_survives_a_new_replica_restarted_with_an_empty_disk_mid_catch_up(cluster):
    """The added replica is SIGKILLed and restarted with a wiped data dir while it copies the partition;
    it registers again, fetches from the start, and joins the ISR only once caught up (KIP-903 stale
    epochs refused), so the reassignment completes with every acknowledged record intact."""
    admin, client, replicas, spare = setup_topic(cluster, "rebuilt")
    acked = preload(cluster.bootstrap, "rebuilt", 30000)
    new_dir = cluster.data_dir / f"broker-{spare}" / "rebuilt-0"
    try:
        with Load(cluster.bootstrap, "rebuilt") as load:
            eventually(lambda: len(load.acked) > 200, what="load to start")
            # Throttled as kafka-reassign-partitions --throttle does, so the copy is still under way when
            # the new replica is restarted, however fast the machine.
            throttle(admin, spare, "1000000")
            client.alter_partition_reassignments({KTopicPartition("rebuilt", 0): [*replicas, spare]})

            def copying() -> bool:
                size = sum(f.stat().st_size for f in new_dir.glob("*.log")) if new_dir.exists() else 0
                return size > 0 and spare not in partition_state(admin, "rebuilt").isrs

            caught_mid_copy = eventually(copying, timeout=30, what="the new replica to start copying")
            time.sleep(3)  # 30 MB at 1 MB/s after a 10 MB burst: the throttle keeps it copying
            assert spare not in partition_state(admin, "rebuilt").isrs, "the throttled copy is not done"
            throttle(admin, spare, None)
            cluster.node(spare).restart(wipe=True)
            eventually(lambda: not client.list_partition_reassignments(), what="the reassignment to complete")
            eventually(lambda: len(load.acked) > 1000, what="produces to go on")
        final = partition_state(admin, "rebuilt")
        assert sorted(final.isrs) == sorted([*replicas, spare])
        assert caught_mid_copy
    finally:
        client.close()
    check_nothing_lost(cluster, "rebuilt", acked | load.acked)
    sizes = {
        answer["broker"]: [
            p["partition_size"]
            for t in answer["log_dirs"][0]["topics"]
            if t["name"] == "rebuilt"
            for p in t["partitions"]
        ]
        for answer in KafkaAdminClient(bootstrap_servers=cluster.bootstrap).describe_log_dirs()
    }
    assert len({tuple(s) for s in sizes.values()}) == 1, f"replicas diverge: {sizes}"


def test_cancel_reassignment_to_a_broker_that_is_down(cluster):
    admin, client, replicas, spare = setup_topic(cluster, "cancelled")
    client.close()
    preload(cluster.bootstrap, "cancelled", 100)
    cluster.node(spare).kill()
    # Once fenced it leaves Metadata, so no client takes it for the controller (the lowest live broker).
    eventually(lambda: spare not in admin.list_topics(timeout=10).brokers, what="the killed broker fenced")
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15000)
    try:
        client.alter_partition_reassignments({KTopicPartition("cancelled", 0): [*replicas, spare]})
        ongoing = client.list_partition_reassignments()
        assert ongoing[KTopicPartition("cancelled", 0)]["adding_replicas"] == [spare]
        time.sleep(1)
        assert client.list_partition_reassignments(), "an absent replica cannot join the ISR"
        assert client.alter_partition_reassignments({KTopicPartition("cancelled", 0): None}) == {
            KTopicPartition("cancelled", 0): None
        }
        assert client.list_partition_reassignments() == {}
        eventually(
            lambda: sorted(partition_state(admin, "cancelled").replicas) == sorted(replicas),
            what="the original replicas back in Metadata",
        )
    finally:
        client.close()
        cluster.node(spare).start()
