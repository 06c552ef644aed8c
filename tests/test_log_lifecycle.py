"""Log lifecycle: segment rolls (size, time, index fullness, offset overflow), the log start offset and its
checkpoint, retention, asynchronous deletion, and lookups by timestamp through the time index (as Kafka's
LogSegmentTest, UnifiedLogTest, LogLoaderTest and TimeIndexTest)."""

from __future__ import annotations

import os
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochkraft.broker.log import LogConfig, LogManager, PartitionLog
from epochkraft.broker.log.checkpoints import read_offsets
from epochkraft.broker.log.offset_map import BYTES_PER_ENTRY, SkimpyOffsetMap
from epochkraft.broker.log.segment import INT32_MAX, TIME_INDEX_ENTRY
from epochkraft.protocol.records import Record, RecordBatch, build_batch, decode_batches, encode_batch

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=128, retention_ms=-1)


def batch(count: int, ts: int, step: int = 1) -> bytes:
    """Keyed records (a compacted log refuses records without a key)."""
    return build_batch([(f"k{i}".encode(), f"v{i}".encode(), (), ts + i * step) for i in range(count)])


def wide_batch(base_offset: int, last_offset_delta: int, ts: int = 1_000) -> bytes:
    """One record whose batch claims a wide offset range (as a compacted log's batches may)."""
    records = [Record(0, 0, None, b"x")]
    return encode_batch(RecordBatch(base_offset, 0, 0, last_offset_delta, ts, ts, records=records))


def offsets_in(plog: PartitionLog) -> list[int]:
    data = plog.read(plog.log_start_offset, 1 << 30)
    return [b.offset_of(r) for b in decode_batches(data) for r in b.records]


# ---- rolls -------------------------------------------------------------------------------------------
def test_segment_rolls_when_its_timestamps_span_segment_ms(tmp_path):
    """LogTest.testTimeBasedLogRoll: rolled by the records' timestamps, counted from the first batch."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_ms=1000, retention_ms=-1))
    plog.append_as_leader(batch(2, 10_000), 0)
    plog.append_as_leader(batch(2, 10_900), 0)
    assert len(plog.segments) == 1
    plog.append_as_leader(batch(2, 11_001), 0)
    assert [s.base_offset for s in plog.segments] == [0, 4]
    plog.append_as_leader(batch(1, 11_500), 0)
    assert len(plog.segments) == 2


def test_segment_rolls_when_its_index_is_full(tmp_path):
    """LogTest.testIndexRebuild's sibling: segment.index.bytes caps the entries of each index."""
    config = LogConfig(segment_index_bytes=3 * 12, index_interval_bytes=1, retention_ms=-1)
    plog = PartitionLog.open(tmp_path / "t-0", config)
    for i in range(20):
        plog.append_as_leader(batch(1, 1_000 + i), 0)
    assert [len(s.time_index_offsets) for s in plog.segments[:-1]] == [3, 3, 3]
    assert all(len(s.index_offsets) <= 4 for s in plog.segments)
    assert offsets_in(plog) == list(range(20))


def test_log_rolls_before_offsets_overflow_the_index(tmp_path):
    """LogTest.testOverCompactedLogRecovery's roll side (UnifiedLog.maybeRoll with
    canConvertToRelativeOffset): an append whose last offset is more than 2^31 - 1 past the active
    segment's base starts a new segment at its first offset, and every index entry stays addressable."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1, retention_ms=-1))
    plog.append_as_follower(wide_batch(0, 10))
    plog.append_as_follower(wide_batch(11, INT32_MAX))
    plog.append_as_follower(wide_batch(11 + INT32_MAX + 1, 0))
    assert [s.base_offset for s in plog.segments] == [0, 11, 11 + INT32_MAX + 1]
    plog.close()
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(retention_ms=-1))
    assert offsets_in(reopened) == [0, 11, 11 + INT32_MAX + 1]


def test_recovery_splits_a_segment_whose_offsets_overflow_its_index(tmp_path):
    """LogLoaderTest.testSplitOnOffsetOverflow: a segment file holding a batch more than 2^31 - 1 past
    its base (written by another broker, or before this check existed) is split on open instead of
    failing the broker's start, and loses nothing."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    far = 5 + INT32_MAX + 100
    (directory / f"{0:020d}.log").write_bytes(wide_batch(0, 4) + wide_batch(far, 1) + wide_batch(far + 2, 0))
    plog = PartitionLog.open(directory, LogConfig(index_interval_bytes=1, retention_ms=-1))
    assert [s.base_offset for s in plog.segments] == [0, far]
    assert offsets_in(plog) == [0, far, far + 2]
    assert plog.log_end_offset == far + 3
    plog.append_as_leader(batch(1, 2_000), 0)
    assert offsets_in(plog)[-1] == far + 3


# ---- log start offset --------------------------------------------------------------------------------
def test_log_start_offset_only_moves_forward_and_survives_a_restart_through_its_checkpoint(tmp_path):
    """UnifiedLogTest.testLogStartOffsetCheckpoint: Kafka's log-start-offset-checkpoint file."""
    manager = LogManager(tmp_path, SMALL)
    plog = manager.get_or_create("t", 0)
    for i in range(5):
        plog.append_as_leader(batch(4, 1_000 + i), 0)
    assert plog.maybe_increment_log_start_offset(7)
    assert not plog.maybe_increment_log_start_offset(3)
    assert plog.log_start_offset == 7
    manager.flush_all()
    assert read_offsets(tmp_path / "log-start-offset-checkpoint") == {("t", 0): 7}
    manager.close()
    again = LogManager(tmp_path, SMALL)
    again.load_all()
    assert again.get("t", 0).log_start_offset == 7
    assert offsets_in(again.get("t", 0))[0] <= 7  # the batch holding 7 is still read whole


def test_a_log_ending_below_its_checkpointed_start_starts_empty_there(tmp_path):
    """LogLoaderTest.testLogEndLessThanStartAfterReopen."""
    plog = PartitionLog.open(tmp_path / "t-0", SMALL)
    plog.append_as_leader(batch(3, 1_000), 0)
    plog.close()
    reopened = PartitionLog.open(tmp_path / "t-0", SMALL, log_start_offset=50)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (50, 50)
    assert reopened.append_as_leader(batch(1, 2_000), 0).first_offset == 50


# ---- retention ---------------------------------------------------------------------------------------
def fill_segments(plog: PartitionLog, count: int, ts: int = 1_000) -> None:
    for i in range(count):
        plog.append_as_leader(batch(10, ts + i * 100), 0)


def test_retention_by_size_deletes_the_oldest_segments_below_the_high_watermark(tmp_path):
    """UnifiedLogTest.shouldDeleteSizeBasedSegments (and never at or above the high watermark)."""
    config = LogConfig(segment_bytes=600, retention_bytes=1500, retention_ms=-1)
    plog = PartitionLog.open(tmp_path / "t-0", config)
    fill_segments(plog, 24)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 4
    assert plog.delete_old_segments(now_ms=10**13, high_watermark=bases[1]) != []
    assert plog.log_start_offset == bases[1], "only the segment wholly below the high watermark went"
    renamed = plog.delete_old_segments(now_ms=10**13, high_watermark=plog.log_end_offset)
    assert all(p.name.endswith(".deleted") and p.exists() for p in renamed)
    assert plog.size_bytes <= 1500 + plog.segments[0].size
    assert plog.size_bytes - plog.segments[0].size < 1500
    assert offsets_in(plog)[0] == plog.log_start_offset == plog.segments[0].base_offset
    assert offsets_in(plog)[-1] == plog.log_end_offset - 1
    assert plog.recovery_point == plog.segments[0].base_offset, "nothing below the first segment to recover"


def test_retention_by_time_uses_each_segments_largest_timestamp_and_keeps_the_active_one(tmp_path):
    """UnifiedLogTest.shouldDeleteTimeBasedSegmentsReadyToBeDeleted / testRetentionDeletesProducerState:
    a segment goes when its largest timestamp is retention.ms old; the active segment never."""
    config = LogConfig(segment_bytes=600, retention_ms=5_000)
    plog = PartitionLog.open(tmp_path / "t-0", config)
    fill_segments(plog, 12, ts=100_000)
    newest = max(s.max_timestamp for s in plog.segments[:-1])
    assert plog.delete_old_segments(now_ms=100_000 + 4_000, high_watermark=plog.log_end_offset) == []
    plog.delete_old_segments(now_ms=plog.segments[1].max_timestamp + 5_001, high_watermark=10**9)
    assert plog.segments[0].max_timestamp >= plog.segments[0].base_offset  # kept ones are younger
    plog.delete_old_segments(now_ms=newest + 10**6, high_watermark=plog.log_end_offset)
    assert len(plog.segments) == 1 and plog.log_start_offset == plog.segments[0].base_offset
    assert plog.segments[0].size > 0, "the active segment stays"


def test_segments_below_the_log_start_offset_go_whatever_the_cleanup_policy(tmp_path):
    """UnifiedLogTest.shouldDeleteStartOffsetBreachedSegmentsWhenPolicyDoesNotIncludeDelete."""
    config = LogConfig(segment_bytes=600, cleanup_policy="compact", retention_bytes=0, retention_ms=0)
    manager = LogManager(tmp_path, config)
    plog = manager.get_or_create("t", 0)
    fill_segments(plog, 8)
    third = plog.segments[2].base_offset
    assert plog.delete_old_segments(now_ms=10**13, high_watermark=plog.log_end_offset) == []
    plog.maybe_increment_log_start_offset(third + 1)
    renamed = plog.delete_old_segments(now_ms=0, high_watermark=plog.log_end_offset)
    assert plog.segments[0].base_offset == third and plog.log_start_offset == third + 1
    manager.schedule_removal(1_000, renamed, delay_ms=60_000)
    assert manager.due_removals(60_999) == []
    due = manager.due_removals(61_000)
    assert sorted(due) == sorted(renamed) and all(p.exists() for p in due)
    manager.remove_files(due)
    assert not any(p.exists() for p in due)
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))[0] == f"{third:020d}.log"


def test_leftover_deleted_files_are_removed_on_open(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=600))
    fill_segments(plog, 12)
    plog.maybe_increment_log_start_offset(plog.segments[2].base_offset)
    renamed = plog.delete_old_segments(now_ms=0, high_watermark=plog.log_end_offset)
    plog.close()
    assert renamed and all(p.exists() for p in renamed)
    PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=600))
    assert not any(p.exists() for p in renamed)


# ---- time index --------------------------------------------------------------------------------------
def test_time_index_files_use_kafkas_entry_layout(tmp_path):
    """TimeIndexTest: 8-byte timestamp and 4-byte relative offset per entry, timestamps increasing."""
    plog = PartitionLog.open(tmp_path / "t-0", SMALL)
    for i in range(40):
        plog.append_as_leader(batch(2, 1_000 + 10 * i), 0)
    plog.close()
    first = PartitionLog.open(tmp_path / "t-0", SMALL).segments[0]
    raw = first.time_index_path.read_bytes()
    entries = [TIME_INDEX_ENTRY.unpack_from(raw, i) for i in range(0, len(raw), 12)]
    assert len(raw) % 12 == 0 and len(entries) >= 2
    assert [t for t, _ in entries] == sorted({t for t, _ in entries})
    assert entries[-1][0] == first.max_timestamp
    assert struct.unpack(">q", raw[:8])[0] == entries[0][0]


def brute_force_by_timestamp(plog: PartitionLog, target: int, max_offset: int) -> tuple[int, int] | None:
    data = plog.read(plog.log_start_offset, 1 << 30)
    for b in decode_batches(data):
        for r in b.records:
            if b.offset_of(r) >= plog.log_start_offset and b.timestamp_of(r) >= target:
                return (b.timestamp_of(r), b.offset_of(r)) if b.offset_of(r) < max_offset else None
    return None


def brute_force_max_timestamp(plog: PartitionLog, max_offset: int) -> tuple[int, int] | None:
    data = plog.read(plog.log_start_offset, 1 << 30)
    best = None
    for b in decode_batches(data):
        for r in b.records:
            if b.offset_of(r) >= plog.log_start_offset and b.timestamp_of(r) > (best or (-1,))[0]:
                best = (b.timestamp_of(r), b.offset_of(r))
    return best if best is not None and best[1] < max_offset else None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.lists(st.integers(min_value=-1, max_value=2_000), min_size=1, max_size=6), min_size=1, max_size=60
    ),
    segment_bytes=st.sampled_from([300, 700, 5_000]),
    interval=st.sampled_from([1, 150, 4096]),
    start_fraction=st.floats(0, 1),
    hw_fraction=st.floats(0, 1),
    targets=st.lists(st.integers(min_value=-5, max_value=2_100), min_size=1, max_size=15),
    reopen=st.booleans(),
)
def test_lookup_by_timestamp_matches_a_brute_force_scan(
    tmp_path_factory, batches, segment_bytes, interval, start_fraction, hw_fraction, targets, reopen
):
    """UnifiedLogTest.testFetchOffsetByTimestampIncludesLeaderEpoch / LogSegmentTest
    .testFindOffsetByTimestamp, as a property: for logs of many segments with timestamps in any order,
    a log start moved by retention or DeleteRecords and any high watermark, the time-index lookup and the
    max-timestamp lookup answer exactly as a scan of every record; also after a restart, whose recovery
    rebuilds the active segment's time index and loads the others' from disk."""
    directory = tmp_path_factory.mktemp("log")
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval, retention_ms=-1)
    plog = PartitionLog.open(directory, config)
    for stamps in batches:
        plog.append_as_leader(build_batch([(None, b"v", (), ts) for ts in stamps]), leader_epoch=0)
    start = int(plog.log_end_offset * start_fraction)
    plog.maybe_increment_log_start_offset(start)
    plog.delete_old_segments(now_ms=0, high_watermark=plog.log_end_offset)
    if reopen:
        plog.flush()
        recovery_point = plog.segments[-1].base_offset
        plog.close()
        plog = PartitionLog.open(directory, config, recovery_point, log_start_offset=start)
    hw = plog.log_start_offset + int((plog.log_end_offset - plog.log_start_offset) * hw_fraction)
    for target in targets:
        assert plog.fetch_offset_by_timestamp(target, hw) == brute_force_by_timestamp(plog, target, hw)
    assert plog.fetch_max_timestamp(hw) == brute_force_max_timestamp(plog, hw)
    plog.close()


def test_index_files_of_a_truncated_segment_stay_consistent(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", SMALL)
    for i in range(30):
        plog.append_as_leader(batch(3, 1_000 + 7 * i), 0)
    plog.truncate_to(40)
    assert plog.fetch_max_timestamp(10**9) == brute_force_max_timestamp(plog, 10**9)
    for target in (0, 1_050, 1_100, 1_200, 5_000):
        assert plog.fetch_offset_by_timestamp(target, 10**9) == brute_force_by_timestamp(plog, target, 10**9)
    plog.close()
    reopened = PartitionLog.open(tmp_path / "t-0", SMALL, recovery_point=40)
    assert os.path.getsize(reopened.segments[-1].time_index_path) % 12 == 0
    assert reopened.fetch_max_timestamp(10**9) == brute_force_max_timestamp(reopened, 10**9)


# ---- compaction --------------------------------------------------------------------------------------
def compact_log(
    plog: PartitionLog, now_ms: int, delete_retention_ms: int, dedupe_buffer_size: int = 1 << 20
) -> int:
    """Passes as LogLifecycle.clean runs them, each mapping on from where the last one's map filled;
    returns how many."""
    from epochkraft.broker.log.cleaner import compact

    first_dirty_offset: int | None = 0
    passes = 0
    while first_dirty_offset is not None:
        snapshots = plog.cleanable_snapshots(plog.log_end_offset)
        cleaned, _stats, end = compact(
            plog.dir,
            snapshots,
            now_ms,
            delete_retention_ms,
            dedupe_buffer_size=dedupe_buffer_size,
            first_dirty_offset=first_dirty_offset,
        )
        assert plog.replace_cleaned(cleaned)
        passes += 1
        assert end is None or end > first_dirty_offset
        first_dirty_offset = end
    return passes


def records_of(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    data = plog.read(plog.log_start_offset, 1 << 30)
    return [(b.offset_of(r), r.key, r.value) for b in decode_batches(data) for r in b.records]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.integers(0, 12), st.one_of(st.none(), st.binary(min_size=1, max_size=20))),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=50,
    ),
    segment_bytes=st.sampled_from([300, 800, 3_000]),
    tombstones_expired=st.booleans(),
    dedupe_slots=st.sampled_from([4, 8, 1 << 10]),
)
def test_compaction_keeps_exactly_the_latest_value_per_key(
    tmp_path_factory, batches, segment_bytes, tombstones_expired, dedupe_slots
):
    """LogCleanerTest.testCleanSegments / testLogCleanerRetainsLastSequence-style property, against a
    dictionary: after a compaction the cleaned segments hold each key once, at its latest offset, with its
    latest value; records past them are untouched; offsets never move; tombstones go only once
    delete.retention.ms has passed; the log reopens the same and a follower can copy it, gaps and all.
    With a dedupe buffer of 4 or 8 entries (fewer than the 13 keys) it takes several passes and ends the
    same."""
    directory = tmp_path_factory.mktemp("compacted")
    config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1, cleanup_policy="compact")
    plog = PartitionLog.open(directory, config)
    ts = 1_000
    for entries in batches:
        plog.append_as_leader(
            build_batch([(f"k{k}".encode(), v, (), ts) for k, v in entries]), leader_epoch=0
        )
        ts += 1
    before = records_of(plog)
    active_base = plog.segments[-1].base_offset
    latest: dict[bytes, tuple[int, bytes | None]] = {}  # over the cleanable segments, as Kafka's map
    for offset, key, value in before:
        if offset < active_base:
            latest[key] = (offset, value)
    now = ts + (10**6 if tombstones_expired else 0)
    assert compact_log(plog, now, 1_000, dedupe_buffer_size=dedupe_slots * BYTES_PER_ENTRY) >= 1
    after = records_of(plog)
    cleaned = [(o, k, v) for o, k, v in after if o < active_base]
    assert [(o, k, v) for o, k, v in after if o >= active_base] == [r for r in before if r[0] >= active_base]
    assert all(latest[k][0] == o for o, k, _ in cleaned), "only each key's latest record stays"
    expected = {
        k: v for k, (o, v) in latest.items() if o < active_base and not (v is None and tombstones_expired)
    }
    assert {k: v for _, k, v in cleaned} == expected
    assert {o for o, _, _ in after} <= {o for o, _, _ in before}, "offsets never move"
    assert plog.log_end_offset == before[-1][0] + 1
    plog.close()
    reopened = PartitionLog.open(directory, config)
    assert records_of(reopened) == after
    follower = PartitionLog.open(tmp_path_factory.mktemp("follower"), config)
    while follower.log_end_offset < reopened.log_end_offset:
        follower.append_as_follower(reopened.read(follower.log_end_offset, 500))
    assert records_of(follower) == after
    reopened.close()
    follower.close()


def test_build_partial_offset_map(tmp_path):
    """LogCleanerTest.testBuildPartialOffsetMap: a map of 10 slots (9 at the load factor) takes the keys
    from the first dirty offset until it holds 9, and its latest offset is the last one mapped."""
    from epochkraft.broker.log.cleaner import CleanStats, Throttle, build_offset_map

    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300, cleanup_policy="compact"))
    for i in range(30):
        plog.append_as_leader(build_batch([(f"k{i}".encode(), b"v", (), 1_000 + i)]), 0)
    offset_map = SkimpyOffsetMap(10 * BYTES_PER_ENTRY)
    snapshots = plog.cleanable_snapshots(plog.log_end_offset)
    assert build_offset_map(snapshots, offset_map, 5, 0.9, Throttle(float("inf")), CleanStats())
    assert (offset_map.size, offset_map.latest_offset) == (9, 13)
    assert [offset_map.get(f"k{i}".encode()) for i in (4, 5, 13, 14)] == [-1, 5, 13, -1]
    offset_map.close()


def test_partial_segment_clean(tmp_path):
    """LogCleanerTest.testPartialSegmentClean: with a map too small for the log's keys, a pass cleans up to
    where the map filled and keeps everything after it; the next passes go on from there, and in the end
    each key is there once, with its latest value."""
    from epochkraft.broker.log.cleaner import compact

    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=600, cleanup_policy="compact"))
    for round_ in range(3):
        for i in range(40):
            plog.append_as_leader(build_batch([(f"k{i}".encode(), f"{round_}".encode(), (), 1_000)]), 0)
    before = records_of(plog)
    snapshots = plog.cleanable_snapshots(plog.log_end_offset)
    cleaned, _, end = compact(plog.dir, snapshots, 0, 10**9, dedupe_buffer_size=20 * BYTES_PER_ENTRY)
    assert end == 18  # 18 keys: 90% of 20 slots
    assert plog.replace_cleaned(cleaned)
    assert [r for r in records_of(plog) if r[0] >= end] == [r for r in before if r[0] >= end]
    assert compact_log(plog, 0, 10**9, dedupe_buffer_size=20 * BYTES_PER_ENTRY) > 2
    active_base = plog.segments[-1].base_offset
    cleaned_keys = [k for o, k, _ in records_of(plog) if o < active_base]
    assert len(cleaned_keys) == len(set(cleaned_keys))
    latest = {k: v for _, k, v in before}
    assert {k: v for _, k, v in records_of(plog)} == latest


def test_skimpy_offset_map():
    """SkimpyOffsetMapTest.testBasicValidation: every key put is found with its offset, others are not."""
    offset_map = SkimpyOffsetMap(1000 * BYTES_PER_ENTRY)
    for i in range(900):
        offset_map.put(f"key-{i}".encode(), i * 3)
    offset_map.put(b"key-7", 5000)
    assert offset_map.size == 900 and offset_map.latest_offset == 5000
    assert [offset_map.get(f"key-{i}".encode()) for i in (0, 7, 899)] == [0, 5000, 2697]
    assert offset_map.get(b"absent") == -1
    offset_map.close()


def test_skimpy_offset_map_grows_up_to_its_buffer():
    """The table starts at 65,536 entries and doubles while half full, never past the buffer's slots: a
    map of 100,000 slots holds 90,000 keys (the load factor), each found again."""
    offset_map = SkimpyOffsetMap(100_000 * BYTES_PER_ENTRY)
    for i in range(90_000):
        offset_map.put(f"key-{i}".encode(), i)
    assert offset_map.size == 90_000 and offset_map.slots == 100_000
    assert all(offset_map.get(f"key-{i}".encode()) == i for i in range(0, 90_000, 7))
    assert offset_map.get(b"absent") == -1
    offset_map.close()


def test_a_cleaned_copy_is_not_swapped_in_over_a_segment_that_changed(tmp_path):
    """The pass works on files off the event loop: a segment deleted meanwhile keeps the log as it is."""
    from epochkraft.broker.log.cleaner import compact

    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300, cleanup_policy="compact"))
    for i in range(20):
        plog.append_as_leader(build_batch([(b"k", f"v{i}".encode(), (), 1_000 + i)]), 0)
    snapshots = plog.cleanable_snapshots(plog.log_end_offset)
    cleaned, _, _ = compact(plog.dir, snapshots, 0, 10**9)
    plog.maybe_increment_log_start_offset(plog.segments[1].base_offset)
    plog.delete_old_segments(0, plog.log_end_offset)
    before = records_of(plog)
    assert not plog.replace_cleaned(cleaned)
    assert records_of(plog) == before
    assert not (plog.dir / ".cleaning").exists()


def test_unreadable_checkpoints_never_stop_a_broker_from_loading_its_logs(tmp_path):
    """A broker whose checkpoint files are damaged starts anyway (never a crash loop): offset checkpoints
    are dropped with a warning (each is safe to lose) and the leader-epoch cache is rebuilt from the
    batches, as Kafka's segment recovery rebuilds it."""
    manager = LogManager(tmp_path, SMALL)
    plog = manager.get_or_create("t", 0)
    for epoch in (0, 0, 2, 2, 5):
        plog.append_as_leader(batch(3, 1_000), epoch)
    expected_epochs = list(plog.epochs.entries)
    manager.flush_all()
    manager.checkpoint_high_watermarks({("t", 0): 15})
    manager.close()
    for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint"):
        (tmp_path / name).write_text("0\n1\nt 0 not-a-number\n")
    (tmp_path / "log-start-offset-checkpoint").write_bytes(b"\xff\xfe")
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n")
    again = LogManager(tmp_path, SMALL)
    assert again.load_all() == [("t", 0)] and again.high_watermarks == {}
    reopened = again.get("t", 0)
    assert reopened.log_end_offset == 15 and offsets_in(reopened) == list(range(15))
    assert reopened.epochs.entries == expected_epochs == [(0, 0), (2, 6), (5, 12)]
    assert reopened.epochs.end_offset_for(2) == (2, 12)


def test_checkpoints_written_at_once_from_two_threads_do_not_meet(tmp_path):
    """The periodic checkpoint round writes on a worker thread while a shutdown writes the last one on the
    event loop: both use the same temporary file, so without one writer at a time (Kafka's CheckpointFile
    lock) one of them finds it renamed away (FileNotFoundError stopped a broker's shutdown)."""
    import threading

    manager = LogManager(tmp_path)
    errors: list[BaseException] = []

    def write(value: int) -> None:
        try:
            for _ in range(200):
                manager.checkpoint_high_watermarks({("t", 0): value})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(v,)) for v in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read_offsets(tmp_path / "replication-offset-checkpoint")[("t", 0)] in (1, 2, 3)


def test_a_topic_s_configs_override_the_log_config_and_an_unparsable_one_keeps_the_default():
    config = LogConfig().with_topic_configs(
        {
            "segment.bytes": "2048",
            "cleanup.policy": "compact",
            "message.timestamp.type": "LogAppendTime",
            "retention.ms": "soon",
            "unclean.leader.election.enable": "true",
        }
    )
    assert config == LogConfig(
        segment_bytes=2048, cleanup_policy="compact", message_timestamp_type="LogAppendTime"
    )
    assert LogConfig().with_topic_configs({}) == LogConfig()
