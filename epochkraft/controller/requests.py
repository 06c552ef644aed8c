"""Request shapes the controller core takes, converted from the versions peers send."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.alter_partition.v3 import request as v3
from kio.static.primitive import i64

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def alter_partition_v3(request: rt.AlterPartition) -> v3.AlterPartitionRequest:
    """AlterPartition as v3: a v2 request's NewIsr members get broker epoch -1 (unknown), so only a v3
    request's NewIsrWithEpochs lets the controller refuse a stale incarnation (KIP-903)."""
    if isinstance(request, v3.AlterPartitionRequest):
        return request
    return v3.AlterPartitionRequest(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        topics=tuple(
            v3.TopicData(
                topic_id=topic.topic_id,
                partitions=tuple(
                    v3.PartitionData(
                        partition_index=p.partition_index,
                        leader_epoch=p.leader_epoch,
                        new_isr_with_epochs=tuple(
                            v3.BrokerState(broker_id=b, broker_epoch=i64(-1)) for b in p.new_isr
                        ),
                        leader_recovery_state=p.leader_recovery_state,
                        partition_epoch=p.partition_epoch,
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )
