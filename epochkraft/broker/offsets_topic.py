"""``__consumer_offsets`` as the group service sees it: a replicated topic whose partition leaders are
the group coordinators, written with acks=all so committed offsets survive broker failures."""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING

from kio.schema.create_topics.v7 import request as ct

from epochkraft.broker.group_coordinator import OFFSETS_TOPIC
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import build_batch, decode_batches

if TYPE_CHECKING:
    from epochkraft.broker.daemon import BrokerNode

APPEND_TIMEOUT_MS = 10_000


class OffsetsTopic:
    def __init__(self, node: BrokerNode) -> None:
        self.node = node
        self.num_partitions = node.settings.offsets_topic_num_partitions
        self._creating: asyncio.Task[None] | None = None

    def leader_of(self, partition: int, listener_name: str | None = None) -> tuple[int, str, int] | None:
        reg = self.node.cache.partition(OFFSETS_TOPIC, partition)
        if reg is None or reg.leader < 0:
            return None
        endpoint = self.node.cache.endpoint(reg.leader, listener_name)
        return None if endpoint is None else (reg.leader, endpoint.host, endpoint.port)

    def is_local_leader(self, partition: int) -> bool:
        from epochkraft.broker.partition import Role

        replica = self.node.replica_manager.replica(OFFSETS_TOPIC, partition)
        return replica is not None and replica.partition.role == Role.LEADER

    async def ensure(self) -> None:
        if self.node.cache.topic(OFFSETS_TOPIC) is not None:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create())

    async def _create(self) -> None:
        alive = len(self.node.cache.alive_brokers())
        rf = max(1, min(self.node.settings.offsets_topic_replication_factor, alive))
        topic = ct.CreatableTopic(
            name=OFFSETS_TOPIC,
            num_partitions=self.num_partitions,
            replication_factor=rf,
            assignments=(),
            configs=(  # as Kafka's offsets topic: compacted, so its size follows the groups, not the commits
                ct.CreatableTopicConfig(name="min.insync.replicas", value=str(min(2, rf))),
                ct.CreatableTopicConfig(name="cleanup.policy", value="compact"),
                ct.CreatableTopicConfig(
                    name="segment.bytes", value=str(self.node.settings.offsets_topic_segment_bytes)
                ),
            ),
        )
        request = ct.CreateTopicsRequest(
            topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False
        )
        try:
            await self.node.forward_to_controller(request)
        except Exception as exc:  # the next FindCoordinator retries
            self.node.log.warning("could not create __consumer_offsets", error=str(exc))

    async def append(self, partition: int, entries: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        now = self.node.now_ms()
        records = build_batch([(key, value, (), now) for key, value in entries])
        result = await self.node.replica_manager.append(
            OFFSETS_TOPIC, partition, records, -1, APPEND_TIMEOUT_MS
        )
        return result.error  # the group service answers it as Kafka's coordinator (normalize_append_error)

    def read_all(self, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        replica = self.node.replica_manager.replica(OFFSETS_TOPIC, partition)
        if replica is None:
            return []
        data = replica.log.read(replica.log.log_start_offset, 1 << 62)
        return [(r.key, r.value) for batch in decode_batches(data) for r in batch.records]
