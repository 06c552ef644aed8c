"""DescribeCluster (key 60), versions 0-1, controller listener.

- On the controller listener it describes the controller (endpoint type 2 in v1, as Kafka's controllers
  answer); brokers are found through Metadata on a broker listener. A controller of a Raft quorum lists
  every voter and names the leader it knows as the controller (-1 during an election), which is how an
  admin client given ``bootstrap.controllers`` finds the active one.
- A request for another endpoint type gets Kafka's refusal (AuthHelper.computeDescribeClusterResponse, as
  ControllerApis.handleDescribeCluster calls it): v0 (which can only ask for brokers) INVALID_REQUEST, v1
  asking for brokers MISMATCHED_ENDPOINT_TYPE, an unknown type UNSUPPORTED_ENDPOINT_TYPE; the answer names
  the type asked for and no nodes.
"""

from __future__ import annotations

from dataclasses import replace

from kio.schema.describe_cluster.v1.response import DescribeClusterBroker, DescribeClusterResponse

from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response

BROKERS, CONTROLLERS = 1, 2


@api(key=60, name="DescribeCluster", versions=(0, 1), listeners=(CONTROLLER,))
async def handle(request, ctx):
    asked = getattr(request, "endpoint_type", BROKERS)  # v0 has no field: brokers
    if asked == CONTROLLERS:
        answer = ctx.node.controller.describe_cluster()
        if ctx.node.quorum is not None:
            answer = _quorum(answer, ctx.node.quorum)
        return downgrade_response(answer, ctx.api_version)
    if asked not in (BROKERS, CONTROLLERS):
        error, message = ErrorCode.unsupported_endpoint_type, f"Unsupported endpoint type {asked}"
    elif ctx.api_version < 1:
        error, message = (
            ErrorCode.invalid_request,
            "DescribeCluster v0 asks for brokers; this is a controller",
        )
    else:
        error = ErrorCode.mismatched_endpoint_type
        message = (
            "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER"
        )
    response = DescribeClusterResponse(
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        endpoint_type=asked,
        cluster_id=ctx.node.controller.cluster_id,
        controller_id=-1,
        brokers=(),
        cluster_authorized_operations=-2147483648,
    )
    return downgrade_response(response, ctx.api_version)


def _quorum(answer: DescribeClusterResponse, quorum) -> DescribeClusterResponse:
    voters = tuple(
        DescribeClusterBroker(broker_id=voter, host=host, port=port, rack=None)
        for voter, (host, port) in sorted(quorum.voters.items())
    )
    return replace(answer, controller_id=quorum.raft.leader_id, brokers=voters)
