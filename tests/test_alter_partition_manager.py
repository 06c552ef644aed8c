"""Kafka's AlterPartitionManagerTest scenarios on the sans-IO AlterPartition sender."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.alter_partition.v3 import response as r3

from epochkraft.broker.alter_partition_manager import AlterPartitionManager
from epochkraft.broker.partition import Partition
from epochkraft.protocol.errors import ErrorCode
from tests.test_partition import TOPIC_ID, Brokers


def response(items, error=ErrorCode.none, top=ErrorCode.none, epoch_bump=1):
    return r3.AlterPartitionResponse(
        throttle_time=datetime.timedelta(0),
        error_code=top,
        topics=tuple(
            r3.TopicData(
                topic_id=i.topic_id,
                partitions=(
                    r3.PartitionData(
                        partition_index=i.partition,
                        error_code=error,
                        leader_id=1,
                        leader_epoch=i.leader_epoch,
                        isr=i.isr_ids,
                        leader_recovery_state=0,
                        partition_epoch=i.partition_epoch + epoch_bump,
                    ),
                ),
            )
            for i in items
        ),
    )


def items(n=3):
    brokers = Brokers()
    out = []
    for index in range(n):
        p = Partition("foo", TOPIC_ID, index, 1)
        p.make_leader(
            0,
            leader_epoch=5,
            partition_epoch=9,
            replicas=(1, 2, 3),
            isr=(1, 2),
            leader_recovery_state=0,
            log_end_offset=0,
        )
        out.append(p.update_follower_fetch(1, 3, 103, 0, 0, brokers, 101))
    return out


def test_basic_with_broker_epoch():
    manager = AlterPartitionManager(1, lambda: 101)
    item = items(1)[0]
    assert manager.submit(item)
    request = manager.poll(0)
    assert request.broker_epoch == 101 and request.__version__ == 3
    state = request.topics[0].partitions[0].new_isr_with_epochs
    assert [(s.broker_id, s.broker_epoch) for s in state] == [(1, 101), (2, -1), (3, 103)]
    results = manager.on_response(1, response([item]))
    assert [(r.item, r.error, r.isr) for r in results] == [(item, ErrorCode.none, (1, 2, 3))]


def test_one_in_flight_and_batching():
    manager = AlterPartitionManager(1, lambda: 101)
    first, second, third = items(3)
    manager.submit(first)
    request = manager.poll(0)
    assert len(request.topics[0].partitions) == 1
    assert not manager.submit(first), "at most one change per partition"
    manager.submit(second)
    manager.submit(third)
    assert manager.poll(1) is None, "one request in flight"
    manager.on_response(2, response([first]))
    batched = manager.poll(3)
    assert sorted(p.partition_index for p in batched.topics[0].partitions) == [1, 2]


def test_stale_broker_epoch_is_retried_after_a_backoff():
    manager = AlterPartitionManager(1, lambda: 101, retry_backoff_ms=50)
    item = items(1)[0]
    manager.submit(item)
    manager.poll(0)
    assert manager.on_response(10, response([], top=ErrorCode.stale_broker_epoch)) == []
    assert manager.poll(20) is None
    assert manager.poll(60) is not None


def test_network_error_resends_the_same_change():
    manager = AlterPartitionManager(1, lambda: 101, retry_backoff_ms=10)
    item = items(1)[0]
    manager.submit(item)
    first = manager.poll(0)
    manager.on_network_error(1)
    assert manager.poll(20) == first


def test_unsafe_mode_sends_v2_without_epochs():
    manager = AlterPartitionManager(1, lambda: 101, unsafe_pre_kip903=True)
    manager.submit(items(1)[0])
    request = manager.poll(0)
    assert request.__version__ == 2 and tuple(request.topics[0].partitions[0].new_isr) == (1, 2, 3)


@pytest.mark.parametrize("top", [ErrorCode.stale_broker_epoch, ErrorCode.not_controller])
def test_top_level_errors_requeue_everything_after_a_backoff(top):
    manager = AlterPartitionManager(1, lambda: 101, retry_backoff_ms=50)
    first, second = items(2)
    manager.submit(first)
    manager.submit(second)
    sent = manager.poll(0)
    assert manager.on_response(10, response([first, second], top=top)) == []
    assert manager.poll(59) is None
    assert manager.poll(60) == sent


@pytest.mark.parametrize(
    "error, routed",
    [
        (ErrorCode.none, True),
        (ErrorCode.ineligible_replica, True),
        (ErrorCode.operation_not_attempted, True),
        (ErrorCode.fenced_leader_epoch, True),
        (ErrorCode.invalid_update_version, True),
        (ErrorCode.new_leader_elected, True),
        (ErrorCode.unknown_topic_id, True),
        (ErrorCode.unknown_server_error, False),
    ],
)
def test_partition_errors_are_routed_back_or_resent(error, routed):
    manager = AlterPartitionManager(1, lambda: 101, retry_backoff_ms=10)
    item = items(1)[0]
    manager.submit(item)
    manager.poll(0)
    results = manager.on_response(1, response([item], error=error))
    if routed:
        assert [(r.item, r.error) for r in results] == [(item, error)]
        assert manager.poll(100) is None
    else:
        assert results == [] and manager.poll(100) is not None, "an unhandled error resends the change"
