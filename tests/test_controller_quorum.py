"""The controller of a Raft quorum (controller/quorum.py), sans-IO: three voters whose messages the test
delivers, a clock the test moves. What Kafka's QuorumControllerTest and QuorumControllerIntegrationTest
check for the quorum's side of the controller: records reach a controller's state only once committed,
the new leader becomes the active controller once its LeaderChangeMessage commits, and a controller that
loses leadership with a write in flight returns to the committed state."""

from __future__ import annotations

import dataclasses
import random
import uuid
from pathlib import Path

from kio.schema.broker_registration.v3.request import BrokerRegistrationRequest, Listener

from epochkraft.controller.controller import Controller
from epochkraft.controller.metadata_raft_log import MetadataRaftLog
from epochkraft.controller.quorum import ControllerQuorum, NotController
from epochkraft.controller.settings import ControllerSettings
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import FeatureLevelRecord, RegisterBrokerRecord
from epochkraft.raft.batches import LEADER_CHANGE, batch_entry
from epochkraft.raft.client import RaftClient
from epochkraft.raft.log import LeaderChangeMessage, LogEntry
from epochkraft.raft.messages import Envelope
from epochkraft.raft.replication import RaftSettings
from epochkraft.raft.voter_set import ReplicaKey, VoterSet

CLUSTER_ID = "quorum-test"
VOTERS = (3000, 3001, 3002)
SETTINGS = RaftSettings(
    election_timeout_ms=500, fetch_timeout_ms=1000, election_backoff_max_ms=200, request_timeout_ms=800
)


class QuorumContext:
    """Three controller voters; ``run`` delivers every message until none is left (``cut`` drops those to
    or from the voters named), moving the clock by 1 ms a round."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self.now = 1_000
        self.voters: dict[int, ControllerQuorum] = {}
        self.data_dir = data_dir
        for voter in VOTERS:
            self.start(voter)
        self.in_flight: list[Envelope] = []
        self.cut: set[int] = set()

    def start(self, voter: int) -> ControllerQuorum:
        log = MetadataRaftLog(None if self.data_dir is None else self.data_dir / str(voter), fsync=False)
        raft = RaftClient(voter, VOTERS, log, self.now, settings=SETTINGS, rng=random.Random(voter))
        quorum = ControllerQuorum(
            raft, lambda log_: Controller(CLUSTER_ID, ControllerSettings(), log_, node_id=voter)
        )
        self.voters[voter] = quorum
        return quorum

    def step(self, voter: int, call) -> None:
        quorum = self.voters[voter]
        output = quorum.after(self.now, call(quorum.raft))
        self.in_flight += output.sends

    def run(self, ms: int) -> None:
        for _ in range(ms):
            self.now += 1
            for voter in self.voters:
                self.step(voter, lambda raft: raft.poll(self.now))
            deliver, self.in_flight = self.in_flight, []
            for envelope in deliver:
                if envelope.source in self.cut or envelope.destination in self.cut:
                    continue
                if envelope.destination in self.voters:
                    self.step(envelope.destination, lambda raft, e=envelope: raft.handle(self.now, e))

    def active(self) -> ControllerQuorum:
        active = [q for q in self.voters.values() if q.active]
        assert len(active) == 1, [(v, q.raft.role, q.active) for v, q in self.voters.items()]
        return active[0]

    def elect(self) -> ControllerQuorum:
        self.run(3000)
        return self.active()

    def register(self, quorum: ControllerQuorum, broker_id: int) -> int:
        request = BrokerRegistrationRequest(
            broker_id=broker_id,
            cluster_id=CLUSTER_ID,
            incarnation_id=uuid.uuid4(),
            listeners=(
                Listener(name="PLAINTEXT", host="127.0.0.1", port=9090 + broker_id, security_protocol=0),
            ),
            features=(),
            rack=None,
            is_migrating_zk_broker=False,
            log_dirs=(),
            previous_broker_epoch=-1,
        )
        response = quorum.controller.register_broker(self.now, request)
        assert response.error_code == ErrorCode.none
        return response.broker_epoch


def test_the_new_leader_is_active_once_its_leader_change_message_is_committed():
    ctx = QuorumContext()
    ctx.run(3000)
    leader = next(q for q in ctx.voters.values() if q.raft.is_leader)
    assert leader.active and leader.activations == 1
    first = leader.log.entries[0]
    assert isinstance(first.value, LeaderChangeMessage) and first.value.leader_id == leader.raft.local_id
    assert leader.applied == leader.log.end_offset  # committed and published
    standbys = [q for q in ctx.voters.values() if q is not leader]
    assert all(not q.active for q in standbys)


def test_standbys_replay_only_committed_records():
    ctx = QuorumContext()
    active = ctx.elect()
    standby = next(q for q in ctx.voters.values() if q is not active)
    ctx.cut = {standby.raft.local_id}
    ctx.run(10)
    ctx.register(active, 1)
    # the other standby and the leader are a majority; a standby learns the high watermark from its next
    # fetch's answer, which the leader holds up to the fetch's max wait (500 ms) when it has nothing new
    ctx.run(600)
    assert 1 in active.controller.cluster.brokers
    assert 1 not in standby.controller.cluster.brokers  # it never got the record
    ctx.cut = set()
    other = next(q for q in ctx.voters.values() if q not in (active, standby))
    assert 1 in other.controller.cluster.brokers  # committed, so the other standby replayed it
    ctx.run(1000)
    assert 1 in standby.controller.cluster.brokers
    assert standby.published.next_offset == active.published.next_offset


def test_a_record_is_not_published_to_brokers_before_it_commits():
    ctx = QuorumContext()
    active = ctx.elect()
    before = active.published.next_offset
    ctx.cut = {v for v in VOTERS if v != active.raft.local_id}
    ctx.register(active, 1)
    ctx.run(100)
    assert not active.committed(active.log.end_offset)
    assert active.published.next_offset == before  # brokers fetch only what is committed
    ctx.cut = set()
    ctx.run(1000)  # the followers ask again once their dropped fetches time out
    assert active.committed(active.log.end_offset)
    assert active.published.next_offset == active.log.end_offset


def test_renounce_with_a_write_in_flight_returns_to_the_committed_state():
    """QuorumControllerTest.testRenounce...: a leader cut off with an uncommitted registration loses
    leadership; its state no longer holds the broker, whose record the new leader never had."""
    ctx = QuorumContext()
    old = ctx.elect()
    ctx.cut = {old.raft.local_id}
    ctx.register(old, 1)
    assert 1 in old.controller.cluster.brokers  # applied at once by the active controller
    ctx.run(5000)  # the others elect a leader; the old one resigns (check-quorum) or learns of it
    new = next(q for q in ctx.voters.values() if q.active)
    assert new is not old and not old.active
    assert 1 not in old.controller.cluster.brokers  # back to what was committed
    assert 1 not in new.controller.cluster.brokers
    ctx.cut = set()
    ctx.run(2000)
    assert old.log.end_offset == new.log.end_offset  # its uncommitted tail was truncated
    assert 1 not in old.controller.cluster.brokers


def test_an_inactive_controller_refuses_to_append():
    ctx = QuorumContext()
    active = ctx.elect()
    standby = next(q for q in ctx.voters.values() if q is not active)
    try:
        standby.append([FeatureLevelRecord(name="x", feature_level=1)], ctx.now)
    except NotController:
        pass
    else:
        raise AssertionError("a standby appended")


def test_the_log_on_disk_is_kafkas_metadata_log_and_survives_a_restart(tmp_path):
    ctx = QuorumContext(tmp_path)
    active = ctx.elect()
    epoch = ctx.register(active, 1)
    ctx.run(100)
    voter = active.raft.local_id
    segment = tmp_path / str(voter) / "__cluster_metadata-0" / "00000000000000000000.log"
    active.log.flush()  # the daemon flushes after every step, before it sends
    data = segment.read_bytes()
    entries = [batch_entry(b) for b in active.log.raw]
    assert data == b"".join(active.log.raw)
    assert isinstance(entries[0].value, LeaderChangeMessage)  # control batch, ControlRecordType 2
    assert LEADER_CHANGE == 2
    active.log.close()
    reopened = MetadataRaftLog(tmp_path / str(voter))
    assert reopened.entries == active.log.entries and reopened.end_offset == active.log.end_offset
    # what a restarted voter replays once the quorum tells it the high watermark
    records = [r for b in reopened.raw if not entry_is_control(b) for r in _records(b)]
    assert any(isinstance(r, RegisterBrokerRecord) and r.broker_epoch == epoch for r in records)


def test_a_torn_tail_is_cut_when_the_log_is_opened(tmp_path):
    log = MetadataRaftLog(tmp_path)
    log.append(LogEntry(1, LeaderChangeMessage(3000, VOTERS, (3000, 3001))))
    log.flush()
    log.close()
    segment = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    whole = segment.read_bytes()
    segment.write_bytes(whole + whole[:20])  # half a batch after the whole one
    reopened = MetadataRaftLog(tmp_path)
    assert reopened.end_offset == 1 and reopened.torn_tail_bytes == 20
    assert segment.read_bytes() == whole


def test_truncation_cuts_the_file_at_the_entry(tmp_path):
    log = MetadataRaftLog(tmp_path)
    log.append(LogEntry(1, LeaderChangeMessage(3000, VOTERS)))
    log.flush()
    size = (tmp_path / "__cluster_metadata-0" / "00000000000000000000.log").stat().st_size
    log.append(LogEntry(1, LeaderChangeMessage(3000, VOTERS)))
    log.flush()
    log.truncate_to(1)
    assert log.end_offset == 1
    assert (tmp_path / "__cluster_metadata-0" / "00000000000000000000.log").stat().st_size == size


def entry_is_control(batch: bytes) -> bool:
    return isinstance(batch_entry(batch).value, LeaderChangeMessage)


def _records(batch: bytes) -> list:
    from epochkraft.protocol.metadata_codec import read_metadata_batches

    return [record for _offset, record in read_metadata_batches(batch)]


def test_activation_appends_the_bootstrap_records_before_any_write():
    """ActivationRecordsGeneratorTest.testActivationMessageForEmptyLog, as QuorumController's
    CompleteActivationEvent appends them: on an empty log the new active controller's first records are
    the cluster's feature levels, so a broker's registration let in at once cannot come first (and leave
    the cluster without metadata.version or eligible leader replicas)."""
    ctx = QuorumContext()
    while not any(q.active for q in ctx.voters.values()):
        ctx.run(1)
    active = ctx.active()
    ctx.register(active, 1)  # the first write, in the very millisecond the controller became active
    ctx.run(600)
    records = [record for _, record in active.published.records()]
    assert isinstance(records[0], FeatureLevelRecord) and records[0].name == "metadata.version"
    assert isinstance(records[-1], RegisterBrokerRecord)
    for quorum in ctx.voters.values():
        assert quorum.controller.image.elr_enabled  # every controller replayed the levels


def test_a_dynamic_quorums_first_controller_bootstraps_while_its_voter_records_are_uncommitted():
    """A dynamic quorum's first leader appends KRaftVersion and Voters records after its
    LeaderChangeMessage; with one entry per Fetch answer only the LeaderChangeMessage is committed when
    it becomes active. The feature levels are still appended (no metadata yet is what counts), once."""
    settings = dataclasses.replace(SETTINGS, fetch_max_records=1)
    bootstrap = VoterSet(tuple(ReplicaKey(v, uuid.UUID(int=v)) for v in VOTERS))
    ctx = QuorumContext()
    for voter in VOTERS:
        log = MetadataRaftLog(None, fsync=False)
        log.bootstrap(bootstrap)
        raft = RaftClient(
            voter,
            (),
            log,
            ctx.now,
            settings=settings,
            rng=random.Random(voter),
            directory_id=uuid.UUID(int=voter),
        )
        ctx.voters[voter] = ControllerQuorum(
            raft, lambda log_, voter=voter: Controller(CLUSTER_ID, ControllerSettings(), log_, node_id=voter)
        )
    while not any(q.active for q in ctx.voters.values()):
        ctx.run(1)
    assert ctx.active().raft.kraft_version == 1
    ctx.run(2000)
    for quorum in ctx.voters.values():
        levels = [r for _, r in quorum.published.records() if isinstance(r, FeatureLevelRecord)]
        assert [r.name for r in levels].count("metadata.version") == 1
