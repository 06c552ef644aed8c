"""The broker's settings, with Kafka's property names (see config/broker.properties)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from epochkraft.config import prop
from epochkraft.security.settings import SecuritySettings


@dataclass(frozen=True, slots=True)
class BrokerSettings(SecuritySettings):
    PER_LISTENER_PROPERTIES: ClassVar[frozenset[str]] = SecuritySettings.PER_LISTENER_PROPERTIES | {
        "max.connection.creation.rate"
    }

    heartbeat_interval_ms: int = prop(
        "broker.heartbeat.interval.ms", 2000, "How often the broker heartbeats to the controller.", minimum=10
    )
    replica_lag_time_max_ms: int = prop(
        "replica.lag.time.max.ms", 30000, "A follower not caught up for this long leaves the ISR.", minimum=10
    )
    replica_fetch_wait_max_ms: int = prop(
        "replica.fetch.wait.max.ms",
        500,
        "Longest a follower's fetch waits at the leader for new data.",
        minimum=0,
    )
    replica_fetch_max_bytes: int = prop(
        "replica.fetch.max.bytes", 1048576, "Bytes a follower asks for per partition per fetch.", minimum=1024
    )
    replica_fetch_response_max_bytes: int = prop(
        "replica.fetch.response.max.bytes", 10485760, "Bytes a follower asks for per fetch.", minimum=1024
    )
    replica_high_watermark_checkpoint_interval_ms: int = prop(
        "replica.high.watermark.checkpoint.interval.ms",
        5000,
        "How often high watermarks are checkpointed.",
        minimum=10,
    )
    min_insync_replicas: int = prop(
        "min.insync.replicas", 1, "Used for topics without their own min.insync.replicas.", minimum=1
    )
    log_segment_bytes: int = prop(
        "log.segment.bytes", 1073741824, "Size at which a log segment rolls.", minimum=1024
    )
    log_roll_ms: int | None = prop(
        "log.roll.ms",
        None,
        "A segment rolls once its records' timestamps span this long (empty: log.roll.hours); topic: "
        "segment.ms.",
    )
    log_roll_hours: int = prop("log.roll.hours", 168, "log.roll.ms in hours.", minimum=1)
    log_index_size_max_bytes: int = prop(
        "log.index.size.max.bytes",
        10485760,
        "Largest offset index (and time index) of a segment; a full one rolls the segment. Topic: "
        "segment.index.bytes.",
        minimum=12,
    )
    log_index_interval_bytes: int = prop(
        "log.index.interval.bytes",
        4096,
        "Bytes of batches between index entries. Topic: index.interval.bytes.",
        minimum=1,
    )
    log_retention_ms: int | None = prop(
        "log.retention.ms",
        None,
        "Segments whose newest record is older than this are deleted (-1: no limit; empty: "
        "log.retention.minutes, then log.retention.hours). Topic: retention.ms.",
    )
    log_retention_minutes: int | None = prop(
        "log.retention.minutes", None, "log.retention.ms in minutes (empty: log.retention.hours)."
    )
    log_retention_hours: int = prop("log.retention.hours", 168, "log.retention.ms in hours.")
    log_retention_bytes: int = prop(
        "log.retention.bytes",
        -1,
        "Oldest segments are deleted while a partition's log is larger than this (-1: no limit). "
        "Topic: retention.bytes.",
    )
    log_retention_check_interval_ms: int = prop(
        "log.retention.check.interval.ms",
        300000,
        "How often logs are checked for segments to delete (retention, log start offset).",
        minimum=10,
    )
    log_cleanup_policy: str = prop(
        "log.cleanup.policy",
        "delete",
        "delete: segments past retention are deleted; compact: the cleaner keeps the latest record per "
        "key and retention deletes nothing; compact,delete: both. Topic: cleanup.policy.",
    )
    log_message_timestamp_type: str = prop(
        "log.message.timestamp.type",
        "CreateTime",
        "CreateTime: records keep the producer's timestamps; LogAppendTime: the leader stamps each batch "
        "with its append time. Topic: message.timestamp.type.",
    )
    log_cleaner_enable: bool = prop(
        "log.cleaner.enable", True, "Compact logs whose cleanup.policy includes compact."
    )
    log_cleaner_backoff_ms: int = prop(
        "log.cleaner.backoff.ms",
        15000,
        "How often compacted logs are looked at for new segments to clean.",
        minimum=10,
    )
    log_cleaner_io_max_bytes_per_second: float = prop(
        "log.cleaner.io.max.bytes.per.second",
        1.7976931348623157e308,
        "Bytes per second the cleaner reads at most (it runs on a worker thread).",
        minimum=1,
    )
    log_cleaner_dedupe_buffer_size: int = prop(
        "log.cleaner.dedupe.buffer.size",
        134217728,
        "Bytes of the cleaner's key -> offset map (24 per key: a 16-byte MD5 hash and an 8-byte offset); a "
        "log with more distinct keys is compacted in as many passes as the map needs.",
        minimum=1024,
    )
    log_cleaner_io_buffer_load_factor: float = prop(
        "log.cleaner.io.buffer.load.factor",
        0.9,
        "How full the cleaner's map may get before a pass stops mapping keys.",
        minimum=0.05,
    )
    log_cleaner_delete_retention_ms: int = prop(
        "log.cleaner.delete.retention.ms",
        86400000,
        "How long a compacted log keeps tombstones (null values) once cleaned. Topic: delete.retention.ms.",
        minimum=0,
    )
    log_segment_delete_delay_ms: int = prop(
        "log.segment.delete.delay.ms",
        60000,
        "A deleted segment's files are renamed .deleted and removed this much later. Topic: "
        "file.delete.delay.ms.",
        minimum=0,
    )
    log_flush_start_offset_checkpoint_interval_ms: int = prop(
        "log.flush.start.offset.checkpoint.interval.ms",
        60000,
        "How often log start offsets are checkpointed (also after each retention pass).",
        minimum=10,
    )
    log_tail_cache_bytes: int = prop(
        "log.tail.cache.bytes",
        33554432,
        "Bytes of recent leader appends kept in memory for the Fetches that follow (epochkraft's own "
        "setting; 0: read every Fetch from the log).",
        minimum=0,
    )
    log_page_cache_drop_behind_bytes: int = prop(
        "log.page.cache.drop.behind.bytes",
        16777216,
        "Page cache kept behind the end of a segment being appended to; older pages are dropped once "
        "written back, so appends reuse freed memory (epochkraft's own setting; 0: keep all, as Kafka).",
        minimum=0,
    )
    log_flush_interval_messages: int | None = prop(
        "log.flush.interval.messages", None, "fsync after this many messages (empty: never, rely on the OS)."
    )
    log_flush_interval_ms: int | None = prop(
        "log.flush.interval.ms", None, "fsync every this many ms (empty: never, rely on the OS)."
    )
    log_flush_offset_checkpoint_interval_ms: int = prop(
        "log.flush.offset.checkpoint.interval.ms",
        60000,
        "How often recovery points are checkpointed.",
        minimum=10,
    )
    num_partitions: int = prop("num.partitions", 1, "Partitions of auto-created topics.", minimum=1)
    default_replication_factor: int = prop(
        "default.replication.factor", 1, "Replication factor of auto-created topics.", minimum=1
    )
    auto_create_topics_enable: bool = prop(
        "auto.create.topics.enable",
        True,
        "Create a topic when a client asks Metadata for an unknown one (and allows it), as Kafka.",
    )
    offsets_topic_num_partitions: int = prop(
        "offsets.topic.num.partitions", 10, "Partitions of __consumer_offsets.", minimum=1
    )
    offsets_retention_minutes: int = prop(
        "offsets.retention.minutes",
        10080,
        "A group without members loses each committed offset this long after the later of the commit "
        "and the group becoming empty.",
        minimum=1,
    )
    offsets_retention_check_interval_ms: int = prop(
        "offsets.retention.check.interval.ms",
        600000,
        "How often expired committed offsets are looked for.",
        minimum=1,
    )
    producer_id_expiration_ms: int = prop(
        "producer.id.expiration.ms",
        86400000,
        "A partition forgets an idempotent producer that has appended nothing for this long (by its last "
        "batch's timestamp).",
        minimum=1,
    )
    producer_id_expiration_check_interval_ms: int = prop(
        "producer.id.expiration.check.interval.ms",
        600000,
        "How often partitions look for producer ids past producer.id.expiration.ms.",
        minimum=1,
    )
    offset_metadata_max_bytes: int = prop(
        "offset.metadata.max.bytes",
        4096,
        "Longest metadata string an OffsetCommit may carry per partition (OFFSET_METADATA_TOO_LARGE above it).",
        minimum=0,
    )
    offsets_topic_segment_bytes: int = prop(
        "offsets.topic.segment.bytes",
        104857600,
        "segment.bytes of __consumer_offsets (a compacted topic: small segments are cleaned sooner).",
        minimum=1024,
    )
    offsets_topic_replication_factor: int = prop(
        "offsets.topic.replication.factor",
        3,
        "Replication factor of __consumer_offsets (capped by brokers).",
        minimum=1,
    )
    transaction_state_log_num_partitions: int = prop(
        "transaction.state.log.num.partitions", 50, "Partitions of __transaction_state.", minimum=1
    )
    transaction_state_log_replication_factor: int = prop(
        "transaction.state.log.replication.factor",
        3,
        "Replication factor of __transaction_state (capped by brokers).",
        minimum=1,
    )
    transaction_state_log_min_isr: int = prop(
        "transaction.state.log.min.isr",
        2,
        "min.insync.replicas of __transaction_state (capped by its replication factor).",
        minimum=1,
    )
    transaction_state_log_segment_bytes: int = prop(
        "transaction.state.log.segment.bytes",
        104857600,
        "segment.bytes of __transaction_state (a compacted topic).",
        minimum=1024,
    )
    transaction_max_timeout_ms: int = prop(
        "transaction.max.timeout.ms",
        900000,
        "Longest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above it).",
        minimum=1,
    )
    transaction_partition_verification_enable: bool = prop(
        "transaction.partition.verification.enable",
        True,
        "A partition leader asks the transaction coordinator whether a producer's first transactional batch "
        "there belongs to its ongoing transaction before appending it (KIP-890 part 1; Produce below v12).",
    )
    add_partitions_to_txn_retry_backoff_ms: int = prop(
        "add.partitions.to.txn.retry.backoff.ms",
        20,
        "How long a partition leader waits before asking again to add a partition to a transaction the "
        "coordinator is still completing (CONCURRENT_TRANSACTIONS, transaction version 2).",
        minimum=1,
    )
    add_partitions_to_txn_retry_backoff_max_ms: int = prop(
        "add.partitions.to.txn.retry.backoff.max.ms",
        100,
        "How long a partition leader keeps asking to add a partition before answering the producer, which "
        "then retries (CONCURRENT_TRANSACTIONS); also how long the coordinator holds a client's "
        "AddPartitionsToTxn or AddOffsetsToTxn while the producer's previous transaction completes.",
        minimum=0,
    )
    request_timeout_ms: int = prop(
        "request.timeout.ms",
        30000,
        "Caps add.partitions.to.txn.retry.backoff.max.ms, as Kafka's does (the broker's own requests to "
        "other nodes keep their own timeouts).",
        minimum=0,
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = prop(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        10000,
        "How often the transaction coordinator aborts transactions past their timeout.",
        minimum=1,
    )
    transactional_id_expiration_ms: int = prop(
        "transactional.id.expiration.ms",
        604800000,
        "A transactional id with no transaction in progress is forgotten this long after its last update.",
        minimum=1,
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = prop(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        3600000,
        "How often the transaction coordinator looks for transactional ids past transactional.id.expiration.ms.",
        minimum=1,
    )
    group_initial_rebalance_delay_ms: int = prop(
        "group.initial.rebalance.delay.ms",
        3000,
        "Wait for more members before the first rebalance.",
        minimum=0,
    )
    group_max_size: int = prop(
        "group.max.size",
        2147483647,
        "Most members a classic group admits (GROUP_MAX_SIZE_REACHED beyond); a consumer group with more "
        "classic members is not converted back to a classic group.",
        minimum=1,
    )
    group_consumer_session_timeout_ms: int = prop(
        "group.consumer.session.timeout.ms",
        45000,
        "A consumer group member (KIP-848) not heard from for this long is removed from its group.",
        minimum=1,
    )
    group_consumer_heartbeat_interval_ms: int = prop(
        "group.consumer.heartbeat.interval.ms",
        5000,
        "How often consumer group members (KIP-848) are told to heartbeat.",
        minimum=1,
    )
    group_consumer_min_session_timeout_ms: int = prop(
        "group.consumer.min.session.timeout.ms",
        45000,
        "Smallest consumer.session.timeout.ms a consumer group (KIP-848) may be given.",
        minimum=1,
    )
    group_consumer_max_session_timeout_ms: int = prop(
        "group.consumer.max.session.timeout.ms",
        60000,
        "Largest consumer.session.timeout.ms a consumer group (KIP-848) may be given.",
        minimum=1,
    )
    group_consumer_min_heartbeat_interval_ms: int = prop(
        "group.consumer.min.heartbeat.interval.ms",
        5000,
        "Smallest consumer.heartbeat.interval.ms a consumer group (KIP-848) may be given.",
        minimum=1,
    )
    group_consumer_max_heartbeat_interval_ms: int = prop(
        "group.consumer.max.heartbeat.interval.ms",
        15000,
        "Largest consumer.heartbeat.interval.ms a consumer group (KIP-848) may be given.",
        minimum=1,
    )
    group_consumer_assignors: str = prop(
        "group.consumer.assignors",
        "uniform,range",
        "The server-side assignors consumer groups may use (uniform, range); the first is the default.",
    )
    group_consumer_max_size: int = prop(
        "group.consumer.max.size",
        2147483647,
        "Most members a consumer group (KIP-848) admits (GROUP_MAX_SIZE_REACHED beyond).",
        minimum=1,
    )
    group_consumer_migration_policy: str = prop(
        "group.consumer.migration.policy",
        "bidirectional",
        "Online conversion between classic and consumer (KIP-848) groups: bidirectional, upgrade (a "
        "consumer protocol member joining converts a classic group), downgrade (the last consumer protocol "
        "member leaving converts it back) or disabled.",
    )
    message_max_bytes: int = prop(
        "message.max.bytes",
        1048588,
        "Largest record batch a producer may send (MESSAGE_TOO_LARGE above it); a topic's "
        "max.message.bytes overrides it.",
        minimum=0,
    )
    fetch_max_bytes: int = prop(
        "fetch.max.bytes", 57671680, "Most record bytes one Fetch response returns.", minimum=1024
    )
    max_incremental_fetch_session_cache_slots: int = prop(
        "max.incremental.fetch.session.cache.slots",
        1000,
        "Incremental fetch sessions (KIP-227) the broker keeps; 0 keeps none (every Fetch is answered in full).",
        minimum=0,
    )
    min_incremental_fetch_session_eviction_ms: int = prop(
        "min.incremental.fetch.session.eviction.ms",
        120000,
        "How long an incremental fetch session is unused before a new one may take its slot, and how old a "
        "session is before any new one may (a constant in Kafka).",
        minimum=0,
    )
    socket_request_max_bytes: int = prop(
        "socket.request.max.bytes", 104857600, "Largest request frame accepted.", minimum=1024
    )
    max_connections: int = prop("max.connections", 1000, "Connections accepted on the listener.", minimum=1)
    max_connections_per_ip: int = prop(
        "max.connections.per.ip", 2147483647, "Connections accepted from one client address.", minimum=0
    )
    max_connections_per_ip_overrides: str = prop(
        "max.connections.per.ip.overrides",
        "",
        "Comma-separated ADDRESS:COUNT limits that replace max.connections.per.ip for those addresses.",
    )
    max_connections_reserved_inter_broker: int = prop(
        "max.connections.reserved.inter.broker",
        64,
        "Of max.connections, the last ones kept for replica fetchers and other brokers' clients.",
        minimum=0,
    )
    max_connection_creation_rate: int = prop(
        "max.connection.creation.rate",
        2147483647,
        "New connections accepted a second, on every listener but the inter-broker one (when there are "
        "others); over it the acceptor waits (KIP-612). listener.name.<listener>.max.connection.creation.rate "
        "sets a listener's own rate, this value by default.",
        minimum=0,
    )
    quota_window_num: int = prop(
        "quota.window.num",
        11,
        "Samples client quota rates are measured over (produce and fetch byte rates, request_percentage).",
        minimum=1,
    )
    quota_window_size_seconds: int = prop(
        "quota.window.size.seconds", 1, "Length of each client quota sample.", minimum=1
    )
    connections_max_idle_ms: int = prop(
        "connections.max.idle.ms", 600000, "Idle connections are closed after this long.", minimum=100
    )
    produce_validation_threads: int = prop(
        "produce.validation.threads",
        1,
        "Worker threads that validate compressed or large produced batches (inflating and parsing them) "
        "off the event loop, as Kafka's request handler threads do; 0 validates on the event loop.",
        minimum=0,
    )
    controlled_shutdown_timeout_ms: int = prop(
        "controlled.shutdown.timeout.ms", 10000, "How long SIGTERM waits for leaderships to move.", minimum=0
    )
    listeners: str = prop(
        "listeners",
        "",
        "Comma-separated NAME://HOST:PORT listeners (empty HOST: every interface); --listen HOST:PORT is "
        "the one-listener form PLAINTEXT://HOST:PORT.",
    )
    advertised_listeners: str = prop(
        "advertised.listeners",
        "",
        "NAME://HOST:PORT endpoints registered for clients, a subset of listeners by name (empty: listeners).",
    )
    inter_broker_listener_name: str = prop(
        "inter.broker.listener.name", "PLAINTEXT", "The listener followers fetch from leaders on."
    )
    unsafe_pre_kip903_mode: bool = prop(
        "unsafe.pre.kip903.mode",
        False,
        "UNSAFE, for demonstrations only: behave as brokers before KIP-903 (no broker epoch in Fetch, "
        "AlterPartition v2, no epoch comparison before ISR expansion). Can lose acknowledged records.",
    )
