"""KIP-848 consumer groups with real clients: librdkafka (confluent-kafka, ``group.protocol=consumer``)
consumers share a topic through ConsumerGroupHeartbeat, one leaves and the other takes over, and every
record is consumed; the group is described and listed as a consumer group."""

from __future__ import annotations

import contextlib
import time

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from tests.test_clients import create_topic, produce

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(150)]

GROUP_PROTOCOL = {"group.protocol": "consumer"}


def consumer(bootstrap: str, group: str, **conf) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            **GROUP_PROTOCOL,
            **conf,
        }
    )


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def poll_until(consumers: list[Consumer], seen: dict[str, set[bytes]], done, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not done():
        for c in consumers:
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.setdefault(c.memberid() or "", set()).add(msg.value())


def test_two_consumers_share_a_topic_and_one_takes_over(make_cluster):
    cluster = make_cluster(brokers=3)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "kip848", partitions=6)
    first_batch = produce(bootstrap, "kip848", 300)
    a, b = consumer(bootstrap, "g848"), consumer(bootstrap, "g848")
    try:
        a.subscribe(["kip848"])
        b.subscribe(["kip848"])
        seen: dict[str, set[bytes]] = {}
        poll_until(
            [a, b],
            seen,
            lambda: (
                assigned(a)
                and assigned(b)
                and not assigned(a) & assigned(b)
                and len(assigned(a) | assigned(b)) == 6
            ),
            60,
        )
        assert len(assigned(a)) == 3 and len(assigned(b)) == 3, (assigned(a), assigned(b))
        assert not assigned(a) & assigned(b)
        everything = {v for _, _, v in first_batch}
        poll_until([a, b], seen, lambda: set().union(*seen.values()) >= everything, 30)
        assert set().union(*seen.values()) >= everything
        assert len(seen) == 2  # both consumed

        admin = AdminClient({"bootstrap.servers": bootstrap})
        (described,) = admin.describe_consumer_groups(["g848"]).values()
        group = described.result(15)
        assert str(group.type).endswith("CONSUMER") and len(group.members) == 2
        listed = admin.list_consumer_groups().result(15)
        assert [
            (g.group_id, str(g.type).endswith("CONSUMER")) for g in listed.valid if g.group_id == "g848"
        ] == [("g848", True)]

        b.close()  # leaves with member epoch -1: its partitions go to a at once
        second_batch = produce(bootstrap, "kip848", 300)
        later = {v for _, _, v in second_batch}
        taken: dict[str, set[bytes]] = {}
        poll_until(
            [a], taken, lambda: len(assigned(a)) == 6 and set().union(set(), *taken.values()) >= later, 60
        )
        assert len(assigned(a)) == 6
        assert set().union(*taken.values()) >= later
    finally:
        for c in (a, b):
            with contextlib.suppress(KafkaException, RuntimeError):
                c.close()
