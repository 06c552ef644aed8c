"""Produce (key 0), versions 3-11, broker listener.

- The leader validates each batch (CRC-32C and record count: CORRUPT_MESSAGE; larger than the topic's
  max.message.bytes, else message.max.bytes (1048588): MESSAGE_TOO_LARGE), assigns offsets and stamps
  its leader epoch without re-encoding, then answers per acks: 0 no response, 1 after the local append,
  -1 (all) once the high watermark passes the batch.
- acks=all honours min.insync.replicas: NOT_ENOUGH_REPLICAS before appending when the ISR is too small,
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if it shrank while waiting, REQUEST_TIMED_OUT after the request timeout.
- NOT_LEADER_OR_FOLLOWER on a non-leader (clients refresh metadata), UNKNOWN_TOPIC_OR_PARTITION for
  unknown partitions. Idempotent producers: duplicates answered with their first offsets,
  OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH as Kafka.
"""

from __future__ import annotations

import asyncio
import time

from kio.schema.produce.v11 import response as r11

from epochkraft.net.handlers._util import NO_THROTTLE, ms
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response


@api(key=0, name="Produce", versions=(3, 11), listeners=(BROKER,))
async def handle(request, ctx):
    started = time.monotonic()
    if request.transactional_id is not None:
        results = {
            (t.name, p.index): (
                ErrorCode.transactional_id_authorization_failed,
                -1,
                -1,
                "transactions are not supported",
            )
            for t in request.topic_data
            for p in t.partition_data
        }
    else:
        manager = ctx.node.replica_manager
        timeout = ms(request.timeout)
        keys = [(t.name, p.index) for t in request.topic_data for p in t.partition_data]
        appends = [
            manager.append(t.name, p.index, p.records or b"", request.acks, timeout)
            for t in request.topic_data
            for p in t.partition_data
        ]
        done = await asyncio.gather(*appends)
        ctx.node.observe_produce(time.monotonic() - started)
        results = {
            key: (r.error, r.base_offset, r.log_start_offset, r.message)
            for key, r in zip(keys, done, strict=True)
        }
    if request.acks == 0:
        return None
    response = r11.ProduceResponse(
        responses=tuple(
            r11.TopicProduceResponse(
                name=t.name,
                partition_responses=tuple(
                    r11.PartitionProduceResponse(
                        index=p.index,
                        error_code=results[(t.name, p.index)][0],
                        base_offset=results[(t.name, p.index)][1],
                        log_start_offset=results[(t.name, p.index)][2],
                        record_errors=(),
                        error_message=results[(t.name, p.index)][3],
                    )
                    for p in t.partition_data
                ),
            )
            for t in request.topic_data
        ),
        throttle_time=NO_THROTTLE,
    )
    return downgrade_response(response, ctx.api_version)
