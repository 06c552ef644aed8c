"""A broker's metadata loading goes past a record it cannot replay, as Kafka's MetadataBatchLoader: the
fault is logged and counted (metadata-load-error-count) and the batch's other records, and the batches
after it, are replayed and handed on to the replicas (Kafka's fault handler is not fatal on a broker)."""

from __future__ import annotations

import uuid

from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.metadata_follower import MetadataFollower
from epochkraft.protocol.metadata_codec import metadata_batch
from epochkraft.protocol.metadata_records import (
    AccessControlEntryRecord,
    ConfigRecord,
    PartitionRecord,
    TopicRecord,
)

TOPIC_ID = uuid.UUID(int=7)
UNKNOWN_RESOURCE_TYPE = 99  # no ACL resource type of this broker's: its replay raises


def _log() -> bytes:
    first = metadata_batch(
        0,
        [
            TopicRecord(name="t", topic_id=TOPIC_ID),
            AccessControlEntryRecord(
                id=uuid.UUID(int=1),
                resource_type=UNKNOWN_RESOURCE_TYPE,
                resource_name="t",
                pattern_type=3,
                principal="User:a",
                host="*",
                operation=3,
                permission_type=3,
            ),
            PartitionRecord(
                partition_id=0,
                topic_id=TOPIC_ID,
                replicas=(1,),
                isr=(1,),
                leader=1,
                leader_epoch=0,
                partition_epoch=0,
            ),
        ],
    )
    second = metadata_batch(
        3, [ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="1")]
    )
    return first + second


async def test_a_record_that_fails_to_replay_is_counted_and_loading_goes_on():
    """Kafka's MetadataBatchLoaderTest.testUnexpectedBeginTransaction: the fault handler hears of the
    record and the records after it are loaded all the same."""
    cache = MetadataCache(1)
    handed_on: list[Changes] = []

    async def on_changes(changes: Changes) -> None:
        handed_on.append(changes)

    follower = MetadataFollower(None, cache, on_changes, node_id=1)  # type: ignore[arg-type]
    await follower._apply(0, _log())
    assert follower.load_errors == 1
    assert not cache.image.acls
    partition = cache.image.partition("t", 0)
    assert partition is not None and partition.leader == 1
    assert cache.image.topic_config("t", "retention.ms") == "1"
    assert cache.next_offset == follower.published_offset == 4
    assert {key for c in handed_on for key in c.partitions} == {("t", 0)}
    assert {name for c in handed_on for name in c.topic_configs} == {"t"}
