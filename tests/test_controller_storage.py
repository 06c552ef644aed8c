"""A controller's data dir as Kafka's storage tool formats it (controller/storage.py), and a dynamic quorum's
voter set on disk: KRaftVersionRecord and VotersRecord as control records of the metadata log
(raft/batches.py), in snapshots and in the bootstrap checkpoint, read back when the log is opened."""

from __future__ import annotations

import uuid

import pytest

from epochkraft.config import ConfigError
from epochkraft.controller.metadata_raft_log import MetadataRaftLog
from epochkraft.controller.storage import (
    BOOTSTRAP_SNAPSHOT,
    LOG_DIR_NAME,
    bootstrap_voters,
    format_controller_dir,
    initial_voter_set,
    kafka_uuid,
    parse_initial_controllers,
    parse_kafka_uuid,
    read_meta_properties,
)
from epochkraft.metadata.snapshot import SnapshotId, decode_snapshot, encode_snapshot, snapshot_filename
from epochkraft.raft.batches import (
    KRAFT_VERSION,
    KRAFT_VOTERS,
    batch_entry,
    encode_kraft_version,
    encode_voters,
    entry_batch,
    read_membership,
    snapshot_membership,
)
from epochkraft.raft.log import LeaderChangeMessage, LogEntry
from epochkraft.raft.voter_set import (
    KRAFT_VERSION_1,
    Endpoint,
    KRaftVersionRecord,
    ReplicaKey,
    VoterSet,
    VotersRecord,
)

DIR1, DIR2, DIR3 = (uuid.UUID(int=1000 + n) for n in range(1, 4))
INITIAL = f"1@127.0.0.1:9301:{kafka_uuid(DIR1)},2@localhost:9302:{kafka_uuid(DIR2)},3@127.0.0.1:9303:{kafka_uuid(DIR3)}"


def three_voters() -> VoterSet:
    return initial_voter_set(parse_initial_controllers(INITIAL), "CONTROLLER")


def test_directory_ids_in_kafkas_uuid_form():
    """Uuid.toString / Uuid.fromString: URL-safe base64 without padding (Uuid.ONE_UUID is AAAA...AQ)."""
    assert kafka_uuid(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert parse_kafka_uuid("AAAAAAAAAAAAAAAAAAAAAQ") == uuid.UUID(int=1)
    for bad in ("", "AAAA", "AAAAAAAAAAAAAAAAAAAAAQ==", "not a uuid at all!!!!!"):
        with pytest.raises(ValueError):
            parse_kafka_uuid(bad)


def test_parse_initial_controllers():
    """Formatter's --initial-controllers: id@host:port:directory-id, separated by commas."""
    voters = three_voters()
    assert voters.voters == (ReplicaKey(1, DIR1), ReplicaKey(2, DIR2), ReplicaKey(3, DIR3))
    assert voters.endpoints_of(2) == (Endpoint("CONTROLLER", "localhost", 9302),)
    for bad in (
        "",
        "1@127.0.0.1:9301",
        f"x@h:1:{kafka_uuid(DIR1)}",
        f"1@h:1:{kafka_uuid(DIR1)},1@h:2:{kafka_uuid(DIR2)}",
    ):
        with pytest.raises(ConfigError):
            parse_initial_controllers(bad)


def test_format_with_initial_controllers(tmp_path):
    """Formatter with --initial-controllers: meta.properties v1 with this node's directory id from the list,
    and the bootstrap checkpoint 0-0 holding kraft.version 1 and the voters with their endpoints."""
    meta = format_controller_dir(tmp_path, "cluster-a", 2, initial_voters=three_voters())
    assert (meta.cluster_id, meta.node_id, meta.directory_id) == ("cluster-a", 2, DIR2)
    text = (tmp_path / "meta.properties").read_text()
    assert "version=1" in text and f"directory.id={kafka_uuid(DIR2)}" in text and "node.id=2" in text
    assert (tmp_path / LOG_DIR_NAME / snapshot_filename(BOOTSTRAP_SNAPSHOT)).exists()
    assert bootstrap_voters(tmp_path) == (three_voters(), KRAFT_VERSION_1)


def test_format_without_initial_controllers_makes_a_new_directory_id(tmp_path):
    """--no-initial-controllers: a random directory id and no bootstrap checkpoint (the controller starts as
    an observer until it is added); formatting again keeps what is there (--ignore-formatted)."""
    first = format_controller_dir(tmp_path / "a", "cluster-a", 4)
    other = format_controller_dir(tmp_path / "b", "cluster-a", 4)
    assert first.directory_id != other.directory_id
    assert bootstrap_voters(tmp_path / "a") == (None, 0)
    assert format_controller_dir(tmp_path / "a", "cluster-a", 4, initial_voters=three_voters()) == first
    assert read_meta_properties(tmp_path / "a") == first
    with pytest.raises(ConfigError):
        format_controller_dir(tmp_path / "a", "cluster-b", 4)


def test_voters_record_bytes_as_kafka_writes_them():
    """VotersRecord v0 (VotersRecord.json): version, then per voter its id, directory id, endpoints (name,
    host, uint16 port) and KRaftVersionFeature (min, max), compact arrays and empty tagged fields."""
    voters = VoterSet((ReplicaKey(1, uuid.UUID(int=1)),), ((1, (Endpoint("C", "h", 9093),)),))
    expected = (
        b"\x00\x00"  # version 0
        + b"\x02"  # one voter
        + b"\x00\x00\x00\x01"  # voter id
        + uuid.UUID(int=1).bytes
        + b"\x02"
        + b"\x02C"
        + b"\x02h"
        + b"\x23\x85"
        + b"\x00"  # one endpoint: name, host, port, tags
        + b"\x00\x00\x00\x01\x00"  # KRaftVersionFeature: min 0, max 1, tags
        + b"\x00"  # the voter's tags
        + b"\x00"  # the record's tags
    )
    assert encode_voters(voters) == expected
    assert encode_kraft_version(1) == b"\x00\x00\x00\x01\x00"


def test_control_records_round_trip_as_log_entries():
    for value in (
        VotersRecord(three_voters()),
        KRaftVersionRecord(KRAFT_VERSION_1),
        LeaderChangeMessage(1, (1, 2)),
    ):
        entry = LogEntry(3, value)
        assert batch_entry(entry_batch(entry, 7)) == entry


def test_snapshot_holds_the_voter_set():
    """RecordsSnapshotWriter.Builder: KRaftVersionRecord and VotersRecord follow the header in its batch."""
    membership = snapshot_membership(three_voters(), KRAFT_VERSION_1)
    assert [kind for kind, _ in membership] == [KRAFT_VERSION, KRAFT_VOTERS]
    data = b"".join(
        encode_snapshot(
            SnapshotId(10, 2), [], last_contained_log_timestamp=5, now_ms=5, membership=membership
        )
    )
    snapshot = decode_snapshot(data, SnapshotId(10, 2))
    assert read_membership(snapshot.membership) == (three_voters(), KRAFT_VERSION_1)
    assert snapshot_membership(three_voters(), 0) == ()  # a static quorum's snapshot holds none


def test_metadata_log_reads_the_voter_set_back(tmp_path):
    """KRaftControlRecordStateMachine: the bootstrap checkpoint's voters, then the log's VotersRecords, after
    a restart as before it."""
    format_controller_dir(tmp_path, "cluster-a", 1, initial_voters=three_voters())
    log = MetadataRaftLog(tmp_path, fsync=False)
    assert log.voter_history.last_value() == three_voters() and log.voter_history.kraft_version() == 1
    four = three_voters().add_voter(ReplicaKey(4, uuid.UUID(int=4)), (Endpoint("CONTROLLER", "h", 4),))
    assert four is not None
    log.append(LogEntry(1, LeaderChangeMessage(1, (1, 2, 3))))
    log.append(LogEntry(1, VotersRecord(four)))
    log.close()
    reopened = MetadataRaftLog(tmp_path, fsync=False)
    assert reopened.end_offset == 2 and reopened.voter_history.last_value() == four
    reopened.truncate_to(1)
    assert reopened.voter_history.last_value() == three_voters()
    reopened.close()


def test_a_new_disk_is_formatted_with_no_initial_controllers(tmp_path):
    """cluster restart --wipe of a dynamic quorum's voter: its arguments lose --initial-controllers, so the
    new disk gets a new directory id and no voter set; with them it would be formatted as the old voter."""
    from epochkraft.harness.processes import args_for_new_disk

    args = ["controller", "--node-id", "1", "--initial-controllers", INITIAL, "--data-dir", str(tmp_path)]
    assert args_for_new_disk(args) == ["controller", "--node-id", "1", "--data-dir", str(tmp_path)]
    assert args_for_new_disk(args_for_new_disk(args)) == args_for_new_disk(args)
    old = format_controller_dir(tmp_path / "old", "c", 1, initial_voters=three_voters())
    new = format_controller_dir(tmp_path / "new", "c", 1)
    assert old.directory_id == DIR1 and new.directory_id != DIR1
    assert bootstrap_voters(tmp_path / "new") == (None, 0)


def test_a_new_disk_loses_standalone_too():
    """--standalone on a new disk would make the wiped controller a one-voter quorum of its own."""
    from epochkraft.harness.processes import args_for_new_disk

    args = ["controller", "--node-id", "1", "--standalone", "--data-dir", "d"]
    assert args_for_new_disk(args) == ["controller", "--node-id", "1", "--data-dir", "d"]


def test_a_dir_that_held_a_log_is_not_formatted_again(tmp_path):
    """A data dir without meta.properties but with a quorum-state, a log segment or a snapshot is not
    formatted (it would take a directory id and vote with whatever is left): ConfigError."""
    for name in ("quorum-state", "00000000000000000000.log", "00000000000000000010-0000000001.checkpoint"):
        data_dir = tmp_path / name
        (data_dir / LOG_DIR_NAME).mkdir(parents=True)
        (data_dir / LOG_DIR_NAME / name).write_bytes(b"")
        with pytest.raises(ConfigError, match="holds"):
            format_controller_dir(data_dir, "c", 1, initial_voters=three_voters())
        assert read_meta_properties(data_dir) is None
    # a format torn before its meta.properties (the bootstrap checkpoint alone) is formatted again
    torn = tmp_path / "torn"
    (torn / LOG_DIR_NAME).mkdir(parents=True)
    (torn / LOG_DIR_NAME / snapshot_filename(BOOTSTRAP_SNAPSHOT)).write_bytes(b"")
    assert format_controller_dir(torn, "c", 1, initial_voters=three_voters()).directory_id == DIR1


def _controller_argv(data_dir, *flags: str) -> list[str]:
    return [
        "--node-id",
        "1",
        "--listen",
        "127.0.0.1:9301",
        "--cluster-id",
        "c",
        "--data-dir",
        str(data_dir),
        "--override",
        "controller.quorum.bootstrap.servers=127.0.0.1:9301,localhost:9302,127.0.0.1:9303",
        *flags,
    ]


@pytest.mark.parametrize("flags", [("--initial-controllers", INITIAL), ("--standalone",)])
def test_a_wiped_voter_started_with_its_first_flags_refuses(tmp_path, monkeypatch, flags):
    """A voter whose disk was wiped, started again with the flags it was first formatted with: the daemon
    formats only with --format-only, so it refuses (exit 2) rather than take its old directory id and vote
    with an empty log (--initial-controllers) or become a quorum of its own (--standalone). Without them
    it starts as an observer with a new directory id."""
    import shutil

    from epochkraft.server import controller_daemon as daemon

    served: list[str] = []

    async def serve(args, settings, listen):
        served.append(args.data_dir)
        return 0

    monkeypatch.setattr(daemon, "serve", serve)
    data_dir = tmp_path / "controller-1"
    first = format_controller_dir(data_dir, "c", 1, initial_voters=three_voters())
    assert daemon.main(_controller_argv(data_dir, *flags)) == 0  # formatted: starts
    assert served == [str(data_dir)]

    shutil.rmtree(data_dir)  # the disk is lost
    assert daemon.main(_controller_argv(data_dir, *flags)) == daemon.EXIT_CONFIG_ERROR
    assert served == [str(data_dir)] and read_meta_properties(data_dir) is None

    assert daemon.main(_controller_argv(data_dir)) == 0  # without them: a new disk, an observer
    assert served == [str(data_dir)] * 2
    new = read_meta_properties(data_dir)
    assert new is not None and new.directory_id not in (first.directory_id, DIR1)
    assert bootstrap_voters(data_dir) == (None, 0)

    # the format step of its own (kafka-storage format): formats a new dir, then exits
    fresh = tmp_path / "fresh"
    assert daemon.main(_controller_argv(fresh, *flags, "--format-only")) == 0
    made = read_meta_properties(fresh)
    assert made is not None and (flags[0] == "--standalone" or made.directory_id == DIR1)
    voters = bootstrap_voters(fresh)[0]
    assert voters is not None and voters.key_of(1) == ReplicaKey(1, made.directory_id)
    assert served == [str(data_dir)] * 2


def test_a_control_batch_of_several_records():
    """Kafka's new leader writes LeaderChangeMessage, KRaftVersionRecord and VotersRecord in one control
    batch: every record is read, each at its offset, and the batch's bytes are kept as they are."""
    from epochkraft.protocol.records import control_records_batch
    from epochkraft.raft.batches import LEADER_CHANGE, encode_leader_change
    from epochkraft.raft.log import RaftLog

    batch = control_records_batch(
        0,
        4,
        [
            (LEADER_CHANGE, encode_leader_change(LeaderChangeMessage(1, (1, 2, 3), (1, 2)))),
            (KRAFT_VERSION, encode_kraft_version(KRAFT_VERSION_1)),
            (KRAFT_VOTERS, encode_voters(three_voters())),
        ],
        0,
    )
    entry = batch_entry(batch)
    assert entry.epoch == 4 and entry.records == 3 and entry.is_control
    assert entry.control == (
        LeaderChangeMessage(1, (1, 2, 3), (1, 2)),
        KRaftVersionRecord(KRAFT_VERSION_1),
        VotersRecord(three_voters()),
    )
    assert entry_batch(entry, 0) == batch
    log = RaftLog()
    assert log.append(entry) == 2
    history = log.voter_history
    assert history.last_offset() == 2 and history.last_value() == three_voters()
    assert history.kraft_version_at_or_before(0) == 0 and history.kraft_version_at_or_before(1) == 1
    log.truncate_to(0)
    assert history.last_value() is None and history.kraft_version() == 0


def test_kraft_version_at_an_offset():
    """The kraft.version a snapshot at an offset holds is the one at that offset, not the latest."""
    from epochkraft.raft.voter_set import VoterSetHistory

    history = VoterSetHistory()
    assert history.kraft_version_at_or_before(5) == 0
    history.add_kraft_version_at(10, KRAFT_VERSION_1)
    assert history.kraft_version_at_or_before(9) == 0
    assert history.kraft_version_at_or_before(10) == 1
    assert history.kraft_version() == 1
