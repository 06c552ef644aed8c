"""Group configs (resource type GROUP), after Kafka's GroupConfigTest, GroupConfigManagerTest and the group
cases of ConfigurationControlManagerTest: validation on the controller, ConfigRecords of type GROUP in the
metadata log, DescribeConfigs on the broker, and the group coordinator answering a group's own session
timeout and heartbeat interval."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.alter_configs.v2 import request as ac2
from kio.schema.alter_configs.v2 import response as acr
from kio.schema.incremental_alter_configs.v1 import request as ia
from kio.schema.incremental_alter_configs.v1 import response as iar

from epochkraft.broker.config_describer import ConfigDescriber
from epochkraft.broker.consumer_group import ConsumerGroupCoordinator, ConsumerGroupSettings, HeartbeatRequest
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.settings import BrokerSettings
from epochkraft.controller.configuration_control import OpType
from epochkraft.controller.controller import Controller
from epochkraft.controller.settings import ControllerSettings
from epochkraft.metadata import group_config
from epochkraft.metadata.config_schema import ConfigSource, ResourceType
from epochkraft.metadata.group_config import GroupBounds, GroupConfig
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ConfigRecord
from epochkraft.server import config_preprocess
from tests.controller_context import CLUSTER_ID, ControllerContext
from tests.test_consumer_group import Topics

GROUP = ResourceType.GROUP
SET, DELETE = OpType.SET, OpType.DELETE
SESSION, HEARTBEAT = group_config.CONSUMER_SESSION_TIMEOUT, group_config.CONSUMER_HEARTBEAT_INTERVAL
BOUNDS = GroupBounds.of()  # Kafka's defaults: session 45000..60000, heartbeat 5000..15000


# ---- GroupConfigTest ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(group_config.GROUP_CONFIGS))
@pytest.mark.parametrize("value", ["not_a_number", "-0.1", "1.2", "-1"])
def test_from_props_invalid(name, value):
    assert group_config.validate({name: value}, BOUNDS) is not None


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({SESSION: "1"}, f"{SESSION} must be greater than or equal to group.consumer.min.session.timeout.ms"),
        (
            {SESSION: "70000"},
            f"{SESSION} must be less than or equal to group.consumer.max.session.timeout.ms",
        ),
        (
            {HEARTBEAT: "1"},
            f"{HEARTBEAT} must be greater than or equal to group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {HEARTBEAT: "70000"},
            f"{HEARTBEAT} must be less than or equal to group.consumer.max.heartbeat.interval.ms",
        ),
        # the heartbeat's bounds are checked before the session's, as Kafka's validateValues
        (
            {SESSION: "45000", HEARTBEAT: "46000"},
            f"{HEARTBEAT} must be less than or equal to group.consumer.max.heartbeat.interval.ms",
        ),
        (
            {"consumer.assignment.interval.ms": "20000"},
            "consumer.assignment.interval.ms must be less than or equal to group.consumer.max.assignment.interval.ms",
        ),
        (
            {"streams.num.standby.replicas": "5"},
            "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas",
        ),
        ({SESSION: "abc"}, f"Invalid value abc for configuration {SESSION}: Not a number of type INT"),
        ({SESSION: "0"}, f"Invalid value 0 for configuration {SESSION}: Value must be at least 1"),
    ],
)
def test_invalid_props(configs, message):
    """Kafka 4.3.1's messages, as its GroupConfig.validate throws them (read from its jar)."""
    assert group_config.validate(configs, BOUNDS) == message


def test_session_must_exceed_heartbeat():
    bounds = GroupBounds.of({"group.consumer.min.session.timeout.ms": 1000})
    assert group_config.validate({SESSION: "5000"}, bounds) == f"{SESSION} must be greater than {HEARTBEAT}"
    assert group_config.validate({SESSION: "6000", HEARTBEAT: "5000"}, bounds) is None


def test_invalid_config_name():
    configs = {SESSION: "46000", "invalid.config.name": "10"}
    assert group_config.validate(configs, BOUNDS) == "Unknown group config name: invalid.config.name"
    # share groups are not served here: their configs are unknown names
    assert group_config.validate({"share.session.timeout.ms": "45000"}, BOUNDS) is not None


def test_valid_props():
    assert group_config.validate({SESSION: "45000", HEARTBEAT: "5000"}, BOUNDS) is None


def test_from_props_with_default_value():
    """A group's own value wins; a config the group lacks takes the broker's setting."""
    defaults = {SESSION: 10, HEARTBEAT: 10, "consumer.assignment.interval.ms": 10}.__getitem__
    bounds = GroupBounds.of({"group.consumer.min.session.timeout.ms": 1})
    config = GroupConfig.evaluate({SESSION: "20"}, defaults, bounds)
    assert (config.consumer_session_timeout_ms, config.consumer_heartbeat_interval_ms) == (20, 10)


def test_evaluate_caps_values_outside_the_broker_bounds():
    """GroupConfig.evaluate: a stored value outside this broker's bounds (narrowed since) is clamped."""
    defaults = ConsumerGroupSettings().default_of
    assert GroupConfig.evaluate({SESSION: "90000"}, defaults, BOUNDS).consumer_session_timeout_ms == 60000
    assert GroupConfig.evaluate({HEARTBEAT: "10"}, defaults, BOUNDS).consumer_heartbeat_interval_ms == 5000


def test_validate_with_all_group_type_configs():
    """GroupConfigTest.testValidateWithAllGroupTypeConfigs: a group without configs takes the daemon's
    group.consumer.session.timeout.ms, so raising the minimum with it leaves the empty set valid."""
    bounds = GroupBounds.of(
        {"group.consumer.min.session.timeout.ms": 46000, "group.consumer.session.timeout.ms": 46000}
    )
    assert group_config.validate({}, bounds) is None
    # a group config the group does not set is judged at the daemon's value, not at the config's default
    bounds = GroupBounds.of({"group.consumer.min.session.timeout.ms": 1000})
    assert group_config.validate({HEARTBEAT: "9000"}, bounds) is None
    low_session = GroupBounds.of(
        {"group.consumer.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 8000}
    )
    assert (
        group_config.validate({HEARTBEAT: "9000"}, low_session)
        == f"{SESSION} must be greater than {HEARTBEAT}"
    )


def test_assignment_interval_ms_not_validated_when_not_configured():
    """GroupConfigTest.testAssignmentIntervalMsNotValidatedWhenNotConfigured: bounds that exclude the
    config's default are not held against a group that does not set it."""
    bounds = GroupBounds.of(
        {"group.consumer.min.assignment.interval.ms": 2000, "group.streams.min.assignment.interval.ms": 2000}
    )
    assert group_config.validate({}, bounds) is None
    assert group_config.validate({"consumer.assignment.interval.ms": "1000"}, bounds) == (
        "consumer.assignment.interval.ms must be greater than or equal to group.consumer.min.assignment.interval.ms"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"max.heartbeat.interval.ms": 10, "min.heartbeat.interval.ms": 20, "heartbeat.interval.ms": 20},
            "group.consumer.max.heartbeat.interval.ms must be greater than or equal to "
            "group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {"max.heartbeat.interval.ms": 30, "min.heartbeat.interval.ms": 20, "heartbeat.interval.ms": 10},
            "group.consumer.heartbeat.interval.ms must be greater than or equal to "
            "group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {"max.heartbeat.interval.ms": 30, "min.heartbeat.interval.ms": 20, "heartbeat.interval.ms": 40},
            "group.consumer.heartbeat.interval.ms must be less than or equal to "
            "group.consumer.max.heartbeat.interval.ms",
        ),
        (
            {"max.session.timeout.ms": 10, "min.session.timeout.ms": 20, "session.timeout.ms": 20},
            "group.consumer.max.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ),
        (
            {"max.session.timeout.ms": 30, "min.session.timeout.ms": 20, "session.timeout.ms": 10},
            "group.consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ),
        (
            {"max.session.timeout.ms": 30, "min.session.timeout.ms": 20, "session.timeout.ms": 40},
            "group.consumer.session.timeout.ms must be less than or equal to "
            "group.consumer.max.session.timeout.ms",
        ),
        (
            {
                "min.heartbeat.interval.ms": 45000,
                "max.heartbeat.interval.ms": 60000,
                "heartbeat.interval.ms": 50000,
                "session.timeout.ms": 50000,
            },
            "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms",
        ),
    ],
)
def test_invalid_consumer_configs(settings, message):
    """GroupCoordinatorConfigTest.testInvalidConsumerConfigs: a daemon's own group.consumer.* properties
    that contradict each other stop it, with Kafka's message."""
    bounds = GroupBounds.of({f"group.consumer.{name}": value for name, value in settings.items()})
    with pytest.raises(ValueError) as refused:
        group_config.check_settings(bounds)
    assert str(refused.value) == message


def test_daemons_check_their_group_consumer_settings():
    """Brokers and controllers alike (Kafka's KafkaConfig builds GroupCoordinatorConfig for both)."""
    group_config.check_settings(group_config.bounds_of(BrokerSettings()))
    group_config.check_settings(group_config.bounds_of(ControllerSettings()))
    with pytest.raises(ValueError, match=r"must be greater than or equal to group\.consumer\.min\.session"):
        group_config.check_settings(
            group_config.bounds_of(BrokerSettings(group_consumer_session_timeout_ms=10_000))
        )
    with pytest.raises(ValueError, match=r"must be greater than or equal to group\.consumer\.min\.session"):
        group_config.check_settings(
            group_config.bounds_of(ControllerSettings(group_consumer_session_timeout_ms=10_000))
        )


def test_contradicting_group_consumer_settings_stop_either_daemon(tmp_path, capsys):
    """The daemons run the check at start-up (--check-config stops after it): a configuration error."""
    from epochkraft.server import broker_daemon, controller_daemon

    too_short = ["--override", "group.consumer.session.timeout.ms=10000"]
    message = "group.consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"
    controller = ["--node-id", "1", "--listen", "127.0.0.1:0", "--cluster-id", "c", "--check-config"]
    assert controller_daemon.main([*controller, "--data-dir", str(tmp_path / "c"), *too_short]) == 2
    assert message in capsys.readouterr().err
    broker = ["--node-id", "1", "--controller", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--check-config"]
    assert broker_daemon.main([*broker, "--data-dir", str(tmp_path / "b"), *too_short]) == 2
    assert message in capsys.readouterr().err


# ---- ConfigurationControlManagerTest: group resources ----------------------------------------------------
@pytest.fixture
def ctx() -> ControllerContext:
    ctx = ControllerContext(group_consumer_min_session_timeout_ms=1000)
    ctx.brokers_ready(0, 1, 2)
    return ctx


def group_records(ctx: ControllerContext) -> list[ConfigRecord]:
    return [
        r for _, r in ctx.controller.log.records() if isinstance(r, ConfigRecord) and r.resource_type == GROUP
    ]


def test_incremental_alter_group_configs_writes_group_config_records(ctx):
    result = ctx.incremental_alter_configs({(GROUP, "grp"): {SESSION: (SET, "10000")}})
    assert result == {(GROUP, "grp"): (ErrorCode.none, None)}
    assert group_records(ctx) == [
        ConfigRecord(resource_type=GROUP, resource_name="grp", name=SESSION, value="10000")
    ]
    assert ctx.controller.configuration.get(GROUP, "grp") == {SESSION: "10000"}
    restarted = Controller(CLUSTER_ID)
    restarted.load(ctx.controller.log.read(0, 1 << 30))
    assert restarted.configuration.get(GROUP, "grp") == {SESSION: "10000"}
    ctx.incremental_alter_configs({(GROUP, "grp"): {SESSION: (DELETE, None)}})
    assert ctx.controller.configuration.get(GROUP, "grp") == {}


@pytest.mark.parametrize(
    ("name", "ops", "error", "message"),
    [
        (
            "grp",
            {SESSION: (SET, "500")},
            ErrorCode.invalid_config,
            f"{SESSION} must be greater than or equal to group.consumer.min.session.timeout.ms",
        ),
        ("grp", {"foo": (SET, "1")}, ErrorCode.invalid_config, "Unknown group config name: foo"),
        (
            "grp",
            {SESSION: (SET, "5000")},
            ErrorCode.invalid_config,
            f"{SESSION} must be greater than {HEARTBEAT}",
        ),
        (
            "",
            {SESSION: (SET, "10000")},
            ErrorCode.invalid_request,
            "Default group resources are not allowed.",
        ),
    ],
)
def test_group_configs_refused_as_kafka_refuses_them(ctx, name, ops, error, message):
    """ControllerConfigurationValidator on GROUP resources: INVALID_CONFIG with GroupConfig's message,
    INVALID_REQUEST for the default (empty) group; nothing is written."""
    assert ctx.incremental_alter_configs({(GROUP, name): ops}) == {(GROUP, name): (error, message)}
    assert group_records(ctx) == []


def test_group_configs_are_validated_together_with_those_the_group_holds(ctx):
    """validateAlterConfig judges the group's whole config after the change: a heartbeat interval at or
    above the session timeout the group already holds is refused."""
    assert (
        ctx.incremental_alter_configs({(GROUP, "grp"): {SESSION: (SET, "8000")}})[(GROUP, "grp")][0]
        == ErrorCode.none
    )
    result = ctx.incremental_alter_configs({(GROUP, "grp"): {HEARTBEAT: (SET, "9000")}})
    assert result == {
        (GROUP, "grp"): (ErrorCode.invalid_config, f"{SESSION} must be greater than {HEARTBEAT}")
    }


def test_group_configs_are_validated_against_the_controllers_group_settings():
    """The controller fills in its own group.consumer.session.timeout.ms for a group without one
    (GroupConfig.validate over extractGroupConfigMap): a heartbeat interval above it is refused."""
    ctx = ControllerContext(
        group_consumer_min_session_timeout_ms=1000, group_consumer_session_timeout_ms=8000
    )
    ctx.brokers_ready(0, 1, 2)
    result = ctx.incremental_alter_configs({(GROUP, "grp"): {HEARTBEAT: (SET, "9000")}})
    assert result == {
        (GROUP, "grp"): (ErrorCode.invalid_config, f"{SESSION} must be greater than {HEARTBEAT}")
    }
    result = ctx.incremental_alter_configs({(GROUP, "grp"): {HEARTBEAT: (SET, "7000")}})
    assert result == {(GROUP, "grp"): (ErrorCode.none, None)}


def test_a_null_value_sent_to_the_controller_deletes_the_group_config(ctx):
    """ConfigurationControlManager: a SET without a value, or an AlterConfigs entry without one, is
    written as the config's deletion (its record has no value, validateAlterConfig drops it from the
    group's configs before GroupConfig.validate)."""
    ctx.incremental_alter_configs({(GROUP, "grp"): {SESSION: (SET, "8000"), HEARTBEAT: (SET, "6000")}})
    result = ctx.incremental_alter_configs({(GROUP, "grp"): {SESSION: (SET, None)}})
    assert result == {(GROUP, "grp"): (ErrorCode.none, None)}
    assert ctx.controller.configuration.get(GROUP, "grp") == {HEARTBEAT: "6000"}
    assert ctx.alter_configs(GROUP, "grp", {HEARTBEAT: None}) == (ErrorCode.none, None)
    assert ctx.controller.configuration.get(GROUP, "grp") == {}
    assert group_records(ctx)[-1] == ConfigRecord(
        resource_type=GROUP, resource_name="grp", name=HEARTBEAT, value=None
    )


# ---- ConfigAdminManagerTest: the broker refuses null values before forwarding ------------------------------
def incremental(
    *resources: tuple[str, tuple[tuple[str, int, str | None], ...]],
) -> ia.IncrementalAlterConfigsRequest:
    return ia.IncrementalAlterConfigsRequest(
        resources=tuple(
            ia.AlterConfigsResource(
                resource_type=GROUP,
                resource_name=name,
                configs=tuple(
                    ia.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in configs
                ),
            )
            for name, configs in resources
        ),
        validate_only=False,
    )


def test_preprocess_incremental_with_nulls():
    """ConfigAdminManagerTest.testPreprocessIncrementalWithNulls: a SET without a value is the broker's
    INVALID_REQUEST, named by its configs; a DELETE's value is not read; the rest go to the controller,
    and the answers come back in the request's order."""
    request = incremental(
        ("a", ((SESSION, SET, None), (HEARTBEAT, SET, None))),
        ("b", ((SESSION, DELETE, None),)),
        ("c", ((SESSION, SET, "50000"),)),
    )
    refusals, remaining = config_preprocess.preprocess(request)
    assert refusals == {0: f"Null value not supported for : {SESSION}, {HEARTBEAT}"}
    assert remaining is not None and [r.resource_name for r in remaining.resources] == ["b", "c"]
    from_controller = iar.IncrementalAlterConfigsResponse(
        throttle_time=datetime.timedelta(0),
        responses=tuple(
            iar.AlterConfigsResourceResponse(
                error_code=ErrorCode.none, error_message=None, resource_type=GROUP, resource_name=name
            )
            for name in ("b", "c")
        ),
    )
    response = config_preprocess.reassemble(request, refusals, from_controller)
    assert [(r.resource_name, r.error_code, r.error_message) for r in response.responses] == [
        ("a", ErrorCode.invalid_request, f"Null value not supported for : {SESSION}, {HEARTBEAT}"),
        ("b", ErrorCode.none, None),
        ("c", ErrorCode.none, None),
    ]


def test_preprocess_legacy_with_nulls():
    """ConfigAdminManagerTest.testPreprocessLegacyWithNulls: nothing is forwarded when every resource
    is refused."""
    request = ac2.AlterConfigsRequest(
        resources=(
            ac2.AlterConfigsResource(
                resource_type=GROUP,
                resource_name="a",
                configs=(ac2.AlterableConfig(name=SESSION, value=None),),
            ),
        ),
        validate_only=False,
    )
    refusals, remaining = config_preprocess.preprocess(request)
    assert remaining is None
    response = config_preprocess.reassemble(request, refusals, None)
    assert isinstance(response, acr.AlterConfigsResponse)
    assert [(r.error_code, r.error_message) for r in response.responses] == [
        (ErrorCode.invalid_request, f"Null value not supported for : {SESSION}")
    ]


# ---- GroupConfigManagerTest: the broker applies a group's configs ---------------------------------------
def cache_with(*records: ConfigRecord) -> MetadataCache:
    cache = MetadataCache(node_id=1)
    for offset, record in enumerate(records):
        cache.apply(offset, record, Changes())
    return cache


def coordinator(cache: MetadataCache) -> ConsumerGroupCoordinator:
    settings = ConsumerGroupSettings(bounds=GroupBounds.of({"group.consumer.min.session.timeout.ms": 6000}))
    return ConsumerGroupCoordinator(settings, group_configs=lambda g: cache.image.dynamic_config(GROUP, g))


def join(coordinator: ConsumerGroupCoordinator, group: str, topics: Topics):
    request = HeartbeatRequest(
        group, "m1", 0, rebalance_timeout_ms=30000, subscribed_topic_names=("foo",), owned={}
    )
    return coordinator.heartbeat(0, request, topics)


def test_get_non_existent_group_config():
    config = coordinator(cache_with()).group_config("unknown")
    assert (config.consumer_session_timeout_ms, config.consumer_heartbeat_interval_ms) == (45000, 5000)


def test_update_group_config():
    """A group's consumer.heartbeat.interval.ms is answered in ConsumerGroupHeartbeat and its
    consumer.session.timeout.ms fences a silent member; another group keeps the broker's."""
    cache = cache_with(
        ConfigRecord(resource_type=GROUP, resource_name="grp", name=SESSION, value="8000"),
        ConfigRecord(resource_type=GROUP, resource_name="grp", name=HEARTBEAT, value="7000"),
    )
    groups = coordinator(cache)
    topics = Topics()
    topics.create("foo", 2)
    assert join(groups, "grp", topics).heartbeat_interval_ms == 7000
    assert join(groups, "other", topics).heartbeat_interval_ms == 5000
    assert groups.tick(7999) == []
    assert groups.tick(8000) == [("grp", "m1")]
    assert groups.tick(45000) == [("other", "m1")]


# ---- DescribeConfigs on GROUP resources ------------------------------------------------------------------
def test_describe_group_configs_value_and_source():
    cache = cache_with(ConfigRecord(resource_type=GROUP, resource_name="grp", name=SESSION, value="50000"))
    describer = ConfigDescriber(1, BrokerSettings(group_consumer_heartbeat_interval_ms=6000), cache)
    result = describer.describe(int(GROUP), "grp", None, synonyms=True, documentation=False)
    assert result.error_code == ErrorCode.none
    entries = {e.name: e for e in result.configs}
    assert list(entries) == list(group_config.GROUP_CONFIGS)
    session, heartbeat = entries[SESSION], entries[HEARTBEAT]
    assert (session.value, session.config_source) == ("50000", ConfigSource.DYNAMIC_GROUP_CONFIG)
    assert [(s.name, s.value, s.source) for s in session.synonyms] == [
        (SESSION, "50000", ConfigSource.DYNAMIC_GROUP_CONFIG),
        (f"group.{SESSION}", "45000", ConfigSource.DEFAULT_CONFIG),
    ]
    assert (heartbeat.value, heartbeat.config_source) == ("6000", ConfigSource.STATIC_BROKER_CONFIG)
    empty = describer.describe(int(GROUP), "", None, synonyms=False, documentation=False)
    assert empty.error_code == ErrorCode.invalid_request


def test_preprocess_refuses_duplicates_before_nulls():
    """ConfigAdminManager.preprocess's order: every copy of a resource named twice is refused (so a copy
    with a null value cannot take its twin out of the request and let it through alone), then a resource
    naming a config twice, then the nulls."""
    request = incremental(
        ("g", ((SESSION, SET, "50000"),)),
        ("g", ((HEARTBEAT, SET, None),)),
        ("h", ((SESSION, SET, "50000"), (SESSION, SET, None))),
        ("i", ((SESSION, SET, None),)),
    )
    refusals, remaining = config_preprocess.preprocess(request)
    assert refusals == {
        0: "Each resource must appear at most once.",
        1: "Each resource must appear at most once.",
        2: "Error due to duplicate config keys",
        3: f"Null value not supported for : {SESSION}",
    }
    assert remaining is None
