"""Producer ids in blocks: the controller's ProducerIdControlManager and the broker's RPCProducerIdManager,
after Kafka's ProducerIdControlManagerTest and RPCProducerIdManagerTest (ProducerIdManagerTest)."""

from __future__ import annotations

import pytest
from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest

from epochkraft.broker.producer_id_manager import RETRY_BACKOFF_MS, RpcProducerIdManager
from epochkraft.controller.controller import Controller
from epochkraft.controller.producer_id_control import (
    MAX_PRODUCER_ID,
    PRODUCER_ID_BLOCK_SIZE,
    generate_next_producer_id,
)
from epochkraft.metadata.snapshot import image_records
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ProducerIdsRecord
from tests.controller_context import CLUSTER_ID, ControllerContext


def allocate(ctx: ControllerContext, broker_id: int, epoch: int | None = None):
    request = AllocateProducerIdsRequest(
        broker_id=broker_id, broker_epoch=ctx.epoch(broker_id) if epoch is None else epoch
    )
    return ctx.controller.allocate_producer_ids(ctx.now, request)


# ---- ProducerIdControlManagerTest -------------------------------------------------------------------
def test_initial_result():
    ctx = ControllerContext()
    ctx.register_brokers(1)
    response = allocate(ctx, 1)
    assert (response.error_code, response.producer_id_start, response.producer_id_len) == (
        ErrorCode.none,
        0,
        PRODUCER_ID_BLOCK_SIZE,
    )
    assert ctx.controller.image.next_producer_id == PRODUCER_ID_BLOCK_SIZE


def test_monotonic_across_brokers():
    ctx = ControllerContext()
    ctx.register_brokers(1, 2, 3)
    starts = [allocate(ctx, broker).producer_id_start for broker in (1, 2, 3, 1, 2, 3)]
    assert starts == [n * PRODUCER_ID_BLOCK_SIZE for n in range(6)]


@pytest.mark.parametrize(("broker_id", "epoch_delta"), [(1, -1), (1, 1), (7, 0)])
def test_unknown_broker_epoch(broker_id, epoch_delta):
    """A stale or future epoch, or a broker that is not registered: STALE_BROKER_EPOCH, no record."""
    ctx = ControllerContext()
    ctx.register_brokers(1)
    end = ctx.controller.log.next_offset
    response = allocate(ctx, broker_id, ctx.epoch(1) + epoch_delta)
    assert response.error_code == ErrorCode.stale_broker_epoch
    assert ctx.controller.log.next_offset == end
    assert ctx.controller.image.next_producer_id == -1


def test_max_value():
    """The block past the int64 space is refused (Kafka: UnknownServerException)."""
    error, records, _ = generate_next_producer_id(
        MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE + 1, 1, ErrorCode.none, 5
    )
    assert (error, records) == (ErrorCode.unknown_server_error, [])
    error, records, block = generate_next_producer_id(
        MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE, 1, ErrorCode.none, 5
    )
    assert error == ErrorCode.none and block.last_producer_id == MAX_PRODUCER_ID - 1


def test_replay_refuses_a_block_that_does_not_move_up():
    ctx = ControllerContext()
    ctx.register_brokers(1)
    allocate(ctx, 1)
    with pytest.raises(RuntimeError):
        ctx.controller.replay(ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=1000))


def test_snapshot_keeps_the_next_block():
    """ProducerIdsImage.write: a controller rebuilt from a snapshot of the image goes on after the last
    block handed out, so a new active controller never hands out an id twice."""
    ctx = ControllerContext()
    ctx.register_brokers(1)
    for _ in range(3):
        allocate(ctx, 1)
    records = image_records(ctx.controller.image, 20)
    assert ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=3000) in records
    rebuilt = Controller(CLUSTER_ID)
    for record in records:
        rebuilt.replay(record)
    assert rebuilt.image.next_producer_id == 3000


def test_log_replay_keeps_the_next_block():
    """A restarted controller replays the ProducerIdsRecords of its log and goes on after them."""
    ctx = ControllerContext()
    ctx.register_brokers(1, 2)
    allocate(ctx, 1)
    allocate(ctx, 2)
    restarted = Controller(CLUSTER_ID)
    restarted.load(ctx.controller.log.read(0, 1 << 30))
    assert restarted.image.next_producer_id == 2000


# ---- RPCProducerIdManagerTest -----------------------------------------------------------------------
def granted(manager: RpcProducerIdManager, start: int, now_ms: int = 0, size: int = 1000) -> None:
    assert manager.take_block_request()
    manager.handle_allocate_producer_ids_response(now_ms, ErrorCode.none, start, size)


def test_no_block_yet_is_coordinator_load_in_progress():
    """Without a block the broker answers a retriable error and asks the controller once."""
    manager = RpcProducerIdManager(1)
    assert manager.generate_producer_id(0).error == ErrorCode.coordinator_load_in_progress
    assert manager.take_block_request()
    assert manager.generate_producer_id(0).error == ErrorCode.coordinator_load_in_progress
    assert not manager.take_block_request()  # one request in flight at a time


def test_get_producer_id_controller_rpc():
    """Ids come in order from the block; at 90% the next block is asked for, and used once the current
    one is exhausted, without an error between them."""
    manager = RpcProducerIdManager(1)
    manager.generate_producer_id(0)
    granted(manager, 0, size=10)
    ids = [manager.generate_producer_id(0).producer_id for _ in range(9)]
    assert ids == list(range(9)) and not manager.take_block_request()
    assert manager.generate_producer_id(0).producer_id == 9  # 90% of the block: the next is asked for
    assert manager.take_block_request()
    manager.handle_allocate_producer_ids_response(0, ErrorCode.none, 30, 10)
    assert [manager.generate_producer_id(0).producer_id for _ in range(3)] == [30, 31, 32]


def test_block_exhausted_before_the_next_arrives():
    manager = RpcProducerIdManager(1)
    manager.generate_producer_id(0)
    granted(manager, 0, size=2)
    assert [manager.generate_producer_id(0).producer_id for _ in range(2)] == [0, 1]
    assert manager.take_block_request()
    assert manager.generate_producer_id(0).error == ErrorCode.coordinator_load_in_progress
    manager.handle_allocate_producer_ids_response(0, ErrorCode.none, 2000, 2)
    assert manager.generate_producer_id(0).producer_id == 2000


@pytest.mark.parametrize(
    "error", [ErrorCode.stale_broker_epoch, ErrorCode.not_controller, ErrorCode.unknown_server_error]
)
def test_retry_backoff(error):
    """A refused request is asked again only RETRY_BACKOFF_MS later."""
    manager = RpcProducerIdManager(1)
    manager.generate_producer_id(0)
    assert manager.take_block_request()
    manager.handle_allocate_producer_ids_response(100, error)
    assert (
        manager.generate_producer_id(100 + RETRY_BACKOFF_MS - 1).error
        == ErrorCode.coordinator_load_in_progress
    )
    assert not manager.take_block_request()
    assert (
        manager.generate_producer_id(100 + RETRY_BACKOFF_MS).error == ErrorCode.coordinator_load_in_progress
    )
    assert manager.take_block_request()


def test_block_that_does_not_move_up_is_refused():
    manager = RpcProducerIdManager(1)
    manager.generate_producer_id(0)
    granted(manager, 1000, size=10)
    for _ in range(10):
        manager.generate_producer_id(0)
    manager.handle_allocate_producer_ids_response(0, ErrorCode.none, 500, 10)
    assert manager.generate_producer_id(0).error == ErrorCode.coordinator_load_in_progress


def test_ids_unique_across_brokers_sharing_one_controller():
    """Three brokers, each with its manager, drawing through several blocks from one controller."""
    ctx = ControllerContext()
    ctx.register_brokers(1, 2, 3)
    managers = {b: RpcProducerIdManager(b) for b in (1, 2, 3)}
    seen: list[int] = []
    for _ in range(2500):
        for broker_id, manager in managers.items():
            generated = manager.generate_producer_id(ctx.now)
            if manager.take_block_request():
                response = allocate(ctx, broker_id)
                manager.handle_allocate_producer_ids_response(
                    ctx.now, response.error_code, response.producer_id_start, response.producer_id_len
                )
            if generated.error == ErrorCode.none:
                seen.append(generated.producer_id)
    assert len(seen) == len(set(seen)) > 7000
