"""Fetch (key 1) of ``__cluster_metadata``, versions 12-16, controller listener.

- Brokers follow the metadata log by long polling partition 0 of ``__cluster_metadata`` (topic id
  00000000-0000-0000-0000-000000000001; v12 names the topic): batches from fetch_offset, answered as soon
  as the log grows past it or after max_wait.
- OFFSET_OUT_OF_RANGE beyond the log end; UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID for any other
  topic. The high watermark is the log end (every batch is committed once written).
"""

from __future__ import annotations

import uuid

from kio.schema.fetch.v12 import response as v12
from kio.schema.fetch.v16 import response as v16

from epochkraft.controller.metadata_log import METADATA_TOPIC, METADATA_TOPIC_ID_INT
from epochkraft.net.handlers._util import NO_THROTTLE, ms
from epochkraft.protocol.api import CONTROLLER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response

METADATA_TOPIC_ID = uuid.UUID(int=METADATA_TOPIC_ID_INT)


def _partition(index: int, error: ErrorCode, hw: int, records: bytes = b"") -> v16.PartitionData:
    return v16.PartitionData(
        partition_index=index,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=hw,
        log_start_offset=0,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=records,
    )


@api(key=1, name="Fetch", versions=(12, 16), listeners=(CONTROLLER,))
async def handle(request, ctx):
    node = ctx.node
    log = node.controller.log
    version = ctx.api_version
    wanted = [(topic, p) for topic in request.topics for p in topic.partitions]
    is_metadata = [
        (topic.topic == METADATA_TOPIC if version < 13 else topic.topic_id == METADATA_TOPIC_ID)
        and p.partition == 0
        for topic, p in wanted
    ]
    # Long poll on the metadata partition when the follower is at the end of the log.
    waits = [p.fetch_offset for (_, p), ok in zip(wanted, is_metadata, strict=True) if ok]
    if waits and all(offset >= log.next_offset for offset in waits):
        await node.wait_for_records(min(waits), ms(request.max_wait))
    responses = []
    for (topic, p), ok in zip(wanted, is_metadata, strict=True):
        hw = log.next_offset
        if not ok:
            error = ErrorCode.unknown_topic_or_partition if version < 13 else ErrorCode.unknown_topic_id
            data = _partition(p.partition, error, -1)
        elif p.fetch_offset > hw or p.fetch_offset < 0:
            data = _partition(p.partition, ErrorCode.offset_out_of_range, hw)
        else:
            data = _partition(
                p.partition, ErrorCode.none, hw, log.read(p.fetch_offset, p.partition_max_bytes)
            )
        responses.append(
            v16.FetchableTopicResponse(topic_id=getattr(topic, "topic_id", None), partitions=(data,))
            if version >= 13
            else (topic.topic, data)
        )
    if version == 12:
        topics = tuple(
            v12.FetchableTopicResponse(topic=name, partitions=(convert(data, v12.PartitionData),))
            for name, data in responses
        )
        return v12.FetchResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0, responses=topics
        )
    response = v16.FetchResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0, responses=tuple(responses)
    )
    return downgrade_response(response, version)
