"""EndTxn (key 26), versions 0-5, broker listener.

- Commits or aborts the producer's transaction (Kafka's handleEndTransaction, transaction version 1):
  PrepareCommit or PrepareAbort is written to ``__transaction_state`` and answered; the coordinator then
  sends the markers and writes CompleteCommit or CompleteAbort. A retry of an EndTxn already completed
  is NONE; one still completing CONCURRENT_TRANSACTIONS; the other outcome INVALID_TXN_STATE.
  PRODUCER_FENCED for a stale epoch (INVALID_PRODUCER_EPOCH before v2).
- v5 answers the producer id and epoch, unchanged here (transaction version 1: no epoch bump per
  transaction).
"""

from __future__ import annotations

from kio.schema.end_txn.v5.response import EndTxnResponse

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE


@api(key=26, name="EndTxn", versions=(0, 5), listeners=(BROKER,))
async def handle(request, ctx: RequestContext):
    error = await ctx.broker.transactions.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    if error == ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch
    response = EndTxnResponse(
        throttle_time=NO_THROTTLE,
        error_code=error,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
    )
    return downgrade_response(response, ctx.api_version)
