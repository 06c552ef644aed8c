"""FindCoordinator (key 10), versions 0-6, broker listener.

- Group keys (key_type 0) map to ``__consumer_offsets`` partition abs(hash(group)) % partitions; the
  coordinator is that partition's leader, answered with its endpoint on the listener the request came in
  on. While the topic is being created, or the leader has no such listener: COORDINATOR_NOT_AVAILABLE.
- Transactional ids (key_type 1) map to ``__transaction_state`` partition abs(hash(id)) % partitions
  (transaction.state.log.num.partitions), answered as groups are; the topic is created on the first
  lookup (COORDINATOR_NOT_AVAILABLE meanwhile).
- Share groups (key_type 2, v6, KIP-932) are not supported: INVALID_REQUEST.
- v4+ batch keys in ``coordinator_keys``; v0-3 carry one ``key`` and answer at the top level; v5 is v4
  (it allows TRANSACTION_ABORTABLE, KIP-890).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as FindCoordinatorRequestV0
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest as FindCoordinatorRequestV1
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest as FindCoordinatorRequestV2
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindCoordinatorRequestV3
from kio.schema.find_coordinator.v6.response import Coordinator, FindCoordinatorResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i32

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import response_class
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, build

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

GROUP, TRANSACTION = 0, 1  # key types (v0 has none: a group's)
ONE_KEY = (
    FindCoordinatorRequestV0,
    FindCoordinatorRequestV1,
    FindCoordinatorRequestV2,
    FindCoordinatorRequestV3,
)  # v4+ (KIP-699): a batch of keys


@api(key=10, name="FindCoordinator", versions=(0, 6), listeners=(BROKER,))
async def handle(request: rt.FindCoordinator, ctx: RequestContext):
    version = ctx.api_version
    keys = (request.key,) if isinstance(request, ONE_KEY) else tuple(request.coordinator_keys)
    key_type = GROUP if isinstance(request, FindCoordinatorRequestV0) else request.key_type
    coordinators = []
    for key in keys:
        message = None
        if key_type == TRANSACTION:
            error, node, host, port = await ctx.broker.transactions.find_coordinator(key, ctx.listener_name)
            message = None if error == ErrorCode.none else error.name.upper()
        elif key_type != GROUP:
            error, node, host, port = ErrorCode.invalid_request, -1, "", -1
            message = f"coordinator key type {key_type} is not supported"
        else:
            error, node, host, port = await ctx.broker.groups.find_coordinator(key, ctx.listener_name)
            message = None if error == ErrorCode.none else error.name.upper()
        coordinators.append(
            Coordinator(
                key=key,
                node_id=BrokerId(node),
                host=host,
                port=i32(port),
                error_code=error,
                error_message=message,
            )
        )
    if version >= 4:
        response = FindCoordinatorResponse(throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))
        return downgrade_response(response, version)
    first = coordinators[0]
    return build(
        response_class(10, version),
        throttle_time=NO_THROTTLE,
        error_code=first.error_code,
        error_message=first.error_message,
        node_id=first.node_id,
        host=first.host,
        port=first.port,
    )
