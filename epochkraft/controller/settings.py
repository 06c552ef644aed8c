"""The controller's settings, with Kafka's property names (see config/controller.properties)."""

from __future__ import annotations

from dataclasses import dataclass

from epochkraft.config import prop
from epochkraft.security.settings import SecuritySettings


@dataclass(frozen=True, slots=True)
class ControllerSettings(SecuritySettings):
    session_timeout_ms: int = prop(
        "broker.session.timeout.ms",
        9000,
        "A broker that does not heartbeat for this long is fenced.",
        minimum=1,
    )
    default_replication_factor: int = prop(
        "default.replication.factor", 1, "Replication factor of topics created with -1.", minimum=1
    )
    num_partitions: int = prop("num.partitions", 1, "Partition count of topics created with -1.", minimum=1)
    min_insync_replicas: int = prop(
        "min.insync.replicas",
        1,
        "Cluster default for topics without their own min.insync.replicas.",
        minimum=1,
    )
    unclean_leader_election_enable: bool = prop(
        "unclean.leader.election.enable",
        False,
        "Cluster default: elect a replica outside the ISR when no ISR member can lead (loses data).",
    )
    group_consumer_session_timeout_ms: int = prop(
        "group.consumer.session.timeout.ms",
        45000,
        "The consumer.session.timeout.ms of a consumer group (KIP-848) without its own, as its group "
        "configs are validated (the brokers' own setting is what their groups use).",
        minimum=1,
    )
    group_consumer_heartbeat_interval_ms: int = prop(
        "group.consumer.heartbeat.interval.ms",
        5000,
        "The consumer.heartbeat.interval.ms of a consumer group (KIP-848) without its own, as its group "
        "configs are validated (the brokers' own setting is what their groups use).",
        minimum=1,
    )
    group_consumer_min_session_timeout_ms: int = prop(
        "group.consumer.min.session.timeout.ms",
        45000,
        "Smallest consumer.session.timeout.ms a consumer group (KIP-848) may be given (group configs are validated against it).",
        minimum=1,
    )
    group_consumer_max_session_timeout_ms: int = prop(
        "group.consumer.max.session.timeout.ms",
        60000,
        "Largest consumer.session.timeout.ms a consumer group (KIP-848) may be given (group configs are validated against it).",
        minimum=1,
    )
    group_consumer_min_heartbeat_interval_ms: int = prop(
        "group.consumer.min.heartbeat.interval.ms",
        5000,
        "Smallest consumer.heartbeat.interval.ms a consumer group (KIP-848) may be given (group configs are validated against it).",
        minimum=1,
    )
    group_consumer_max_heartbeat_interval_ms: int = prop(
        "group.consumer.max.heartbeat.interval.ms",
        15000,
        "Largest consumer.heartbeat.interval.ms a consumer group (KIP-848) may be given (group configs are validated against it).",
        minimum=1,
    )
    eligible_leader_replicas_version: int = prop(
        "eligible.leader.replicas.version",
        1,
        "The eligible.leader.replicas.version feature level a new cluster starts with (KIP-966; 0: ELR "
        "off). Read only when the metadata log is created, as Kafka's format --feature; later changes go "
        "through UpdateFeatures (kafka-features upgrade/downgrade).",
        minimum=0,
    )
    transaction_version: int = prop(
        "transaction.version",
        2,
        "The transaction.version feature level a new cluster starts with (KIP-890; 2: each transaction "
        "bumps the producer's epoch, clients add partitions through the leaders). Read only when the "
        "metadata log is created, as Kafka's format --feature; later changes go through UpdateFeatures.",
        minimum=0,
    )
    unsafe_disable_kip841_eligibility_check: bool = prop(
        "unsafe.disable.kip841.eligibility.check",
        False,
        "UNSAFE, for demonstrations only: accept AlterPartition ISRs holding fenced, shutting-down, "
        "unregistered or stale-epoch brokers (turns off KIP-841 and the KIP-903 epoch check).",
    )
    session_check_interval_ms: int = prop(
        "controller.session.check.interval.ms",
        100,
        "Longest wait between looks for expired broker sessions (the controller also wakes when the "
        "earliest session expires).",
        minimum=1,
    )
    max_fetch_bytes: int = prop(
        "controller.metadata.fetch.max.bytes",
        8 * 1024 * 1024,
        "Cap on one metadata Fetch response.",
        minimum=1024,
    )
    connections_max_idle_ms: int = prop(
        "connections.max.idle.ms", 600000, "Idle connections are closed after this long.", minimum=100
    )
    max_record_bytes_between_snapshots: int = prop(
        "metadata.log.max.record.bytes.between.snapshots",
        20 * 1024 * 1024,
        "A snapshot of the metadata image is written once this many bytes of records were appended since "
        "the last one (with a data dir); a restart loads the newest snapshot and replays only the log after it.",
        minimum=1,
    )
    quorum_voters: str = prop(
        "controller.quorum.voters",
        "",
        "id@host:port,... of every controller of the Raft quorum (empty: a single controller, no quorum).",
    )
    quorum_bootstrap_servers: str = prop(
        "controller.quorum.bootstrap.servers",
        "",
        "host:port,... of controllers to ask for the leader: a dynamic quorum (KIP-853), whose voters are in "
        "the metadata log (written at format time with --initial-controllers or --standalone), instead of "
        "controller.quorum.voters.",
    )
    quorum_election_timeout_ms: int = prop(
        "controller.quorum.election.timeout.ms",
        500,
        "A voter that hears of no leader for this long (randomised up to twice it) stands for election "
        "(Kafka's default is 1000).",
        minimum=1,
    )
    quorum_fetch_timeout_ms: int = prop(
        "controller.quorum.fetch.timeout.ms",
        1000,
        "A follower that has not fetched from the leader for this long starts an election; a leader that "
        "a majority has not fetched from for 1.5 times this resigns (Kafka's default is 2000).",
        minimum=1,
    )
    quorum_election_backoff_max_ms: int = prop(
        "controller.quorum.election.backoff.max.ms",
        500,
        "Longest random wait before a candidate that lost tries again (Kafka's default is 1000).",
        minimum=1,
    )
    quorum_request_timeout_ms: int = prop(
        "controller.quorum.request.timeout.ms",
        2000,
        "A Raft request to another voter unanswered for this long is retried.",
        minimum=1,
    )
    quorum_retry_backoff_ms: int = prop(
        "controller.quorum.retry.backoff.ms",
        20,
        "How long a voter waits before sending again to a voter whose last request failed (a Fetch to a "
        "leader that cannot be reached included).",
        minimum=0,
    )
