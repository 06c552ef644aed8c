"""InitProducerId (key 22), versions 0-6, broker listener.

- Idempotent producers (no transactional id) get a fresh producer id, epoch 0, from the blocks of ids the
  controller allocates to this broker (AllocateProducerIds, Kafka's RPCProducerIdManager);
  COORDINATOR_LOAD_IN_PROGRESS, which clients retry, while the broker waits for its next block.
- Transactions are not supported: a request with a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  fatal to the producer in every client, as FindCoordinator answers for a transaction coordinator.
- v5 is v4 (KIP-890); v6 (KIP-939, two-phase commit) answers no ongoing transaction (-1).
"""

from __future__ import annotations

from kio.schema.init_producer_id.v6.response import InitProducerIdResponse
from kio.schema.types import ProducerId
from kio.static.primitive import i16

from epochkraft.net.context import RequestContext
from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response


@api(key=22, name="InitProducerId", versions=(0, 6), listeners=(BROKER,))
async def handle(request, ctx: RequestContext):
    if request.transactional_id is not None:
        response = InitProducerIdResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=ProducerId(-1),
            producer_epoch=i16(-1),
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
