"""AlterClientQuotas (key 49), versions 0-1, on both listeners.

- Each entry's entity (user, client-id, ip; a null name for the default entity) and its ops (set a key's
  value, or remove it) become ClientQuotaRecords, validated as Kafka's ClientQuotaControlManager:
  INVALID_REQUEST per entity for an unknown type or key, a bad combination, an empty name, a value <= 0
  or fractional for a byte or connection rate; validate_only writes nothing.
- The broker listener forwards to the controller (as Kafka's KRaft brokers do) and answers once its own
  metadata holds the change, so a DescribeClientQuotas sent to it next sees it.
- Needs ALTER_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse

from epochkraft.metadata.client_quotas import quota_entity
from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


def _expected(request: rt.AlterClientQuotas, response) -> dict:
    """The quotas each entity altered without error is to have: key -> value, or None once removed."""
    done = {
        quota_entity((e.entity_type, e.entity_name) for e in entry.entity)
        for entry in response.entries
        if entry.error_code == ErrorCode.none
    }
    expected = {}
    for entry in request.entries:
        entity = quota_entity(dict((e.entity_type, e.entity_name) for e in entry.entity).items())
        if entity in done:
            expected[entity] = {op.key: None if op.remove else float(op.value) for op in entry.ops}
    return expected


@api(key=49, name="AlterClientQuotas", versions=(0, 1), listeners=(BROKER,))
async def handle_on_broker(request: rt.AlterClientQuotas, ctx: RequestContext):
    request = convert(request, AlterClientQuotasRequest)
    node = ctx.broker
    response = await node.forward_to_controller(request, AlterClientQuotasResponse, ctx)
    if not request.validate_only:
        expected = _expected(request, response)

        def applied() -> bool:
            held = node.cache.image.client_quotas
            return all(
                held.get(entity, {}).get(key) == value
                for entity, values in expected.items()
                for key, value in values.items()
            )

        await node.wait_for_metadata(applied)
    return downgrade_response(response, ctx.api_version)


@api(key=49, name="AlterClientQuotas", versions=(0, 1), listeners=(CONTROLLER,))
async def handle_on_controller(request: rt.AlterClientQuotas, ctx: RequestContext):
    request = convert(request, AlterClientQuotasRequest)
    response = ctx.controller_node.controller.alter_client_quotas(ctx.now_ms(), request)
    return downgrade_response(response, ctx.api_version)
