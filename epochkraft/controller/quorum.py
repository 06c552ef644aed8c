"""One controller of a Raft quorum: the Raft core, its durable log and the controller state, sans-IO.

The controller state moves only with committed entries, as Kafka's QuorumController does: a standby replays
each entry once the high watermark passes it; the leader becomes the active controller once its own
LeaderChangeMessage is committed (everything before it is then committed and replayed too), and from then
on applies what it appends at once. The daemon lets one write at a time through and answers it only when
its entries are committed, so the active controller's state is never more than the write in flight ahead
of the committed log. Should leadership go while a write is in flight, the state is rebuilt from the
committed log (Kafka reverts to its last committed snapshot in memory, the same thing), and the write is
answered NOT_CONTROLLER.

What brokers fetch is ``published``: the committed batches only, by Kafka offset, control batches included.

Followed: QuorumController.QuorumMetaLogListener (handleCommit, handleLeaderChange, renounce),
QuorumController.claim (the active controller after its LeaderChangeMessage commits), and
BrokerHeartbeatManager being rebuilt on activation (every broker gets a fresh session).
"""

from __future__ import annotations

from collections.abc import Callable

from epochkraft.controller.controller import Controller
from epochkraft.controller.metadata_log import MetadataLog
from epochkraft.controller.metadata_raft_log import MetadataRaftLog
from epochkraft.metadata.snapshot import Snapshot, SnapshotId
from epochkraft.protocol.metadata_codec import metadata_batch, read_metadata_batches
from epochkraft.protocol.metadata_records import MetadataRecord
from epochkraft.protocol.records import parse_header
from epochkraft.raft.client import Output, RaftClient
from epochkraft.raft.quorum_state import LeaderState


class NotController(Exception):
    """This controller is not (or no longer) the active one."""


class RaftBackedLog:
    """The Controller's log in a quorum, the two things it asks of one: its end (the Raft log's, written
    or not) and appends, which go into the Raft leader's log. What brokers fetch is ``published``."""

    def __init__(self, quorum: ControllerQuorum) -> None:
        self.quorum = quorum

    @property
    def next_offset(self) -> int:
        return self.quorum.raft.log.end_offset

    def append(self, records: list[MetadataRecord], now_ms: int, leader_epoch: int = 0) -> int:
        return self.quorum.append(records, now_ms)


class ControllerQuorum:
    def __init__(
        self,
        raft: RaftClient,
        make_controller: Callable[[RaftBackedLog], Controller],  # given the log it is to append to
        published: MetadataLog | None = None,
        replayed_to: int = 0,
        snapshots: Callable[[SnapshotId], Snapshot] | None = None,
    ) -> None:
        """``replayed_to``: the offset a loaded snapshot brought the controller to (entries below it are
        published but not replayed again); ``snapshots`` reads a snapshot this controller holds."""
        self.raft = raft
        assert isinstance(raft.log, MetadataRaftLog)
        self.log: MetadataRaftLog = raft.log
        start = self.log.start_offset
        self.published = published if published is not None else MetadataLog(start)
        self.published.snapshot_epoch = self.log.snapshot_epoch
        self.snapshots = snapshots
        self.controller = make_controller(RaftBackedLog(self))
        self.applied = start  # entries below this offset are committed and published
        self.replayed_to = replayed_to  # the controller's state holds every record below this offset
        self.has_metadata = replayed_to > 0  # any metadata record committed (or in a loaded snapshot)
        self.active = False
        self.activations = 0
        self.listeners: list[Callable[[], None]] = []  # told after commits and role changes

    # ---- the active controller's writes -----------------------------------------------------------------
    def append(self, records: list[MetadataRecord], now_ms: int) -> int:
        """Appends one metadata batch as the active controller; returns its base offset."""
        if not self.active:
            raise NotController("not the active controller")
        base = self.log.end_offset
        batch = metadata_batch(base, records, leader_epoch=self.raft.epoch, timestamp_ms=now_ms)
        if self.raft.append(now_ms, [batch], [len(records)]) is None:
            raise NotController("no longer the Raft leader")
        self.replayed_to = self.log.end_offset  # Controller._commit replays the batch right after
        return base

    def committed(self, offset: int) -> bool:
        """Whether every entry below ``offset`` is committed (and published)."""
        return self.applied >= offset

    # ---- after every step of the Raft core ---------------------------------------------------------------
    def after(self, now_ms: int, output: Output) -> Output:
        """Publishes and replays newly committed entries and moves between standby and active; returns
        ``output`` for the driver to persist and send."""
        self._apply_committed()
        if self._update_role(now_ms):
            # activation records appended: release them to the followers now, as any append is
            more = self.raft.poll(now_ms)
            output = Output(more.persist or output.persist, [*output.sends, *more.sends])
        for listener in self.listeners:
            listener()
        return output

    def _apply_committed(self) -> None:
        hw = self.raft.high_watermark
        if hw is None or hw <= self.applied:
            return
        index = self.log.index_of(self.applied)
        for base, batch in self.log.batches_from(index):
            if base >= hw:
                break
            self.published.add_committed(base, batch)
            self.has_metadata = self.has_metadata or not parse_header(batch).is_control
            if base >= self.replayed_to:
                for offset, record in read_metadata_batches(batch):
                    self.controller.replay(record, offset)
                self.replayed_to = self.published.next_offset
            self.applied = self.published.next_offset

    def _update_role(self, now_ms: int) -> bool:
        """Claims or renounces as the Raft role says; True when the claim appended activation records."""
        state = self.raft.state
        claimable = (
            isinstance(state, LeaderState)
            and state.high_watermark is not None
            and state.high_watermark > state.epoch_start_offset
        )
        if claimable and not self.active:
            return self._claim(now_ms)
        if self.active and not isinstance(state, LeaderState):
            self._renounce()
        return False

    def _claim(self, now_ms: int) -> bool:
        """QuorumController.claim: every committed record is replayed; brokers get fresh sessions. On an
        empty log the activation appends the new cluster's bootstrap records (feature levels) before any
        write can (ActivationRecordsGenerator.recordsForEmptyLog, appended by CompleteActivationEvent):
        a broker's registration let in first would leave the cluster without metadata.version."""
        self.active = True
        self.activations += 1
        self.controller.cluster.sessions.clear()
        self.controller.cluster.started_ms = now_ms
        if not self.needs_bootstrap():
            return False
        self.controller.bootstrap(now_ms, new_cluster=True)
        return True

    def _renounce(self) -> None:
        """QuorumController.renounce: back to the committed state when a write was in flight."""
        self.active = False
        if self.replayed_to > self.applied:
            self.controller.reset()
            start = self.published.start_offset
            if start > 0:
                assert self.snapshots is not None
                self.controller.load_snapshot(
                    self.snapshots(SnapshotId(start, self.published.snapshot_epoch))
                )
            for offset, record in self.published.records():
                self.controller.replay(record, offset)
            self.replayed_to = self.applied

    # ---- snapshots ------------------------------------------------------------------------------------------
    def trim_to(self, snapshot_id: SnapshotId) -> bool:
        """Drops the log, and the batches brokers can fetch, below a snapshot of committed state; False
        when it cannot (not committed yet, or not where an entry starts)."""
        end = snapshot_id.end_offset
        if end > self.applied or end <= self.log.start_offset:
            return False
        self.log.trim_to(end)
        if self.log.start_offset != end:
            return False
        self.published.trim_to(end, snapshot_id.epoch)
        return True

    def install(self, snapshot: Snapshot) -> None:
        """A follower behind the leader's log start takes the leader's snapshot: the controller's state,
        the log brokers fetch (from its end) and the Raft log (``RaftClient.install_snapshot``, which the
        driver calls next) all start there."""
        snapshot_id = snapshot.snapshot_id
        self.controller.reset()
        self.controller.load_snapshot(snapshot)
        self.published.reset_to(snapshot_id.end_offset, snapshot_id.epoch)
        self.applied = self.replayed_to = snapshot_id.end_offset
        self.has_metadata = True

    def needs_bootstrap(self) -> bool:
        """An active controller of a new cluster writes the metadata.version feature level first. At the
        claim every metadata record below this epoch's start is committed and replayed; what follows in the
        log is this leader's own control records (LeaderChangeMessage, and a dynamic quorum's first
        KRaftVersion and Voters records), committed or not: no metadata yet is what counts
        (ActivationRecordsGenerator: ``logReplayTracker.empty()``)."""
        return self.active and not self.has_metadata
