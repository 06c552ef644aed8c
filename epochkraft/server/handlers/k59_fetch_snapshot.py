"""FetchSnapshot (key 59), versions 0-1, controller listener.

- A chunk of a metadata snapshot file (``<end offset>-<epoch>.checkpoint``, Kafka's checkpoint format) from
  ``position``, at most ``max_bytes`` (and 1 MiB), with the file's size: what a broker or a voter behind the
  log's start fetches (KafkaRaftClient.handleFetchSnapshotRequest). Every controller serves the snapshots
  it holds.
- SNAPSHOT_NOT_FOUND for a snapshot this controller does not hold (it may have been replaced by a newer
  one: fetch the log again to learn it), POSITION_OUT_OF_RANGE past the end; anything but
  ``__cluster_metadata``-0 UNKNOWN_TOPIC_OR_PARTITION; a controller without a data dir INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.fetch_snapshot.v1 import response as v1
from kio.schema.types import BrokerId
from kio.static.primitive import i32

from epochkraft.metadata.snapshot import SnapshotId, snapshot_filename
from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

METADATA_TOPIC = "__cluster_metadata"
MAX_CHUNK = 1024 * 1024


def _answer(index: int, error: ErrorCode, snapshot, leader: tuple[int, int], size=-1, position=-1, data=b""):
    return v1.PartitionSnapshot(
        index=i32(index),
        error_code=error,
        snapshot_id=v1.SnapshotId(end_offset=snapshot.end_offset, epoch=snapshot.epoch),
        current_leader=v1.LeaderIdAndEpoch(leader_id=BrokerId(leader[0]), leader_epoch=i32(leader[1])),
        size=size,
        position=position,
        unaligned_records=data,
    )


@api(key=59, name="FetchSnapshot", versions=(0, 1), listeners=(CONTROLLER,))
async def handle(request: rt.FetchSnapshot, ctx: RequestContext):
    node = ctx.controller_node
    directory = node.snapshot_dir
    quorum = node.quorum
    leader = (
        (quorum.raft.leader_id, quorum.raft.epoch) if quorum is not None else (node.controller.node_id, 0)
    )
    if directory is None:
        response = v1.FetchSnapshotResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request, topics=()
        )
        return downgrade_response(response, ctx.api_version)
    topics = []
    for topic in request.topics:
        answers = []
        for p in topic.partitions:
            if topic.name != METADATA_TOPIC or p.partition != 0:
                answers.append(
                    _answer(p.partition, ErrorCode.unknown_topic_or_partition, p.snapshot_id, leader)
                )
                continue
            path = directory / snapshot_filename(SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch))
            try:
                with open(path, "rb") as f:
                    size = f.seek(0, 2)
                    if p.position < 0 or p.position > size:
                        answers.append(
                            _answer(p.partition, ErrorCode.position_out_of_range, p.snapshot_id, leader, size)
                        )
                        continue
                    f.seek(p.position)
                    data = f.read(max(min(request.max_bytes, MAX_CHUNK), 1))
            except FileNotFoundError:
                answers.append(_answer(p.partition, ErrorCode.snapshot_not_found, p.snapshot_id, leader))
                continue
            answers.append(
                _answer(p.partition, ErrorCode.none, p.snapshot_id, leader, size, p.position, data)
            )
        topics.append(v1.TopicSnapshot(name=topic.name, partitions=tuple(answers)))
    response = v1.FetchSnapshotResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=tuple(topics)
    )
    return downgrade_response(response, ctx.api_version)
