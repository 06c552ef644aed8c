"""A broker's lifecycle with the controller, sans IO: registration, heartbeats, fencing and controlled
shutdown, as Kafka's BrokerLifecycleManager (``sendBrokerRegistration``, its
BrokerRegistrationResponseEvent, ``sendBrokerHeartbeat``, ``BrokerHeartbeatResponseEvent``,
``beginControlledShutdown``; unlike Kafka's, a controlled shutdown begun while still fenced (RECOVERY)
asks the controller too, and a stale broker epoch registers again).

It builds the BrokerRegistrationRequest and BrokerHeartbeatRequest from what the caller gives it and
says what an answer means; the caller (the broker daemon, the simulator's broker) sends, waits and
carries the outcome out. Its states: STARTING (registering a new incarnation) -> RECOVERY (registered and
fenced, catching up with the metadata log) -> RUNNING (unfenced) -> PENDING_CONTROLLED_SHUTDOWN
(heartbeats ask to shut down) -> SHUTTING_DOWN. Every move is in ``TRANSITIONS``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i64

from epochkraft.protocol.errors import ErrorCode

REGISTRATION_RETRY_MS = 300  # after a registration failed or was refused for now
HEARTBEAT_RETRY_MS = 200  # after a heartbeat failed or was answered with an error (NOT_CONTROLLER)
FAST_HEARTBEAT_MS = 50  # while not RUNNING: unfenced, or let go, soon after the controller allows it


class State(Enum):
    STARTING = "STARTING"
    RECOVERY = "RECOVERY"
    RUNNING = "RUNNING"
    PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
    SHUTTING_DOWN = "SHUTTING_DOWN"


class Event(Enum):
    REGISTRATION_BEGUN = "registration begun"
    REGISTERED = "registered"
    STALE_EPOCH = "stale broker epoch"
    UNFENCED = "unfenced"
    FENCED = "fenced"
    CONTROLLED_SHUTDOWN_BEGUN = "controlled shutdown begun"
    SHUTDOWN_ALLOWED = "shutdown allowed"
    CLOSED = "closed"


_REGISTERED_STATES = (State.RECOVERY, State.RUNNING, State.PENDING_CONTROLLED_SHUTDOWN)

# (state, event) -> next state; an event with no entry for the state changes nothing.
TRANSITIONS: dict[tuple[State, Event], State] = {
    **{(s, Event.REGISTRATION_BEGUN): State.STARTING for s in (State.STARTING, *_REGISTERED_STATES)},
    (State.STARTING, Event.REGISTERED): State.RECOVERY,
    **{(s, Event.STALE_EPOCH): State.STARTING for s in _REGISTERED_STATES},
    (State.RECOVERY, Event.UNFENCED): State.RUNNING,
    (State.RUNNING, Event.FENCED): State.RECOVERY,
    (State.RUNNING, Event.CONTROLLED_SHUTDOWN_BEGUN): State.PENDING_CONTROLLED_SHUTDOWN,
    (State.RECOVERY, Event.CONTROLLED_SHUTDOWN_BEGUN): State.PENDING_CONTROLLED_SHUTDOWN,
    (State.PENDING_CONTROLLED_SHUTDOWN, Event.SHUTDOWN_ALLOWED): State.SHUTTING_DOWN,
    **{(s, Event.CLOSED): State.SHUTTING_DOWN for s in State},
}


@dataclass(frozen=True)
class Registration:
    """What the caller knows of this broker when it registers."""

    cluster_id: str
    listeners: tuple[Listener, ...]
    features: tuple[Feature, ...]
    log_dirs: tuple[uuid.UUID, ...]
    rack: str | None = None


# ---- what the caller must do ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Registered:
    broker_epoch: int


@dataclass(frozen=True)
class Refused:
    """Refused for good (INCONSISTENT_CLUSTER_ID: the data dir belongs to another cluster)."""

    error: ErrorCode


@dataclass(frozen=True)
class RetryAfter:
    """The request failed (``error`` None: no answer) or was refused for now: send again later."""

    delay_ms: int
    error: ErrorCode | None = None


@dataclass(frozen=True)
class RegisterAgain:
    """STALE_BROKER_EPOCH: the controller no longer knows this registration."""


@dataclass(frozen=True)
class ShutDownNow:
    """The controller has moved every leadership away: the broker stops."""


@dataclass(frozen=True)
class Unfenced:
    next_heartbeat_ms: int


@dataclass(frozen=True)
class Fenced:
    next_heartbeat_ms: int


@dataclass(frozen=True)
class NextHeartbeat:
    delay_ms: int


@dataclass(frozen=True)
class Ignored:
    """An answer that changes nothing: to an earlier registration, or once shutting down."""


RegistrationOutcome = Registered | Refused | RetryAfter | Ignored
HeartbeatOutcome = RegisterAgain | ShutDownNow | Unfenced | Fenced | NextHeartbeat | RetryAfter | Ignored


class BrokerLifecycle:
    """One broker incarnation's side of registration and heartbeats; the caller does every IO."""

    def __init__(
        self,
        node_id: int,
        incarnation_id: uuid.UUID,
        heartbeat_interval_ms: int,
        previous_broker_epoch: int = -1,
    ) -> None:
        self.node_id = node_id
        self.incarnation_id = incarnation_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # the clean shutdown marker's epoch, presented by every registration until the caller begins anew
        self.previous_broker_epoch = previous_broker_epoch
        self.state = State.STARTING
        self.broker_epoch = -1

    def _on(self, event: Event) -> State:
        self.state = TRANSITIONS.get((self.state, event), self.state)
        return self.state

    # ---- registration ----------------------------------------------------------------------------------
    def begin_registration(self, previous_broker_epoch: int) -> None:
        """A new registration (at start, or after a stale epoch), presenting the clean shutdown marker's
        epoch (-1: none, an unclean shutdown)."""
        self.previous_broker_epoch = previous_broker_epoch
        self._on(Event.REGISTRATION_BEGUN)

    def registration_request(self, registration: Registration) -> BrokerRegistrationRequest:
        return BrokerRegistrationRequest(
            broker_id=BrokerId(self.node_id),
            cluster_id=registration.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=registration.listeners,
            features=registration.features,
            rack=registration.rack,
            is_migrating_zk_broker=False,
            log_dirs=registration.log_dirs,
            previous_broker_epoch=i64(self.previous_broker_epoch),
        )

    def on_registration_response(self, response: BrokerRegistrationResponse) -> RegistrationOutcome:
        if self.state != State.STARTING:
            return Ignored()  # registered already: an answer to a resent registration
        if response.error_code == ErrorCode.none:
            self.broker_epoch = response.broker_epoch
            self._on(Event.REGISTERED)
            return Registered(self.broker_epoch)
        if response.error_code == ErrorCode.inconsistent_cluster_id:
            return Refused(response.error_code)
        return RetryAfter(REGISTRATION_RETRY_MS, response.error_code)

    def on_registration_failed(self) -> RetryAfter:
        """No answer (a network error, a timeout)."""
        return RetryAfter(REGISTRATION_RETRY_MS)

    # ---- heartbeats ------------------------------------------------------------------------------------
    def caught_up(self, published_offset: int) -> bool:
        """The metadata log has been applied, and its changes carried out, past our registration record
        (``published_offset`` is the next offset to publish)."""
        return self.broker_epoch >= 0 and published_offset > self.broker_epoch

    def heartbeat_request(self, published_offset: int) -> BrokerHeartbeatRequest:
        """Fenced asked for until caught up, as Kafka's ``setWantFence(!readyToUnfence)``."""
        return BrokerHeartbeatRequest(
            broker_id=BrokerId(self.node_id),
            broker_epoch=i64(self.broker_epoch),
            current_metadata_offset=i64(published_offset - 1),
            want_fence=not self.caught_up(published_offset),
            want_shut_down=self.state == State.PENDING_CONTROLLED_SHUTDOWN,
            offline_log_dirs=(),
        )

    def on_heartbeat_response(self, response: BrokerHeartbeatResponse) -> HeartbeatOutcome:
        if self.state in (State.STARTING, State.SHUTTING_DOWN):
            return Ignored()  # not registered (any more), or stopping: the answer means nothing now
        if response.error_code == ErrorCode.stale_broker_epoch:
            self._on(Event.STALE_EPOCH)
            return RegisterAgain()
        if response.error_code != ErrorCode.none:  # NOT_CONTROLLER: no active controller yet
            return RetryAfter(HEARTBEAT_RETRY_MS, response.error_code)
        if self.state == State.PENDING_CONTROLLED_SHUTDOWN and response.should_shut_down:
            self._on(Event.SHUTDOWN_ALLOWED)
            return ShutDownNow()
        before = self.state
        after = self._on(Event.FENCED if response.is_fenced else Event.UNFENCED)
        if before == State.RECOVERY and after == State.RUNNING:
            return Unfenced(self.next_heartbeat_ms())
        if before == State.RUNNING and after == State.RECOVERY:
            return Fenced(self.next_heartbeat_ms())
        return NextHeartbeat(self.next_heartbeat_ms())

    def on_heartbeat_failed(self) -> RetryAfter:
        """No answer (a network error, a timeout)."""
        return RetryAfter(HEARTBEAT_RETRY_MS)

    def next_heartbeat_ms(self) -> int:
        return self.heartbeat_interval_ms if self.state == State.RUNNING else FAST_HEARTBEAT_MS

    # ---- stopping --------------------------------------------------------------------------------------
    def begin_controlled_shutdown(self) -> bool:
        """Heartbeats ask to shut down from now on (a registered broker only); whether they do."""
        return self._on(Event.CONTROLLED_SHUTDOWN_BEGUN) == State.PENDING_CONTROLLED_SHUTDOWN

    def close(self) -> None:
        self._on(Event.CLOSED)
