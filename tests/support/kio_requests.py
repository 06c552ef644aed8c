"""Requests for any API key and version built from kio's schemas with realistic values.

A field's value comes from the Scenario by the field's name (the topic, partition, offset, group or broker
a test means), and from its Kafka type otherwise, so an API added to the registry is covered without a
builder of its own. Arrays hold one entry, except those whose entries would change what the request
asks (manual assignments, forgotten topics...), which are empty. Requests never change the cluster
beyond what a sweep expects: topic creation and config changes are validate-only, Metadata does not
auto-create, and the broker a controller-listener request names is the scenario's (a spare id).
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any

from epochkraft.protocol.framing import request_class

MS = datetime.timedelta(milliseconds=1)


@dataclass(frozen=True)
class Scenario:
    """What the request is about. ``label`` names the case in test ids."""

    label: str
    topic: str
    topic_id: uuid.UUID | None = None
    partition: int = 0
    offset: int = 0
    group: str = "sweep-group"
    member: str = ""
    broker_id: int = 1
    cluster_id: str | None = None
    records: bytes = b""
    overrides: dict[str, Any] = field(default_factory=dict)  # field name -> value, wins over the rules


# Arrays left empty: an entry would change what the request means rather than say more of it.
EMPTY_ARRAYS = {
    "forgotten_topics_data",
    "assignments",  # CreateTopics: manual assignment; SyncGroup: a follower's empty list
    "configs",
    "log_dirs",
    "offline_log_dirs",
    "new_isr_with_epochs",
    "states_filter",
    "types_filter",
    "configuration_keys",  # DescribeConfigs: null/empty means every config
    "new_assignments",
}
# Nullable fields sent as null (Kafka's "not given").
NULL_FIELDS = {"group_instance_id", "transactional_id", "rack", "reason", "replicas", "cursor"}
TRUE_FIELDS = {
    "validate_only",
    "include_synonyms",
    "include_documentation",
    # authorized operations asked for, so that the answers carry them (KIP-430)
    "include_topic_authorized_operations",
    "include_cluster_authorized_operations",
    "include_authorized_operations",
}
FALSE_FIELDS = {"allow_auto_topic_creation", "want_shut_down", "want_fence", "is_migrating_zk_broker"}


def _int_value(name: str, owner: str, s: Scenario) -> int | None:
    if name in ("partition", "partition_index", "index", "partition_id"):
        return s.partition
    if name in ("fetch_offset", "committed_offset", "offset", "start_offset"):
        return s.offset
    if name in ("broker_id", "node_id"):
        return s.broker_id
    if name in ("replica_id",):
        return -1  # a consumer
    if name.endswith("epoch") or name in ("generation_id", "generation_id_or_member_epoch", "producer_id"):
        return -1
    if name in ("timestamp",):
        return -1  # latest
    if name in ("partition_max_bytes", "max_bytes"):
        return 1 << 20
    if name in ("min_bytes", "num_partitions", "count", "replication_factor", "max_num_offsets"):
        return 1
    if name == "acks":
        return -1
    if name in ("port",):
        return 9999
    if name in ("resource_type",):
        return 2  # TOPIC
    if name in ("response_partition_limit",):
        return 100
    if name in ("min_supported_version",):
        return 1
    if name in ("max_supported_version",):
        return 20
    if name == "key_type":
        return 0  # GROUP
    if name in ("security_protocol", "isolation_level", "election_type", "session_id", "endpoint_type"):
        return 1 if name == "endpoint_type" else 0
    return None


def _str_value(name: str, owner: str, s: Scenario) -> str | None:
    if name in ("topic", "topic_name", "resource_name") or (name == "name" and "Topic" in owner):
        return s.topic
    if name in ("group_id", "key") or (name == "name" and "Group" in owner):
        return s.group
    if name == "member_id":
        return s.member
    if name == "cluster_id":
        return s.cluster_id
    if name == "protocol_type":
        return "consumer"
    if name in ("protocol_name",) or (name == "name" and "Protocol" in owner):
        return "range"
    if name == "name" and "Feature" in owner:
        return "metadata.version"
    if name == "name" and "Listener" in owner:
        return "PLAINTEXT"
    if name == "name" and "Config" in owner:
        return "retention.ms"
    if name == "value":
        return "604800000"
    if name == "host":
        return "127.0.0.1"
    if name == "client_software_name":
        return "epochkraft-sweep"
    if name == "client_software_version":
        return "1.0"
    return None


def _duration(name: str) -> datetime.timedelta:
    if name == "max_wait":
        return 10 * MS
    if name in ("session_timeout", "rebalance_timeout"):
        return 6000 * MS
    if name == "transaction_timeout":
        return 60_000 * MS
    if name == "retention_time":
        return -1 * MS
    return 5000 * MS


def _value(cls: type, f: dataclasses.Field, hint: Any, s: Scenario) -> Any:
    name, owner = f.name, cls.__name__
    if name in s.overrides:
        return s.overrides[name]
    kind = f.metadata.get("kafka_type")
    nullable = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        hint = args[0]
    if nullable and name in NULL_FIELDS:
        return None
    if typing.get_origin(hint) is tuple:
        if name in EMPTY_ARRAYS:
            return ()
        inner = typing.get_args(hint)[0]
        if dataclasses.is_dataclass(inner):
            return (build(inner, s),)
        one = _scalar(
            name.removesuffix("s") if name.endswith("s") else name, owner, kind, inner, s, plural=True
        )
        return (one,)
    if dataclasses.is_dataclass(hint):
        return build(hint, s)
    return _scalar(name, owner, kind, hint, s)


def _scalar(name: str, owner: str, kind: str | None, hint: Any, s: Scenario, plural: bool = False) -> Any:
    if plural:  # an element of a list of names or indexes
        if kind and kind.startswith("int"):
            return s.broker_id if name == "broker_id" else s.partition
        if kind == "uuid":
            return s.topic_id or uuid.uuid4()
        return s.group if name in ("group", "group_id", "coordinator_key", "groups_name") else s.topic
    if kind == "error_code":
        return 0
    if kind and kind.startswith(("int", "uint")):
        value = _int_value(name, owner, s)
        return 0 if value is None else value
    if kind and kind.startswith("timedelta"):
        return _duration(name)
    if kind == "bool":
        return name in TRUE_FIELDS and name not in FALSE_FIELDS
    if kind == "string":
        value = _str_value(name, owner, s)
        return "" if value is None else value
    if kind == "uuid":
        return s.topic_id if name == "topic_id" else uuid.uuid4()
    if kind == "records":
        return s.records
    if kind == "bytes":
        return b""
    if kind == "float64":
        return 0.0
    raise TypeError(f"no value rule for {owner}.{name} ({kind})")


def build(cls: type, s: Scenario) -> Any:
    """An instance of kio class ``cls`` (a request or one of its entities) for scenario ``s``."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _value(cls, f, hints[f.name], s) for f in dataclasses.fields(cls)})


def request_for(api_key: int, version: int, s: Scenario) -> Any:
    return build(request_class(api_key, version), s)
