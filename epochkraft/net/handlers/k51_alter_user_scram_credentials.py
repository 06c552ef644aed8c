"""AlterUserScramCredentials (key 51), version 0, on both listeners.

- Upsertions carry the salted password; the controller stores salt, StoredKey, ServerKey and iterations
  as a UserScramCredentialRecord, deletions a RemoveUserScramCredentialRecord (ScramControlManager):
  DUPLICATE_RESOURCE, UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL, RESOURCE_NOT_FOUND per user.
  The broker listener forwards to the controller.
- Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kio.schema.alter_user_scram_credentials.v0 import response as r0

from epochkraft.net.handlers._util import NO_THROTTLE
from epochkraft.protocol.api import BROKER, CONTROLLER, api


@api(key=51, name="AlterUserScramCredentials", versions=(0, 0), listeners=(BROKER, CONTROLLER))
async def handle(request, ctx):
    if ctx.listener == BROKER:
        return await ctx.node.forward_to_controller(request)
    results = ctx.node.controller.alter_scram_credentials(ctx.node.now_ms(), request)
    return r0.AlterUserScramCredentialsResponse(throttle_time=NO_THROTTLE, results=tuple(results))
