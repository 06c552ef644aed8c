"""Blocks of producer ids handed to brokers, from one 64-bit space kept in the metadata log.

As Kafka's ProducerIdControlManager: a broker asks with its id and broker epoch (AllocateProducerIds); a
stale epoch is refused; otherwise the block starting at the next unassigned id is its own and a
ProducerIdsRecord moves the next id past it. The next id lives in the metadata image (Kafka's
ProducerIdsImage), so snapshots keep it and a new active controller hands out no id twice.
"""

from __future__ import annotations

from epochkraft.metadata.producer_ids import EMPTY_BLOCK, ProducerIdsBlock
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ProducerIdsRecord

PRODUCER_ID_BLOCK_SIZE = 1000
MAX_PRODUCER_ID = 2**63 - 1


def generate_next_producer_id(
    next_producer_id: int, broker_id: int, broker_epoch_error: ErrorCode, broker_epoch: int
) -> tuple[ErrorCode, list[ProducerIdsRecord], ProducerIdsBlock]:
    """Kafka's generateNextProducerId: (error, records, block). ``next_producer_id`` is the image's (-1
    before any block); ``broker_epoch_error`` the cluster's verdict on the requester's epoch."""
    if broker_epoch_error != ErrorCode.none:
        return broker_epoch_error, [], EMPTY_BLOCK
    first = max(next_producer_id, 0)
    if first > MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE:
        return ErrorCode.unknown_server_error, [], EMPTY_BLOCK  # the int64 space is used up
    block = ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
    record = ProducerIdsRecord(
        broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=block.next_block_first_id
    )
    return ErrorCode.none, [record], block
