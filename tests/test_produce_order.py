"""A transactional producer's Produce request that waits for the coordinator to add its partitions keeps its
place in the partitions' append order: Kafka reads one request per connection at a time (SocketServer's
Processor mutes the channel until the response is sent), so a producer's next request is never appended
ahead of it. Ours pipelines a connection's Produce requests; the turn taken as the request arrives keeps them
in order (a Flink KafkaSink producer was refused OUT_OF_ORDER_SEQUENCE_NUMBER without it)."""

from __future__ import annotations

import asyncio

from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import build_batch
from tests.test_topic_config_handler import Broker, registered

PRODUCER_ID, EPOCH = 7, 0


def batch(base_sequence: int) -> bytes:
    return build_batch(
        [(b"k", b"v", (), 1_000)],
        producer_id=PRODUCER_ID,
        producer_epoch=EPOCH,
        base_sequence=base_sequence,
    )


async def test_a_produce_waiting_for_its_transaction_keeps_its_append_turn(tmp_path):
    """The first request (sequence 0) takes its turn, then waits (for its verification); the producer's next
    request (sequence 1) arrives and is appended only after it: both NONE, in order. Appended the other way,
    sequence 0 is OUT_OF_ORDER_SEQUENCE_NUMBER after sequence 1."""
    broker = await registered(Broker(tmp_path))
    await broker.create("t", 1)
    manager = broker.manager
    first_turn = manager.take_append_turn("t", 0)  # the first request arrives; its verification runs
    second = asyncio.ensure_future(manager.append("t", 0, batch(1), 1, 1_000))
    await asyncio.sleep(0.05)
    assert not second.done()  # held behind the first request's turn
    first = await manager.append("t", 0, batch(0), 1, 1_000, turn=first_turn)
    assert (first.error, first.base_offset) == (ErrorCode.none, 0)
    second_result = await second
    assert (second_result.error, second_result.base_offset) == (ErrorCode.none, 1)


async def test_a_refused_produce_ends_its_append_turn(tmp_path):
    """A request whose partition the coordinator refused ends the turn it took: the next is not held."""
    broker = await registered(Broker(tmp_path))
    await broker.create("t", 1)
    manager = broker.manager
    manager.end_append_turn(manager.take_append_turn("t", 0))
    result = await asyncio.wait_for(manager.append("t", 0, batch(0), 1, 1_000), 5)
    assert result.error == ErrorCode.none
