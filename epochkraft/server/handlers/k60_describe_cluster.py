"""DescribeCluster (key 60), versions 0-1, broker and controller listeners.

- On a broker listener it describes the brokers (endpoint type 1): every unfenced broker with an endpoint on
  the listener the request came in on, and as controller id a live broker, as Metadata names one (Kafka's
  KafkaApis.handleDescribeCluster: brokers forward admin requests to the controllers).

- On the controller listener it describes the controller (endpoint type 2 in v1, as Kafka's controllers
  answer); brokers are found through Metadata on a broker listener. A controller of a Raft quorum lists
  every voter and names the leader it knows as the controller (-1 during an election), which is how an
  admin client given ``bootstrap.controllers`` finds the active one.
- A request for another endpoint type gets Kafka's refusal (AuthHelper.computeDescribeClusterResponse, as
  ControllerApis.handleDescribeCluster calls it): v0 (which can only ask for brokers) INVALID_REQUEST, v1
  asking for brokers MISMATCHED_ENDPOINT_TYPE, an unknown type UNSUPPORTED_ENDPOINT_TYPE; the answer names
  the type asked for and no nodes (on a broker: Kafka's bare error response, no nodes).
- include_cluster_authorized_operations: the cluster operations the principal may perform (all of them
  without an authorizer), 0 without DESCRIBE on the cluster; not asked, -2147483648 (AuthHelper).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterBroker, DescribeClusterResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

BROKERS, CONTROLLERS = 1, 2


def cluster_authorized_operations(request: rt.DescribeCluster, ctx: RequestContext) -> int:
    """AuthHelper.computeDescribeClusterResponse: asked for, the cluster operations the principal may
    perform, 0 without DESCRIBE on the cluster."""
    if not request.include_cluster_authorized_operations:
        return OPERATIONS_NOT_REQUESTED
    if not ctx.authorized_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER)


def _asked(request: rt.DescribeCluster) -> int:
    return request.endpoint_type if isinstance(request, DescribeClusterRequest) else BROKERS  # v0: brokers


@api(key=60, name="DescribeCluster", versions=(0, 1), listeners=(BROKER,))
async def handle_on_broker(request: rt.DescribeCluster, ctx: RequestContext):
    return downgrade_response(_brokers(request, ctx, _asked(request)), ctx.api_version)


@api(key=60, name="DescribeCluster", versions=(0, 1), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.DescribeCluster, ctx: RequestContext):
    asked = _asked(request)
    answer = _controllers(request, ctx) if asked == CONTROLLERS else _refusal_on_controller(ctx, asked)
    return downgrade_response(answer, ctx.api_version)


def _controllers(request: rt.DescribeCluster, ctx: RequestContext) -> DescribeClusterResponse:
    """The controllers' answer (ControllerApis.handleDescribeCluster)."""
    answer = ctx.controller_node.controller.describe_cluster()
    if ctx.controller_node.quorum is not None:
        answer = _quorum(answer, ctx.controller_node.quorum)
    operations = cluster_authorized_operations(request, ctx)
    return replace(answer, cluster_authorized_operations=i32(operations))


def _refusal_on_controller(ctx: RequestContext, asked: int) -> DescribeClusterResponse:
    """Kafka's refusal of an endpoint type other than the controllers' on a controller."""
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
    return DescribeClusterResponse(
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        endpoint_type=i8(asked),
        cluster_id=ctx.controller_node.controller.cluster_id,
        controller_id=BrokerId(-1),
        brokers=(),
        cluster_authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
    )


def _brokers(request: rt.DescribeCluster, ctx: RequestContext, asked: int) -> DescribeClusterResponse:
    """The brokers' answer (KafkaApis.handleDescribeCluster), or Kafka's refusal of another endpoint type."""
    if asked != BROKERS:
        unknown = asked != CONTROLLERS
        error = ErrorCode.invalid_request if ctx.api_version < 1 else ErrorCode.mismatched_endpoint_type
        if unknown and ctx.api_version >= 1:
            error = ErrorCode.unsupported_endpoint_type
        message = (
            f"Unsupported endpoint type {asked}"
            if unknown
            else "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
            "CONTROLLER"
        )
        return DescribeClusterResponse(
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            cluster_id="",
            controller_id=BrokerId(-1),
            brokers=(),
            cluster_authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
        )
    image = ctx.broker.cache.image
    brokers = tuple(
        DescribeClusterBroker(
            broker_id=BrokerId(reg.broker_id), host=ep.host, port=i32(ep.port), rack=reg.rack
        )
        for reg in image.alive_brokers()
        for ep in reg.endpoints
        if ep.name == ctx.listener_name
    )
    return DescribeClusterResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=i8(BROKERS),
        cluster_id=ctx.broker.cluster_id or "",
        controller_id=brokers[0].broker_id if brokers else BrokerId(-1),
        brokers=brokers,
        cluster_authorized_operations=i32(cluster_authorized_operations(request, ctx)),
    )


def _quorum(answer: DescribeClusterResponse, quorum) -> DescribeClusterResponse:
    """Every voter where it is reached (a dynamic quorum's from the voter set in the log)."""
    addresses = ((voter, quorum.address_of(voter)) for voter in quorum.raft.voters)
    voters = tuple(
        DescribeClusterBroker(broker_id=voter, host=address[0], port=address[1], rack=None)
        for voter, address in addresses
        if address is not None
    )
    return replace(answer, controller_id=quorum.raft.leader_id, brokers=voters)
