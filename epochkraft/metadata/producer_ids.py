"""A block of producer ids, as the controller hands it to a broker (Kafka's ProducerIdsBlock, in the
modules both sides share)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """Kafka's ProducerIdsBlock: ``size`` ids from ``first_producer_id``, assigned to one broker."""

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


EMPTY_BLOCK = ProducerIdsBlock(-1, 0, 0)
