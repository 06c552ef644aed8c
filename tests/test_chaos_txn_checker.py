"""The transactional workload's checker on crafted histories: it passes a clean consume-transform-produce
history and catches an aborted record visible to read_committed, a committed transaction lost or partly
visible, a transaction of unknown outcome partly visible, an input lost or twice in the output, and a
record no transaction wrote."""

from epochkraft.chaos.checker import History, check
from epochkraft.chaos.txn_checker import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Transaction,
    TxnHistory,
    check_transactions,
    output_value,
    parse_output,
)


def clean() -> TxnHistory:
    """Inputs 0..9; transaction 1 commits 0-4, transaction 2 (aborted on purpose) wrote 5-9, transaction 3
    commits them again."""
    inputs = [f"{i}".encode() for i in range(10)]
    transactions = {
        1: Transaction(COMMITTED, tuple(inputs[:5])),
        2: Transaction(ABORTED, tuple(inputs[5:]), deliberate_abort=True),
        3: Transaction(COMMITTED, tuple(inputs[5:])),
    }
    visible = [output_value(v, 1) for v in inputs[:5]] + [output_value(v, 3) for v in inputs[5:]]
    return TxnHistory(
        inputs_attempted=10,
        inputs_acked={v: (int(v) % 3, int(v) // 3) for v in inputs},
        transactions=transactions,
        committed_read=[(i % 3, i // 3, v) for i, v in enumerate(visible)],
        uncommitted_records=15,
    )


def test_output_value_round_trip():
    assert parse_output(output_value(b"12", 34)) == (b"12", 34)
    assert parse_output(b"12") is None and parse_output(b"12|x") is None


def test_clean_history_passes():
    report = check_transactions(clean())
    assert report.ok, report
    assert (report.committed, report.aborted_deliberately, report.unknown_outcome) == (2, 1, 0)
    assert (report.output_read_committed, report.output_read_uncommitted) == (10, 15)


def test_aborted_record_visible_is_caught():
    history = clean()
    history.committed_read.append((0, 9, output_value(b"7", 2)))
    report = check_transactions(history)
    assert report.aborted_visible == ["0@9: 7|2"] and report.inputs_duplicated == ["7"] and not report.ok


def test_committed_transaction_lost_is_caught():
    history = clean()
    history.committed_read = [r for r in history.committed_read if not r[2].endswith(b"|1")]
    report = check_transactions(history)
    assert report.committed_lost == ["transaction 1 (5 records)"] and not report.ok
    assert report.inputs_lost == ["0", "1", "2", "3", "4"]


def test_committed_transaction_partly_visible_is_caught():
    history = clean()
    history.committed_read = [r for r in history.committed_read if r[2] != output_value(b"8", 3)]
    report = check_transactions(history)
    assert report.partly_visible == ["transaction 3 (committed): 4 of 5 records visible"]
    assert report.inputs_lost == ["8"] and not report.ok


def test_unknown_outcome_visible_whole_or_not_at_all():
    history = clean()
    history.transactions[3].outcome = UNKNOWN
    assert check_transactions(history).ok and check_transactions(history).unknown_visible == 1
    history.committed_read = [r for r in history.committed_read if r[2] != output_value(b"8", 3)]
    assert check_transactions(history).partly_visible == ["transaction 3 (unknown): 4 of 5 records visible"]


def test_input_committed_twice_is_caught():
    history = clean()
    history.transactions[4] = Transaction(COMMITTED, (b"3",))
    history.committed_read.append((1, 9, output_value(b"3", 4)))
    report = check_transactions(history)
    assert report.inputs_duplicated == ["3"] and not report.ok


def test_record_of_no_transaction_is_caught():
    history = clean()
    history.committed_read.append((2, 9, output_value(b"3", 99)))
    history.committed_read.append((2, 10, b"garbage"))
    report = check_transactions(history)
    assert report.foreign_records == ["2@9: 3|99", "2@10: garbage"] and not report.ok


def test_loop_that_did_not_drain_fails():
    history = clean()
    history.drained = False
    assert not check_transactions(history).ok


def test_chaos_report_carries_the_transactions():
    report = check(History(transactions=clean()))
    assert report.ok and report.transactions is not None
    table = report.table()
    assert "transactions committed" in table and "ABORTED records visible" in table and "PASS" in table
    assert report.to_json()["transactions"]["aborted_visible_count"] == 0
    broken = clean()
    broken.committed_read.append((0, 9, output_value(b"7", 2)))
    assert not check(History(transactions=broken)).ok
