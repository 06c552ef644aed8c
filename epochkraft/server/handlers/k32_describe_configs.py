"""DescribeConfigs (key 32), versions 1-4, broker listener.

- TOPIC resources: every topic config Kafka knows (or the keys asked for), each with its value, source
  (DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
  DEFAULT_CONFIG), synonyms (when include_synonyms), type (v3+) and documentation (v4, when asked).
  UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist, INVALID_TOPIC_EXCEPTION for a bad name.
- BROKER resources: this broker's id lists every broker setting; the empty name lists the cluster-wide
  dynamic defaults; another broker's id is INVALID_REQUEST (clients send it to that broker).
- GROUP resources (KIP-848): every consumer.* and streams.* group config, the group's own value
  (DYNAMIC_GROUP_CONFIG) else the broker's group.* setting; an empty group name is INVALID_REQUEST.
- Answered from this broker's metadata cache and settings, as Kafka's brokers do (not forwarded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest
from kio.schema.describe_configs.v4.response import DescribeConfigsResponse

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=32, name="DescribeConfigs", versions=(1, 4), listeners=(BROKER,))
async def handle(request: rt.DescribeConfigs, ctx: RequestContext):
    upgraded = convert(request, DescribeConfigsRequest)
    results = tuple(
        ctx.broker.config_describer.describe(
            resource.resource_type,
            resource.resource_name,
            resource.configuration_keys,
            upgraded.include_synonyms,
            upgraded.include_documentation,
        )
        for resource in upgraded.resources
    )
    response = DescribeConfigsResponse(throttle_time=NO_THROTTLE, results=results)
    return downgrade_response(response, ctx.api_version)
