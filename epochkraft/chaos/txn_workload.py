"""The chaos tool's transactional workload (``epochkraft chaos --workload txn``): consume-transform-produce
across partitions with confluent-kafka, as Kafka's TransactionsTest and librdkafka's transactional example.

A feeder (idempotent, acks=all) writes sequential values to ``chaos-in`` (3 partitions). One loop reads
them (group ``chaos-etl``, read_committed, no auto commit) and, for each batch of up to 50 inputs, in one
transaction: produces ``<input>|<transaction number>`` to the output topic (3 partitions, keyed as the
input, so a transaction spans partitions), sends the consumer's positions to the transaction
(TxnOffsetCommit) and commits; every fifth transaction is aborted on purpose. After an abort, or an
outcome the loop could not learn, the consumer goes back to the group's committed offsets, as Kafka's
exactly-once examples do; a fatal error (the producer fenced) replaces the producer, whose
InitProducerId settles the previous transaction first. At the end the loop drains every input, and the
output is read read_committed (and read_uncommitted, for the aborted copies) for txn_checker.py.

``sabotage`` breaks the loop or the reader on purpose, to show the checker failing: ``duplicate`` goes
back over a committed batch once every seven transactions (inputs committed twice), ``read-uncommitted``
reads the output without read_committed (aborted records visible).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from epochkraft.chaos.sequence import produce_sequence
from epochkraft.chaos.txn_checker import ABORTED, COMMITTED, UNKNOWN, Transaction, output_value

log = logging.getLogger(__name__)

INPUT_TOPIC = "chaos-in"
PARTITIONS = 3  # of the input topic, as of the output
GROUP = "chaos-etl"
TRANSACTIONAL_ID = "chaos-etl"
BATCH = 50
ABORT_EVERY = 5
DUPLICATE_EVERY = 7
SABOTAGES = ("duplicate", "read-uncommitted")
# How long one transactional call may take before the loop gives up on it (a fault can hold a coordinator).
CALL_TIMEOUT_S = 30.0
CLIENT_DEBUG_ENV = "EPOCHKRAFT_CHAOS_CLIENT_DEBUG"  # e.g. "eos,msg,broker"
REWIND_TIMEOUT_S = 5.0


class TxnWorkload:
    """The feeder and the consume-transform-produce loop (threads), recording what each transaction did."""

    def __init__(
        self,
        bootstrap: str,
        output_topic: str,
        rate: int = 300,
        conf: dict[str, str] | None = None,
        sabotage: str | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.output_topic = output_topic
        self.conf = conf or {}
        self.rate = rate
        self.sabotage = sabotage
        self.acked: dict[bytes, tuple[int, int]] = {}  # input value -> (partition, offset)
        self.attempted = 0
        self.failed = 0
        self.consumed = 0  # inputs in committed transactions (the progress bar's "read")
        self.transactions: dict[int, Transaction] = {}
        self.drained = False
        self.errors: list[str] = []  # what the loop's clients raised, when (seconds into the run)
        self._last_error, self._first_seen, self._repeats = "", "", 0
        self._started = time.monotonic()
        self._stop_feeding = threading.Event()
        self._give_up = threading.Event()
        self._feeder = threading.Thread(target=self._feed, daemon=True)
        self._loop = threading.Thread(target=self._process, daemon=True)

    def start(self) -> None:
        self._feeder.start()
        self._loop.start()

    def stop(self, drain_timeout: float = 90.0) -> None:
        """Stops the feeder, then lets the loop process what is left (at most ``drain_timeout``)."""
        self._stop_feeding.set()
        self._feeder.join(60)
        self._loop.join(drain_timeout)
        self._give_up.set()
        self._loop.join(60)

    def _client_conf(self) -> dict[str, Any]:
        conf = {
            "bootstrap.servers": self.bootstrap,
            **self.conf,
            "log_level": 0,
            "logger": log,
            # librdkafka 2.16's re-bootstrap (KIP-899), taken when every broker it knew is gone (the elr fault
            # has all three down at some moment), wedges a transactional producer: the coordinator FindCoordinator
            # names stays "unknown" and a call such as send_offsets_to_transaction never returns
            "metadata.recovery.strategy": "none",
        }
        if debug := os.environ.get(CLIENT_DEBUG_ENV):
            # librdkafka's debug contexts, written by its own threads to stderr as they happen (a Python
            # logger only gets them when the client is polled, not while a transactional call blocks)
            conf.update({"debug": debug, "log_level": 7})
            del conf["logger"]
        return conf

    def note(self, text: str) -> None:
        """Keeps a client error for the report: the last 200, an error repeating at once counted on its
        first line (a spin shows as one line, a wedge as the last ones)."""
        log.debug("%s", text)
        seconds = f"{time.monotonic() - self._started:.1f}s"
        if text == self._last_error:
            self._repeats += 1
            self.errors[-1] = f"{self._first_seen} {text} (x{self._repeats}, last {seconds})"
            return
        self._last_error, self._first_seen, self._repeats = text, seconds, 1
        self.errors = [*self.errors[-199:], f"{seconds} {text}"]

    def _feed(self) -> None:
        produce_sequence(self._client_conf(), INPUT_TOPIC, self.rate, self._stop_feeding, self)

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            {
                **self._client_conf(),
                "transactional.id": TRANSACTIONAL_ID,
                "transaction.timeout.ms": 60000,
                "linger.ms": 5,
            }
        )
        _retrying(lambda: producer.init_transactions(CALL_TIMEOUT_S), self._give_up, self.note)
        return producer

    def _process(self) -> None:
        try:
            self._consume_transform_produce()
        except Exception as exc:
            self.note(f"the loop stopped: {exc!r}")
            raise

    def _consume_transform_produce(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                **self._client_conf(),
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe([INPUT_TOPIC])
        producer = self._producer()
        number = 0
        while not self._give_up.is_set():
            messages = [m for m in consumer.consume(BATCH, 0.5) if m.error() is None]
            if not messages:
                if self._stop_feeding.is_set() and self._caught_up(consumer):
                    self.drained = True
                    break
                continue
            number += 1
            txn = Transaction(UNKNOWN, tuple(m.value() or b"" for m in messages), number % ABORT_EVERY == 0)
            self.transactions[number] = txn
            producer = self._transact(producer, consumer, messages, number, txn)
            if txn.outcome == COMMITTED:
                self.consumed += len(messages)
                if self.sabotage == "duplicate" and number % DUPLICATE_EVERY == 0:
                    _seek_to_first(consumer, messages)
            else:
                _rewind(consumer, self._give_up, self.note)
        producer.flush(10)
        consumer.close()

    def _transact(
        self, producer: Any, consumer: Any, messages: list[Any], number: int, txn: Transaction
    ) -> Any:
        """One transaction of ``messages``; sets ``txn.outcome`` and returns the producer to go on with (a
        new one after a fatal error)."""
        from confluent_kafka import KafkaException

        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(self.output_topic, key=m.key(), value=output_value(m.value(), number))
            offsets = consumer.position(consumer.assignment())
            _retrying(
                lambda: producer.send_offsets_to_transaction(
                    offsets, consumer.consumer_group_metadata(), CALL_TIMEOUT_S
                ),
                self._give_up,
                self.note,
            )
            if txn.deliberate_abort:
                _retrying(lambda: producer.abort_transaction(CALL_TIMEOUT_S), self._give_up, self.note)
                txn.outcome = ABORTED
            else:
                _retrying(lambda: producer.commit_transaction(CALL_TIMEOUT_S), self._give_up, self.note)
                txn.outcome = COMMITTED
            return producer
        except KafkaException as exc:
            error = exc.args[0]
            txn.error = str(error)
            self.note(f"transaction {number}: {error}")
            if error.txn_requires_abort():
                try:
                    _retrying(lambda: producer.abort_transaction(CALL_TIMEOUT_S), self._give_up, self.note)
                    txn.outcome = ABORTED
                    return producer
                except KafkaException as abort_error:
                    txn.error += f"; abort: {abort_error.args[0]}"
            # Fatal (fenced, or a call that never finished): the outcome is the coordinator's to settle,
            # which a new producer's InitProducerId makes it do (commit if prepared, else abort).
            return self._producer()

    def _caught_up(self, consumer: Any) -> bool:
        """The group's committed offsets at every input partition's end (positions can be unset after a
        rewind to a partition the consumer has not fetched from since)."""
        from confluent_kafka import KafkaException

        assignment = consumer.assignment()
        if len(assignment) < PARTITIONS:
            return False
        try:
            for tp in consumer.committed(assignment, timeout=CALL_TIMEOUT_S):
                _low, high = consumer.get_watermark_offsets(tp, timeout=10)
                if tp.offset < high:
                    return False
        except KafkaException as exc:  # a coordinator or leader still moving: asked again next time
            self.note(f"caught up? {exc.args[0]}")
            return False
        return True


def _retrying(call: Callable[[], object], give_up: threading.Event, note: Callable[[str], None]) -> None:
    """``call()`` again while it fails with a retriable error (librdkafka's advice for the transactional
    calls); other errors are raised."""
    from confluent_kafka import KafkaException

    while True:
        try:
            call()
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or give_up.is_set():
                raise
            note(f"retried: {exc.args[0]}")
            time.sleep(0.2)


def _rewind(consumer: Any, give_up: threading.Event, note: Callable[[str], None]) -> None:
    """Back to the group's committed offsets: what an aborted (or unknown) transaction read is read again.

    The consumer is polled between tries, its records dropped (the seek sets the positions again): a
    rebalance it has to take part in (after UNKNOWN_MEMBER_ID, say) is only served by polling, and until
    it is, librdkafka's committed() times out."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaException

    while not give_up.is_set():
        try:
            for tp in consumer.committed(consumer.assignment(), timeout=REWIND_TIMEOUT_S):
                tp.offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                consumer.seek(tp)
            return
        except KafkaException as exc:  # the group coordinator is moving, or a rebalance waits: ask again
            note(f"rewind: {exc.args[0]}")
            consumer.consume(BATCH, 0.2)  # returns at once while records wait: a pause, not a spin
            time.sleep(0.1)


def _seek_to_first(consumer: Any, messages: list[Any]) -> None:
    """The sabotage: back to the first offset of each partition's records in ``messages``."""
    from confluent_kafka import TopicPartition

    first: dict[int, int] = {}
    for m in messages:
        first[m.partition()] = min(first.get(m.partition(), m.offset()), m.offset())
    for partition, offset in first.items():
        consumer.seek(TopicPartition(INPUT_TOPIC, partition, offset))


def read_output(
    bootstrap: str,
    conf: dict[str, str],
    topic: str,
    partitions: int,
    *,
    committed: bool,
    timeout: float = 60.0,
) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` a new reader sees, read_committed or not: (partition, offset, value)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            **conf,
            "group.id": f"chaos-check-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[tuple[int, int, bytes]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.partition() is None:
                continue
            partition, error = msg.partition() or 0, msg.error()
            if error is None:
                records.append((partition, msg.offset() or 0, msg.value() or b""))
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end.add(partition)
        if len(at_end) < partitions:
            raise TimeoutError(
                f"{topic}: partitions {sorted(set(range(partitions)) - at_end)} not read to the end"
            )
    finally:
        consumer.close()
    return records
