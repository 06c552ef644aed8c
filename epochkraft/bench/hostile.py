"""Hostile-client benchmarks (``epochkraft bench --parts bombs,idle``).

bombs: while clients send record bombs (the worst a produce can cost to validate: a zstd batch just under
message.max.bytes holding about 1.2 million records whose last one is malformed, so the broker inflates it
and parses every record before refusing it with INVALID_RECORD), another client sends Metadata and a
one-record Produce (acks=1) in turn: its latency (max, p99, median) with the batches validated on the
event loop (produce.validation.threads=0) and on worker threads (the default), on one broker each.

idle: RSS of one broker before and after 1,000 connections that each sent one ApiVersions request and
then stay idle: kilobytes per connection.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import cramjam

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient, split
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import Compression, build_batch

MAX_BATCH_BYTES = 1_000_000  # under message.max.bytes (1048588)


def _varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _record(offset_delta: int, length: int | None = None) -> bytes:
    # attributes, timestamp delta, offset delta, null key, empty value, no headers
    body = b"\0\0" + _varint(offset_delta) + b"\x01\0\0"
    return _varint(len(body) if length is None else length) + body


def record_bomb(max_bytes: int = MAX_BATCH_BYTES, *, malformed: bool = True) -> tuple[bytes, int]:
    """A zstd RecordBatch v2 of at most ``max_bytes`` whose records all parse but the last (its length runs
    past the batch; all of them with ``malformed=False``): (bytes, record count). Its CRC is right, so only
    parsing every record finds it."""
    import struct

    import crc32c

    count = 1_200_000
    while True:
        last = _record(count - 1, length=50 if malformed else None)
        raw = b"".join(_record(i) for i in range(count - 1)) + last
        payload = bytes(cramjam.zstd.compress(raw))
        tail = struct.pack(">hiqqqhii", int(Compression.ZSTD), count - 1, 0, 0, -1, -1, -1, count) + payload
        body = struct.pack(">ibI", -1, 2, crc32c.crc32c(tail)) + tail
        batch = struct.pack(">qi", 0, len(body)) + body
        if len(batch) <= max_bytes:
            return batch, count
        count = int(count * max_bytes / len(batch) * 0.98)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _bomb_round(bootstrap: str, bomb: bytes, seconds: float, bombers: int) -> dict[str, Any]:
    client = MiniClient(bootstrap)
    try:
        assert await client.create_topic("bombs", 1, 1) == ErrorCode.none
        assert await client.create_topic("small", 1, 1) == ErrorCode.none
        await client.produce("small", 0, [b"warm"])
        await client.produce_batch("bombs", 0, build_batch([(None, b"warm", (), 0)]))
        host, port = split(bootstrap)[0]
        stop = time.monotonic() + seconds
        refused: list[int] = []

        async def bomber() -> None:
            async with KafkaClient(host, port, request_timeout_ms=120_000) as conn:
                bombing = MiniClient(bootstrap)
                bombing.clients[(host, port)] = conn
                while time.monotonic() < stop:
                    error, _, _ = await bombing.produce_batch("bombs", 0, bomb, acks=1, retries=1)
                    refused.append(error)

        latencies: list[float] = []

        async def small() -> None:
            await asyncio.sleep(0.5)  # the bombs are under way
            while time.monotonic() < stop:
                started = time.monotonic()
                await client.metadata("small")
                latencies.append(time.monotonic() - started)
                started = time.monotonic()
                error, _ = await client.produce("small", 0, [b"x"], acks=1, retries=1)
                assert error == ErrorCode.none, error
                latencies.append(time.monotonic() - started)

        await asyncio.gather(small(), *(bomber() for _ in range(bombers)))
        end = (await client.read_all("bombs"))[-1][0] + 1
        return {
            "bombs_refused": sum(1 for e in refused if e == ErrorCode.invalid_record),
            "bombs_accepted": sum(1 for e in refused if e == ErrorCode.none),
            "bombs_log_end_offset": end,  # 1: the warm-up record only
            "small_requests": len(latencies),
            "small_max_ms": round(1000 * max(latencies), 1),
            "small_p99_ms": round(1000 * _percentile(latencies, 0.99), 1),
            "small_median_ms": round(1000 * statistics.median(latencies), 1),
        }
    finally:
        await client.close()


def _cluster(work: Path, extra: str) -> LocalCluster:
    work.mkdir(parents=True, exist_ok=True)
    (work / "broker.properties").write_text("broker.heartbeat.interval.ms=500\n" + extra)
    (work / "controller.properties").write_text("broker.session.timeout.ms=9000\n")
    cluster = LocalCluster(
        data_dir=work / "cluster",
        brokers=1,
        broker_config=work / "broker.properties",
        controller_config=work / "controller.properties",
    )
    cluster.start()
    return cluster


def part_bombs(work: Path, seconds: float = 10.0, bombers: int = 2) -> dict[str, Any]:
    bomb, count = record_bomb()
    results: dict[str, Any] = {"bomb_bytes": len(bomb), "bomb_records": count, "bombers": bombers}
    for threads in (0, 1, 2):
        cluster = _cluster(work / f"bombs-{threads}", f"produce.validation.threads={threads}\n")
        try:
            label = "on_event_loop" if threads == 0 else f"{threads}_validation_threads"
            results[label] = asyncio.run(_bomb_round(cluster.bootstrap, bomb, seconds, bombers))
        finally:
            cluster.kill_all()
    return results


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return -1


async def _idle_connections(host: str, port: int, pid: int, count: int) -> dict[str, Any]:
    before = _rss_kb(pid)
    clients = [KafkaClient(host, port) for _ in range(count)]
    try:
        for i in range(0, count, 100):
            await asyncio.gather(*(c.api_versions() for c in clients[i : i + 100]))
        await asyncio.sleep(1.0)
        after = _rss_kb(pid)
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    return {
        "connections": count,
        "rss_before_mb": round(before / 1024, 1),
        "rss_after_mb": round(after / 1024, 1),
        "kb_per_connection": round((after - before) / count, 1),
    }


def part_idle(work: Path, connections: int = 1000) -> dict[str, Any]:
    cluster = _cluster(work / "idle", "max.connections=5000\n")
    try:
        node = cluster.node(1)
        assert node.pid is not None, "the broker started"
        host, port = split(cluster.bootstrap)[0]
        return asyncio.run(_idle_connections(host, port, node.pid, connections))
    finally:
        cluster.kill_all()
