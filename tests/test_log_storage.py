"""Log storage: append/read, segment roll, index lookup, truncation, torn-tail recovery, recovery point,
checkpoint formats and the leader-epoch cache (as Kafka's LogTest / LeaderEpochFileCacheTest)."""

from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from epochkraft.broker.log import LogConfig, LogManager, PartitionLog, cut_to_recovery_point
from epochkraft.broker.log.checkpoints import read_offsets, write_offsets
from epochkraft.broker.log.epoch_cache import LeaderEpochCache
from epochkraft.broker.log.segment import page_cache_drops
from epochkraft.broker.log.tail_cache import TailCache
from epochkraft.broker.replica_manager import log_config
from epochkraft.broker.settings import BrokerSettings
from epochkraft.protocol.records import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    Compression,
    CorruptRecordError,
    build_batch,
    decode_batches,
    iter_batches,
    verify_crc,
)

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=128)


def batch(values: list[bytes], ts: int = 1_000) -> bytes:
    return build_batch([(None, v, (), ts + i) for i, v in enumerate(values)])


def values_of(data: bytes) -> list[tuple[int, bytes]]:
    return [(b.offset_of(r), r.value) for b in decode_batches(data) for r in b.records]


def fill(plog: PartitionLog, count: int, epoch: int = 0, per_batch: int = 3) -> None:
    for i in range(count):
        plog.append_as_leader(batch([f"v{i}-{j}".encode() for j in range(per_batch)]), epoch)


def test_append_as_leader_assigns_offsets_and_stamps_the_epoch_with_a_valid_crc(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0")
    info = plog.append_as_leader(batch([b"a", b"b"]), leader_epoch=5)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 1, 2)
    info = plog.append_as_leader(batch([b"c"]) + batch([b"d", b"e"]), leader_epoch=5)
    assert (info.first_offset, info.last_offset) == (2, 4)
    data = plog.read(0, 1 << 20)
    for pos, header in iter_batches(data):
        assert header.partition_leader_epoch == 5
        assert verify_crc(data, pos, header)
    assert values_of(data) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert plog.epochs.entries == [(5, 0)]


LOG_APPEND_TIME = LogConfig(message_timestamp_type="LogAppendTime")
NOW = 1_700_000_000_000


def _check_log_append_time(plog: PartitionLog, produced: bytes, base_timestamp: int) -> None:
    """LogValidatorTest.validateLogAppendTime: the batch is valid, LogAppendTime, max timestamp = now;
    its base timestamp and records are the producer's (read back, each record's timestamp is now)."""
    info = plog.append_as_leader(produced, leader_epoch=3, now_ms=NOW)
    assert info.log_append_time == NOW and info.max_timestamp == NOW
    data = plog.read(info.first_offset, 1 << 20)
    assert len(data) == len(produced)  # messageSizeMaybeChanged: false
    for pos, header in iter_batches(data):
        assert verify_crc(data, pos, header)
        assert header.attributes & TIMESTAMP_TYPE_BIT
        assert (header.max_timestamp, header.base_timestamp) == (NOW, base_timestamp)
        assert data[pos + HEADER_SIZE : pos + header.size] == produced[HEADER_SIZE : header.size]
    assert all(b.max_timestamp == NOW for b in decode_batches(data))


def test_checkLogAppendTimeNonCompressed(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LOG_APPEND_TIME)
    _check_log_append_time(plog, batch([b"hello", b"there", b"beautiful"], ts=1234), 1234)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD])
def test_checkLogAppendTimeWithoutRecompression(tmp_path, codec):
    entries = [(None, v, (), 1234) for v in (b"hello", b"there", b"beautiful")]
    plog = PartitionLog.open(tmp_path / "t-0", LOG_APPEND_TIME)
    _check_log_append_time(plog, build_batch(entries, compression=codec), 1234)


def test_the_brokers_log_message_timestamp_type_is_the_default_of_its_logs():
    settings = BrokerSettings(log_message_timestamp_type="LogAppendTime")
    assert log_config(settings).message_timestamp_type == "LogAppendTime"
    assert log_config(BrokerSettings()).message_timestamp_type == "CreateTime"


def test_create_time_batches_are_written_as_produced(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0")
    produced = batch([b"a", b"b"], ts=1234)
    info = plog.append_as_leader(produced, leader_epoch=0, now_ms=NOW)
    assert (info.log_append_time, info.max_timestamp) == (-1, 1235)
    assert plog.read(0, 1 << 20)[16:] == produced[16:]  # past offset, length and leader epoch


def test_testTruncateToEndOffsetClearsEpochCache(tmp_path):
    # A leader assigned epoch 1 at its log end, then lost leadership before appending: the new leader's
    # divergence answer truncates to the log end, which must still drop epoch 1 (UnifiedLogTest).
    plog = PartitionLog.open(tmp_path / "t-0")
    plog.append_as_leader(batch([b"a", b"b"]), leader_epoch=0)
    plog.epochs.assign(1, plog.log_end_offset)
    plog.truncate_to(plog.log_end_offset)
    assert plog.epochs.entries == [(0, 0)]
    assert plog.epochs.latest_epoch == 0


def test_append_rejects_corrupt_batches_and_appends_nothing(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0")
    bad = bytearray(batch([b"x"]))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        plog.append_as_leader(batch([b"ok"]) + bytes(bad), 0)
    assert plog.log_end_offset == 0


def test_follower_append_keeps_the_leaders_offsets_and_epochs(tmp_path):
    leader = PartitionLog.open(tmp_path / "leader")
    fill(leader, 3, epoch=1)
    fill(leader, 2, epoch=4)
    follower = PartitionLog.open(tmp_path / "follower")
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.log_end_offset == leader.log_end_offset == 15
    assert follower.epochs.entries == [(1, 0), (4, 9)]
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(leader.read(3, 1 << 20))  # does not continue the log


def test_follower_append_refuses_a_batch_with_a_bad_crc_and_appends_nothing(tmp_path):
    """As Kafka's ReplicaFetcherThreadTest (corrupted message): a damaged batch is not replicated."""
    leader = PartitionLog.open(tmp_path / "leader")
    fill(leader, 3)
    data = bytearray(leader.read(0, 1 << 20))
    data[-1] ^= 0x5A  # the last batch's last record byte
    follower = PartitionLog.open(tmp_path / "follower")
    with pytest.raises(CorruptRecordError, match="CRC"):
        follower.append_as_follower(memoryview(bytes(data)))
    assert follower.log_end_offset == 0 and follower.read(0, 1 << 20) == b""
    assert follower.append_as_follower(memoryview(leader.read(0, 1 << 20))).last_offset == 8


def test_segments_roll_and_reads_cross_segments_through_the_index(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", SMALL)
    fill(plog, 40)
    assert len(plog.segments) > 3
    assert plog.log_end_offset == 120
    for offset in (0, 1, 37, 59, 100, 119):
        first = values_of(plog.read(offset, 200))
        assert first[0][0] <= offset <= first[-1][0] or first[0][0] == offset
        assert any(o == offset for o, _ in first)
    everything = values_of(plog.read(0, 1 << 20))
    assert [o for o, _ in everything] == list(range(120))


def test_read_stops_at_max_offset_and_returns_at_least_one_batch(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0")
    fill(plog, 5)
    assert [o for o, _ in values_of(plog.read(0, 1 << 20, max_offset=6))] == list(range(6))
    assert plog.read(6, 1 << 20, max_offset=6) == b""
    one = values_of(plog.read(3, 1))
    assert [o for o, _ in one] == [3, 4, 5], "a batch larger than max_bytes still comes back whole"


def test_reads_match_a_batch_by_batch_reference_for_any_offset_budget_and_limit(tmp_path):
    import random

    rng = random.Random(7)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL)
    for _ in range(60):
        plog.append_as_leader(batch([bytes(rng.randrange(1, 90)) for _ in range(rng.randrange(1, 4))]), 0)
    assert len(plog.segments) > 5
    everything = plog.read(0, 1 << 30)
    batches = [
        (h.base_offset, h.next_offset, everything[pos : pos + h.size]) for pos, h in iter_batches(everything)
    ]
    assert batches[-1][1] == plog.log_end_offset
    for _ in range(400):
        offset = rng.randrange(0, plog.log_end_offset + 2)
        max_bytes = rng.choice([1, 50, 200, 700, 5000])
        max_offset = rng.choice([None, rng.randrange(0, plog.log_end_offset + 2)])
        limit = plog.log_end_offset if max_offset is None else min(max_offset, plog.log_end_offset)
        expected = b""
        for base, next_offset, data in batches:
            if next_offset <= offset or offset >= limit:
                continue
            if base >= limit or (expected and len(expected) + len(data) > max_bytes):
                break
            expected += data
        assert plog.read(offset, max_bytes, max_offset) == expected, (offset, max_bytes, max_offset)


def test_the_tail_cache_answers_every_read_as_the_log_does(tmp_path):
    """A log keeping its recent leader appends in memory reads exactly as one reading its files, through
    appends, evictions, truncations and follower appends; reads at the tail come from memory."""
    import random

    rng = random.Random(11)
    cache = TailCache(max_bytes=900)  # a few batches: evictions happen all the time
    cached = PartitionLog.open(tmp_path / "cached", SMALL, tail=cache)
    plain = PartitionLog.open(tmp_path / "plain", SMALL)
    scratch = PartitionLog.open(tmp_path / "scratch")
    served_from_memory = 0
    for step in range(300):
        action = rng.random()
        if action < 0.08 and plain.log_end_offset:
            offset = rng.randrange(0, plain.log_end_offset)
            cached.truncate_to(offset)
            plain.truncate_to(offset)
        elif action < 0.14:
            # Batches stamped at the log end by another leader, appended as a follower would.
            scratch.truncate_fully_and_start_at(plain.log_end_offset)
            fill(scratch, rng.randrange(1, 3), epoch=step)
            data = memoryview(scratch.read(plain.log_end_offset, 1 << 20))
            cached.append_as_follower(data)
            plain.append_as_follower(data)
            assert cache.read(cached, plain.log_end_offset - 1, 1 << 20, plain.log_end_offset) is None
        else:
            records = b"".join(
                batch([bytes(rng.randrange(1, 60)) for _ in range(rng.randrange(1, 4))])
                for _ in range(rng.choice([1, 1, 2]))
            )
            first = plain.log_end_offset
            cached.append_as_leader(records, 0)
            plain.append_as_leader(records, 0)
            if len(records) <= cache.max_bytes:
                assert cache.read(cached, first, 1 << 20, plain.log_end_offset) is not None
        assert cache.bytes <= cache.max_bytes
        for _ in range(4):
            offset = rng.randrange(0, plain.log_end_offset + 2)
            max_bytes = rng.choice([1, 50, 200, 700, 5000])
            max_offset = rng.choice([None, rng.randrange(0, plain.log_end_offset + 2)])
            limit = plain.log_end_offset if max_offset is None else min(max_offset, plain.log_end_offset)
            served_from_memory += cache.read(cached, offset, max_bytes, limit) is not None
            expected = plain.read(offset, max_bytes, max_offset)
            assert cached.read(offset, max_bytes, max_offset) == expected, (
                step,
                offset,
                max_bytes,
                max_offset,
            )
    assert served_from_memory > 100


def test_the_tail_cache_keeps_one_budget_for_all_logs_and_evicts_the_oldest_first():
    cache = TailCache(max_bytes=100)
    cache.append("a", 0, 1, [b"a" * 40], 40)
    cache.append("b", 0, 1, [b"b" * 40], 40)
    cache.append("a", 1, 2, [b"c" * 40], 40)  # over budget: a's first batch goes
    assert cache.bytes == 80
    assert cache.read("a", 0, 1 << 20, 10) is None
    assert cache.read("a", 1, 1 << 20, 10) == [b"c" * 40]
    assert cache.read("b", 0, 1 << 20, 10) == [b"b" * 40]
    cache.drop("b")  # its bytes are still held until they reach the eviction end
    assert cache.read("b", 0, 1 << 20, 10) is None and cache.bytes == 80
    cache.append("a", 5, 7, [b"d" * 30], 30)  # not contiguous: a's run starts over
    assert cache.read("a", 1, 1 << 20, 10) is None
    assert cache.read("a", 6, 1 << 20, 10) == [b"d" * 30]
    cache.append("a", 7, 8, [b"e" * 101], 101)  # larger than the whole budget: not kept, run dropped
    assert cache.read("a", 6, 1 << 20, 10) is None


def test_appends_reserve_blocks_past_the_end_and_give_them_back(tmp_path):
    """A segment's size is always its batches; blocks reserved past the end go when it stops being the
    active segment (roll, close, truncation), and a crash's leftover reservation goes on the next open."""
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, LogConfig(segment_bytes=1536 * 1024))
    for _ in range(16):
        plog.append_as_leader(batch([bytes(64 * 1024)]), 0)
    active = plog.segments[-1]
    if not active._reserve:
        pytest.skip("this file system cannot reserve blocks (fallocate FALLOC_FL_KEEP_SIZE)")

    def allocated(segment) -> int:
        return os.fstat(segment.fd).st_blocks * 512

    def reserved_ahead(segment) -> bool:
        return allocated(segment) >= segment._reserved_to > segment.size + 4096

    assert os.fstat(active.fd).st_size == active.size > 1024 * 1024
    assert reserved_ahead(active)
    for _ in range(16):
        plog.append_as_leader(batch([bytes(64 * 1024)]), 0)
    first, active = plog.segments[0], plog.segments[-1]
    assert len(plog.segments) == 2 and allocated(first) < first.size + 64 * 1024, "given back on roll"
    assert reserved_ahead(active)
    plog.truncate_to(first.next_offset + 2)
    assert allocated(active) < active.size + 64 * 1024, "given back on truncation"
    plog.truncate_to(20)
    plog.append_as_leader(batch([bytes(64 * 1024)] * 8), 0)
    assert reserved_ahead(plog.segments[-1])
    crashed = PartitionLog.open(path, LogConfig(segment_bytes=1536 * 1024))  # the first was never closed
    assert crashed.log_end_offset == plog.log_end_offset
    assert allocated(crashed.segments[-1]) < crashed.segments[-1].size + 64 * 1024, "trimmed on open"
    crashed.append_as_leader(batch([bytes(64 * 1024)] * 4), 0)
    assert reserved_ahead(crashed.segments[-1])
    crashed.close()
    stat = os.stat(crashed.segments[-1].log_path)
    assert stat.st_blocks * 512 < stat.st_size + 64 * 1024, "given back on close"


def _cached_share(fd: int, start: int, end: int) -> float:
    """The share of the pages in [start, end) that are in the page cache, by mincore(2) on a mapping of
    them: a read would not do, as a read that misses starts readahead and caches the pages after it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    first = start - start % mmap.PAGESIZE
    length = end - first
    address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, first)
    assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    pages = ctypes.create_string_buffer(-(-length // mmap.PAGESIZE))
    try:
        assert libc.mincore(address, length, pages) == 0, os.strerror(ctypes.get_errno())
    finally:
        libc.munmap(address, length)
    return sum(flags & 1 for flags in pages.raw) / len(pages.raw)


def _in_page_cache(fd: int, position: int) -> bool:
    return _cached_share(fd, position, position + 1) == 1


def test_appends_drop_the_page_cache_well_behind_the_end(tmp_path):
    """Pages more than twice the drop-behind distance behind the end leave the page cache once written
    back; the pages near the end stay, and everything still reads back."""
    probe = tmp_path / "probe"
    probe.write_bytes(bytes(256 * 1024))
    fd = os.open(probe, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    keeps_pages = _cached_share(fd, 0, 256 * 1024) > 0.5
    os.close(fd)
    if keeps_pages:
        pytest.skip("this file system keeps pages cached (tmpfs, or no DONTNEED)")
    behind = 256 * 1024
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(drop_behind_bytes=behind))
    for _ in range(10):
        plog.append_as_leader(batch([os.urandom(60 * 1024)]), 0)
    segment = plog.segments[-1]
    os.fsync(segment.fd)  # the dirty pages are written back (as the kernel does, in its own time)
    for _ in range(10):
        plog.append_as_leader(batch([os.urandom(60 * 1024)]), 0)
    assert segment.size > 4 * behind
    page_cache_drops.wait()  # the requests go to a thread of their own, off the event loop
    written_back = 9 * 60 * 1024  # fsynced, and more than twice the distance behind the end
    assert _cached_share(segment.fd, 0, written_back) < 0.5, "dropped: written back and far behind the end"
    assert _in_page_cache(segment.fd, segment.size - 1), "kept: just appended"
    assert [o for o, _ in values_of(plog.read(0, 1 << 30))] == list(range(20))
    unchanged = PartitionLog.open(tmp_path / "t-1")  # 0: every page stays
    for _ in range(20):
        unchanged.append_as_leader(batch([os.urandom(60 * 1024)]), 0)
    assert _in_page_cache(unchanged.segments[-1].fd, 0)


def test_truncation_within_and_across_segments_truncates_the_epoch_cache(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", SMALL)
    fill(plog, 10, epoch=1)
    fill(plog, 10, epoch=2)
    segments_before = len(plog.segments)
    plog.truncate_to(45)
    assert plog.log_end_offset == 45
    assert plog.epochs.entries == [(1, 0), (2, 30)]
    plog.truncate_to(12)
    assert plog.log_end_offset == 12 and len(plog.segments) < segments_before
    assert plog.epochs.entries == [(1, 0)]
    fill(plog, 1, epoch=3)
    assert [o for o, _ in values_of(plog.read(0, 1 << 20))] == list(range(15))


def test_recovery_truncates_a_torn_tail(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, SMALL)
    fill(plog, 10)
    end = plog.log_end_offset
    plog.close()
    last = sorted(path.glob("*.log"))[-1]
    good = batch([b"torn"])
    with open(last, "ab") as f:
        f.write(good[: len(good) // 2])  # a partial batch, as a crash mid-write leaves
    reopened = PartitionLog.open(path, SMALL)
    assert reopened.log_end_offset == end
    fill(reopened, 1)
    assert [o for o, _ in values_of(reopened.read(0, 1 << 20))] == list(range(end + 3))


def test_recovery_cuts_a_batch_with_a_bad_crc(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path)
    fill(plog, 3)
    plog.close()
    segment = path / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-2] ^= 0x55
    segment.write_bytes(bytes(data))
    assert PartitionLog.open(path).log_end_offset == 6


def test_corrupt_index_is_rebuilt(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, SMALL, recovery_point=0)
    fill(plog, 30)
    plog.flush()
    plog.close()
    for index in path.glob("*.index"):
        index.write_bytes(b"\x00\x01\x02")
    reopened = PartitionLog.open(path, SMALL, recovery_point=90)
    offsets = [o for o, _ in values_of(reopened.read(50, 1 << 20))]
    assert offsets[0] <= 50 and offsets[-1] == 89
    assert all(i.stat().st_size % 8 == 0 for i in path.glob("*.index")), "indexes rebuilt"


def test_flush_advances_the_recovery_point_and_power_loss_cuts_back_to_it(tmp_path):
    manager = LogManager(tmp_path)
    plog = manager.get_or_create("orders", 0)
    fill(plog, 4)
    manager.flush_all()
    assert plog.recovery_point == 12
    fill(plog, 4)
    assert plog.recovery_point == 12
    manager.checkpoint_recovery_points()
    manager.close()
    assert cut_to_recovery_point(tmp_path) == {("orders", 0): 12}
    again = LogManager(tmp_path)
    again.load_all()
    assert again.get("orders", 0).log_end_offset == 12


def test_flush_policy_by_message_count(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_messages=5))
    fill(plog, 1)
    assert plog.recovery_point == 0
    fill(plog, 1)
    assert plog.recovery_point == 6


def test_checkpoint_file_format_is_kafkas(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    write_offsets(path, {("orders", 1): 42, ("orders", 0): 7})
    assert path.read_text() == "0\n2\norders 0 7\norders 1 42\n"
    assert read_offsets(path) == {("orders", 0): 7, ("orders", 1): 42}
    plog = PartitionLog.open(tmp_path / "t-0")
    plog.epochs.assign(3, 0)
    plog.epochs.assign(5, 10)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n3 0\n5 10\n"


def test_meta_properties_and_load_all(tmp_path):
    manager = LogManager(tmp_path)
    manager.write_meta(3, "cluster-x")
    meta = manager.read_meta()
    assert meta["node.id"] == "3" and meta["cluster.id"] == "cluster-x" and meta["directory.id"]
    fill(manager.get_or_create("a.b-c", 2), 1)
    manager.close()
    again = LogManager(tmp_path)
    assert again.load_all() == [("a.b-c", 2)]
    assert again.read_meta()["directory.id"] == meta["directory.id"]


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (-1, (-1, -1)),  # undefined
        (0, (0, 0)),  # below the first epoch: the requested epoch and the first epoch's start
        (2, (2, 10)),  # ends where epoch 4 starts
        (3, (2, 10)),  # unknown epoch between: the previous one's end
        (4, (4, 25)),
        (6, (6, 40)),  # latest: the log end
        (9, (-1, -1)),  # above the latest: undefined
    ],
)
def test_leader_epoch_end_offsets(requested, expected):
    cache = LeaderEpochCache(None, lambda: 40)
    for epoch, start in [(1, 0), (2, 5), (4, 10), (6, 25)]:
        cache.assign(epoch, start)
    cache.assign(5, 30)  # lower than the latest: ignored
    assert cache.end_offset_for(requested) == expected


def test_the_tail_cache_keeps_produced_records_seen_through_a_view_of_the_request_only_if_immutable(tmp_path):
    """Records cut from a request frame as a read-only view of ``bytes`` cannot change and are kept; a
    view of a receive buffer (a bytearray the next read overwrites) is not."""
    cache = TailCache(max_bytes=1 << 20)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, tail=cache)
    frame = b"header" + batch([b"v" * 20])
    plog.append_as_leader(memoryview(frame).toreadonly()[6:], 0)
    assert cache.read(plog, 0, 1 << 20, plog.log_end_offset) is not None
    received = bytearray(frame)
    plog.append_as_leader(memoryview(received).toreadonly()[6:], 0)
    assert cache.read(plog, 1, 1 << 20, plog.log_end_offset) is None
    assert values_of(plog.read(1, 1 << 20)) == [(1, b"v" * 20)]


def test_the_tail_cache_keeps_a_copy_of_records_cut_from_a_much_larger_frame(tmp_path):
    """A view keeps its whole frame alive while the cache counts only the batch: records cut from a frame
    more than twice their size (many partitions, or bytes padded after the body) are cached as copies,
    so a client cannot hold megabytes per cached batch."""
    cache = TailCache(max_bytes=1 << 20)
    plog = PartitionLog.open(tmp_path / "t-0", SMALL, tail=cache)
    records = batch([b"v" * 20])
    frame = b"header" + records + bytes(100_000)
    plog.append_as_leader(memoryview(frame).toreadonly()[6 : 6 + len(records)], 0)
    pieces = cache.read(plog, 0, 1 << 20, plog.log_end_offset)
    assert pieces is not None
    assert all(not isinstance(p, memoryview) or p.obj is not frame for p in pieces)
    assert values_of(plog.read(0, 1 << 20)) == [(0, b"v" * 20)]
