"""UpdateRaftVoter (key 82), version 0, controller listener of a dynamic quorum (KIP-853): a voter tells the
leader the listeners it is reached on now. CLUSTER_ACTION on the cluster with an authorizer (ControllerApis
.handleUpdateRaftVoter). The leader's Raft core writes them in a VotersRecord and answers at once
(UpdateVoterHandler), naming the leader and where it is reached."""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.raft import wire
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._raft import reconfig_exchange

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=82, name="UpdateRaftVoter", versions=(0, 0), listeners=(CONTROLLER,))
async def handle(request: rt.UpdateRaftVoter, ctx: RequestContext):
    quorum = ctx.controller_node.quorum

    def encode(answer):
        assert quorum is not None  # reconfig_exchange answers INVALID_REQUEST outside a quorum
        endpoints = quorum.endpoints_of(answer.leader_id) if answer.leader_id >= 0 else ()
        return wire.encode_update_raft_voter_response(
            answer, wire.pick_endpoint(endpoints, quorum.listener_name)
        )

    return await reconfig_exchange(
        request,
        ctx,
        decode=wire.decode_update_raft_voter_request,
        source=lambda message: message.voter_id,
        encode=encode,
    )
