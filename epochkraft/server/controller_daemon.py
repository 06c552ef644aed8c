"""The controller daemon: the sans-IO Controller wired to a TCP listener, timers and the on-disk log.

``epochkraft controller --listen HOST:PORT --cluster-id ID [--node-id N] [--session-timeout-ms N]
[--data-dir DIR] [--metrics-dir DIR] [--admin-port P] [--config FILE] [--check-config]
[--quorum-voters ID@HOST:PORT,...]``

With --quorum-voters (controller.quorum.voters) the controller is one voter of a static Raft quorum
(controller/quorum.py and quorum_driver.py): its log is the Raft log, records count only once committed, and
it serves brokers and admin clients while it is the active controller (NOT_CONTROLLER otherwise). With
controller.quorum.bootstrap.servers instead, the quorum is dynamic (KIP-853): the voters are in the log,
from the bootstrap checkpoint written when the data dir is formatted with --initial-controllers or
--standalone (controller/storage.py) by ``--format-only``, a step of its own run once before the first
start (kafka-storage format): a controller started with either on an unformatted data dir refuses, and one
started with neither formats a new, empty data dir with no initial controllers (an observer with a new
directory id until an AddRaftVoter adds it). A data dir that lost its meta.properties but holds a log is
never formatted again.
Without a quorum, what follows:

With --data-dir every metadata batch is appended to ``<data-dir>/__cluster_metadata-0/00000000000000000000.log``
(RecordBatch v2, Kafka's log format) before the request that wrote it is answered, and replayed at startup
(a torn tail is cut off), so topics, registrations and broker epochs survive a restart. Heartbeat sessions
are not in the log: after a restart every broker gets one session timeout to heartbeat again. Every
``metadata.log.max.record.bytes.between.snapshots`` bytes of records a snapshot of the metadata image is
written beside the log (``<offset>-<epoch>.checkpoint``, Kafka's format); a restart loads the newest
readable one and replays only the records after it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import random
import signal
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import uvloop
from structlog.typing import FilteringBoundLogger

from epochkraft import logs
from epochkraft.broker.client_quotas import ClientQuotas
from epochkraft.config import ConfigError, load_settings, parse_host_port, parse_overrides
from epochkraft.controller.controller import Controller, partition_row
from epochkraft.controller.group_commit import GroupCommit
from epochkraft.controller.metadata_log import MetadataLog
from epochkraft.controller.metadata_raft_log import MetadataRaftLog
from epochkraft.controller.quorum import ControllerQuorum
from epochkraft.controller.quorum_driver import BOOTSTRAP_ID_BASE, QuorumDriver, parse_voters
from epochkraft.controller.security_control import scram_record
from epochkraft.controller.settings import ControllerSettings
from epochkraft.controller.snapshots import MetadataSnapshotter
from epochkraft.controller.storage import (
    MetaProperties,
    format_controller_dir,
    initial_voter_set,
    kafka_uuid,
    parse_initial_controllers,
    random_directory_id,
    read_meta_properties,
)
from epochkraft.metadata import group_config
from epochkraft.metadata.client_quotas import QuotaEntity
from epochkraft.metadata.segment import find_segment, rewrite_segment
from epochkraft.metadata.snapshot import SnapshotId, snapshot_filename
from epochkraft.metadata.snapshot_file import (
    delete_snapshots_past,
    newest_valid_snapshot,
    read_snapshot_file,
    remove_partial_snapshots,
)
from epochkraft.metrics.admin_flags import add_admin_arguments
from epochkraft.metrics.documents import ControllerLogState, ControllerOwnState, ControllerState, ViewState
from epochkraft.metrics.event_schema import EventFields
from epochkraft.net.listeners import parse_protocol_map
from epochkraft.protocol.api import CONTROLLER
from epochkraft.protocol.metadata_records import UserScramCredentialRecord
from epochkraft.protocol.records import iter_batches, whole_batches
from epochkraft.raft.batches import snapshot_membership
from epochkraft.raft.client import RaftClient
from epochkraft.raft.quorum_state import FollowerState, LeaderState
from epochkraft.raft.replication import RaftSettings
from epochkraft.raft.state_store import FileQuorumStateStore, InvalidQuorumState
from epochkraft.raft.voter_set import Endpoint, ReplicaKey, VoterSet
from epochkraft.security import tls
from epochkraft.security.node import NodeSecurity, controller_protocol
from epochkraft.security.scram import MECHANISMS, credential, parse_add_scram
from epochkraft.server.socket_server import KafkaServer

if TYPE_CHECKING:
    from epochkraft.metrics.admin_http import AdminServer
    from epochkraft.metrics.events import EventLog

LOG_DIR_NAME = "__cluster_metadata-0"
EXIT_INTERNAL_ERROR = 1  # the daemon stopped on an error of its own (its Raft driver failed, say)
EXIT_CONFIG_ERROR = 2
SNAPSHOT_INTERVAL_S = 2.0
# listener slots kept for brokers' registration, heartbeat and metadata clients during a connection flood
CONTROLLER_RESERVED_CONNECTIONS = 64
SEGMENT_NAME = "00000000000000000000.log"


class MetadataLogFile:
    """Append-only file of metadata batches (metadata/segment.py names it by its base offset); torn tails
    are truncated on open; ``trim`` rewrites it from a snapshot's offset. Appends are written at once and
    made durable in groups (controller/group_commit.py: ``syncer`` off the event loop)."""

    def __init__(self, data_dir: Path, fsync: bool = True) -> None:
        self.dir = data_dir / LOG_DIR_NAME
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path, self.base_offset = find_segment(self.dir)
        self.fsync = fsync
        self._file: BinaryIO | None = None  # None before open and after a failed trim

    def trim(self, offset: int, kept: list[bytes]) -> None:
        """The file from ``offset`` on (the batches the log kept), the records before it gone. Should the
        rewrite fail the old file is held open again (the daemon stops on the failure: see serve)."""
        try:
            self.close()
            self.path = rewrite_segment(self.dir, self.path, offset, kept, self.fsync)
            self.base_offset = offset
        finally:
            self.open(sync=False)  # the new file was fsynced by the rewrite; after a failure none may follow

    def read_valid(self) -> tuple[bytes, int]:
        """(bytes of whole, valid batches, bytes cut from a torn tail)."""
        if not self.path.exists():
            return b"", 0
        data = self.path.read_bytes()
        end = 0
        for pos, header in whole_batches(data):
            end = pos + header.size
        cut = len(data) - end
        if cut:
            with open(self.path, "r+b") as f:
                f.truncate(end)
                if self.fsync:  # else the torn tail could come back after a crash, under new appends
                    os.fsync(f.fileno())
        return data[:end], cut

    def open(self, sync: bool = True) -> None:
        """Opens the file for appends, after an fsync of what it holds: its tail may have been written but
        never made durable (a crash before the fsync), and once served it counts as on disk."""
        self._file = open(self.path, "ab")  # noqa: SIM115 - held open for the daemon's life
        if sync:
            self.syncer()()

    def append(self, _base_offset: int, data: bytes) -> None:
        file = self._open_file()
        file.write(data)
        file.flush()

    def syncer(self) -> Callable[[], None]:
        """An fsync of everything written so far, to run on a worker thread: on a duplicate of the file's
        descriptor, so a ``trim`` replacing the file meanwhile (which fsyncs the new one) cannot close it."""
        if not self.fsync:
            return lambda: None
        fd = os.dup(self._open_file().fileno())

        def sync() -> None:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        return sync

    def _open_file(self) -> BinaryIO:
        if (
            self._file is None
        ):  # closed by a trim whose rewrite failed: nothing can be written or made durable
            raise OSError(errno.EBADF, f"the metadata log {self.path} is not open")
        return self._file

    def close(self, sync: bool = True) -> None:
        """Closes the file, after an fsync unless ``sync`` is off (one failed already: none may follow)."""
        if self._file is not None:
            try:
                if sync:
                    self.syncer()()
            finally:
                self._file.close()
                self._file = None


class ControllerImageQuotas:
    """The client quotas of the controller's current metadata image, for its quota managers: a renounce
    replaces the image, and its quotas' version then starts again, so each image counts as a new generation."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self._image = controller.image
        self._generation = 0

    @property
    def client_quotas(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        return self.controller.image.client_quotas

    @property
    def client_quotas_version(self) -> int:
        image = self.controller.image
        if image is not self._image:
            self._image = image
            self._generation += 1
        return self._generation << 32 | image.client_quotas_version


class ControllerNode:
    """What handlers on the controller listener reach through ``ctx.node``."""

    def __init__(
        self,
        controller: Controller,
        log: FilteringBoundLogger,
        events: EventLog | None = None,
        security: NodeSecurity | None = None,
        quorum: QuorumDriver | None = None,
    ) -> None:
        self.controller = controller
        # KIP-599: the active controller charges every client's controller_mutation_rate, whether a
        # broker forwarded its request or it came to this listener (ControllerApis' quotas)
        quotas_image = ControllerImageQuotas(controller)
        self.client_quotas = ClientQuotas(lambda: quotas_image)
        self.security: NodeSecurity | None = security
        self.authorizer = security.authorizer if security is not None else None
        self.log = log
        self.events = events
        # What brokers fetch: the log itself with one controller, the committed part in a quorum.
        self.quorum = quorum
        self.group_commit: GroupCommit | None = None  # a single controller's log on disk
        self.metadata_log: MetadataLog = (
            quorum.quorum.published if quorum is not None else controller.standalone_log
        )
        self.snapshot_dir: Path | None = None  # where the snapshots FetchSnapshot serves are
        # the live web view's timeline, beside the event log
        self.event_listeners: list[Callable[[str, EventFields], None]] = []
        self._log_grew = asyncio.Event()
        self.metadata_log.listeners.append(lambda _base, _data: self._on_append())

    def write_gate(self) -> QuorumDriver | GroupCommit | None:
        """Where requests pass (server.py lets them through its ``write``): in a quorum, answered once
        committed; a single controller's, once on disk."""
        return self.quorum if self.quorum is not None else self.group_commit

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def _on_append(self) -> None:
        self._log_grew.set()
        self._log_grew = asyncio.Event()

    async def wait_for_records(self, offset: int, max_wait_ms: int) -> None:
        """Long poll: returns once the log extends past ``offset`` or the wait ends."""
        deadline = time.monotonic() + max_wait_ms / 1000
        while self.metadata_log.next_offset <= offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._log_grew.wait(), remaining)
            except TimeoutError:
                return

    def ship_events(self) -> None:
        """Moves the controller's domain events to the event log (and drops them without one)."""
        outbox = self.controller.outbox
        if not outbox:
            return
        if self.events is not None:
            for name, fields in outbox:
                self.events.emit(name, **fields)
        for listener in self.event_listeners:
            for name, fields in outbox:
                listener(name, fields)
        outbox.clear()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="epochkraft controller", description="Run the controller daemon.")
    parser.add_argument("--listen", required=True, help="HOST:PORT of the controller listener")
    parser.add_argument("--cluster-id", required=True, help="the cluster id brokers must present")
    parser.add_argument("--node-id", type=int, default=0, help="the controller's node id (default 0)")
    parser.add_argument("--session-timeout-ms", type=int, help="broker.session.timeout.ms (default 9000)")
    parser.add_argument("--data-dir", help="directory for the metadata log (default: in memory only)")
    parser.add_argument("--metrics-dir", help="directory for structured events (JSON lines)")
    add_admin_arguments(parser)
    parser.add_argument(
        "--view-broker-admin",
        metavar="ID=HOST:PORT,...",
        help="the brokers' admin ports, from which the live view reads replicas' log ends and high watermarks",
    )
    parser.add_argument("--config", help="a .properties file (see config/controller.properties)")
    parser.add_argument(
        "--override",
        action="append",
        metavar="KEY=VALUE",
        help="a property, over the config file's (repeatable)",
    )
    parser.add_argument(
        "--add-scram",
        action="append",
        metavar="MECHANISM=[name=USER,password=PASSWORD]",
        help="a SCRAM credential written into the metadata log at start-up unless the user already has one "
        "for that mechanism, as kafka-storage format --add-scram (repeatable)",
    )
    parser.add_argument(
        "--quorum-voters",
        help="controller.quorum.voters: id@host:port,... of every controller in the Raft quorum, this one "
        "included (default: a single controller, no quorum)",
    )
    parser.add_argument(
        "--initial-controllers",
        metavar="ID@HOST:PORT:DIRECTORY_ID,...",
        help="a dynamic quorum's first voters (with controller.quorum.bootstrap.servers), written into the "
        "bootstrap checkpoint when the data dir is formatted, as kafka-storage format --initial-controllers; "
        "this controller takes its own directory id from the list",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="a dynamic quorum of this controller alone, as kafka-storage format --standalone (others are "
        "added later with AddRaftVoter)",
    )
    parser.add_argument(
        "--format-only",
        action="store_true",
        help="format the data dir (meta.properties and, with --initial-controllers or --standalone, the "
        "bootstrap checkpoint) and exit, as kafka-storage format --ignore-formatted; a controller started "
        "with --initial-controllers or --standalone refuses an unformatted data dir",
    )
    parser.add_argument(
        "--voter-address",
        action="append",
        metavar="ID@HOST:PORT",
        help="for fault injection: reach controller ID at this address rather than at its endpoints in the "
        "voter set (a proxy that can cut the link); repeatable",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--check-config", action="store_true", help="validate flags and config, then exit")
    return parser


def load(args: argparse.Namespace) -> tuple[ControllerSettings, tuple[str, int]]:
    listen = parse_host_port(args.listen)
    if not args.cluster_id.strip():
        raise ConfigError("--cluster-id must not be empty")
    settings = load_settings(
        ControllerSettings,
        args.config,
        {"session_timeout_ms": args.session_timeout_ms, "quorum_voters": args.quorum_voters},
        parse_overrides(args.override),
    )
    if settings.quorum_voters and settings.quorum_bootstrap_servers:
        raise ConfigError(
            "controller.quorum.voters and controller.quorum.bootstrap.servers: one or the other"
        )
    if (args.initial_controllers or args.standalone) and not settings.quorum_bootstrap_servers:
        raise ConfigError("--initial-controllers and --standalone need controller.quorum.bootstrap.servers")
    if args.initial_controllers and args.standalone:
        raise ConfigError("--initial-controllers or --standalone, not both")
    if args.format_only and not settings.quorum_voters and not settings.quorum_bootstrap_servers:
        raise ConfigError("--format-only formats a quorum controller's data dir: it needs a quorum")
    if settings.quorum_voters:
        voters = parse_voters(settings.quorum_voters)
        if args.node_id not in voters:
            raise ConfigError(f"--node-id {args.node_id} is not one of controller.quorum.voters")
    if args.voter_address:
        parse_voters(",".join(args.voter_address))
    if settings.quorum_bootstrap_servers:
        parse_bootstrap_servers(settings.quorum_bootstrap_servers)
        initial_voters(args, settings, listen)
    if in_quorum(settings) and not args.data_dir:
        raise ConfigError("a controller in a quorum needs --data-dir (its log and quorum-state)")
    if settings.session_timeout_ms <= 0:
        raise ConfigError("broker.session.timeout.ms must be positive")
    try:
        group_config.check_settings(group_config.bounds_of(settings))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    # Bad keystores, truststores and authorizer settings are configuration errors at start-up.
    NodeSecurity.build(settings).server_ssl(listener_protocol(settings), listener_name(settings))
    if args.admin_secure:
        tls.admin_server_context(settings)
    bootstrap_scram(args.add_scram)
    return settings, listen


def in_quorum(settings: ControllerSettings) -> bool:
    return bool(settings.quorum_voters or settings.quorum_bootstrap_servers)


def parse_bootstrap_servers(text: str) -> tuple[tuple[str, int], ...]:
    """controller.quorum.bootstrap.servers: host:port separated by commas."""
    servers = tuple(parse_host_port(part.strip()) for part in text.split(",") if part.strip())
    if not servers:
        raise ConfigError("controller.quorum.bootstrap.servers is empty")
    return servers


def initial_voters(
    args: argparse.Namespace, settings: ControllerSettings, listen: tuple[str, int]
) -> VoterSet | None:
    """The bootstrap voter set --initial-controllers or --standalone asks for (None: neither)."""
    name = listener_name(settings) or "CONTROLLER"
    if args.standalone:
        key = ReplicaKey(args.node_id, random_directory_id())
        return VoterSet((key,), ((args.node_id, (Endpoint(name, *listen),)),))
    if not args.initial_controllers:
        return None
    voters = initial_voter_set(parse_initial_controllers(args.initial_controllers), name)
    if voters.key_of(args.node_id) is None:
        raise ConfigError(f"--initial-controllers does not name --node-id {args.node_id}")
    return voters


def bootstrap_scram(values: list[str] | None) -> list[UserScramCredentialRecord]:
    """--add-scram values -> the UserScramCredentialRecords to write (random salts)."""
    records = []
    for value in values or []:
        try:
            mechanism, user, password, iterations = parse_add_scram(value)
            made = credential(mechanism, password, iterations=iterations)
        except ValueError as exc:
            raise ConfigError(f"--add-scram: {exc}") from exc
        records.append(scram_record(user, MECHANISMS[mechanism][0], made))
    return records


def listener_protocol(settings: ControllerSettings) -> str:
    """The security protocol of the --listen listener: the first of controller.listener.names in
    listener.security.protocol.map (PLAINTEXT when controller.listener.names is empty)."""
    return controller_protocol(settings, parse_protocol_map(settings.listener_security_protocol_map))


def listener_name(settings: ControllerSettings) -> str:
    """The --listen listener's name: the first of controller.listener.names (empty: unnamed)."""
    return next((n.strip().upper() for n in settings.controller_listener_names.split(",") if n.strip()), "")


def format_dir(
    args: argparse.Namespace, settings: ControllerSettings, listen: tuple[str, int]
) -> MetaProperties:
    """The data dir's meta.properties, formatting it first when it is new. The bootstrap voter set of
    --initial-controllers or --standalone is written only by --format-only (Kafka's separate format step):
    a daemon started with them on an unformatted dir refuses, since on a replaced disk it would take its
    old directory id and vote as the voter it was with an empty log (or, --standalone, become a second
    quorum of its own). Started without them, a new disk is formatted with no initial controllers."""
    data_dir = Path(args.data_dir)
    asks = bool(args.initial_controllers or args.standalone)
    if asks and not args.format_only and read_meta_properties(data_dir) is None:
        raise ConfigError(
            f"{data_dir} is not formatted: format it once with --format-only and --initial-controllers or "
            "--standalone, then start it (a controller restarted on a new disk starts without them: an "
            "observer with a new directory id, to be added to the voter set again)"
        )
    return format_controller_dir(
        data_dir,
        args.cluster_id,
        args.node_id,
        initial_voters=initial_voters(args, settings, listen) if settings.quorum_bootstrap_servers else None,
        now_ms=int(time.time() * 1000),
    )


def open_quorum(
    args: argparse.Namespace,
    settings: ControllerSettings,
    log: FilteringBoundLogger,
    ssl_context: ssl.SSLContext | None,
) -> tuple[QuorumDriver, MetadataSnapshotter]:
    """A controller of a Raft quorum: its data dir formatted if new (meta.properties with its directory id,
    and a dynamic quorum's bootstrap checkpoint), its log and quorum-state from there, the newest snapshot
    loaded, the rest replayed as the quorum commits it."""
    voters = parse_voters(settings.quorum_voters) if settings.quorum_voters else {}
    bootstrap = parse_bootstrap_servers(settings.quorum_bootstrap_servers) if not voters else ()
    listen = parse_host_port(args.listen)
    meta = format_dir(args, settings, listen)
    started = time.monotonic()
    raft_log = MetadataRaftLog(Path(args.data_dir))
    assert raft_log.directory is not None
    store = FileQuorumStateStore(raft_log.directory)
    now = int(time.time() * 1000)
    raft = RaftClient(
        args.node_id,
        tuple(voters),
        raft_log,
        now,
        persisted=store.read(),
        settings=RaftSettings(
            election_timeout_ms=settings.quorum_election_timeout_ms,
            fetch_timeout_ms=settings.quorum_fetch_timeout_ms,
            election_backoff_max_ms=settings.quorum_election_backoff_max_ms,
            request_timeout_ms=settings.quorum_request_timeout_ms,
            retry_backoff_ms=settings.quorum_retry_backoff_ms,
        ),
        rng=random.Random(),
        directory_id=meta.directory_id,
        bootstrap_servers=tuple(BOOTSTRAP_ID_BASE - i for i in range(len(bootstrap))),
        local_endpoints=(Endpoint(listener_name(settings) or "CONTROLLER", *listen),),
    )
    log_dir = raft_log.directory
    quorum = ControllerQuorum(
        raft,
        lambda log_: Controller(args.cluster_id, settings, log_, node_id=args.node_id),
        snapshots=lambda snapshot_id: read_snapshot_file(log_dir, snapshot_id),
    )
    data = b"".join(raft_log.raw)
    snapshot = load_newest_snapshot(quorum.controller, log_dir, data, log, raft_log.start_offset)
    if snapshot is not None:
        quorum.replayed_to = snapshot.end_offset
        quorum.has_metadata = True
    log.info(
        "metadata log opened",
        snapshot=None if snapshot is None else snapshot.end_offset,
        log_end_offset=raft_log.end_offset,
        torn_tail_bytes=raft_log.torn_tail_bytes,
        epoch=raft.epoch,
        directory_id=kafka_uuid(meta.directory_id),
        kraft_version=raft.kraft_version,
        voters=str(raft.voter_set),
        seconds=round(time.monotonic() - started, 3),
    )

    def snapshot_point() -> SnapshotId | None:
        if quorum.replayed_to != quorum.applied or quorum.applied == 0:
            return None  # the image holds a write not yet committed
        if quorum.applied == raft_log.start_offset:
            return SnapshotId(quorum.applied, raft_log.snapshot_epoch)  # the one it starts from
        return SnapshotId(quorum.applied, raft_log.epoch_at(quorum.applied - 1))

    def trim(below: SnapshotId) -> None:
        if quorum.trim_to(below):
            log.info("metadata log deleted below a snapshot", offset=below.end_offset)

    snapshotter = MetadataSnapshotter(
        quorum.controller,
        raft_log.directory,
        settings.max_record_bytes_between_snapshots,
        log,
        latest=snapshot,
        published=quorum.published,
        snapshot_point=snapshot_point,
        on_written=trim,
        membership=lambda snapshot_id: snapshot_membership(
            raft_log.voter_history.value_at_or_before(snapshot_id.end_offset - 1),
            raft_log.voter_history.kraft_version_at_or_before(snapshot_id.end_offset - 1),
        ),
    )
    name = listener_name(settings) or "CONTROLLER"
    driver = QuorumDriver(
        quorum,
        store,
        voters,
        args.cluster_id,
        log,
        ssl_context,
        settings.quorum_request_timeout_ms,
        bootstrap=bootstrap,
        listener_name=name,
        local_endpoints=(Endpoint(name, *listen),),
        overrides=parse_voters(",".join(args.voter_address)) if args.voter_address else {},
    )

    def installed(snapshot_id: SnapshotId) -> None:
        snapshotter.latest = snapshot_id
        snapshotter.bytes_since_snapshot = 0

    driver.installed.append(installed)
    return driver, snapshotter


async def serve(args: argparse.Namespace, settings: ControllerSettings, listen: tuple[str, int]) -> int:
    log = logs.configure(f"controller-{args.node_id}", args.log_level)
    if in_quorum(settings):
        return await serve_quorum(args, settings, listen, log)
    log_file = MetadataLogFile(Path(args.data_dir)) if args.data_dir else None
    metadata_log = MetadataLog(log_file.base_offset if log_file is not None else 0)
    controller = Controller(args.cluster_id, settings, metadata_log, node_id=args.node_id)
    snapshotter: MetadataSnapshotter | None = None
    group_commit: GroupCommit | None = None
    stop = asyncio.Event()
    if log_file is not None:
        data, cut = log_file.read_valid()
        started = time.monotonic()
        snapshot = load_newest_snapshot(
            controller, log_file.dir, data, log, log_file.base_offset, delete_past_end=True
        )
        replay_from = 0 if snapshot is None else snapshot.end_offset
        count = controller.load(data, replay_from)
        log.info(
            "metadata log replayed",
            snapshot=None if snapshot is None else snapshot.end_offset,
            records=count,
            next_offset=metadata_log.next_offset,
            torn_tail_bytes=cut,
            seconds=round(time.monotonic() - started, 3),
        )
        log_file.open()
        metadata_log.listeners.append(log_file.append)  # before the snapshotter: on disk before snapshotted
        group_commit = GroupCommit(metadata_log, log_file.syncer)
        metadata_log.listeners.append(group_commit.on_append)
        group_commit.on_failure.append(_stop_on_failure(log, stop))
        snapshotter = MetadataSnapshotter(
            controller,
            log_file.dir,
            settings.max_record_bytes_between_snapshots,
            log,
            latest=snapshot,
            snapshot_point=group_commit.snapshot_point,
            durable=group_commit.durable,
            on_written=trim_log_file(metadata_log, log_file, group_commit, log),
        )
    events = _event_log(args)
    security = NodeSecurity.build(settings)
    if security.authorizer is not None:
        security.authorizer.acls = controller.image.acls  # the ACLs the metadata log holds
    node = ControllerNode(controller, log, events, security)
    node.snapshot_dir = log_file.dir if log_file is not None else None
    node.group_commit = group_commit
    controller.bootstrap(node.now_ms())
    added = controller.add_scram_credentials(node.now_ms(), bootstrap_scram(args.add_scram))
    if added:
        log.info("bootstrap SCRAM credentials written", credentials=added)
    server = await _start_listener(node, listen, settings, security, log)
    admin = await _admin_server(args, controller, node=node)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        f"controller ready listen={listen[0]}:{server.port} cluster_id={args.cluster_id}",
        metadata_offset=metadata_log.next_offset,
    )
    interval_ms = settings.session_check_interval_ms
    last_snapshot = 0.0
    try:
        while not stop.is_set():
            # Wake when the earliest session expires, not at the next multiple of the interval: a dead
            # broker is fenced (and its leaderships moved) right at broker.session.timeout.ms.
            now = node.now_ms()
            expiry = controller.next_session_expiry_ms(now)
            wait_ms = interval_ms if expiry is None else min(interval_ms, max(expiry - now, 1))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_ms / 1000)
            fenced = controller.tick(node.now_ms())
            if fenced:
                log.info("fenced brokers whose session expired", brokers=fenced)
            node.ship_events()
            last_snapshot = _emit_state(events, controller, last_snapshot)
    finally:
        log.info("controller stopping")
        await server.stop()
        if admin is not None:
            await admin.stop()
        node.ship_events()
        if events is not None:
            await events.aclose()
        if snapshotter is not None:
            await snapshotter.wait()
        failed = group_commit is not None and group_commit.failure is not None
        if group_commit is not None:
            await group_commit.close()
        if log_file is not None:
            log_file.close(sync=not failed)
    return EXIT_INTERNAL_ERROR if failed else 0


def trim_log_file(
    metadata_log: MetadataLog, log_file: MetadataLogFile, commit: GroupCommit, log: FilteringBoundLogger
) -> Callable[[SnapshotId], None]:
    """A single controller's log, in memory and on disk, trimmed below a snapshot. A rewrite of the file that
    fails (EIO, ENOSPC) is fatal, as a failed fsync: what the file holds is no longer known."""

    def trim(below: SnapshotId) -> None:
        kept = metadata_log.trim_to(below.end_offset, below.epoch)
        if metadata_log.start_offset == below.end_offset != log_file.base_offset:
            try:
                log_file.trim(below.end_offset, kept)
            except BaseException as exc:
                commit.fail(exc)
                raise
            log.info("metadata log deleted below a snapshot", offset=below.end_offset)

    return trim


def _stop_on_failure(log: FilteringBoundLogger, stop: asyncio.Event) -> Callable[[BaseException], None]:
    """A single controller's metadata log that can no longer be made durable stops the daemon, non-zero, as
    Kafka's fatal fault handler halts it: its answers would claim records a crash may take back."""

    def stopped(exc: BaseException) -> None:
        log.error("the metadata log could not be made durable; stopping", error=repr(exc))
        stop.set()

    return stopped


async def serve_quorum(
    args: argparse.Namespace, settings: ControllerSettings, listen: tuple[str, int], log: FilteringBoundLogger
) -> int:
    """A controller of a Raft quorum: standby, or the active controller while it leads."""
    security = NodeSecurity.build(settings)
    driver, snapshotter = open_quorum(args, settings, log, security.client_ssl(listener_protocol(settings)))
    quorum = driver.quorum
    controller = quorum.controller
    events = _event_log(args)
    authorizer = security.authorizer
    if authorizer is not None:
        authorizer.acls = controller.image.acls

        def repoint_acls() -> None:  # a renounce rebuilds the image
            authorizer.acls = controller.image.acls

        quorum.listeners.append(repoint_acls)
    node = ControllerNode(controller, log, events, security, quorum=driver)
    node.snapshot_dir = quorum.log.directory
    scram = bootstrap_scram(args.add_scram)
    server = await _start_listener(node, listen, settings, security, log)
    admin = await _admin_server(args, controller, driver, node=node)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    raft_stop = asyncio.Event()
    raft_task = asyncio.create_task(driver.run(raft_stop), name="raft")
    raft_task.add_done_callback(lambda t: stop.set())  # a failed core stops the daemon (logged below)
    log.info(
        f"controller ready listen={listen[0]}:{server.port} cluster_id={args.cluster_id}",
        voters=list(driver.raft.voters),
        epoch=driver.raft.epoch,
    )
    interval_ms = settings.session_check_interval_ms
    activations = 0
    last_snapshot = 0.0
    try:
        while not stop.is_set():
            now = node.now_ms()
            expiry = controller.next_session_expiry_ms(now) if quorum.active else None
            wait_ms = interval_ms if expiry is None else min(interval_ms, max(expiry - now, 1))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_ms / 1000)
            if quorum.active and quorum.activations != activations:
                activations = quorum.activations
                await _on_activation(driver, controller, scram, log)
            if quorum.active:
                fenced = await driver.write(_tick(controller, node), lambda _code: [])
                if fenced:
                    log.info("fenced brokers whose session expired", brokers=fenced)
            node.ship_events()
            last_snapshot = _emit_state(events, controller, last_snapshot)
    finally:
        log.info("controller stopping", role=driver.raft.role)
        failed = raft_task.done() and not raft_task.cancelled() and raft_task.exception() is not None
        if failed:
            log.error("the Raft driver failed; stopping", error=repr(raft_task.exception()))
        else:
            await driver.resign()
        raft_stop.set()
        with contextlib.suppress(Exception):
            await raft_task
        await server.stop()
        await driver.close()
        if admin is not None:
            await admin.stop()
        node.ship_events()
        if events is not None:
            await events.aclose()
        await snapshotter.wait()
        quorum.log.close()
    return EXIT_INTERNAL_ERROR if failed else 0


def _tick(controller: Controller, node: ControllerNode) -> Callable[[], Awaitable[list[int]]]:
    async def tick() -> list[int]:
        return controller.tick(node.now_ms())

    return tick


async def _on_activation(
    driver: QuorumDriver,
    controller: Controller,
    scram: list[UserScramCredentialRecord],
    log: FilteringBoundLogger,
) -> None:
    """A newly active controller's --add-scram credentials (a new cluster's feature levels were appended
    when it claimed: ``ControllerQuorum._claim``)."""
    quorum = driver.quorum

    async def bootstrap() -> None:
        added = controller.add_scram_credentials(ControllerNode.now_ms(), scram)
        if added:
            log.info("bootstrap SCRAM credentials written", credentials=added)

    await driver.write(bootstrap, lambda _code: None)
    log.info("active controller", epoch=driver.raft.epoch, metadata_offset=quorum.log.end_offset)


def NOW() -> int:
    return int(time.time() * 1000)


def _emit_state(events: EventLog | None, controller: Controller, last: float) -> float:
    """A controller_snapshot event every SNAPSHOT_INTERVAL_S (with an event log); returns when it last went."""
    if events is None or time.monotonic() - last < SNAPSHOT_INTERVAL_S:
        return last
    state = controller.state()
    events.emit_metrics("controller_snapshot", _snapshot_gauges(state))
    return time.monotonic()


def _snapshot_gauges(state: ControllerLogState) -> dict[str, float]:
    """A controller_snapshot event's fields (SCHEMA.md): Kafka's controller gauges."""
    return {
        "OfflinePartitionsCount": state["OfflinePartitionsCount"],
        "FencedBrokerCount": state["FencedBrokerCount"],
        "ActiveBrokerCount": state["ActiveBrokerCount"],
        "UnderReplicatedPartitions": state["UnderReplicatedPartitions"],
        "UnderMinIsrPartitionCount": state["UnderMinIsrPartitionCount"],
        "GlobalPartitionCount": state["GlobalPartitionCount"],
    }


async def _start_listener(
    node: ControllerNode,
    listen: tuple[str, int],
    settings: ControllerSettings,
    security: NodeSecurity,
    log: FilteringBoundLogger,
) -> KafkaServer:
    """The controller listener, its bound port recorded as the endpoint DescribeCluster names."""
    server = KafkaServer(
        CONTROLLER,
        node,
        listen[0],
        listen[1],
        log=log,
        reserved_connections=CONTROLLER_RESERVED_CONNECTIONS,
        ssl_context=security.server_ssl(listener_protocol(settings), listener_name(settings)),
        idle_timeout_ms=settings.connections_max_idle_ms,
    )
    await server.start()
    node.controller.listener_endpoint = (listen[0], server.port)
    return server


def load_newest_snapshot(
    controller: Controller,
    log_dir: Path,
    data: bytes,
    log: FilteringBoundLogger,
    log_start: int = 0,
    delete_past_end: bool = False,
) -> SnapshotId | None:
    """Loads the newest readable snapshot within the log into ``controller``; returns its id (None: the
    whole log is to be replayed). Unreadable snapshots are logged and skipped, as are .part files. A log
    that starts after offset 0 needs a snapshot from its start on: without one the daemon cannot start.
    ``delete_past_end``: a single controller's snapshots past its log's end are deleted (a quorum's may be
    ahead of its log, a leader's snapshot fetched before the records after it)."""
    for partial in remove_partial_snapshots(log_dir):
        log.info("deleted an unfinished snapshot", file=partial.name)
    log_end = log_start
    for _pos, header in iter_batches(data):
        log_end = header.next_offset
    if delete_past_end:
        for past in delete_snapshots_past(log_dir, log_end):
            log.warning("deleted a metadata snapshot past the log's end", file=snapshot_filename(past))

    def rejected(snapshot_id: SnapshotId, reason: str) -> None:
        log.warning("metadata snapshot not used", file=snapshot_filename(snapshot_id), reason=reason)

    snapshot = newest_valid_snapshot(log_dir, log_end, rejected)
    if snapshot is not None and snapshot.snapshot_id.end_offset == 0:
        snapshot = None  # the bootstrap checkpoint: a dynamic quorum's first voters, no metadata
    if snapshot is None or snapshot.snapshot_id.end_offset < log_start:
        if log_start > 0:
            raise ConfigError(
                f"the metadata log in {log_dir} starts at offset {log_start} and no readable snapshot "
                "reaches it (restart this controller on an empty data dir; in a dynamic quorum it comes back as an "
                "observer with a new directory id, to be added again)"
            )
        return None
    count = controller.load_snapshot(snapshot)
    log.info("metadata snapshot loaded", file=snapshot_filename(snapshot.snapshot_id), records=count)
    return snapshot.snapshot_id


def _event_log(args: argparse.Namespace) -> EventLog | None:
    if not args.metrics_dir:
        return None
    try:
        from epochkraft.metrics.events import EventLog
    except ImportError:
        return None
    return EventLog(args.metrics_dir, f"controller-{args.node_id}")


def _broker_admin(value: str | None) -> dict[int, str]:
    """``1=127.0.0.1:9192,2=...`` as {1: "127.0.0.1:9192", ...}."""
    if not value:
        return {}
    try:
        return {int(node): address for node, _, address in (part.partition("=") for part in value.split(","))}
    except ValueError as exc:
        raise ConfigError(f"--view-broker-admin {value!r}: expected ID=HOST:PORT,...") from exc


async def _admin_server(
    args: argparse.Namespace,
    controller: Controller,
    quorum: QuorumDriver | None = None,
    *,
    node: ControllerNode,
) -> AdminServer | None:
    if args.admin_port is None:
        return None
    from epochkraft.metrics.admin_http import AdminServer, admin_security
    from epochkraft.metrics.live_view import LiveView
    from epochkraft.metrics.registry import controller_registry

    registry = controller_registry(controller)

    def own_state() -> ControllerOwnState:
        # Heartbeat sessions are this controller's own, not in the log: beside the log's view, not in it.
        sessions = {
            str(broker): session.last_contact_ms for broker, session in controller.cluster.sessions.items()
        }
        if quorum is None:
            return {"last_heartbeat_ms": sessions}
        return {"last_heartbeat_ms": sessions, "quorum": quorum.describe()}

    def state() -> ControllerState:
        return {**controller.state(), **own_state()}

    def view_state() -> ViewState:  # the view reads the partitions on their own, the changed ones only
        return {**controller.summary_state(), **own_state()}

    ready: Callable[[], bool] | None = None
    if quorum is not None:
        raft = quorum.raft

        def in_quorum() -> bool:  # leading or following: a quorum without a leader writes nothing new
            return isinstance(raft.state, LeaderState | FollowerState)

        ready = in_quorum
    secured = None
    if args.admin_secure:
        assert node.security is not None
        # the image is rebuilt when a quorum controller renounces: read the credentials it holds now
        secured = admin_security(node.security, lambda: controller.image.scram_credentials)
    view = LiveView(
        view_state,
        node.now_ms,
        broker_admin=_broker_admin(args.view_broker_admin),
        metrics_dir=Path(args.metrics_dir) if args.metrics_dir else None,
        # the brokers' secured admin ports: this controller's certificate (a super user) over TLS
        broker_ssl=node.security.client_ssl("SSL") if secured is not None and node.security else None,
        partitions=controller.view_partitions,
        row=lambda _topic, _index, token: partition_row(*token),
    )
    node.event_listeners.append(view.on_event)
    server = AdminServer(
        args.admin_host, args.admin_port, registry, state, ready, live_view=view, security=secured
    )
    await server.start()
    return server


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings, listen = load(args)
    except ConfigError as exc:
        print(f"epochkraft controller: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    if args.check_config:
        print(f"configuration ok: {replace(settings)}")
        return 0
    try:
        if args.format_only:
            meta = format_dir(args, settings, listen)
            print(
                f"formatted {args.data_dir}: node {meta.node_id}, directory id {kafka_uuid(meta.directory_id)}"
            )
            return 0
        if in_quorum(settings):
            format_dir(args, settings, listen)  # refuses a data dir it must not format, before serving
    except ConfigError as exc:
        print(f"epochkraft controller: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            return runner.run(serve(args, settings, listen))
        except InvalidQuorumState as exc:
            print(f"epochkraft controller: {exc}", file=sys.stderr)
            return EXIT_INTERNAL_ERROR
