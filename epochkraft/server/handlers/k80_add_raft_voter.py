"""AddRaftVoter (key 80), versions 0-1, controller listener of a dynamic quorum (KIP-853): what
``kafka-metadata-quorum add-controller`` sends. ALTER on the cluster with an authorizer (ControllerApis
.handleAddRaftVoter). The leader's Raft core checks and writes the new voter set (AddVoterHandler: one change
at a time, after it committed in its epoch, the new voter caught up as an observer) and answers once that
commits; a request without an endpoint on this quorum's controller listener is INVALID_REQUEST, as
AddVoterHandler refuses one the leader could not reach."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.add_raft_voter.v1 import response as v1

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.raft import wire
from epochkraft.raft.messages import AddRaftVoterRequest, AddRaftVoterResponse
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._raft import reconfig_exchange
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

OPERATOR = -1  # the admin client's request: no voter sent it


@api(key=80, name="AddRaftVoter", versions=(0, 1), listeners=(CONTROLLER,))
async def handle(request: rt.AddRaftVoter, ctx: RequestContext):
    quorum = ctx.controller_node.quorum
    listener = quorum.listener_name if quorum is not None else ""

    def decode(raw) -> AddRaftVoterRequest:
        message = wire.decode_add_raft_voter_request(raw)
        if not any(e.name == listener for e in message.listeners):
            raise wire.InvalidRaftRequest(f"no endpoint for the {listener} listener")
        return message

    return await reconfig_exchange(request, ctx, decode=decode, source=lambda _m: OPERATOR, encode=_encode)


def _encode(answer: AddRaftVoterResponse) -> v1.AddRaftVoterResponse:
    return v1.AddRaftVoterResponse(
        throttle_time=NO_THROTTLE, error_code=answer.error_code, error_message=answer.error_message
    )
