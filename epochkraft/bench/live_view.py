"""The live view's cost (``epochkraft bench --parts view``).

A cluster with --view-partitions partitions takes --view-changes metadata changes a second (topic config
writes through IncrementalAlterConfigs from ADMIN_CLIENTS admin clients in turn, offered at that rate
whatever their latency, up to 64 at once: a broker answers a connection's requests one at a time, as
Kafka's, so one client's rate is bounded by one change's round trip, and the brokers name a controller at
random, as Kafka's, so the clients spread over the three brokers' forwarding channels) in
three phases of equal length: no browser, browsers attached (SSE readers of /view/events, as many as
--view-browsers), and one stuck browser (a connection that never reads). Per phase: the controller's CPU
seconds per second and its RSS, the brokers' CPU, the changes answered a second and their latency p99 (a
stuck browser must not slow the controller); with browsers, whether they kept up: the messages each
received, the streams the controller ended (a browser dropped for falling behind), and how far the last
metadata offset each was shown is behind the controller's once the changes stop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import json
import os
import re
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.procfs import cpu_seconds, rss_mb

PHASES = ("no_browser", "browsers", "stuck_browser")
MAX_IN_FLIGHT = 64  # config changes outstanding at once
# Admin clients the changes are spread over, in turn: one client's connection carries a change at a time
# (11 ms p50 but 63 ms on average through a broker at 10,000 partitions, its event loop busy replicating), so
# 100 a second needs many (docs/benchmarks.md: 8 clients reached 45-56 a second, 24 reached 66-77).
ADMIN_CLIENTS = 24
SETTLE_TIMEOUT_S = 300  # for every broker to host its replicas before the phases


def _done(
    latencies: list[float],
    in_flight: set[concurrent.futures.Future[None]],
    sent: float,
    future: concurrent.futures.Future[None],
) -> None:
    latencies.append(time.monotonic() - sent)
    in_flight.discard(future)


async def _change_configs(bootstrap: str, topic: str, per_second: float, seconds: float) -> list[float]:
    """IncrementalAlterConfigs on ``topic`` offered at ``per_second`` whatever their latency (open loop, at
    most MAX_IN_FLIGHT at once) by ADMIN_CLIENTS clients in turn; each one's latency in seconds."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admins = [AdminClient({"bootstrap.servers": bootstrap}) for _ in range(ADMIN_CLIENTS)]
    latencies: list[float] = []
    in_flight: set[concurrent.futures.Future[None]] = set()
    started = time.monotonic()
    n = 0
    while time.monotonic() < started + seconds:
        if len(in_flight) < MAX_IN_FLIGHT:
            n += 1
            entry = ConfigEntry(
                "retention.ms", str(86_400_000 + n), incremental_operation=AlterConfigOpType.SET
            )
            resource = ConfigResource("topic", topic, incremental_configs=[entry])
            sent = time.monotonic()
            future = admins[n % ADMIN_CLIENTS].incremental_alter_configs([resource])[resource]
            in_flight.add(future)
            future.add_done_callback(functools.partial(_done, latencies, in_flight, sent))
        await asyncio.sleep(max(started + n / per_second - time.monotonic(), 0))
    await asyncio.to_thread(concurrent.futures.wait, list(in_flight), 30)
    return latencies


@dataclass
class ViewReader:
    """What one browser's event stream brought: messages by kind, the metadata offset it was last shown."""

    bytes_read: int = 0
    messages: collections.Counter[str] = field(default_factory=collections.Counter)
    metadata_offset: int | None = None
    ended: bool = False  # the controller ended the stream (a browser dropped for falling behind)

    def take(self, block: bytes) -> None:
        """One server-sent event."""
        lines = dict(line.split(": ", 1) for line in block.decode().splitlines() if ": " in line)
        kind = lines.get("event", "")
        self.messages[kind] += 1
        if kind in ("snapshot", "delta") and '"metadata_offset"' in lines.get("data", ""):
            cluster = json.loads(lines["data"]).get("cluster")
            if cluster:
                self.metadata_offset = cluster["metadata_offset"]


async def _read_view(url: str, stop: asyncio.Event, reader: ViewReader) -> None:
    buffer = b""
    async with aiohttp.ClientSession() as http, http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as r:
        while not stop.is_set():
            try:
                chunk = await asyncio.wait_for(r.content.readany(), 0.5)
            except TimeoutError:
                continue
            if not chunk:
                reader.ended = True
                return
            reader.bytes_read += len(chunk)
            buffer += chunk
            *blocks, buffer = buffer.split(b"\n\n")
            for block in blocks:
                reader.take(block)


def _metadata_offset(admin_port: int) -> int:
    """The controller's metadata log end offset, from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10) as answer:
        found = re.search(rb"^\w*MetadataLogEndOffset (\S+)$", answer.read(), re.MULTILINE)
    return int(float(found.group(1))) if found else -1


async def _stuck_view(host: str, port: int, stop: asyncio.Event) -> None:
    """Asks for the stream and never reads it: the kernel's buffers fill, then the controller's queue."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /view/events HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    await writer.drain()
    await stop.wait()
    writer.close()
    del reader


async def _phase(
    phase: str, cluster: LocalCluster, topic: str, changes: float, seconds: float, browsers: int
) -> dict[str, Any]:
    assert cluster.controller is not None and cluster.controller.proc is not None
    pid = cluster.controller.proc.pid
    brokers = [p.proc.pid for p in cluster.nodes.values() if p.proc is not None]
    admin = cluster.admin_port(0) or 0
    stop = asyncio.Event()
    views = [ViewReader() for _ in range(browsers if phase == "browsers" else 0)]
    url = f"http://127.0.0.1:{admin}/view/events"
    readers = [asyncio.create_task(_read_view(url, stop, view)) for view in views]
    if phase == "stuck_browser":
        readers = [asyncio.create_task(_stuck_view("127.0.0.1", admin, stop))]
    await asyncio.sleep(1)
    cpu_before, brokers_before = cpu_seconds([pid]), cpu_seconds(brokers)
    started = time.monotonic()
    latencies = sorted(await _change_configs(cluster.bootstrap, topic, changes, seconds))
    elapsed = time.monotonic() - started
    cpu = (cpu_seconds([pid]) - cpu_before) / elapsed
    brokers_cpu = (cpu_seconds(brokers) - brokers_before) / elapsed
    rss = rss_mb(pid)
    await asyncio.sleep(2)  # the view's next ticks: what the browsers were last shown
    metadata_offset = await asyncio.to_thread(_metadata_offset, admin)
    stop.set()
    for task in readers:
        task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    results: dict[str, Any] = {
        "controller_cpu_s_per_s": round(cpu, 3),
        "controller_rss_mb": round(rss, 1),
        "brokers_cpu_s_per_s": round(brokers_cpu, 3),
        "changes": len(latencies),
        "changes_per_s": round(len(latencies) / elapsed, 1),
        "change_p50_ms": round(1000 * latencies[len(latencies) // 2], 1) if latencies else None,
        "change_p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1) if latencies else None,
    }
    if views:
        results["browsers_kept_up"] = {
            "bytes_read": [v.bytes_read for v in views],
            "messages": [dict(v.messages) for v in views],
            "streams_ended": sum(v.ended for v in views),
            "offsets_behind": [
                None if v.metadata_offset is None else metadata_offset - v.metadata_offset for v in views
            ],
        }
    return results


def part_view(
    work: Path, fast_config: str, partitions: int, changes: float, seconds: float, browsers: int
) -> dict[str, Any]:
    from epochkraft.bench.cli import _create
    from epochkraft.bench.metadata_changes import wait_settled

    work.mkdir(parents=True, exist_ok=True)
    (work / "broker.properties").write_text(fast_config)
    (work / "controller.properties").write_text("broker.session.timeout.ms=9000\n")
    cluster = LocalCluster(
        data_dir=work / "cluster",
        brokers=3,
        broker_config=work / "broker.properties",
        controller_config=work / "controller.properties",
        admin_ports=True,
    )
    cluster.start()
    try:
        per_topic = 1000
        for i in range(max(partitions // per_topic, 1)):
            _create(cluster.bootstrap, f"view-{i}", min(per_topic, partitions), 3, 2)
        results: dict[str, Any] = {
            "partitions": partitions,
            "changes_per_s": changes,
            "browsers_attached": browsers,
        }
        # the phases start once every broker hosts its replicas, not while it opens 10,000 logs
        results["settled_s"] = wait_settled(cluster, partitions, timeout_s=SETTLE_TIMEOUT_S)
        results["load_average_1m"] = os.getloadavg()[0]
        for phase in PHASES:
            results[phase] = asyncio.run(_phase(phase, cluster, "view-0", changes, seconds, browsers))
            results[phase]["load_average_1m"] = os.getloadavg()[0]
        return results
    finally:
        cluster.kill_all()
