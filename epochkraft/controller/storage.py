"""A controller's data dir as Kafka's storage tool formats it (``kafka-storage format``): ``meta.properties``
(version 1: cluster.id, node.id and the directory.id that tells this disk from any other of the node) and,
for a dynamic quorum's first controllers, the bootstrap checkpoint
``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`` holding KRaftVersionRecord
(kraft.version 1) and the VotersRecord of the initial voters with their endpoints.

Followed: Formatter (--initial-controllers id@host:port:directory-id,..., --standalone, and
--no-initial-controllers: neither), MetaProperties (the directory id in Kafka's Uuid text form: URL-safe
base64 without padding) and BootstrapDirectory / RecordsSnapshotWriter for the checkpoint's layout. A
directory id is random for a new disk; --initial-controllers names this disk's own.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from epochkraft.config import ConfigError, parse_host_port
from epochkraft.files import write_atomically
from epochkraft.metadata.snapshot import SnapshotId, encode_snapshot, snapshot_filename
from epochkraft.metadata.snapshot_file import read_snapshot_file
from epochkraft.raft.batches import read_membership, snapshot_membership
from epochkraft.raft.voter_set import KRAFT_VERSION_1, Endpoint, ReplicaKey, VoterSet

META_PROPERTIES = "meta.properties"
LOG_DIR_NAME = "__cluster_metadata-0"
BOOTSTRAP_SNAPSHOT = SnapshotId(0, 0)


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError for anything else."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{text!r} is not a Kafka uuid") from exc
    if len(raw) != 16 or len(text) != 22:
        raise ValueError(f"{text!r} is not a Kafka uuid")
    return uuid.UUID(bytes=raw)


def random_directory_id() -> uuid.UUID:
    """Uuid.randomUuid: never a reserved id (zero, one, or the MIGRATING/LOST/UNASSIGNED ones, all below
    100 in Kafka) nor one whose text starts with '-'."""
    while True:
        value = uuid.uuid4()
        if value.int >= 100 and not kafka_uuid(value).startswith("-"):
            return value


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: uuid.UUID

    def text(self) -> str:
        return (
            "#\n"
            f"cluster.id={self.cluster_id}\n"
            f"directory.id={kafka_uuid(self.directory_id)}\n"
            f"node.id={self.node_id}\n"
            "version=1\n"
        )


def read_meta_properties(data_dir: Path) -> MetaProperties | None:
    """The data dir's meta.properties (None: not formatted); ConfigError when unreadable."""
    path = data_dir / META_PROPERTIES
    if not path.exists():
        return None
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _sep, value = line.partition("=")
            props[key.strip()] = value.strip()
    try:
        if props.get("version") != "1":
            raise ValueError(f"version {props.get('version')}")
        return MetaProperties(
            props["cluster.id"], int(props["node.id"]), parse_kafka_uuid(props["directory.id"])
        )
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{path}: not a meta.properties of version 1 ({exc})") from exc


@dataclass(frozen=True, slots=True)
class InitialController:
    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID


def parse_initial_controllers(text: str) -> list[InitialController]:
    """--initial-controllers: ``id@host:port:directory-id`` separated by commas (Formatter's form)."""
    out: list[InitialController] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        node, sep, rest = item.partition("@")
        address, colon, directory = rest.rpartition(":")
        try:
            if not sep or not colon:
                raise ValueError("not id@host:port:directory-id")
            host, port = parse_host_port(address)
            out.append(InitialController(int(node), host, port, parse_kafka_uuid(directory)))
        except (ValueError, ConfigError) as exc:
            raise ConfigError(f"--initial-controllers: {item!r}: {exc}") from exc
    if not out or len({c.node_id for c in out}) != len(out):
        raise ConfigError("--initial-controllers: empty, or a node id given twice")
    return out


def initial_voter_set(controllers: list[InitialController], listener: str) -> VoterSet:
    return VoterSet(
        tuple(ReplicaKey(c.node_id, c.directory_id) for c in controllers),
        tuple((c.node_id, (Endpoint(listener, c.host, c.port),)) for c in controllers),
    )


def format_controller_dir(
    data_dir: Path,
    cluster_id: str,
    node_id: int,
    *,
    initial_voters: VoterSet | None = None,
    now_ms: int = 0,
) -> MetaProperties:
    """Formats ``data_dir`` unless it already is (``--ignore-formatted``), and returns its meta.properties.
    ``initial_voters``: the bootstrap voter set (this node's directory id taken from it when it is one of
    them); None formats with no initial controllers (a static quorum, or a controller to be added)."""
    existing = read_meta_properties(data_dir)
    if existing is not None:
        if existing.cluster_id != cluster_id or existing.node_id != node_id:
            raise ConfigError(
                f"{data_dir} is formatted for cluster {existing.cluster_id} node {existing.node_id}, not "
                f"cluster {cluster_id} node {node_id}"
            )
        return existing
    if held := log_held(data_dir):
        raise ConfigError(
            f"{data_dir} has no {META_PROPERTIES} but holds {held}: not formatting it again (a disk that "
            "lost its meta.properties is a lost disk: wipe it and start without --initial-controllers or "
            "--standalone, an observer with a new directory id)"
        )
    own = initial_voters.key_of(node_id) if initial_voters is not None else None
    directory_id = own.directory_id if own is not None and own.directory_id else random_directory_id()
    log_dir = data_dir / LOG_DIR_NAME
    log_dir.mkdir(parents=True, exist_ok=True)
    if initial_voters is not None:
        batches = encode_snapshot(
            BOOTSTRAP_SNAPSHOT,
            [],
            last_contained_log_timestamp=now_ms,
            now_ms=now_ms,
            membership=snapshot_membership(initial_voters, KRAFT_VERSION_1),
        )
        write_atomically(log_dir / snapshot_filename(BOOTSTRAP_SNAPSHOT), b"".join(batches))
    meta = MetaProperties(cluster_id, node_id, directory_id)
    write_atomically(data_dir / META_PROPERTIES, meta.text())  # last: a torn format is formatted again
    return meta


def log_held(data_dir: Path) -> str | None:
    """What in ``data_dir`` shows that it has held a Raft log (a quorum-state, a log segment, a snapshot
    other than the bootstrap checkpoint of a format torn before its meta.properties); None: nothing."""
    log_dir = data_dir / LOG_DIR_NAME
    if not log_dir.is_dir():
        return None
    bootstrap = snapshot_filename(BOOTSTRAP_SNAPSHOT)
    for path in sorted(log_dir.iterdir()):
        name = path.name
        if name.startswith("quorum-state") or name.endswith(".log"):
            return name
        if name.endswith(".checkpoint") and name != bootstrap:
            return name
    return None


def bootstrap_voters(data_dir: Path) -> tuple[VoterSet | None, int]:
    """The bootstrap checkpoint's voter set and kraft.version ((None, 0): none, a static quorum)."""
    log_dir = data_dir / LOG_DIR_NAME
    if not (log_dir / snapshot_filename(BOOTSTRAP_SNAPSHOT)).exists():
        return None, 0
    return read_membership(read_snapshot_file(log_dir, BOOTSTRAP_SNAPSHOT).membership)
