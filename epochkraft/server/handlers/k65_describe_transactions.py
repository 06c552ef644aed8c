"""DescribeTransactions (key 65), version 0, broker listener.

- For each transactional id, its state on this coordinator (Kafka's TransactionCoordinator
  handleDescribeTransactions): the state's Kafka name, timeout, start time (-1 before the first partition
  is added), producer id and epoch, and the partitions of the transaction in progress.
- INVALID_REQUEST for an empty id, NOT_COORDINATOR for an id another broker coordinates, COORDINATOR_LOAD_IN_PROGRESS while loading,
  TRANSACTIONAL_ID_NOT_FOUND for an id this coordinator does not know; TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  without DESCRIBE on it under an authorizer.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.kio_extra import (
    DescribedTransactionTopicV0,
    DescribedTransactionV0,
    DescribeTransactionsResponseV0,
)
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _described(ctx, transactional_id):
    coordinator = ctx.broker.transactions.coordinator
    error = coordinator.coordinator_error(transactional_id) if transactional_id else ErrorCode.invalid_request
    metadata = coordinator.describe(transactional_id) if error == ErrorCode.none else None
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        error, metadata = ErrorCode.transactional_id_authorization_failed, None
    elif error == ErrorCode.none and metadata is None:
        error = ErrorCode.transactional_id_not_found
    if metadata is None:  # Kafka's defaults for the fields an error leaves unset
        return DescribedTransactionV0(
            error_code=error,
            transactional_id=transactional_id,
            transaction_state="",
            transaction_timeout=datetime.timedelta(0),
            transaction_start_time_ms=0,
            producer_id=-1,
            producer_epoch=0,
            topics=(),
        )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(metadata.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return DescribedTransactionV0(
        error_code=error,
        transactional_id=transactional_id,
        transaction_state=metadata.state.kafka_name,
        transaction_timeout=datetime.timedelta(milliseconds=metadata.txn_timeout_ms),
        transaction_start_time_ms=metadata.txn_start_timestamp_ms,
        producer_id=metadata.producer_id,
        producer_epoch=metadata.producer_epoch,
        topics=tuple(DescribedTransactionTopicV0(topic=t, partitions=tuple(p)) for t, p in by_topic.items()),
    )


@api(key=65, name="DescribeTransactions", versions=(0, 0), listeners=(BROKER,))
async def handle(request: rt.DescribeTransactions, ctx: RequestContext):
    return DescribeTransactionsResponseV0(
        throttle_time=NO_THROTTLE,
        transaction_states=tuple(_described(ctx, t) for t in request.transactional_ids),
    )
