"""Follower fetch loop: one per source broker, replicating every partition this broker follows there.

Each Fetch carries this broker's id and broker epoch in ReplicaState (v15+, KIP-903) and, per partition,
the current leader epoch and the epoch of the last fetched batch, so the leader can answer with a
diverging epoch; the follower then truncates and fetches again. The unsafe pre-KIP-903 mode sends
Fetch v14 with only the replica id, as brokers did before.

Requests go through a fetch session with the leader (KIP-227, ``fetch_session_handler``, as Kafka's
RemoteLeaderEndPoint.buildFetch): once the leader answers with a session id, each Fetch names only the
partitions added or changed since the last one and forgets those no longer fetched, and the leader
answers only the partitions with something new; a partition absent from an answer is unchanged. A lost
or new connection starts a full session again.

The leader's answer is applied with the follower rules of ``fetch_rules``: a DivergingEpoch truncates to
``truncation_offset``; OFFSET_OUT_OF_RANGE restarts at the leader's log start when our log ends before it,
else at the leader's high watermark. A fetcher that fails for any reason logs it and starts again after a
backoff; once stopped it never starts again, so nothing is appended or truncated after the broker stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import ssl
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog
from kio.schema.fetch.v14 import request as f14
from kio.schema.fetch.v16 import request as f16
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i32Timedelta, i64

from epochkraft.broker.fetch_rules import truncation_offset
from epochkraft.broker.fetch_session_handler import FetchRequestData, FetchSessionHandler, PartitionData
from epochkraft.broker.replication_quota import (
    FOLLOWER_REPLICAS,
    ReplicationQuota,
    follower_rate,
    is_throttled,
)
from epochkraft.metadata.config_schema import ResourceType
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.protocol.fetch_response import FetchedPartition, decode_partitions

if TYPE_CHECKING:
    from epochkraft.broker.replica_manager import Replica, ReplicaManager
    from epochkraft.metadata.image import MetadataImage

log = structlog.get_logger()
TOPIC = int(ResourceType.TOPIC)
BACKOFF_S = 0.1
# Refused answers after which the next request (a full one) goes out without a back-off: Kafka's
# RemoteLeaderEndPoint.fetch answers them with no partitions, where FETCH_SESSION_TOPIC_ID_ERROR raises.
RETRIED_AT_ONCE = frozenset(
    (ErrorCode.none, ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch)
)


class ReplicaFetcher:
    def __init__(
        self,
        source_id: int,
        manager: ReplicaManager,
        broker_epoch: Callable[[], int],
        unsafe_pre_kip903: bool,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.source_id = source_id
        self.ssl_context = ssl_context  # TLS to an SSL inter-broker listener
        self.manager = manager
        self.broker_epoch = broker_epoch
        self.unsafe = unsafe_pre_kip903
        self.partitions: dict[tuple[str, int], Replica] = {}
        self._changed = asyncio.Event()
        self._client: KafkaClient | None = None
        self.stopped = False
        self.restarts = 0
        self.quota = ReplicationQuota()
        self.session = FetchSessionHandler(source_id)
        self._task = asyncio.create_task(self._supervise(), name=f"fetcher-{source_id}")

    def add(self, replica: Replica) -> None:
        if self.stopped:
            return
        self.partitions[replica.key] = replica
        self._changed.set()

    def remove(self, key: tuple[str, int]) -> None:
        if self.partitions.pop(key, None) is not None:
            self._changed.set()

    async def stop(self) -> None:
        """Stops for good: when this returns, no answer is applied to any log any more."""
        self.stopped = True
        self.partitions.clear()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        if self._client is not None:
            await self._client.close()

    async def _supervise(self) -> None:
        """Runs the fetch loop; a failure of any kind is logged and the loop starts again on a new
        connection after a backoff (a fetcher never vanishes while the broker runs)."""
        while not self.stopped:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.restarts += 1
                log.exception("replica fetcher failed; restarting", source=self.source_id)
                client, self._client = self._client, None
                self.session.handle_error("fetcher restarted")
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.close()
                await asyncio.sleep(BACKOFF_S)

    def _connect(self) -> KafkaClient | None:
        endpoint = self.manager.cache.image.endpoint(
            self.source_id, self.manager.settings.inter_broker_listener_name
        )
        if endpoint is None:
            return None
        if self._client is None or (self._client.host, self._client.port) != (endpoint.host, endpoint.port):
            if self._client is not None:  # another leader endpoint: the session there cannot go on
                self.session.handle_error("new connection")
            self._client = KafkaClient(
                endpoint.host,
                endpoint.port,
                client_id=f"replica-fetcher-{self.manager.node_id}",
                request_timeout_ms=self.manager.settings.replica_fetch_wait_max_ms + 10_000,
                ssl_context=self.ssl_context,
            )
        return self._client

    async def _run(self) -> None:
        while not self.stopped:
            if not self.partitions and not self.session.session_partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            client = self._connect()
            if client is None:
                await asyncio.sleep(BACKOFF_S)
                continue
            replicas = self._fetchable(asyncio.get_running_loop().time())
            data = self._build(replicas)
            # Nothing to fetch and nothing left to forget (RemoteLeaderEndPoint.buildFetch sends no request):
            # every replica is throttled (wait for the measured rate to fall below the bound) or removed.
            if not data.session_partitions and not data.forgotten:
                await asyncio.sleep(BACKOFF_S)
                continue
            # Every replica of the session, not only those sent: the leader answers any that has news.
            by_key = {(r.partition.topic_id, r.partition.index): r for r in replicas}
            try:
                backoff = await client.send(
                    self._request(data), on_frame=functools.partial(self._apply, by_key=by_key)
                )
            except (NetworkError, ProtocolError) as exc:
                log.debug("follower fetch failed", source=self.source_id, error=str(exc))
                self.session.handle_error(str(exc))
                await asyncio.sleep(BACKOFF_S)
                continue
            except OSError as exc:  # this broker's own disk: the answer is appended as it arrives
                log.warning("follower append failed", source=self.source_id, error=str(exc))
                self.session.handle_error(str(exc))
                self.manager.log_dir_failed("error appending replicated records", exc)
                await asyncio.sleep(BACKOFF_S)
                continue
            if backoff:
                await asyncio.sleep(BACKOFF_S)

    def _fetchable(self, now: float) -> list[Replica]:
        """The replicas to fetch now: all of them, less the throttled ones outside the ISR while the
        follower replication quota is exceeded (Kafka's ReplicaFetcherThread.shouldFollowerThrottle)."""
        replicas = list(self.partitions.values())
        image = self.manager.cache.image
        rate = follower_rate(image.dynamic_config, self.manager.node_id)
        if rate is None or not self.quota.exceeded(rate, now):
            return replicas
        return [r for r in replicas if not self._throttled(image, r)]

    def _throttled(self, image: MetadataImage, replica: Replica) -> bool:
        p = replica.partition
        if self.manager.node_id in p.isr:
            return False
        config = image.dynamic_config(TOPIC, p.topic).get(FOLLOWER_REPLICAS)
        return is_throttled(config, p.index, self.manager.node_id)

    def _apply(
        self, frame: bytes | memoryview, pos: int, by_key: dict[tuple[uuid.UUID, int], Replica]
    ) -> bool:
        """Applies the leader's answer as it arrives (the records are views into the receive buffer, so
        they go to the log without a copy); True when the fetcher should back off. The session handler
        sees the answer first: one it refuses (a top-level error, partitions the session does not
        hold, a full answer missing some) is not applied, and the next request is a full one, sent at
        once unless the error was other than the session's (RemoteLeaderEndPoint.fetch)."""
        answer = decode_partitions(frame, pos)
        answered = ((p.topic_id, p.index) for p in answer.partitions)
        if not self.session.handle_response(
            answer.error, answer.session_id, answered, answer.throttle_time_ms
        ):
            return answer.error not in RETRIED_AT_ONCE
        backoff = False
        for data in answer.partitions:
            replica = by_key.get((data.topic_id, data.index))
            if replica is None or self.partitions.get(replica.key) is not replica:
                continue  # moved away while the fetch was in flight
            backoff |= not self._handle(replica, data)
        return backoff

    def _build(self, replicas: list[Replica]) -> FetchRequestData:
        """This round's request from the fetch session: every replica wanted, the session says which to
        send and which to forget. What is built must be sent, or the send's failure handed to the session
        (``handle_error``): the session has moved on to it."""
        builder = self.session.new_builder(copy_session_partitions=False)  # read below, before the next build
        max_bytes = self.manager.settings.replica_fetch_max_bytes
        for r in replicas:  # thousands a round: positional, in PartitionData's order
            p, plog = r.partition, r.log
            builder.add(
                (p.topic, p.index),
                PartitionData(
                    p.topic_id,
                    plog.log_end_offset,
                    plog.log_start_offset,
                    max_bytes,
                    p.leader_epoch,
                    plog.epochs.latest_epoch,
                ),
            )
        return builder.build()

    def _request(self, data: FetchRequestData) -> f14.FetchRequest | f16.FetchRequest:
        """The Fetch for a built session request: v16 with ReplicaState, or the unsafe v14."""
        settings = self.manager.settings
        module = f14 if self.unsafe else f16
        by_topic: dict[uuid.UUID, list[tuple[int, PartitionData]]] = {}
        for (_topic, index), p in data.to_send.items():
            by_topic.setdefault(p.topic_id, []).append((index, p))
        topics = tuple(
            module.FetchTopic(
                topic_id=topic_id,
                partitions=tuple(
                    module.FetchPartition(
                        partition=index,
                        current_leader_epoch=p.current_leader_epoch,
                        fetch_offset=p.fetch_offset,
                        last_fetched_epoch=p.last_fetched_epoch,
                        log_start_offset=p.log_start_offset,
                        partition_max_bytes=p.max_bytes,
                    )
                    for index, p in group
                ),
            )
            for topic_id, group in by_topic.items()
        )
        forgotten_by_topic: dict[uuid.UUID, list[int]] = {}
        for f in data.forgotten:
            forgotten_by_topic.setdefault(f.topic_id, []).append(f.partition)
        forgotten = tuple(
            module.ForgottenTopic(topic_id=topic_id, partitions=tuple(indexes))
            for topic_id, indexes in forgotten_by_topic.items()
        )
        session_id, session_epoch = i32(data.metadata.session_id), i32(data.metadata.epoch)
        max_wait = i32Timedelta.parse(datetime.timedelta(milliseconds=settings.replica_fetch_wait_max_ms))
        max_bytes = i32(settings.replica_fetch_response_max_bytes)
        node = BrokerId(self.manager.node_id)
        if self.unsafe:
            return f14.FetchRequest(
                cluster_id=None,
                replica_id=node,
                max_wait=max_wait,
                min_bytes=i32(1),
                max_bytes=max_bytes,
                isolation_level=i8(0),
                session_id=session_id,
                session_epoch=session_epoch,
                topics=topics,
                forgotten_topics_data=forgotten,
                rack_id="",
            )
        return f16.FetchRequest(
            cluster_id=None,
            replica_state=f16.ReplicaState(replica_id=node, replica_epoch=i64(self.broker_epoch())),
            max_wait=max_wait,
            min_bytes=i32(1),
            max_bytes=max_bytes,
            isolation_level=i8(0),
            session_id=session_id,
            session_epoch=session_epoch,
            topics=topics,
            forgotten_topics_data=forgotten,
            rack_id="",
        )

    def _handle(self, replica: Replica, data: FetchedPartition) -> bool:
        """Applies one partition's answer; False when the fetcher should back off."""
        error = data.error
        plog = replica.log
        p = replica.partition
        if error == ErrorCode.offset_out_of_range:
            self._handle_out_of_range(replica, data)
            return True
        if error != ErrorCode.none:
            return False
        if data.diverging is not None:
            end = plog.log_end_offset
            target = max(truncation_offset(plog.epochs, end, p.high_watermark, data.diverging), 0)
            log.info(
                "follower truncating on divergence",
                topic=p.topic,
                partition=p.index,
                to=target,
                diverging_epoch=data.diverging[0],
            )
            replica.truncate_to(target)
            return target < end  # no progress: back off rather than ask the same again at once
        records = data.records
        if records:
            try:
                info = plog.append_as_follower(records)
            except ProtocolError as exc:
                log.warning("follower append failed", topic=p.topic, partition=p.index, error=str(exc))
                return False
            if self._throttled(
                self.manager.cache.image, replica
            ):  # only throttled replicas' bytes count against the quota
                self.quota.record(len(records), asyncio.get_running_loop().time())
            if info is not None:  # the same producer state and transaction index as the leader's
                completed = replica.producers.append(records, info.headers, info.positions)
                if completed:
                    plog.append_aborted_txns(completed)
        p.update_follower_high_watermark(data.high_watermark, plog.log_end_offset)
        replica.producers.on_high_watermark_updated(p.high_watermark)
        # The leader's log start offset, as far as this replica's high watermark (Kafka's follower
        # maybeIncrementLogStartOffset): what the leader deleted is deleted here at the next retention pass.
        plog.maybe_increment_log_start_offset(min(data.log_start_offset, p.high_watermark))
        return True

    def _handle_out_of_range(self, replica: Replica, data: FetchedPartition) -> None:
        """Kafka's AbstractFetcherThread.handleOutOfRangeError: a fetch offset below the leader's log
        start offset (retention or DeleteRecords removed what this replica still needs) starts the log
        afresh there; one past the leader's end truncates to the leader's high watermark and fetches on."""
        plog, p = replica.log, replica.partition
        leader_start = data.log_start_offset
        if leader_start > plog.log_end_offset or data.high_watermark < 0:
            start = max(leader_start, 0)
            log.warning(
                "follower behind the leader's log start offset; starting the log there",
                topic=p.topic,
                partition=p.index,
                log_end_offset=plog.log_end_offset,
                leader_log_start_offset=start,
            )
            replica.truncate_fully_and_start_at(start)
            p.high_watermark = start
            return
        target = max(data.high_watermark, leader_start)
        log.warning(
            "follower ahead of the leader's log; truncating to its high watermark",
            topic=p.topic,
            partition=p.index,
            log_end_offset=plog.log_end_offset,
            to=target,
        )
        replica.truncate_to(target)
