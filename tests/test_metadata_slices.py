"""A broker applies a large metadata change in slices: the event loop runs between them, and what is handed
on at each slice's end is a state the controller wrote (whole batches), not half a topic."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.create_topics.v7 import request as ct

from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.metadata_follower import MetadataFollower
from epochkraft.broker.slices import Slicer
from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.protocol.records import iter_batches
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
        assert all(len(t.partitions) == 2 for t in cache.image.topics.values())
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
    assert len(cache.image.topics) == REQUESTS * TOPICS_PER_REQUEST
    # the brokers' registrations and unfencing first, then one CreateTopics a batch
    assert [n for n in handed_on if n] == [TOPICS_PER_REQUEST * 2] * REQUESTS
    assert turns - turns_before >= REQUESTS  # the loop ran after each slice


async def test_the_published_offset_moves_once_the_changes_are_carried_out(monkeypatch):
    """A heartbeat reports ``published_offset``, which moves only once the listeners have carried a
    slice's changes out (Kafka's MetadataLoader updates its last applied offset after every publisher),
    while the cache's offset moves per record."""
    monkeypatch.setattr("epochkraft.broker.metadata_follower.SLICE_SECONDS", 0.0)
    cache = MetadataCache(1)
    seen: list[tuple[int, int]] = []

    async def on_changes(changes: Changes) -> None:
        seen.append((follower.published_offset, cache.next_offset))

    published: list[int] = []
    follower = MetadataFollower(None, cache, on_changes, node_id=1)  # type: ignore[arg-type]
    follower.on_published = lambda: published.append(follower.published_offset)
    await follower._apply(0, flood_log())
    assert all(published_at < applied for published_at, applied in seen)
    assert follower.published_offset == cache.next_offset == published[-1]


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


def recording_replica_manager(monkeypatch, outputs, done: list, after=None):
    """A ReplicaManager whose replica set answers ``outputs`` to a metadata change, recording into ``done``
    each transition carried out (its kind and key), each slice's end ("yield") and, with ``after``, what
    ``after`` makes of each ``_after_replica_set`` call."""
    from epochkraft.broker import replica_manager

    class ReplicaSetStub:
        def apply_metadata(self, now_ms: int, changes: Changes) -> object:
            return outputs

    class RecordingSlicer:
        async def turn(self) -> None:
            done.append("yield")

    async def no_new_logs(changes: Changes, slicer: object) -> None:
        return None

    manager = object.__new__(replica_manager.ReplicaManager)
    manager.replica_set = ReplicaSetStub()
    manager.cache = MetadataCache(1)  # no config changes to read
    monkeypatch.setattr(manager, "_open_new_logs", no_new_logs)
    monkeypatch.setattr(manager, "_carry_out", lambda t: done.append((t.kind, t.key)))
    monkeypatch.setattr(
        manager, "_after_replica_set", (lambda o: done.append(after(o))) if after else (lambda o: None)
    )
    monkeypatch.setattr(replica_manager, "Slicer", RecordingSlicer)
    return manager


async def test_partitions_taken_away_are_stopped_before_the_first_slice_ends(monkeypatch):
    """ReplicaManager.applyDelta stops deleted and moved-away partitions first: every removal is carried
    out before the loop runs anything else, so no produce or fetch is served meanwhile by a partition the
    metadata has taken away; the other transitions follow in slices, a key's removal before its new one."""
    from epochkraft.broker.replica_set import ReplicaOutputs, Transition

    transitions = [
        Transition(("a", 0), "leader"),
        Transition(("gone", 0), "removed", was_leader=True),
        Transition(("b", 0), "follower"),
        Transition(("again", 0), "removed"),
        Transition(("again", 0), "leader"),
    ]
    done: list[object] = []
    manager = recording_replica_manager(monkeypatch, ReplicaOutputs(transitions=tuple(transitions)), done)
    await manager.on_metadata(Changes())
    first_yield = done.index("yield")
    assert done[:first_yield] == [("removed", ("gone", 0)), ("removed", ("again", 0)), ("leader", ("a", 0))]
    assert [d for d in done if d != "yield"][3:] == [("follower", ("b", 0)), ("leader", ("again", 0))]


async def test_what_a_change_requests_and_frees_is_carried_out_before_the_slices(monkeypatch):
    """The ISR requests a metadata change makes (an unclean leader's RECOVERED report) and the high
    watermarks it frees on replicas that exist already go out before the slices of its transitions (seconds
    for thousands of partitions); the moved HWs are woken again at the end, for the new leaders' replicas."""
    from epochkraft.broker.replica_set import IsrEvent, ReplicaOutputs, Transition

    requested = IsrEvent(("a", 0), "requested", None)
    outputs = ReplicaOutputs(
        transitions=(Transition(("a", 0), "leader"), Transition(("b", 0), "follower")),
        hw_moved=(("c", 0),),
        isr_events=(requested,),
    )
    done: list[object] = []

    def carried_out(o: ReplicaOutputs) -> object:
        return (o.hw_moved, o.isr_events)

    await recording_replica_manager(monkeypatch, outputs, done, carried_out).on_metadata(Changes())
    assert done == [
        ((("c", 0),), (requested,)),
        ("leader", ("a", 0)),
        "yield",
        ("follower", ("b", 0)),
        "yield",
        ((("c", 0),), ()),
    ]


async def test_a_failure_to_carry_out_metadata_stops_the_broker_instead_of_being_retried_as_a_bad_record():
    """A record that does not decode is fetched again; but once records are applied, a failure of the
    replica manager to carry them out (here a damaged local log read while rebuilding producer state)
    cannot be retried (the cache has moved on): the follower's task ends and the daemon is told to stop."""
    from types import SimpleNamespace

    from epochkraft.protocol.records import CorruptRecordError

    records = flood_log()
    answer = SimpleNamespace(
        error_code=ErrorCode.none, snapshot_id=SimpleNamespace(end_offset=-1, epoch=-1), records=records
    )
    fetches = 0

    class OneAnswer:
        async def send(self, request: object, response_type: type, timeout_ms: int) -> object:
            nonlocal fetches
            fetches += 1
            if fetches > 1:
                await asyncio.sleep(3600)  # a long poll with nothing new
            return SimpleNamespace(responses=[SimpleNamespace(partitions=[answer])])

    async def on_changes(changes: Changes) -> None:
        raise CorruptRecordError("a damaged batch in a local log")

    fatal: list[str] = []
    follower = MetadataFollower(OneAnswer(), MetadataCache(1), on_changes, node_id=1)  # type: ignore[arg-type]
    follower.start(on_fatal=fatal.append)
    for _ in range(100):
        if fatal:
            break
        await asyncio.sleep(0.01)
    await follower.stop()
    assert fatal and "metadata follower ended" in fatal[0] and fetches == 1


async def test_the_batches_before_an_undecodable_one_are_handed_on_before_the_retry(monkeypatch):
    """A batch that does not decode stops the apply; the whole batches before it are in the image and
    the retry fetches from after them, so their changes must reach the replicas first (else the
    partitions they created would never be hosted)."""
    log = flood_log()
    batches = list(iter_batches(log))
    last_pos = batches[-1][0]
    corrupted = bytearray(log)
    corrupted[-1] ^= 0xFF  # the last CreateTopics' batch fails its CRC
    monkeypatch.setattr("epochkraft.broker.metadata_follower.SLICE_SECONDS", 3600.0)  # one slice
    cache = MetadataCache(1)
    handed_on: set[tuple[str, int]] = set()

    async def on_changes(changes: Changes) -> None:
        handed_on.update(changes.partitions)

    follower = MetadataFollower(None, cache, on_changes, node_id=1)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        await follower._apply(0, bytes(corrupted))
    applied = {(t.name, p) for t in cache.image.topics.values() for p in t.partitions}
    assert len(applied) == (REQUESTS - 1) * TOPICS_PER_REQUEST * 2
    assert handed_on == applied
    await follower._apply(cache.next_offset, log[last_pos:])  # the retry: the good bytes this time
    assert len(handed_on) == REQUESTS * TOPICS_PER_REQUEST * 2
