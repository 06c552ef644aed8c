"""DescribeCluster (key 60), versions 0-1, controller listener.

- On the controller listener it describes the controller (endpoint type 2 in v1, as Kafka's controllers
  answer); brokers are found through Metadata on a broker listener.
"""

from __future__ import annotations

from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.versions import downgrade_response


@api(key=60, name="DescribeCluster", versions=(0, 1), listeners=(CONTROLLER,))
async def handle(request, ctx):
    return downgrade_response(ctx.node.controller.describe_cluster(), ctx.api_version)
