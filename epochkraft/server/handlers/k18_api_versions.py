"""ApiVersions (key 18), versions 0-5, on both listeners.

- Lists the APIs this listener serves, built from the handler registry, so the advertised ranges can
  never drift from what is dispatched.
- A request at a version above 5 never reaches here: the server answers it with UNSUPPORTED_VERSION in a
  v0 body listing our range (KIP-511), and the response header is always v0.
- v3 carries client software name/version (logged nowhere) and answers with the supported feature
  ranges and the finalized levels (metadata.version, eligible.leader.replicas.version,
  transaction.version, from which clients pick their transactions' version, KIP-890) of this node's
  metadata at its applied offset (the epoch), which the Admin's describeFeatures reads; v4 is v3 whose
  supported minimum may be 0 (KAFKA-17011).
- v5 (KIP-1242) names the cluster and node the client means to reach, both or neither: one without the
  other is INVALID_REQUEST (ApiVersionsRequest.isValid), and on the broker listener a cluster id or node
  id not this broker's is REBOOTSTRAP_REQUIRED, each with no API list, as KafkaApis.handleApiVersionsRequest
  answers; the controller listener does not check them (ControllerApis.handleApiVersionsRequest).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.api_versions.v3.response import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)
from kio.static.primitive import i16, i64

from epochkraft.controller.feature_control import SUPPORTED_FEATURES
from epochkraft.metadata.image import MetadataImage
from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.kio_extra import ApiVersionsRequestV5
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers import served
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _malformed(request: rt.ApiVersions) -> ErrorCode | None:
    """KIP-1242 on either listener: a v5 request names the cluster and the node, both or neither."""
    if isinstance(request, ApiVersionsRequestV5) and (request.cluster_id is not None) != (
        request.node_id != -1
    ):
        return ErrorCode.invalid_request
    return None


def _refusal_on_broker(request: rt.ApiVersions, ctx: RequestContext) -> ErrorCode | None:
    """KIP-1242's checks of a v5 request on a broker: the error to answer, else None."""
    error = _malformed(request)
    if error is not None or not isinstance(request, ApiVersionsRequestV5) or request.cluster_id is None:
        return error
    node = ctx.broker
    # A broker listens before it has asked the controller for the cluster id; until then only the
    # node id is judged (Kafka's broker reads it from meta.properties before it listens).
    other_cluster = node.cluster_id is not None and request.cluster_id != node.cluster_id
    if request.node_id != node.node_id or other_cluster:
        return ErrorCode.rebootstrap_required
    return None


def _features(ctx: RequestContext, image: MetadataImage, epoch: int) -> tuple[tuple, int, tuple]:
    """(supported, finalized epoch, finalized): the finalized levels of this node's metadata image, at the
    offset it has applied (Kafka's FinalizedFeatures epoch); v3 may not carry a minimum of 0 (KAFKA-17011:
    such a feature is sent with minimum 1)."""
    lowest = 0 if ctx.api_version >= 4 else 1
    supported = tuple(
        SupportedFeatureKey(name=name, min_version=i16(max(low, lowest)), max_version=i16(high))
        for name, (low, high) in SUPPORTED_FEATURES.items()
    )
    finalized = tuple(
        FinalizedFeatureKey(name=name, max_version_level=i16(level), min_version_level=i16(level))
        for name, level in sorted(image.features.items())
    )
    return supported, epoch, finalized


def _broker_features(ctx: RequestContext) -> tuple[tuple, int, tuple]:
    return _features(ctx, ctx.broker.cache.image, ctx.broker.cache.next_offset - 1)


def _controller_features(ctx: RequestContext) -> tuple[tuple, int, tuple]:
    controller = ctx.controller_node.controller
    return _features(ctx, controller.image, controller.log.next_offset - 1)


@api(key=18, name="ApiVersions", versions=(0, 5), listeners=(BROKER,))
async def handle_on_broker(request: rt.ApiVersions, ctx: RequestContext):
    return _answer(ctx, BROKER, _refusal_on_broker(request, ctx), _broker_features)


@api(key=18, name="ApiVersions", versions=(0, 5), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.ApiVersions, ctx: RequestContext):
    return _answer(ctx, CONTROLLER, _malformed(request), _controller_features)


def _answer(
    ctx: RequestContext,
    listener: str,
    error: ErrorCode | None,
    features: Callable[[RequestContext], tuple[tuple, int, tuple]],
):
    """The listener's API table and, from v3, this node's features; neither with an error."""
    table = (
        ()
        if error is not None
        else tuple(
            ApiVersion(api_key=i16(key), min_version=i16(spec.min_version), max_version=i16(spec.max_version))
            for key, spec in served(listener).items()
        )
    )
    no_features: tuple[tuple, int, tuple] = ((), -1, ())
    if error is not None or ctx.api_version < 3 or ctx.node is None:  # no node: tests of the framing alone
        supported, epoch, finalized = no_features
    else:
        supported, epoch, finalized = features(ctx)
    response = ApiVersionsResponse(
        error_code=ErrorCode.none if error is None else error,
        api_keys=table,
        throttle_time=NO_THROTTLE,
        supported_features=supported,
        finalized_features_epoch=i64(epoch),
        finalized_features=finalized,
        zk_migration_ready=False,
    )
    return downgrade_response(response, ctx.api_version)
