"""RemoveRaftVoter (key 81), version 0, controller listener of a dynamic quorum (KIP-853): what
``kafka-metadata-quorum remove-controller`` sends. ALTER on the cluster with an authorizer (ControllerApis
.handleRemoveRaftVoter). The leader's Raft core checks and writes the new voter set (RemoveVoterHandler) and
answers once that commits; a leader that removed itself resigns then."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.remove_raft_voter.v0 import response as v0

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft import wire
from epochkraft.raft.messages import RemoveRaftVoterResponse
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._raft import reconfig_exchange
from epochkraft.server.handlers._util import NO_THROTTLE
from epochkraft.server.handlers.k80_add_raft_voter import OPERATOR

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=81, name="RemoveRaftVoter", versions=(0, 0), listeners=(CONTROLLER,))
async def handle(request: rt.RemoveRaftVoter, ctx: RequestContext):
    return await reconfig_exchange(
        request,
        ctx,
        decode=wire.decode_remove_raft_voter_request,
        source=lambda _m: OPERATOR,
        encode=_encode,
        # a single controller is a static quorum of one (kraft.version 0): no voter changes, as Kafka's
        # RemoveVoterHandler answers a cluster whose kraft.version does not support reconfiguration
        without_quorum=ErrorCode.unsupported_version,
    )


def _encode(answer: RemoveRaftVoterResponse) -> v0.RemoveRaftVoterResponse:
    return v0.RemoveRaftVoterResponse(
        throttle_time=NO_THROTTLE, error_code=answer.error_code, error_message=answer.error_message
    )
