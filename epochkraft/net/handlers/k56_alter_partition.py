"""AlterPartition (key 56), versions 2-3, controller listener.

- Validated in Kafka's order (ReplicationControlManager.alterPartition): STALE_BROKER_EPOCH for the
  requester, then per partition UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER (future
  epochs), FENCED_LEADER_EPOCH, INVALID_REQUEST (not the leader), INVALID_UPDATE_VERSION, INVALID_REQUEST
  (bad ISR, leader missing, recovery-state rules), INELIGIBLE_REPLICA (KIP-841 / KIP-903).
- v2 carries NewIsr (broker ids): converted to broker states with epoch -1, so only v3's
  NewIsrWithEpochs lets the controller refuse a stale incarnation (KIP-903).
- A no-op change answers NONE with the current state; a change that elects another leader answers
  NEW_LEADER_ELECTED.
"""

from __future__ import annotations

from epochkraft.controller.requests import alter_partition_v3
from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.versions import downgrade_response


@api(key=56, name="AlterPartition", versions=(2, 3), listeners=(CONTROLLER,))
async def handle(request, ctx):
    node = ctx.node
    upgraded = alter_partition_v3(request)
    response = node.controller.alter_partition(node.now_ms(), upgraded, ctx.api_version)
    return downgrade_response(response, ctx.api_version)
