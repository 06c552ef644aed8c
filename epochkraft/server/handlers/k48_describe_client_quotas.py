"""DescribeClientQuotas (key 48), versions 0-1, broker listener.

- Served from the broker's metadata image (Kafka's ClientQuotasImage.describe): each filter component
  matches an entity type EXACT (a name), DEFAULT (the type's default entity) or SPECIFIED (any name of
  the type); strict leaves out entities with types the filter does not name.
- A component with an empty type, a type named twice, a match string where its match type takes none (or
  none where EXACT needs one), an unknown match type, or ip combined with user or client-id: INVALID_REQUEST;
  an entity type other than user, client-id and ip: UNSUPPORTED_VERSION, as Kafka answers.
- Needs DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.describe_client_quotas.v1 import response as r1
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from kio.static.primitive import f64

from epochkraft.metadata.client_quotas import DescribeError, describe
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _entry(entity, values: dict[str, float]) -> r1.EntryData:
    return r1.EntryData(
        entity=tuple(r1.EntityData(entity_type=t, entity_name=n) for t, n in entity),
        values=tuple(r1.ValueData(key=k, value=f64(v)) for k, v in sorted(values.items())),
    )


@api(key=48, name="DescribeClientQuotas", versions=(0, 1), listeners=(BROKER,))
async def handle(request: rt.DescribeClientQuotas, ctx: RequestContext):
    request = convert(request, DescribeClientQuotasRequest)
    components = [(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        matched = describe(ctx.broker.cache.image.client_quotas, components, request.strict)
    except DescribeError as exc:
        error = ErrorCode.unsupported_version if exc.unsupported else ErrorCode.invalid_request
        response = r1.DescribeClientQuotasResponse(
            throttle_time=NO_THROTTLE, error_code=error, error_message=str(exc), entries=None
        )
    else:
        response = r1.DescribeClientQuotasResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            entries=tuple(_entry(entity, values) for entity, values in matched),
        )
    return downgrade_response(response, ctx.api_version)
