"""AlterUserScramCredentials (key 51), version 0, on both listeners.

- Upsertions carry the salted password; the controller stores salt, StoredKey, ServerKey and iterations
  as a UserScramCredentialRecord, deletions a RemoveUserScramCredentialRecord (ScramControlManager):
  DUPLICATE_RESOURCE, UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL, RESOURCE_NOT_FOUND per user.
  The broker listener forwards to the controller and answers once its own metadata holds the change.
- Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.alter_user_scram_credentials.v0 import response as r0

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=51, name="AlterUserScramCredentials", versions=(0, 0), listeners=(BROKER,))
async def handle_on_broker(request: rt.AlterUserScramCredentials, ctx: RequestContext):
    node = ctx.broker
    response = await node.forward_to_controller(request, r0.AlterUserScramCredentialsResponse, ctx)
    done = {r.user for r in response.results if r.error_code == ErrorCode.none}
    upserted = {(u.name, u.mechanism): u.salt for u in request.upsertions if u.name in done}
    deleted = {(d.name, d.mechanism) for d in request.deletions if d.name in done}

    def applied() -> bool:
        held = node.cache.image.scram_credentials
        return all(key in held and held[key].salt == salt for key, salt in upserted.items()) and not (
            deleted & held.keys()
        )

    # answered once our own metadata holds the change, so a DescribeUserScramCredentials sent to us next
    # sees it (as CreateTopics waits for the topics)
    await node.wait_for_metadata(applied)
    return response


@api(key=51, name="AlterUserScramCredentials", versions=(0, 0), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.AlterUserScramCredentials, ctx: RequestContext):
    results = ctx.controller_node.controller.alter_scram_credentials(ctx.now_ms(), request)
    return r0.AlterUserScramCredentialsResponse(throttle_time=NO_THROTTLE, results=tuple(results))
