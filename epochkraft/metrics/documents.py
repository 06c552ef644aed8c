"""The JSON documents of the admin port, typed: a controller's and a broker's ``/v1/state`` and a broker's
``/v1/positions``. The daemons build them; the live view, the metrics registry and ``cluster status`` read
them."""

from __future__ import annotations

from typing import NotRequired, TypedDict


# ---- a controller's /v1/state ----------------------------------------------------------------------------
class BrokerRow(TypedDict):
    """A registered broker, as the controller's metadata holds it."""

    id: int
    epoch: int
    incarnation: str
    fenced: bool
    in_controlled_shutdown: bool
    endpoints: list[str]  # HOST:PORT of each listener


class PartitionRow(TypedDict):
    """A partition's registration and its topic's min ISR."""

    topic: str
    topic_id: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: str
    elr: list[int]
    last_known_elr: list[int]
    min_insync_replicas: int


class BrokerCounts(TypedDict):
    """Kafka's controller gauges of the registered brokers."""

    FencedBrokerCount: int
    ActiveBrokerCount: int


class PartitionCounts(TypedDict):
    """Kafka's controller gauges of the topics and partitions."""

    OfflinePartitionsCount: int
    UnderReplicatedPartitions: int
    UnderMinIsrPartitionCount: int
    GlobalPartitionCount: int
    GlobalTopicCount: int


class QuorumDescription(TypedDict):
    """This controller's place in the Raft quorum."""

    node_id: int
    role: str
    epoch: int
    leader: int
    active: bool
    high_watermark: int | None
    log_end_offset: int
    voters: list[int]


class ControllerSummary(TypedDict):
    """The cluster, its metadata offset and its brokers: /v1/state without the partitions."""

    cluster_id: str
    metadata_offset: int
    brokers: list[BrokerRow]


class ControllerLogState(ControllerSummary, BrokerCounts, PartitionCounts):
    """What the metadata log says: the summary, every partition and the gauges."""

    partitions: list[PartitionRow]


class ControllerOwnState(TypedDict):
    """What is this controller's own, not in the log: its brokers' heartbeats and its quorum."""

    last_heartbeat_ms: dict[str, int]  # by broker id
    quorum: NotRequired[QuorumDescription]  # absent without a Raft quorum


class ControllerState(ControllerLogState, ControllerOwnState):
    """A controller's /v1/state."""


class ViewState(ControllerSummary, ControllerOwnState):
    """What the live view reads each tick: /v1/state whose partitions are read on their own (or, without a
    source of partitions, /v1/state's own)."""

    partitions: NotRequired[list[PartitionRow]]


# ---- a broker's /v1/state and /v1/positions --------------------------------------------------------------
class BrokerStateRow(TypedDict):
    """A broker as the metadata this broker has replayed holds it."""

    id: int
    epoch: int
    fenced: bool
    in_controlled_shutdown: bool


class PartitionMetrics(TypedDict):
    """A replica this broker hosts: its partition's state and its log."""

    topic: str
    partition: int
    role: str
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]
    replicas: list[int]
    log_end_offset: int
    log_start_offset: int
    size_bytes: int
    segments: int
    high_watermark: int
    min_insync_replicas: int
    follower_lag: dict[str, int]  # a leader's followers' lag behind its log end, by broker id


class BrokerState(TypedDict):
    """A broker's /v1/state."""

    node_id: int
    state: str
    broker_epoch: int
    incarnation: str
    metadata_offset: int
    brokers: list[BrokerStateRow]
    partitions: list[PartitionMetrics]


class BrokerPositions(TypedDict):
    """A broker's /v1/positions: each replica's (partition, log end offset, high watermark), by topic."""

    node_id: int
    positions: dict[str, list[tuple[int, int, int]]]
