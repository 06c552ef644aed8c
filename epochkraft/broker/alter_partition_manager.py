"""Sans-IO AlterPartition sender (Kafka's AlterPartitionManager).

At most one queued change per partition, one request in flight, all queued partitions batched into the
next request. A top-level error (STALE_BROKER_EPOCH, NOT_CONTROLLER, ...) or a network error puts the changes back
and waits a backoff, as Kafka leaves them unsent. Per-partition results go back to the partitions that
asked, except errors the partition has no rule for (Kafka's Partition retries those): the same change is
queued again and the partition stays pending.

API: ``submit(item) -> bool``; ``poll(now_ms) -> AlterPartitionRequest | None``;
``on_response(now_ms, response) -> list[PartitionResult]``; ``on_network_error(now_ms)``;
``not_before_ms`` is when queued changes may be sent again. The unsafe pre-KIP-903 mode sends
AlterPartition v2 (broker ids only), as brokers did before NewIsrWithEpochs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.alter_partition.v2 import request as v2
from kio.schema.alter_partition.v3 import request as v3
from kio.schema.alter_partition.v3.response import AlterPartitionResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i64

from epochkraft.broker.partition import AlterPartitionItem
from epochkraft.protocol.errors import ErrorCode

# v3 (KIP-903's NewIsrWithEpochs), or v2 in the unsafe pre-KIP-903 mode
AlterPartitionRequest = v2.AlterPartitionRequest | v3.AlterPartitionRequest

# Per-partition answers the partition acts on (commit, revert, or wait for metadata); any other is resent.
HANDLED_ERRORS = frozenset(
    {
        ErrorCode.none,
        ErrorCode.ineligible_replica,
        ErrorCode.operation_not_attempted,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.invalid_update_version,
        ErrorCode.invalid_request,
        ErrorCode.new_leader_elected,
    }
)


@dataclass(frozen=True, slots=True)
class PartitionResult:
    item: AlterPartitionItem
    error: ErrorCode
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1
    leader_recovery_state: int = 0


class AlterPartitionManager:
    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int],
        *,
        unsafe_pre_kip903: bool = False,
        retry_backoff_ms: int = 100,
    ) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.unsafe_pre_kip903 = unsafe_pre_kip903
        self.retry_backoff_ms = retry_backoff_ms
        self.queue: dict[tuple[uuid.UUID, int], AlterPartitionItem] = {}
        self.in_flight: list[AlterPartitionItem] | None = None
        self.not_before_ms = 0
        self.sent = 0

    @property
    def version(self) -> int:
        return 2 if self.unsafe_pre_kip903 else 3

    def submit(self, item: AlterPartitionItem) -> bool:
        """Queues a change; False if this partition already has one queued or in flight."""
        key = (item.topic_id, item.partition)
        if key in self.queue or any((i.topic_id, i.partition) == key for i in self.in_flight or ()):
            return False
        self.queue[key] = item
        return True

    def poll(self, now_ms: int) -> AlterPartitionRequest | None:
        """The next request to send, or None (one in flight, nothing queued, or backing off)."""
        if self.in_flight is not None or not self.queue or now_ms < self.not_before_ms:
            return None
        self.in_flight = list(self.queue.values())
        self.queue.clear()
        self.sent += 1
        return self._build(self.in_flight)

    def _build(self, items: list[AlterPartitionItem]) -> AlterPartitionRequest:
        by_topic: dict[uuid.UUID, list[AlterPartitionItem]] = {}
        for item in items:
            by_topic.setdefault(item.topic_id, []).append(item)
        if self.unsafe_pre_kip903:
            return v2.AlterPartitionRequest(
                broker_id=BrokerId(self.broker_id),
                broker_epoch=i64(self.broker_epoch()),
                topics=tuple(
                    v2.TopicData(
                        topic_id=topic_id,
                        partitions=tuple(
                            v2.PartitionData(
                                partition_index=i32(i.partition),
                                leader_epoch=i32(i.leader_epoch),
                                new_isr=tuple(BrokerId(b) for b in i.isr_ids),
                                leader_recovery_state=i8(i.leader_recovery_state),
                                partition_epoch=i32(i.partition_epoch),
                            )
                            for i in group
                        ),
                    )
                    for topic_id, group in by_topic.items()
                ),
            )
        return v3.AlterPartitionRequest(
            broker_id=BrokerId(self.broker_id),
            broker_epoch=i64(self.broker_epoch()),
            topics=tuple(
                v3.TopicData(
                    topic_id=topic_id,
                    partitions=tuple(
                        v3.PartitionData(
                            partition_index=i32(i.partition),
                            leader_epoch=i32(i.leader_epoch),
                            new_isr_with_epochs=tuple(
                                v3.BrokerState(broker_id=BrokerId(b), broker_epoch=i64(e))
                                for b, e in i.new_isr
                            ),
                            leader_recovery_state=i8(i.leader_recovery_state),
                            partition_epoch=i32(i.partition_epoch),
                        )
                        for i in group
                    ),
                )
                for topic_id, group in by_topic.items()
            ),
        )

    def _requeue(self, now_ms: int) -> None:
        for item in self.in_flight or ():
            self.queue.setdefault((item.topic_id, item.partition), item)
        self.in_flight = None
        self.not_before_ms = now_ms + self.retry_backoff_ms

    def on_network_error(self, now_ms: int) -> None:
        """The request may not have arrived: resend the same changes after a backoff."""
        self._requeue(now_ms)

    def on_response(self, now_ms: int, response: AlterPartitionResponse) -> list[PartitionResult]:
        items = self.in_flight or []
        if response.error_code != ErrorCode.none:
            # STALE_BROKER_EPOCH: our registration is changing; others (NOT_CONTROLLER...): the controller
            # is moving. Either way nothing was decided: resend after a backoff.
            self._requeue(now_ms)
            return []
        by_key: dict[tuple[uuid.UUID | None, int], AlterPartitionItem] = {
            (i.topic_id, i.partition): i for i in items
        }
        results = []
        for topic in response.topics:
            for p in topic.partitions:
                item = by_key.pop((topic.topic_id, p.partition_index), None)
                if item is None:
                    continue
                if p.error_code not in HANDLED_ERRORS:
                    self.queue.setdefault((item.topic_id, item.partition), item)
                    self.not_before_ms = now_ms + self.retry_backoff_ms
                    continue
                results.append(
                    PartitionResult(
                        item,
                        p.error_code,
                        p.leader_epoch,
                        tuple(p.isr),
                        p.partition_epoch,
                        p.leader_recovery_state,
                    )
                )
        self.in_flight = None
        for item in by_key.values():  # not answered: try again
            self.queue.setdefault((item.topic_id, item.partition), item)
        return results
