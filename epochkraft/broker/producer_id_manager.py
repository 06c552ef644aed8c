"""Sans-IO producer id manager of a broker: ids from blocks the controller allocates (Kafka's
RPCProducerIdManager).

The broker claims ids from its current block; once 90% of it is used it asks the controller for the next
(AllocateProducerIds), so the next block is usually there before the current one runs out. With no id
left and no next block yet, InitProducerId is answered COORDINATOR_LOAD_IN_PROGRESS, which clients retry,
rather than an error that fails them. A failed request backs off ``RETRY_BACKOFF_MS`` before the next.
The edge sends the request when ``take_block_request`` says so and hands the answer to
``handle_allocate_producer_ids_response``; time comes in as ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochkraft.metadata.producer_ids import EMPTY_BLOCK, ProducerIdsBlock
from epochkraft.protocol.errors import ErrorCode

PERCENTAGE_TO_FETCH = 0.90
RETRY_BACKOFF_MS = 50
NO_RETRY = -1


@dataclass(frozen=True, slots=True)
class GeneratedProducerId:
    error: ErrorCode
    producer_id: int = -1


class RpcProducerIdManager:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.current_block: ProducerIdsBlock = EMPTY_BLOCK
        self.next_block: ProducerIdsBlock | None = None
        self._next_id = 0  # the next id of the current block to claim
        self._request_in_flight = False
        self._request_wanted = False
        self._backoff_deadline_ms = NO_RETRY

    def generate_producer_id(self, now_ms: int) -> GeneratedProducerId:
        """Kafka's generateProducerId: an id of the current block, or of the next one once it is used up."""
        if self._next_id > self.current_block.last_producer_id:
            if self.next_block is None:
                self._maybe_request_next_block(now_ms)
                return GeneratedProducerId(ErrorCode.coordinator_load_in_progress)
            self.current_block, self.next_block = self.next_block, None
            self._next_id = self.current_block.first_producer_id
        producer_id = self._next_id
        self._next_id += 1
        block = self.current_block
        if producer_id == block.first_producer_id + int(block.size * PERCENTAGE_TO_FETCH):
            self._maybe_request_next_block(now_ms)
        return GeneratedProducerId(ErrorCode.none, producer_id)

    def request_block_now(self, now_ms: int) -> None:
        """Asks for a block before the first InitProducerId (a broker that just registered)."""
        if self.next_block is None and self._next_id > self.current_block.last_producer_id:
            self._maybe_request_next_block(now_ms)

    def take_block_request(self) -> bool:
        """True once per AllocateProducerIds the edge should send now."""
        wanted, self._request_wanted = self._request_wanted, False
        return wanted

    def handle_allocate_producer_ids_response(
        self, now_ms: int, error: ErrorCode, producer_id_start: int = -1, producer_id_len: int = 0
    ) -> None:
        """Kafka's handleAllocateProducerIdsResponse; a network failure comes in as its error code."""
        accepted = (
            error == ErrorCode.none
            and producer_id_len > 0
            and producer_id_start >= 0
            and producer_id_start > self.current_block.last_producer_id  # blocks only move up
        )
        if accepted:
            self.next_block = ProducerIdsBlock(self.broker_id, producer_id_start, producer_id_len)
        else:
            self._backoff_deadline_ms = now_ms + RETRY_BACKOFF_MS
        self._request_in_flight = False

    def _maybe_request_next_block(self, now_ms: int) -> None:
        if self._backoff_deadline_ms != NO_RETRY and now_ms < self._backoff_deadline_ms:
            return
        if self.next_block is None and not self._request_in_flight:
            self._request_in_flight = self._request_wanted = True
            self._backoff_deadline_ms = NO_RETRY
