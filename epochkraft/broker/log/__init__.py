"""Broker log storage: segments, offset indexes, leader-epoch cache, checkpoints, recovery.

``PartitionLog.open(dir, LogConfig)``: ``append_as_leader(records, leader_epoch) -> AppendInfo``,
``append_as_follower(batches)``, ``read(offset, max_bytes, max_offset)``, ``truncate_to(offset)``,
``flush()``, ``log_start_offset`` / ``log_end_offset`` / ``recovery_point``, ``epochs`` (LeaderEpochCache:
``assign``, ``end_offset_for``, ``latest_epoch``), ``maybe_increment_log_start_offset``,
``delete_old_segments`` (retention), ``fetch_offset_by_timestamp`` / ``fetch_max_timestamp`` (time
indexes), ``cleanable_snapshots`` / ``replace_cleaned`` (with ``cleaner.compact``). ``LogManager(data_dir)``
owns them all plus meta.properties and the high-watermark, recovery-point and log-start-offset
checkpoints; ``cut_to_recovery_point`` and ``wipe`` simulate a power loss and a replaced disk for the chaos
tool.
"""

from epochkraft.broker.log.manager import LogManager, cut_to_recovery_point, wipe
from epochkraft.broker.log.partition_log import AppendInfo, LogConfig, PartitionLog

__all__ = ["AppendInfo", "LogConfig", "LogManager", "PartitionLog", "cut_to_recovery_point", "wipe"]
