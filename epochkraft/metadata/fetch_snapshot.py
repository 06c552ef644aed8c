"""Fetching a metadata snapshot with FetchSnapshot (59), chunk by chunk from position 0 to the size the
answers give (KafkaRaftClient.handleFetchSnapshotResponse), for a voter behind the leader's log start and
for a broker behind a controller's. The caller decodes and applies what it gets."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from kio.schema.fetch_snapshot.v1 import request as fs
from kio.schema.fetch_snapshot.v1.response import FetchSnapshotResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64

from epochkraft.metadata.snapshot import SnapshotId
from epochkraft.protocol.errors import ErrorCode, ProtocolError

METADATA_TOPIC = "__cluster_metadata"
CHUNK_BYTES = 1024 * 1024

# a client's or a controller channel's ``send``, the request's answer named by its class
Send: TypeAlias = Callable[
    [fs.FetchSnapshotRequest, type[FetchSnapshotResponse]], Awaitable[FetchSnapshotResponse]
]


class SnapshotUnavailable(ProtocolError):
    """The controller asked does not hold that snapshot (any more), or its answers do not add up."""


async def fetch_snapshot(
    send: Send,
    snapshot_id: SnapshotId,
    *,
    cluster_id: str | None = None,
    replica_id: int = -1,
    leader_epoch: int = -1,
    progress: Callable[[], None] | None = None,
    directory_id: uuid.UUID | None = None,
) -> bytes:
    """The snapshot file's bytes; ``progress`` is called after each chunk. ``directory_id``: a controller's
    (FetchSnapshot v1's ReplicaDirectoryId, KIP-853)."""
    chunks: list[bytes] = []
    position, size = 0, None
    while size is None or position < size:
        request = fs.FetchSnapshotRequest(
            cluster_id=cluster_id,
            replica_id=BrokerId(replica_id),
            max_bytes=i32(CHUNK_BYTES),
            topics=(
                fs.TopicSnapshot(
                    name=TopicName(METADATA_TOPIC),
                    partitions=(
                        fs.PartitionSnapshot(
                            partition=i32(0),
                            current_leader_epoch=i32(leader_epoch),
                            snapshot_id=fs.SnapshotId(
                                end_offset=i64(snapshot_id.end_offset), epoch=i32(snapshot_id.epoch)
                            ),
                            position=i64(position),
                            replica_directory_id=directory_id,
                        ),
                    ),
                ),
            ),
        )
        response = await send(request, FetchSnapshotResponse)
        partitions = [p for t in response.topics for p in t.partitions]
        if response.error_code != ErrorCode.none or len(partitions) != 1:
            raise SnapshotUnavailable(f"FetchSnapshot failed: {ErrorCode(response.error_code).name}")
        answer = partitions[0]
        if answer.error_code != ErrorCode.none:
            raise SnapshotUnavailable(f"snapshot {snapshot_id}: {ErrorCode(answer.error_code).name}")
        data = bytes(answer.unaligned_records)
        if (
            answer.position != position
            or (not data and position < answer.size)
            or (size not in (None, answer.size))
        ):
            raise SnapshotUnavailable(
                f"snapshot {snapshot_id}: a chunk at {answer.position} of {answer.size}"
            )
        chunks.append(data)
        position += len(data)
        size = answer.size
        if progress is not None:
            progress()
    return b"".join(chunks)
