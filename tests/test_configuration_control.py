"""Dynamic configs on the controller core, after Kafka's ConfigurationControlManagerTest and the config
cases of ReplicationControlManagerTest."""

from __future__ import annotations

import pytest
from kio.schema.incremental_alter_configs.v1 import request as iac1

from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.controller.configuration_control import OpType
from epochkraft.controller.controller import Controller
from epochkraft.metadata.config_schema import ResourceType, validate_broker_config
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ConfigRecord
from tests.controller_context import CLUSTER_ID, ControllerContext

TOPIC, BROKER = ResourceType.TOPIC, ResourceType.BROKER
SET, DELETE, APPEND, SUBTRACT = OpType.SET, OpType.DELETE, OpType.APPEND, OpType.SUBTRACT
OK = (ErrorCode.none, None)


@pytest.fixture
def ctx() -> ControllerContext:
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1, 2)
    ctx.create_topic("mytopic", [[0, 1, 2]])
    return ctx


def config_records(ctx: ControllerContext, since: int) -> list[ConfigRecord]:
    return [r for o, r in ctx.controller.log.records() if o >= since and isinstance(r, ConfigRecord)]


def test_replay_rebuilds_configs_after_restart(ctx):
    """testReplay: configs are state replayed from ConfigRecords, the same path a restart takes."""
    ctx.incremental_alter_configs(
        {
            (TOPIC, "mytopic"): {"retention.ms": (SET, "1000")},
            (BROKER, ""): {"min.insync.replicas": (SET, "2")},
        }
    )
    restarted = Controller(CLUSTER_ID)
    restarted.load(ctx.controller.log.read(0, 1 << 30))
    assert restarted.configuration.get(TOPIC, "mytopic") == {"retention.ms": "1000"}
    assert restarted.configuration.get(BROKER, "") == {"min.insync.replicas": "2"}


def test_incremental_alter_configs(ctx):
    """testIncrementalAlterConfigs: SUBTRACT on a non-list key fails its resource only; DELETE removes."""
    since = ctx.controller.log.next_offset
    results = ctx.incremental_alter_configs(
        {
            (BROKER, "0"): {"min.insync.replicas": (SUBTRACT, "abc")},
            (TOPIC, "mytopic"): {"cleanup.policy": (APPEND, "compact")},
        }
    )
    assert results[(BROKER, "0")] == (
        ErrorCode.invalid_config,
        "Can't SUBTRACT to key min.insync.replicas because its type is not LIST.",
    )
    assert results[(TOPIC, "mytopic")] == OK
    assert config_records(ctx, since) == [
        ConfigRecord(resource_type=2, resource_name="mytopic", name="cleanup.policy", value="delete,compact")
    ]
    assert ctx.incremental_alter_configs({(TOPIC, "mytopic"): {"cleanup.policy": (DELETE, "xyz")}}) == {
        (TOPIC, "mytopic"): OK
    }
    assert ctx.configs(TOPIC, "mytopic") == {}


def test_incremental_alter_multiple_config_values(ctx):
    """testIncrementalAlterMultipleConfigValues: APPEND of present values and SUBTRACT of absent ones
    write nothing."""
    topic = (TOPIC, "mytopic")
    ctx.incremental_alter_configs({topic: {"cleanup.policy": (SET, "compact")}})
    since = ctx.controller.log.next_offset
    assert ctx.incremental_alter_configs({topic: {"cleanup.policy": (APPEND, "compact")}}) == {topic: OK}
    assert ctx.incremental_alter_configs({topic: {"cleanup.policy": (SUBTRACT, "delete")}}) == {topic: OK}
    assert config_records(ctx, since) == []
    ctx.incremental_alter_configs({topic: {"cleanup.policy": (APPEND, "delete")}})
    assert ctx.configs(*topic) == {"cleanup.policy": "compact,delete"}
    ctx.incremental_alter_configs({topic: {"cleanup.policy": (SUBTRACT, "compact")}})
    assert ctx.configs(*topic) == {"cleanup.policy": "delete"}


def test_incremental_alter_configs_without_existence(ctx):
    """testIncrementalAlterConfigsWithoutExistence: a missing topic fails alone."""
    results = ctx.incremental_alter_configs(
        {
            (TOPIC, "missing"): {"retention.ms": (SET, "1")},
            (TOPIC, "mytopic"): {"retention.ms": (SET, "1")},
        }
    )
    assert results[(TOPIC, "missing")][0] == ErrorCode.unknown_topic_or_partition
    assert results[(TOPIC, "mytopic")] == OK
    assert ctx.configs(TOPIC, "mytopic") == {"retention.ms": "1"}


def test_legacy_alter_configs(ctx):
    """testLegacyAlterConfigs: the configs given replace the resource's dynamic configs."""
    assert ctx.alter_configs(TOPIC, "mytopic", {"retention.ms": "10", "segment.ms": "20"}) == OK
    assert ctx.alter_configs(TOPIC, "mytopic", {"segment.ms": "30"}) == OK
    assert ctx.configs(TOPIC, "mytopic") == {"segment.ms": "30"}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
        (
            "min.insync.replicas",
            "0",
            "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1",
        ),
        (
            "min.insync.replicas",
            "two",
            "Invalid value two for configuration min.insync.replicas: Not a number of type INT",
        ),
        ("unclean.leader.election.enable", "yes", "Expected value to be either true or false"),
        ("cleanup.policy", "compact,shred", "Invalid value shred"),
        ("compression.type", "brotli", "String must be one of"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("leader.replication.throttled.replicas", "0:1,x", "[PartitionId]:[BrokerId]"),
    ],
)
def test_validate_alter_config_answers_invalid_config_with_kafkas_message(ctx, key, value, message):
    for answer in (
        ctx.incremental_alter_configs({(TOPIC, "mytopic"): {key: (SET, value)}})[(TOPIC, "mytopic")],
        ctx.alter_configs(TOPIC, "mytopic", {key: value}),
    ):
        assert answer[0] == ErrorCode.invalid_config
        assert message in answer[1]
    assert ctx.configs(TOPIC, "mytopic") == {}
    ctx.create_topic("other", [[0]], configs={key: value}, expected=ErrorCode.invalid_config)


@pytest.mark.parametrize(
    ("resource", "key", "error"),
    [
        ((BROKER, "0"), "log.segment.bytes", ErrorCode.invalid_request),  # below its 1 MiB floor
        ((BROKER, "zero"), "min.insync.replicas", ErrorCode.invalid_request),
        ((TOPIC, ""), "retention.ms", ErrorCode.invalid_request),
        ((ResourceType.BROKER_LOGGER, "0"), "kafka", ErrorCode.invalid_request),
    ],
)
def test_resources_and_keys_that_cannot_be_altered(ctx, resource, key, error):
    assert ctx.incremental_alter_configs({resource: {key: (SET, "2")}})[resource][0] == error


def test_validate_only_and_duplicate_resources_write_nothing(ctx):
    since = ctx.controller.log.next_offset
    assert ctx.alter_configs(TOPIC, "mytopic", {"retention.ms": "5"}, validate_only=True) == OK
    resource = iac1.AlterConfigsResource(resource_type=2, resource_name="mytopic", configs=())
    duplicate = ctx.controller.incremental_alter_configs(
        ctx.now, iac1.IncrementalAlterConfigsRequest(resources=(resource, resource), validate_only=False)
    )
    assert [r.error_code for r in duplicate.responses] == [ErrorCode.invalid_request] * 2
    assert ctx.controller.log.next_offset == since


def test_min_insync_replicas_precedence_topic_then_node_then_cluster_then_static():
    ctx = ControllerContext(min_insync_replicas=2)
    ctx.brokers_ready(0, 1, 2)
    ctx.create_topic("foo", [[0, 1, 2]])
    assert ctx.controller.replication.min_insync("foo") == 2
    ctx.incremental_alter_configs({(BROKER, ""): {"min.insync.replicas": (SET, "3")}})
    assert ctx.controller.replication.min_insync("foo") == 3
    ctx.incremental_alter_configs({(TOPIC, "foo"): {"min.insync.replicas": (SET, "1")}})
    assert ctx.controller.replication.min_insync("foo") == 1
    ctx.incremental_alter_configs({(TOPIC, "foo"): {"min.insync.replicas": (DELETE, None)}})
    assert ctx.controller.replication.min_insync("foo") == 3
    ctx.controller._commit(ctx.controller.replication.decide_delete_topic(ctx.topic_id("foo")), ctx.now)
    assert ctx.configs(TOPIC, "foo") == {}


@pytest.mark.parametrize(
    "unclean_config", ["none", "static", "dynamic_cluster", "dynamic_node", "dynamic_topic"]
)
def test_maybe_trigger_unclean_leader_election_for_leaderless_partitions(unclean_config):
    """ReplicationControlManagerTest.testMaybeTriggerUncleanLeaderElectionForLeaderlessPartitions: the
    election happens on unfencing when configured statically, and as soon as the config is set
    dynamically (the controller elects after the config write). ELR off, as Kafka's test runs it."""
    ctx = ControllerContext(
        unclean_leader_election_enable=unclean_config == "static", eligible_leader_replicas_version=0
    )
    ctx.brokers_ready(0, 1, 2, 3, 4)
    ctx.create_topic("foo", [[1, 2, 4], [1, 3, 4], [0, 2, 4]])
    ctx.fence_brokers(0, 1, 2, 3, 4)
    for index in (0, 1, 2):
        assert (ctx.partition("foo", index).isr, ctx.partition("foo", index).leader) == ((4,), -1)
    ctx.unfence_brokers(2)
    elected = {0: ((2,), 2), 1: ((4,), -1), 2: ((2,), 2)}
    untouched = {i: ((4,), -1) for i in (0, 1, 2)}

    def state() -> dict[int, tuple[tuple[int, ...], int]]:
        return {i: (ctx.partition("foo", i).isr, ctx.partition("foo", i).leader) for i in (0, 1, 2)}

    assert state() == (elected if unclean_config == "static" else untouched)
    resource = {
        "dynamic_cluster": (BROKER, ""),
        "dynamic_node": (BROKER, "0"),
        "dynamic_topic": (TOPIC, "foo"),
    }.get(unclean_config)
    if resource is not None:
        assert ctx.incremental_alter_configs(
            {resource: {"unclean.leader.election.enable": (SET, "true")}}
        ) == {resource: OK}
    assert state() == (untouched if unclean_config == "none" else elected)
    if unclean_config not in ("none", "static"):
        assert ctx.partition("foo", 0).leader_recovery_state == 1, "RECOVERING after the unclean election"


def test_only_an_unclean_config_write_looks_for_leaderless_partitions(monkeypatch):
    """A config write looks for partitions to elect only when it writes unclean.leader.election.enable,
    and then among its topic's partitions: a retention change on a topic of many partitions does not
    walk every partition of the cluster."""
    ctx = ControllerContext(eligible_leader_replicas_version=0)
    ctx.brokers_ready(1, 2)
    ctx.create_topic("foo", [[1, 2]] * 4)
    ctx.create_topic("bar", [[1, 2]])
    ctx.fence_brokers(1, 2)  # every partition leaderless
    looked_at: list[str] = []
    monkeypatch.setattr(ctx.controller.replication, "unclean_allowed", lambda name: looked_at.append(name))
    ctx.incremental_alter_configs({(TOPIC, "foo"): {"retention.ms": (SET, "1000")}})
    assert looked_at == []
    ctx.incremental_alter_configs({(TOPIC, "bar"): {"unclean.leader.election.enable": (SET, "true")}})
    assert looked_at == ["bar"]


# ---- dynamic broker configs: DynamicBrokerConfigTest ---------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ssl.keystore.location", "ks.jks"),
        ("ssl.keystore.type", "JKS"),
        ("ssl.keystore.password", "password"),
        ("ssl.key.password", "password"),
    ],
)
def test_testSecurityConfigs(name, value):
    """An SSL store is updated only per listener (listener.name.<listener>.<config>) and only per broker."""
    prefixed = f"listener.name.external.{name}"
    assert "listener prefix" in validate_broker_config(name, value, per_broker=True)
    assert validate_broker_config(prefixed, value, per_broker=True) is None
    assert "listener prefix" in validate_broker_config(name, value, per_broker=False)
    assert "broker id must be specified" in validate_broker_config(prefixed, value, per_broker=False)


def test_testLogRetentionTimeMinutesIsNotDynamicallyReconfigurable():
    assert validate_broker_config("log.retention.minutes", "3", per_broker=False) == (
        "Cannot update these configs dynamically: [log.retention.minutes]"
    )
    assert validate_broker_config("log.retention.ms", "180000", per_broker=False) is None


def test_testDynamicLogConfigHandlesSynonymsCorrectly():
    """A cluster-wide message.max.bytes is the max.message.bytes of a topic without its own, and leaves
    retention alone; a broker's own log.retention.ms wins over the cluster-wide one."""
    cache = MetadataCache(node_id=1)
    cache.image.configs[(ResourceType.BROKER, "")] = {
        "message.max.bytes": "12345678",
        "log.retention.ms": "1000",
    }
    assert cache.image.topic_config("t", "max.message.bytes") == "12345678"
    assert cache.image.topic_config("t", "retention.ms") == "1000"
    cache.image.configs[(ResourceType.BROKER, "1")] = {"log.retention.ms": "2000"}
    assert cache.image.topic_config("t", "retention.ms") == "2000"
    assert cache.image.topic_config("t", "segment.bytes") is None  # the static setting applies


def test_append_or_subtract_of_a_null_value_writes_nothing(ctx):
    # A broker refuses it before forwarding; sent to the controller directly it is refused too (Kafka's
    # controller fails on the null) rather than taken as an empty list item.
    since = ctx.controller.log.next_offset
    results = ctx.incremental_alter_configs(
        {
            (TOPIC, "mytopic"): {"cleanup.policy": (SUBTRACT, None)},
            (BROKER, ""): {"log.cleanup.policy": (APPEND, None)},
        }
    )
    assert results == {
        (TOPIC, "mytopic"): (ErrorCode.invalid_request, "Null value not supported for : cleanup.policy"),
        (BROKER, ""): (ErrorCode.invalid_request, "Null value not supported for : log.cleanup.policy"),
    }
    assert config_records(ctx, since) == []
