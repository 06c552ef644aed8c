"""Group configs (resource type GROUP, KIP-848): their definitions, validation and effective values.

As Kafka 4.3's GroupConfig: the consumer.* and streams.* group configs, each with its type, default and
broker synonym (the ``group.*`` property supplying its value when the group has none). ``validate`` is
GroupConfig.validate, run by the controller on a group's configs as they would stand after an alteration
(Kafka's ControllerConfigurationValidator), merged over the controller's own ``group.*`` values: unknown
names, unparsable values, values outside the controller's ``group.consumer.min/max.*`` bounds (an
assignment interval only when the group sets one) and a session timeout not above the heartbeat interval
are refused, with Kafka's messages. ``evaluate`` is GroupConfig.evaluate on the broker: a stored value
outside this broker's bounds is clamped into them. ``check_settings`` is GroupCoordinatorConfig's checks
of a daemon's own ``group.consumer.*`` properties at start-up. The share.* configs are not served (no
share groups here): they are refused as unknown names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from epochkraft.config import property_fields
from epochkraft.metadata.config_schema import INT, ConfigDef, at_least

CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
CONSUMER_ASSIGNMENT_INTERVAL = "consumer.assignment.interval.ms"
STREAMS_SESSION_TIMEOUT = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL = "streams.heartbeat.interval.ms"
STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"
STREAMS_INITIAL_REBALANCE_DELAY = "streams.initial.rebalance.delay.ms"
STREAMS_ASSIGNMENT_INTERVAL = "streams.assignment.interval.ms"


def _group_def(name: str, default: int, minimum: int, doc: str) -> ConfigDef:
    return ConfigDef(name, INT, str(default), doc, at_least(minimum), (f"group.{name}",))


# In Kafka's order (GroupConfig.CONFIG_DEF), which DescribeConfigs follows.
GROUP_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        _group_def(
            CONSUMER_SESSION_TIMEOUT,
            45000,
            1,
            "The timeout to detect client failures when using the consumer group protocol.",
        ),
        _group_def(
            CONSUMER_HEARTBEAT_INTERVAL,
            5000,
            1,
            "The heartbeat interval given to the members of a consumer group.",
        ),
        _group_def(
            CONSUMER_ASSIGNMENT_INTERVAL,
            1000,
            0,
            "The minimum interval between assignments of a consumer group.",
        ),
        _group_def(
            STREAMS_SESSION_TIMEOUT,
            45000,
            1,
            "The timeout to detect client failures when using the streams group protocol.",
        ),
        _group_def(
            STREAMS_HEARTBEAT_INTERVAL,
            5000,
            1,
            "The heartbeat interval given to the members of a streams group.",
        ),
        _group_def(STREAMS_NUM_STANDBY_REPLICAS, 0, 0, "The number of standby replicas for each task."),
        _group_def(
            STREAMS_INITIAL_REBALANCE_DELAY,
            3000,
            0,
            "The delay before the first rebalance of a streams group.",
        ),
        _group_def(
            STREAMS_ASSIGNMENT_INTERVAL,
            1000,
            0,
            "The minimum interval between assignments of a streams group.",
        ),
    )
}
UNBOUNDED = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupBounds:
    """A daemon's ``group.*`` properties behind group configs (GroupCoordinatorConfig), with Kafka's
    defaults: the bounds (each bounded group config has (min property, max property); a missing min is
    0) and the values a group without its own takes (``group.<config>``)."""

    values: Mapping[str, int]

    # config -> (min property or None, max property)
    PROPERTIES = {
        CONSUMER_HEARTBEAT_INTERVAL: (
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        ),
        CONSUMER_SESSION_TIMEOUT: (
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        ),
        CONSUMER_ASSIGNMENT_INTERVAL: (
            "group.consumer.min.assignment.interval.ms",
            "group.consumer.max.assignment.interval.ms",
        ),
        STREAMS_HEARTBEAT_INTERVAL: (
            "group.streams.min.heartbeat.interval.ms",
            "group.streams.max.heartbeat.interval.ms",
        ),
        STREAMS_SESSION_TIMEOUT: (
            "group.streams.min.session.timeout.ms",
            "group.streams.max.session.timeout.ms",
        ),
        STREAMS_NUM_STANDBY_REPLICAS: (None, "group.streams.max.standby.replicas"),
        STREAMS_ASSIGNMENT_INTERVAL: (
            "group.streams.min.assignment.interval.ms",
            "group.streams.max.assignment.interval.ms",
        ),
    }
    DEFAULTS = {
        "group.consumer.session.timeout.ms": 45000,
        "group.consumer.heartbeat.interval.ms": 5000,
        "group.streams.session.timeout.ms": 45000,
        "group.streams.heartbeat.interval.ms": 5000,
        "group.streams.num.standby.replicas": 0,
        "group.streams.initial.rebalance.delay.ms": 3000,
        "group.consumer.min.heartbeat.interval.ms": 5000,
        "group.consumer.max.heartbeat.interval.ms": 15000,
        "group.consumer.min.session.timeout.ms": 45000,
        "group.consumer.max.session.timeout.ms": 60000,
        "group.consumer.min.assignment.interval.ms": 0,
        "group.consumer.max.assignment.interval.ms": 15000,
        "group.streams.min.heartbeat.interval.ms": 5000,
        "group.streams.max.heartbeat.interval.ms": 15000,
        "group.streams.min.session.timeout.ms": 45000,
        "group.streams.max.session.timeout.ms": 60000,
        "group.streams.max.standby.replicas": 2,
        "group.streams.min.assignment.interval.ms": 0,
        "group.streams.max.assignment.interval.ms": 15000,
    }

    @classmethod
    def of(cls, overrides: Mapping[str, int] | None = None) -> GroupBounds:
        return cls({**cls.DEFAULTS, **(overrides or {})})

    def range_of(self, config: str) -> tuple[str | None, int, str, int] | None:
        """(min property, min, max property, max) of a bounded config; None if it has no bounds."""
        names = self.PROPERTIES.get(config)
        if names is None:
            return None
        low, high = names
        return low, self.values[low] if low else 0, high, self.values[high]


def bounds_of(settings: object) -> GroupBounds:
    """The bounds a daemon's settings set (its ``group.*.min/max.*`` properties), Kafka's elsewhere."""
    fields = property_fields(type(settings))
    return GroupBounds.of(
        {name: getattr(settings, f.name) for name, f in fields.items() if name in GroupBounds.DEFAULTS}
    )


# The group configs GroupCoordinatorConfig.extractGroupConfigMap fills in from the daemon's group.*
# properties before validating (not the assignment intervals: those are judged only when set).
WITH_DAEMON_DEFAULTS = (
    CONSUMER_SESSION_TIMEOUT,
    CONSUMER_HEARTBEAT_INTERVAL,
    STREAMS_SESSION_TIMEOUT,
    STREAMS_HEARTBEAT_INTERVAL,
    STREAMS_NUM_STANDBY_REPLICAS,
    STREAMS_INITIAL_REBALANCE_DELAY,
)
JUDGED_ONLY_WHEN_SET = (CONSUMER_ASSIGNMENT_INTERVAL, STREAMS_ASSIGNMENT_INTERVAL)


def validate(configs: Mapping[str, str], bounds: GroupBounds) -> str | None:
    """None if a group may hold ``configs`` (its whole set after the alteration), else Kafka's message
    (GroupConfig.validate: the configs merged over the daemon's ``group.*`` values; names, then parsing,
    then the bounds in Kafka's order, an assignment interval only when set, then session above
    heartbeat)."""
    combined = {name: str(bounds.values[f"group.{name}"]) for name in WITH_DAEMON_DEFAULTS}
    combined.update(configs)
    for name in combined:
        if name not in GROUP_CONFIGS:
            return f"Unknown group config name: {name}"
    parsed: dict[str, int] = {}
    for name, definition in GROUP_CONFIGS.items():
        value, why = definition.parse(combined.get(name, definition.default))
        if why is not None:
            return why
        parsed[name] = value  # type: ignore[assignment]
    for name in GroupBounds.PROPERTIES:
        if name in JUDGED_ONLY_WHEN_SET and name not in combined:
            continue
        low_name, low, high_name, high = bounds.range_of(name)  # type: ignore[misc]
        if low_name is not None and parsed[name] < low:
            return f"{name} must be greater than or equal to {low_name}"
        if parsed[name] > high:
            return f"{name} must be less than or equal to {high_name}"
    for session, heartbeat in (
        (CONSUMER_SESSION_TIMEOUT, CONSUMER_HEARTBEAT_INTERVAL),
        (STREAMS_SESSION_TIMEOUT, STREAMS_HEARTBEAT_INTERVAL),
    ):
        if parsed[session] <= parsed[heartbeat]:
            return f"{session} must be greater than {heartbeat}"
    return None


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One group's effective consumer-protocol configs (GroupConfig.fromProps after evaluate)."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    consumer_assignment_interval_ms: int

    @classmethod
    def evaluate(
        cls, overrides: Mapping[str, str], broker_default: Callable[[str], int], bounds: GroupBounds
    ) -> GroupConfig:
        """The group's own values clamped into this broker's bounds (Kafka's GroupConfig.evaluate: the
        bounds may have been narrowed since the value was stored), else the broker's ``group.*``
        setting. Kafka only warns when clamping leaves the session at or below the heartbeat
        (checkSessionExceedsHeartbeat), and so do we: nothing is changed."""

        def value(name: str) -> int:
            text = overrides.get(name)
            if text is None:
                return broker_default(name)
            parsed = int(text)
            _, low, _, high = bounds.range_of(name)  # type: ignore[misc]
            return min(max(parsed, low), high)

        return cls(
            value(CONSUMER_SESSION_TIMEOUT),
            value(CONSUMER_HEARTBEAT_INTERVAL),
            value(CONSUMER_ASSIGNMENT_INTERVAL),
        )


def check_settings(bounds: GroupBounds) -> None:
    """A daemon whose ``group.consumer.*`` session and heartbeat properties contradict each other does not
    start: ValueError with the message of the first of GroupCoordinatorConfig's checks that fails, in its
    order (Kafka builds that config on brokers and controllers alike)."""
    v = bounds.values
    heartbeat, session = f"group.{CONSUMER_HEARTBEAT_INTERVAL}", f"group.{CONSUMER_SESSION_TIMEOUT}"
    min_heartbeat, max_heartbeat = GroupBounds.PROPERTIES[CONSUMER_HEARTBEAT_INTERVAL]
    min_session, max_session = GroupBounds.PROPERTIES[CONSUMER_SESSION_TIMEOUT]
    assert min_heartbeat is not None and min_session is not None
    at_least, at_most = "must be greater than or equal to", "must be less than or equal to"
    checks = (
        (v[max_heartbeat] >= v[min_heartbeat], f"{max_heartbeat} {at_least} {min_heartbeat}"),
        (v[heartbeat] >= v[min_heartbeat], f"{heartbeat} {at_least} {min_heartbeat}"),
        (v[heartbeat] <= v[max_heartbeat], f"{heartbeat} {at_most} {max_heartbeat}"),
        (v[max_session] >= v[min_session], f"{max_session} {at_least} {min_session}"),
        (v[session] >= v[min_session], f"{session} {at_least} {min_session}"),
        (v[session] <= v[max_session], f"{session} {at_most} {max_session}"),
        (v[heartbeat] < v[session], f"{heartbeat} must be less than {session}"),
    )
    for holds, message in checks:
        if not holds:
            raise ValueError(message)
