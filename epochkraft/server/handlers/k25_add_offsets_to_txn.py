"""AddOffsetsToTxn (key 25), versions 0-4, broker listener.

- Adds the group's ``__consumer_offsets`` partition to the producer's transaction (Kafka's
  handleAddOffsetsToTransaction), so the transaction's markers commit or abort the offsets the producer
  then sends with TxnOffsetCommit. Errors as AddPartitionsToTxn's (INVALID_PRODUCER_EPOCH for
  PRODUCER_FENCED before v2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.add_offsets_to_txn.v4.response import AddOffsetsToTxnResponse

from epochkraft.broker.group_coordinator import OFFSETS_TOPIC
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=25, name="AddOffsetsToTxn", versions=(0, 4), listeners=(BROKER,))
async def handle(request: rt.AddOffsetsToTxn, ctx: RequestContext):
    partition = ctx.broker.groups.partition_for(request.group_id)
    error = await ctx.broker.transactions.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        [(OFFSETS_TOPIC, partition)],
        hold=True,
    )
    if error == ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch
    response = AddOffsetsToTxnResponse(throttle_time=NO_THROTTLE, error_code=error)
    return downgrade_response(response, ctx.api_version)
