"""Follows the controller's metadata log by long-poll Fetch and applies it to the metadata cache."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Awaitable, Callable

import structlog
from kio.schema.fetch.v16 import request as f16
from kio.schema.fetch.v16.response import FetchResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i32Timedelta, i64

from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.slices import SLICE_SECONDS
from epochkraft.metadata.fetch_snapshot import fetch_snapshot
from epochkraft.metadata.image import MetadataDelta
from epochkraft.metadata.snapshot import SnapshotId, decode_snapshot, removals_for
from epochkraft.net.controller_channel import ControllerChannel
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.protocol.metadata_codec import metadata_batches
from epochkraft.protocol.records import iter_batches

log = structlog.get_logger()


class MetadataApplyFailed(RuntimeError):
    """Handing applied records on failed (the replica manager could not carry them out): not a record
    that failed to decode, which a fetch retries, but a broker whose state would stop following its
    metadata, so the follower's task ends and the daemon stops."""


METADATA_TOPIC_ID = uuid.UUID(int=1)


class MetadataFollower:
    def __init__(
        self,
        client: ControllerChannel,
        cache: MetadataCache,
        on_changes: Callable[[Changes], Awaitable[None]],
        node_id: int,
        max_wait_ms: int = 500,
        on_published: Callable[[], None] | None = None,
    ) -> None:
        """``on_published`` runs after each publish, once ``published_offset`` has moved."""
        self.client = client
        self.cache = cache
        self.on_changes = on_changes
        self.on_published = on_published
        # The offset after the last record whose changes every listener has carried out (Kafka's
        # MetadataLoader moves its last applied offset only after every publisher ran): what a heartbeat
        # reports. The cache publishes its image and next_offset before the replica manager hears.
        self.published_offset = cache.next_offset
        self.node_id = node_id
        self.max_wait_ms = max_wait_ms
        self.progress = asyncio.Event()  # set whenever records were applied
        self.load_errors = 0  # records that failed to replay (Kafka's metadata-load-error-count)
        self._task: asyncio.Task[None] | None = None

    def start(self, on_fatal: Callable[[str], None] | None = None) -> None:
        """Starts following; ``on_fatal`` hears (and should stop the daemon) if the task ever fails."""
        self._task = asyncio.create_task(self._run(), name="metadata-follower")
        self._task.add_done_callback(lambda task: self._task_done(task, on_fatal))

    @staticmethod
    def _task_done(task: asyncio.Task[None], on_fatal: Callable[[str], None] | None) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        log.critical("metadata follower failed; stopping the broker", exc_info=error)
        if on_fatal is not None:
            on_fatal(f"metadata follower ended: {error!r}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _request(self, offset: int) -> f16.FetchRequest:
        return f16.FetchRequest(
            # named, as Kafka's brokers fetch: a controller quorum's leader lists us as an observer
            replica_state=f16.ReplicaState(replica_id=BrokerId(self.node_id), replica_epoch=i64(-1)),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=self.max_wait_ms)),
            min_bytes=i32(1),
            max_bytes=i32(64 * 1024 * 1024),
            isolation_level=i8(0),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                f16.FetchTopic(
                    topic_id=METADATA_TOPIC_ID,
                    partitions=(
                        f16.FetchPartition(
                            partition=i32(0),
                            current_leader_epoch=i32(-1),
                            fetch_offset=i64(offset),
                            last_fetched_epoch=i32(-1),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(64 * 1024 * 1024),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )

    async def _run(self) -> None:
        while True:
            offset = self.cache.next_offset
            try:
                response = await self.client.send(
                    self._request(offset), FetchResponse, timeout_ms=self.max_wait_ms + 10_000
                )
            except (NetworkError, ProtocolError, OSError) as exc:
                log.debug("metadata fetch failed", error=str(exc))
                await asyncio.sleep(0.1)
                continue
            data = response.responses[0].partitions[0]
            if data.error_code == ErrorCode.none and data.snapshot_id.end_offset >= 0:
                await self._load_snapshot(SnapshotId(data.snapshot_id.end_offset, data.snapshot_id.epoch))
                continue
            if data.error_code != ErrorCode.none:
                log.warning("metadata fetch error", error=data.error_code.name)
                await asyncio.sleep(0.2)
                continue
            if not data.records:
                continue
            try:
                await self._apply(offset, data.records)
            except ProtocolError as exc:
                log.error("undecodable metadata record; retrying", error=str(exc))
                await asyncio.sleep(0.5)
                continue

    async def _apply(self, offset: int, records: bytes) -> None:
        """Replays the fetched batches from ``offset`` on into a delta over the published image and
        publishes the next image with the delta's changes (letting the event loop run: heartbeats,
        replica fetches, clients) once a slice's time is up (broker/slices.py). Slices end at batch
        boundaries, so every image published is a state the controller wrote, as Kafka's
        MetadataLoader publishes an image per batch."""
        delta, next_offset = MetadataDelta(self.cache.image, Changes()), self.cache.next_offset
        started = time.monotonic()
        try:
            for batch in metadata_batches(records):
                for record_offset, record in batch:
                    if record_offset >= offset:
                        self._replay(delta, record_offset, record)
                        next_offset = record_offset + 1
                if time.monotonic() - started >= SLICE_SECONDS:
                    await self._publish(delta, next_offset)
                    delta, started = MetadataDelta(self.cache.image, Changes()), time.monotonic()
        except ProtocolError:
            # the batches before an undecodable one are replayed: published now, since the retry
            # fetches from after them
            await self._publish(delta, next_offset)
            raise
        # past a trailing control batch (a controller quorum's LeaderChangeMessage) too
        await self._publish(delta, max(next_offset, _end_offset(records)))

    def _replay(self, delta: MetadataDelta, offset: int, record: object) -> None:
        """One record into the delta. One that fails to replay is a fault of this broker's loading,
        logged and counted, and the records after it are replayed all the same (Kafka's
        MetadataBatchLoader.loadBatch, whose fault handler is not fatal on a broker: SharedServer's
        metadataLoaderFaultHandler): ending here would stop every broker on the same record, and what the
        batch's other records changed must still reach the replicas."""
        try:
            delta.replay(record)
        except Exception:
            self.load_errors += 1
            log.exception("error loading metadata record", offset=offset, record=type(record).__name__)

    async def _publish(self, delta: MetadataDelta, next_offset: int) -> None:
        """The next image into the cache, then its changes to the replica manager (Kafka's
        BrokerMetadataPublisher: the metadata cache's image first, then ReplicaManager.applyDelta)."""
        self.cache.publish(delta.apply(), max(self.cache.next_offset, next_offset))
        changes = delta.changes
        if changes:
            try:
                await self.on_changes(changes)
            except Exception as exc:  # not a decode error: the image is published, its changes lost
                raise MetadataApplyFailed(
                    f"applying metadata up to {self.cache.next_offset}: {exc!r}"
                ) from exc
        self.published_offset = self.cache.next_offset
        if self.on_published is not None:
            self.on_published()
        self.progress.set()
        self.progress = asyncio.Event()
        await asyncio.sleep(0)

    async def _load_snapshot(self, snapshot_id: SnapshotId) -> None:
        """The controller dropped its log below where we are: its snapshot (FetchSnapshot) replaces our
        image, with what the snapshot no longer holds taken out first so the replica manager hears of
        it (a deleted topic, an unregistered broker), and fetching goes on from its end."""
        try:
            data = await fetch_snapshot(self.client.send, snapshot_id, replica_id=self.node_id)
            snapshot = decode_snapshot(data, snapshot_id)
        except (NetworkError, ProtocolError, OSError) as exc:
            log.warning("metadata snapshot fetch failed", snapshot=str(snapshot_id), error=str(exc))
            await asyncio.sleep(0.2)
            return
        delta = MetadataDelta(self.cache.image, Changes())
        offset = snapshot_id.last_contained_offset
        for record in removals_for(self.cache.image, snapshot.records) + snapshot.records:
            self._replay(delta, offset, record)
        log.info("metadata snapshot loaded", end_offset=snapshot_id.end_offset, records=len(snapshot.records))
        await self._publish(delta, snapshot_id.end_offset)


def _end_offset(records: bytes) -> int:
    end = 0
    for _pos, header in iter_batches(records):
        end = header.next_offset
    return end
