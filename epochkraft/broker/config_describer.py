"""DescribeConfigs on the broker: topic and broker configs with value, source, type and synonyms.

As Kafka's ConfigHelper.describeConfigs: a topic config's value is the first of its synonyms in precedence
order (the topic's own dynamic value, then for each broker synonym this broker's dynamic value, the
cluster-wide dynamic default, this broker's static setting, the default), and its source is that
synonym's. A broker resource named by this broker's id lists every broker setting (read-only unless it
may be set dynamically); the empty name lists the cluster-wide dynamic defaults.

The synonyms listed (include_synonyms) are those that hold a value, as Kafka lists them: a broker property
Kafka defines without a default (log.retention.ms, log.roll.ms...) appears only when set, and so do the
other-unit ones after it (log.retention.hours), and a topic config without broker synonyms has none.
"""

from __future__ import annotations

import typing
from typing import NamedTuple

from kio.schema.describe_configs.v4 import response as dc
from kio.static.primitive import i8

from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.broker.settings import BrokerSettings
from epochkraft.config import property_fields
from epochkraft.metadata.config_schema import (
    DYNAMIC_BROKER_CONFIGS,
    INT_MAX,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigSource,
    ConfigType,
    ResourceType,
    broker_config_type,
)
from epochkraft.metadata.group_config import GROUP_CONFIGS
from epochkraft.metadata.image import MetadataImage
from epochkraft.metadata.topic_names import valid_topic_name
from epochkraft.protocol.errors import ErrorCode


class StaticSetting(NamedTuple):
    value: str | None
    default: str | None
    explicitly_set: bool  # differs from the default (so it came from the properties file)
    type: ConfigType
    doc: str


class Synonym(NamedTuple):
    name: str
    value: str | None
    source: ConfigSource


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _setting_type(hint: object, default: object) -> ConfigType:
    if hint is bool:
        return ConfigType.BOOLEAN
    if hint is str:
        return ConfigType.STRING
    if hint is int and isinstance(default, int) and abs(default) <= INT_MAX:
        return ConfigType.INT
    return ConfigType.LONG


# Broker properties Kafka defines with a null default: listed as synonyms only when set.
NO_KAFKA_DEFAULT = frozenset(
    {
        "log.retention.ms",
        "log.retention.minutes",
        "log.roll.ms",
        "log.roll.jitter.ms",
        "log.flush.interval.ms",
    }
)
# Kafka's defaults of the other-unit synonyms, in their own unit (ServerLogConfigs).
UNIT_DEFAULTS = {"log.retention.hours": "168", "log.roll.hours": "168", "log.roll.jitter.hours": "0"}


class ConfigDescriber:
    def __init__(self, node_id: int, settings: BrokerSettings, cache: MetadataCache) -> None:
        self.node_id = node_id
        self.cache = cache
        hints = typing.get_type_hints(BrokerSettings)
        self.static: dict[str, StaticSetting] = {}
        for name, f in property_fields(BrokerSettings).items():
            value = getattr(settings, f.name)
            self.static[name] = StaticSetting(
                _text(value),
                _text(f.default),
                value != f.default,
                _setting_type(hints[f.name], f.default),
                f.metadata.get("doc", ""),
            )

    # ---- synonyms -------------------------------------------------------------------------------------
    def _broker_synonyms(self, image: MetadataImage, name: str, default: str | None) -> list[Synonym]:
        """A broker property's values in precedence order (Kafka's DynamicBrokerConfig synonyms)."""
        found = []
        own = image.dynamic_config(ResourceType.BROKER, str(self.node_id)).get(name)
        if own is not None:
            found.append(Synonym(name, own, ConfigSource.DYNAMIC_BROKER_CONFIG))
        cluster = image.dynamic_config(ResourceType.BROKER, "").get(name)
        if cluster is not None:
            found.append(Synonym(name, cluster, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        static = self.static.get(name)
        if static is not None and static.explicitly_set:
            found.append(Synonym(name, static.value, ConfigSource.STATIC_BROKER_CONFIG))
        if default is not None:
            found.append(Synonym(name, default, ConfigSource.DEFAULT_CONFIG))
        return found

    def topic_entry(self, image: MetadataImage, topic: str, definition: ConfigDef) -> list[Synonym]:
        found = []
        own = image.dynamic_config(ResourceType.TOPIC, topic).get(definition.name)
        if own is not None:
            found.append(Synonym(definition.name, own, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for index, broker_name in enumerate(definition.synonyms):
            # The default is named after the first broker synonym (the others are other units of it);
            # our broker's own default of that property where it has one, else Kafka's.
            default = None
            if index == 0:
                static = self.static.get(broker_name)
                default = static.default if static is not None else None
                if default is None:
                    default = definition.default
            found += self._broker_synonyms(image, broker_name, default)
        if not definition.synonyms:
            found.append(Synonym(definition.name, definition.default, ConfigSource.DEFAULT_CONFIG))
        return found

    def group_entry(self, image: MetadataImage, group: str, definition: ConfigDef) -> list[Synonym]:
        """A group config's values in precedence order (ConfigHelper.createGroupConfigEntry): the group's
        own, then its broker synonym as set statically, then the broker's default (Kafka's where the
        broker has no such setting)."""
        found = []
        own = image.dynamic_config(ResourceType.GROUP, group).get(definition.name)
        if own is not None:
            found.append(Synonym(definition.name, own, ConfigSource.DYNAMIC_GROUP_CONFIG))
        broker_name = definition.synonyms[0]
        static = self.static.get(broker_name)
        if static is not None and static.explicitly_set:
            found.append(Synonym(broker_name, static.value, ConfigSource.STATIC_BROKER_CONFIG))
        default = static.default if static is not None else definition.default
        found.append(Synonym(broker_name, default, ConfigSource.DEFAULT_CONFIG))
        return found

    def shown_synonyms(self, image: MetadataImage, topic: str, definition: ConfigDef) -> list[Synonym]:
        """The synonyms a topic config lists, as Kafka's ConfigHelper.configSynonyms: those with a value,
        by source (dynamic broker, dynamic default, static, default) and within one source by precedence,
        then dropped up to the first one named as the primary broker synonym."""
        shown = []
        own = image.dynamic_config(ResourceType.TOPIC, topic).get(definition.name)
        if own is not None:
            shown.append(Synonym(definition.name, own, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        names = definition.synonyms
        if not names:
            return shown
        dynamic = image.dynamic_config(ResourceType.BROKER, str(self.node_id))
        cluster = image.dynamic_config(ResourceType.BROKER, "")

        def static(name: str) -> str | None:
            setting = self.static.get(name)
            return setting.value if setting is not None and setting.explicitly_set else None

        def default(name: str) -> str | None:
            if name in NO_KAFKA_DEFAULT:
                return None
            if name in UNIT_DEFAULTS:
                return UNIT_DEFAULTS[name]
            setting = self.static.get(name)
            if setting is not None and setting.default is not None:
                return setting.default
            return definition.default if name == names[0] else None

        found = [
            Synonym(name, value, source)
            for source, lookup in (
                (ConfigSource.DYNAMIC_BROKER_CONFIG, dynamic.get),
                (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, cluster.get),
                (ConfigSource.STATIC_BROKER_CONFIG, static),
                (ConfigSource.DEFAULT_CONFIG, default),
            )
            for name in names
            if (value := lookup(name)) is not None
        ]
        while found and found[0].name != names[0]:
            found.pop(0)
        return shown + found

    # ---- resources -------------------------------------------------------------------------------------
    def describe(
        self, resource_type: int, name: str, keys: tuple[str, ...] | None, synonyms: bool, documentation: bool
    ) -> dc.DescribeConfigsResult:
        def result(error: ErrorCode, message: str | None, configs: tuple = ()) -> dc.DescribeConfigsResult:
            return dc.DescribeConfigsResult(
                error_code=error,
                error_message=message,
                resource_type=i8(resource_type),
                resource_name=name,
                configs=configs,
            )

        def wanted(key: str) -> bool:
            return not keys or key in keys  # null or empty: every config (Kafka's ConfigHelper)

        image = self.cache.image  # one image describes the resource
        entries = []
        if resource_type == ResourceType.TOPIC:
            if (why := valid_topic_name(name)) is not None:
                return result(ErrorCode.invalid_topic_exception, why)
            if image.topic(name) is None:
                return result(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
            for definition in TOPIC_CONFIGS.values():
                if wanted(definition.name):
                    found = self.topic_entry(image, name, definition)
                    entries.append(
                        self._entry(
                            definition.name,
                            found,
                            False,
                            definition.type,
                            definition.doc,
                            synonyms,
                            documentation,
                            shown=self.shown_synonyms(image, name, definition),
                        )
                    )
        elif resource_type == ResourceType.BROKER and name == "":
            for key, value in sorted(image.dynamic_config(ResourceType.BROKER, "").items()):
                if wanted(key):
                    dynamic = DYNAMIC_BROKER_CONFIGS.get(key)
                    found = [Synonym(key, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
                    # a name Kafka does not know has no type, and is shown as sensitive, as Kafka's
                    kind = broker_config_type(key) or ConfigType.UNKNOWN
                    doc = dynamic.doc if dynamic else ""
                    entries.append(self._entry(key, found, False, kind, doc, synonyms, documentation))
        elif resource_type == ResourceType.BROKER and name == str(self.node_id):
            names = sorted(set(self.static) | set(DYNAMIC_BROKER_CONFIGS))
            entries += [
                self._broker_entry(image, key, synonyms, documentation) for key in names if wanted(key)
            ]
        elif resource_type == ResourceType.BROKER:
            message = f"Unexpected broker id, expected {self.node_id} or empty string, but received {name}"
            return result(ErrorCode.invalid_request, message)
        elif resource_type == ResourceType.GROUP:
            if not name:
                return result(ErrorCode.invalid_request, "Group name must not be empty")
            for definition in GROUP_CONFIGS.values():
                if wanted(definition.name):
                    found = self.group_entry(image, name, definition)
                    kind, doc = definition.type, definition.doc
                    entries.append(
                        self._entry(definition.name, found, False, kind, doc, synonyms, documentation)
                    )
        else:
            return result(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")
        return result(ErrorCode.none, None, tuple(entries))

    def _broker_entry(
        self, image: MetadataImage, key: str, synonyms: bool, documentation: bool
    ) -> dc.DescribeConfigsResourceResult:
        """One of this broker's own configs: ``key`` is a static setting, a dynamic config, or both."""
        dynamic = DYNAMIC_BROKER_CONFIGS.get(key)
        static = self.static.get(key)
        if static is not None:
            default, static_kind, doc = static.default, static.type, static.doc
        else:
            assert dynamic is not None, key  # the names described are the static and the dynamic ones
            default, static_kind, doc = dynamic.default, dynamic.type, dynamic.doc
        found = self._broker_synonyms(image, key, default)
        # Kafka's type first, so that a password our settings hold as text is never shown
        kind = broker_config_type(key) or static_kind
        return self._entry(key, found, dynamic is None, kind, doc, synonyms, documentation)

    @staticmethod
    def _entry(
        name: str,
        found: list[Synonym],
        read_only: bool,
        kind: ConfigType,
        doc: str,
        synonyms: bool,
        documentation: bool,
        shown: list[Synonym] | None = None,
    ) -> dc.DescribeConfigsResourceResult:
        """``found``: every value in precedence order (the first is the config's); ``shown``: the synonyms
        listed, where they differ from ``found``. A password's value, or one of no known type, is never
        shown (Kafka's ConfigHelper: null and is_sensitive)."""
        first = found[0] if found else Synonym(name, None, ConfigSource.DEFAULT_CONFIG)
        sensitive = kind in (ConfigType.PASSWORD, ConfigType.UNKNOWN)  # KafkaConfig.maybeSensitive
        return dc.DescribeConfigsResourceResult(
            name=name,
            value=None if sensitive else first.value,
            read_only=read_only,
            config_source=i8(int(first.source)),
            is_sensitive=sensitive,
            synonyms=tuple(
                dc.DescribeConfigsSynonym(
                    name=s.name, value=None if sensitive else s.value, source=i8(int(s.source))
                )
                for s in (found if shown is None else shown)
            )
            if synonyms
            else (),
            config_type=i8(int(kind)),
            documentation=doc if documentation else None,
        )
