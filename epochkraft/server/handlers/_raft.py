"""The shared path of the Raft RPCs on a controller's listener: decode, hand to the quorum's Raft core,
encode its answer. A controller outside a quorum, a request for another cluster or for anything but
``__cluster_metadata``-0 is answered with the error at the top level and no topics (INVALID_REQUEST,
INCONSISTENT_CLUSTER_ID), as KafkaRaftClient's handlers check ``hasValidClusterId`` and
``hasValidTopicPartition`` first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from kio.static.protocol import ResponsePayload

from epochkraft.protocol.error_response import error_answer
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import response_class
from epochkraft.protocol.versions import downgrade_response
from epochkraft.raft.messages import Message
from epochkraft.raft.wire import InvalidRaftRequest
from epochkraft.server.context import RequestContext

# a Raft RPC's kio request and response classes (Vote, BeginQuorumEpoch, ..., of the version decoded)
Request = TypeVar("Request")
Response = TypeVar("Response", bound=ResponsePayload)
Decoded = TypeVar("Decoded", bound=Message)  # the Raft core's message the request decodes to


async def raft_exchange(
    request: Request,
    ctx: RequestContext,
    *,
    decode: Callable[[Request], Decoded],
    source: Callable[[Decoded], int],
    encode: Callable[[Any], Response],
) -> ResponsePayload:
    """Vote, BeginQuorumEpoch, EndQuorumEpoch: refused with the top-level error and no topics, as Kafka
    answers them (e.g. VoteResponseData with only its errorCode set)."""
    return await _exchange(request, ctx, decode, source, encode, no_topics=True)


async def reconfig_exchange(
    request: Request,
    ctx: RequestContext,
    *,
    decode: Callable[[Request], Decoded],
    source: Callable[[Decoded], int],
    encode: Callable[[Any], Response],
    without_quorum: ErrorCode = ErrorCode.invalid_request,
) -> ResponsePayload:
    """AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter: the same checks, then the Raft core, whose answer
    may wait for a commit; ``without_quorum`` answers a single controller (no Raft quorum)."""
    return await _exchange(
        request, ctx, decode, source, encode, no_topics=False, without_quorum=without_quorum
    )


async def _exchange(
    request: Request,
    ctx: RequestContext,
    decode: Callable[[Request], Decoded],
    source: Callable[[Decoded], int],
    encode: Callable[[Any], Response],
    *,
    no_topics: bool,
    without_quorum: ErrorCode = ErrorCode.invalid_request,
) -> ResponsePayload:
    """A quorum, the cluster id, a well-formed request; then the Raft core's answer."""
    quorum = ctx.controller_node.quorum

    def refuse(code: ErrorCode) -> ResponsePayload:
        answer = error_answer(request, response_class(ctx.header.api_key, ctx.api_version), code)
        return dataclasses.replace(answer, topics=()) if no_topics else answer

    if quorum is None:
        return refuse(without_quorum)
    cluster_id = getattr(request, "cluster_id", None)
    if cluster_id is not None and cluster_id != quorum.cluster_id:
        return refuse(ErrorCode.inconsistent_cluster_id)
    try:
        message = decode(request)
    except InvalidRaftRequest:
        return refuse(ErrorCode.invalid_request)
    return downgrade_response(encode(await quorum.exchange(source(message), message)), ctx.api_version)
