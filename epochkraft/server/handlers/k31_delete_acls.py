"""DeleteAcls (key 31), versions 1-3, on both listeners.

- Every ACL matching a filter is removed (a RemoveAccessControlEntryRecord each) and listed in that
  filter's result. The broker listener forwards to the controller.
- Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED); SECURITY_DISABLED without an authorizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.delete_acls.v3 import response as r3
from kio.schema.delete_acls.v3.request import DeleteAclsRequest

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _security_disabled(request: rt.DeleteAcls) -> r3.DeleteAclsResponse:
    results = tuple(
        r3.DeleteAclsFilterResult(
            error_code=ErrorCode.security_disabled,
            error_message="No Authorizer is configured.",
            matching_acls=(),
        )
        for _ in request.filters
    )
    return r3.DeleteAclsResponse(throttle_time=NO_THROTTLE, filter_results=results)


@api(key=31, name="DeleteAcls", versions=(1, 3), listeners=(BROKER,))
async def handle_on_broker(request: rt.DeleteAcls, ctx: RequestContext):
    if ctx.authorizer is None:
        response = _security_disabled(request)
    else:
        response = await ctx.broker.forward_to_controller(
            convert(request, DeleteAclsRequest), r3.DeleteAclsResponse, ctx
        )
    return downgrade_response(response, ctx.api_version)


@api(key=31, name="DeleteAcls", versions=(1, 3), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.DeleteAcls, ctx: RequestContext):
    if ctx.authorizer is None:
        response = _security_disabled(request)
    else:
        deleted = ctx.controller_node.controller.delete_acls(
            ctx.now_ms(), convert(request, DeleteAclsRequest)
        )
        response = r3.DeleteAclsResponse(throttle_time=NO_THROTTLE, filter_results=tuple(deleted))
    return downgrade_response(response, ctx.api_version)
