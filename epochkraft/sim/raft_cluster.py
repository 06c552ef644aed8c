"""One seeded simulation of a controller quorum: Raft voters (the real ``epochkraft.raft`` core) on the
simulated network, a client appending records to whichever voter leads, and a fault schedule of crashes
(the log and ``quorum-state`` survive, as Kafka flushes both), partitions, lossy and reordering links,
graceful resignations and leader crashes.

Safety, checked as the run goes (a violation stops it):
- election safety: at most one leader per epoch;
- log matching: two logs with an entry of the same epoch at the same offset agree up to there;
- leader completeness: a leader's log holds every entry committed before (below any voter's high
  watermark in an earlier epoch);
- state machine safety: no two voters apply different entries at one offset, and no acknowledged record
  is ever missing from the committed log.
- high watermark monotonic: no incarnation of a replica sees its high watermark go back.
Liveness: within ``LIVENESS_BOUND_MS`` of the last fault healing, one leader that every voter follows in
its epoch, every log equal to the leader's, and every high watermark at the log end; in a dynamic quorum
also the operator's work done: the committed voter set is every controller's current replica key.

A dynamic quorum (``dynamic``, the raft-reconfig faults: KIP-853) starts from a bootstrap voter set with
directory ids. A controller that loses its disk comes back with a new directory id and an empty log, as
an observer, and an operator reconciles the voter set as Kafka's operator would: RemoveRaftVoter for the
lost key, then AddRaftVoter for the new one, one change at a time, retried until each is answered NONE.
``UNSAFE_REJOIN_WITH_OLD_KEY_FOR_TESTS`` brings the wiped controller back as its old key instead (what a
static quorum, which has no directory ids, does with a new disk): an empty log and no quorum-state, voting
and standing at once, as if its lost disk had never voted or acknowledged anything.
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.client import Output, RaftClient
from epochkraft.raft.log import LogEntry, RaftLog
from epochkraft.raft.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    Envelope,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
)
from epochkraft.raft.quorum_state import QuorumStateData
from epochkraft.raft.replication import RaftSafetyError, RaftSettings
from epochkraft.raft.voter_set import KRAFT_VERSION_0, ReplicaKey, VoterSet, VotersRecord
from epochkraft.sim.shrinking import shrink_schedule
from epochkraft.sim.world import LinkPolicy, Violation, World

RAFT_FAULT_KINDS = ("crash", "crash-leader", "partition", "isolate", "lossy", "resign")
DURATION_MS = 12_000
FAULTS_UNTIL_MS = 9_000
LIVENESS_BOUND_MS = 8_000
# the KIP-853 grammar runs shorter (and appends half as often), so that thousands of seeds fit a CI run
RECONFIG_DURATION_MS = 8_000
RECONFIG_FAULTS_UNTIL_MS = 6_000
RECONFIG_APPEND_EVERY_MS = 40
CHECK_EVERY_MS = 100
STUCK_AFTER_EVENTS = 20_000  # events at one virtual instant: some replica spins
APPEND_EVERY_MS = 20
SIM_SETTINGS = RaftSettings(
    election_timeout_ms=300,
    fetch_timeout_ms=600,
    election_backoff_max_ms=300,
    request_timeout_ms=300,
    retry_backoff_ms=20,
    fetch_max_wait_ms=100,
    fetch_max_records=2,  # small answers: a follower catches up in many steps, as over a slow link
)
LINK = LinkPolicy(min_delay_ms=1, max_delay_ms=10)
LOSSY = LinkPolicy(min_delay_ms=1, max_delay_ms=60, drop=0.3, duplicate=0.1)
OPERATOR_ID = 0  # the admin client's connection (AddRaftVoter, RemoveRaftVoter)
OPERATOR_EVERY_MS = 100
# UNSAFE, for the simulator only: a controller that lost its disk comes back as its old replica key (what a
# static quorum does) instead of a new one the operator removes and adds back.
UNSAFE_REJOIN_WITH_OLD_KEY_FOR_TESTS = False


@dataclass(frozen=True, slots=True)
class RaftFault:
    at_ms: int
    kind: str
    target: int = 0  # a voter id (0: chosen when the fault fires, e.g. the leader of the moment)
    other: int = 0
    length_ms: int = 0

    def describe(self) -> str:
        who = f"voter-{self.target}" if self.target else "the leader"
        if self.kind == "partition":
            return (
                f"t={self.at_ms}ms partition voter-{self.target} | voter-{self.other} for {self.length_ms}ms"
            )
        if self.kind == "isolate":
            return f"t={self.at_ms}ms isolate {who} for {self.length_ms}ms"
        if self.kind == "one-way":
            return (
                f"t={self.at_ms}ms voter-{self.target} cannot reach voter-{self.other} "
                f"(the other way works) for {self.length_ms}ms"
            )
        if self.kind == "lossy":
            return f"t={self.at_ms}ms every link drops 30%, duplicates and reorders for {self.length_ms}ms"
        if self.kind == "crash-new-leader":
            return (
                f"t={self.at_ms}ms crash the next leader elected, {self.other}ms after its election, "
                f"back after {self.length_ms}ms"
            )
        if self.kind == "wipe":
            return f"t={self.at_ms}ms crash {who} and lose its disk, back empty after {self.length_ms}ms"
        if self.kind == "resign":
            return f"t={self.at_ms}ms the leader resigns (graceful shutdown of its Raft role)"
        return f"t={self.at_ms}ms crash {who}, back after {self.length_ms}ms"


def raft_schedule(seed: int, voters: int = 5) -> list[RaftFault]:
    rng = random.Random(seed * 6271 + 5)
    faults = []
    for _ in range(rng.randint(3, 9)):
        kind = rng.choice(RAFT_FAULT_KINDS)
        at = rng.randint(300, FAULTS_UNTIL_MS)
        target = rng.randint(1, voters)
        length = rng.randint(50, 2500)
        if kind == "partition":
            other = rng.choice([v for v in range(1, voters + 1) if v != target])
            faults.append(RaftFault(at, kind, target, other, length))
        elif kind == "isolate":
            faults.append(RaftFault(at, kind, rng.choice([0, target]), 0, length))
        elif kind == "crash-leader":
            faults.append(RaftFault(at, "crash", 0, 0, length))
        elif kind == "resign":
            faults.append(RaftFault(at, kind))
        else:
            faults.append(RaftFault(at, kind, target, 0, length))
    return sorted(faults, key=lambda f: f.at_ms)


def leader_churn_schedule(seed: int, voters: int = 5) -> list[RaftFault]:
    """The figure-8 grammar: leaders crash soon after their election, again and again, while links drop."""
    rng = random.Random(seed * 7253 + 11)
    faults = [RaftFault(rng.randint(300, 3000), "lossy", 0, 0, rng.randint(1000, 5000))]
    at = rng.randint(500, 1500)
    while at < FAULTS_UNTIL_MS:
        if rng.random() < 0.7:
            faults.append(RaftFault(at, "crash-new-leader", 0, rng.randint(0, 120), rng.randint(100, 1500)))
        else:
            faults.append(RaftFault(at, "isolate", rng.randint(1, voters), 0, rng.randint(100, 1500)))
        at += rng.randint(100, 1000)
    return sorted(faults, key=lambda f: f.at_ms)


def reconfig_schedule(seed: int, voters: int = 5) -> list[RaftFault]:
    """The KIP-853 grammar: controllers lose their disks (at most a minority of them, now and then the
    same one again before it caught up) while any controller crashes and restarts at any step, pairs of
    links are cut both ways or one way, controllers are isolated, links drop and leaders resign."""
    rng = random.Random(seed * 7919 + 17)
    wipeable = rng.sample(range(1, voters + 1), max((voters - 1) // 2, 1))
    faults: list[RaftFault] = []
    at = rng.randint(200, 800)
    while at < RECONFIG_FAULTS_UNTIL_MS:
        kind = rng.choices(
            ("wipe", "crash", "partition", "one-way", "isolate", "lossy", "resign"), (5, 3, 4, 3, 2, 1, 1)
        )[0]
        target = rng.randint(1, voters)
        other = rng.choice([v for v in range(1, voters + 1) if v != target])
        length = rng.randint(50, 2500)
        if kind == "wipe":
            faults.append(RaftFault(at, kind, rng.choice(wipeable), 0, rng.randint(10, 600)))
        elif kind == "crash":
            faults.append(RaftFault(at, kind, rng.choice([0, target]), 0, rng.randint(0, 1500)))
        elif kind in ("partition", "one-way"):
            faults.append(RaftFault(at, kind, target, other, length))
        elif kind == "isolate":
            faults.append(RaftFault(at, kind, rng.choice([0, target]), 0, length))
        elif kind == "lossy":
            faults.append(RaftFault(at, kind, 0, 0, length))
        else:
            faults.append(RaftFault(at, kind))
        at += rng.randint(50, 900)
    return faults


# the schedules whose entries take several offsets, as the controllers' metadata batches do, and those
# whose voters snapshot and drop their logs below
BATCHED_SCHEDULES = frozenset({"raft", "raft-snapshots"})
SNAPSHOT_SCHEDULES = frozenset({"raft-snapshots"})
SNAPSHOT_EVERY = 30  # offsets applied between a voter's snapshots
RAFT_SCHEDULES: dict[str, Callable[[int, int], list[RaftFault]]] = {
    "raft": raft_schedule,
    "raft-churn": leader_churn_schedule,
    "raft-snapshots": raft_schedule,  # the raft faults, voters snapshotting and dropping their logs
    "raft-reconfig": reconfig_schedule,  # a dynamic quorum (KIP-853): disks lost, voters removed and added
}
DYNAMIC_SCHEDULES = frozenset({"raft-reconfig"})


@dataclass
class Voter:
    id: int
    log: RaftLog = field(default_factory=RaftLog)
    persisted: QuorumStateData | None = None
    client: RaftClient | None = None
    generation: int = 0
    applied: int = 0  # entries applied to this incarnation's state machine
    directory_id: uuid.UUID | None = None  # a dynamic quorum's: a new one when the disk is replaced
    last_high_watermark: int = -1  # this incarnation's
    snapshot: dict[int, LogEntry] = field(default_factory=dict)  # what its snapshot holds, by offset
    fetching_snapshot: bool = False
    snapshot_requests: int = 0

    @property
    def name(self) -> str:
        return f"voter-{self.id}"

    @property
    def up(self) -> bool:
        return self.client is not None


@dataclass
class RaftRunResult:
    seed: int
    violation: str | None
    acked: int
    events: int
    elections: int
    schedule: list[RaftFault] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    healthy_after_ms: int | None = None
    batched: bool = False
    snapshots: bool = False
    dynamic: bool = False


class RaftSimCluster:
    def __init__(
        self,
        seed: int,
        schedule: list[RaftFault],
        *,
        voters: int = 5,
        settings: RaftSettings = SIM_SETTINGS,
        link: LinkPolicy = LINK,
        batched: bool = False,
        snapshots: bool = False,
        dynamic: bool = False,
    ) -> None:
        """``batched``: appended entries take 1-3 offsets each, as a controller's metadata batches do
        (one per record), so commits, fetches and truncations must keep every batch whole.
        ``snapshots``: every voter snapshots what it applied every SNAPSHOT_EVERY offsets and drops its log
        below; a follower behind the leader's log start fetches the leader's snapshot and installs it."""
        self.batched = batched
        self.snapshots = snapshots
        self.dynamic = dynamic
        self.duration_ms = RECONFIG_DURATION_MS if dynamic else DURATION_MS
        self.append_every_ms = RECONFIG_APPEND_EVERY_MS if dynamic else APPEND_EVERY_MS
        self.disk_rng = random.Random(seed * 104_729 + 7)  # directory ids, apart from the world's draws
        self.settings = settings
        self.link = link
        self.world = World(seed, link)
        self.schedule = schedule
        self.voter_ids = tuple(range(1, voters + 1))
        self.voters = {v: Voter(v) for v in self.voter_ids}
        self.leaders_by_epoch: dict[int, ReplicaKey] = {}
        self.committed: dict[int, LogEntry] = {}  # offset -> the entry first seen committed there
        self.commit_epoch: dict[int, int] = {}  # offset -> the lowest epoch in which a voter saw it committed
        self.pending: list[tuple[int, int, int, int, bytes]] = []  # voter, generation, epoch, offset, value
        self.acked: list[tuple[int, bytes]] = []
        self.next_value = 0
        self.lossy_until_ms = -1
        self.events = 0
        self.healthy_after_ms: int | None = None
        self.armed: list[RaftFault] = []  # crash-new-leader faults waiting for the next election
        self.events_at_once = 0
        self.operator_in_flight: int | None = None  # correlation id of the operator's voter change
        self.operator_correlation = 0
        if dynamic:
            for voter in self.voters.values():
                voter.directory_id = self._new_directory_id()
            bootstrap = self.desired_voters()
            for voter in self.voters.values():
                voter.log.bootstrap(bootstrap)

    def _new_directory_id(self) -> uuid.UUID:
        return uuid.UUID(int=self.disk_rng.getrandbits(128), version=4)

    def desired_voters(self) -> VoterSet:
        """Every controller's current replica key: the voter set the operator works toward."""
        return VoterSet(tuple(ReplicaKey(v.id, v.directory_id) for v in self.voters.values()))

    # ---- driving the cores --------------------------------------------------------------------------------
    def start(self, voter: Voter) -> None:
        voter.generation += 1
        voter.applied = voter.log.start_offset  # the state machine loads the snapshot
        voter.fetching_snapshot = False
        voter.last_high_watermark = -1
        voter.client = RaftClient(
            voter.id,
            () if self.dynamic else self.voter_ids,
            voter.log,
            self.world.now_ms,
            persisted=voter.persisted,
            settings=self.settings,
            rng=random.Random(self.world.seed * 1009 + voter.id * 31 + voter.generation),
            first_correlation_id=voter.generation * 1_000_000,
            directory_id=voter.directory_id,
            bootstrap_servers=self.voter_ids,
        )
        self.world.log(f"{voter.name} starts in epoch {voter.client.epoch} as {voter.client.role}")
        self._after(voter, voter.client.poll(self.world.now_ms))

    def crash(self, voter: Voter) -> None:
        voter.client = None
        self.world.cancel_wake(voter.name)
        self.world.log(f"{voter.name} crashes (log ends at {voter.log.end_offset})")

    def _after(self, voter: Voter, output: Output) -> None:
        client = voter.client
        assert client is not None
        hw = client.high_watermark
        if hw is not None:
            if hw < voter.last_high_watermark:
                raise Violation(
                    f"high watermark monotonic: {voter.name}'s went from {voter.last_high_watermark} to {hw}"
                )
            voter.last_high_watermark = hw
        if output.persist is not None:
            voter.persisted = output.persist  # written before anything is sent
        for envelope in output.sends:
            self._send(envelope)
        if client.is_leader:
            # by replica key: the same id back on a new disk leading an epoch again is a second leader
            leader = ReplicaKey(voter.id, voter.directory_id)
            known = self.leaders_by_epoch.setdefault(client.epoch, leader)
            if known != leader:
                raise Violation(f"two leaders in epoch {client.epoch}: {known} and {leader}")
        self._apply(voter)
        if client.snapshot_wanted is not None and not voter.fetching_snapshot:
            self._fetch_snapshot(voter, client.leader_id, client.snapshot_wanted)
        self.world.wake(voter.name, client.next_deadline_ms(), lambda: self._on_timer(voter))

    def _on_timer(self, voter: Voter) -> None:
        if voter.client is not None:
            self._step(voter, lambda client: client.poll(self.world.now_ms))

    def _step(self, voter: Voter, action) -> None:
        assert voter.client is not None
        role, epoch = voter.client.role, voter.client.epoch
        try:
            output = action(voter.client)
        except RaftSafetyError as exc:
            raise Violation(f"{voter.name}: {exc}") from exc
        if (voter.client.role, voter.client.epoch) != (role, epoch):
            self.world.log(f"{voter.name} {role}@{epoch} -> {voter.client.role}@{voter.client.epoch}")
            if voter.client.is_leader:
                self._check_leader_completeness(voter)
                self._fire_armed(voter)
        self._after(voter, output)

    def _fire_armed(self, leader: Voter) -> None:
        armed, self.armed = self.armed, []
        for fault in armed:
            generation = leader.generation

            def crash(fault: RaftFault = fault, generation: int = generation) -> None:
                if leader.client is not None and leader.generation == generation:
                    self.world.log(f"FAULT (armed at {fault.at_ms}ms) crash {leader.name}")
                    self.crash(leader)
                    self.world.after(
                        fault.length_ms,
                        lambda: self.start(leader) if leader.client is None else None,
                        "restart",
                    )

            self.world.after(fault.other, crash, "fault")

    def _send(self, envelope: Envelope) -> None:
        source = self.voters[envelope.source]
        if envelope.destination == OPERATOR_ID:
            self.world.send(source.name, "operator", lambda: self._operator_answer(envelope), "operator")
            return
        destination = self.voters[envelope.destination]

        def deliver() -> None:
            if destination.client is None:
                return
            # correlation ids differ per incarnation, so an answer to a crashed incarnation matches nothing
            self._step(destination, lambda client: client.handle(self.world.now_ms, envelope))

        self.world.send(source.name, destination.name, deliver, type(envelope.message).__name__)

    def _fetch_snapshot(self, voter: Voter, leader_id: int, wanted: tuple[int, int]) -> None:
        """FetchSnapshot, as one message each way: the leader answers with its snapshot if it is still the
        one asked for (else SNAPSHOT_NOT_FOUND), the follower installs it."""
        leader = self.voters.get(leader_id)
        if leader is None:
            return
        voter.fetching_snapshot = True
        voter.snapshot_requests += 1
        generation, request = voter.generation, voter.snapshot_requests

        def answer(contents: dict[int, LogEntry] | None, voters: VoterSet | None, kraft_version: int) -> None:
            if (
                voter.client is None
                or voter.generation != generation
                or voter.snapshot_requests != request
                or not voter.fetching_snapshot
            ):
                return  # a crashed incarnation's, or one given up on
            voter.fetching_snapshot = False
            if contents is None or voter.client.snapshot_wanted != wanted:
                self._step(
                    voter, lambda c: (c.snapshot_unavailable(self.world.now_ms), c.poll(self.world.now_ms))[1]
                )
                return
            for offset, entry in contents.items():
                first = self.committed.setdefault(offset, entry)
                if first != entry:
                    raise Violation(
                        f"state machine safety: {voter.name} installs {describe(entry)} at offset {offset}, "
                        f"where {describe(first)} was committed"
                    )
            voter.snapshot = dict(contents)
            voter.applied = wanted[0]
            self.world.log(f"{voter.name} installs {leader.name}'s snapshot up to {wanted[0]}")
            self._step(
                voter,
                lambda c: (
                    c.install_snapshot(self.world.now_ms, *wanted, voters, kraft_version),
                    c.poll(self.world.now_ms),
                )[1],
            )

        def at_leader() -> None:
            log = leader.log
            have = leader.client is not None and (log.start_offset, log.snapshot_epoch) == wanted
            contents = dict(leader.snapshot) if have else None
            # the snapshot's control records: the voter set and kraft.version as of its end
            voters = log.voter_history.value_at_or_before(wanted[0] - 1)
            version = log.voter_history.kraft_version() if voters is not None else KRAFT_VERSION_0
            self.world.send(
                leader.name, voter.name, lambda: answer(contents, voters, version), "FetchSnapshotResponse"
            )

        self.world.send(voter.name, leader.name, at_leader, "FetchSnapshotRequest")
        # no answer within the request timeout: lost, ask the leader again
        self.world.after(
            self.settings.request_timeout_ms,
            lambda: answer(None, None, KRAFT_VERSION_0) if voter.snapshot_requests == request else None,
            "snapshot timeout",
        )

    # ---- the state machine and the client -----------------------------------------------------------------
    def _apply(self, voter: Voter) -> None:
        client = voter.client
        assert client is not None
        hw = client.high_watermark
        if hw is None:
            return
        while voter.applied < hw:
            offset = voter.applied
            index = voter.log.index_of(offset)
            entry = voter.log.entries[index]
            if voter.log.bases[index] + entry.records > hw:
                raise Violation(
                    f"{voter.name}'s high watermark {hw} falls inside the entry at offset {offset}"
                )
            first = self.committed.setdefault(offset, entry)
            self.commit_epoch[offset] = min(self.commit_epoch.get(offset, client.epoch), client.epoch)
            if first != entry:
                raise Violation(
                    f"state machine safety: {voter.name} applies {describe(entry)} at offset {offset}, "
                    f"where {describe(first)} was committed"
                )
            voter.applied += entry.records
        if self.snapshots and voter.applied - voter.log.start_offset >= SNAPSHOT_EVERY:
            low = voter.log.index_of(voter.log.start_offset)
            high = voter.log.index_of(voter.applied)
            voter.snapshot.update(zip(voter.log.bases[low:high], voter.log.entries[low:high], strict=True))
            voter.log.trim_to(voter.applied)
            self.world.log(f"{voter.name} snapshots up to {voter.applied} and drops its log below")
        still = []
        for owner, generation, epoch, offset, value in self.pending:
            if owner != voter.id or generation != voter.generation or epoch != client.epoch or offset >= hw:
                still.append((owner, generation, epoch, offset, value))
                continue
            if client.is_leader:
                self.world.send(
                    voter.name, "client", functools.partial(self.acked.append, (offset, value)), "ack"
                )
        self.pending = [p for p in still if self.voters[p[0]].generation == p[1]]

    def _append_loop(self) -> None:
        if self.world.now_ms < self.duration_ms - 1000:
            leader = next(
                (v for v in self.voters.values() if v.client is not None and v.client.is_leader), None
            )
            if leader is not None:
                value = f"r{self.next_value}".encode()
                records = 1 + self.next_value * 7919 % 3 if self.batched else 1
                self.next_value += 1

                def at_leader(leader: Voter = leader, value: bytes = value, records: int = records) -> None:
                    client = leader.client
                    if client is None or not client.is_leader:
                        return
                    last = client.append(self.world.now_ms, [value], [records])
                    if last is not None:
                        base = last - records + 1
                        self.pending.append((leader.id, leader.generation, client.epoch, base, value))
                        self._step(leader, lambda c: c.poll(self.world.now_ms))

                self.world.send("client", leader.name, at_leader, "append")
            self.world.after(self.append_every_ms, self._append_loop)

    # ---- invariants ----------------------------------------------------------------------------------------
    def _check_leader_completeness(self, voter: Voter) -> None:
        held_at = voter.snapshot | dict(zip(voter.log.bases, voter.log.entries, strict=True))
        epoch = voter.client.epoch if voter.client else -1
        for offset, entry in self.committed.items():
            if self.commit_epoch[offset] >= epoch:
                continue  # committed in this epoch or later: a stale leader of an older one may lack it
            if held_at.get(offset) != entry:
                held = describe(held_at[offset]) if offset in held_at else "nothing"
                raise Violation(
                    f"leader completeness: {voter.name} leads epoch {epoch} "
                    f"without committed {describe(entry)} at offset {offset} (it holds {held})"
                )

    def check(self) -> None:
        # entries by first offset (logs may start at different offsets, below them their snapshots): the
        # same epoch at the same offset means the same entries up to there
        logs = [(v.name, dict(zip(v.log.bases, v.log.entries, strict=True))) for v in self.voters.values()]
        for i, (name_a, a) in enumerate(logs):
            for name_b, b in logs[i + 1 :]:
                common = sorted(a.keys() & b.keys())
                last_match = next((o for o in reversed(common) if a[o].epoch == b[o].epoch), -1)
                differ = _first_difference(a, b, common, last_match)
                if differ is not None:
                    raise Violation(
                        f"log matching: {name_a} and {name_b} agree on the epoch at offset {last_match} "
                        f"but differ at offset {differ}"
                    )
        for offset, value in self.acked:
            entry = self.committed.get(offset)
            if entry is None or entry.value != value:
                raise Violation(
                    f"acknowledged record {value.decode()} at offset {offset} is not committed there"
                )
        for voter in self.voters.values():
            if voter.client is not None and voter.client.is_leader:
                self._check_leader_completeness(voter)

    # ---- faults --------------------------------------------------------------------------------------------
    def _current_leader(self) -> Voter | None:
        leaders = [v for v in self.voters.values() if v.client is not None and v.client.is_leader]
        return max(leaders, key=lambda v: v.client.epoch if v.client else -1) if leaders else None

    def _heal(self, name: str, others: list[str]) -> None:
        for other in others:
            self.world.heal(name, other)

    def _apply_fault(self, fault: RaftFault) -> None:
        self.world.log(f"FAULT {fault.describe()}")
        if fault.kind == "lossy":
            self.world.default_link = LOSSY
            self.lossy_until_ms = max(self.lossy_until_ms, fault.at_ms + fault.length_ms)
            self.world.at(self.lossy_until_ms, self._end_lossy, "heal")
            return
        if fault.kind == "crash-new-leader":
            self.armed.append(fault)
            return
        target = self.voters.get(fault.target) or self._current_leader()
        if target is None:
            return
        if fault.kind == "resign":
            if target.client is not None:
                self._step(target, lambda client: client.resign(self.world.now_ms))
            return
        if fault.kind in ("partition", "one-way"):
            other = self.voters[fault.other].name
            self.world.cut_for(target.name, other, fault.length_ms, one_way=fault.kind == "one-way")
            return
        if fault.kind == "isolate":
            others = [v.name for v in self.voters.values() if v is not target] + ["client", "operator"]
            for other in others:
                self.world.partition(target.name, other)
            self.world.after(fault.length_ms, functools.partial(self._heal, target.name, others), "heal")
            return
        if target.client is None:
            return
        self.crash(target)
        if fault.kind == "wipe":
            self._lose_disk(target)
        self.world.after(
            fault.length_ms, lambda: self.start(target) if target.client is None else None, "restart"
        )

    def _lose_disk(self, voter: Voter) -> None:
        """A new, empty disk (a dynamic quorum's): formatted without initial controllers, so a new
        directory id and no voter set, an observer until added back; or, with the unsafe switch, formatted
        as the old voter (its old key and the bootstrap voters), voting at once."""
        voter.log = RaftLog()
        voter.snapshot = {}
        voter.persisted = None
        if UNSAFE_REJOIN_WITH_OLD_KEY_FOR_TESTS:
            voter.log.bootstrap(self.desired_voters())
        else:
            voter.directory_id = self._new_directory_id()
            self.world.log(
                f"{voter.name} gets a new disk, directory id {ReplicaKey(voter.id, voter.directory_id)}"
            )

    # ---- the operator (dynamic quorum) --------------------------------------------------------------------
    def _operator_loop(self) -> None:
        """Reconciles the voter set with the controllers' current keys, one change at a time, against
        the leader of the moment: the lost key removed first, then the new one added."""
        self.world.after(OPERATOR_EVERY_MS, self._operator_loop)
        leader = self._current_leader()
        if self.operator_in_flight is not None or leader is None or leader.client is None:
            return
        change = self._next_voter_change(leader.client.voter_set)
        if change is None:
            return
        self.operator_correlation += 1
        correlation = self.operator_correlation
        self.operator_in_flight = correlation
        envelope = Envelope(OPERATOR_ID, leader.id, correlation, change)
        generation = leader.generation

        def at_leader() -> None:
            if leader.client is not None and leader.generation == generation:
                self._step(leader, lambda client: client.handle(self.world.now_ms, envelope))

        self.world.log(f"operator sends {type(change).__name__} {change.voter_id} to {leader.name}")
        self.world.send("operator", leader.name, at_leader, "operator")
        # no answer (the leader crashed, a link is cut): the operator gives up on it and tries again
        give_up_after = self.settings.request_timeout_ms * 2
        self.world.after(give_up_after, lambda: self._operator_gives_up(correlation), "operator timeout")

    def _next_voter_change(self, current: VoterSet) -> AddRaftVoterRequest | RemoveRaftVoterRequest | None:
        for wanted in self.desired_voters().voters:
            held = current.key_of(wanted.id)
            if held is not None and held != wanted and held.directory_id is not None:
                return RemoveRaftVoterRequest(held.id, held.directory_id)
        for wanted in self.desired_voters().voters:
            if current.key_of(wanted.id) is None and wanted.directory_id is not None:
                return AddRaftVoterRequest(wanted.id, wanted.directory_id)
        return None

    def _operator_gives_up(self, correlation: int) -> None:
        if self.operator_in_flight == correlation:
            self.operator_in_flight = None

    def _operator_answer(self, envelope: Envelope) -> None:
        answer = envelope.message
        assert isinstance(answer, AddRaftVoterResponse | RemoveRaftVoterResponse)
        if envelope.correlation_id != self.operator_in_flight:
            return
        self.operator_in_flight = None
        if answer.error_code != ErrorCode.none:
            self.world.log(f"operator: {type(answer).__name__} {answer.error_code.name}")
        else:
            self.world.log(f"operator: {type(answer).__name__} NONE from voter-{envelope.source}")

    def _end_lossy(self) -> None:
        if self.world.now_ms >= self.lossy_until_ms:
            self.world.default_link = self.link

    def healed_at_ms(self) -> int:
        healed = self.duration_ms - 1000
        for fault in self.schedule:
            extra = fault.other if fault.kind == "crash-new-leader" else 0
            healed = max(healed, fault.at_ms + fault.length_ms + extra)
        return healed

    def liveness_problems(self) -> list[str]:
        problems = [f"{v.name} is down" for v in self.voters.values() if v.client is None]
        leader = self._current_leader()
        if leader is None or leader.client is None:
            return [*problems, "no leader"]
        epoch, end = leader.client.epoch, leader.log.end_offset
        for voter in self.voters.values():
            client = voter.client
            if client is None or voter is leader:
                continue
            if client.epoch != epoch or client.leader_id != leader.id:
                problems.append(
                    f"{voter.name} is {client.role} in epoch {client.epoch}, not following {leader.name}"
                )
            ours = dict(zip(voter.log.bases, voter.log.entries, strict=True))
            theirs = dict(zip(leader.log.bases, leader.log.entries, strict=True))
            if voter.log.end_offset != end or any(ours[o] != theirs[o] for o in ours.keys() & theirs.keys()):
                problems.append(
                    f"{voter.name}'s log ends at {voter.log.end_offset}, {leader.name}'s at {end}"
                )
        for voter in self.voters.values():
            if voter.client is not None and voter.client.high_watermark != end:
                problems.append(f"{voter.name}'s high watermark is {voter.client.high_watermark}, not {end}")
        if self.dynamic:
            voters, wanted = leader.client.voter_set, self.desired_voters()
            if voters != wanted:
                problems.append(f"the voter set is {voters}, the controllers' keys {wanted}")
        return problems

    # ---- running -------------------------------------------------------------------------------------------
    def _run_until(self, end_ms: int) -> None:
        next_check = self.world.now_ms
        while (next_ms := self.world.next_event_ms()) is not None and next_ms <= end_ms:
            self.events_at_once = 0
            self.world.run_until(next_ms, stop=self._stuck)
            self.events += 1
            if self.world.now_ms >= next_check:
                self.check()
                next_check = self.world.now_ms + CHECK_EVERY_MS
        self.world.now_ms = max(self.world.now_ms, end_ms)

    def _stuck(self) -> bool:
        """A replica whose timer is always due (a state polled without moving on) would spin at one
        virtual instant for ever: a liveness failure, reported instead of hanging the run."""
        self.events_at_once += 1
        if self.events_at_once > STUCK_AFTER_EVENTS:
            raise Violation(
                f"no progress: {STUCK_AFTER_EVENTS} events at {self.world.now_ms} ms, time stands still"
            )
        return False

    def run(self) -> RaftRunResult:
        violation = None
        try:
            for voter in self.voters.values():
                self.start(voter)
            for fault in self.schedule:
                self.world.at(fault.at_ms, functools.partial(self._apply_fault, fault), "fault")
            self.world.after(self.append_every_ms, self._append_loop)
            if self.dynamic:
                self.world.after(OPERATOR_EVERY_MS, self._operator_loop)
            self._run_until(self.duration_ms)
            healed = self.healed_at_ms()
            deadline = healed + LIVENESS_BOUND_MS
            while True:
                self.check()
                if self.world.now_ms >= healed and not self.liveness_problems():
                    self.healthy_after_ms = self.world.now_ms - healed
                    self.world.log(f"healthy {self.healthy_after_ms} ms after the last fault healed")
                    break
                if self.world.now_ms >= deadline:
                    problems = "; ".join(self.liveness_problems())
                    raise Violation(
                        f"not healed {LIVENESS_BOUND_MS} ms after the last fault healed: {problems}"
                    )
                self._run_until(min(max(self.world.now_ms, healed) + 50, deadline))
        except Violation as exc:
            violation = str(exc)
            self.world.log(f"VIOLATION {violation}")
        return RaftRunResult(
            self.world.seed,
            violation,
            len(self.acked),
            self.events,
            len(self.leaders_by_epoch),
            self.schedule,
            self.world.trace,
            self.healthy_after_ms,
            self.batched,
            self.snapshots,
            self.dynamic,
        )


def _first_difference(
    a: dict[int, LogEntry], b: dict[int, LogEntry], common: list[int], up_to: int
) -> int | None:
    for offset in common:
        if offset > up_to:
            return None
        # replicas usually hold the very entry the leader sent: identity first, equality only if not
        if a[offset] is not b[offset] and a[offset] != b[offset]:
            return offset
    return None


def describe(entry: LogEntry) -> str:
    value = entry.value
    if isinstance(value, bytes):
        shown = value.decode()
    elif isinstance(value, VotersRecord):
        shown = f"Voters{value.voters}"
    elif hasattr(value, "leader_id"):
        shown = f"LeaderChange(leader {value.leader_id})"
    else:
        shown = type(value).__name__
    return f"{shown}@epoch{entry.epoch}"


def run_raft_seed(
    seed: int, *, faults: str = "raft", voters: int = 5, schedule: list[RaftFault] | None = None
) -> RaftRunResult:
    schedule = RAFT_SCHEDULES[faults](seed, voters) if schedule is None else schedule
    return RaftSimCluster(
        seed,
        schedule,
        voters=voters,
        batched=faults in BATCHED_SCHEDULES,
        snapshots=faults in SNAPSHOT_SCHEDULES,
        dynamic=faults in DYNAMIC_SCHEDULES,
    ).run()


def shrink_raft(result: RaftRunResult, *, voters: int = 5) -> RaftRunResult:
    """Drops faults one at a time while the run still violates an invariant (same seed)."""
    return shrink_schedule(
        result,
        lambda schedule: RaftSimCluster(
            result.seed,
            schedule,
            voters=voters,
            batched=result.batched,
            snapshots=result.snapshots,
            dynamic=result.dynamic,
        ).run(),
    )
