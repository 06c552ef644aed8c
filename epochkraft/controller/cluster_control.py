"""Broker registrations, broker epochs (KIP-380) and heartbeat sessions.

Registrations are metadata-log state: they change only in ``replay``. A broker's epoch is the offset of
its RegisterBrokerRecord in the metadata log, so every new incarnation gets a higher epoch.

Heartbeat sessions (last contact, reported metadata offset, controlled shutdown offset) are deliberately
outside the log, as in Kafka's BrokerHeartbeatManager: after a controller restart every broker starts a
fresh session and must heartbeat within the session timeout to stay unfenced. The heartbeat state machine
(``calculate_next_broker_state``) is Kafka's: a fenced broker is unfenced once it has replayed its own
RegisterBrokerRecord (the record's offset, which follows any ISR removals written for its previous
incarnation); a broker in controlled shutdown may stop once it leads nothing and every active broker has
replayed the records that moved its leaderships away.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from epochkraft.metadata.image import MetadataDelta, MetadataImage
from epochkraft.metadata.registrations import BrokerRegistration, Endpoint
from epochkraft.metrics.documents import BrokerCounts
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

# BrokerRegistrationChangeRecord.fenced / in_controlled_shutdown values
CHANGE_NONE = 0
BrokerRecord = (
    RegisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | BrokerRegistrationChangeRecord
    | UnregisterBrokerRecord
)


class BrokerControlState(Enum):
    """Kafka's BrokerControlState: what a heartbeat moves a broker to."""

    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


@dataclass(slots=True)
class Session:
    last_contact_ms: int
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1  # set once, when the broker enters controlled shutdown


class ClusterControl:
    def __init__(self, cluster_id: str, session_timeout_ms: int, image: MetadataImage | None = None) -> None:
        self.cluster_id = cluster_id
        self.session_timeout_ms = session_timeout_ms
        self.image = image if image is not None else MetadataImage()
        self._replayer = MetadataDelta(self.image, in_place=True)
        self.brokers: dict[int, BrokerRegistration] = self.image.brokers
        self.sessions: dict[int, Session] = {}  # not in the log
        self.register_offsets: dict[int, int] = {}  # broker id -> offset of its RegisterBrokerRecord
        self.started_ms: int | None = None  # brokers known from the log get a session from here

    # ---- queries ------------------------------------------------------------------------------------
    def check_broker_epoch(self, broker_id: int, epoch: int) -> ErrorCode:
        """Kafka's checkBrokerEpoch: unknown broker or another epoch -> STALE_BROKER_EPOCH."""
        registration = self.brokers.get(broker_id)
        if registration is None or registration.epoch != epoch:
            return ErrorCode.stale_broker_epoch
        return ErrorCode.none

    def is_active(self, broker_id: int) -> bool:
        registration = self.brokers.get(broker_id)
        return registration is not None and registration.active

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        registration = self.brokers.get(broker_id)
        if registration is None or registration.fenced:
            return False
        return now_ms - self.last_contact(broker_id, now_ms) <= self.session_timeout_ms

    def last_contact(self, broker_id: int, now_ms: int) -> int:
        session = self.sessions.get(broker_id)
        if session is not None:
            return session.last_contact_ms
        if self.started_ms is None:
            self.started_ms = now_ms
        return self.started_ms

    def expired_brokers(self, now_ms: int) -> list[int]:
        """Unfenced brokers whose session expired, oldest contact first."""
        expired = [
            (self.last_contact(b, now_ms), b)
            for b, reg in self.brokers.items()
            if not reg.fenced and now_ms - self.last_contact(b, now_ms) > self.session_timeout_ms
        ]
        return [b for _, b in sorted(expired)]

    def next_expiry_ms(self, now_ms: int) -> int | None:
        """The first instant an unfenced broker's session counts as expired (``expired_brokers`` would
        return it), assuming no heartbeat arrives before; None when no broker is unfenced."""
        return min(
            (
                self.last_contact(b, now_ms) + self.session_timeout_ms + 1
                for b, reg in self.brokers.items()
                if not reg.fenced
            ),
            default=None,
        )

    def counts(self) -> BrokerCounts:
        fenced = sum(1 for r in self.brokers.values() if r.fenced)
        return {"FencedBrokerCount": fenced, "ActiveBrokerCount": len(self.brokers) - fenced}

    # ---- decisions ----------------------------------------------------------------------------------
    def decide_registration(
        self,
        now_ms: int,
        next_offset: int,
        *,
        broker_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        endpoints: tuple[Endpoint, ...],
        rack: str | None,
        previous_broker_epoch: int = -1,
    ) -> tuple[ErrorCode, int, RegisterBrokerRecord | None]:
        """(error, broker epoch, record to write or None)."""
        if cluster_id != self.cluster_id:
            return ErrorCode.inconsistent_cluster_id, -1, None
        existing = self.brokers.get(broker_id)
        if existing is not None:
            if existing.incarnation_id == incarnation_id:
                return ErrorCode.none, existing.epoch, None  # an idempotent retry keeps everything
            if self.has_valid_session(broker_id, now_ms) and previous_broker_epoch != existing.epoch:
                return ErrorCode.duplicate_broker_registration, -1, None
        record = RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=next_offset,
            end_points=tuple(
                BrokerEndpoint(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in endpoints
            ),
            rack=rack,
            fenced=True,
            in_controlled_shutdown=False,
        )
        return ErrorCode.none, next_offset, record

    def track_heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> bool:
        """Kafka's trackBrokerHeartbeat: a heartbeat's contact time, recorded as it arrives rather than
        once its turn among the controller's writes comes (a quorum's writes are committed one at a time),
        so a backlog of writes does not expire the sessions of brokers that heartbeat on time. A broker
        with no session yet (a new active controller clears them all) gets one from now, as Kafka's tracker
        records contact for any broker id and epoch. Only the broker's current epoch counts; False for any
        other heartbeat."""
        registration = self.brokers.get(broker_id)
        if registration is None or registration.epoch != broker_epoch:
            return False
        session = self.sessions.setdefault(broker_id, Session(now_ms))
        session.last_contact_ms = max(session.last_contact_ms, now_ms)
        return True

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int) -> None:
        """Records a heartbeat (Kafka's touch); a fenced broker leaves controlled shutdown."""
        session = self.sessions.get(broker_id)
        registration = self.brokers.get(broker_id)
        keep = session is not None and registration is not None and not registration.fenced
        shutdown_offset = session.controlled_shutdown_offset if keep and session else -1
        self.sessions[broker_id] = Session(now_ms, metadata_offset, shutdown_offset)

    # ---- heartbeat state machine (Kafka's BrokerHeartbeatManager) ------------------------------------
    def lowest_active_offset(self) -> int:
        """The lowest metadata offset reported by an active broker (unfenced, not shutting down); a broker
        that has not heartbeated to this controller counts as -1. No active broker: no bound."""
        offsets = [
            session.metadata_offset if (session := self.sessions.get(b)) is not None else -1
            for b, registration in self.brokers.items()
            if registration.active
        ]
        return min(offsets, default=1 << 62)

    def controlled_shutdown_offset(self, broker_id: int) -> int | None:
        session = self.sessions.get(broker_id)
        if session is None or session.controlled_shutdown_offset < 0:
            return None
        return session.controlled_shutdown_offset

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int, now_ms: int) -> None:
        """The offset at which the broker's controlled shutdown is complete; only the first one counts."""
        session = self.sessions.setdefault(broker_id, Session(now_ms))
        if session.controlled_shutdown_offset < 0:
            session.controlled_shutdown_offset = offset

    def current_state(self, broker_id: int) -> BrokerControlState:
        registration = self.brokers[broker_id]
        if registration.fenced:
            return BrokerControlState.FENCED
        if registration.in_controlled_shutdown:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.UNFENCED

    def calculate_next_broker_state(
        self,
        broker_id: int,
        *,
        want_fence: bool,
        want_shut_down: bool,
        current_metadata_offset: int,
        has_leaderships: Callable[[], bool],
    ) -> tuple[BrokerControlState, BrokerControlState]:
        """(current, next), as Kafka's BrokerHeartbeatManager.calculateNextBrokerState."""
        current = self.current_state(broker_id)
        state = BrokerControlState
        if current == state.FENCED:
            if want_shut_down:
                return current, state.SHUTDOWN_NOW
            if not want_fence and current_metadata_offset >= self.register_offsets.get(broker_id, 1 << 62):
                return current, state.UNFENCED
            return current, state.FENCED
        if current == state.UNFENCED:
            if want_fence:
                return current, state.SHUTDOWN_NOW if want_shut_down else state.FENCED
            if want_shut_down:
                return current, state.CONTROLLED_SHUTDOWN if has_leaderships() else state.SHUTDOWN_NOW
            return current, state.UNFENCED
        if has_leaderships():
            return current, state.CONTROLLED_SHUTDOWN
        shutdown_offset = self.controlled_shutdown_offset(broker_id)
        if shutdown_offset is not None and shutdown_offset <= self.lowest_active_offset():
            return current, state.SHUTDOWN_NOW
        return current, state.CONTROLLED_SHUTDOWN

    # ---- replay -------------------------------------------------------------------------------------
    def replay(self, record: BrokerRecord, offset: int = -1) -> None:
        """Applies a registration record to the image, then this manager's bookkeeping beside it."""
        self._replayer.replay(record)
        if isinstance(record, RegisterBrokerRecord):
            self.sessions.pop(record.broker_id, None)  # a new incarnation starts a new session
            self.register_offsets[record.broker_id] = offset
        elif isinstance(record, UnregisterBrokerRecord) and record.broker_id not in self.brokers:
            self.sessions.pop(record.broker_id, None)
            self.register_offsets.pop(record.broker_id, None)
