"""The metadata delta: records replayed over an image give the next image and leave the one they started
from as it was, whatever the batches (Kafka's MetadataImageTest.testToImage through
RecordTestUtils.TestThroughAllIntermediateImagesLeadingToFinalImageHelper, testApplyDelta1), and a broker's
cache publishes a batch whole or not at all."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.delete_topics.v6 import request as dt

from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.controller.configuration_control import OpType
from epochkraft.metadata.image import MetadataDelta, MetadataImage, image_after
from epochkraft.metadata.snapshot import image_records
from epochkraft.protocol.metadata_records import (
    ClientQuotaRecord,
    EntityData,
    PartitionChangeRecord,
    ProducerIdsRecord,
    TopicRecord,
)
from tests.controller_context import ControllerContext


def state(image: MetadataImage) -> object:
    """Everything an image holds, as plain values (the version counters aside)."""
    return (
        dict(image.brokers),
        {t: (i.name, dict(i.partitions)) for t, i in image.topics.items()},
        dict(image.topic_ids),
        {r: dict(v) for r, v in image.configs.items()},
        dict(image.scram_credentials),
        dict(image.acls),
        image.next_producer_id,
        {e: dict(v) for e, v in image.client_quotas.items()},
        dict(image.features),
    )


def a_controllers_log() -> tuple[list[object], MetadataImage]:
    """Every kind of record a run writes: registrations, fencing, topics, ISR changes, elections,
    configs, client quotas, a deleted topic; with the controller's own image at the end."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("kept", [[1, 2, 3], [2, 3, 1]], configs={"retention.ms": "1000"})
    ctx.create_topic("gone", [[2, 3, 1]], configs={"retention.ms": "2000"})
    ctx.fence_brokers(3)
    ctx.unfence_brokers(3)
    ctx.alter_client_quotas({(("user", "alice"),): {"producer_byte_rate": 1000.0}})
    ctx.incremental_alter_configs({(4, ""): {"log.retention.ms": (OpType.SET, "5000")}})
    deleted = ctx.controller.delete_topics(
        ctx.now,
        dt.DeleteTopicsRequest(
            topics=(dt.DeleteTopicState(name="gone", topic_id=None),), timeout=datetime.timedelta(seconds=1)
        ),
    )
    assert deleted.responses[0].error_code == 0
    records = [record for _offset, record in ctx.controller.log.records()]
    return records, ctx.controller.image


def test_through_all_intermediate_images_leading_to_final_image():
    """MetadataImageTest.testToImage: from the empty image, stopping at each intermediate image along the
    way, the second delta ends at the image one delta of all the records makes, and neither delta
    changed the image it started from."""
    records, controllers = a_controllers_log()
    final = image_after(MetadataImage(), records)
    assert state(final) == state(controllers)
    for cut in range(len(records) + 1):
        empty = MetadataImage()
        middle = image_after(empty, records[:cut])
        before = state(middle)
        assert state(image_after(middle, records[cut:])) == state(final), cut
        assert state(middle) == before, cut
        assert state(empty) == state(MetadataImage())


def test_apply_delta_leaves_every_earlier_image_as_it_was():
    """A broker's images, one per record: each stays what it was when published while later deltas run
    (a handler holding one reads one state of the controller's)."""
    records, _ = a_controllers_log()
    images = [MetadataImage()]
    for record in records:
        images.append(image_after(images[-1], [record]))
    fresh = [image_after(MetadataImage(), records[:n]) for n in range(len(records) + 1)]
    assert [state(i) for i in images] == [state(i) for i in fresh]


def test_image_round_trip():
    """MetadataImageTest.testImage1RoundTrip: the records an image writes (a snapshot's) make it again."""
    _, image = a_controllers_log()
    assert state(image_after(MetadataImage(), image_records(image, 20))) == state(image)


def test_a_delta_shares_what_its_records_did_not_touch():
    """The next image copies only what changed: a partition change copies its topic, not the others."""
    records, _ = a_controllers_log()
    image = image_after(MetadataImage(), records)
    kept = image.topic_ids["kept"]
    other_id = uuid.uuid4()
    image = image_after(image, [TopicRecord(name="other", topic_id=other_id)])
    isr_before = image.topics[kept].partitions[0].isr
    delta = MetadataDelta(image, Changes())
    delta.replay(PartitionChangeRecord(partition_id=0, topic_id=kept, isr=(1,)))
    after = delta.apply()
    assert after.topics[other_id] is image.topics[other_id]
    assert after.brokers is image.brokers and after.configs is image.configs
    assert after.topics[kept] is not image.topics[kept]
    assert after.topics[kept].partitions[0].isr == (1,) != isr_before
    assert image.topics[kept].partitions[0].isr == isr_before
    assert delta.changes == Changes(partitions={("kept", 0)})
    for late in (
        PartitionChangeRecord(partition_id=1, topic_id=kept, isr=(2, 3)),
        ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=10_000),
    ):
        with pytest.raises(RuntimeError):  # the next image is published: nothing more goes into it
            delta.replay(late)
    assert after.next_producer_id == image.next_producer_id


def test_a_config_or_quota_change_copies_only_its_own_entry():
    alice = (EntityData(entity_type="user", entity_name="alice"),)
    bob = (EntityData(entity_type="user", entity_name="bob"),)
    image = image_after(
        MetadataImage(),
        [
            ClientQuotaRecord(entity=alice, key="producer_byte_rate", value=1.0),
            ClientQuotaRecord(entity=bob, key="producer_byte_rate", value=2.0),
        ],
    )
    after = image_after(image, [ClientQuotaRecord(entity=alice, key="consumer_byte_rate", value=3.0)])
    assert image.client_quotas[(("user", "alice"),)] == {"producer_byte_rate": 1.0}
    assert after.client_quotas[(("user", "alice"),)] == {"producer_byte_rate": 1.0, "consumer_byte_rate": 3.0}
    assert after.client_quotas[(("user", "bob"),)] is image.client_quotas[(("user", "bob"),)]
    assert after.client_quotas_version == image.client_quotas_version + 1


def test_a_batch_that_fails_publishes_nothing():
    """MetadataCache.load publishes a batch whole: a record that raises leaves the cache's image and offset
    as they were (the loader itself counts such a record and goes on: test_metadata_loading_faults)."""
    cache = MetadataCache(1)
    cache.apply(0, TopicRecord(name="t", topic_id=uuid.uuid4()), Changes())
    published = cache.image

    class Unknown:
        pass

    with pytest.raises(TypeError):
        cache.load([(1, TopicRecord(name="u", topic_id=uuid.uuid4())), (2, Unknown())], Changes())
    assert cache.image is published and cache.next_offset == 1
    assert set(cache.image.topic_ids) == {"t"}


def test_the_controllers_image_is_replayed_in_place():
    """The controller's managers read one image they replay into (its state), never a copy."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    image, brokers, topics = ctx.controller.image, ctx.controller.image.brokers, ctx.controller.image.topics
    ctx.create_topic("t", [[1, 2, 3]])
    ctx.fence_brokers(3)
    assert ctx.controller.image is image
    assert image.brokers is brokers and image.topics is topics
    assert image.brokers[3].fenced and image.topic("t") is not None
    with pytest.raises(TypeError):
        MetadataDelta(image, in_place=True).apply()


def test_the_authorizer_reads_the_acls_of_each_image_published():
    """A broker's authorizer is one of the cache's publishers (Kafka's AclPublisher): an ACL replayed after
    start-up is enforced, though the delta put it in a new dict."""
    from epochkraft.protocol.metadata_records import AccessControlEntryRecord
    from epochkraft.security.authorizer import (
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
        StandardAuthorizer,
    )
    from epochkraft.security.principal import KafkaPrincipal

    cache = MetadataCache(1)
    authorizer = StandardAuthorizer(frozenset(), allow_everyone_if_no_acl_found=False)
    cache.publishers.append(authorizer.publish_acls)
    alice = KafkaPrincipal("User", "alice")
    assert not authorizer.authorize(alice, "h", AclOperation.WRITE, ResourceType.TOPIC, "t")
    allow = AccessControlEntryRecord(
        id=uuid.uuid4(),
        resource_type=int(ResourceType.TOPIC),
        resource_name="t",
        pattern_type=int(PatternType.LITERAL),
        principal="User:alice",
        host="*",
        operation=int(AclOperation.WRITE),
        permission_type=int(AclPermissionType.ALLOW),
    )
    cache.apply(0, allow, Changes())
    assert authorizer.authorize(alice, "h", AclOperation.WRITE, ResourceType.TOPIC, "t")
