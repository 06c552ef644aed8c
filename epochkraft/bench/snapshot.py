"""Metadata snapshot figures: ``python -m epochkraft.bench.snapshot [--partitions 100000] [--churn 2]``.

A controller is driven in process through its request API (3 brokers, topics of 100 partitions, RF 3),
then every partition's ISR is shrunk and expanded ``--churn`` times (AlterPartition, 1,000 partitions per
request) so the log holds more than the image. Measured: image -> records -> checkpoint file (and the part
of it on the event loop: the image copy, plus the loop's longest stall while the daemon's snapshotter
writes on its worker thread, three snapshots), snapshot load, full log replay, the file and log sizes, and two restarts of
the real controller daemon on those files, with the snapshot and without it: time to its ready line,
replay seconds from its log, and resident memory (VmHWM, VmRSS).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.create_topics.v7 import request as ct
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from epochkraft.bench.controller_load import CLUSTER, heartbeat, registration
from epochkraft.controller.controller import Controller
from epochkraft.controller.snapshots import MetadataSnapshotter, write_image_snapshot
from epochkraft.harness.processes import LocalProcess
from epochkraft.metadata.snapshot import SnapshotId, copy_image, image_records
from epochkraft.metadata.snapshot_file import read_snapshot_file
from epochkraft.server.controller_daemon import LOG_DIR_NAME, SEGMENT_NAME

TOPIC_SIZE = 100
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))


def build(partitions: int, churn: int) -> Controller:
    controller = Controller(CLUSTER)
    now = 1_000
    controller.bootstrap(now)
    epochs: dict[int, int] = {}
    for broker_id in (1, 2, 3):
        epochs[broker_id] = controller.register_broker(now, registration(broker_id)).broker_epoch
        controller.heartbeat(now, heartbeat(broker_id, epochs[broker_id]))
    for t in range(partitions // TOPIC_SIZE):
        topic = ct.CreatableTopic(
            name=TopicName(f"topic-{t:05d}"),
            num_partitions=i32(TOPIC_SIZE),
            replication_factor=i16(3),
            assignments=(),
            configs=(),
        )
        request = ct.CreateTopicsRequest(topics=(topic,), timeout=TIMEOUT, validate_only=False)
        assert controller.create_topics(now, request).topics[0].error_code == 0
    for _ in range(churn):
        for shrink in (True, False):
            _alter_all(controller, now, epochs, shrink)
    return controller


def _alter_all(controller: Controller, now: int, epochs: dict[int, int], shrink: bool) -> None:
    by_leader: dict[int, list[tuple[Any, ap3.PartitionData]]] = {1: [], 2: [], 3: []}
    for topic, index, p in controller.replication.partitions():
        isr = p.replicas[:2] if shrink else p.replicas
        data = ap3.PartitionData(
            partition_index=i32(index),
            leader_epoch=i32(p.leader_epoch),
            new_isr_with_epochs=tuple(
                ap3.BrokerState(broker_id=BrokerId(b), broker_epoch=i64(epochs[b])) for b in isr
            ),
            leader_recovery_state=i8(0),
            partition_epoch=i32(p.partition_epoch),
        )
        by_leader[p.leader].append((topic.topic_id, data))
    for leader, items in by_leader.items():
        for start in range(0, len(items), 1000):
            chunk = items[start : start + 1000]
            topics: dict[Any, list[ap3.PartitionData]] = {}
            for topic_id, data in chunk:
                topics.setdefault(topic_id, []).append(data)
            request = ap3.AlterPartitionRequest(
                broker_id=BrokerId(leader),
                broker_epoch=i64(epochs[leader]),
                topics=tuple(ap3.TopicData(topic_id=t, partitions=tuple(ps)) for t, ps in topics.items()),
            )
            controller.alter_partition(now, request)


class _Quiet:
    def info(self, *_a: object, **_k: object) -> None: ...

    def error(self, event: str, **fields: object) -> None:
        raise RuntimeError(f"{event} {fields}")


async def loop_stall_during_snapshot(controller: Controller, directory: Path) -> dict[str, float]:
    """The event loop's longest gap between 1 ms ticks while the daemon's snapshotter writes."""
    snapshotter = MetadataSnapshotter(controller, directory, 1 << 40, _Quiet())
    longest = 0.0
    done = False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    task = snapshotter.start()
    assert task is not None
    await task
    total = time.perf_counter() - started
    done = True
    await tick
    return {
        "snapshot_write_in_daemon_s": round(total, 3),
        "event_loop_longest_stall_ms": round(longest * 1000, 1),
    }


def restart(data_dir: Path, work: Path, name: str) -> dict[str, Any]:
    process = LocalProcess(
        "controller",
        ["controller", "--listen", "127.0.0.1:0", "--cluster-id", CLUSTER, "--data-dir", str(data_dir)],
        work / f"{name}.log",
    )
    started = time.monotonic()
    process.start(timeout=300)
    ready = time.monotonic() - started
    status = Path(f"/proc/{process.pid}/status").read_text()
    memory = {
        line.split(":")[0]: int(line.split()[1]) // 1024
        for line in status.splitlines()
        if line.startswith("Vm")
    }
    process.stop()
    replay = next(
        json.dumps(line.split("metadata log replayed", 1)[1].strip())
        for line in process.log_text().splitlines()
        if "metadata log replayed" in line
    )
    return {
        "ready_s": round(ready, 2),
        "VmHWM_MB": memory["VmHWM"],
        "VmRSS_MB": memory["VmRSS"],
        "log": replay,
    }


def run(partitions: int, churn: int, work: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {"partitions": partitions, "isr_churn_rounds": churn}
    started = time.perf_counter()
    controller = build(partitions, churn)
    figures["build_s"] = round(time.perf_counter() - started, 1)
    log_data = controller.standalone_log.read(0, 1 << 40)
    figures["log_records"] = controller.log.next_offset
    figures["log_MB"] = round(len(log_data) / 1e6, 1)

    data_dir = work / "data"
    log_dir = data_dir / LOG_DIR_NAME
    log_dir.mkdir(parents=True)
    (log_dir / SEGMENT_NAME).write_bytes(log_data)

    started = time.perf_counter()
    copy = copy_image(controller.image)
    figures["image_copy_on_event_loop_ms"] = round((time.perf_counter() - started) * 1000, 1)
    started = time.perf_counter()
    figures["snapshot_records"] = len(image_records(copy, 20))
    figures["image_to_records_s"] = round(time.perf_counter() - started, 2)
    snapshot_id = SnapshotId(controller.log.next_offset, 0)
    started = time.perf_counter()
    path, size = write_image_snapshot(log_dir, snapshot_id, copy, 0, 0)
    figures["snapshot_write_s"] = round(time.perf_counter() - started, 2)
    figures["snapshot_MB"] = round(size / 1e6, 2)

    started = time.perf_counter()
    snapshot = read_snapshot_file(log_dir, snapshot_id)
    loaded = Controller(CLUSTER)
    loaded.load_snapshot(snapshot)
    figures["snapshot_load_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    replayed = Controller(CLUSTER)
    replayed.load(log_data)
    figures["full_replay_s"] = round(time.perf_counter() - started, 2)
    assert loaded.image.topics.keys() == replayed.image.topics.keys()

    stalls = []
    for attempt in range(3):  # the collector's timing varies from one snapshot to the next
        stall_dir = work / f"stall-{attempt}"
        stall_dir.mkdir()
        stalls.append(asyncio.run(loop_stall_during_snapshot(controller, stall_dir)))
    figures["snapshot_write_in_daemon_s"] = [s["snapshot_write_in_daemon_s"] for s in stalls]
    figures["event_loop_longest_stall_ms"] = [s["event_loop_longest_stall_ms"] for s in stalls]
    del controller, copy, loaded, replayed, snapshot

    figures["restart_with_snapshot"] = restart(data_dir, work, "with-snapshot")
    path.unlink()
    figures["restart_full_replay"] = restart(data_dir, work, "full-replay")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--churn", type=int, default=2, help="ISR shrink+expand rounds over every partition")
    parser.add_argument("--work-dir", help="kept after the run (default: a temporary directory, removed)")
    args = parser.parse_args()
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench-snapshot-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        figures = run(args.partitions, args.churn, work / uuid.uuid4().hex[:8])
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
