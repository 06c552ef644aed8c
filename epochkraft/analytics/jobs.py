"""PySpark jobs over the event log: each takes the events DataFrame and returns a DataFrame.

The CLI (``epochkraft analyze``) and notebooks/cluster_health.ipynb both call these functions.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from epochkraft.analytics.schema import spark_schema


def session(master: str | None = None, app: str = "epochkraft-analytics") -> SparkSession:
    """A SparkSession: local[*] by default, any master by URL; loopback only, no UI."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.appName(app)
        .master(master or "local[*]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def load_events(spark: SparkSession, metrics_dir: str | Path) -> DataFrame:
    """Every event under the metrics dir, read with the declared schema (no inference)."""
    return (
        spark.read.schema(spark_schema())
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.jsonl")
        .json(str(metrics_dir))
        .withColumn("ts", (F.col("ts_ms") / 1000).cast("timestamp"))
    )


def isr_size_over_time(events: DataFrame) -> DataFrame:
    """(ts, topic, partition, isr_size, isr) at every committed ISR change."""
    return (
        events.where(F.col("event") == "isr_change_committed")
        .select("ts", "ts_ms", "topic", "partition", F.size("isr").alias("isr_size"), "isr")
        .orderBy("topic", "partition", "ts_ms")
    )


INT_ARRAY = "array<int>"


def isr_and_elr_over_time(events: DataFrame) -> DataFrame:
    """(ts, ts_ms, topic, partition, offset, isr_size, elr_size, last_known_elr_size, isr, elr, last_known_elr)
    at every committed change of a partition's ISR or eligible leader replicas (KIP-966): one row per
    metadata record (its ``offset``), each list as it stood after the record. A record that changes one
    list leaves the other as it was; the ELR is empty before its first change, the ISR unknown (null)
    before its first (a topic's creation is not an event)."""
    none = F.lit(None).cast(INT_ARRAY)
    isr = events.where(F.col("event") == "isr_change_committed").select(
        "ts_ms", "topic", "partition", "offset", "isr", none.alias("elr"), none.alias("last_known_elr")
    )
    elr = events.where(F.col("event") == "elr_change_committed").select(
        "ts_ms", "topic", "partition", "offset", none.alias("isr"), "elr", "last_known_elr"
    )
    per_record = (
        isr.unionByName(elr)
        .groupBy("topic", "partition", "offset")
        .agg(
            F.min("ts_ms").alias("ts_ms"),
            *(F.first(name, ignorenulls=True).alias(name) for name in ("isr", "elr", "last_known_elr")),
        )
    )
    so_far = (
        Window.partitionBy("topic", "partition")
        .orderBy("offset")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    empty = F.array().cast(INT_ARRAY)
    filled = per_record.select(
        "ts_ms",
        "topic",
        "partition",
        "offset",
        F.last("isr", ignorenulls=True).over(so_far).alias("isr"),
        F.coalesce(F.last("elr", ignorenulls=True).over(so_far), empty).alias("elr"),
        F.coalesce(F.last("last_known_elr", ignorenulls=True).over(so_far), empty).alias("last_known_elr"),
    )
    return filled.select(
        (F.col("ts_ms") / 1000).cast("timestamp").alias("ts"),
        "ts_ms",
        "topic",
        "partition",
        "offset",
        F.when(F.col("isr").isNotNull(), F.size("isr")).alias("isr_size"),
        F.size("elr").alias("elr_size"),
        F.size("last_known_elr").alias("last_known_elr_size"),
        "isr",
        "elr",
        "last_known_elr",
    ).orderBy("topic", "partition", "offset")


def alter_partition_outcomes(events: DataFrame) -> DataFrame:
    """AlterPartition outcomes by broker and error code: requests sent, rejections by error."""
    requested = events.where(F.col("event") == "isr_change_requested").select(
        F.regexp_extract("node", r"broker-(\d+)", 1).cast("int").alias("broker"),
        F.lit("REQUESTED").alias("outcome"),
    )
    rejected = events.where(
        (F.col("event") == "isr_change_rejected") & F.col("node").startswith("broker")
    ).select(
        F.regexp_extract("node", r"broker-(\d+)", 1).cast("int").alias("broker"),
        F.col("error").alias("outcome"),
    )
    committed = events.where(F.col("event") == "isr_change_committed").select(
        F.lit(None).cast("int").alias("broker"), F.lit("COMMITTED").alias("outcome")
    )
    return (
        requested.unionByName(rejected)
        .unionByName(committed)
        .groupBy("broker", "outcome")
        .count()
        .orderBy("broker", "outcome")
    )


def restart_to_rejoin(events: DataFrame) -> DataFrame:
    """For each broker start after the first: seconds until the broker was back in an ISR."""
    starts = events.where(F.col("event") == "broker_started").select(
        "broker", F.col("ts_ms").alias("start_ms")
    )
    first = starts.groupBy("broker").agg(F.min("start_ms").alias("first_ms"))
    restarts = starts.join(first, "broker").where(F.col("start_ms") > F.col("first_ms")).drop("first_ms")
    joins = (
        events.where(F.col("event") == "isr_change_committed")
        .select("ts_ms", "topic", "partition", F.explode("isr").alias("member"), "previous_isr")
        .where(~F.array_contains(F.col("previous_isr"), F.col("member")))
        .select(F.col("member").alias("broker"), F.col("ts_ms").alias("rejoin_ms"), "topic", "partition")
    )
    next_start = Window.partitionBy("broker").orderBy("start_ms")
    bounded = restarts.withColumn("next_start_ms", F.lead("start_ms").over(next_start))
    rejoined = (
        bounded.join(joins, "broker", "left")
        .where(
            F.col("rejoin_ms").isNull()
            | (
                (F.col("rejoin_ms") >= F.col("start_ms"))
                & (F.col("next_start_ms").isNull() | (F.col("rejoin_ms") < F.col("next_start_ms")))
            )
        )
        .groupBy("broker", "start_ms")
        .agg(
            F.min("rejoin_ms").alias("rejoin_ms"),
            F.countDistinct("topic", "partition").alias("partitions_rejoined"),
        )
    )
    return rejoined.withColumn("seconds_to_rejoin", (F.col("rejoin_ms") - F.col("start_ms")) / 1000).orderBy(
        "broker", "start_ms"
    )


def _intervals(changes: DataFrame, flag: str, end_ms: int) -> DataFrame:
    window = Window.partitionBy("topic", "partition").orderBy("ts_ms")
    return (
        changes.withColumn("until_ms", F.coalesce(F.lead("ts_ms").over(window), F.lit(end_ms)))
        .where(F.col(flag))
        .groupBy("topic", "partition")
        .agg(F.sum(F.col("until_ms") - F.col("ts_ms")).alias("ms"), F.count("*").alias("episodes"))
        .withColumn("seconds", F.col("ms") / 1000)
        .drop("ms")
        .orderBy("topic", "partition")
    )


def _last_ts_ms(events: DataFrame) -> int:
    """The latest event's time, 0 with none (an aggregate answers one row, its max null)."""
    row = events.agg(F.max("ts_ms")).first()
    return (row[0] if row is not None else None) or 0


def under_replicated_durations(events: DataFrame) -> DataFrame:
    """Seconds each partition spent with an ISR smaller than its replication factor (the largest ISR seen)."""
    end_ms = _last_ts_ms(events)
    changes = (
        isr_size_over_time(events)
        .withColumn("rf", F.max("isr_size").over(Window.partitionBy("topic", "partition")))
        .withColumn("under", F.col("isr_size") < F.col("rf"))
    )
    return _intervals(changes, "under", end_ms)


def offline_durations(events: DataFrame) -> DataFrame:
    """Seconds each partition spent without a leader."""
    end_ms = _last_ts_ms(events)
    changes = events.where(F.col("event") == "leader_elected").select(
        "ts_ms", "topic", "partition", (F.col("leader") == -1).alias("offline")
    )
    return _intervals(changes, "offline", end_ms)


def unclean_elections(events: DataFrame) -> DataFrame:
    return (
        events.where((F.col("event") == "leader_elected") & F.col("unclean"))
        .select("ts", "topic", "partition", "leader", "leader_epoch", "previous_leader")
        .orderBy("ts")
    )


def produce_latency_percentiles(events: DataFrame) -> DataFrame:
    """Per broker: produce requests seen, and the interval percentiles (median of p50s, max of tails)."""
    return (
        events.where(F.col("event") == "produce_latency")
        .groupBy("node")
        .agg(
            F.sum("count").alias("requests"),
            F.percentile_approx("p50_ms", 0.5).alias("p50_ms"),
            F.max("p99_ms").alias("p99_ms_max"),
            F.max("p999_ms").alias("p999_ms_max"),
            F.max("max_ms").alias("max_ms"),
        )
        .orderBy("node")
    )


JOBS = {
    "isr_size_over_time": isr_size_over_time,
    "isr_and_elr_over_time": isr_and_elr_over_time,
    "alter_partition_outcomes": alter_partition_outcomes,
    "restart_to_rejoin": restart_to_rejoin,
    "under_replicated_durations": under_replicated_durations,
    "offline_durations": offline_durations,
    "unclean_elections": unclean_elections,
    "produce_latency_percentiles": produce_latency_percentiles,
}
