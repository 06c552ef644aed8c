"""BeginQuorumEpoch (key 53), versions 0-1 (v1: the receiver's directory id, the leader's endpoints),
controller listener of a Raft quorum: answered by the Raft core (KafkaRaftClient
.handleBeginQuorumEpochRequest) through handlers/_raft.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.raft import wire
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._raft import raft_exchange

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=53, name="BeginQuorumEpoch", versions=(0, 1), listeners=(CONTROLLER,))
async def handle(request: rt.BeginQuorumEpoch, ctx: RequestContext):
    return await raft_exchange(
        request,
        ctx,
        decode=wire.decode_begin_quorum_epoch_request,
        source=lambda message: message.leader_id,
        encode=wire.encode_begin_quorum_epoch_response,
    )
