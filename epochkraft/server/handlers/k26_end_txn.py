"""EndTxn (key 26), versions 0-5, broker listener.

- Commits or aborts the producer's transaction (Kafka's handleEndTransaction): PrepareCommit or
  PrepareAbort is written to ``__transaction_state`` and answered; the coordinator then sends the markers
  and writes CompleteCommit or CompleteAbort. A retry of an EndTxn already completed is NONE; one still
  completing CONCURRENT_TRANSACTIONS; the other outcome INVALID_TXN_STATE. PRODUCER_FENCED for a stale
  epoch (INVALID_PRODUCER_EPOCH before v2).
- v5 is transaction version 2 (KIP-890 part 2; clients send it when transaction.version 2 is finalized):
  every commit or abort bumps the producer's epoch (a new producer id at epoch 0 once the epoch reaches
  Short.MAX - 1), the markers carry the bumped epoch, and the answer carries the id and epoch the
  producer goes on with; a retry (the epoch before the bump) is told apart from the next EndTxn by its
  epoch; an abort with no partition added is served. Errors answer producer id and epoch -1 (v5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.end_txn.v5.response import EndTxnResponse
from kio.schema.types import ProducerId
from kio.static.primitive import i16

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

TRANSACTION_V2_FROM = 5  # Kafka's KafkaApis: EndTxn above v4 speaks transaction version 2


@api(key=26, name="EndTxn", versions=(0, 5), listeners=(BROKER,))
async def handle(request: rt.EndTxn, ctx: RequestContext):
    client_transaction_version = 2 if ctx.api_version >= TRANSACTION_V2_FROM else 0
    error, producer_id, producer_epoch = await ctx.broker.transactions.end_txn(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        client_transaction_version,
    )
    if error == ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch
    response = EndTxnResponse(
        throttle_time=NO_THROTTLE,
        error_code=error,
        producer_id=ProducerId(producer_id),
        producer_epoch=i16(producer_epoch),
    )
    return downgrade_response(response, ctx.api_version)
