"""A broker applies a large metadata change in slices: the event loop runs between them, and what is handed
on at each slice's end is a state the controller wrote (whole batches), not half a topic."""

from __future__ import annotations

import asyncio

from kio.schema.create_topics.v7 import request as ct

from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.metadata_follower import MetadataFollower
from epochkraft.broker.slices import Slicer
from tests.controller_context import NO_TIMEOUT, ControllerContext

TOPICS_PER_REQUEST = 200
REQUESTS = 5


def flood_log() -> bytes:
    """The metadata log after REQUESTS CreateTopics of TOPICS_PER_REQUEST two-partition RF 3 topics."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    for r in range(REQUESTS):
        topics = tuple(
            ct.CreatableTopic(
                name=f"t{r}-{i}", num_partitions=2, replication_factor=3, assignments=(), configs=()
            )
            for i in range(TOPICS_PER_REQUEST)
        )
        ctx.controller.create_topics(
            ctx.now, ct.CreateTopicsRequest(topics=topics, timeout=NO_TIMEOUT, validate_only=False)
        )
    return ctx.controller.log.read(0, 1 << 30)


async def test_a_large_change_is_handed_on_in_slices_at_batch_ends(monkeypatch):
    """With no time in a slice, every batch (one CreateTopics each) is handed on by itself, the loop
    running in between."""
    monkeypatch.setattr("epochkraft.broker.metadata_follower.SLICE_SECONDS", 0.0)
    cache = MetadataCache(1)
    handed_on: list[int] = []
    turns = 0

    async def on_changes(changes: Changes) -> None:
        # every topic handed on is whole: a slice never ends inside a controller's write
        assert all(len(t.partitions) == 2 for t in cache.topics.values())
        handed_on.append(len(changes.partitions))

    async def other_work() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    follower = MetadataFollower(None, cache, on_changes, node_id=1)  # type: ignore[arg-type]
    ticker = asyncio.create_task(other_work())
    await asyncio.sleep(0)
    turns_before = turns
    await follower._apply(0, flood_log())
    ticker.cancel()
    assert len(cache.topics) == REQUESTS * TOPICS_PER_REQUEST
    # the brokers' registrations and unfencing first, then one CreateTopics a batch
    assert [n for n in handed_on if n] == [TOPICS_PER_REQUEST * 2] * REQUESTS
    assert turns - turns_before >= REQUESTS  # the loop ran after each slice


async def test_slicer_yields_only_once_its_time_is_up():
    ran = 0

    async def other() -> None:
        nonlocal ran
        ran += 1

    slicer = Slicer(seconds=3600)
    asyncio.get_running_loop().create_task(other())
    await slicer.turn()
    assert ran == 0  # within its time: no turn for others
    slicer = Slicer(seconds=0)
    await slicer.turn()
    assert ran == 1
