"""The aborted-transaction index (``.txnindex``), as Kafka's TransactionIndexTest, and the log's
transactional cases of UnifiedLogTest: entries written with abort markers, collected for read_committed
fetches, surviving restart, recovery, truncation and retention."""

import os

import pytest

from epochkraft.broker.log import LogConfig, PartitionLog, cleaner
from epochkraft.broker.log.segment import segment_name
from epochkraft.broker.log.txn_index import ENTRY, AbortedTxn, TransactionIndex
from epochkraft.broker.producer_state import EndTxnMarker, ProducerStateTable, end_txn_marker_batch
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import TRANSACTIONAL_BIT, Record, RecordBatch, decode_batches, encode_batch

# ---- TransactionIndexTest ----------------------------------------------------------------------------


def test_aborted_txn_serde(tmp_path):
    """TransactionIndexTest.testAbortedTxnSerde: Kafka's 34-byte entry (version 0, then four longs)."""
    index = TransactionIndex(tmp_path / "0.txnindex")
    index.append(AbortedTxn(983493, 137, 299, 200))
    data = (tmp_path / "0.txnindex").read_bytes()
    assert len(data) == 34 == ENTRY.size
    assert ENTRY.unpack(data) == (0, 983493, 137, 299, 200)
    assert TransactionIndex(tmp_path / "0.txnindex").entries == [AbortedTxn(983493, 137, 299, 200)]


def test_last_offset_must_increase(tmp_path):
    """TransactionIndexTest.testLastOffsetMustIncrease / testLastOffsetCannotDecrease."""
    index = TransactionIndex(tmp_path / "0.txnindex")
    index.append(AbortedTxn(1, 0, 15, 11))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 15, 11))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 10, 11))


ENTRIES = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


def test_collect_aborted_transactions(tmp_path):
    """TransactionIndexTest.testCollectAbortedTransactions: the entries overlapping the range, and
    complete once an entry's last stable offset reaches the upper bound."""
    index = TransactionIndex(tmp_path / "0.txnindex")
    for txn in ENTRIES:
        index.append(txn)
    assert index.collect_aborted_txns(0, 32) == (ENTRIES[:3], True)
    assert index.collect_aborted_txns(0, 50) == (ENTRIES, False)
    assert index.collect_aborted_txns(11, 20) == (ENTRIES[1:3], True)


def test_truncate(tmp_path):
    """TransactionIndexTest.testTruncate: entries ending at or after the offset go, on disk too."""
    index = TransactionIndex(tmp_path / "0.txnindex")
    for txn in ENTRIES:
        index.append(txn)
    index.truncate_to(35)
    assert TransactionIndex(tmp_path / "0.txnindex").entries == ENTRIES[:2]
    index.truncate_to(0)
    assert not (tmp_path / "0.txnindex").exists()


# ---- UnifiedLogTest's transactional cases --------------------------------------------------------------
class Leader:
    """A log and its producer state, appended to as a partition leader does."""

    def __init__(self, directory, segment_bytes=1 << 20, recovery_point=0, policy="delete"):
        config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1, cleanup_policy=policy)
        self.log = PartitionLog.open(directory, config, recovery_point=recovery_point)
        self.producers = ProducerStateTable()
        self.log.rebuild_producer_state(self.producers, high_watermark=0)
        self.sequences: dict[int, int] = {}

    def append(self, batch: bytes) -> int:
        info = self.log.append_as_leader(batch, 0, validated=True)
        completed = self.producers.append(batch, info.headers, info.positions)
        if completed:
            self.log.append_aborted_txns(completed)
        return info.first_offset

    def data(
        self,
        pid: int,
        count: int = 2,
        keys: list[bytes] | None = None,
        value: bytes = b"v" * 100,
        epoch: int = 0,
    ) -> int:
        """A transactional batch (a plain one with pid -1) of ``count`` records, or one per key."""
        keys = keys or [b"k"] * count
        seq = self.sequences.get(pid, 0) if pid >= 0 else -1
        self.sequences[pid] = seq + len(keys)
        records = [Record(i, 0, key, value) for i, key in enumerate(keys)]
        attributes = TRANSACTIONAL_BIT if pid >= 0 else 0
        batch = RecordBatch(0, -1, attributes, len(keys) - 1, 1000, 1000, pid, epoch, seq, records)
        return self.append(encode_batch(batch))

    def end(self, pid: int, committed: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        marker = EndTxnMarker(committed, coordinator_epoch)
        return self.append(end_txn_marker_batch(pid, epoch, marker, 1000))


def test_transaction_index_updated(tmp_path):
    """UnifiedLogTest.testTransactionIndexUpdated: interleaved transactions across segments; the aborted
    ones are indexed where their marker lies and collected for any fetched range they overlap."""
    leader = Leader(tmp_path, segment_bytes=600)
    first1 = leader.data(1)
    first2 = leader.data(2)
    leader.data(1)
    first3 = leader.data(3)
    leader.end(1, committed=False)
    leader.data(2)
    leader.end(3, committed=True)
    first4 = leader.data(4)
    abort2 = leader.end(2, committed=False)
    abort4 = leader.end(4, committed=False)
    assert len(leader.log.segments) > 2
    aborted = leader.log.collect_aborted_txns(0, leader.log.log_end_offset)
    assert [(t.producer_id, t.first_offset) for t in aborted] == [(1, first1), (2, first2), (4, first4)]
    assert aborted[1] == AbortedTxn(2, first2, abort2, first4)  # producer 4's transaction was open
    assert aborted[2] == AbortedTxn(4, first4, abort4, abort4 + 1)
    assert first3 not in [t.first_offset for t in aborted]
    late = leader.log.collect_aborted_txns(abort2 + 1, leader.log.log_end_offset)
    assert [t.producer_id for t in late] == [4]


def _indexed(log):
    return [txn for segment in log.segments for txn in segment.txn_index.entries]


def test_full_transaction_index_recovery(tmp_path):
    """UnifiedLogTest.testFullTransactionIndexRecovery: with every index file lost and the whole log
    recovered, the rebuild from the log writes the same entries again."""
    leader = Leader(tmp_path, segment_bytes=600)
    for pid in (1, 2, 3):
        leader.data(pid)
    leader.end(2, committed=False)
    leader.data(1)
    leader.end(1, committed=False)
    leader.end(3, committed=True)
    expected = _indexed(leader.log)
    assert len(expected) == 2
    leader.log.close()
    for path in tmp_path.glob("*.txnindex"):
        path.unlink()
    for path in tmp_path.glob("*.index"):
        path.unlink()
    reopened = Leader(tmp_path, segment_bytes=600, recovery_point=0)
    assert _indexed(reopened.log) == expected
    assert reopened.producers.ongoing == {}


def test_transaction_index_survives_restart_and_keeps_open_transactions(tmp_path):
    """A clean restart recovers only the active segment: the indexes of the others are read as written,
    and the rebuild finds the transaction still open (the last stable offset stays at its start)."""
    leader = Leader(tmp_path, segment_bytes=600)
    leader.data(1)
    leader.end(1, committed=False)
    leader.data(2)
    open_first = leader.data(3)
    leader.data(2)
    leader.end(2, committed=False)
    expected = _indexed(leader.log)
    leader.log.flush()
    recovery_point = leader.log.recovery_point
    leader.log.close()
    reopened = Leader(tmp_path, segment_bytes=600, recovery_point=recovery_point)
    assert _indexed(reopened.log) == expected
    end = reopened.log.log_end_offset
    assert reopened.producers.last_stable_offset(high_watermark=end) == open_first


def test_truncate_removes_index_entries(tmp_path):
    """UnifiedLogTest (truncateTo): a follower cutting its log drops the entries of markers it cut."""
    leader = Leader(tmp_path)
    leader.data(1)
    abort1 = leader.end(1, committed=False)
    leader.data(2)
    abort2 = leader.end(2, committed=False)
    leader.log.truncate_to(abort2)
    assert [t.last_offset for t in _indexed(leader.log)] == [abort1]


def test_retention_deletes_index_with_segment(tmp_path):
    """Segment deletion (retention, log start offset) takes its .txnindex with it."""
    leader = Leader(tmp_path, segment_bytes=600)
    leader.data(1)
    leader.end(1, committed=False)
    for _ in range(4):
        leader.data(5)
    first_index = leader.log.segments[0].txn_index.path
    assert first_index.exists()
    leader.log.maybe_increment_log_start_offset(leader.log.segments[1].base_offset)
    renamed = leader.log.delete_old_segments(now_ms=0, high_watermark=leader.log.log_end_offset)
    assert first_index.with_name(first_index.name + ".deleted") in renamed
    assert not first_index.exists()


# ---- LogCleanerTest's transactional cases -----------------------------------------------------------------
PLAIN = -1
HORIZON_PASSED, HORIZON_AHEAD = 10**9, 0  # "now" for a segment timestamped 1000, delete.retention.ms 1000


def clean(leader: Leader, now_ms: int) -> None:
    """One pass as LogLifecycle runs it: up to the last stable offset, with the log's aborted
    transactions."""
    plog = leader.log
    snapshots = plog.cleanable_snapshots(leader.producers.last_stable_offset(plog.log_end_offset))
    aborted = plog.collect_aborted_txns(snapshots[0].base_offset, 2**63 - 1)
    last_records = leader.producers.last_records_of_active_producers()
    cleaned, _stats, _end = cleaner.compact(
        plog.dir, snapshots, now_ms, 1000, aborted=aborted, last_records=last_records
    )
    assert plog.replace_cleaned(cleaned)


def contents(leader: Leader) -> list[tuple[int, object]]:
    """(offset, value) of each data record, (offset, "commit"/"abort") of each marker."""
    out: list[tuple[int, object]] = []
    for batch in decode_batches(leader.log.read(0, 1 << 30)):
        for record in batch.records:
            if batch.is_control:
                out.append((batch.offset_of(record), "commit" if record.key[3] == 1 else "abort"))
            else:
                out.append((batch.offset_of(record), record.value))
    return out


def roll(leader: Leader) -> None:
    """Enough plain records of another key that the segments before become cleanable."""
    for _ in range(4):
        leader.data(PLAIN, keys=[b"filler"], value=b"f" * 300)


def later_transaction(leader: Leader) -> None:
    """A committed transaction of producer 7, so that its batches before are not its last (which stays)."""
    leader.data(7, keys=[b"later"], value=b"later")
    leader.end(7, committed=True)


@pytest.mark.parametrize("unsafe", [False, True])
def test_clean_segments_with_abort(tmp_path, monkeypatch, unsafe):
    """LogCleanerTest.testCleanSegmentsWithAbort: an aborted transaction's records go and never count as
    a key's latest value, so the committed value before them stays; its marker stays (the horizon has
    not passed). With the unsafe switch the aborted value shadows the committed one, which is lost."""
    monkeypatch.setattr(cleaner, "UNSAFE_CLEANER_MAPS_ABORTED_RECORDS_FOR_TESTS", unsafe)
    leader = Leader(tmp_path, segment_bytes=600, policy="compact")
    committed = leader.data(PLAIN, keys=[b"a"], value=b"committed")
    aborted = leader.data(7, keys=[b"a", b"b"], value=b"aborted")
    marker = leader.end(7, committed=False)
    roll(leader)
    clean(leader, HORIZON_AHEAD)
    found = contents(leader)
    assert ((committed, b"committed") in found) != unsafe
    assert (aborted, b"aborted") not in found and (aborted + 1, b"aborted") not in found
    assert (marker, "abort") in found
    assert [t.last_offset for t in _indexed(leader.log)] == [marker]


def test_abort_marker_removal(tmp_path):
    """LogCleanerTest.testAbortMarkerRemoval: the pass that removes an aborted transaction's records
    keeps its marker and index entry; a later pass past the horizon, finding no record of it, removes
    both."""
    leader = Leader(tmp_path, segment_bytes=600, policy="compact")
    leader.data(7, keys=[b"a"], value=b"aborted")
    marker = leader.end(7, committed=False)
    later_transaction(leader)
    roll(leader)
    clean(leader, HORIZON_PASSED)
    assert (marker, "abort") in contents(leader)
    clean(leader, HORIZON_PASSED)
    assert (marker, "abort") not in contents(leader)
    assert _indexed(leader.log) == []


def test_commit_marker_removal(tmp_path):
    """LogCleanerTest.testCommitMarkerRemoval: a commit marker stays while a record of its transaction
    does; once compaction removed them all (a later value of the key), a pass past the horizon removes
    it."""
    leader = Leader(tmp_path, segment_bytes=600, policy="compact")
    first = leader.data(7, keys=[b"a"], value=b"old")
    marker = leader.end(7, committed=True)
    leader.data(PLAIN, keys=[b"a"], value=b"new")
    later_transaction(leader)
    roll(leader)
    clean(leader, HORIZON_PASSED)
    assert (first, b"old") not in contents(leader)
    assert (marker, "commit") in contents(leader)
    clean(leader, HORIZON_PASSED)
    assert (marker, "commit") not in contents(leader)


def test_undecided_transactional_data_not_cleanable(tmp_path):
    """LogCleanerTest.testUndecidedTransactionalDataNotCleanable: no segment holding or following an
    open transaction's first offset is cleaned, so its records shadow no earlier value."""
    leader = Leader(tmp_path, segment_bytes=600, policy="compact")
    kept = leader.data(PLAIN, keys=[b"a"], value=b"x")
    roll(leader)
    open_first = leader.data(7, keys=[b"a"], value=b"open")
    roll(leader)
    lso = leader.producers.last_stable_offset(leader.log.log_end_offset)
    assert lso == open_first
    snapshots = leader.log.cleanable_snapshots(lso)
    assert snapshots and all(s.base_offset < open_first for s in snapshots)
    assert leader.log.segments[len(snapshots)].base_offset <= open_first
    clean(leader, HORIZON_PASSED)
    assert (kept, b"x") in contents(leader)
    assert (open_first, b"open") in contents(leader)


# ---- durability of the index (LogSegment.flush) -----------------------------------------------------------
def fsynced(monkeypatch) -> list[str]:
    """The files fsync'd from now on."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_segment_flush_flushes_the_transaction_index(tmp_path, monkeypatch):
    """LogSegment.flush flushes the log, the offset and time indexes and the transaction index: the
    segments below the recovery point are not recovered after a power loss, so an index entry lost there
    would leave its aborted records visible to read_committed consumers for good."""
    leader = Leader(tmp_path)
    leader.data(7)
    leader.end(7, committed=False)
    synced = fsynced(monkeypatch)
    leader.log.flush()
    segment = leader.log.segments[0]
    assert segment.txn_index.entries
    assert {os.path.realpath(p) for p in segment.paths} <= set(synced)


def test_cleaned_transaction_index_flushed_before_the_swap(tmp_path, monkeypatch):
    """The cleaner's copy of a segment (Kafka's cleaned segment, flushed before its swap) has its
    transaction index on disk before it replaces a segment below the recovery point."""
    leader = Leader(tmp_path, segment_bytes=600, policy="compact")
    leader.data(7, keys=[b"a"], value=b"aborted")
    marker = leader.end(7, committed=False)
    roll(leader)
    synced = fsynced(monkeypatch)
    clean(leader, HORIZON_AHEAD)
    (segment,) = [s for s in leader.log.segments if s.txn_index.entries]
    assert segment.txn_index.entries[0].last_offset == marker
    name = segment.txn_index.path.name
    copies = [
        p for p in synced if p.endswith(f"{cleaner.CLEANING_DIR}/{segment_name(segment.base_offset)}/{name}")
    ]
    assert copies


# ---- the producers' last entries (LogCleaner's checkBatchRetention, RETAIN_EMPTY) ---------------------------
def batches_of(leader: Leader, pid: int) -> list:
    return [b for b in decode_batches(leader.log.read(0, 1 << 30)) if b.producer_id == pid]


def restarted(leader: Leader, tmp_path) -> Leader:
    """The log reopened, its producer state rebuilt from the log (no snapshot is kept)."""
    leader.log.flush()
    recovery_point = leader.log.recovery_point
    leader.log.close()
    return Leader(tmp_path, segment_bytes=600, recovery_point=recovery_point, policy="compact")


def test_aborted_transaction_cleaned_keeps_the_producers_last_batch_empty(tmp_path):
    """LogCleanerTest.testAbortedTransactionCleanedLastBatch-like (RETAIN_EMPTY): the records of a
    producer's last batch go with its aborted transaction, but the batch stays, empty, so a restart that
    rebuilds the producer state from the log still knows its epoch and sequence and fences its zombie."""
    leader = Leader(tmp_path, segment_bytes=600, policy="compact")
    first = leader.data(7, keys=[b"a", b"b"], value=b"aborted", epoch=3)
    marker = leader.end(7, committed=False, epoch=3)
    roll(leader)
    clean(leader, HORIZON_PASSED)
    clean(leader, HORIZON_PASSED)
    assert not [o for o, _ in contents(leader) if first <= o <= first + 1]
    (data, end) = batches_of(leader, 7)
    assert (data.base_offset, data.last_offset, data.records) == (first, first + 1, [])
    assert (data.producer_epoch, data.base_sequence) == (3, 0)
    assert end.last_offset == marker  # a batch of its transaction stays, so does its marker
    reopened = restarted(leader, tmp_path)
    entry = reopened.producers.producers[7]
    assert (entry.epoch, entry.last_seq, entry.current_txn_first_offset) == (3, 1, -1)
    assert reopened.producers.check(7, 2, 0, 1, True).error == ErrorCode.invalid_producer_epoch
    assert reopened.producers.check(7, 3, 2, 1, True).error == ErrorCode.none
    assert reopened.producers.check(7, 3, 5, 1, True).error == ErrorCode.out_of_order_sequence_number
    assert [t.last_offset for t in _indexed(reopened.log)] == [marker]


def test_compacted_away_last_batch_of_producer_kept_empty(tmp_path):
    """LogCleanerTest.testCleanEmptyControlBatch's neighbour for data (RETAIN_EMPTY): an idempotent
    producer's last batch whose records later values replaced stays as an empty batch; its earlier
    batches go."""
    leader = Leader(tmp_path, segment_bytes=600, policy="compact")
    leader.sequences[7] = 0
    for value in (b"one", b"two"):
        records = [Record(0, 0, b"a", value)]
        batch = RecordBatch(0, -1, 0, 0, 1000, 1000, 7, 2, leader.sequences[7], records)
        leader.sequences[7] += 1
        last = leader.append(encode_batch(batch))
    leader.data(PLAIN, keys=[b"a"], value=b"new")
    roll(leader)
    clean(leader, HORIZON_PASSED)
    (kept,) = batches_of(leader, 7)
    assert (kept.base_offset, kept.records, kept.base_sequence) == (last, [], 1)
    entry = restarted(leader, tmp_path).producers.producers[7]
    assert (entry.epoch, entry.last_seq) == (2, 1)


def test_marker_with_the_producers_last_epoch_retained(tmp_path):
    """LogCleaner.isBatchLastRecordOfProducer, third case: a producer whose last entry is a marker that
    bumped its epoch (a fencing abort, or a transaction version 2 marker) keeps that marker past
    delete.retention.ms, so a restart knows its epoch and coordinator epoch."""
    leader = Leader(tmp_path, segment_bytes=600, policy="compact")
    leader.data(7, keys=[b"a"], value=b"aborted", epoch=0)
    marker = leader.end(7, committed=False, epoch=1, coordinator_epoch=9)
    roll(leader)
    clean(leader, HORIZON_PASSED)
    clean(leader, HORIZON_PASSED)
    assert contents(leader)[0] == (marker, "abort")
    entry = restarted(leader, tmp_path).producers.producers[7]
    assert (entry.epoch, entry.coordinator_epoch) == (1, 9)
