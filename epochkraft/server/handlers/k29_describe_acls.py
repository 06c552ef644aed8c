"""DescribeAcls (key 29), versions 1-3, on both listeners.

- The ACL bindings matching the filter (resource type, name, pattern type with MATCH, principal, host,
  operation, permission; null matches anything), grouped by resource, from the node's metadata image.
- Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); SECURITY_DISABLED without an authorizer
  (Kafka's AclApis.handleDescribeAcls); INVALID_REQUEST for a filter with unknown codes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.describe_acls.v3 import response as r3
from kio.static.primitive import i8

from epochkraft.controller.security_control import acl_filter
from epochkraft.metadata.image import MetadataImage
from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _response(error: ErrorCode, message: str | None, resources: tuple = ()) -> r3.DescribeAclsResponse:
    return r3.DescribeAclsResponse(
        throttle_time=NO_THROTTLE, error_code=error, error_message=message, resources=resources
    )


@api(key=29, name="DescribeAcls", versions=(1, 3), listeners=(BROKER,))
async def handle_on_broker(request: rt.DescribeAcls, ctx: RequestContext):
    return _describe(request, ctx, _broker_image)


@api(key=29, name="DescribeAcls", versions=(1, 3), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.DescribeAcls, ctx: RequestContext):
    return _describe(request, ctx, _controller_image)


def _broker_image(ctx: RequestContext) -> MetadataImage:
    return ctx.broker.cache.image


def _controller_image(ctx: RequestContext) -> MetadataImage:
    return ctx.controller_node.controller.image


def _describe(
    request: rt.DescribeAcls, ctx: RequestContext, image_of: Callable[[RequestContext], MetadataImage]
):
    """The bindings of the node's metadata image (the broker's cache or the controller's image: both are
    built from the metadata log), reached only once the request is found answerable."""
    if ctx.authorizer is None:
        response = _response(ErrorCode.security_disabled, "No Authorizer is configured.")
        return downgrade_response(response, ctx.api_version)
    try:
        wanted = acl_filter(request)
    except ValueError:
        return downgrade_response(_response(ErrorCode.invalid_request, "Invalid filter"), ctx.api_version)
    grouped: dict[tuple[int, str, int], list[r3.AclDescription]] = {}
    for binding in image_of(ctx).acls.values():
        if wanted.matches(binding):
            key = (binding.resource_type, binding.resource_name, binding.pattern_type)
            grouped.setdefault(key, []).append(
                r3.AclDescription(
                    principal=binding.principal,
                    host=binding.host,
                    operation=i8(int(binding.operation)),
                    permission_type=i8(int(binding.permission_type)),
                )
            )
    resources = tuple(
        r3.DescribeAclsResource(resource_type=i8(t), resource_name=n, pattern_type=i8(p), acls=tuple(acls))
        for (t, n, p), acls in sorted(grouped.items())
    )
    return downgrade_response(_response(ErrorCode.none, None, resources), ctx.api_version)
