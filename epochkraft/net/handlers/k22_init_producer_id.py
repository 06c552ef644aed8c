"""InitProducerId (key 22), versions 0-6, broker listener.

- Idempotent producers (no transactional id) get a fresh producer id, epoch 0, from the broker's
  allocator (ids derived from the broker epoch, unique across the cluster without a controller call).
- Transactions are not supported: a request with a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  fatal to the producer in every client, as FindCoordinator answers for a transaction coordinator.
- v5 is v4 (KIP-890); v6 (KIP-939, two-phase commit) answers no ongoing transaction (-1).
"""

from __future__ import annotations

from kio.schema.init_producer_id.v6.response import InitProducerIdResponse

from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response


@api(key=22, name="InitProducerId", versions=(0, 6), listeners=(BROKER,))
async def handle(request, ctx):
    if request.transactional_id is not None:
        response = InitProducerIdResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
            ongoing_txn_producer_id=-1,
            ongoing_txn_producer_epoch=-1,
        )
    else:
        response = InitProducerIdResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            producer_id=ctx.node.producer_ids.allocate(),
            producer_epoch=0,
            ongoing_txn_producer_id=-1,
            ongoing_txn_producer_epoch=-1,
        )
    return downgrade_response(response, ctx.api_version)
