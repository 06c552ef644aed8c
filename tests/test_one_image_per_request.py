"""The Metadata handler answers from one metadata image, as Kafka's KRaftMetadataCache methods read
``_currentImage`` once: the request's, or, when it auto-creates topics, the one their creation published
(it waits for it), for every topic and the brokers alike, so each leader answered is among the brokers
answered and no broker is both alive and offline in one answer."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from kio.schema.metadata.v12 import request as m12
from kio.schema.types import TopicName

from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.broker.settings import BrokerSettings
from epochkraft.metadata.image import Changes
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    BrokerEndpoint,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers import k03_metadata

EPOCH = 10
TOPIC_IDS = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=2), "new": uuid.UUID(int=3)}


def registered(broker_id: int) -> list[object]:
    endpoint = BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9090 + broker_id, security_protocol=0)
    return [
        RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=uuid.UUID(int=broker_id),
            broker_epoch=EPOCH,
            end_points=(endpoint,),
            rack=None,
            fenced=True,
            in_controlled_shutdown=False,
        ),
        UnfenceBrokerRecord(id=broker_id, epoch=EPOCH),
    ]


def topic(name: str, leader: int) -> list[object]:
    return [
        TopicRecord(name=name, topic_id=TOPIC_IDS[name]),
        PartitionRecord(
            partition_id=0,
            topic_id=TOPIC_IDS[name],
            replicas=(1, 2, 3),
            isr=(1, 2, 3),
            leader=leader,
            leader_epoch=0,
            partition_epoch=0,
        ),
    ]


class Broker:
    """Brokers 1-3 with topics a and b led by broker 2. Creating a topic publishes, with it, an image
    where broker 2 is fenced and a and b are led by broker 3 (the controller's next records)."""

    def __init__(self) -> None:
        self.cache = MetadataCache(1)
        self.settings = BrokerSettings()
        self.cluster_id = "cluster"
        self._load(*registered(1), *registered(2), *registered(3), *topic("a", 2), *topic("b", 2))

    def _load(self, *records: object) -> None:
        offset = self.cache.next_offset
        self.cache.load(enumerate(records, start=offset), Changes())

    async def auto_create_topic(self, name: str) -> None:
        moved = [PartitionChangeRecord(partition_id=0, topic_id=TOPIC_IDS[t], leader=3) for t in ("a", "b")]
        self._load(*topic(name, 3), FenceBrokerRecord(id=2, epoch=EPOCH), *moved)


async def metadata(broker: Broker, *names: str):
    request = m12.MetadataRequest(
        topics=tuple(m12.MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    header = SimpleNamespace(client_id="client")
    ctx = RequestContext("broker", header, 12, broker, ("127.0.0.1", 1), None)  # type: ignore[arg-type]
    return await k03_metadata.handle(request, ctx)


def leaders_and_offline(response) -> tuple[set[int], set[int]]:
    partitions = [p for t in response.topics for p in t.partitions]
    return {p.leader_id for p in partitions}, {o for p in partitions for o in p.offline_replicas}


async def test_a_request_that_auto_creates_answers_from_the_image_its_creation_published():
    """a and b come before and after "new" in the request: all three and the brokers come from the image
    the creation published, where broker 2 is fenced and a and b moved to broker 3."""
    broker = Broker()
    response = await metadata(broker, "a", "new", "b")
    by_name = {t.name: t for t in response.topics}
    assert by_name["new"].error_code == ErrorCode.none
    assert [[p.leader_id for p in by_name[n].partitions] for n in ("a", "new", "b")] == [[3], [3], [3]]
    brokers = {b.node_id for b in response.brokers}
    assert brokers == {1, 3}
    leaders, offline = leaders_and_offline(response)
    assert leaders <= brokers and not offline & brokers


async def test_a_request_without_creation_answers_from_the_image_it_began_with():
    broker = Broker()
    response = await metadata(broker, "a", "b")
    assert [[p.leader_id for p in t.partitions] for t in response.topics] == [[2], [2]]
    assert {b.node_id for b in response.brokers} == {1, 2, 3}
