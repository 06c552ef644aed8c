"""DeleteTopics (key 20), versions 1-6, on both listeners.

- By name (v1-5) or by name or topic id (v6); UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID for unknown
  topics. The broker listener forwards to the controller.
"""

from __future__ import annotations

from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState

from epochkraft.protocol.api import BROKER, CONTROLLER, api
from epochkraft.protocol.versions import downgrade_response


@api(key=20, name="DeleteTopics", versions=(1, 6), listeners=(BROKER, CONTROLLER))
async def handle(request, ctx):
    if ctx.api_version >= 6:
        upgraded = request
    else:
        upgraded = DeleteTopicsRequest(
            topics=tuple(DeleteTopicState(name=name, topic_id=None) for name in request.topic_names),
            timeout=request.timeout,
        )
    if ctx.listener == BROKER:
        response = await ctx.node.forward_to_controller(upgraded)
    else:
        response = ctx.node.controller.delete_topics(ctx.node.now_ms(), upgraded)
    return downgrade_response(response, ctx.api_version)
