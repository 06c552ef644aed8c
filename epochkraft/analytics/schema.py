"""The declared schema of the event files (see epochkraft/metrics/SCHEMA.md), for Spark and for Python."""

from __future__ import annotations

from typing import Any

# (field, Spark type name, Python types accepted)
COMMON = [
    ("schema_version", "int", (int,)),
    ("ts_ms", "long", (int,)),
    ("node", "string", (str,)),
    ("event", "string", (str,)),
]
FIELDS = [
    ("broker", "int", (int,)),
    ("epoch", "long", (int,)),
    ("incarnation", "string", (str,)),
    ("topic", "string", (str,)),
    ("topic_id", "string", (str,)),
    ("partition", "int", (int,)),
    ("leader", "int", (int,)),
    ("previous_leader", "int", (int,)),
    ("leader_epoch", "int", (int,)),
    ("unclean", "boolean", (bool,)),
    ("offset", "long", (int,)),
    ("isr", "array<int>", (list,)),
    ("previous_isr", "array<int>", (list,)),
    ("elr", "array<int>", (list,)),
    ("last_known_elr", "array<int>", (list,)),
    ("replicas", "array<int>", (list,)),
    ("partition_epoch", "int", (int,)),
    ("kind", "string", (str,)),
    ("error", "string", (str,)),
    ("error_code", "int", (int,)),
    ("role", "string", (str,)),
    ("isr_size", "int", (int,)),
    ("log_end_offset", "long", (int,)),
    ("high_watermark", "long", (int,)),
    ("follower_lag_max", "long", (int,)),
    ("count", "long", (int,)),
    ("p50_ms", "double", (int, float)),
    ("p99_ms", "double", (int, float)),
    ("p999_ms", "double", (int, float)),
    ("max_ms", "double", (int, float)),
    ("interval_s", "double", (int, float)),
    ("UnderReplicatedPartitions", "double", (int, float)),
    ("UnderMinIsrPartitionCount", "double", (int, float)),
    ("LeaderCount", "double", (int, float)),
    ("PartitionCount", "double", (int, float)),
    ("BrokerEpoch", "double", (int, float)),
    ("MetadataOffset", "double", (int, float)),
    ("NumIncrementalFetchSessions", "double", (int, float)),
    ("NumIncrementalFetchPartitionsCached", "double", (int, float)),
    ("IsrShrinksPerSec", "double", (int, float)),
    ("IsrExpandsPerSec", "double", (int, float)),
    ("FailedIsrUpdatesPerSec", "double", (int, float)),
    ("IncrementalFetchSessionEvictionsPerSec", "double", (int, float)),
    ("MetadataLoadErrorCount", "double", (int, float)),
    ("OfflinePartitionsCount", "double", (int, float)),
    ("FencedBrokerCount", "double", (int, float)),
    ("ActiveBrokerCount", "double", (int, float)),
    ("GlobalPartitionCount", "double", (int, float)),
    ("end_offset", "long", (int,)),
    ("bytes", "long", (int,)),
    ("fault", "string", (str,)),
    ("detail", "string", (str,)),
]
EVENTS = {
    "broker_registered",
    "broker_started",
    "broker_fenced",
    "broker_unfenced",
    "broker_controlled_shutdown",
    "leader_elected",
    "isr_change_committed",
    "elr_change_committed",
    "isr_change_requested",
    "isr_change_rejected",
    "high_watermark_advanced",
    "produce_latency",
    "fetch_latency",
    "metrics_snapshot",
    "partition_snapshot",
    "controller_snapshot",
    "metadata_snapshot_written",
    "fault_injected",
}


def ddl() -> str:
    """The schema as a Spark DDL string (``dt`` and ``node`` also come from the folder names)."""
    return ", ".join(f"`{name}` {kind}" for name, kind, _ in COMMON + FIELDS)


def spark_schema():
    from pyspark.sql.types import StructType

    return StructType.fromDDL(ddl())


def validate_event(event: dict[str, Any]) -> list[str]:
    """Problems with one decoded event line (empty when it matches the schema)."""
    problems = []
    for name, _kind, types in COMMON:
        if not isinstance(event.get(name), types):
            problems.append(f"missing or mistyped {name}")
    if event.get("schema_version") != 1:
        problems.append("unsupported schema_version")
    if event.get("event") not in EVENTS:
        problems.append(f"unknown event {event.get('event')!r}")
    known = {name: types for name, _, types in COMMON + FIELDS}
    for name, value in event.items():
        if name not in known:
            problems.append(f"undeclared field {name}")
        elif (value is not None and not isinstance(value, known[name])) or (
            isinstance(value, bool) and bool not in known.get(name, ())
        ):
            problems.append(f"field {name} has type {type(value).__name__}")
    return problems
