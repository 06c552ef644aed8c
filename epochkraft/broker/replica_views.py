"""What DescribeLogDirs and DescribeProducers report about this broker's replicas (read-only views)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from epochkraft.broker.replica_manager import Replica
from epochkraft.protocol.errors import ErrorCode


class LogDirPartition(NamedTuple):
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int  # Kafka's max(high watermark - log end offset, 0)


class LogDir(NamedTuple):
    path: str
    partitions: list[LogDirPartition]
    total_bytes: int
    usable_bytes: int


def describe_log_dir(
    data_dir: Path, replicas: Mapping[tuple[str, int], Replica], wanted: set[tuple[str, int]] | None
) -> LogDir:
    """The one log dir of this broker, with the size and lag of each hosted partition (``wanted``: None
    for all, else only those)."""
    partitions = [
        LogDirPartition(
            topic,
            index,
            replica.log.size_bytes,
            max(replica.partition.high_watermark - replica.log.log_end_offset, 0),
        )
        for (topic, index), replica in sorted(replicas.items())
        if wanted is None or (topic, index) in wanted
    ]
    usage = shutil.disk_usage(data_dir)
    return LogDir(str(data_dir.resolve()), partitions, usage.total, usage.free)


class ActiveProducer(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1
    last_timestamp: int = -1


def active_producers(replica: Replica | None) -> tuple[ErrorCode, list[ActiveProducer]]:
    """The idempotent producers a replica of the partition remembers, leader or follower (Kafka's
    Partition.activeProducerState answers from any local log: ``kafka-transactions describe-producers
    --broker-id`` and ``find-hanging`` ask followers); NOT_LEADER_OR_FOLLOWER on a broker without one."""
    if replica is None:
        return ErrorCode.not_leader_or_follower, []
    return ErrorCode.none, [
        ActiveProducer(
            pid,
            entry.epoch,
            entry.last_seq,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
            entry.last_timestamp,
        )
        for pid, entry in sorted(replica.producers.producers.items())
    ]


def topic_partitions(topics: Iterable[tuple[str, Iterable[int]]]) -> set[tuple[str, int]]:
    return {(name, index) for name, indexes in topics for index in indexes}
