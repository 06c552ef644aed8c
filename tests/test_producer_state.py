"""Idempotent producer sequence checks, as Kafka's ProducerStateManagerTest."""

import pytest

from epochkraft.broker.producer_state import ProducerStateTable
from epochkraft.protocol.errors import ErrorCode


def table_with(*batches):
    table = ProducerStateTable()
    offset = 0
    for pid, epoch, seq, count in batches:
        table.record(pid, epoch, seq, count, offset, offset + count - 1)
        offset += count
    return table


@pytest.mark.parametrize(
    ("history", "batch", "expected", "duplicate"),
    [
        ([], (7, 0, 0, 5), ErrorCode.none, False),
        ([], (7, 0, 42, 5), ErrorCode.none, False),  # unknown producer: accepted
        ([(7, 0, 0, 5)], (7, 0, 5, 5), ErrorCode.none, False),  # next in sequence
        ([(7, 0, 0, 5)], (7, 0, 0, 5), ErrorCode.none, True),  # retry of the same batch
        ([(7, 0, 0, 5)], (7, 0, 6, 5), ErrorCode.out_of_order_sequence_number, False),  # gap
        ([(7, 0, 0, 5), (7, 0, 5, 5)], (7, 0, 3, 2), ErrorCode.out_of_order_sequence_number, False),
        ([(7, 2, 0, 5)], (7, 1, 5, 5), ErrorCode.invalid_producer_epoch, False),  # fenced epoch
        ([(7, 0, 0, 5)], (7, 1, 0, 5), ErrorCode.none, False),  # new epoch restarts at 0
        ([(7, 0, 0, 5)], (7, 1, 3, 5), ErrorCode.out_of_order_sequence_number, False),
        ([(7, 0, 2**31 - 5, 5)], (7, 0, 0, 1), ErrorCode.none, False),  # sequence wraps
        ([], (-1, -1, -1, 3), ErrorCode.none, False),  # not idempotent
    ],
)
def test_sequence_checks(history, batch, expected, duplicate):
    result = table_with(*history).check(*batch)
    assert result.error == expected
    assert (result.duplicate_of is not None) == duplicate


def test_duplicate_returns_original_offsets_within_last_five():
    table = table_with(*[(9, 0, i * 2, 2) for i in range(7)])
    assert table.check(9, 0, 4, 2).duplicate_of.first_offset == 4
    assert table.check(9, 0, 0, 2).error == ErrorCode.out_of_order_sequence_number  # evicted


# ---- expiry (ProducerStateManagerTest) ------------------------------------------------------------------
EXPIRATION_MS = 5000


def test_pid_expiration_timeout():
    """ProducerStateManagerTest.testPidExpirationTimeout: a producer idle for producer.id.expiration.ms
    (from its last batch's max timestamp) is removed, not a millisecond earlier, and its next batch is then
    one of an unknown producer."""
    table = ProducerStateTable()
    table.record(7, 0, 0, 5, 0, 4, max_timestamp=1000)
    assert table.remove_expired_producers(1000 + EXPIRATION_MS - 1, EXPIRATION_MS) == 0
    assert table.check(7, 0, 9, 1).error == ErrorCode.out_of_order_sequence_number
    assert table.remove_expired_producers(1000 + EXPIRATION_MS, EXPIRATION_MS) == 1
    assert table.producers == {}
    assert table.check(7, 0, 9, 1).error == ErrorCode.none


def test_expiration_counts_from_the_last_batch():
    table = ProducerStateTable()
    table.record(7, 0, 0, 5, 0, 4, max_timestamp=1000)
    table.record(7, 0, 5, 5, 5, 9, max_timestamp=4000)
    assert table.remove_expired_producers(1000 + EXPIRATION_MS, EXPIRATION_MS) == 0
    assert table.remove_expired_producers(4000 + EXPIRATION_MS, EXPIRATION_MS) == 1


def test_remove_expired_pids_on_reload():
    """ProducerStateManagerTest.testRemoveExpiredPidsOnReload: a table rebuilt from the log (the broker's
    restart) keeps only the producers that had not expired; an idle one does not come back."""
    table = ProducerStateTable()
    for producer_id, timestamp in ((1, 0), (2, 2000), (3, 9000)):
        table.record(producer_id, 0, 0, 1, producer_id, producer_id, max_timestamp=timestamp)
    assert table.remove_expired_producers(10_000, EXPIRATION_MS) == 2
    assert list(table.producers) == [3]


def test_a_duplicate_carries_the_first_appends_timestamp():
    """UnifiedLog.append answers a retried batch with the first append's offsets and timestamp (on a
    LogAppendTime topic the leader's append time, which the Produce response returns again)."""
    table = ProducerStateTable()
    table.record(9, 0, 0, 3, 10, 12, max_timestamp=1_700_000_000_123)
    duplicate = table.check(9, 0, 0, 3).duplicate_of
    assert duplicate is not None
    assert (duplicate.first_offset, duplicate.last_offset, duplicate.timestamp) == (10, 12, 1_700_000_000_123)
