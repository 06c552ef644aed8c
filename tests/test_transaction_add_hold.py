"""A client's AddPartitionsToTxn that arrives while the producer's previous transaction is completing (its
EndTxn answered, its markers in flight) is held on the coordinator until the transaction's next write and
then answered, for at most add.partitions.to.txn.retry.backoff.max.ms, as Kafka's partition leaders retry
CONCURRENT_TRANSACTIONS for a transaction version 2 producer (ReplicaManager.maybeRetryOnConcurrentTransactions);
past that bound the client gets CONCURRENT_TRANSACTIONS and backs off, as before."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from epochkraft.broker.transaction_service import TransactionService
from epochkraft.protocol.errors import ErrorCode
from tests.test_transaction_coordinator import NOW, TXN, TxnContext


class StateTopic:
    """``__transaction_state`` whose appends all succeed at once."""

    async def append(self, partition: int, key: bytes, value: bytes | None, leader_epoch: int) -> ErrorCode:
        return ErrorCode.none


def _service(ctx: TxnContext, hold_ms: int) -> TransactionService:
    settings = SimpleNamespace(add_partitions_to_txn_retry_backoff_max_ms=hold_ms, request_timeout_ms=30_000)
    return TransactionService(SimpleNamespace(settings=settings), ctx.coordinator, StateTopic())  # type: ignore[arg-type]


def _committed_with_markers_in_flight(ctx: TxnContext):
    init = ctx.ongoing()
    assert ctx.end(init, commit=True) == ErrorCode.none
    return init


async def _complete(ctx: TxnContext, service: TransactionService) -> None:
    """The markers answered and the CompleteCommit written, as the service's marker loop does."""
    ctx.deliver_all_markers()
    for append in ctx.coordinator.due_appends(NOW):
        assert await service._write(append) == ErrorCode.none


def _add_to_the_next_transaction(hold_ms: int, **hold: object):
    """A service whose producer's commit has its markers in flight, and the add of its next transaction
    (``hold=True`` a client's, ``client_transaction_version=2`` a broker's) as a coroutine."""
    ctx = TxnContext()
    service = _service(ctx, hold_ms)
    init = _committed_with_markers_in_flight(ctx)
    add = service.add_partitions(TXN, init.producer_id, init.producer_epoch, [("foo", 0)], **hold)  # type: ignore[arg-type]
    return ctx, service, add


async def test_an_add_during_the_commit_is_answered_once_the_commit_completes():
    ctx, service, held = _add_to_the_next_transaction(60_000, hold=True)
    add = asyncio.create_task(held)
    await asyncio.sleep(0.05)
    assert not add.done(), "held while the markers are in flight"
    await _complete(ctx, service)
    assert await asyncio.wait_for(add, 5) == ErrorCode.none
    assert ctx.metadata().partitions == {("foo", 0)}
    assert service._write_waiters == {}


async def test_an_add_held_past_its_bound_is_concurrent_transactions():
    _, service, held = _add_to_the_next_transaction(20, hold=True)
    error = await asyncio.wait_for(held, 5)
    assert error == ErrorCode.concurrent_transactions
    assert service._write_waiters == {}


async def test_a_brokers_add_is_not_held():
    """A partition leader's add (AddPartitionsToTxn v4+) is answered at once: the leader retries itself."""
    _, _, add = _add_to_the_next_transaction(60_000, client_transaction_version=2)
    error = await asyncio.wait_for(add, 5)
    assert error == ErrorCode.concurrent_transactions


async def test_an_add_held_when_the_coordinator_moves_is_answered_at_once():
    """The coordinator's ``__transaction_state`` partition led elsewhere now: the held add is answered
    NOT_COORDINATOR at once, not at the end of its bound (the client finds the new coordinator)."""
    ctx, service, held = _add_to_the_next_transaction(60_000, hold=True)
    add = asyncio.create_task(held)
    await asyncio.sleep(0.05)
    service.on_leadership(ctx.coordinator.partition_for(TXN), False)
    assert await asyncio.wait_for(add, 1) == ErrorCode.not_coordinator
    assert service._write_waiters == {}
