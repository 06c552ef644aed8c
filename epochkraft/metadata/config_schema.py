"""Kafka's config definitions for topics and brokers: names, types, defaults, synonyms and validation.

As Kafka's KafkaConfigSchema with LogConfig's topic configs: every topic config Kafka knows is accepted,
validated and described with its type, default and broker synonyms (the broker properties that supply
its default, in precedence order). Values are stored as Kafka stores them, as strings in ConfigRecords.
Of the topic configs, min.insync.replicas, unclean.leader.election.enable, the retention and segment
configs (retention.ms/bytes, segment.bytes/ms/index.bytes, index.interval.bytes, cleanup.policy,
file.delete.delay.ms) change behaviour here; the others are stored and described for the tools that set
them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from epochkraft.metadata import kafka_broker_configs
from epochkraft.metadata.kafka_broker_configs import READ_ONLY

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ResourceType(IntEnum):
    """ConfigResource.Type ids, as sent in DescribeConfigs/AlterConfigs and written in ConfigRecords."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class ConfigSource(IntEnum):
    """DescribeConfigs' config_source (ConfigEntry.ConfigSource)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """DescribeConfigs' config_type (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


Validator = Callable[[object], str | None]


def at_least(minimum: float) -> Validator:
    def check(value: object) -> str | None:
        return None if value >= minimum else f"Value must be at least {minimum}"  # type: ignore[operator]

    return check


def between(low: float, high: float) -> Validator:
    def check(value: object) -> str | None:
        if value < low:  # type: ignore[operator]
            return f"Value must be at least {low}"
        return None if value <= high else f"Value must be no more than {high}"  # type: ignore[operator]

    return check


def one_of(*choices: str) -> Validator:
    def check(value: object) -> str | None:
        return None if value in choices else f"String must be one of: {', '.join(choices)}"

    return check


def each_of(*choices: str) -> Validator:
    def check(value: object) -> str | None:
        bad = [v for v in value if v not in choices]  # type: ignore[attr-defined]
        return None if not bad else f"Invalid value {bad[0]}: must be one of {', '.join(choices)}"

    return check


def throttled_replicas(value: object) -> str | None:
    """ThrottledReplicaListValidator: '*' or partition:broker pairs."""
    items = list(value)  # type: ignore[call-overload]
    if items == ["*"]:
        return None
    for item in items:
        partition, _, broker = item.partition(":")
        if not (partition.strip().isdigit() and broker.strip().isdigit()):
            return "must be the literal '*' or a list of replicas in the format [PartitionId]:[BrokerId]"
    return None


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None
    doc: str
    validator: Validator | None = None
    synonyms: tuple[str, ...] = ()  # broker properties supplying the default, highest precedence first
    sensitive: bool = False

    def parse(self, value: str | None) -> tuple[object, str | None]:
        """(parsed value, None) or (None, Kafka's ConfigException message)."""
        if value is None:
            return None, None
        text = value.strip()

        def bad(why: str) -> tuple[object, str]:
            return None, f"Invalid value {value} for configuration {self.name}: {why}"

        try:
            if self.type == ConfigType.BOOLEAN:
                if text.lower() not in ("true", "false"):
                    return bad("Expected value to be either true or false")
                parsed: object = text.lower() == "true"
            elif self.type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
                parsed = int(text)
                limit = {ConfigType.INT: INT_MAX, ConfigType.SHORT: 32767, ConfigType.LONG: LONG_MAX}
                if not -limit[self.type] - 1 <= parsed <= limit[self.type]:
                    return bad(f"Not a number of type {self.type.name}")
            elif self.type == ConfigType.DOUBLE:
                parsed = float(text)
            elif self.type == ConfigType.LIST:
                parsed = [item.strip() for item in text.split(",")] if text else []
            else:
                parsed = text
        except ValueError:
            return bad(f"Not a number of type {self.type.name}")
        if self.validator is not None and (why := self.validator(parsed)) is not None:
            return bad(why)
        return parsed, None


def _def(name: str, kind: ConfigType, default: str | None, doc: str, validator=None, *synonyms: str):
    return ConfigDef(name, kind, default, doc, validator, tuple(synonyms))


BOOL, STR, INT, LONG, DOUBLE, LIST = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
)
MIN_INSYNC = "min.insync.replicas"
UNCLEAN = "unclean.leader.election.enable"

# LogConfig's topic configs (Kafka 4.4: message.downconversion.enable is gone, KIP-724; 4.4 adds
# max.decompressed.message.bytes, remote.copy.lag.bytes/ms (KIP-1241) and errors.deadletterqueue.group.enable),
# with the broker properties that give their defaults.
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        _def(
            "cleanup.policy",
            LIST,
            "delete",
            "Retention policy: delete and/or compact.",
            each_of("compact", "delete"),
            "log.cleanup.policy",
        ),
        _def(
            "compression.type",
            STR,
            "producer",
            "Final compression type for the topic's data.",
            one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
            "compression.type",
        ),
        _def(
            "compression.gzip.level",
            INT,
            "-1",
            "Level of gzip compression when compression.type is gzip (KIP-390).",
            lambda v: None if v == -1 or 1 <= v <= 9 else "must be -1 or between 1 and 9",
            "compression.gzip.level",
        ),
        _def(
            "compression.lz4.level",
            INT,
            "9",
            "Level of lz4 compression when compression.type is lz4 (KIP-390).",
            between(1, 17),
            "compression.lz4.level",
        ),
        _def(
            "compression.zstd.level",
            INT,
            "3",
            "Level of zstd compression when compression.type is zstd (KIP-390).",
            between(-131072, 22),
            "compression.zstd.level",
        ),
        _def(
            "delete.retention.ms",
            LONG,
            "86400000",
            "How long delete tombstones are kept.",
            at_least(0),
            "log.cleaner.delete.retention.ms",
        ),
        _def(
            "errors.deadletterqueue.group.enable",
            BOOL,
            "false",
            "Whether share groups may write undeliverable records to the topic (a dead-letter queue).",
            None,
        ),
        _def(
            "file.delete.delay.ms",
            LONG,
            "60000",
            "Wait before deleting a file from the filesystem.",
            at_least(0),
            "log.segment.delete.delay.ms",
        ),
        _def(
            "flush.messages",
            LONG,
            str(LONG_MAX),
            "fsync after this many messages.",
            at_least(1),
            "log.flush.interval.messages",
        ),
        _def(
            "flush.ms",
            LONG,
            str(LONG_MAX),
            "fsync after this many milliseconds.",
            at_least(0),
            "log.flush.interval.ms",
        ),
        _def(
            "follower.replication.throttled.replicas",
            LIST,
            "",
            "Replicas throttled on the follower side.",
            throttled_replicas,
        ),
        _def(
            "index.interval.bytes",
            INT,
            "4096",
            "Bytes between offset index entries.",
            at_least(0),
            "log.index.interval.bytes",
        ),
        _def(
            "leader.replication.throttled.replicas",
            LIST,
            "",
            "Replicas throttled on the leader side.",
            throttled_replicas,
        ),
        _def(
            "local.retention.bytes",
            LONG,
            "-2",
            "Local bytes kept with tiered storage.",
            at_least(-2),
            "log.local.retention.bytes",
        ),
        _def(
            "local.retention.ms",
            LONG,
            "-2",
            "Local time kept with tiered storage.",
            at_least(-2),
            "log.local.retention.ms",
        ),
        _def(
            "max.compaction.lag.ms",
            LONG,
            str(LONG_MAX),
            "Longest a message stays uncompacted.",
            at_least(1),
            "log.cleaner.max.compaction.lag.ms",
        ),
        _def(
            "max.decompressed.message.bytes",
            INT,
            "2147483639",
            "Largest decompressed size of a single record.",
            between(1, 2147483639),
            "max.decompressed.message.bytes",
        ),
        _def(
            "max.message.bytes",
            INT,
            "1048588",
            "Largest record batch size allowed.",
            at_least(0),
            "message.max.bytes",
        ),
        _def(
            "message.timestamp.after.max.ms",
            LONG,
            "3600000",  # Kafka 4.0 (KIP-1030)
            "Largest allowed timestamp ahead of the broker's clock.",
            at_least(0),
            "log.message.timestamp.after.max.ms",
        ),
        _def(
            "message.timestamp.before.max.ms",
            LONG,
            str(LONG_MAX),
            "Largest allowed timestamp behind the broker's clock.",
            at_least(0),
            "log.message.timestamp.before.max.ms",
        ),
        _def(
            "message.timestamp.type",
            STR,
            "CreateTime",
            "CreateTime or LogAppendTime.",
            one_of("CreateTime", "LogAppendTime"),
            "log.message.timestamp.type",
        ),
        _def(
            "min.cleanable.dirty.ratio",
            DOUBLE,
            "0.5",
            "Dirty ratio that triggers compaction.",
            between(0, 1),
            "log.cleaner.min.cleanable.ratio",
        ),
        _def(
            "min.compaction.lag.ms",
            LONG,
            "0",
            "Shortest a message stays uncompacted.",
            at_least(0),
            "log.cleaner.min.compaction.lag.ms",
        ),
        _def(
            MIN_INSYNC, INT, "1", "Replicas that must acknowledge an acks=all write.", at_least(1), MIN_INSYNC
        ),
        _def("preallocate", BOOL, "false", "Preallocate the file of a new segment.", None, "log.preallocate"),
        _def(
            "remote.copy.lag.bytes",
            LONG,
            "-1",
            "Newer local bytes after which a segment may be copied to tiered storage (KIP-1241).",
            at_least(-1),
            "log.remote.copy.lag.bytes",
        ),
        _def(
            "remote.copy.lag.ms",
            LONG,
            "0",
            "Age after which a segment may be copied to tiered storage (KIP-1241).",
            at_least(-1),
            "log.remote.copy.lag.ms",
        ),
        _def(
            "remote.log.copy.disable",
            BOOL,
            "false",
            "Stop copying segments to tiered storage (KIP-950).",
            None,
        ),
        _def(
            "remote.log.delete.on.disable",
            BOOL,
            "false",
            "Delete tiered data when tiered storage is disabled (KIP-950).",
            None,
        ),
        _def("remote.storage.enable", BOOL, "false", "Tiered storage for the topic.", None),
        _def(
            "retention.bytes",
            LONG,
            "-1",
            "Largest size of a partition before old segments go.",
            None,
            "log.retention.bytes",
        ),
        _def(
            "retention.ms",
            LONG,
            "604800000",
            "Longest a segment is kept.",
            at_least(-1),
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ),
        _def(
            "segment.bytes",
            INT,
            "1073741824",
            "Size at which a segment rolls.",
            at_least(14),
            "log.segment.bytes",
        ),
        _def(
            "segment.index.bytes",
            INT,
            "10485760",
            "Size of a segment's offset index.",
            at_least(4),
            "log.index.size.max.bytes",
        ),
        _def(
            "segment.jitter.ms",
            LONG,
            "0",
            "Random jitter subtracted from segment.ms.",
            at_least(0),
            "log.roll.jitter.ms",
            "log.roll.jitter.hours",
        ),
        _def(
            "segment.ms",
            LONG,
            "604800000",
            "Time after which a segment rolls.",
            at_least(1),
            "log.roll.ms",
            "log.roll.hours",
        ),
        _def(
            UNCLEAN,
            BOOL,
            "false",
            "Elect a replica outside the ISR when no ISR member can lead (acknowledged data may be lost).",
            None,
            UNCLEAN,
        ),
    )
}

# Broker properties that may be set dynamically, per broker or cluster-wide (the empty name): Kafka 4.4.0's
# DynamicBrokerConfig.AllDynamicConfigs (kafka_broker_configs.DYNAMIC) with Kafka's validators, and the
# replication throttles of DynamicConfig.Broker that kafka-reassign-partitions --throttle sets (the
# follower's is enforced, see broker/replication_quota.py; the leader's is stored and described only).
# Those whose feature epochkraft has take effect: min.insync.replicas, unclean.leader.election.enable,
# message.max.bytes and the log.* defaults of the topic configs (through their synonyms); the others are
# stored and described.
_BROKER_VALIDATORS: dict[str, Validator] = {
    **{
        synonym: d.validator
        for d in TOPIC_CONFIGS.values()
        for synonym in d.synonyms
        if d.validator is not None
    },
    **dict.fromkeys(
        (
            "background.threads",
            "num.io.threads",
            "num.network.threads",
            "num.replica.fetchers",
            "num.recovery.threads.per.data.dir",
            "producer.id.expiration.ms",
            "log.roll.ms",
            "log.flush.interval.messages",
            "remote.log.reader.threads",
            "remote.log.manager.copier.thread.pool.size",
            "remote.log.manager.expiration.thread.pool.size",
            "remote.log.manager.follower.thread.pool.size",
        ),
        at_least(1),
    ),
    **dict.fromkeys(
        (
            "log.cleaner.threads",
            "message.max.bytes",
            "max.connections",
            "max.connections.per.ip",
            "max.connection.creation.rate",
            "log.cleaner.backoff.ms",
            "log.cleaner.io.buffer.size",
            "log.cleaner.dedupe.buffer.size",
            "log.roll.jitter.ms",
        ),
        at_least(0),
    ),
    "log.segment.bytes": at_least(1024 * 1024),  # the broker's floor (KIP-1030), above the topic's
    "log.cleaner.io.buffer.load.factor": between(0, 1),
    "ssl.client.auth": one_of("required", "requested", "none"),
}
DYNAMIC_BROKER_CONFIGS: dict[str, ConfigDef] = {
    name: ConfigDef(
        name,
        ConfigType[kind],
        default,
        "Dynamic broker config (Kafka's DynamicBrokerConfig).",
        _BROKER_VALIDATORS.get(name),
        sensitive=kind == "PASSWORD",
    )
    for name, kind, default in kafka_broker_configs.DYNAMIC
}
DYNAMIC_BROKER_CONFIGS.update(
    {
        MIN_INSYNC: TOPIC_CONFIGS[MIN_INSYNC],
        UNCLEAN: TOPIC_CONFIGS[UNCLEAN],
        **{
            name: _def(name, LONG, str(LONG_MAX), doc, at_least(0))
            for name, doc in (
                (
                    "follower.replication.throttled.rate",
                    "Bytes per second a follower fetches for throttled replicas.",
                ),
                (
                    "leader.replication.throttled.rate",
                    "Bytes per second a leader serves to throttled replicas.",
                ),
            )
        },
    }
)
# SslConfigs.RECONFIGURABLE_CONFIGS: set only per listener (listener.name.<listener>.<config>).
SSL_RECONFIGURABLE = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)
# DynamicBrokerConfig.PerBrokerConfigs: the security and listener configs, but for the three
# ClusterLevelListenerConfigs, may not be set cluster-wide.
CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
PER_BROKER_ONLY = (
    SSL_RECONFIGURABLE
    | frozenset(
        name
        for name in DYNAMIC_BROKER_CONFIGS
        if name.startswith(("ssl.", "sasl.", "listener")) or name == "principal.builder.class"
    )
    - CLUSTER_LEVEL_LISTENER_CONFIGS
)
_LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)")


def broker_config_type(name: str) -> ConfigType | None:
    """Kafka's type of a dynamic broker config, a listener-prefixed one by its base name
    (KafkaConfig.configType); None for a name Kafka does not know."""
    listener_config = _LISTENER_CONFIG.fullmatch(name)
    definition = DYNAMIC_BROKER_CONFIGS.get(listener_config.group(1) if listener_config else name)
    return definition.type if definition is not None else None


def validate_broker_config(name: str, value: str | None, per_broker: bool) -> str | None:
    """None if ``name=value`` may be stored as a dynamic broker config (``per_broker``: for one broker,
    else cluster-wide), else Kafka's message: DynamicBrokerConfig.validateConfigs' checks in its order.
    A name Kafka does not know is stored as it is, as Kafka's broker does."""
    listener_config = _LISTENER_CONFIG.fullmatch(name)
    base = listener_config.group(1) if listener_config else name
    if name in READ_ONLY:
        return f"Cannot update these configs dynamically: [{name}]"
    if name in SSL_RECONFIGURABLE:
        return (
            "These security configs can be dynamically updated only per-listener using the listener "
            f"prefix: [{name}]"
        )
    definition = DYNAMIC_BROKER_CONFIGS.get(base)
    if definition is not None and (why := definition.parse(value)[1]) is not None:
        return why.replace(f"configuration {base}:", f"configuration {name}:")
    if not per_broker and (
        name in PER_BROKER_ONLY or (listener_config and base not in CLUSTER_LEVEL_LISTENER_CONFIGS)
    ):
        return f"Cannot update these configs at default cluster level, broker id must be specified: [{name}]"
    return None


def validate(
    resource_type: ResourceType, name: str, value: str | None, resource_name: str = ""
) -> str | None:
    """None if ``name=value`` may be stored for the resource, else Kafka's message for INVALID_CONFIG."""
    if resource_type != ResourceType.TOPIC:
        return validate_broker_config(name, value, per_broker=resource_name != "")
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        return f"Unknown topic config name: {name}"
    return definition.parse(value)[1]


def is_list(resource_type: ResourceType, name: str) -> bool:
    table = TOPIC_CONFIGS if resource_type == ResourceType.TOPIC else DYNAMIC_BROKER_CONFIGS
    definition = table.get(name)
    return definition is not None and definition.type == ConfigType.LIST


def default_of(resource_type: ResourceType, name: str) -> str | None:
    table = TOPIC_CONFIGS if resource_type == ResourceType.TOPIC else DYNAMIC_BROKER_CONFIGS
    definition = table.get(name)
    return None if definition is None else definition.default
