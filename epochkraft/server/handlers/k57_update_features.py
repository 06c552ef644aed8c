"""UpdateFeatures (key 57), versions 0-2, on both listeners.

- Sets finalized feature levels (Kafka's FeatureControlManager.updateFeatures): all of a request's updates
  or none; INVALID_UPDATE_VERSION for an unknown feature, a level outside the supported range, a
  downgrade without upgrade_type 2 (safe) or 3 (unsafe) (v1+; v0 has allow_downgrade), and any change of
  metadata.version (ours is fixed at the level the records carry).
- eligible.leader.replicas.version 1 turns ELR on (writing the cluster-level min.insync.replicas if
  there is none); 0 turns it off and clears every partition's ELR.
- A refusal is the top-level error alone; v0-1 list each feature (NONE) when the request succeeded, v2
  never (Kafka 4.4's answers). validate_only writes nothing. The broker listener forwards to the controller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.update_features.v0.request import UpdateFeaturesRequest as UpdateFeaturesRequestV0
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.schema.update_features.v1.response import UpdateFeaturesResponse
from kio.static.primitive import i8

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

UPGRADE, SAFE_DOWNGRADE = 1, 2


def _v1(request: rt.UpdateFeatures) -> UpdateFeaturesRequest:
    """v0 carries allow_downgrade where v1 has upgrade_type."""
    if not isinstance(request, UpdateFeaturesRequestV0):
        return convert(request, UpdateFeaturesRequest)
    updates = tuple(
        FeatureUpdateKey(
            feature=u.feature,
            max_version_level=u.max_version_level,
            upgrade_type=i8(SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE),
        )
        for u in request.feature_updates
    )
    return UpdateFeaturesRequest(timeout=request.timeout, feature_updates=updates, validate_only=False)


@api(key=57, name="UpdateFeatures", versions=(0, 2), listeners=(BROKER,))
async def handle_on_broker(request: rt.UpdateFeatures, ctx: RequestContext):
    response = await ctx.broker.forward_to_controller(_v1(request), UpdateFeaturesResponse, ctx)
    return downgrade_response(response, ctx.api_version)


@api(key=57, name="UpdateFeatures", versions=(0, 2), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.UpdateFeatures, ctx: RequestContext):
    response = ctx.controller_node.controller.update_features(ctx.now_ms(), _v1(request))
    return downgrade_response(response, ctx.api_version)
