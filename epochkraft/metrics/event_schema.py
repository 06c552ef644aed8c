"""The event lines' shape (SCHEMA.md) for the type checker: the fields every line carries and the ones an event
may carry, each typed as epochkraft/analytics/schema.py declares it for Spark (tests/test_metrics.py keeps the
two the same). An absent field is read as null, so every event field is optional here."""

from __future__ import annotations

from typing import TypedDict


class EventFields(TypedDict, total=False):
    """An event's own fields (SCHEMA.md's table): what ``EventLog.emit`` takes beside the event's name."""

    broker: int
    epoch: int
    incarnation: str
    topic: str
    topic_id: str
    partition: int
    leader: int
    previous_leader: int
    leader_epoch: int
    unclean: bool
    offset: int
    isr: list[int]
    previous_isr: list[int]
    elr: list[int]
    last_known_elr: list[int]
    replicas: list[int]
    partition_epoch: int
    kind: str
    error: str
    error_code: int
    role: str
    isr_size: int
    log_end_offset: int
    high_watermark: int
    follower_lag_max: int
    count: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    interval_s: float
    UnderReplicatedPartitions: float
    UnderMinIsrPartitionCount: float
    LeaderCount: float
    PartitionCount: float
    BrokerEpoch: float
    MetadataOffset: float
    NumIncrementalFetchSessions: float
    NumIncrementalFetchPartitionsCached: float
    IsrShrinksPerSec: float
    IsrExpandsPerSec: float
    FailedIsrUpdatesPerSec: float
    IncrementalFetchSessionEvictionsPerSec: float
    MetadataLoadErrorCount: float
    OfflinePartitionsCount: float
    FencedBrokerCount: float
    ActiveBrokerCount: float
    GlobalPartitionCount: float
    end_offset: int
    bytes: int
    fault: str
    detail: str


class Event(EventFields, total=True):
    """One line of an event file: the common fields, then the event's own."""

    schema_version: int
    ts_ms: int
    node: str
    event: str
