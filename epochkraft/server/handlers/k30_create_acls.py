"""CreateAcls (key 30), versions 1-3, on both listeners.

- Each creation becomes an AccessControlEntryRecord in the metadata log (an identical ACL is kept once);
  an invalid one (resource type, pattern LITERAL/PREFIXED, operation, permission, principal TYPE:NAME,
  host) gets INVALID_REQUEST (AclControlManager.validateNewAcl). The broker listener forwards to the
  controller, as Kafka forwards.
- Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED); SECURITY_DISABLED without an authorizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.create_acls.v3 import response as r3
from kio.schema.create_acls.v3.request import CreateAclsRequest

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _security_disabled(request: rt.CreateAcls) -> r3.CreateAclsResponse:
    results = tuple(
        r3.AclCreationResult(
            error_code=ErrorCode.security_disabled, error_message="No Authorizer is configured."
        )
        for _ in request.creations
    )
    return r3.CreateAclsResponse(throttle_time=NO_THROTTLE, results=results)


@api(key=30, name="CreateAcls", versions=(1, 3), listeners=(BROKER,))
async def handle_on_broker(request: rt.CreateAcls, ctx: RequestContext):
    if ctx.authorizer is None:
        response = _security_disabled(request)
    else:
        response = await ctx.broker.forward_to_controller(
            convert(request, CreateAclsRequest), r3.CreateAclsResponse, ctx
        )
    return downgrade_response(response, ctx.api_version)


@api(key=30, name="CreateAcls", versions=(1, 3), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.CreateAcls, ctx: RequestContext):
    if ctx.authorizer is None:
        response = _security_disabled(request)
    else:
        created = ctx.controller_node.controller.create_acls(
            ctx.now_ms(), convert(request, CreateAclsRequest)
        )
        response = r3.CreateAclsResponse(throttle_time=NO_THROTTLE, results=tuple(created))
    return downgrade_response(response, ctx.api_version)
