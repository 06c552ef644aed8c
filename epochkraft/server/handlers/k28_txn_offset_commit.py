"""TxnOffsetCommit (key 28), versions 0-5, broker listener.

- Offsets a transactional producer commits for a group (``send_offsets_to_transaction``): written to the
  group's ``__consumer_offsets`` partition as a transactional batch of the producer, then pending in the
  group coordinator, invisible to OffsetFetch, until the transaction's marker commits them
  (``GroupCoordinator.complete_transactional_offsets``) or aborts them. OffsetFetch with require_stable
  answers UNSTABLE_OFFSET_COMMIT meanwhile (KIP-447).
- v3+ carry the consumer's generation and member id (KIP-447), checked as OffsetCommit's
  (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION); v0-2 commit as a standalone consumer.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while the group is elsewhere or loading; an unknown
  partition is UNKNOWN_TOPIC_OR_PARTITION and not committed; metadata too long OFFSET_METADATA_TOO_LARGE.
- First the transaction is verified with its coordinator (KIP-890 part 1, as Kafka's
  transaction.partition.verification.enable): the group's offsets partition must be in the producer's
  ongoing transaction (AddOffsetsToTxn came first) at this epoch. A fenced producer is refused with
  INVALID_PRODUCER_EPOCH, a partition not in the transaction INVALID_TXN_STATE (TRANSACTION_ABORTABLE at
  v4, whose clients know it: Kafka's txnOffsetCommitRequestVersionToTransactionSupportedOperation), and
  COORDINATOR_NOT_AVAILABLE while the transaction coordinator cannot be reached, is busy or the transaction
  is being prepared (retried by clients).
- v5 is transaction version 2 (KIP-890 part 2): the client sends no AddOffsetsToTxn, so the group's offsets
  partition is added to the producer's transaction here instead of verified (Kafka's
  txnOffsetCommitRequestVersionToTransactionSupportedOperation: addPartition above v4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.txn_offset_commit.v5 import response as v5

from epochkraft.broker.group_coordinator import OFFSETS_TOPIC
from epochkraft.broker.group_service import OffsetCommitEntry
from epochkraft.broker.transaction_service import (
    RETRIABLE_COORDINATOR_ERRORS,
    TransactionOperation,
    verification_error,
)
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

ADD_PARTITION_FROM = 5
GENERIC_ERROR_FROM = 4  # TRANSACTION_ABORTABLE answered as it is


async def _verify(ctx, request: rt.TxnOffsetCommit) -> ErrorCode:
    """The coordinator's answer for the group's offsets partition in the producer's transaction: added
    to it from v5, verified to be in it before."""
    offsets_partition = (OFFSETS_TOPIC, ctx.broker.groups.partition_for(request.group_id))
    transactions = ctx.broker.transactions
    ask = transactions.add_for_write if ctx.api_version >= ADD_PARTITION_FROM else transactions.verify
    verified = await ask(
        request.transactional_id, request.producer_id, request.producer_epoch, [offsets_partition]
    )
    error = verified.get(offsets_partition, ErrorCode.unknown_server_error)
    if error in RETRIABLE_COORDINATOR_ERRORS:  # Kafka: NOT_ENOUGH_REPLICAS, then normalizeException
        return ErrorCode.coordinator_not_available
    return verification_error(error, _operation(ctx.api_version))


def _operation(version: int) -> TransactionOperation:
    if version >= ADD_PARTITION_FROM:
        return TransactionOperation.ADD_PARTITION
    if version >= GENERIC_ERROR_FROM:
        return TransactionOperation.GENERIC_ERROR
    return TransactionOperation.DEFAULT_ERROR


@api(key=28, name="TxnOffsetCommit", versions=(0, 5), listeners=(BROKER,))
async def handle(request: rt.TxnOffsetCommit, ctx: RequestContext):
    groups, image = ctx.broker.groups, ctx.broker.cache.image

    def known(name: str, partition: int) -> bool:
        info = image.topic(name)
        return info is not None and partition in info.partitions

    entries = [
        OffsetCommitEntry(
            topic.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
        if known(topic.name, p.partition_index)
    ]
    errors: dict[tuple[str, int], ErrorCode] = {}
    if entries:
        verified = await _verify(ctx, request)
        if verified != ErrorCode.none:
            entries, errors = [], {(e.topic, e.partition): verified for e in entries}
    if entries:
        results = await groups.txn_commit(
            group_id=request.group_id,
            producer=(request.producer_id, request.producer_epoch),
            generation_id=getattr(request, "generation_id", -1),
            member_id=getattr(request, "member_id", ""),
            entries=entries,
            group_instance_id=getattr(request, "group_instance_id", None),
        )
        errors = {(e.topic, e.partition): r for e, r in zip(entries, results, strict=True)}
    response = v5.TxnOffsetCommitResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            v5.TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=tuple(
                    v5.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=errors.get(
                            (topic.name, p.partition_index), ErrorCode.unknown_topic_or_partition
                        ),
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )
    return downgrade_response(response, ctx.api_version)
