"""ApiVersions (key 18), versions 0-5, on both listeners.

- Lists the APIs this listener serves, built from the handler registry, so the advertised ranges can
  never drift from what is dispatched.
- A request at a version above 5 never reaches here: the server answers it with UNSUPPORTED_VERSION in a
  v0 body listing our range (KIP-511), and the response header is always v0.
- v3 carries client software name/version (logged nowhere) and answers with empty feature lists; v4
  is v3 (KAFKA-17011 only allows a feature minimum of 0).
- v5 (KIP-1242) names the cluster and node the client means to reach, both or neither: one without the
  other is INVALID_REQUEST (ApiVersionsRequest.isValid), and on the broker listener a cluster id or node
  id not this broker's is REBOOTSTRAP_REQUIRED, each with no API list, as KafkaApis.handleApiVersionsRequest
  answers; the controller listener does not check them (ControllerApis.handleApiVersionsRequest).
"""

from __future__ import annotations

from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.static.primitive import i16, i64

from epochkraft.net.context import RequestContext
from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, CONTROLLER, api, served
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response


def _refusal(request, ctx: RequestContext) -> ErrorCode | None:
    """KIP-1242's checks of a v5 request: the error to answer, else None."""
    if ctx.api_version < 5:
        return None
    named_cluster, named_node = request.cluster_id is not None, request.node_id != -1
    if named_cluster != named_node:
        return ErrorCode.invalid_request
    if named_cluster and ctx.listener == BROKER:
        node = ctx.broker
        # A broker listens before it has asked the controller for the cluster id; until then only the
        # node id is judged (Kafka's broker reads it from meta.properties before it listens).
        other_cluster = node.cluster_id is not None and request.cluster_id != node.cluster_id
        if request.node_id != node.node_id or other_cluster:
            return ErrorCode.rebootstrap_required
    return None


@api(key=18, name="ApiVersions", versions=(0, 5), listeners=(BROKER, CONTROLLER))
async def handle(request, ctx: RequestContext):
    error = _refusal(request, ctx)
    table = (
        ()
        if error is not None
        else tuple(
            ApiVersion(api_key=i16(key), min_version=i16(spec.min_version), max_version=i16(spec.max_version))
            for key, spec in served(ctx.listener).items()
        )
    )
    response = ApiVersionsResponse(
        error_code=ErrorCode.none if error is None else error,
        api_keys=table,
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=i64(-1),
        finalized_features=(),
        zk_migration_ready=False,
    )
    return downgrade_response(response, ctx.api_version)
