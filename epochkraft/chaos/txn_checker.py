"""The transactional workload's checker: what a read_committed reader of the output saw, against what the
consume-transform-produce loop knows of each transaction (Kafka's exactly-once promise, KIP-98/KIP-447).

Each output record's value is ``<input value>|<transaction number>``, so every record visible to
read_committed names the input it came from and the transaction that wrote it. The checks:

- no record of an aborted transaction is visible (aborted on purpose, or after an abortable error);
- a committed transaction is visible whole: none of its records lost, none missing (not partly visible);
- a transaction whose outcome the loop could not learn (a fatal error at commit, the producer replaced)
  is visible whole or not at all;
- every acknowledged input is in the output exactly once, and nothing in it names an input or a
  transaction the workload never had.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

COMMITTED = "committed"
ABORTED = "aborted"
UNKNOWN = "unknown"


def output_value(input_value: bytes, transaction: int) -> bytes:
    return input_value + b"|" + str(transaction).encode()


def parse_output(value: bytes) -> tuple[bytes, int] | None:
    """(input value, transaction number) of an output record, None for a value the workload never writes."""
    input_value, sep, number = value.rpartition(b"|")
    return (input_value, int(number)) if sep and number.isdigit() else None


@dataclass
class Transaction:
    """One transaction of the loop: its inputs (in order) and its outcome as the loop learnt it."""

    outcome: str
    inputs: tuple[bytes, ...]
    deliberate_abort: bool = False
    error: str = ""


@dataclass
class TxnHistory:
    inputs_attempted: int = 0
    inputs_acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset)
    transactions: dict[int, Transaction] = field(default_factory=dict)  # number -> transaction
    committed_read: list[tuple[int, int, bytes]] = field(default_factory=list)  # (partition, offset, value)
    uncommitted_records: int = 0  # what read_uncommitted sees of the output (aborted copies included)
    drained: bool = True  # the loop processed every input before it stopped
    loop_errors: list[str] = field(default_factory=list)  # what the loop's clients raised, in order


@dataclass
class TxnReport:
    inputs_attempted: int
    inputs_acked: int
    output_read_committed: int
    output_read_uncommitted: int
    committed: int
    aborted_deliberately: int
    aborted_after_error: int
    unknown_outcome: int
    unknown_visible: int
    drained: bool
    aborted_visible: list[str]
    committed_lost: list[str]
    partly_visible: list[str]
    inputs_lost: list[str]
    inputs_duplicated: list[str]
    foreign_records: list[str]
    loop_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.drained and not (
            self.aborted_visible
            or self.committed_lost
            or self.partly_visible
            or self.inputs_lost
            or self.inputs_duplicated
            or self.foreign_records
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        for key in (
            "aborted_visible",
            "committed_lost",
            "partly_visible",
            "inputs_lost",
            "inputs_duplicated",
            "foreign_records",
            "loop_errors",
        ):
            data[f"{key}_count"] = len(data[key])
            data[key] = data[key][:50]
        return data

    def rows(self) -> list[tuple[str, object]]:
        return [
            ("inputs attempted / acknowledged", f"{self.inputs_attempted} / {self.inputs_acked}"),
            ("transactions committed", self.committed),
            (
                "aborted (on purpose / after an error)",
                f"{self.aborted_deliberately} / {self.aborted_after_error}",
            ),
            ("outcome unknown (visible whole)", f"{self.unknown_outcome} ({self.unknown_visible})"),
            ("output read_committed", self.output_read_committed),
            ("output read_uncommitted", self.output_read_uncommitted),
            ("every input processed", self.drained),
            ("ABORTED records visible", len(self.aborted_visible)),
            ("COMMITTED transactions lost", len(self.committed_lost)),
            ("transactions partly visible", len(self.partly_visible)),
            ("inputs LOST from the output", len(self.inputs_lost)),
            ("inputs more than once in it", len(self.inputs_duplicated)),
            ("records of no transaction", len(self.foreign_records)),
            *([("the loop's last error", self.loop_errors[-1][:100])] if self.loop_errors else []),
        ]


def _show(value: bytes) -> str:
    return value.decode(errors="replace")


def check_transactions(history: TxnHistory) -> TxnReport:
    visible_by_txn: Counter[int] = Counter()
    inputs_seen: Counter[bytes] = Counter()
    aborted_visible: list[str] = []
    foreign: list[str] = []
    for partition, offset, value in history.committed_read:
        parsed = parse_output(value)
        txn = history.transactions.get(parsed[1]) if parsed else None
        if parsed is None or txn is None or parsed[0] not in txn.inputs:
            foreign.append(f"{partition}@{offset}: {_show(value)}")
            continue
        visible_by_txn[parsed[1]] += 1
        inputs_seen[parsed[0]] += 1
        if txn.outcome == ABORTED:
            aborted_visible.append(f"{partition}@{offset}: {_show(value)}")

    committed_lost, partly = [], []
    for number, txn in sorted(history.transactions.items()):
        seen, size = visible_by_txn[number], len(txn.inputs)
        if txn.outcome == COMMITTED and seen == 0:
            committed_lost.append(f"transaction {number} ({size} records)")
        elif txn.outcome != ABORTED and 0 < seen != size:
            partly.append(f"transaction {number} ({txn.outcome}): {seen} of {size} records visible")

    acked = history.inputs_acked
    lost = sorted((_show(v) for v in acked if inputs_seen[v] == 0), key=lambda s: (len(s), s))
    duplicated = sorted((_show(v) for v, n in inputs_seen.items() if n > 1), key=lambda s: (len(s), s))
    outcomes = Counter(
        (t.outcome, t.deliberate_abort) for t in history.transactions.values()
    )  # (outcome, on purpose) -> count
    unknown = [n for n, t in history.transactions.items() if t.outcome == UNKNOWN]
    return TxnReport(
        inputs_attempted=history.inputs_attempted,
        inputs_acked=len(acked),
        output_read_committed=len(history.committed_read),
        output_read_uncommitted=history.uncommitted_records,
        committed=outcomes[(COMMITTED, False)],
        aborted_deliberately=outcomes[(ABORTED, True)],
        aborted_after_error=outcomes[(ABORTED, False)],
        unknown_outcome=len(unknown),
        unknown_visible=sum(1 for n in unknown if visible_by_txn[n]),
        drained=history.drained,
        aborted_visible=aborted_visible,
        committed_lost=committed_lost,
        partly_visible=partly,
        inputs_lost=lost,
        inputs_duplicated=duplicated,
        foreign_records=foreign,
        loop_errors=history.loop_errors,
    )
