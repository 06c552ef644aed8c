"""Dynamic configs of topics and brokers, as Kafka's ConfigurationControlManager.

Alterations are decided into ConfigRecords (validated against Kafka's config schema, INVALID_CONFIG with
Kafka's message) and state changes only when those records are replayed. A topic's effective value of a
config comes from the topic, else this controller's per-broker dynamic value, else the cluster-wide
dynamic default (the broker resource with the empty name), else the static setting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from epochkraft.metadata import group_config
from epochkraft.metadata.config_schema import (
    MIN_INSYNC,
    UNCLEAN,
    ResourceType,
    default_of,
    is_list,
    validate,
)
from epochkraft.metadata.image import MetadataDelta, MetadataImage
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ConfigRecord

CLUSTER_DEFAULT = ""  # the broker resource name of cluster-wide dynamic defaults


class OpType(IntEnum):
    """IncrementalAlterConfigs' config_operation (AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ApiError:
    error: ErrorCode = ErrorCode.none
    message: str | None = None


NONE = ApiError()
Resource = tuple[int, str]


class ConfigurationControl:
    def __init__(
        self,
        static: dict[str, str],
        node_id: int,
        topic_exists: Callable[[str], bool],
        image: MetadataImage | None = None,
        group_bounds: group_config.GroupBounds | None = None,
    ) -> None:
        self.image = image if image is not None else MetadataImage(node_id)
        self._replayer = MetadataDelta(self.image, in_place=True)
        self.configs: dict[Resource, dict[str, str]] = self.image.configs
        self.static = static  # this controller's static settings by Kafka property name
        self.node_id = node_id
        self.topic_exists = topic_exists
        self.group_bounds = group_bounds or group_config.GroupBounds.of()

    # ---- queries ------------------------------------------------------------------------------------
    def get(self, resource_type: ResourceType, name: str) -> dict[str, str]:
        return self.configs.get((resource_type, name), {})

    def effective(self, topic: str, key: str) -> str | None:
        for resource in (
            (ResourceType.TOPIC, topic),
            (ResourceType.BROKER, str(self.node_id)),
            (ResourceType.BROKER, CLUSTER_DEFAULT),
        ):
            value = self.configs.get(resource, {}).get(key)
            if value is not None:
                return value
        return self.static.get(key, default_of(ResourceType.TOPIC, key))

    def min_insync(self, topic: str) -> int:
        return int(self.effective(topic, MIN_INSYNC) or 1)

    def unclean_leader_election_enabled_for_topic(self, topic: str) -> bool:
        return (self.effective(topic, UNCLEAN) or "false").lower() == "true"

    # ---- decisions ----------------------------------------------------------------------------------
    def elr_safety_records(self) -> list[ConfigRecord]:
        """Kafka's ConfigurationControlManager.maybeGenerateElrSafetyRecords, written when ELR turns on:
        the cluster-level min.insync.replicas, this controller's static value, unless one is set, so every
        controller judges ELR by the same min ISR; and the removal of every broker-level value, since a
        broker reads its own (topic -> its id -> cluster) to freeze its high watermark and a broker-level
        value the controller does not read would let a leader commit below the min ISR the ELR assumes."""
        records = []
        if MIN_INSYNC not in self.get(ResourceType.BROKER, CLUSTER_DEFAULT):
            value = self.static.get(MIN_INSYNC, default_of(ResourceType.TOPIC, MIN_INSYNC) or "1")
            records.append(self._record((ResourceType.BROKER, CLUSTER_DEFAULT), MIN_INSYNC, value))
        for (resource_type, name), configs in sorted(self.configs.items()):
            if resource_type == ResourceType.BROKER and name != CLUSTER_DEFAULT and MIN_INSYNC in configs:
                records.append(self._record((ResourceType.BROKER, name), MIN_INSYNC, None))
        return records

    def elr_refusal(self, records: list[ConfigRecord]) -> ApiError:
        """While ELR is on, a broker-level min.insync.replicas may not be written at all and the
        cluster-level one may change but not be removed (Kafka's isDisallowedBrokerMinIsrTransition and
        isDisallowedClusterMinIsrTransition)."""
        if not self.image.elr_enabled:
            return NONE
        for record in records:
            if record.resource_type != ResourceType.BROKER or record.name != MIN_INSYNC:
                continue
            if record.resource_name != CLUSTER_DEFAULT:
                message = f"Broker-level {MIN_INSYNC} cannot be altered while ELR is enabled."
                return ApiError(ErrorCode.invalid_config, message)
            if record.value is None:
                message = f"Cluster-level {MIN_INSYNC} cannot be removed while ELR is enabled."
                return ApiError(ErrorCode.invalid_config, message)
        return NONE

    def check_resource(self, resource: Resource, newly_created: bool = False) -> ApiError:
        """The resource must exist and be alterable (Kafka's ControllerConfigurationValidator)."""
        resource_type, name = resource
        if resource_type == ResourceType.TOPIC:
            if not name:
                return ApiError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
            if not newly_created and not self.topic_exists(name):
                return ApiError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist.")
            return NONE
        if resource_type == ResourceType.BROKER:
            if name and not (name.isascii() and name.isdigit()):
                return ApiError(ErrorCode.invalid_request, "Unable to parse broker name as a base 10 number.")
            return NONE
        if resource_type == ResourceType.GROUP:
            if not name:
                return ApiError(ErrorCode.invalid_request, "Default group resources are not allowed.")
            return NONE  # a group need not exist to hold configs
        return ApiError(ErrorCode.invalid_request, f"Unsupported resource type {int(resource_type)}.")

    def decide_incremental_alter(
        self,
        resource: Resource,
        operations: list[tuple[str, OpType, str | None]],
        newly_created: bool = False,
    ) -> tuple[ApiError, list[ConfigRecord]]:
        """(result, records) for one resource's (name, op, value) operations; atomic per resource."""
        error = self.check_resource(resource, newly_created)
        if error.error != ErrorCode.none:
            return error, []
        resource_type, name = ResourceType(resource[0]), resource[1]  # a known type: check_resource passed
        current = dict(self.get(resource_type, name))
        records: list[ConfigRecord] = []
        seen: set[str] = set()
        for key, op, value in operations:
            if key in seen:
                return ApiError(ErrorCode.invalid_request, f"Duplicate config key {key}."), []
            seen.add(key)
            old = current.get(key)
            if op == OpType.SET:
                new = value
            elif op == OpType.DELETE:
                new = None
            elif op in (OpType.APPEND, OpType.SUBTRACT):
                if value is None:  # a broker refuses it before forwarding; Kafka's controller fails on it
                    return ApiError(ErrorCode.invalid_request, f"Null value not supported for : {key}"), []
                if not is_list(resource_type, key):
                    return ApiError(
                        ErrorCode.invalid_config,
                        f"Can't {op.name} to key {key} because its type is not LIST.",
                    ), []
                parts = [
                    p
                    for p in (old if old is not None else default_of(resource_type, key) or "").split(",")
                    if p
                ]
                for item in value.split(","):
                    if op == OpType.APPEND and item not in parts:
                        parts.append(item)
                    elif op == OpType.SUBTRACT and item in parts:
                        parts.remove(item)
                new = ",".join(parts)
            else:
                return ApiError(ErrorCode.invalid_request, f"Unknown operation {op}."), []
            if new is not None and (why := self._validate(resource_type, name, key, new)) is not None:
                return ApiError(_refusal(resource_type), why), []
            if new != old or resource_type == ResourceType.BROKER:
                # Broker configs are written even when unchanged, so brokers reload them (KAFKA-14136).
                records.append(self._record(resource, key, new))
        if (refusal := self.group_refusal(resource, records)).error != ErrorCode.none:
            return refusal, []
        if (refusal := self.elr_refusal(records)).error != ErrorCode.none:
            return refusal, []
        return NONE, records

    def decide_legacy_alter(
        self, resource: Resource, new_configs: dict[str, str | None], newly_created: bool = False
    ) -> tuple[ApiError, list[ConfigRecord]]:
        """AlterConfigs: the given configs replace all of the resource's dynamic configs."""
        error = self.check_resource(resource, newly_created)
        if error.error != ErrorCode.none:
            return error, []
        resource_type, name = ResourceType(resource[0]), resource[1]  # a known type: check_resource passed
        current = self.get(resource_type, name)
        records: list[ConfigRecord] = []
        for key, value in new_configs.items():
            if value is not None and (why := self._validate(resource_type, name, key, value)) is not None:
                return ApiError(_refusal(resource_type), why), []
            if current.get(key) != value or resource_type == ResourceType.BROKER:
                records.append(self._record(resource, key, value))
        records += [self._record(resource, key, None) for key in current if key not in new_configs]
        if (refusal := self.group_refusal(resource, records)).error != ErrorCode.none:
            return refusal, []
        if (refusal := self.elr_refusal(records)).error != ErrorCode.none:
            return refusal, []
        return NONE, records

    def group_refusal(self, resource: Resource, records: list[ConfigRecord]) -> ApiError:
        """A group's configs are judged together, as they would stand after the records (Kafka's
        ConfigurationControlManager.validateAlterConfig with GroupConfig.validate)."""
        if resource[0] != ResourceType.GROUP:
            return NONE
        after = dict(self.get(ResourceType.GROUP, resource[1]))
        for record in records:
            if record.value is None:
                after.pop(record.name, None)
            else:
                after[record.name] = record.value
        if (why := group_config.validate(after, self.group_bounds)) is not None:
            return ApiError(ErrorCode.invalid_config, why)
        return NONE

    @staticmethod
    def _validate(resource_type: ResourceType, resource_name: str, key: str, value: str) -> str | None:
        """A value that is set (a null value is the config's deletion, as Kafka's controller takes a
        SET or an AlterConfigs entry without one; a broker refuses those before forwarding)."""
        if resource_type == ResourceType.GROUP:
            return None  # judged with the group's other configs (group_refusal)
        return validate(resource_type, key, value, resource_name)

    @staticmethod
    def _record(resource: Resource, key: str, value: str | None) -> ConfigRecord:
        return ConfigRecord(resource_type=int(resource[0]), resource_name=resource[1], name=key, value=value)

    # ---- replay -------------------------------------------------------------------------------------
    def replay(self, record: ConfigRecord) -> None:
        self._replayer.replay(record)


def _refusal(resource_type: ResourceType) -> ErrorCode:
    """A refused topic config is INVALID_CONFIG; a refused broker config INVALID_REQUEST, as Kafka's broker
    answers once DynamicBrokerConfig.validate throws (ConfigAdminManager.validateBrokerConfigChange)."""
    return ErrorCode.invalid_request if resource_type == ResourceType.BROKER else ErrorCode.invalid_config
