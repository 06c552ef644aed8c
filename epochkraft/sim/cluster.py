"""One seeded simulation run: a controller (or a Raft quorum of them, ``sim/quorum.py``), brokers and an
acks=all producer on a simulated network, a fault schedule, and the replication invariants checked as the
run goes (on the committed metadata).

Safety invariants (a violation stops the run): no acknowledged record is missing from the current leader's
log (unclean election is off); at most one leader per leader epoch; the leader is in the ISR; the ISR is
within the replicas; leader and partition epochs never go back; a replica is never added to the ISR on
the strength of a fetch from an older incarnation (KIP-903); ISR members agree with the leader up to the
high watermark; a leader's high watermark never goes back.

Liveness (partitions heal): within ``LIVENESS_BOUND_MS`` of the moment the last fault heals (every process
up, every link whole, no message held) and the producer stops, the partition has a leader that knows it
leads, its ISR holds every replica, the leader's high watermark equals its log end and every replica's log
ends there too, no AlterPartition is pending on any broker, the leader recovery state is RECOVERED, and
no follower has been fetching in a loop without progress; with a quorum, every controller is up and one
is active. A violation is shrunk like a safety one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kio.schema.create_topics.v7 import request as ct
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32

from epochkraft.broker.partition import Role
from epochkraft.controller.requests import alter_partition_v3
from epochkraft.controller.settings import ControllerSettings
from epochkraft.metadata.registrations import LeaderRecoveryState
from epochkraft.protocol.error_response import error_response
from epochkraft.protocol.errors import ErrorCode
from epochkraft.sim.nodes import (
    CLUSTER_ID,
    CONTROLLER_TIMEOUT_MS,
    TOPIC,
    Controllers,
    SimBroker,
    SimController,
)
from epochkraft.sim.quorum import SimQuorum
from epochkraft.sim.shrinking import shrink_schedule
from epochkraft.sim.world import LinkPolicy, Violation, World

FAULT_KINDS = (
    "crash",
    "power-loss",
    "wipe",
    "controller-restart",
    "partition",
    "slow-link",
    "hold-alter-partition",
    "fetcher-failure",
)
# The KIP-966 schedule's faults: brokers out of the ISR without a restart (cut off from the controller,
# slow to it), stopped cleanly (controlled shutdown, the clean shutdown marker) or not (crash, power loss).
ELR_FAULT_KINDS = ("crash", "power-loss", "clean-stop", "partition", "slow-link")
# A controller quorum's faults (``target``: a controller's id, 0 for the active one when the fault fires):
# crashes, pairwise partitions between controllers, one-way ones, and a controller cut off from everyone.
QUORUM_FAULT_KINDS = ("controller-crash", "controller-partition", "controller-one-way", "controller-isolate")
QUORUM_SIZE = 3
DURATION_MS = 12_000
FAULTS_UNTIL_MS = 9_000
LIVENESS_BOUND_MS = 10_000  # session expiry (1 s), ISR shrink checks (LAG_MS/4), re-replicating a full log
SPIN_FETCHES = 20  # follower fetches in a row without progress that count as a loop
REPLICATION_FACTOR = 2  # brokers 1 and 2 replicate; broker 3 stands by (as in the KAFKA-14139 report)
# (replication factor, min.insync.replicas) per schedule: KIP-966 needs an ISR that can fall below min ISR.
TOPOLOGIES = {
    "random": (REPLICATION_FACTOR, 1),
    "kafka-14139": (REPLICATION_FACTOR, 1),
    "elr": (3, 2),
    "quorum": (REPLICATION_FACTOR, 1),
}


@dataclass(frozen=True, slots=True)
class Fault:
    at_ms: int
    kind: str
    target: int = 0  # a broker id (0: the controller); a controller's for the controller-* kinds
    other: int = 0
    length_ms: int = 0

    def describe(self) -> str:
        if self.kind == "partition":
            return f"t={self.at_ms}ms partition broker-{self.target} | broker-{self.other} for {self.length_ms}ms"
        if self.kind == "slow-link":
            return f"t={self.at_ms}ms delay broker-{self.target} -> controller by {self.other}ms for {self.length_ms}ms"
        if self.kind == "hold-alter-partition":
            return (
                f"t={self.at_ms}ms hold AlterPartition from broker-{self.target} by {self.other}ms "
                f"for {self.length_ms}ms"
            )
        if self.kind == "controller-restart":
            return f"t={self.at_ms}ms controller restart"
        if self.kind.startswith("controller-"):
            who = f"controller-{self.target}" if self.target else "the active controller"
            if self.kind == "controller-partition":
                return f"t={self.at_ms}ms partition {who} | controller-{self.other} for {self.length_ms}ms"
            if self.kind == "controller-one-way":
                return (
                    f"t={self.at_ms}ms {who} cannot reach controller-{self.other} (the other way works) "
                    f"for {self.length_ms}ms"
                )
            if self.kind == "controller-isolate":
                return f"t={self.at_ms}ms isolate {who} for {self.length_ms}ms"
            return f"t={self.at_ms}ms crash {who}, back after {self.length_ms}ms"
        if self.kind == "fetcher-failure":
            return f"t={self.at_ms}ms broker-{self.target}'s replica fetcher fails and restarts"
        if self.kind == "clean-stop":
            return (
                f"t={self.at_ms}ms controlled shutdown of broker-{self.target}, back after {self.length_ms}ms"
            )
        return f"t={self.at_ms}ms {self.kind} broker-{self.target}, back after {self.length_ms}ms"


def random_schedule(seed: int, kinds: tuple[str, ...] = FAULT_KINDS, brokers: int = 3) -> list[Fault]:
    rng = random.Random(seed * 7919 + 1)
    faults = []
    for _ in range(rng.randint(3, 8)):
        kind = rng.choice(kinds)
        at = rng.randint(500, FAULTS_UNTIL_MS)
        target = rng.randint(1, brokers)
        if kind == "partition":
            other = rng.choice([b for b in range(0, brokers + 1) if b != target])
            faults.append(Fault(at, kind, target, other, rng.randint(200, 2000)))
        elif kind == "slow-link":
            faults.append(Fault(at, kind, target, rng.randint(100, 900), rng.randint(300, 3000)))
        elif kind == "hold-alter-partition":
            faults.append(Fault(at, kind, target, rng.randint(500, 4000), rng.randint(1000, 4000)))
        elif kind in ("controller-restart", "fetcher-failure"):
            faults.append(Fault(at, kind, target if kind == "fetcher-failure" else 0, 0, 0))
        else:
            faults.append(Fault(at, kind, target, 0, rng.randint(50, 2500)))
    return sorted(faults, key=lambda f: f.at_ms)


def race_schedule(seed: int) -> list[Fault]:
    """Schedules from the fault grammar of KAFKA-14139 (follower restart, held AlterPartition, disk
    replacement, partition, leader failure): the kinds are fixed, every timing and duration is random."""
    rng = random.Random(seed * 104729 + 3)
    t1 = rng.randint(1000, 3000)
    t2 = t1 + rng.randint(0, 1500)
    t3 = t2 + rng.randint(0, 2000)
    t4 = t3 + rng.randint(0, 1000)
    t5 = t4 + rng.randint(0, 3000)
    faults = [
        Fault(t1, "crash", 2, 0, rng.randint(200, 1200)),
        Fault(t2, "hold-alter-partition", 1, rng.randint(1000, 4000), rng.randint(1000, 4000)),
        Fault(t3, "wipe", 2, 0, rng.randint(100, 1500)),
        Fault(t4, "partition", 2, 1, rng.randint(500, 4000)),
        Fault(t5, "crash", 1, 0, rng.randint(1000, 3000)),
    ]
    return sorted((f for f in faults if f.at_ms <= FAULTS_UNTIL_MS), key=lambda f: f.at_ms)


def elr_schedule(seed: int) -> list[Fault]:
    """KIP-966's fault on three replicas (min.insync.replicas 2), every kind and timing random: the two
    followers of the first leader go out one after the other (the ISR falls below min ISR), then the leader;
    each is crashed, loses power, is stopped cleanly (controlled shutdown) or is cut off from the controller
    (fenced, its log intact) and comes back; then up to two more faults of any of these kinds."""
    rng = random.Random(seed * 15485863 + 5)
    outs = ("crash", "power-loss", "clean-stop", "partition")
    followers = rng.sample([2, 3], 2)
    at = rng.randint(500, 3000)
    faults = []
    for target in (*followers, 1):
        kind = rng.choice(outs)
        faults.append(Fault(at, kind, target, 0, rng.randint(300, 3500)))
        at += rng.randint(0, 1800)
    for fault in random_schedule(seed, ELR_FAULT_KINDS)[: rng.randint(0, 2)]:
        other = 0 if fault.kind == "partition" and rng.random() < 0.5 else fault.other
        faults.append(Fault(fault.at_ms, fault.kind, fault.target, other, fault.length_ms))
    return sorted((f for f in faults if f.at_ms <= FAULTS_UNTIL_MS), key=lambda f: f.at_ms)


def quorum_schedule(seed: int, controllers: int = QUORUM_SIZE) -> list[Fault]:
    """The random schedule's broker faults against a quorum of controllers, with faults of the quorum's own:
    the active or any controller crashed, cut off from one other (both ways or one way) or from everyone."""
    if controllers < 2:
        raise ValueError("the quorum faults need a quorum of at least 2 controllers")
    rng = random.Random(seed * 7727 + 11)
    faults = random_schedule(seed)[: rng.randint(1, 5)]
    ids = range(1, controllers + 1)
    for _ in range(rng.randint(2, 4)):
        kind = rng.choice(QUORUM_FAULT_KINDS)
        at = rng.randint(500, FAULTS_UNTIL_MS)
        if kind in ("controller-partition", "controller-one-way"):
            target = rng.choice(ids)
            other = rng.choice([c for c in ids if c != target])
            faults.append(Fault(at, kind, target, other, rng.randint(200, 3000)))
        else:
            faults.append(Fault(at, kind, rng.randint(0, controllers), 0, rng.randint(50, 2500)))
    return sorted(faults, key=lambda f: f.at_ms)


SCHEDULES = {
    "random": random_schedule,
    "kafka-14139": race_schedule,
    "elr": elr_schedule,
    "quorum": quorum_schedule,
}


@dataclass
class RunResult:
    seed: int
    violation: str | None
    acked: int
    events: int
    schedule: list[Fault] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    healthy_after_ms: int | None = None  # how long after the last fault healed the partition was healthy
    offline_ms: int = 0  # time with no leader (the controller's view), from the topic's creation on
    under_min_isr_ms: int = 0  # time with an ISR smaller than min.insync.replicas (acks=all refused)
    lost_without_fsync: int = 0  # acknowledged records lost as Kafka tolerates (every holder's disk lost)


class SimCluster:
    def __init__(
        self,
        seed: int,
        schedule: list[Fault],
        *,
        unsafe: bool = False,
        brokers: int = 3,
        check_liveness: bool = True,
        elr: bool = True,
        topology: tuple[int, int] = (REPLICATION_FACTOR, 1),
        controllers: int = 1,
    ) -> None:
        """``controllers``: 1, one controller with its own log; more, a Raft quorum of them."""
        self.world = World(seed, LinkPolicy(min_delay_ms=1, max_delay_ms=8))
        self.elr = elr
        self.replication_factor, self.min_isr = topology
        self.offline_ms = self.under_min_isr_ms = 0
        self.accounted_ms: int | None = None  # unavailability is summed from the topic's creation
        self.offline = self.under_min_isr = False
        self.check_liveness = check_liveness
        self.healthy_after_ms: int | None = None
        self.schedule = schedule
        self.unsafe = unsafe
        settings = ControllerSettings(
            session_timeout_ms=1000,
            unsafe_disable_kip841_eligibility_check=unsafe,
            eligible_leader_replicas_version=1 if elr else 0,
        )
        self.controllers: Controllers = (
            SimController(self.world, settings)
            if controllers == 1
            else SimQuorum(self.world, settings, controllers, CLUSTER_ID)
        )
        self.brokers = {b: SimBroker(self.world, b, self, unsafe) for b in range(1, brokers + 1)}
        # (offset, value, {holder broker: its disk-loss count when the record was acknowledged})
        self.acked: list[tuple[int, bytes, dict[int, int]]] = []
        # broker -> (its log, the log's truncation count, how many of ``acked`` that log was seen to hold):
        # a log that was only appended to since still holds them, so each check scans only the new ones.
        self.verified: dict[int, tuple[object, int, int]] = {}
        self.lost_without_fsync = 0
        self.stale_admissions: list[str] = []
        self.last_standing: dict[int, bool] = {}
        self.previous_leader = -1
        self.pending: list[tuple[int, int, int, int, bytes]] = []  # broker, generation, epoch, offset, value
        # (leader, leader epoch, partition epoch, proposed ISR) -> member -> the member's true broker epoch
        self.proposals: dict[tuple[int, int, int, tuple[int, ...]], dict[int, int]] = {}
        self.fetch_epochs: dict[tuple[int, int], dict[int, int]] = {}
        self.leaders_by_epoch: dict[int, int] = {}
        self.last_epochs = (-1, -1)
        self.hw_seen: dict[tuple[int, int, int], int] = {}
        self.created = False
        self.topic_ready = False  # the controllers answered the topic's creation
        self.next_value = 0

    # ---- hooks from the nodes ------------------------------------------------------------------------
    def on_registered(self, broker: SimBroker) -> None:
        self.world.log(f"broker-{broker.id} registered with epoch {broker.epoch}")
        if not self.created and all(b.epoch >= 0 for b in self.brokers.values()):
            self.created = True
            self.world.after(300, self._create_topic)

    def note_fetch(self, leader: SimBroker, request: dict[str, Any]) -> None:
        self.fetch_epochs.setdefault((leader.id, leader.generation), {})[request["replica"]] = request[
            "true_epoch"
        ]

    def note_proposal(self, leader: SimBroker, item: Any) -> None:
        fetched = self.fetch_epochs.get((leader.id, leader.generation), {})
        key = (leader.id, item.leader_epoch, item.partition_epoch, item.isr_ids)
        self.proposals[key] = {b: fetched.get(b, -1) for b, _ in item.new_isr}

    def on_alter_partition(self, core: Any, request: Any, version: int) -> Any:
        topic = core.replication.topic(TOPIC)
        before = set(topic.partitions[0].isr) if topic and 0 in topic.partitions else set()
        response = core.alter_partition(self.world.now_ms, alter_partition_v3(request), version)
        topic = core.replication.topic(TOPIC)
        if topic is None or 0 not in topic.partitions:
            return response
        after = set(topic.partitions[0].isr)
        sent = alter_partition_v3(request).topics[0].partitions[0]
        key = (
            request.broker_id,
            sent.leader_epoch,
            sent.partition_epoch,
            tuple(s.broker_id for s in sent.new_isr_with_epochs),
        )
        proposal = self.proposals.get(key, {})
        for member in after - before:
            registration = core.cluster.brokers.get(member)
            true_epoch = proposal.get(member, -1)
            if registration is not None and true_epoch != registration.epoch:
                message = (
                    f"broker-{member} added to the ISR from a fetch of its incarnation with epoch {true_epoch}, "
                    f"but its registration epoch is {registration.epoch} (stale replica admitted)"
                )
                if not self.unsafe:
                    raise Violation(message)
                # With the pre-KIP-903 switches this is the known hole: run on to see whether it loses data.
                self.stale_admissions.append(message)
                self.world.log(f"STALE REPLICA ADMITTED {message}")
        if after != before:
            self.world.log(
                f"ISR {sorted(before)} -> {sorted(after)} (AlterPartition v{version} from broker-{request.broker_id})"
            )
        return response

    def on_became_leader(self, broker: SimBroker) -> None:
        self.world.log(
            f"broker-{broker.id} leads epoch {broker.hosted().leader_epoch} with {len(broker.log.entries)} records"
        )
        self._check_leader_has_acked(broker)

    def on_high_watermark(self, broker: SimBroker) -> None:
        p = broker.hosted()
        key = (broker.id, broker.generation, p.leader_epoch)
        if p.high_watermark < self.hw_seen.get(key, 0):
            raise Violation(f"high watermark of broker-{broker.id} went back to {p.high_watermark}")
        self.hw_seen[key] = p.high_watermark
        still = []
        for b, generation, epoch, offset, value in self.pending:
            if b != broker.id or generation != broker.generation or epoch != p.leader_epoch:
                still.append((b, generation, epoch, offset, value))
                continue
            result = p.acks_all_result(offset + 1)
            if result is None:
                still.append((b, generation, epoch, offset, value))
            elif result == ErrorCode.none:
                holders = {
                    b.id: b.disk_losses
                    for b in self.brokers.values()
                    if b.up and len(b.log.entries) > offset and b.log.entries[offset][1] == value
                }
                self.world.send(
                    broker.name, "client", partial(self.acked.append, (offset, value, holders)), "ack"
                )
        self.pending = still

    # ---- the client and the topic -------------------------------------------------------------------
    def _create_topic(self) -> None:
        request = ct.CreateTopicsRequest(
            topics=(
                ct.CreatableTopic(
                    name=TopicName(TOPIC),
                    num_partitions=i32(-1),
                    replication_factor=i16(-1),
                    assignments=(
                        ct.CreatableReplicaAssignment(
                            partition_index=i32(0),
                            broker_ids=tuple(BrokerId(b) for b in self.brokers)[: self.replication_factor],
                        ),
                    ),
                    configs=(ct.CreatableTopicConfig(name="min.insync.replicas", value=str(self.min_isr)),),
                ),
            ),
            timeout=__import__("datetime").timedelta(seconds=1),
            validate_only=False,
        )
        if isinstance(self.controllers, SimController):
            self.controllers.core.create_topics(self.world.now_ms, request)
            self._topic_created()
        else:
            self._create_topic_in_quorum(request, 1)

    def _topic_created(self) -> None:
        self.world.log("topic created")
        self._produce_loop()

    def _create_topic_in_quorum(self, request: ct.CreateTopicsRequest, target: int) -> None:
        """As an admin client: to one controller after another until the active one answers (an earlier
        attempt may have been committed without an answer: TOPIC_ALREADY_EXISTS is success too)."""
        settled = False

        def settle(response: object) -> None:
            nonlocal settled
            if settled or self.topic_ready:
                return
            settled = True
            created = (ErrorCode.none, ErrorCode.topic_already_exists)
            if isinstance(response, CreateTopicsResponse) and response.topics[0].error_code in created:
                self.topic_ready = True
                self._topic_created()
                return
            retry = partial(self._create_topic_in_quorum, request, self.controllers.next_target(target))
            self.world.after(100, retry)

        refusal = error_response(request, CreateTopicsResponse, ErrorCode.not_controller)
        self.controllers.send(
            "client",
            target,
            "CreateTopicsRequest",
            lambda c, now: c.create_topics(now, request),
            settle,
            refusal,
        )
        self.world.after(CONTROLLER_TIMEOUT_MS, partial(settle, None))

    def _produce_loop(self) -> None:
        topic = self.controllers.topic(TOPIC)
        leader_id = topic.partitions[0].leader if topic and self.controllers.available else -1
        leader = self.brokers.get(leader_id)
        if leader is not None and self.world.now_ms < DURATION_MS - 1000:
            value = f"{self.next_value}".encode()
            self.next_value += 1

            def at_leader(leader: SimBroker = leader) -> None:
                if not leader.up or leader.partition is None:
                    return
                error, offset = leader.produce(value)
                if error == ErrorCode.none:
                    self.pending.append(
                        (leader.id, leader.generation, leader.partition.leader_epoch, offset, value)
                    )
                    self.on_high_watermark(leader)

            self.world.send("client", leader.name, at_leader, "produce")
        self.world.after(25, self._produce_loop)

    # ---- invariants -----------------------------------------------------------------------------------
    def _check_leader_has_acked(self, broker: SimBroker) -> None:
        entries = broker.log.entries
        seen_log, seen_truncations, verified = self.verified.get(broker.id, (None, -1, 0))
        if seen_log is not broker.log or seen_truncations != broker.log.truncations:
            verified = 0
        index = verified
        while index < len(self.acked):
            offset, value, holders = self.acked[index]
            index += 1
            if offset < len(entries) and entries[offset][1] == value:
                continue
            epoch = broker.hosted().leader_epoch
            if all(self.brokers[b].disk_losses != losses for b, losses in holders.items()) or (
                self.last_standing.get(epoch) and broker.disk_losses != holders.get(broker.id, -1)
            ):
                # Tolerated, as in Kafka: every replica holding it lost its unflushed tail or its disk
                # (no fsync), or the last ISR member came back with an empty disk and was re-elected
                # (the exception KIP-903 names; KIP-966 addresses it).
                index -= 1
                del self.acked[index]
                self.verified.clear()  # other brokers' counts referred to the list before this removal
                self.lost_without_fsync += 1
                continue
            cause = f" after {self.stale_admissions[-1]}" if self.stale_admissions else ""
            raise Violation(
                f"acknowledged record {value.decode()} at offset {offset} is missing from broker-{broker.id}, "
                f"leader of epoch {epoch} ({len(entries)} records): lost{cause}"
            )
        self.verified[broker.id] = (broker.log, broker.log.truncations, index)

    def check(self) -> None:
        topic = self.controllers.topic(TOPIC)
        if topic is None or 0 not in topic.partitions:
            return
        p = topic.partitions[0]
        self._account_unavailability(p)
        if p.leader != -1 and p.leader_epoch not in self.leaders_by_epoch:
            # Re-electing the last ISR member of an offline partition (the KIP-903 exception). With ELR on,
            # only the last known leader's election is that exception (marked unclean: RECOVERING); an
            # election from the ELR is clean and must lose nothing.
            exception = not self.elr or p.leader_recovery_state == LeaderRecoveryState.RECOVERING
            self.last_standing[p.leader_epoch] = (
                exception and self.previous_leader == -1 and tuple(p.isr) == (p.leader,)
            )
        self.previous_leader = p.leader
        if p.leader != -1:
            known = self.leaders_by_epoch.setdefault(p.leader_epoch, p.leader)
            if known != p.leader:
                raise Violation(f"two leaders ({known}, {p.leader}) in leader epoch {p.leader_epoch}")
            if p.leader not in p.isr:
                raise Violation(f"leader {p.leader} is not in the ISR {list(p.isr)}")
        if not set(p.isr) <= set(p.replicas):
            raise Violation(f"ISR {list(p.isr)} is not within the replicas {list(p.replicas)}")
        if (p.leader_epoch, p.partition_epoch) < self.last_epochs or p.partition_epoch < self.last_epochs[1]:
            raise Violation(f"epochs went back: {self.last_epochs} -> {(p.leader_epoch, p.partition_epoch)}")
        self.last_epochs = (p.leader_epoch, p.partition_epoch)
        leader = self.brokers.get(p.leader)
        if (
            leader is None
            or not leader.up
            or leader.partition is None
            or leader.partition.role != Role.LEADER
        ):
            return
        if leader.partition.leader_epoch != p.leader_epoch:
            return
        self._check_leader_has_acked(leader)
        hw = leader.partition.high_watermark
        for member in p.isr:
            follower = self.brokers[member]
            if member == p.leader or not follower.up:
                continue
            limit = min(hw, len(follower.log.entries))
            if follower.log.entries[:limit] != leader.log.entries[:limit]:
                raise Violation(
                    f"broker-{member} (in the ISR) differs from the leader below the high watermark"
                )

    def _account_unavailability(self, p: Any) -> None:
        """Adds the time since the last check to the offline and under-min-ISR sums, by the state then."""
        now = self.world.now_ms
        if self.accounted_ms is not None:
            elapsed = now - self.accounted_ms
            self.offline_ms += elapsed if self.offline else 0
            self.under_min_isr_ms += elapsed if self.under_min_isr else 0
        self.accounted_ms = now
        self.offline = p.leader == -1
        self.under_min_isr = len(p.isr) < self.min_isr

    # ---- liveness -------------------------------------------------------------------------------------
    def healed_at_ms(self) -> int:
        """When the last fault has healed: every process up, every link whole, no message held back."""
        healed = DURATION_MS - 1000  # the producer stops here
        for fault in self.schedule:
            extra = fault.other if fault.kind in ("slow-link", "hold-alter-partition") else 0
            healed = max(healed, fault.at_ms + fault.length_ms + extra)
        return healed

    def liveness_problems(self) -> list[str]:
        """What keeps the partition from being healthy now (empty: healthy)."""
        topic = self.controllers.topic(TOPIC)
        if topic is None or 0 not in topic.partitions:
            return ["the topic does not exist"]
        p = topic.partitions[0]
        problems = []
        if p.leader == -1:
            problems.append(f"no leader (ISR {list(p.isr)})")
        if set(p.isr) != set(p.replicas):
            problems.append(f"ISR {list(p.isr)} does not hold every replica {list(p.replicas)}")
        if int(p.leader_recovery_state) != 0:
            problems.append("leader recovery state is still RECOVERING")
        leader = self.brokers.get(p.leader)
        lp = leader.partition if leader is not None else None
        if leader is not None and (lp is None or lp.role != Role.LEADER or lp.leader_epoch != p.leader_epoch):
            problems.append(f"broker-{p.leader} does not know it leads epoch {p.leader_epoch}")
        elif leader is not None and lp is not None:
            end = len(leader.log.entries)
            if lp.high_watermark != end:
                problems.append(f"leader's high watermark {lp.high_watermark} != its log end {end}")
            for member in p.replicas:
                follower = self.brokers[member]
                if member != p.leader and len(follower.log.entries) != end:
                    problems.append(
                        f"broker-{member}'s log ends at {len(follower.log.entries)}, the leader's at {end}"
                    )
        if isinstance(self.controllers, SimQuorum):
            problems += self.controllers.liveness_problems()
        for broker in self.brokers.values():
            if not broker.up:
                problems.append(f"broker-{broker.id} is down")
                continue
            pending = broker.replicas.pending_alter_partitions
            bp = broker.partition
            if pending or (bp is not None and bp.pending is not None):
                problems.append(f"broker-{broker.id} has an AlterPartition pending")
            if broker.fetches_without_progress >= SPIN_FETCHES:
                problems.append(
                    f"broker-{broker.id} fetched {broker.fetches_without_progress} times in a row without progress"
                )
        return problems

    def _await_liveness(self, events: int) -> int:
        """Runs on (checking safety) until the last fault has healed, then until the partition is healthy;
        a violation names what is still wrong at the deadline."""
        healed = self.healed_at_ms()
        deadline = healed + LIVENESS_BOUND_MS
        while True:
            if self.world.now_ms >= healed and not self.liveness_problems():
                self.healthy_after_ms = self.world.now_ms - healed
                self.world.log(f"healthy {self.healthy_after_ms} ms after the last fault healed")
                return events
            if self.world.now_ms >= deadline:
                problems = "; ".join(self.liveness_problems())
                raise Violation(f"not healed {LIVENESS_BOUND_MS} ms after the last fault healed: {problems}")
            step_end = min(max(self.world.now_ms, healed) + 100, deadline)
            while (next_ms := self.world.next_event_ms()) is not None and next_ms <= step_end:
                self.world.run_until(next_ms)
                events += 1
                self.check()
            self.world.now_ms = max(self.world.now_ms, step_end)

    # ---- faults ----------------------------------------------------------------------------------------
    def _schedule_faults(self) -> None:
        for fault in self.schedule:
            self.world.at(fault.at_ms, partial(self._apply, fault), "fault")

    def _apply(self, fault: Fault) -> None:
        self.world.log(f"FAULT {fault.describe()}")
        if isinstance(self.controllers, SimQuorum) and fault.kind.startswith("controller-"):
            self._apply_to_quorum(self.controllers, fault)
            return
        if fault.kind == "controller-restart":
            assert isinstance(self.controllers, SimController)
            self.controllers.restart()
            return
        if fault.kind == "fetcher-failure":
            self.brokers[fault.target].fail_fetcher()
            return
        if fault.kind == "clean-stop":
            stopping = self.brokers[fault.target]
            if stopping.up and not stopping.stop_requested:
                stopping.controlled_shutdown(lambda: self.world.after(fault.length_ms, stopping.start))
            return
        if fault.kind == "partition":
            a = f"broker-{fault.target}"
            for b in self.controllers.names if fault.other == 0 else (f"broker-{fault.other}",):
                self.world.cut_for(a, b, fault.length_ms)
            return
        if fault.kind == "slow-link":
            src = f"broker-{fault.target}"
            for name in self.controllers.names:
                self.world.set_link(src, name, LinkPolicy(fault.other, fault.other + 5))
                self.world.after(fault.length_ms, partial(self.world.links.pop, (src, name), None))
            return
        if fault.kind == "hold-alter-partition":
            for name in self.controllers.names:
                key = (f"broker-{fault.target}", name, "AlterPartitionRequest")
                self.world.label_delays[key] = fault.other
                self.world.after(fault.length_ms, partial(self.world.label_delays.pop, key, None))
            return
        broker = self.brokers[fault.target]
        if not broker.up:
            return
        broker.crash()
        if fault.kind == "power-loss":
            broker.log.power_loss()
            broker.disk_losses += 1
        elif fault.kind == "wipe":
            broker.log = type(broker.log)()
            broker.clean_marker = -1  # a new disk: no clean shutdown marker either
            broker.disk_losses += 1
        self.world.after(fault.length_ms, broker.start)

    def _apply_to_quorum(self, quorum: SimQuorum, fault: Fault) -> None:
        active = quorum.active()
        member = quorum.members.get(fault.target) if fault.target else active
        if member is None:
            return  # no active controller to aim at now
        if fault.kind in ("controller-partition", "controller-one-way"):
            other = quorum.members[fault.other].name
            self.world.cut_for(
                member.name, other, fault.length_ms, one_way=fault.kind == "controller-one-way"
            )
        elif fault.kind == "controller-isolate":
            others = [m.name for m in quorum.members.values() if m is not member]
            for name in [*others, *(b.name for b in self.brokers.values()), "client"]:
                self.world.cut_for(member.name, name, fault.length_ms)
        elif member.quorum is not None:  # controller-crash, controller-restart (back at once)
            quorum.crash(member)
            back = 0 if fault.kind == "controller-restart" else fault.length_ms
            self.world.after(back, partial(quorum.start, member))

    # ---- running ---------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        for broker in self.brokers.values():
            broker.start()

        def tick() -> None:
            self.controllers.tick()
            self.world.after(50, tick)

        self.world.after(50, tick)
        self._schedule_faults()
        events = 0
        violation = None
        try:
            while (next_ms := self.world.next_event_ms()) is not None and next_ms <= DURATION_MS:
                self.world.run_until(next_ms)
                events += 1
                self.check()
            if self.check_liveness:
                events = self._await_liveness(events)
        except Violation as exc:
            violation = str(exc)
            self.world.log(f"VIOLATION {violation}")
        return RunResult(
            self.world.seed,
            violation,
            len(self.acked),
            events,
            self.schedule,
            self.world.trace,
            self.healthy_after_ms,
            self.offline_ms,
            self.under_min_isr_ms,
            self.lost_without_fsync,
        )


def run_seed(
    seed: int,
    *,
    unsafe: bool = False,
    faults: str = "random",
    schedule: list[Fault] | None = None,
    elr: bool = True,
    controllers: int | None = None,
) -> RunResult:
    """``controllers``: one with its own log, or a Raft quorum of them (by default a quorum of
    QUORUM_SIZE for the quorum faults, one otherwise)."""
    if controllers is None:
        controllers = QUORUM_SIZE if faults == "quorum" else 1
    if schedule is None:
        schedule = quorum_schedule(seed, controllers) if faults == "quorum" else SCHEDULES[faults](seed)
    return SimCluster(
        seed, schedule, unsafe=unsafe, elr=elr, topology=TOPOLOGIES[faults], controllers=controllers
    ).run()


def shrink(
    result: RunResult,
    *,
    unsafe: bool,
    faults: str = "random",
    elr: bool = True,
    controllers: int | None = None,
) -> RunResult:
    """Drops faults one at a time while the run still violates an invariant (same seed)."""
    return shrink_schedule(
        result,
        lambda schedule: run_seed(
            result.seed, unsafe=unsafe, faults=faults, schedule=schedule, elr=elr, controllers=controllers
        ),
    )
