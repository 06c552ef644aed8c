"""DescribeUserScramCredentials (key 50), version 0, on both listeners.

- Each user's SCRAM mechanisms and iterations (never salts or keys) from the metadata image; all users
  for a null or empty list. An unknown user gets RESOURCE_NOT_FOUND, a user named twice
  DUPLICATE_RESOURCE (Kafka's ScramControlManager.describeScramCredentials).
- Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.describe_user_scram_credentials.v0 import response as r0
from kio.static.primitive import i8, i32

from epochkraft.metadata.image import MetadataImage
from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=50, name="DescribeUserScramCredentials", versions=(0, 0), listeners=(BROKER,))
async def handle_on_broker(request: rt.DescribeUserScramCredentials, ctx: RequestContext):
    return _describe(request, ctx.broker.cache.image)


@api(key=50, name="DescribeUserScramCredentials", versions=(0, 0), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.DescribeUserScramCredentials, ctx: RequestContext):
    return _describe(request, ctx.controller_node.controller.image)


def _describe(
    request: rt.DescribeUserScramCredentials, image: MetadataImage
) -> r0.DescribeUserScramCredentialsResponse:
    """The credentials of the node's metadata image (the broker's cache or the controller's image)."""
    by_user: dict[str, list[r0.CredentialInfo]] = {}
    for (user, mechanism), record in sorted(image.scram_credentials.items()):
        by_user.setdefault(user, []).append(
            r0.CredentialInfo(mechanism=i8(mechanism), iterations=i32(record.iterations))
        )
    names = [u.name for u in request.users] if request.users else sorted(by_user)
    results = []
    for name in dict.fromkeys(names):
        infos: tuple[r0.CredentialInfo, ...]
        if names.count(name) > 1:
            error, message, infos = (
                ErrorCode.duplicate_resource,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
                (),
            )
        elif name not in by_user:
            error, message, infos = (
                ErrorCode.resource_not_found,
                "Attempt to describe a user credential that does not exist",
                (),
            )
        else:
            error, message, infos = ErrorCode.none, None, tuple(by_user[name])
        results.append(
            r0.DescribeUserScramCredentialsResult(
                user=name, error_code=error, error_message=message, credential_infos=infos
            )
        )
    return r0.DescribeUserScramCredentialsResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, results=tuple(results)
    )
