"""WriteTxnMarkers (key 27), versions 1-2, broker listener: a transaction coordinator ends a transaction.

- For each marker (producer id and epoch, commit or abort, coordinator epoch), a control batch is
  appended to each partition named that this broker leads, and each is answered once the high watermark
  passes its marker (Kafka's KafkaApis.handleWriteTxnMarkersRequest: requiredAcks -1, AppendOrigin
  COORDINATOR, a timeout of request.timeout.ms). A partition this broker does not host is
  UNKNOWN_TOPIC_OR_PARTITION; one it follows, NOT_LEADER_OR_FOLLOWER; a marker from an older producer
  epoch INVALID_PRODUCER_EPOCH, from an older coordinator TRANSACTION_COORDINATOR_FENCED.
- A marker written to a ``__consumer_offsets`` partition completes the producer's transactional offset
  commits there (the group coordinator's ``complete_transactional_offsets``).
- With an authorizer, ALTER or CLUSTER_ACTION on the cluster is needed, else every partition is
  CLUSTER_AUTHORIZATION_FAILED.
- v2 adds the marker's transaction version (KIP-890): with version 2 a marker must come from a newer
  producer epoch than the partition knows (each transaction bumps it), or be a retry of the last one.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kio.schema.write_txn_markers.v2 import response as r2

from epochkraft.broker.group_coordinator import OFFSETS_TOPIC
from epochkraft.broker.producer_state import EndTxnMarker
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import AclOperation
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default, which KafkaApis waits for the markers


@api(key=27, name="WriteTxnMarkers", versions=(1, 2), listeners=(BROKER,))
async def handle(request: rt.WriteTxnMarkers, ctx: RequestContext):
    allowed = ctx.authorized_cluster(AclOperation.ALTER) or ctx.authorized_cluster(
        AclOperation.CLUSTER_ACTION
    )
    if not allowed:
        results = [_refused(marker) for marker in request.markers]
    else:  # appended in request order: a partition's appends keep the order they were started in
        results = await asyncio.gather(*(_write(ctx.broker, marker) for marker in request.markers))
    return downgrade_response(r2.WriteTxnMarkersResponse(markers=tuple(results)), ctx.api_version)


async def _write(node, marker) -> r2.WritableTxnMarkerResult:
    """One marker to each of its partitions, answered once every append has been."""
    manager = node.replica_manager
    end = EndTxnMarker(marker.transaction_result, marker.coordinator_epoch)
    keys = [(t.name, index) for t in marker.topics for index in t.partition_indexes]
    appends = [
        manager.append_txn_marker(
            topic,
            index,
            marker.producer_id,
            marker.producer_epoch,
            end,
            REQUEST_TIMEOUT_MS,
            getattr(marker, "transaction_version", 0),  # v2+
        )
        if manager.replica(topic, index) is not None
        else _unknown()
        for topic, index in keys
    ]
    errors = dict(zip(keys, await asyncio.gather(*appends), strict=True))
    for (topic, index), error in errors.items():
        if topic == OFFSETS_TOPIC and error == ErrorCode.none:
            node.groups.coordinator.complete_transactional_offsets(
                index, marker.producer_id, marker.producer_epoch, marker.transaction_result
            )
    return _result(marker, errors)


async def _unknown() -> ErrorCode:
    """A partition not hosted here (Kafka's replicaManager.onlinePartition is empty)."""
    return ErrorCode.unknown_topic_or_partition


def _refused(marker) -> r2.WritableTxnMarkerResult:
    keys = [(t.name, index) for t in marker.topics for index in t.partition_indexes]
    return _result(marker, dict.fromkeys(keys, ErrorCode.cluster_authorization_failed))


def _result(marker, errors: dict[tuple[str, int], ErrorCode]) -> r2.WritableTxnMarkerResult:
    return r2.WritableTxnMarkerResult(
        producer_id=marker.producer_id,
        topics=tuple(
            r2.WritableTxnMarkerTopicResult(
                name=t.name,
                partitions=tuple(
                    r2.WritableTxnMarkerPartitionResult(
                        partition_index=index, error_code=errors[(t.name, index)]
                    )
                    for index in t.partition_indexes
                ),
            )
            for t in marker.topics
        ),
    )
