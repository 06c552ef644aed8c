"""What an incremental fetch session (KIP-227) saves a leader: a consumer's Fetch of ``--partitions`` idle
partitions (caught up, nothing new), sessionless (every request names every partition and every answer
carries every one) against one session (each incremental request names none and its answer carries none),
on a one-broker cluster. Reported per Fetch: the broker's CPU milliseconds, the round trip and the
response's bytes; and the broker's CPU per second while no Fetch comes (its own background work).

Run: ``scripts/bench_fetch_sessions`` (``--partitions 2000 --rounds 300``; under a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kio.schema.fetch.v16 import request as f16
from kio.schema.fetch.v16.response import FetchResponse
from kio.static.primitive import i32, i32Timedelta, i64

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.harness.procfs import cpu_seconds
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode

TOPIC = "fetch-sessions-bench"
FAST = "broker.heartbeat.interval.ms=500\noffsets.topic.num.partitions=1\n"
IDLE_S = 5.0  # the broker's own background work with these partitions, measured before and after
SETTLE_S = 10.0
BLOCKS = 4


def _request(topic_id: uuid.UUID, partitions: int, session_id: int, epoch: int) -> f16.FetchRequest:
    fetched = tuple(
        f16.FetchPartition(partition=i32(p), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20))
        for p in range(partitions)
    )
    return f16.FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(0)),
        min_bytes=i32(0),
        session_id=i32(session_id),
        session_epoch=i32(epoch),
        topics=(f16.FetchTopic(topic_id=topic_id, partitions=fetched),) if partitions else (),
        forgotten_topics_data=(),
    )


def _size(frame: bytes | memoryview, _position: int) -> int:
    return len(frame)


class Tally:
    """One mode's rounds: the broker's CPU and wall time over them, each round trip and answer's size."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.elapsed_s = 0.0
        self.trips: list[float] = []
        self.sizes: list[int] = []

    def summary(self, idle_cpu_per_s: float) -> dict[str, Any]:
        fetches = len(self.trips)
        net = self.cpu_s - idle_cpu_per_s * self.elapsed_s  # less the broker's background work meanwhile
        return {
            "broker_cpu_ms_per_fetch": round(net * 1000 / fetches, 2),
            "round_trip_ms_p50": round(statistics.median(self.trips) * 1000, 2),
            "response_bytes": int(statistics.median(self.sizes)),
        }


async def _rounds(broker: KafkaClient, requests: list[f16.FetchRequest], pid: int, tally: Tally) -> None:
    cpu, wall = cpu_seconds([pid]), time.perf_counter()
    for request in requests:
        started = time.perf_counter()
        tally.sizes.append(await broker.send(request, on_frame=_size))
        tally.trips.append(time.perf_counter() - started)
    tally.cpu_s += cpu_seconds([pid]) - cpu
    tally.elapsed_s += time.perf_counter() - wall


async def _idle_cpu_per_s(pid: int) -> float:
    cpu = cpu_seconds([pid])
    await asyncio.sleep(IDLE_S)
    return (cpu_seconds([pid]) - cpu) / IDLE_S


async def _measure(cluster: LocalCluster, partitions: int, rounds: int) -> dict[str, Any]:
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic(TOPIC, partitions, 1) == ErrorCode.none
        while True:  # until the broker leads every partition
            metadata = await client.metadata(TOPIC)
            if len(metadata.topics[0].partitions) == partitions:
                break
            await asyncio.sleep(0.2)
    finally:
        await client.close()
    topic_id = metadata.topics[0].topic_id
    assert topic_id is not None
    host, port = next((b.host, b.port) for b in metadata.brokers)
    pid = cluster.nodes[1].pid
    assert pid is not None
    await asyncio.sleep(SETTLE_S)  # the partitions' creation done with
    idle_before = await _idle_cpu_per_s(pid)
    sessionless, session = Tally(), Tally()
    async with KafkaClient(host, port) as broker:
        full = _request(topic_id, partitions, 0, -1)
        opened = await broker.send(_request(topic_id, partitions, 0, 0), FetchResponse)
        assert opened.error_code == ErrorCode.none and opened.session_id != 0
        block = max(rounds // BLOCKS, 1)
        epochs = iter(range(1, block * BLOCKS + 1))  # one per incremental fetch, however rounds divides
        for _ in range(BLOCKS):  # the two modes in turn, so that the machine's load falls on both
            await _rounds(broker, [full] * block, pid, sessionless)
            incremental = [_request(topic_id, 0, opened.session_id, next(epochs)) for _ in range(block)]
            await _rounds(broker, incremental, pid, session)
    idle = (idle_before + await _idle_cpu_per_s(pid)) / 2
    return {
        "partitions": partitions,
        "rounds": block * BLOCKS,
        "idle_broker_cpu_ms_per_s": round(idle * 1000, 1),
        "sessionless": sessionless.summary(idle),
        "incremental": session.summary(idle),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fetch-sessions-") as tmp:
        work = Path(tmp)
        (work / "broker.properties").write_text(FAST)
        (work / "controller.properties").write_text("")
        cluster = LocalCluster(
            data_dir=work / "cluster",
            brokers=1,
            broker_config=work / "broker.properties",
            controller_config=work / "controller.properties",
        )
        cluster.start()
        try:
            print(json.dumps(asyncio.run(_measure(cluster, args.partitions, args.rounds)), indent=2))
        finally:
            cluster.kill_all()


if __name__ == "__main__":
    main()
