"""Vote (key 52), version 2, controller listener of a Raft quorum: answered by the Raft core
(KafkaRaftClient.handleVoteRequest) through handlers/_raft.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.raft import wire
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._raft import raft_exchange

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=52, name="Vote", versions=(2, 2), listeners=(CONTROLLER,))
async def handle(request: rt.Vote, ctx: RequestContext):
    return await raft_exchange(
        request,
        ctx,
        decode=wire.decode_vote_request,
        source=lambda message: message.candidate_id,
        encode=wire.encode_vote_response,
    )
