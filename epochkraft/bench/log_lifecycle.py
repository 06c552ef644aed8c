"""Figures for the log lifecycle: lookups by timestamp against the log's size, and disk use under retention.

1. ``lookup``: logs of growing size (up to ``--gigabytes``) built with timestamps that grow, then
   ListOffsets-by-timestamp lookups (``PartitionLog.fetch_offset_by_timestamp``) and max-timestamp lookups
   at random targets: latency per lookup (median, p99, max) and the memory the indexes hold. The cost
   stays flat as the log grows: one time index bisect, a short header scan, one batch decoded.
2. ``cleaner``: a compacted log of ``--cleaner-megabytes`` of 1 KiB records over 10,000 keys, cleaned in
   one pass (``log.cleaner.compact``, unthrottled, as the cleaner thread runs it): MB read per second of
   the pass (both of its reads of the log counted once, as Kafka reports its cleaner's throughput).
3. ``soak``: a 3-broker cluster (real processes) with a topic of retention.ms ``--retention-ms``, fed at a
   steady rate by one producer for ``--minutes``; the brokers' data dirs are measured every
   ``--sample-seconds``. Disk use levels off once retention starts deleting, instead of growing.

Run: ``scripts/bench_log --parts lookup,cleaner`` (a few minutes, writes 1 GB of scratch),
``scripts/bench_log --parts soak --minutes 10``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from epochkraft.broker.log import LogConfig, PartitionLog
from epochkraft.protocol.records import build_batch

MB = 1 << 20


def _build(directory: Path, megabytes: int, batch_bytes: int = 64 * 1024) -> PartitionLog:
    """A log of ``megabytes`` of 64 KiB batches of 1 KiB records, one millisecond per record."""
    plog = PartitionLog.open(directory, LogConfig(retention_ms=-1))
    per_batch = batch_bytes // 1024
    value = os.urandom(1000)
    ts = 1_600_000_000_000
    while plog.size_bytes < megabytes * MB:
        plog.append_as_leader(
            build_batch([(None, value, (), ts + i) for i in range(per_batch)]), leader_epoch=0
        )
        ts += per_batch
    plog.flush()
    return plog


def _percentiles(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "median_ms": round(statistics.median(samples) * 1000, 3),
        "p99_ms": round(samples[int(len(samples) * 0.99) - 1] * 1000, 3),
        "max_ms": round(samples[-1] * 1000, 3),
    }


def lookup(scratch: Path, gigabytes: float, lookups: int) -> list[dict[str, object]]:
    sizes = sorted({64, 256, int(gigabytes * 1024)})
    rows = []
    for megabytes in sizes:
        directory = scratch / f"lookup-{megabytes}"
        plog = _build(directory, megabytes)
        first_ts = 1_600_000_000_000
        last_ts = first_ts + plog.log_end_offset
        rng = random.Random(megabytes)
        by_timestamp = []
        for _ in range(lookups):
            target = rng.randrange(first_ts, last_ts)
            started = time.perf_counter()
            found = plog.fetch_offset_by_timestamp(target, plog.log_end_offset)
            by_timestamp.append(time.perf_counter() - started)
            assert found is not None and found[0] == target, (found, target)
        max_ts = []
        for _ in range(max(lookups // 10, 10)):
            started = time.perf_counter()
            plog.fetch_max_timestamp(plog.log_end_offset)
            max_ts.append(time.perf_counter() - started)
        index_entries = sum(len(s.index_offsets) + len(s.time_index_offsets) for s in plog.segments)
        rows.append(
            {
                "log_mb": megabytes,
                "segments": len(plog.segments),
                "by_timestamp": _percentiles(by_timestamp),
                "max_timestamp": _percentiles(max_ts),
                "index_entries_in_memory": index_entries,
            }
        )
        plog.close()
        shutil.rmtree(directory)
    return rows


def cleaner(scratch: Path, megabytes: int, keys: int = 10_000) -> dict[str, object]:
    from epochkraft.broker.log.cleaner import compact

    directory = scratch / "cleaner"
    config = LogConfig(retention_ms=-1, cleanup_policy="compact", segment_bytes=64 * MB)
    plog = PartitionLog.open(directory, config)
    rng = random.Random(7)
    value = os.urandom(1000)
    ts = 1_600_000_000_000
    while plog.size_bytes < megabytes * MB:
        entries = [(f"key-{rng.randrange(keys)}".encode(), value, (), ts) for _ in range(64)]
        plog.append_as_leader(build_batch(entries), leader_epoch=0)
        ts += 1
    plog.flush()
    snapshots = plog.cleanable_snapshots(plog.log_end_offset)
    log_bytes = sum(s.size for s in snapshots)
    started = time.perf_counter()
    cleaned, stats, _end = compact(directory, snapshots, ts, 86_400_000)
    seconds = time.perf_counter() - started
    assert plog.replace_cleaned(cleaned)
    plog.close()
    shutil.rmtree(directory)
    return {
        "log_mb": round(log_bytes / MB, 1),
        "kept_mb": round(stats.bytes_written / MB, 1),
        "records_read": stats.records_read,
        "records_kept": stats.records_kept,
        "seconds": round(seconds, 2),
        "mb_per_s_of_log": round(log_bytes / MB / seconds, 1),
    }


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def soak(scratch: Path, minutes: float, retention_ms: int, rate_kb: int, sample_seconds: float) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from epochkraft.harness.cluster import LocalCluster

    config = scratch / "broker.properties"
    config.write_text(
        "log.retention.check.interval.ms=5000\nlog.segment.delete.delay.ms=10000\n"
        "replica.lag.time.max.ms=10000\n"
    )
    cluster = LocalCluster(data_dir=scratch / "soak", brokers=3, broker_config=config)
    cluster.start()
    samples: list[tuple[float, int]] = []
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = NewTopic(
            "soak",
            num_partitions=3,
            replication_factor=3,
            config={"retention.ms": str(retention_ms), "segment.bytes": str(4 * MB)},
        )
        admin.create_topics([topic])["soak"].result(30)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
        value = os.urandom(1000)
        started = time.monotonic()
        next_sample = started
        sent = 0
        while (now := time.monotonic()) - started < minutes * 60:
            due = int((now - started) * rate_kb)  # one 1 KB record per KB/s per second
            while sent < due:
                try:
                    producer.produce("soak", value=value)
                    sent += 1
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0.01)
            if now >= next_sample:
                used = sum(_dir_bytes(cluster.data_dir / f"broker-{b}") for b in (1, 2, 3))
                samples.append((round(now - started, 1), used))
                print(f"{now - started:7.1f} s  {used / MB:8.1f} MB on disk  {sent} records", flush=True)
                next_sample += sample_seconds
            time.sleep(0.005)
        producer.flush(30)
    finally:
        cluster.kill_all()
    late = [used for at, used in samples if at >= retention_ms / 1000 * 2]
    return {
        "minutes": minutes,
        "retention_ms": retention_ms,
        "rate_kb_per_s": rate_kb,
        "records": sent,
        "produced_mb": round(sent * 1000 / MB, 1),
        "disk_mb_samples": [(at, round(used / MB, 1)) for at, used in samples],
        "disk_mb_after_two_retention_periods": {
            "min": round(min(late) / MB, 1) if late else None,
            "max": round(max(late) / MB, 1) if late else None,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="lookup", help="lookup, soak or both (comma-separated)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: temp)")
    parser.add_argument("--gigabytes", type=float, default=1.0, help="largest log for the lookup part")
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--cleaner-megabytes", type=int, default=256)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--retention-ms", type=int, default=60_000)
    parser.add_argument("--rate-kb", type=int, default=1000, help="soak produce rate, KB/s")
    parser.add_argument("--sample-seconds", type=float, default=15.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-log-", dir=args.dir))
    results: dict[str, object] = {}
    try:
        parts = args.parts.split(",")
        if "lookup" in parts:
            rows = lookup(scratch, args.gigabytes, args.lookups)
            results["lookup"] = rows
            for row in rows:
                print(json.dumps(row), flush=True)
        if "cleaner" in parts:
            results["cleaner"] = cleaner(scratch, args.cleaner_megabytes)
            print(json.dumps(results["cleaner"]), flush=True)
        if "soak" in parts:
            soaked = soak(scratch, args.minutes, args.retention_ms, args.rate_kb, args.sample_seconds)
            results["soak"] = soaked
            print(json.dumps(soaked["disk_mb_after_two_retention_periods"]), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
