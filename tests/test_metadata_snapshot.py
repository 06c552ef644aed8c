"""Metadata snapshots in Kafka's checkpoint format: image -> file -> image round trips (after a faulty
simulated run, and with configs, ACLs, SCRAM credentials, a reassignment, a fenced broker, one in
controlled shutdown and a RECOVERING partition), the layout Kafka's RecordsSnapshotWriter writes (read
back by Kafka's own DumpLogSegments, and Kafka's bootstrap.checkpoint read by us), corrupt and truncated
snapshots refused with a fall back to the previous one or the whole log, and a real controller restarted
from a snapshot plus the log's tail."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest
from kio.schema.create_acls.v3 import request as ca

from epochkraft.controller.controller import METADATA_VERSION, Controller
from epochkraft.controller.snapshots import write_image_snapshot
from epochkraft.harness.ports import free_port
from epochkraft.metadata.image import MetadataImage, image_after
from epochkraft.metadata.registrations import LeaderRecoveryState
from epochkraft.metadata.snapshot import (
    SNAPSHOT_FOOTER,
    SNAPSHOT_HEADER,
    SnapshotError,
    SnapshotId,
    copy_image,
    decode_snapshot,
    encode_snapshot,
    image_records,
    parse_snapshot_filename,
    snapshot_filename,
)
from epochkraft.metadata.snapshot_file import (
    delete_old_snapshots,
    newest_valid_snapshot,
    read_snapshot_file,
    remove_partial_snapshots,
    snapshot_ids,
)
from epochkraft.protocol.metadata_codec import decode_metadata_record
from epochkraft.protocol.metadata_records import FeatureLevelRecord
from epochkraft.protocol.records import decode_batches, iter_batches
from epochkraft.server.controller_daemon import bootstrap_scram, load_newest_snapshot
from epochkraft.sim.cluster import SCHEDULES, SimCluster
from epochkraft.sim.nodes import SimController
from tests.controller_context import CLUSTER_ID, ControllerContext


def image_view(image: MetadataImage) -> dict[str, object]:
    return {
        "brokers": image.brokers,
        "topics": {t: (i.name, i.partitions) for t, i in image.topics.items()},
        "topic_ids": image.topic_ids,
        "configs": image.configs,
        "scram": image.scram_credentials,
        "acls": image.acls,
        "client_quotas": image.client_quotas,
    }


def through_a_file(controller: Controller, directory: Path) -> Controller:
    """Writes the controller's image as a checkpoint file and loads it into a new controller."""
    snapshot_id = SnapshotId(controller.log.next_offset, 0)
    write_image_snapshot(directory, snapshot_id, controller.image, 1_000, 2_000)
    loaded = Controller(CLUSTER_ID)
    loaded.load_snapshot(read_snapshot_file(directory, snapshot_id))
    return loaded


def busy_context() -> ControllerContext:
    """Every kind of state the image holds, including the in-between ones."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3, 4)
    ctx.create_topic("orders", [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    ctx.create_topic("audit", [[4, 1]])
    ctx.incremental_alter_configs(
        {(2, "orders"): {"min.insync.replicas": (0, "2")}, (4, ""): {"x": (0, "1")}}
    )
    assert ctx.reassign("orders", {0: [4, 2, 3]})[0][0] == 0  # broker 4 is an adding replica
    ctx.fence_brokers(2)
    ctx.shut_down_brokers(3)
    ctx.fence_brokers(4)
    ctx.fence_brokers(1)  # audit-0 is left without a leader
    controller = ctx.controller
    controller.add_scram_credentials(ctx.now, bootstrap_scram(["SCRAM-SHA-256=[name=alice,password=secret]"]))
    creation = ca.AclCreation(
        resource_type=2,
        resource_name="orders",
        resource_pattern_type=3,
        principal="User:alice",
        host="*",
        operation=3,
        permission_type=3,
    )
    results = controller.create_acls(ctx.now, ca.CreateAclsRequest(creations=(creation,)))
    assert [r.error_code for r in results] == [0]
    quotas = {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("client-id", None),): {"request_percentage": 50.0},
    }
    assert all(error == 0 for error, _ in ctx.alter_client_quotas(quotas).values())
    return ctx


def test_image_round_trips_through_a_checkpoint_file_after_a_faulty_run(tmp_path):
    for seed in (1, 2, 3):
        sim = SimCluster(seed, SCHEDULES["random"](seed))
        assert sim.run().violation is None
        assert isinstance(sim.controllers, SimController)
        controller = sim.controllers.core
        directory = tmp_path / str(seed)
        directory.mkdir()
        loaded = through_a_file(controller, directory)
        assert image_view(loaded.image) == image_view(controller.image)
        assert any(
            p.partition_epoch > 0 for t in controller.image.topics.values() for p in t.partitions.values()
        )


def test_image_round_trips_with_configs_acls_credentials_reassignment_and_broker_states(tmp_path):
    ctx = busy_context()
    image = ctx.controller.image
    states = {b.broker_id: (b.fenced, b.in_controlled_shutdown) for b in image.brokers.values()}
    assert states == {1: (True, False), 2: (True, False), 3: (False, True), 4: (True, False)}, states
    assert image.topic("audit").partitions[0].leader == -1
    assert image.topic("orders").partitions[0].adding_replicas == (4,)
    assert image.acls and image.scram_credentials and image.configs and image.client_quotas
    loaded = through_a_file(ctx.controller, tmp_path)
    assert image_view(loaded.image) == image_view(image)


def test_unclean_leader_recovery_state_survives_a_snapshot(tmp_path):
    ctx = ControllerContext(unclean_leader_election_enable=True)
    ctx.brokers_ready(1, 2)
    ctx.create_topic("t", [[1, 2]])
    ctx.alter_partition(1, "t", [1])
    ctx.fence_brokers(1)
    assert ctx.partition("t").leader_recovery_state == LeaderRecoveryState.RECOVERING
    loaded = through_a_file(ctx.controller, tmp_path)
    assert loaded.image.topic("t").partitions == ctx.controller.image.topic("t").partitions


def test_snapshot_is_the_shortest_list_of_current_records():
    ctx = busy_context()
    image = ctx.controller.image
    records = image_records(image, METADATA_VERSION)
    partitions = sum(len(t.partitions) for t in image.topics.values())
    configs = sum(len(v) for v in image.configs.values())
    quotas = sum(len(v) for v in image.client_quotas.values())
    expected = len(image.features) + len(image.brokers) + len(image.topics) + partitions + configs + quotas
    assert len(records) == expected + len(image.acls) + len(image.scram_credentials)
    assert records[0] == FeatureLevelRecord(name="metadata.version", feature_level=METADATA_VERSION)
    assert len(records) < len(ctx.controller.log), "fewer records than the log that built the image"


def test_copy_image_does_not_follow_later_changes():
    ctx = busy_context()
    copy = copy_image(ctx.controller.image)
    before = image_view(copy)
    ctx.unfence_brokers(2)
    ctx.create_topic("later", [[2]])
    ctx.incremental_alter_configs({(2, "orders"): {"min.insync.replicas": (0, "3")}})
    assert image_view(copy) == before != image_view(ctx.controller.image)


# ---- the checkpoint format --------------------------------------------------------------------------
def test_testSnapshotFileNames():
    """Snapshots.filenameFromSnapshotId: 20-digit end offset, 10-digit epoch, .checkpoint."""
    snapshot_id = SnapshotId(1234, 5)
    name = snapshot_filename(snapshot_id)
    assert name == "00000000000000001234-0000000005.checkpoint"
    assert parse_snapshot_filename(name) == (snapshot_id, ".checkpoint")
    assert parse_snapshot_filename(name + ".part") == (snapshot_id, ".checkpoint.part")
    assert parse_snapshot_filename(name + ".deleted") == (snapshot_id, ".checkpoint.deleted")
    assert parse_snapshot_filename("00000000000000000000.log") is None
    assert parse_snapshot_filename("bootstrap.checkpoint") is None


def test_header_and_footer_are_control_batches_as_RecordsSnapshotWriter_writes_them():
    ctx = busy_context()
    snapshot_id = SnapshotId(ctx.controller.log.next_offset, 7)
    records = image_records(ctx.controller.image, METADATA_VERSION)
    batches = decode_batches(
        b"".join(
            encode_snapshot(
                snapshot_id, records, last_contained_log_timestamp=42, now_ms=99, max_batch_bytes=300
            )
        )
    )
    header, *middle, footer = batches
    assert header.is_control and footer.is_control and not any(b.is_control for b in middle)
    assert len(middle) > 1, "records split at the batch size"
    assert {b.partition_leader_epoch for b in batches} == {7}, "every batch carries the snapshot's epoch"
    assert header.base_offset == 0 and header.last_offset_delta == 0
    assert header.records[0].key == struct.pack(">hh", 0, SNAPSHOT_HEADER)
    assert header.records[0].value == bytes.fromhex("0000" + "000000000000002a" + "00")  # v0, timestamp 42
    assert footer.records[0].key == struct.pack(">hh", 0, SNAPSHOT_FOOTER)
    assert footer.records[0].value == bytes.fromhex("0000" + "00")
    offsets = [b.base_offset for b in batches]
    assert offsets == sorted(offsets) and footer.base_offset == 1 + len(records)
    assert [decode_metadata_record(r.value) for b in middle for r in b.records] == records


def kafka_tool(main_class: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    from epochkraft.peers.fetch import PeerUnavailable, java_command

    try:
        command = java_command(main_class, args, jvm=["-XX:TieredStopAtLevel=1"])
    except PeerUnavailable as exc:
        pytest.skip(str(exc))
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.slow
def test_kafka_dump_log_segments_reads_our_snapshot(tmp_path):
    ctx = busy_context()
    snapshot_id = SnapshotId(ctx.controller.log.next_offset, 0)
    path, _size = write_image_snapshot(tmp_path, snapshot_id, ctx.controller.image, 1234, 5678)
    result = kafka_tool(
        "org.apache.kafka.tools.DumpLogSegments",
        ["--cluster-metadata-decoder", "--files", str(path)],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Snapshot end offset: {snapshot_id.end_offset}, epoch: 0" in out
    assert 'SnapshotHeader {"version":0,"lastContainedLogTimestamp":1234}' in out
    assert 'SnapshotFooter {"version":0}' in out
    assert out.count('"type":"PARTITION_RECORD"') == 4 and '"addingReplicas":[4]' in out
    assert '"type":"ACCESS_CONTROL_ENTRY_RECORD"' in out and '"type":"USER_SCRAM_CREDENTIAL_RECORD"' in out
    assert "isvalid: false" not in out and "Exception" not in out


@pytest.mark.slow
def test_we_read_the_bootstrap_checkpoint_kafka_storage_format_writes(tmp_path):
    config = tmp_path / "controller.properties"
    config.write_text(
        "process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:19093\n"
        "controller.listener.names=CONTROLLER\nlisteners=CONTROLLER://127.0.0.1:19093\n"
        f"log.dirs={tmp_path / 'data'}\n"
    )
    result = kafka_tool(
        "kafka.tools.StorageTool",
        [
            "format",
            "-t",
            "AAAAAAAAAAAAAAAAAAAAAA",
            "-c",
            str(config),
            "--add-scram",
            "SCRAM-SHA-256=[name=bob,password=x]",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Kafka 4.4 writes the bootstrap records as the metadata log's first snapshot, 0-0 (bootstrap.checkpoint
    # in the log dir before)
    checkpoint = tmp_path / "data" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
    snapshot = decode_snapshot(checkpoint.read_bytes(), SnapshotId(0, 0))
    features = {r.name: r.feature_level for r in snapshot.records if isinstance(r, FeatureLevelRecord)}
    assert "metadata.version" in features
    assert [r.name for r in snapshot.records if not isinstance(r, FeatureLevelRecord)] == ["bob"]


# ---- corrupt and truncated snapshots ------------------------------------------------------------------
@pytest.mark.parametrize(
    "damage",
    [
        "truncated in a batch",
        "cut after a batch",
        "no footer",
        "flipped byte",
        "no header",
        "trailing garbage",
    ],
)
def test_a_damaged_snapshot_is_refused(damage):
    ctx = busy_context()
    snapshot_id = SnapshotId(ctx.controller.log.next_offset, 0)
    records = image_records(ctx.controller.image, METADATA_VERSION)
    encoded = encode_snapshot(
        snapshot_id, records, last_contained_log_timestamp=1, now_ms=2, max_batch_bytes=300
    )
    data = b"".join(encoded)
    sizes = [len(b) for b in encoded]
    assert len(sizes) > 3
    damaged = {
        "truncated in a batch": data[: len(data) - 5],
        "cut after a batch": data[: sum(sizes[:2])],
        "no footer": data[: len(data) - sizes[-1]],
        "flipped byte": data[:100] + bytes([data[100] ^ 0x40]) + data[101:],
        "no header": data[sizes[0] :],
        "trailing garbage": data + b"\x00" * 7,
    }[damage]
    decode_snapshot(data, snapshot_id)  # the undamaged one reads
    with pytest.raises(SnapshotError):
        decode_snapshot(damaged, snapshot_id)


def test_a_corrupt_newest_snapshot_falls_back_to_the_previous_one_then_to_the_log(tmp_path):
    ctx = busy_context()
    first = SnapshotId(ctx.controller.log.next_offset, 0)
    write_image_snapshot(tmp_path, first, ctx.controller.image, 1, 2)
    ctx.unfence_brokers(1)
    ctx.create_topic("newer", [[1]])
    second = SnapshotId(ctx.controller.log.next_offset, 0)
    newest = write_image_snapshot(tmp_path, second, ctx.controller.image, 1, 2)[0]
    (tmp_path / (snapshot_filename(second) + ".part")).write_bytes(b"half")
    assert [p.name for p in remove_partial_snapshots(tmp_path)] == [snapshot_filename(second) + ".part"]

    rejected: list[tuple[SnapshotId, str]] = []
    assert (
        newest_valid_snapshot(tmp_path, second.end_offset, lambda i, r: rejected.append((i, r))).snapshot_id
        == second
    )
    newest.write_bytes(newest.read_bytes()[:-10])
    chosen = newest_valid_snapshot(tmp_path, second.end_offset, lambda i, r: rejected.append((i, r)))
    assert chosen is not None and chosen.snapshot_id == first
    assert rejected[0][0] == second and "truncated" in rejected[0][1]
    # A snapshot past the log's end (a log that lost records) is not used either.
    assert newest_valid_snapshot(tmp_path, first.end_offset - 1) is None
    assert delete_old_snapshots(tmp_path, keep=1) == [first] and snapshot_ids(tmp_path) == [second]


def log_bytes(controller: Controller) -> bytes:
    return controller.log.read(0, 1 << 40)


def test_snapshot_plus_tail_rebuilds_the_state_a_full_replay_does(tmp_path):
    ctx = busy_context()
    snapshot_id = SnapshotId(ctx.controller.log.next_offset, 0)
    write_image_snapshot(tmp_path, snapshot_id, ctx.controller.image, 1, 2)
    ctx.unfence_brokers(1, 2)
    ctx.create_topic("tail", [[1, 2]])
    ctx.incremental_alter_configs({(2, "orders"): {"min.insync.replicas": (1, None)}})
    data = log_bytes(ctx.controller)

    full = Controller(CLUSTER_ID)
    assert full.load(data) == len(ctx.controller.log)
    restored = Controller(CLUSTER_ID)
    loaded_id = load_newest_snapshot(restored, tmp_path, data, _Quiet())
    assert loaded_id == snapshot_id
    replayed = restored.load(data, loaded_id.end_offset)
    assert replayed == len(ctx.controller.log) - snapshot_id.end_offset
    assert image_view(restored.image) == image_view(full.image) == image_view(ctx.controller.image)
    assert restored.log.next_offset == full.log.next_offset and log_bytes(restored) == data
    # Brokers registered before the snapshot are caught up once they reach its last offset (Kafka's
    # registerBrokerRecordOffsets after a snapshot load).
    assert restored.cluster.register_offsets[1] == snapshot_id.last_contained_offset


class _Quiet:
    def __getattr__(self, _name: str):
        return lambda *a, **k: None


def test_a_snapshot_missing_a_topic_is_caught(tmp_path, monkeypatch):
    """The round-trip check is able to fail: drop the last topic from the snapshot and it is noticed."""
    import epochkraft.metadata.snapshot as snapshot_module

    original = snapshot_module.image_records

    def lossy(image: MetadataImage, version: int):
        records = original(image, version)
        last = list(image.topics)[-1]
        return [r for r in records if getattr(r, "topic_id", None) != last]

    monkeypatch.setattr("epochkraft.controller.snapshots.image_records", lossy)
    ctx = busy_context()
    loaded = through_a_file(ctx.controller, tmp_path)
    assert image_view(loaded.image) != image_view(ctx.controller.image)


# ---- a real controller process ----------------------------------------------------------------------


def admin_state(port: int) -> dict[str, object]:
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/state", timeout=10) as response:
        state = json.load(response)
    return {k: state[k] for k in ("metadata_offset", "brokers", "partitions")}


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_controller_restarts_from_its_snapshot_and_the_log_tail(tmp_path):
    import asyncio
    import time

    from epochkraft.net.client import KafkaClient
    from epochkraft.protocol.errors import ErrorCode
    from epochkraft.server.controller_daemon import LOG_DIR_NAME, SEGMENT_NAME
    from tests.test_controller_tcp import Broker, alter_v3, controller, create_topic

    admin = free_port()
    daemon = controller(
        tmp_path,
        "--admin-port",
        str(admin),
        "--session-timeout-ms",
        "60000",
        "--override",
        "metadata.log.max.record.bytes.between.snapshots=2000",
    )
    log_dir = tmp_path / "controller" / LOG_DIR_NAME
    daemon.start()
    try:
        async with KafkaClient("127.0.0.1", daemon.port) as client:
            brokers = {i: Broker(client, i) for i in (1, 2, 3)}
            for b in brokers.values():
                assert await b.register() == ErrorCode.none
                assert not (await b.heartbeat()).is_fenced
            created = await create_topic(client, "orders", [[1, 2, 3]] * 40)
            assert created.error_code == ErrorCode.none
            deadline = time.monotonic() + 30
            while not snapshot_ids(log_dir):
                assert time.monotonic() < deadline, "no snapshot written"
                await asyncio.sleep(0.05)
            snapshot_id = snapshot_ids(log_dir)[-1]
            # The tail: ISR shrinks after the snapshot, and a topic created after it.
            epochs = [(1, brokers[1].epoch), (2, brokers[2].epoch)]
            shrink = await client.send(alter_v3(brokers[1], created.topic_id, epochs))
            assert shrink.topics[0].partitions[0].error_code == ErrorCode.none
            assert (await create_topic(client, "later", [[2, 3, 1]])).error_code == ErrorCode.none
        before = await asyncio.to_thread(admin_state, admin)
        assert before["metadata_offset"] > snapshot_id.end_offset
        assert daemon.stop() == 0
        daemon.start()
        after = await asyncio.to_thread(admin_state, admin)
        assert after == before, "snapshot + tail rebuilt the state the controller had"
        text = daemon.log_text()
        assert "metadata snapshot loaded" in text and snapshot_filename(snapshot_id) in text
        async with KafkaClient("127.0.0.1", daemon.port) as client:
            for b in brokers.values():
                b.client = client
                assert (await b.heartbeat()).error_code == ErrorCode.none, "broker epochs survived"
        # A torn snapshot (and an unfinished .part file) at the next restart: refused, the log replayed whole.
        assert daemon.stop() == 0
        newest = log_dir / snapshot_filename(snapshot_ids(log_dir)[-1])
        intact = newest.read_bytes()
        newest.write_bytes(intact[:-20])
        (log_dir / (newest.name + ".part")).write_bytes(b"unfinished")
        daemon.start()
        assert await asyncio.to_thread(admin_state, admin) == before
        text = daemon.log_text()
        assert "metadata snapshot not used" in text and "deleted an unfinished snapshot" in text
        assert not (log_dir / (newest.name + ".part")).exists()
    finally:
        daemon.kill()
    # The files the daemon wrote: its newest snapshot plus the tail is a full replay of its log.
    newest.write_bytes(intact)
    data = (log_dir / SEGMENT_NAME).read_bytes()
    full = Controller(CLUSTER_ID)
    full.load(data)
    restored = Controller(CLUSTER_ID)
    loaded_id = load_newest_snapshot(restored, log_dir, data, _Quiet())
    assert loaded_id is not None and loaded_id.end_offset > 0
    assert restored.load(data, loaded_id.end_offset) < full.log.next_offset
    assert image_view(restored.image) == image_view(full.image)


async def test_a_threshold_passed_while_a_snapshot_is_written_starts_the_next_one(tmp_path):
    """Appends that pass metadata.log.max.record.bytes.between.snapshots while a snapshot is being written
    start the next one once it is done, not only at a later append (which a quiet cluster may never make):
    otherwise a few large writes leave the log uncut."""
    import asyncio

    import structlog

    from epochkraft.controller.snapshots import MetadataSnapshotter

    ctx = ControllerContext()
    snapshotter = MetadataSnapshotter(ctx.controller, tmp_path, 500, structlog.get_logger(), fsync=False)
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("first", [[1, 2, 3]] * 10)  # past the threshold: a snapshot starts soon
    for _ in range(10):
        await asyncio.sleep(0)
        if snapshotter.written or snapshotter._task is not None:
            break
    assert snapshotter._task is not None
    ctx.create_topic("second", [[1, 2, 3]] * 10)  # past it again while the first is written
    await snapshotter.wait()
    for _ in range(10):
        await asyncio.sleep(0)
        await snapshotter.wait()
    assert snapshotter.written == 2
    assert snapshotter.latest is not None and snapshotter.latest.end_offset == ctx.controller.log.next_offset


def test_client_quotas_delta_finish_snapshot_removes_the_quotas_a_snapshot_lacks():
    """Kafka's ClientQuotasDelta.finishSnapshot: an image that catches up by a snapshot loses the client
    quotas deleted meanwhile, and keeps those the snapshot still holds, each key on its own."""
    from epochkraft.metadata.snapshot import removals_for
    from epochkraft.protocol.metadata_records import ClientQuotaRecord, EntityData

    alice = (EntityData(entity_type="user", entity_name="alice"),)
    default_client = (EntityData(entity_type="client-id", entity_name=None),)
    stale = image_after(
        MetadataImage(),
        (
            ClientQuotaRecord(entity=entity, key=key, value=value)
            for entity, key, value in (
                (alice, "producer_byte_rate", 1000.0),
                (alice, "consumer_byte_rate", 2000.0),
                (default_client, "request_percentage", 50.0),
            )
        ),
    )
    current = image_after(
        MetadataImage(), [ClientQuotaRecord(entity=alice, key="consumer_byte_rate", value=3000.0)]
    )
    records = image_records(current, 20)
    stale = image_after(stale, removals_for(stale, records) + records)
    assert (
        stale.client_quotas == current.client_quotas == {(("user", "alice"),): {"consumer_byte_rate": 3000.0}}
    )


def test_a_single_controllers_snapshots_past_its_log_end_are_deleted_at_start(tmp_path):
    """A snapshot past the log's end holds records the log lost (written but never fsynced before a crash):
    a single controller deletes it at start, rather than only passing over it, so it is never loaded once
    the log, grown past it again, holds a different history. A quorum's are kept (see load_newest_snapshot)."""
    ctx = busy_context()
    data = log_bytes(ctx.controller)
    pos, first = next(iter_batches(data))
    short = data[: pos + first.size]  # the log after a crash: its first batch only
    kept = SnapshotId(first.next_offset, 0)
    write_image_snapshot(tmp_path, kept, ctx.controller.image, 1, 2)
    past = SnapshotId(ctx.controller.log.next_offset, 0)
    write_image_snapshot(tmp_path, past, ctx.controller.image, 1, 2)
    assert load_newest_snapshot(Controller(CLUSTER_ID), tmp_path, short, _Quiet()) == kept
    assert snapshot_ids(tmp_path) == [kept, past]  # a quorum's: kept
    assert (
        load_newest_snapshot(Controller(CLUSTER_ID), tmp_path, short, _Quiet(), delete_past_end=True) == kept
    )
    assert snapshot_ids(tmp_path) == [kept]


async def test_a_single_controller_snapshots_only_what_is_on_disk(tmp_path):
    """The snapshotter of a single controller copies its image at the log's end but writes the file only
    once the group commit's fsync covers that offset (KafkaMetadataLog.createNewSnapshot refuses an id past
    the high watermark), so a crash cannot leave a snapshot holding records the log lost; writes that go on
    meanwhile do not hold the snapshot back."""
    import asyncio
    import threading

    import structlog

    from epochkraft.controller.group_commit import GroupCommit
    from epochkraft.controller.snapshots import MetadataSnapshotter

    release = threading.Event()
    ctx = ControllerContext()
    commit = GroupCommit(ctx.controller.log, lambda: lambda: release.wait(5) or None)
    ctx.controller.log.listeners.append(commit.on_append)
    snapshotter = MetadataSnapshotter(
        ctx.controller,
        tmp_path,
        500,
        structlog.get_logger(),
        fsync=False,
        snapshot_point=commit.snapshot_point,
        durable=commit.durable,
    )
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("first", [[1, 2, 3]] * 10)  # past the threshold
    copied_at = ctx.controller.log.next_offset
    await asyncio.sleep(0.2)
    assert snapshotter.written == 0 and snapshot_ids(tmp_path) == []  # its fsync has not finished
    ctx.create_topic("second", [[1, 2, 3]])  # the writes go on
    release.set()
    await commit.durable(ctx.controller.log.next_offset)
    await snapshotter.wait()
    assert snapshot_ids(tmp_path) == [SnapshotId(copied_at, 0)]
