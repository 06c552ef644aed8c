"""Costs of the pieces of the replication data path, in CPU seconds per GB, measured one at a time.

The end-to-end produce figures (``scripts/bench --parts produce``) move by several per cent from one run to
the next on a shared VM; these isolate what each change to the data path saves:

1. Fetch response decoding on a follower: kio's decoder (copies the records) against
   ``protocol.fetch_response.decode_partitions`` (views into the frame).
2. Fetch response encoding on a leader: kio's single-buffer encoding against ``encode_response``'s pieces.
3. Appending to a segment file: blocks allocated page by page against blocks reserved ahead
   (``fallocate`` FALLOC_FL_KEEP_SIZE, as ``Segment.append`` does).
4. A leader reading back, for two followers, each batch it just appended: a pread per read against the
   tail cache's buffers (``log.tail.cache.bytes``).
5. Appending 1 GB at a broker's pace and fsyncing it, keeping every page cached against dropping pages
   well behind the end (``log.page.cache.drop.behind.bytes``), in machine-wide CPU seconds.
6. Writing into memory the kernel freed just before against memory freed ``--idle-seconds`` before: on a VM
   that hands freed memory back to the host, the second costs several times the first, and RF 3 writes
   three times the bytes of RF 1 into the page cache.
7. Validating produced batches of 100 B records (a librdkafka-sized batch, a CreateTime topic's timestamp
   bounds): the C record walk against aiokafka's record reader with a check per record (``records.validate``
   without the walk).

8. Decoding a ProduceRequest as librdkafka sends one at 100 B records (two partitions of one topic, a batch
   of 32 KiB each): kio's reader (the length pre-check, then a copy of each partition's records) against
   ``protocol.produce_request`` (one walk, the records as views of the frame).

Run: ``scripts/bench_paths`` (about a minute).
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.static.primitive import Records, i32, i32Timedelta, i64

GB = 1 << 30


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _per_gb(work: Callable[[], int], repeat: int) -> float:
    """CPU seconds per GB of ``work``, which returns the bytes it handled."""
    start = _cpu()
    handled = sum(work() for _ in range(repeat))
    return round((_cpu() - start) / (handled / GB), 3)


def fetch_codecs(partitions: int = 6, partition_bytes: int = 170_000) -> dict[str, float]:
    from kio.schema.fetch.v16 import response as r16

    from epochkraft.protocol import fetch_response
    from epochkraft.protocol.errors import ErrorCode
    from epochkraft.protocol.framing import decode_entity, encode_entity

    topic_id = uuid.uuid4()
    records = [os.urandom(partition_bytes) for _ in range(partitions)]
    entity = r16.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        session_id=i32(0),
        responses=(
            r16.FetchableTopicResponse(
                topic_id=topic_id,
                partitions=tuple(
                    r16.PartitionData(
                        partition_index=i32(i),
                        error_code=ErrorCode.none,
                        high_watermark=i64(5),
                        aborted_transactions=(),
                        records=Records(records[i]),
                    )
                    for i in range(partitions)
                ),
            ),
        ),
    )
    frame = memoryview(encode_entity(entity)).toreadonly()
    size = len(frame)
    answers = [fetch_response.Answer(i, 0, 5, 0, [records[i]]) for i in range(partitions)]

    def kio_decode() -> int:
        decode_entity(r16.FetchResponse, frame, 0)
        return size

    def our_decode() -> int:
        fetch_response.decode_partitions(frame, 0)
        return size

    def kio_encode() -> int:
        encode_entity(entity)
        return size

    def our_encode() -> int:
        fetch_response.encode_response(16, [(topic_id, answers)])
        return size

    return {
        "fetch_decode_kio_s_per_gb": _per_gb(kio_decode, 2000),
        "fetch_decode_views_s_per_gb": _per_gb(our_decode, 2000),
        "fetch_encode_kio_s_per_gb": _per_gb(kio_encode, 2000),
        "fetch_encode_pieces_s_per_gb": _per_gb(our_encode, 2000),
    }


def produce_validation(records_per_batch: int = 5000, value_bytes: int = 100) -> dict[str, float]:
    from epochkraft.protocol import records

    now = int(time.time() * 1000)
    batch = records.build_batch(
        [(None, os.urandom(value_bytes), (), now + i % 7) for i in range(records_per_batch)]
    )
    header = records.parse_header(batch)
    rules = records.RecordRules("bench-0", now_ms=now, timestamp_after_max_ms=3_600_000)

    def validate() -> int:
        records.validate(batch, 0, header, rules=rules)
        return len(batch)

    walk = records.RECORD_WALK
    results = {}
    if walk is not None:
        results["produce_validate_walk_s_per_gb"] = _per_gb(validate, 2000)
    records.RECORD_WALK = None
    try:
        results["produce_validate_reader_s_per_gb"] = _per_gb(validate, 200)
    finally:
        records.RECORD_WALK = walk
    return results


def produce_decode(version: int = 9, partitions: int = 2, batch_bytes: int = 32 * 1024) -> dict[str, float]:
    from kio.schema.produce.v9 import request as pr
    from kio.schema.types import TopicName
    from kio.static.primitive import i16

    from epochkraft.protocol import records
    from epochkraft.protocol.framing import (
        decode_entity,
        decode_request_body,
        encode_entity,
        encode_request,
        parse_request_header,
        request_class,
    )

    batch = records.build_batch([(None, os.urandom(100), (), i) for i in range(batch_bytes // 110)])
    request = pr.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(
            pr.TopicProduceData(
                name=TopicName("bench"),
                partition_data=tuple(
                    pr.PartitionProduceData(index=i32(i), records=Records(batch)) for i in range(partitions)
                ),
            ),
        ),
    )
    frame = encode_request(0, version, 1, "rdkafka", encode_entity(request))[4:]
    header = parse_request_header(frame)
    cls = request_class(0, version)

    def kio() -> int:
        decode_entity(cls, frame, header.header_size, allow_trailing=True, request=True)
        return len(frame)

    def views() -> int:
        decode_request_body(header, frame)
        return len(frame)

    return {
        "produce_decode_kio_s_per_gb": _per_gb(kio, 20_000),
        "produce_decode_views_s_per_gb": _per_gb(views, 20_000),
    }


def _append(path: Path, megabytes: int, reserve: bool) -> float:
    from epochkraft.broker.log import segment

    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = _cpu()
        reserved = 0
        for i in range(megabytes):
            end = (i + 1) << 20
            if reserve and end > reserved:  # as Segment.append reserves
                target = segment.reservation_end(end)
                if segment.reserve_blocks(fd, reserved, target):
                    reserved = target
            os.pwrite(fd, chunk, i << 20)
        return (_cpu() - start) / (megabytes / 1024)
    finally:
        os.close(fd)
        path.unlink()


def page_cache(directory: Path, megabytes: int, idle_seconds: float) -> dict[str, float]:
    results: dict[str, float] = {}
    scratch = directory / "scratch"
    for label, reserve in (("append_allocating", False), ("append_reserved", True)):
        _append(scratch, megabytes, reserve)  # memory the kernel has just used, for both
        results[f"{label}_s_per_gb"] = round(_append(scratch, megabytes, reserve), 3)
    _append(scratch, 2 * megabytes, False)
    results["write_into_memory_freed_just_now_s_per_gb"] = round(_append(scratch, megabytes, False), 3)
    _append(scratch, 2 * megabytes, False)
    time.sleep(idle_seconds)
    results[f"write_into_memory_freed_{idle_seconds:g}s_before_s_per_gb"] = round(
        _append(scratch, megabytes, False), 3
    )
    return results


def tail_reads(directory: Path, megabytes: int) -> dict[str, float]:
    """A leader's reads for two followers of each batch it just appended: from the log (pread) against
    from the tail cache. Only the reads are timed."""
    from epochkraft.broker.log import PartitionLog
    from epochkraft.broker.log.tail_cache import TailCache
    from epochkraft.broker.settings import BrokerSettings
    from epochkraft.protocol.records import build_batch

    records = build_batch([(None, os.urandom(1024), (), i) for i in range(170)])
    results: dict[str, float] = {}
    for label, tail in (
        ("fetch_read_log", None),
        ("fetch_read_tail_cache", TailCache(BrokerSettings().log_tail_cache_bytes)),
    ):
        plog = PartitionLog.open(directory / label, tail=tail)
        spent, read = 0.0, 0
        try:
            while read < megabytes << 20:
                offset = plog.append_as_leader(records, 0).first_offset
                start = _cpu()
                for _follower in range(2):
                    read += sum(map(len, plog.read_chunks(offset, 1 << 20)))
                spent += _cpu() - start
        finally:
            plog.close()
        results[f"{label}_s_per_gb"] = round(spent / (read / GB), 3)
    return results


def _machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat), kernel writeback threads included."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def drop_behind(directory: Path, megabytes: int, mb_per_s: float = 300.0) -> dict[str, Any]:
    """Appends to a partition log at a broker's pace (``mb_per_s``, about a broker's share under RF 3),
    then fsync, keeping every page cached against dropping pages well behind the end
    (``log.page.cache.drop.behind.bytes``). Twice each, in turn, each log deleted after its run.
    Machine-wide CPU, so that the writeback the kernel does in its own threads counts for both."""
    import shutil

    from epochkraft.broker.log import LogConfig, PartitionLog, segment
    from epochkraft.broker.settings import BrokerSettings
    from epochkraft.protocol.records import build_batch

    records = build_batch([(None, os.urandom(1024), (), i) for i in range(1000)])
    results: dict[str, Any] = {}
    for label, behind in (
        ("append_keeping_pages", 0),
        ("append_dropping_behind", BrokerSettings().log_page_cache_drop_behind_bytes),
    ) * 2:
        os.sync()
        plog = PartitionLog.open(directory / label, LogConfig(drop_behind_bytes=behind))
        try:
            began = time.monotonic()
            start = _machine_busy_seconds()
            written = 0
            while written < megabytes << 20:
                plog.append_as_leader(records, 0)
                written += len(records)
                ahead = written / (mb_per_s * 1e6) - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
            segment.page_cache_drops.wait()
            plog.flush()
            per_gb = round((_machine_busy_seconds() - start) / (written / GB), 3)
            results.setdefault(f"{label}_then_fsync_machine_s_per_gb", []).append(per_gb)
        finally:
            plog.close()
            shutil.rmtree(directory / label)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the scratch file goes (default: temp)")
    parser.add_argument("--megabytes", type=int, default=1024, help="size of each page-cache measurement")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    results = fetch_codecs() | produce_validation() | produce_decode()
    with tempfile.TemporaryDirectory(prefix="epochkraft-bench-paths-", dir=args.dir) as directory:
        results |= tail_reads(Path(directory), args.megabytes)
        results |= drop_behind(Path(directory), args.megabytes)
        results |= page_cache(Path(directory), args.megabytes, args.idle_seconds)
    width = max(map(len, results))
    for name, value in results.items():
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
