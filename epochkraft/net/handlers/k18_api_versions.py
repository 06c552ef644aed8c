"""ApiVersions (key 18), versions 0-4, on both listeners.

- Lists the APIs this listener serves, built from the handler registry, so the advertised ranges can
  never drift from what is dispatched.
- A request at a version above 4 never reaches here: the server answers it with UNSUPPORTED_VERSION in a
  v0 body listing our range (KIP-511), and the response header is always v0.
- v3 carries client software name/version (logged nowhere) and answers with empty feature lists; v4
  is v3 (KAFKA-17011 only allows a feature minimum of 0).
"""

from __future__ import annotations

from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse

from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, CONTROLLER, api, served
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response


@api(key=18, name="ApiVersions", versions=(0, 4), listeners=(BROKER, CONTROLLER))
async def handle(request, ctx):
    table = tuple(
        ApiVersion(api_key=key, min_version=spec.min_version, max_version=spec.max_version)
        for key, spec in served(ctx.listener).items()
    )
    response = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=table,
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )
    return downgrade_response(response, ctx.api_version)
