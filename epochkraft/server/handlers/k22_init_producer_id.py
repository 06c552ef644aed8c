"""InitProducerId (key 22), versions 0-6, broker listener.

- Idempotent producers (no transactional id) get a fresh producer id, epoch 0, from the blocks of ids the
  controller allocates to this broker (AllocateProducerIds, Kafka's RPCProducerIdManager);
  COORDINATOR_LOAD_IN_PROGRESS, which clients retry, while the broker waits for its next block.
- A transactional id goes to its transaction coordinator (Kafka's handleInitProducerId): a new id at epoch
  0, or the id's epoch bumped (a new id once the epoch is exhausted), written to ``__transaction_state``
  before answering; a transaction left open by the previous producer is aborted first and answered
  CONCURRENT_TRANSACTIONS, which the client retries. v3+ carry the producer's current id and epoch to
  recover (KIP-360): PRODUCER_FENCED when another producer took over (INVALID_PRODUCER_EPOCH before v4).
  INVALID_TRANSACTION_TIMEOUT above transaction.max.timeout.ms; NOT_COORDINATOR elsewhere.
- v5 is v4 (KIP-890); v6 (KIP-939, two-phase commit) answers no ongoing transaction (-1); two-phase commit
  itself (enable2_pc) is not served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.init_producer_id.v6.response import InitProducerIdResponse
from kio.schema.types import ProducerId
from kio.static.primitive import i16

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, ms

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=22, name="InitProducerId", versions=(0, 6), listeners=(BROKER,))
async def handle(request: rt.InitProducerId, ctx: RequestContext):
    if request.transactional_id is not None:
        producer_id, epoch = getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)
        expected = (producer_id, epoch) if producer_id >= 0 else None
        error, producer_id, epoch = await ctx.broker.transactions.init_producer_id(
            request.transactional_id, ms(request.transaction_timeout), expected
        )
        if error == ErrorCode.producer_fenced and ctx.api_version < 4:
            error = ErrorCode.invalid_producer_epoch  # older clients do not know PRODUCER_FENCED
        response = InitProducerIdResponse(
            throttle_time=NO_THROTTLE,
            error_code=error,
            producer_id=ProducerId(producer_id),
            producer_epoch=i16(epoch),
            ongoing_txn_producer_id=ProducerId(-1),
            ongoing_txn_producer_epoch=i16(-1),
        )
    else:
        generated = ctx.broker.generate_producer_id()
        response = InitProducerIdResponse(
            throttle_time=NO_THROTTLE,
            error_code=generated.error,
            producer_id=ProducerId(generated.producer_id),
            producer_epoch=i16(0 if generated.error == ErrorCode.none else -1),
            ongoing_txn_producer_id=ProducerId(-1),
            ongoing_txn_producer_epoch=i16(-1),
        )
    return downgrade_response(response, ctx.api_version)
