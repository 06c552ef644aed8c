"""AddPartitionsToTxn (key 24), versions 0-5, broker listener.

- v0-3 (clients): adds the partitions to the producer's transaction on its coordinator (Kafka's
  handleAddPartitionsToTransaction): Ongoing written to ``__transaction_state`` before answering.
  PRODUCER_FENCED for a stale epoch (INVALID_PRODUCER_EPOCH before v2), INVALID_PRODUCER_ID_MAPPING,
  CONCURRENT_TRANSACTIONS while the previous transaction completes (after holding the request until it
  completes, at most add.partitions.to.txn.retry.backoff.max.ms), NOT_COORDINATOR elsewhere. A partition
  this broker does not know is UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED (nothing
  is added), as KafkaApis.
- v4+ (brokers, KIP-890 part 1): a batch of transactions, each with ``verify_only``: verification answers
  whether each partition is already in the ongoing transaction (NONE or TRANSACTION_ABORTABLE), adding none;
  without it, a partition leader adds them for a transaction version 2 producer (KIP-890 part 2: the
  client sends no AddPartitionsToTxn), as above, the transaction then speaking version 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.add_partitions_to_txn.v0.request import (
    AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV0,
)
from kio.schema.add_partitions_to_txn.v1.request import (
    AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV1,
)
from kio.schema.add_partitions_to_txn.v2.request import (
    AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV2,
)
from kio.schema.add_partitions_to_txn.v3 import response as v3
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV3,
)
from kio.schema.add_partitions_to_txn.v5 import response as v5

from epochkraft.broker.transaction_log import TopicPartition
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

BATCHED_FROM = 4
ONE_TRANSACTION = (
    AddPartitionsToTxnRequestV0,
    AddPartitionsToTxnRequestV1,
    AddPartitionsToTxnRequestV2,
    AddPartitionsToTxnRequestV3,
)  # before BATCHED_FROM


def _topic_results(cls_topic, cls_partition, results: dict[TopicPartition, ErrorCode]):
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append((partition, error))
    return tuple(
        cls_topic(
            name=name,
            results_by_partition=tuple(
                cls_partition(partition_index=p, partition_error_code=e) for p, e in partitions
            ),
        )
        for name, partitions in by_topic.items()
    )


async def _add(ctx, transactional_id, producer_id, producer_epoch, topics, verify_only=False):
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    node = ctx.broker
    if verify_only:
        return node.transactions.coordinator.verify_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )
    image = node.cache.image
    unknown = {tp for tp in partitions if image.partition(*tp) is None}
    if unknown:
        return {
            tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
            for tp in partitions
        }
    from_a_broker = ctx.api_version >= BATCHED_FROM  # only brokers send v4+; they retry themselves
    error = await node.transactions.add_partitions(
        transactional_id,
        producer_id,
        producer_epoch,
        partitions,
        client_transaction_version=2 if from_a_broker else 0,
        hold=not from_a_broker,
    )
    if error == ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch  # older clients do not know PRODUCER_FENCED
    return dict.fromkeys(partitions, error)


@api(key=24, name="AddPartitionsToTxn", versions=(0, 5), listeners=(BROKER,))
async def handle(request: rt.AddPartitionsToTxn, ctx: RequestContext):
    version = ctx.api_version
    if isinstance(request, ONE_TRANSACTION):
        results = await _add(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
        )
        response = v3.AddPartitionsToTxnResponse(
            throttle_time=NO_THROTTLE,
            results_by_topic_v3_and_below=_topic_results(
                v3.AddPartitionsToTxnTopicResult, v3.AddPartitionsToTxnPartitionResult, results
            ),
        )
        return downgrade_response(response, version)
    answers = []
    for txn in request.transactions:
        results = await _add(
            ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, txn.verify_only
        )
        answers.append(
            v5.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(
                    v5.AddPartitionsToTxnTopicResult, v5.AddPartitionsToTxnPartitionResult, results
                ),
            )
        )
    batched = v5.AddPartitionsToTxnResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results_by_transaction=tuple(answers)
    )
    return downgrade_response(batched, version)
