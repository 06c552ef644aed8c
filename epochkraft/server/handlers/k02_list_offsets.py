"""ListOffsets (key 2), versions 1-11, broker listener.

- Timestamp -2: the log start offset; -1: the high watermark (the end a consumer can read to);
  -3 (v7+): the record with the largest timestamp; otherwise the first offset whose timestamp is at or
  after the one given (-1 offset if none below the high watermark). Both go through the segments' time
  indexes (``PartitionLog.fetch_offset_by_timestamp`` / ``fetch_max_timestamp``), never a scan of the log.
- -4 (v8+, earliest local) is the log start offset and -5 (v9+, latest tiered) and -6 (v11+, earliest
  pending upload) have no offset (-1), as Kafka's UnifiedLog.fetchOffsetByTimestamp without remote storage.
- Only the leader answers (NOT_LEADER_OR_FOLLOWER), with the leader epoch checks of Fetch (v4+).
- The response is encoded by protocol/list_offsets_response.py, not kio (its cost per partition).
- isolation_level 1 (read_committed, v2+): the last stable offset takes the high watermark's place, for
  -1 and as the bound of timestamp lookups (Kafka's Partition.fetchOffsetForTimestamp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.list_offsets_response import Offset, encode_response
from epochkraft.server.apis import BrokerApis
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6
READ_COMMITTED = 1  # isolation_level
NO_THROTTLE_MS = 0


def _lookup(replica, timestamp: int, last_fetchable: int) -> tuple[int, int]:
    """(timestamp, offset) for a timestamp query below the last fetchable offset, (-1, -1) if none."""
    if timestamp == MAX_TIMESTAMP:
        found = replica.log.fetch_max_timestamp(last_fetchable)
    else:
        found = replica.log.fetch_offset_by_timestamp(timestamp, last_fetchable)
    return found if found is not None else (-1, -1)


def _answer(node: BrokerApis, topic: str, p, read_committed: bool) -> Offset:
    index = p.partition_index
    replica, error = node.replica_manager.leader_replica(
        topic,
        index,
        getattr(p, "current_leader_epoch", -1),  # v4+
    )
    if replica is None:
        return Offset(index, error)
    part = replica.partition
    if p.timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):  # no remote storage
        return Offset(index, ErrorCode.none)
    if p.timestamp in (EARLIEST, EARLIEST_LOCAL):
        return Offset(index, ErrorCode.none, -1, replica.log.log_start_offset, part.leader_epoch)
    # Kafka's Partition.fetchOffsetForTimestamp: read_committed consumers see no further than the LSO
    last_fetchable = replica.last_stable_offset if read_committed else part.high_watermark
    if p.timestamp == LATEST:
        return Offset(index, ErrorCode.none, -1, last_fetchable, part.leader_epoch)
    timestamp, offset = _lookup(replica, p.timestamp, last_fetchable)
    return Offset(index, ErrorCode.none, timestamp, offset, part.leader_epoch if offset >= 0 else -1)


@api(key=2, name="ListOffsets", versions=(1, 11), listeners=(BROKER,))
async def handle(request: rt.ListOffsets, ctx: RequestContext):
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED  # v2+
    topics = [
        (t.name, [_answer(ctx.broker, t.name, p, read_committed) for p in t.partitions])
        for t in request.topics
    ]
    body = encode_response(ctx.api_version, NO_THROTTLE_MS, topics)
    # In pieces from v2, whose body opens with the throttle time a request quota may set (socket_server's
    # _with_throttle); v1 has no throttle time.
    return [body] if ctx.api_version >= 2 else body
