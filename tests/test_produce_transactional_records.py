"""Kafka's ProduceRequestTest: a Produce request is transactional when a partition's records are a
transactional batch (RequestUtils.hasTransactionalRecords), read from the first batch's attributes, at a
version naming topics (v9) and one naming topic ids (v13)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.produce.v9 import request as v9
from kio.schema.produce.v13 import request as v13
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from epochkraft.protocol.records import build_batch
from epochkraft.server.handlers.k00_produce import _has_transactional_records

TIMEOUT = i32Timedelta.parse(datetime.timedelta(milliseconds=10))


def _batch(*, transactional: bool = False, producer_id: int = -1) -> bytes:
    epoch = 1 if producer_id >= 0 else -1
    return build_batch(
        [(None, b"value", (), 0)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=1 if producer_id >= 0 else -1,
        transactional=transactional,
    )


def _request(version: int, *partition_records: bytes | None) -> v9.ProduceRequest | v13.ProduceRequest:
    if version == 9:
        data9 = tuple(
            v9.PartitionProduceData(index=i32(i), records=r) for i, r in enumerate(partition_records)
        )
        topic9 = v9.TopicProduceData(name=TopicName("topic"), partition_data=data9)
        return v9.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=TIMEOUT, topic_data=(topic9,))
    data13 = tuple(v13.PartitionProduceData(index=i32(i), records=r) for i, r in enumerate(partition_records))
    topic13 = v13.TopicProduceData(topic_id=uuid.uuid4(), partition_data=data13)
    return v13.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=TIMEOUT, topic_data=(topic13,))


@pytest.mark.parametrize("version", [9, 13])
def test_shouldBeFlaggedAsTransactionalWhenTransactionalRecords(version: int) -> None:
    assert _has_transactional_records(_request(version, _batch(transactional=True, producer_id=1)))


@pytest.mark.parametrize("version", [9, 13])
def test_shouldNotBeFlaggedAsTransactionalWhenNoRecords(version: int) -> None:
    assert not _has_transactional_records(_request(version, None, b""))


@pytest.mark.parametrize("version", [9, 13])
def test_testMixedTransactionalData(version: int) -> None:
    mixed = _request(version, _batch(), _batch(transactional=True, producer_id=1))
    assert _has_transactional_records(mixed)


@pytest.mark.parametrize("version", [9, 13])
def test_testMixedIdempotentData(version: int) -> None:
    assert not _has_transactional_records(_request(version, _batch(), _batch(producer_id=1)))
