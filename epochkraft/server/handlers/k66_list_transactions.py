"""ListTransactions (key 66), versions 0-2, broker listener.

- The transactions this broker coordinates (Kafka's TransactionStateManager.listTransactionStates):
  transactional id, producer id and state, filtered by states (any of; names Kafka does not have are
  answered in ``unknown_state_filters``), producer ids (any of), v1 a duration (running at least that
  long) and v2 a transactional id pattern (a regular expression, whole-id match as Java's
  ``Pattern.matches``; INVALID_REGULAR_EXPRESSION if it does not compile).
- COORDINATOR_LOAD_IN_PROGRESS while a ``__transaction_state`` partition loads; ids without DESCRIBE are
  left out under an authorizer.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kio.schema.list_transactions.v2 import response as r2
from kio.schema.types import ProducerId, TransactionalId

from epochkraft.broker.transaction_log import TransactionState
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

KAFKA_STATES = {state.kafka_name: state for state in TransactionState}


def _response(version: int, error: ErrorCode, unknown=(), states=()):
    response = r2.ListTransactionsResponse(
        throttle_time=NO_THROTTLE,
        error_code=error,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(states),
    )
    return downgrade_response(response, version)


@api(key=66, name="ListTransactions", versions=(0, 2), listeners=(BROKER,))
async def handle(request: rt.ListTransactions, ctx: RequestContext):
    coordinator = ctx.broker.transactions.coordinator
    if coordinator.loading:
        return _response(ctx.api_version, ErrorCode.coordinator_load_in_progress)
    pattern = getattr(request, "transactional_id_pattern", None)
    try:
        matcher = re.compile(pattern) if pattern else None
    except re.error:
        return _response(ctx.api_version, ErrorCode.invalid_regular_expression)
    unknown = [name for name in request.state_filters if name not in KAFKA_STATES]
    wanted = {KAFKA_STATES[name] for name in request.state_filters if name in KAFKA_STATES}
    producer_ids = set(request.producer_id_filters)
    min_duration = getattr(request, "duration_filter", -1)
    now = ctx.now_ms()
    listed = []
    for txn_id, metadata in sorted(coordinator.transactions.items()):
        if (
            (request.state_filters and metadata.state not in wanted)
            or (producer_ids and metadata.producer_id not in producer_ids)
            or (min_duration >= 0 and now - metadata.txn_start_timestamp_ms < min_duration)
            or (matcher is not None and matcher.fullmatch(txn_id) is None)
            or not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id)
        ):
            continue
        listed.append(
            r2.TransactionState(
                transactional_id=TransactionalId(txn_id),
                producer_id=ProducerId(metadata.producer_id),
                transaction_state=metadata.state.kafka_name,
            )
        )
    return _response(ctx.api_version, ErrorCode.none, unknown, listed)
