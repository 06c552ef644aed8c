"""``__consumer_offsets`` as the group service sees it: a replicated topic whose partition leaders are
the group coordinators, written with acks=all so committed offsets survive broker failures."""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING

from kio.schema.create_topics.v7 import request as ct
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from epochkraft.broker.group_coordinator import OFFSETS_TOPIC
from epochkraft.broker.group_service import LoggedOffsetRecord, TxnOutcome
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import Record, RecordBatch, build_batch, decode_batches

if TYPE_CHECKING:
    from epochkraft.broker.node import BrokerServices

APPEND_TIMEOUT_MS = 10_000
COMMIT_MARKER = b"\x00\x01"  # a control record's key: version 0, then type 1 (commit) or 0 (abort)


class OffsetsTopic:
    def __init__(self, node: BrokerServices) -> None:
        self.node = node
        self.num_partitions = node.settings.offsets_topic_num_partitions
        self._creating: asyncio.Task[None] | None = None

    def leader_of(self, partition: int, listener_name: str | None = None) -> tuple[int, str, int] | None:
        image = self.node.cache.image
        reg = image.partition(OFFSETS_TOPIC, partition)
        if reg is None or reg.leader < 0:
            return None
        endpoint = image.endpoint(reg.leader, listener_name)
        return None if endpoint is None else (reg.leader, endpoint.host, endpoint.port)

    def is_local_leader(self, partition: int) -> bool:
        from epochkraft.broker.partition import Role

        replica = self.node.replica_manager.replica(OFFSETS_TOPIC, partition)
        return replica is not None and replica.partition.role == Role.LEADER

    async def ensure(self) -> None:
        if self.node.cache.image.topic(OFFSETS_TOPIC) is not None:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create())

    async def _create(self) -> None:
        settings = self.node.settings
        await create_internal_topic(
            self.node,
            OFFSETS_TOPIC,
            self.num_partitions,
            settings.offsets_topic_replication_factor,
            2,
            settings.offsets_topic_segment_bytes,
        )

    async def append(
        self,
        partition: int,
        entries: list[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        """``producer`` (id, epoch): a transactional batch of that producer (TxnOffsetCommit), which its
        transaction's marker commits or aborts."""
        now = self.node.now_ms()
        producer_id, producer_epoch, sequence = -1, -1, -1
        replica = self.node.replica_manager.replica(OFFSETS_TOPIC, partition)
        if producer is not None and replica is not None:
            producer_id, producer_epoch = producer
            sequence = replica.producers.next_sequence(producer_id, producer_epoch)
        records = build_batch(
            [(key, value, (), now) for key, value in entries],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=sequence,
            transactional=producer_id >= 0,
        )
        result = await self.node.replica_manager.append(
            OFFSETS_TOPIC, partition, records, -1, APPEND_TIMEOUT_MS
        )
        return result.error  # the group service answers it as Kafka's coordinator (normalize_append_error)

    def read_all(self, partition: int) -> list[LoggedOffsetRecord]:
        replica = self.node.replica_manager.replica(OFFSETS_TOPIC, partition)
        if replica is None:
            return []
        data = replica.log.read(replica.log.log_start_offset, 1 << 62)
        return [logged_record(batch, r) for batch in decode_batches(data) for r in batch.records]


async def create_internal_topic(
    node: BrokerServices,
    name: str,
    partitions: int,
    replication_factor: int,
    min_isr: int,
    segment_bytes: int,
) -> None:
    """Asks the controller for a compacted internal topic (its size follows the keys, not the writes),
    the replication factor and min.insync.replicas capped to the brokers alive, as Kafka's
    AutoTopicCreationManager does for __consumer_offsets and __transaction_state."""
    alive = len(node.cache.image.alive_brokers())
    rf = max(1, min(replication_factor, alive))
    topic = ct.CreatableTopic(
        name=TopicName(name),
        num_partitions=i32(partitions),
        replication_factor=i16(rf),
        assignments=(),
        configs=(
            ct.CreatableTopicConfig(name="min.insync.replicas", value=str(min(min_isr, rf))),
            ct.CreatableTopicConfig(name="cleanup.policy", value="compact"),
            ct.CreatableTopicConfig(name="segment.bytes", value=str(segment_bytes)),
        ),
    )
    request = ct.CreateTopicsRequest(
        topics=(topic,), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), validate_only=False
    )
    try:
        await node.forward_to_controller(request, CreateTopicsResponse)
    except Exception as exc:  # the next FindCoordinator retries
        node.log.warning(f"could not create {name}", error=str(exc))


def logged_record(batch: RecordBatch, record: Record) -> LoggedOffsetRecord:
    """A record as the group coordinator replays it: a control record is its transaction's outcome."""
    offset = batch.offset_of(record)
    if batch.is_control:
        committed = record.key is not None and len(record.key) >= 4 and record.key[2:4] == COMMIT_MARKER
        return LoggedOffsetRecord(
            None, None, batch.producer_id, TxnOutcome.COMMIT if committed else TxnOutcome.ABORT, offset
        )
    producer_id = batch.producer_id if batch.is_transactional else -1
    return LoggedOffsetRecord(record.key, record.value, producer_id, None, offset)
