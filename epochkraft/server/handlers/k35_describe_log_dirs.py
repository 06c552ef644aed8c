"""DescribeLogDirs (key 35), versions 1-4, broker listener.

- This broker's one log dir (its data dir) with every hosted partition, or those asked for: size in bytes
  and offset lag (high watermark minus log end offset, never below 0, as Kafka reports); total and usable
  bytes of the filesystem (v4+). Clients send it to each broker they want described.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.describe_log_dirs.v4 import response as r4
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.types import TopicName
from kio.static.primitive import i32, i64

from epochkraft.broker.replica_views import describe_log_dir, topic_partitions
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert, downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=35, name="DescribeLogDirs", versions=(1, 4), listeners=(BROKER,))
async def handle(request: rt.DescribeLogDirs, ctx: RequestContext):
    upgraded = convert(request, DescribeLogDirsRequest)
    wanted = (
        None
        if upgraded.topics is None
        else topic_partitions((t.topic, t.partitions) for t in upgraded.topics)
    )
    log_dir = describe_log_dir(ctx.broker.data_dir, ctx.broker.replica_manager.replicas, wanted)
    by_topic: dict[str, list[r4.DescribeLogDirsPartition]] = {}
    for p in log_dir.partitions:
        by_topic.setdefault(p.topic, []).append(
            r4.DescribeLogDirsPartition(
                partition_index=i32(p.partition),
                partition_size=i64(p.size_bytes),
                offset_lag=i64(p.offset_lag),
                is_future_key=False,
            )
        )
    result = r4.DescribeLogDirsResult(
        error_code=ErrorCode.none,
        log_dir=log_dir.path,
        topics=tuple(
            r4.DescribeLogDirsTopic(name=TopicName(name), partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
        total_bytes=i64(log_dir.total_bytes),
        usable_bytes=i64(log_dir.usable_bytes),
    )
    response = r4.DescribeLogDirsResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,)
    )
    return downgrade_response(response, ctx.api_version)
