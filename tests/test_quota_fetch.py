"""The consumer_byte_rate quota against a real broker over its socket: a consumer whose backlog is larger
than its quota allows in a window still reads it, in responses capped by the quota (Kafka's
KafkaApis.handleFetchRequest caps fetch.max.bytes by ClientQuotaManager.getMaxValueInQuotaWindow), where a
broker without the cap answers every fetch empty and throttled for ever."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.fetch.v12 import request as f12
from kio.static.primitive import f64

from epochkraft.harness.kio_client import MiniClient
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import decode_batches

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

QUOTA = 100_000  # the consumer's consumer_byte_rate: 100 kB a second over quota.window.num 2 windows of 1 s
BACKLOG_BATCHES, BATCH_VALUE = 40, b"v" * 10_000  # about 400 kB: four windows' worth


async def set_consumer_quota(port: int, client_id: str, rate: float) -> None:
    request = acq.AlterClientQuotasRequest(
        entries=(
            acq.EntryData(
                entity=(acq.EntityData(entity_type="client-id", entity_name=client_id),),
                ops=(acq.OpData(key="consumer_byte_rate", value=f64(float(rate)), remove=False),),
            ),
        ),
        validate_only=False,
    )
    async with KafkaClient("127.0.0.1", port) as client:
        response = await client.send(request)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]


def fetch(offset: int) -> f12.FetchRequest:
    return f12.FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=1 << 24,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            f12.FetchTopic(
                topic="backlog",
                partitions=(
                    f12.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 24,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


async def consume(port: int, seconds: float) -> tuple[int, int, int]:
    """(records read, the largest response's record bytes, throttled responses) in ``seconds``."""
    offset, largest, throttled = 0, 0, 0
    deadline = time.monotonic() + seconds
    async with KafkaClient("127.0.0.1", port, client_id="quoted-consumer") as client:
        while offset < BACKLOG_BATCHES and time.monotonic() < deadline:
            response = await client.send(fetch(offset))
            throttled += response.throttle_time > datetime.timedelta(0)
            if not response.responses:  # throttled: answered empty
                continue
            data = response.responses[0].partitions[0]
            assert data.error_code == ErrorCode.none, data.error_code
            records = data.records or b""
            largest = max(largest, len(records))
            for batch in decode_batches(records):
                offset = max(offset, batch.offset_of(batch.records[-1]) + 1)
    return offset, largest, throttled


async def run(bootstrap: str, port: int) -> tuple[int, int, int]:
    client = MiniClient(bootstrap)
    try:
        assert await client.create_topic("backlog", 1, 1) == ErrorCode.none
        for _ in range(BACKLOG_BATCHES):
            error, _ = await client.produce("backlog", 0, [BATCH_VALUE])
            assert error == ErrorCode.none, error
    finally:
        await client.close()
    await set_consumer_quota(port, "quoted-consumer", QUOTA)
    await asyncio.sleep(1.0)  # the quota reaches the broker's metadata
    return await consume(port, 30.0)


def test_fetch_max_bytes_is_capped_by_the_max_value_in_quota_window(make_cluster):
    """KafkaApis.handleFetchRequest: fetchMaxBytes = min(maxBytes, fetch.max.bytes, the quota over
    quota.window.num - 1 windows): the consumer reads its whole backlog, each response within 100 kB."""
    cluster = make_cluster(1, broker_extra="quota.window.num=2\n")
    port = cluster.nodes[1].port
    read, largest, throttled = asyncio.run(run(cluster.bootstrap, port))
    assert read == BACKLOG_BATCHES, (read, largest, throttled)
    assert largest <= QUOTA + len(BATCH_VALUE) + 200, largest
