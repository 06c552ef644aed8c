"""The transaction coordinator's edge (TransactionService) sending markers and writing completions, after
Kafka's TransactionMarkerChannelManagerTest: in memory, the marker loop not running, so what happens is what
the write of Prepare* and the answer to a WriteTxnMarkers do themselves.

``MarkerLeaders`` stands in for the partitions' leaders: it answers each WriteTxnMarkers with NONE once its
``gate`` opens and keeps the requests it got; ``StateTopic`` is ``__transaction_state`` in memory.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.write_txn_markers.v2 import request as wtm
from kio.schema.write_txn_markers.v2 import response as r2

from epochkraft.broker.transaction_log import TopicPartition, parse_value
from epochkraft.broker.transaction_service import TransactionService
from epochkraft.protocol.errors import ErrorCode
from tests.test_transaction_coordinator import NOW, S, TxnContext
from tests.test_transaction_v2 import StateTopic


class MarkerLeaders:
    """Every partition's leader is broker 1; each WriteTxnMarkers is answered NONE once ``gate`` is set."""

    def __init__(self) -> None:
        self.requests: list[wtm.WriteTxnMarkersRequest] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def send(self, request: wtm.WriteTxnMarkersRequest) -> r2.WriteTxnMarkersResponse:
        self.requests.append(request)
        await self.gate.wait()
        return r2.WriteTxnMarkersResponse(
            markers=tuple(
                r2.WritableTxnMarkerResult(
                    producer_id=m.producer_id,
                    topics=tuple(
                        r2.WritableTxnMarkerTopicResult(
                            name=t.name,
                            partitions=tuple(
                                r2.WritableTxnMarkerPartitionResult(
                                    partition_index=p, error_code=ErrorCode.none
                                )
                                for p in t.partition_indexes
                            ),
                        )
                        for t in m.topics
                    ),
                )
                for m in request.markers
            )
        )


class MarkerService(TransactionService):
    """The edge with its marker loop stopped, the leaders and ``__transaction_state`` in memory."""

    def __init__(self, ctx: TxnContext) -> None:
        self.topic = StateTopic()
        super().__init__(SimpleNamespace(), ctx.coordinator, self.topic)  # type: ignore[arg-type]
        self.leaders = MarkerLeaders()

    def _leader_of(self, tp: TopicPartition) -> int | None:
        return 1

    def _client(self, broker_id: int) -> MarkerLeaders:  # type: ignore[override]
        return self.leaders

    def states_written(self) -> list[S]:
        states = []
        for _key, value in self.topic.written:
            parsed = parse_value(value)
            assert parsed is not None
            states.append(parsed.state)
        return states


async def _settle() -> None:
    """Lets the tasks the service spawned run to their end (none of them sleeps)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def _end(ctx: TxnContext, service: MarkerService, txn_id: str, commit: bool = True) -> ErrorCode:
    init = ctx.ongoing(txn_id, partitions=[("foo", 0), ("bar", 1)])
    outcome = ctx.coordinator.end_txn(NOW, txn_id, init.producer_id, init.producer_epoch, commit)
    return await service._answer(outcome)


def test_should_complete_append_to_log_on_end_txn_when_send_markers_succeed():
    """TransactionMarkerChannelManagerTest.shouldCompleteAppendToLogOnEndTxnWhenSendMarkersSucceed: EndTxn
    is answered once PrepareCommit is written; its markers go out at that moment and their answer writes
    CompleteCommit, with no tick of the marker loop in between."""
    ctx = TxnContext()
    service = MarkerService(ctx)

    async def run() -> None:
        assert await _end(ctx, service, "txn-1") == ErrorCode.none
        assert service.states_written() == [S.PREPARE_COMMIT]  # answered before any marker
        await _settle()

    asyncio.run(run())
    assert len(service.leaders.requests) == 1
    assert service.states_written() == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    assert ctx.metadata("txn-1").state == S.COMPLETE_COMMIT


def test_should_generate_request_per_partition_per_broker():
    """TransactionMarkerChannelManagerTest.shouldGenerateRequestPerPartitionPerBroker, with one request in
    flight per broker: the markers of the transactions prepared while broker 1 writes the first one's go
    out together, in one WriteTxnMarkers sent as soon as broker 1 answers."""
    ctx = TxnContext()
    service = MarkerService(ctx)
    leaders = service.leaders

    async def run() -> None:
        leaders.gate.clear()
        await _end(ctx, service, "txn-1")
        await _settle()
        assert len(leaders.requests) == 1  # txn-1's, in flight
        await _end(ctx, service, "txn-2")
        await _end(ctx, service, "txn-3", commit=False)
        await _settle()
        assert len(leaders.requests) == 1  # queued behind it
        leaders.gate.set()
        await _settle()

    asyncio.run(run())
    first, second = leaders.requests
    assert [m.transaction_result for m in first.markers] == [True]
    assert sorted((m.producer_id, m.transaction_result) for m in second.markers) == [
        (ctx.metadata("txn-2").producer_id, True),
        (ctx.metadata("txn-3").producer_id, False),
    ]
    assert [ctx.metadata(t).state for t in ("txn-1", "txn-2", "txn-3")] == [
        S.COMPLETE_COMMIT,
        S.COMPLETE_COMMIT,
        S.COMPLETE_ABORT,
    ]
