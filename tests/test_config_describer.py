"""DescribeConfigs' answer on the broker, after Kafka's ConfigHelper / DynamicBrokerConfig synonyms: a value's
source is the first of the topic's own value, this broker's dynamic value, the cluster-wide dynamic
default, this broker's static setting, and the default."""

from __future__ import annotations

import uuid

import pytest

from epochkraft.broker.config_describer import ConfigDescriber
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.settings import BrokerSettings
from epochkraft.config import load_settings
from epochkraft.metadata.config_schema import ConfigSource, ConfigType, ResourceType, validate
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ConfigRecord, TopicRecord

TOPIC, BROKER = int(ResourceType.TOPIC), int(ResourceType.BROKER)
S = ConfigSource


def describer(static_min_isr: int | None = None, **dynamic: tuple[int, str, str]) -> ConfigDescriber:
    cache = MetadataCache(node_id=1)
    records = [TopicRecord(name="orders", topic_id=uuid.uuid4())]
    records += [
        ConfigRecord(resource_type=t, resource_name=r, name=k, value=v) for t, r, k, v in dynamic.values()
    ]
    for offset, record in enumerate(records):
        cache.apply(offset, record, Changes())
    settings = (
        BrokerSettings() if static_min_isr is None else BrokerSettings(min_insync_replicas=static_min_isr)
    )
    return ConfigDescriber(1, settings, cache)


def min_isr_entry(d: ConfigDescriber) -> tuple[str | None, int, list[tuple[str, str | None, int]]]:
    result = d.describe(TOPIC, "orders", ("min.insync.replicas",), synonyms=True, documentation=False)
    (entry,) = result.configs
    return entry.value, entry.config_source, [(s.name, s.value, s.source) for s in entry.synonyms]


@pytest.mark.parametrize(
    ("static", "dynamic", "expected"),
    [
        (None, {}, ("1", S.DEFAULT_CONFIG, [("min.insync.replicas", "1", S.DEFAULT_CONFIG)])),
        (
            2,
            {},
            (
                "2",
                S.STATIC_BROKER_CONFIG,
                [
                    ("min.insync.replicas", "2", S.STATIC_BROKER_CONFIG),
                    ("min.insync.replicas", "1", S.DEFAULT_CONFIG),
                ],
            ),
        ),
        (
            2,
            {
                "cluster": (BROKER, "", "min.insync.replicas", "3"),
                "node": (BROKER, "1", "min.insync.replicas", "4"),
            },
            (
                "4",
                S.DYNAMIC_BROKER_CONFIG,
                [
                    ("min.insync.replicas", "4", S.DYNAMIC_BROKER_CONFIG),
                    ("min.insync.replicas", "3", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
                    ("min.insync.replicas", "2", S.STATIC_BROKER_CONFIG),
                    ("min.insync.replicas", "1", S.DEFAULT_CONFIG),
                ],
            ),
        ),
        (
            None,
            {
                "other_node": (BROKER, "2", "min.insync.replicas", "4"),
                "topic": (TOPIC, "orders", "min.insync.replicas", "5"),
            },
            (
                "5",
                S.DYNAMIC_TOPIC_CONFIG,
                [
                    ("min.insync.replicas", "5", S.DYNAMIC_TOPIC_CONFIG),
                    ("min.insync.replicas", "1", S.DEFAULT_CONFIG),
                ],
            ),
        ),
    ],
)
def test_topic_config_value_source_and_synonyms_in_precedence_order(static, dynamic, expected):
    assert min_isr_entry(describer(static, **dynamic)) == expected


def test_every_topic_config_is_described_with_its_type_and_documentation_when_asked():
    result = describer().describe(TOPIC, "orders", None, synonyms=False, documentation=True)
    assert result.error_code == ErrorCode.none
    entries = {c.name: c for c in result.configs}
    assert len(entries) == 37  # as Kafka 4.4.0 describes a topic (tests/test_differential.py)
    assert entries["cleanup.policy"].config_type == ConfigType.LIST
    assert entries["retention.ms"].config_type == ConfigType.LONG
    assert entries["unclean.leader.election.enable"].config_type == ConfigType.BOOLEAN
    assert all(c.documentation and not c.read_only and c.synonyms == () for c in result.configs)


def test_the_topic_configs_kafka_4_4_added_are_described_with_kafka_s_defaults_types_and_synonyms():
    names = (
        "errors.deadletterqueue.group.enable",
        "max.decompressed.message.bytes",
        "remote.copy.lag.bytes",
        "remote.copy.lag.ms",
    )
    result = describer().describe(TOPIC, "orders", names, synonyms=True, documentation=False)
    described = {
        c.name: (c.value, c.config_source, c.config_type, [(s.name, s.value, s.source) for s in c.synonyms])
        for c in result.configs
    }
    assert described == {  # as Kafka 4.4.0 describes them (tests/test_differential.py)
        "errors.deadletterqueue.group.enable": ("false", S.DEFAULT_CONFIG, ConfigType.BOOLEAN, []),
        "max.decompressed.message.bytes": (
            "2147483639",
            S.DEFAULT_CONFIG,
            ConfigType.INT,
            [("max.decompressed.message.bytes", "2147483639", S.DEFAULT_CONFIG)],
        ),
        "remote.copy.lag.bytes": (
            "-1",
            S.DEFAULT_CONFIG,
            ConfigType.LONG,
            [("log.remote.copy.lag.bytes", "-1", S.DEFAULT_CONFIG)],
        ),
        "remote.copy.lag.ms": (
            "0",
            S.DEFAULT_CONFIG,
            ConfigType.LONG,
            [("log.remote.copy.lag.ms", "0", S.DEFAULT_CONFIG)],
        ),
    }


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("max.decompressed.message.bytes", "0", "Value must be at least 1"),
        ("max.decompressed.message.bytes", "2147483647", "Value must be no more than 2147483639"),
        ("max.decompressed.message.bytes", "1", None),
        ("remote.copy.lag.bytes", "-2", "Value must be at least -1"),
        ("remote.copy.lag.ms", "-1", None),
        ("errors.deadletterqueue.group.enable", "yes", "Expected value to be either true or false"),
    ],
)
def test_the_topic_configs_kafka_4_4_added_are_validated_as_kafka_validates_them(name, value, error):
    found = validate(ResourceType.TOPIC, name, value)
    if error is None:
        assert found is None
    else:
        assert found == f"Invalid value {value} for configuration {name}: {error}"


@pytest.mark.parametrize(
    ("resource_type", "name", "error"),
    [
        (TOPIC, "missing", ErrorCode.unknown_topic_or_partition),
        (TOPIC, "bad/name", ErrorCode.invalid_topic_exception),
        (BROKER, "2", ErrorCode.invalid_request),
        (int(ResourceType.BROKER_LOGGER), "1", ErrorCode.invalid_request),
    ],
)
def test_resources_that_cannot_be_described(resource_type, name, error):
    assert describer().describe(resource_type, name, None, False, False).error_code == error


def test_broker_resources_list_settings_read_only_unless_dynamic_and_the_cluster_defaults():
    d = describer(2, cluster=(BROKER, "", "unclean.leader.election.enable", "true"))
    own = {c.name: c for c in d.describe(BROKER, "1", None, False, False).configs}
    assert (own["min.insync.replicas"].value, own["min.insync.replicas"].config_source) == (
        "2",
        S.STATIC_BROKER_CONFIG,
    )
    assert not own["min.insync.replicas"].read_only and own["replica.lag.time.max.ms"].read_only
    unclean = own["unclean.leader.election.enable"]
    assert (unclean.value, unclean.config_source) == ("true", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
    defaults = d.describe(BROKER, "", None, False, False).configs
    assert [(c.name, c.value, c.config_source) for c in defaults] == [
        ("unclean.leader.election.enable", "true", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]


def test_passwords_and_configs_of_no_known_type_are_never_shown():
    """ConfigHelper.createBrokerConfigEntry with KafkaConfig.maybeSensitive: a PASSWORD config (Kafka's
    type, whatever our settings hold it as), or a cluster-wide config Kafka has no type for, is described
    with a null value and as sensitive."""
    settings = load_settings(
        BrokerSettings,
        properties={
            "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="s";',
            "ssl.key.password": "hunter2",
        },
    )
    cache = MetadataCache(node_id=1)
    records = [
        ConfigRecord(resource_type=BROKER, resource_name="", name="no.such.config", value="secret"),
        ConfigRecord(resource_type=BROKER, resource_name="", name="message.max.bytes", value="2000"),
    ]
    for offset, record in enumerate(records):
        cache.apply(offset, record, Changes())
    d = ConfigDescriber(1, settings, cache)
    own = {
        c.name: c
        for c in d.describe(BROKER, "1", ("sasl.jaas.config", "ssl.key.password"), True, False).configs
    }
    for name in ("sasl.jaas.config", "ssl.key.password"):
        assert own[name].value is None and own[name].is_sensitive, own[name]
        assert all(synonym.value is None for synonym in own[name].synonyms)
    defaults = {c.name: c for c in d.describe(BROKER, "", None, False, False).configs}
    assert defaults["no.such.config"].value is None and defaults["no.such.config"].is_sensitive
    assert defaults["message.max.bytes"].value == "2000" and not defaults["message.max.bytes"].is_sensitive
