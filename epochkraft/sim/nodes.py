"""Simulated nodes around the real sans-IO cores: the Controller, and brokers that drive the broker's own
``ReplicaSet`` and ``fetch_rules`` (as ReplicaManager, the Fetch handler and the fetcher do) and its
``BrokerLifecycle`` (as the daemon's heartbeat loop does), with an in-memory log that can lose its unflushed
tail or be wiped.

Only the IO is simulated: messages travel through the World's network, time is the World's clock,
and a disk is a Python list with a recovery point. Every decision is the real code's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.alter_partition.v3.response import AlterPartitionResponse
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Listener
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.static.primitive import i16, u16

from epochkraft.broker.alter_partition_manager import AlterPartitionRequest
from epochkraft.broker.fetch_rules import out_of_range_reset, plan_read, truncation_offset
from epochkraft.broker.lifecycle import BrokerLifecycle, Registered, Registration, ShutDownNow, State
from epochkraft.broker.log.epoch_cache import LeaderEpochCache
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.partition import Partition, Role
from epochkraft.broker.replica_set import ReplicaOutputs, ReplicaSet
from epochkraft.controller.controller import Controller
from epochkraft.controller.settings import ControllerSettings
from epochkraft.metadata.registrations import TopicInfo
from epochkraft.net.controller_channel import not_controller
from epochkraft.protocol.error_response import error_response
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import response_class
from epochkraft.protocol.metadata_codec import read_metadata_batches
from epochkraft.sim.world import World

CLUSTER_ID = "sim-cluster"
TOPIC = "sim"
KEY = (TOPIC, 0)
HEARTBEAT_MS = 100
FETCH_MS = 20
METADATA_MS = 25
LAG_MS = 3000
FETCHER_BACKOFF_MS = 100  # the ReplicaFetcher's restart backoff
CONTROLLER_TIMEOUT_MS = 300  # no answer from a controller of a quorum: the broker tries the next one
FETCH_BATCH = 10  # records per follower fetch: re-replicating a log takes a while, as with real logs


ControllerRequest = BrokerRegistrationRequest | BrokerHeartbeatRequest | AlterPartitionRequest
ControllerResponse = BrokerRegistrationResponse | BrokerHeartbeatResponse | AlterPartitionResponse


def _response_class(request: ControllerRequest) -> type:
    """What the broker reads the answer as (the controller answers AlterPartition v2 and v3 with v3)."""
    if isinstance(request, BrokerRegistrationRequest | BrokerHeartbeatRequest):
        return response_class(request.__api_key__, request.__version__)
    return AlterPartitionResponse


@dataclass
class SimLog:
    """A partition log: (leader epoch, value) per offset, a recovery point, a leader-epoch cache."""

    entries: list[tuple[int, bytes]] = field(default_factory=list)
    recovery_point: int = 0
    truncations: int = 0  # bumped whenever entries already written may change (lets checks be incremental)

    def __post_init__(self) -> None:
        self.epochs = LeaderEpochCache(None, lambda: len(self.entries))
        self._rebuild_epochs()

    def _rebuild_epochs(self) -> None:
        self.epochs.entries = []
        for offset, (epoch, _) in enumerate(self.entries):
            self.epochs.assign(epoch, offset)

    def append_leader(self, value: bytes, epoch: int) -> int:
        self.epochs.assign(epoch, len(self.entries))
        self.entries.append((epoch, value))
        return len(self.entries) - 1

    def append_follower(self, start: int, entries: list[tuple[int, bytes]]) -> None:
        assert start == len(self.entries)
        for epoch, value in entries:
            self.epochs.assign(epoch, len(self.entries))
            self.entries.append((epoch, value))

    def truncate_to(self, offset: int) -> None:
        if offset < len(self.entries):
            self.truncations += 1
        del self.entries[max(offset, 0) :]
        self.recovery_point = min(self.recovery_point, len(self.entries))
        self.epochs.truncate_from_end(len(self.entries))

    def flush(self) -> None:
        self.recovery_point = len(self.entries)

    def power_loss(self) -> None:
        self.truncate_to(self.recovery_point)
        self._rebuild_epochs()


class SimController:
    """One controller with its own log (no quorum): it decides and answers at once."""

    names: tuple[str, ...] = ("controller",)

    def __init__(self, world: World, settings: ControllerSettings) -> None:
        self.world = world
        self.settings = settings
        self.core = Controller(CLUSTER_ID, settings)
        self.core.bootstrap(world.now_ms)
        self.up = True

    @property
    def available(self) -> bool:
        return self.up

    def topic(self, name: str) -> TopicInfo | None:
        return self.core.replication.topic(name)

    def next_target(self, target: int) -> int:
        return target

    def restart(self) -> None:
        """A new process replays the metadata log (sessions start afresh)."""
        data = self.core.standalone_log.read(0, 1 << 40)
        self.core = Controller(CLUSTER_ID, self.settings)
        self.core.load(data)

    def tick(self) -> None:
        if self.up:
            self.core.tick(self.world.now_ms)
            self.core.outbox.clear()

    def send(
        self,
        src: str,
        target: int,
        label: str,
        decide: Callable[[Controller, int], object],
        answer: Callable[[object], None],
        refusal: object,
    ) -> None:
        def at_controller() -> None:
            if not self.up:
                return
            response = decide(self.core, self.world.now_ms)
            self.core.outbox.clear()
            self.world.send("controller", src, lambda: answer(response), "response")

        self.world.send(src, "controller", at_controller, label)

    def read_metadata(self, src: str, target: int, offset: int, deliver: Callable[[bytes], None]) -> None:
        def at_controller() -> None:
            if not self.up:
                return
            data = self.core.standalone_log.read(offset, 1 << 30)
            if data:
                self.world.send("controller", src, lambda: deliver(data), "metadata")

        self.world.send(src, "controller", at_controller, "metadata-fetch")


class Controllers(Protocol):
    """What the brokers and the run ask of the controllers: one (``SimController``) or a Raft quorum
    (``sim.quorum.SimQuorum``). ``target`` names the controller a broker's request goes to (its id in a
    quorum); ``topic`` reads the committed metadata."""

    names: tuple[str, ...]

    @property
    def available(self) -> bool: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def next_target(self, target: int) -> int: ...

    def tick(self) -> None: ...

    def send(
        self,
        src: str,
        target: int,
        label: str,
        decide: Callable[[Controller, int], object],
        answer: Callable[[object], None],
        refusal: object,
    ) -> None: ...

    def read_metadata(self, src: str, target: int, offset: int, deliver: Callable[[bytes], None]) -> None: ...


class SimBroker:
    def __init__(self, world: World, broker_id: int, cluster: Any, unsafe: bool) -> None:
        self.world = world
        self.id = broker_id
        self.cluster = cluster
        self.unsafe = unsafe
        self.log = SimLog()
        self.up = False
        self.generation = 0  # bumps on every start, so timers of a dead incarnation stop
        self.disk_losses = 0  # power losses and wipes suffered
        self.clean_marker = -1  # the clean shutdown marker on disk: the epoch a controlled shutdown ended
        # registration and heartbeats, by the broker daemon's rules (one per incarnation, made on start)
        self.lifecycle = BrokerLifecycle(broker_id, uuid.UUID(int=0), HEARTBEAT_MS)
        self.stop_requested = False  # as the daemon's SIGTERM: heartbeats ask to shut down once registered
        self.controller_target = 1  # the controller the broker's requests go to first (in a quorum)
        self.on_stopped: Any = None  # called once a controlled shutdown has stopped the broker

    @property
    def name(self) -> str:
        return f"broker-{self.id}"

    @property
    def epoch(self) -> int:
        """The broker epoch; -1 while (re)registering, when metadata pulls and fetches wait."""
        return -1 if self.lifecycle.state == State.STARTING else self.lifecycle.broker_epoch

    # ---- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        self.up = True
        self.generation += 1
        self.incarnation = uuid.UUID(int=self.world.rng.getrandbits(128))
        self.lifecycle = BrokerLifecycle(self.id, self.incarnation, HEARTBEAT_MS)
        # As the daemon: the marker is read once, so a crash after this start registers as unclean.
        self.lifecycle.begin_registration(self.clean_marker)
        self.clean_marker = -1
        self.stop_requested = False
        self.cache = MetadataCache()
        self.replicas = ReplicaSet(
            self.id,
            lambda: self.epoch,
            self.cache,
            self,
            replica_lag_time_max_ms=LAG_MS,
            unsafe_pre_kip903=self.unsafe,
        )
        self.fetch_in_flight = False
        self.fetcher_generation = 0  # bumps when the fetcher fails: its fetch in flight is dropped
        self.fetch_paused_until_ms = 0
        self.fetches_without_progress = 0  # follower fetches in a row that moved nothing while behind
        self._every(0, self._register_or_heartbeat, HEARTBEAT_MS)
        self._every(5, self._pull_metadata, METADATA_MS)
        self._every(10, self._follower_fetch, FETCH_MS)
        self._every(15, self._leader_duties, LAG_MS // 4)

    @property
    def partition(self) -> Partition | None:
        return self.replicas.partitions.get(KEY) if self.up else None

    def hosted(self) -> Partition:
        """The partition, for a caller told of its leadership or high watermark (so it is hosted)."""
        p = self.partition
        if p is None:
            raise AssertionError(f"broker-{self.id} hosts no partition")
        return p

    # ---- ReplicaHost --------------------------------------------------------------------------------------
    def open_replica(self, key: tuple[str, int]) -> int:
        return 0  # no high-watermark checkpoint: a restarted replica learns the HW from its leader

    def log_end_offset(self, key: tuple[str, int]) -> int:
        return len(self.log.entries)

    def crash(self) -> None:
        self.up = False
        self.generation += 1

    def controlled_shutdown(self, then: Any) -> None:
        """Heartbeats asking to shut down until the controller says so (its leaderships moved), then the
        broker flushes its log, writes the clean shutdown marker and stops; ``then`` runs after."""
        self.stop_requested = True
        self.lifecycle.begin_controlled_shutdown()
        self.on_stopped = then

    def _every(self, offset: int, action: Any, interval: int) -> None:
        generation = self.generation

        def run() -> None:
            if not self.up or self.generation != generation:
                return
            action()
            self.world.after(interval, run)

        self.world.after(offset + self.world.rng.randint(0, interval), run)

    def _send_controller(
        self, request: ControllerRequest, decide: Callable[[Controller, int], object], handle: Any
    ) -> None:
        """To the controller that answered last; in a quorum, as ControllerChannel: on to the next one when
        the answer is NOT_CONTROLLER or none comes within CONTROLLER_TIMEOUT_MS."""
        generation = self.generation
        target = self.controller_target
        controllers = self.cluster.controllers
        quorum = len(controllers.names) > 1
        answered = False

        def back(response: object) -> None:
            nonlocal answered
            answered = True
            if self.up and self.generation == generation:
                if (
                    quorum
                    and isinstance(response, ControllerResponse)
                    and not_controller(response)
                    and self.controller_target == target
                ):
                    self.controller_target = controllers.next_target(target)
                handle(response)

        def timed_out() -> None:
            if not answered and self.generation == generation and self.controller_target == target:
                self.controller_target = controllers.next_target(target)

        refusal = (
            error_response(request, _response_class(request), ErrorCode.not_controller) if quorum else None
        )
        controllers.send(self.name, target, type(request).__name__, decide, back, refusal)
        if quorum:
            self.world.after(CONTROLLER_TIMEOUT_MS, timed_out)

    def _register_or_heartbeat(self) -> None:
        """Every HEARTBEAT_MS, answered or not: the timer stands for both of the core's intervals."""
        if self.lifecycle.state == State.STARTING:
            registration = Registration(
                cluster_id=CLUSTER_ID,
                listeners=(Listener(name="SIM", host=self.name, port=u16(0), security_protocol=i16(0)),),
                features=(),
                log_dirs=(),
            )
            request = self.lifecycle.registration_request(registration)
            self._send_controller(
                request, lambda core, now: core.register_broker(now, request), self._registered
            )
            return
        if self.stop_requested:
            self.lifecycle.begin_controlled_shutdown()  # again once registered anew after a stale epoch
        heartbeat = self.lifecycle.heartbeat_request(self.cache.next_offset)
        self._send_controller(
            heartbeat, lambda core, now: core.heartbeat(now, heartbeat), self._heartbeat_answered
        )

    def _registered(self, response: BrokerRegistrationResponse) -> None:
        if isinstance(self.lifecycle.on_registration_response(response), Registered):
            self.cluster.on_registered(self)

    def _heartbeat_answered(self, response: BrokerHeartbeatResponse) -> None:
        """Only a clean stop has to be carried out here: a registration again follows from the state, and
        the timer sends the next heartbeat."""
        if isinstance(self.lifecycle.on_heartbeat_response(response), ShutDownNow):
            self.log.flush()
            self.clean_marker = self.epoch
            self.crash()
            self.world.log(f"broker-{self.id} stopped cleanly (marker: epoch {self.epoch})")
            if self.on_stopped is not None:
                self.on_stopped()

    # ---- metadata ----------------------------------------------------------------------------------------
    def _pull_metadata(self) -> None:
        if self.epoch < 0:
            return  # as the daemon: follow the metadata log only once registered
        generation = self.generation

        def back(data: bytes) -> None:
            if self.up and self.generation == generation:
                self._apply_metadata(data)

        self.cluster.controllers.read_metadata(
            self.name, self.controller_target, self.cache.next_offset, back
        )

    def _apply_metadata(self, data: bytes) -> None:
        changes = Changes()
        start = self.cache.next_offset
        self.cache.load(((o, r) for o, r in read_metadata_batches(data) if o >= start), changes)
        outputs = self.replicas.apply_metadata(self.world.now_ms, changes)
        for transition in outputs.transitions:
            p = self.replicas.partitions.get(transition.key)
            if transition.kind == "leader" and transition.new_term and p is not None:
                self.log.epochs.assign(p.leader_epoch, len(self.log.entries))
                self.cluster.on_became_leader(self)
        self._after_replica_set(outputs)

    def _after_replica_set(self, outputs: ReplicaOutputs) -> None:
        """Carries out what a call to the replica set returned, as ReplicaManager does."""
        if outputs.hw_moved:
            self.cluster.on_high_watermark(self)
        requested = False
        for event in outputs.isr_events:
            if event.kind == "requested" and event.item is not None:
                self.cluster.note_proposal(self, event.item)
                requested = True
        if requested:
            self._send_alter_partition()

    # ---- replication -------------------------------------------------------------------------------------
    def fail_fetcher(self) -> None:
        """The replica fetcher dies of an exception: as ReplicaFetcher, it drops what was in flight and
        starts again after its backoff."""
        if self.up:
            self.fetcher_generation += 1
            self.fetch_in_flight = False
            self.fetch_paused_until_ms = self.world.now_ms + FETCHER_BACKOFF_MS

    def _follower_fetch(self) -> None:
        p = self.partition
        if p is None or p.role != Role.FOLLOWER or p.leader_id < 0 or self.fetch_in_flight:
            return
        if self.world.now_ms < self.fetch_paused_until_ms:
            return
        leader = self.cluster.brokers.get(p.leader_id)
        if leader is None:
            return
        self.fetch_in_flight = True
        request = {
            "replica": self.id,
            "epoch": -1 if self.unsafe else self.epoch,
            "true_epoch": self.epoch,
            "offset": len(self.log.entries),
            "last_epoch": self.log.epochs.latest_epoch,
            "leader_epoch": p.leader_epoch,
        }
        generation = self.generation
        fetcher_generation = self.fetcher_generation

        def at_leader() -> None:
            if not leader.up:
                return
            response = leader.serve_fetch(request)

            def back() -> None:
                if (
                    self.up
                    and self.generation == generation
                    and self.fetcher_generation == fetcher_generation
                ):
                    self.fetch_in_flight = False
                    self._on_fetch_response(request, response)

            self.world.send(leader.name, self.name, back, "fetch-response")

        def timeout() -> None:
            if self.generation == generation and self.fetcher_generation == fetcher_generation:
                self.fetch_in_flight = False

        self.world.send(self.name, leader.name, at_leader, "fetch")
        self.world.after(200, timeout)

    def serve_fetch(self, request: dict[str, Any]) -> dict[str, Any]:
        """The leader's answer, by the Fetch handler's rules (``fetch_rules.plan_read``)."""
        p = self.partition
        if p is None:
            return {"error": ErrorCode.not_leader_or_follower}
        end = len(self.log.entries)
        plan = plan_read(
            p,
            self.log.epochs,
            log_start_offset=0,
            log_end_offset=end,
            fetch_offset=request["offset"],
            last_fetched_epoch=request["last_epoch"],
            current_leader_epoch=request["leader_epoch"],
            replica_id=request["replica"],
            replica_epoch=request["epoch"],
            brokers=self.cache.image,
        )
        if not plan.reads:
            return {
                "error": plan.error,
                "diverging": plan.diverging,
                "hw": plan.high_watermark,
                "start": plan.log_start_offset,
            }
        offset = request["offset"]
        self.cluster.note_fetch(self, request)
        outputs = self.replicas.on_follower_fetch(
            self.world.now_ms, KEY, request["replica"], request["epoch"], offset, end
        )
        self._after_replica_set(outputs)
        return {
            "error": ErrorCode.none,
            "diverging": None,
            "entries": self.log.entries[offset : min(offset + FETCH_BATCH, plan.max_offset)],
            "hw": p.high_watermark,
            "leader_end": end,
        }

    def _on_fetch_response(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        """The follower's side, by the fetcher's rules (``truncation_offset``, ``out_of_range_reset``)."""
        p = self.partition
        if p is None or p.role != Role.FOLLOWER:
            return
        before = len(self.log.entries)
        if response["error"] == ErrorCode.offset_out_of_range:
            target = out_of_range_reset(before, response["start"], response["hw"])
            self.log.truncate_to(min(target, before))
        elif response["error"] != ErrorCode.none:
            return
        elif response["diverging"] is not None:
            self.log.truncate_to(
                max(truncation_offset(self.log.epochs, before, p.high_watermark, response["diverging"]), 0)
            )
            p.high_watermark = min(p.high_watermark, len(self.log.entries))
        elif request["offset"] == before:
            self.log.append_follower(request["offset"], response["entries"])
            p.update_follower_high_watermark(response["hw"], len(self.log.entries))
            if response["leader_end"] <= before:
                self.fetches_without_progress = 0  # caught up: nothing to fetch is not a spin
                return
        progressed = len(self.log.entries) != before
        self.fetches_without_progress = 0 if progressed else self.fetches_without_progress + 1

    def _send_alter_partition(self) -> None:
        request = self.replicas.poll_alter_partition(self.world.now_ms)
        if request is None:
            return
        generation = self.generation

        def answered(response: Any) -> None:
            self._after_replica_set(self.replicas.on_alter_partition_response(self.world.now_ms, response))
            self._send_alter_partition()

        def lost() -> None:  # no answer: the sender resends, as on a network error
            if self.generation == generation and self.replicas.alter.in_flight is not None:
                self.replicas.on_alter_partition_network_error(self.world.now_ms)
                self._send_alter_partition()

        version = self.replicas.alter.version
        self._send_controller(
            request, lambda core, now: self.cluster.on_alter_partition(core, request, version), answered
        )
        self.world.after(1000, lost)

    def _leader_duties(self) -> None:
        self._after_replica_set(self.replicas.tick(self.world.now_ms))
        self._send_alter_partition()  # changes backing off after an error go out again
        p = self.partition
        if p is not None and p.role == Role.LEADER and self.world.rng.random() < 0.5:
            self.log.flush()  # the flush policy: sometimes fsync'd, so a power loss cuts a random tail

    # ---- produce -----------------------------------------------------------------------------------------
    def produce(self, value: bytes) -> tuple[ErrorCode, int]:
        p = self.partition
        if p is None or p.role != Role.LEADER:
            return ErrorCode.not_leader_or_follower, -1
        error = p.check_enough_replicas_before_append(-1)
        if error != ErrorCode.none:
            return error, -1
        offset = self.log.append_leader(value, p.leader_epoch)
        self._after_replica_set(self.replicas.on_append(self.world.now_ms, KEY))
        return ErrorCode.none, offset
