"""What transactions cost: confluent-kafka's transactional producer (transactions of 100 records of 1 KiB,
each begun, filled and committed in turn) against its idempotent producer at the same settings (acks=all,
linger.ms 5, a topic of 6 partitions, RF 3, min.insync.replicas 2), on one cluster; the figure is the
ratio transactional/idempotent of records/s. ``epochkraft bench --parts txn`` measures it on epochkraft
(and on Apache Kafka with ``--targets epochkraft,kafka``), ``scripts/bench_peers --parts txn`` on Kafka and
epochkraft side by side.

The same client against both clusters: what differs is the brokers' work per transaction
(AddPartitionsToTxn, EndTxn, the markers and their replication, the transaction log's writes)."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

RECORD_BYTES = 1024
TXN_RECORDS = 100
PARTITIONS = 6
SETTINGS: dict[str, Any] = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000, "log_level": 0}


@dataclass(frozen=True)
class TxnFigure:
    """Median rounds of one cluster: records/s idempotent and transactional, and their ratio."""

    target: str
    idempotent_records_per_s: float
    transactional_records_per_s: float
    transactions_per_s: float
    ratio: float
    idempotent_rounds: list[float]
    transactional_rounds: list[float]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def idempotent_rate(bootstrap: str, topic: str, seconds: float) -> float:
    """Records/s acknowledged by an idempotent producer producing as fast as librdkafka takes them (the
    produce part's loop, at these settings)."""
    from epochkraft.bench.cli import _produce_rate

    conf = {"bootstrap.servers": bootstrap, **SETTINGS, "enable.idempotence": True}
    return float(_produce_rate(conf, topic, RECORD_BYTES, seconds)["records_per_s"])


def transactional_rate(bootstrap: str, topic: str, seconds: float) -> tuple[float, float]:
    """(records/s, transactions/s) committed by a transactional producer, ``TXN_RECORDS`` per transaction."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, **SETTINGS, "transactional.id": f"bench-{uuid.uuid4()}"}
    )
    producer.init_transactions(60)
    payload = os.urandom(RECORD_BYTES)

    def one_transaction() -> None:
        producer.begin_transaction()
        for _ in range(TXN_RECORDS):
            producer.produce(topic, payload)
        producer.commit_transaction(60)  # flushes the records, then EndTxn

    one_transaction()  # unmeasured: the producer learns the topic's leaders
    committed = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        one_transaction()
        committed += 1
    elapsed = time.monotonic() - start
    return committed * TXN_RECORDS / elapsed, committed / elapsed


def measure_txn(
    target: str, bootstrap: str, rounds: int, seconds: float, create: Any, log: Any = print
) -> TxnFigure:
    """``rounds`` of idempotent then transactional, each on a fresh topic made by ``create(topic)`` (which
    returns once every partition has its full ISR); one
    unmeasured transactional round first (the coordinator's first transaction creates its log, and a
    JVM compiles its hot paths)."""
    create(f"txn-warm-up-{target}")
    transactional_rate(bootstrap, f"txn-warm-up-{target}", min(seconds, 3.0))
    idempotent, transactional, per_txn = [], [], []
    for n in range(rounds):
        create(f"idempotent-{target}-{n}")
        idempotent.append(idempotent_rate(bootstrap, f"idempotent-{target}-{n}", seconds))
        create(f"transactional-{target}-{n}")
        records, transactions = transactional_rate(bootstrap, f"transactional-{target}-{n}", seconds)
        transactional.append(records)
        per_txn.append(transactions)
        log(
            f"  {target:<11} round {n + 1}: idempotent {idempotent[-1]:.0f} records/s, transactional "
            f"{records:.0f} records/s ({transactions:.1f} transactions/s)"
        )
    i, t = _median(idempotent), _median(transactional)
    return TxnFigure(
        target,
        round(i),
        round(t),
        round(_median(per_txn), 1),
        round(t / max(i, 1e-9), 3),
        [round(r) for r in idempotent],
        [round(r) for r in transactional],
    )


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def side_by_side(figures: list[TxnFigure]) -> str:
    lines = [
        f"transactions of {TXN_RECORDS} records of 1 KiB against idempotent (RF 3, acks=all), median rounds:",
        f"{'target':<11} {'idempotent rec/s':>17} {'transactional rec/s':>20} {'txn/s':>7} {'ratio':>6}",
    ]
    lines += [
        f"{f.target:<11} {f.idempotent_records_per_s:>17.0f} {f.transactional_records_per_s:>20.0f} "
        f"{f.transactions_per_s:>7.1f} {f.ratio:>6.3f}"
        for f in figures
    ]
    by = {f.target: f for f in figures}
    if "kafka" in by and "epochkraft" in by:
        lines.append(
            f"ratio epochkraft / Kafka's ratio: {by['epochkraft'].ratio / max(by['kafka'].ratio, 1e-9):.2f}"
        )
    return "\n".join(lines)
