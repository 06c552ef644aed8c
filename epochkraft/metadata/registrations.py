"""The controller's in-memory view of the cluster, changed only by replaying metadata records."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import IntEnum

from immutables import Map

NO_LEADER = -1
NO_LEADER_CHANGE = -2


class LeaderRecoveryState(IntEnum):
    """KIP-704: RECOVERING after an unclean election until the leader reports RECOVERED."""

    RECOVERED = 0
    RECOVERING = 1


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool

    @property
    def active(self) -> bool:
        """Registered, unfenced and not shutting down: may lead and join ISRs."""
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    # KIP-455: during a reassignment ``replicas`` holds the target replicas plus those being removed
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    # KIP-966: replicas out of the ISR that still hold every committed record (they left it while the ISR
    # was below min ISR, when the high watermark cannot advance), and those last known to (or the last
    # known leader, when the ISR and ELR are both empty)
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def reassignment_in_progress(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    # persistent (Kafka's TopicImage keeps an immutable map too): the next image shares it, changed in
    # O(log n) by a metadata delta instead of copied whole
    partitions: Map[int, PartitionRegistration] = field(default_factory=Map)
