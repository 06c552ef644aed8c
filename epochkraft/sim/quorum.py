"""The cluster simulation's controllers as a Raft quorum: each controller is the controller daemon's sans-IO
pair, the Raft core (``RaftClient`` over a ``MetadataRaftLog`` kept in memory) and the ``ControllerQuorum``
that publishes what is committed, replays it and moves between standby and active. The simulator carries
their messages over the World's network as ``QuorumDriver`` carries them over TCP, wakes each core at its
deadline, and lets the brokers' requests through one at a time on the active controller, each answered once
its records are committed and NOT_CONTROLLER elsewhere (``QuorumDriver.write``). Brokers fetch the
committed metadata log (``ControllerQuorum.published``) from the controller their requests last reached.

Checked as the run goes: no two controllers publish different batches at one offset (state machine
safety of the metadata log). The cluster's checks read the committed metadata, replayed here into a
``MetadataImage``, not any one controller's state (an active controller's holds its write in flight).
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from epochkraft.controller.controller import Controller
from epochkraft.controller.metadata_raft_log import MetadataRaftLog
from epochkraft.controller.quorum import ControllerQuorum, NotController
from epochkraft.controller.settings import ControllerSettings
from epochkraft.metadata.image import MetadataImage, image_after
from epochkraft.metadata.registrations import TopicInfo
from epochkraft.protocol.metadata_codec import read_metadata_batches
from epochkraft.protocol.records import iter_batches
from epochkraft.raft.client import Output, RaftClient
from epochkraft.raft.messages import Envelope
from epochkraft.raft.quorum_state import QuorumStateData
from epochkraft.raft.replication import RaftSafetyError, RaftSettings
from epochkraft.sim.raft_cluster import SIM_SETTINGS
from epochkraft.sim.world import Violation, World

# the Raft simulation's timeouts (Kafka's scaled to the simulated links: elections within a second), with
# Fetch answers as large as Kafka's: metadata batches are few and small
QUORUM_RAFT_SETTINGS = dataclasses.replace(SIM_SETTINGS, fetch_max_records=RaftSettings().fetch_max_records)
# UNSAFE, for the simulator only: the active controller answers a write as soon as it has decided it,
# before its records are committed (what QuorumDriver.write must not do).
UNSAFE_ANSWER_BEFORE_COMMIT_FOR_TESTS = False


@dataclass
class Write:
    """A request for the active controller: ``decide`` runs on it (and may append records), ``answer``
    gets what it returned once committed; ``refuse`` is called instead on any other controller."""

    decide: Callable[[Controller, int], object]
    answer: Callable[[object], None]
    refuse: Callable[[], None]


@dataclass
class QuorumMember:
    id: int
    log: MetadataRaftLog = field(default_factory=lambda: MetadataRaftLog(None, fsync=False))
    persisted: QuorumStateData | None = None  # quorum-state, written before anything is sent
    quorum: ControllerQuorum | None = None  # None while down
    generation: int = 0
    writes: deque[Write] = field(default_factory=deque)
    in_flight: tuple[int, Write, object] | None = None  # (end offset to commit, the write, its answer)
    ticking: bool = False  # a session check queued or in flight
    published_checked: int = 0  # this incarnation's published offsets compared with the committed log

    @property
    def name(self) -> str:
        return f"controller-{self.id}"


class SimQuorum:
    def __init__(self, world: World, settings: ControllerSettings, size: int, cluster_id: str) -> None:
        self.world = world
        self.settings = settings
        self.cluster_id = cluster_id
        self.members = {i: QuorumMember(i) for i in range(1, size + 1)}
        self.names = tuple(m.name for m in self.members.values())
        self.committed: dict[int, bytes] = {}  # base offset -> the batch first published there
        self.committed_end = 0
        self.image = MetadataImage()  # the committed metadata, replayed as the first controller publishes it
        for member in self.members.values():
            self.start(member)

    # ---- what the cluster asks of its controllers ----------------------------------------------------------
    def topic(self, name: str) -> TopicInfo | None:
        return self.image.topic(name)

    @property
    def available(self) -> bool:
        return self.active() is not None

    def active(self) -> QuorumMember | None:
        return next((m for m in self.members.values() if m.quorum is not None and m.quorum.active), None)

    def liveness_problems(self) -> list[str]:
        problems = [f"{m.name} is down" for m in self.members.values() if m.quorum is None]
        if self.active() is None:
            problems.append("no active controller")
        return problems

    def next_target(self, target: int) -> int:
        return target % len(self.members) + 1

    def send(
        self,
        src: str,
        target: int,
        label: str,
        decide: Callable[[Controller, int], object],
        answer: Callable[[object], None],
        refusal: object,
    ) -> None:
        """A request to controller ``target`` over the network: the active controller answers it with what
        ``decide`` returned once committed, any other with ``refusal`` (NOT_CONTROLLER); ``answer`` runs
        where the request came from. A controller that crashes first never answers."""
        member = self.members[target]
        generation = member.generation

        def back(response: object) -> None:
            self.world.send(member.name, src, lambda: answer(response), "response")

        def at_controller() -> None:
            if member.quorum is None or member.generation != generation:
                return  # the connection died with the process it was to
            member.writes.append(Write(decide, back, lambda: back(refusal)))
            self._settle(member)

        self.world.send(src, member.name, at_controller, label)

    def read_metadata(self, src: str, target: int, offset: int, deliver: Callable[[bytes], None]) -> None:
        member = self.members[target]

        def at_controller() -> None:
            if member.quorum is None:
                return
            data = member.quorum.published.read(offset, 1 << 30)
            if data:
                self.world.send(member.name, src, lambda: deliver(data), "metadata")

        self.world.send(src, member.name, at_controller, "metadata-fetch")

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def start(self, member: QuorumMember) -> None:
        member.generation += 1
        member.writes.clear()
        member.in_flight = None
        member.ticking = False
        member.published_checked = 0
        raft = RaftClient(
            member.id,
            tuple(self.members),
            member.log,
            self.world.now_ms,
            persisted=member.persisted,
            settings=QUORUM_RAFT_SETTINGS,
            rng=random.Random(self.world.seed * 1009 + member.id * 31 + member.generation),
            first_correlation_id=member.generation * 1_000_000,
        )
        node_id = member.id
        member.quorum = ControllerQuorum(
            raft, lambda log: Controller(self.cluster_id, self.settings, log, node_id=node_id)
        )
        self.world.log(f"{member.name} starts in epoch {raft.epoch} as {raft.role}")
        self._step(member, lambda raft, now: raft.poll(now))

    def crash(self, member: QuorumMember) -> None:
        """The process dies: its log and quorum-state survive (Kafka flushes both before it answers);
        writes waiting on it are never answered (their senders time out)."""
        if member.quorum is None:
            return
        member.quorum = None
        self.world.cancel_wake(member.name)
        member.writes.clear()
        member.in_flight = None
        self.world.log(f"{member.name} crashes (log ends at {member.log.end_offset})")

    # ---- driving the cores ------------------------------------------------------------------------------------
    def _step(self, member: QuorumMember, call: Callable[[RaftClient, int], Output]) -> None:
        quorum = member.quorum
        assert quorum is not None
        now = self.world.now_ms
        raft = quorum.raft
        before = (raft.role, raft.epoch, quorum.active)
        try:
            output = quorum.after(now, call(raft, now))
        except RaftSafetyError as exc:
            raise Violation(f"{member.name}: {exc}") from exc
        if (raft.role, raft.epoch, quorum.active) != before:
            active = " (active controller)" if quorum.active else ""
            self.world.log(f"{member.name} {before[0]}@{before[1]} -> {raft.role}@{raft.epoch}{active}")
        if output.persist is not None:
            member.persisted = output.persist
        for envelope in output.sends:
            self._send(envelope)
        self._observe_commits(member)
        self._settle(member)
        self._arm_timer(member)

    def _arm_timer(self, member: QuorumMember) -> None:
        quorum = member.quorum
        if quorum is not None:
            self.world.wake(member.name, quorum.raft.next_deadline_ms(), lambda: self._on_timer(member))

    def _on_timer(self, member: QuorumMember) -> None:
        if member.quorum is not None:
            self._step(member, lambda raft, now: raft.poll(now))

    def _send(self, envelope: Envelope) -> None:
        source = self.members[envelope.source]
        destination = self.members[envelope.destination]

        def deliver() -> None:
            if destination.quorum is not None:
                # correlation ids differ per incarnation: an answer to a crashed one matches nothing
                self._step(destination, lambda raft, now: raft.handle(now, envelope))

        self.world.send(source.name, destination.name, deliver, type(envelope.message).__name__)

    # ---- writes, one at a time on the active controller ------------------------------------------------------
    def _settle(self, member: QuorumMember) -> None:
        """QuorumDriver.write: answers the write in flight once committed (refuses it when leadership went),
        then starts the next one."""
        quorum = member.quorum
        if quorum is None:
            return
        if member.in_flight is not None:
            end, write, answer = member.in_flight
            if not quorum.active:
                member.in_flight = None
                write.refuse()
            elif quorum.committed(end):
                member.in_flight = None
                write.answer(answer)
            else:
                return
        while member.writes and member.in_flight is None and member.quorum is quorum:
            write = member.writes.popleft()
            if not quorum.active:
                write.refuse()
                continue
            try:
                answer = write.decide(quorum.controller, self.world.now_ms)
            except NotController:
                write.refuse()
                continue
            quorum.controller.outbox.clear()
            end = quorum.log.end_offset
            if quorum.committed(end) or UNSAFE_ANSWER_BEFORE_COMMIT_FOR_TESTS:
                write.answer(answer)
                continue
            member.in_flight = (end, write, answer)
            self._step(member, lambda raft, now: raft.poll(now))  # sends what the append released

    def tick(self) -> None:
        """The controller daemon's loop on the active controller: the session check (fencing brokers whose
        session expired), a write like any other."""
        member = self.active()
        if member is None or member.ticking:
            return
        member.ticking = True

        def done(_: object = None) -> None:
            member.ticking = False

        member.writes.append(Write(lambda controller, now: controller.tick(now), done, done))
        self._settle(member)

    # ---- the committed metadata log -------------------------------------------------------------------------
    def _observe_commits(self, member: QuorumMember) -> None:
        """Compares what ``member`` published since the last look with the committed log, and replays what
        no controller published before into the committed image."""
        quorum = member.quorum
        assert quorum is not None
        published = quorum.published
        if published.next_offset <= member.published_checked:
            return
        data = published.read(member.published_checked, 1 << 40)
        for position, header in iter_batches(data):
            batch = bytes(data[position : position + header.size])
            base = header.base_offset
            if base == self.committed_end:  # the first to publish it: the committed log grows
                self.committed[base] = batch
                self.image = image_after(self.image, (r for _, r in read_metadata_batches(batch)))
                self.committed_end = header.next_offset
            elif self.committed.get(base) != batch:  # past the end, inside a batch or another batch
                raise Violation(
                    f"state machine safety: {member.name} publishes a metadata batch at offset {base} that "
                    f"is not the one committed there (the committed log ends at {self.committed_end})"
                )
        member.published_checked = published.next_offset
