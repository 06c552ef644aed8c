"""All partition logs of one broker's data dir, its checkpoints and meta.properties.

Layout (as Kafka's): ``<data-dir>/meta.properties``, ``<data-dir>/<topic>-<partition>/`` per partition,
and data-dir-level ``replication-offset-checkpoint`` (high watermarks) and
``recovery-point-offset-checkpoint`` (the offset up to which each log was fsync'd).
"""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

from epochkraft.broker.log.checkpoints import read_offsets, write_atomically, write_offsets
from epochkraft.broker.log.partition_log import LogConfig, PartitionLog
from epochkraft.broker.log.tail_cache import TailCache

HW_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
META = "meta.properties"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class LogManager:
    def __init__(
        self, data_dir: str | Path, config: LogConfig | None = None, tail_cache_bytes: int = 0
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config = config or LogConfig()
        # One budget for the whole broker's recent leader appends (0: every Fetch reads the log).
        self.tail = TailCache(tail_cache_bytes)
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.high_watermarks: dict[tuple[str, int], int] = read_offsets(self.data_dir / HW_CHECKPOINT)
        self._recovery_points = read_offsets(self.data_dir / RECOVERY_CHECKPOINT)

    # ---- meta.properties ------------------------------------------------------------------------------
    def read_meta(self) -> dict[str, str]:
        path = self.data_dir / META
        if not path.exists():
            return {}
        pairs = (
            line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#"
        )
        return {k.strip(): v.strip() for k, v in pairs}

    def write_meta(self, node_id: int, cluster_id: str) -> None:
        meta = self.read_meta()
        directory_id = meta.get("directory.id") or str(uuid.uuid4())
        write_atomically(
            self.data_dir / META,
            f"#epochkraft broker data dir\nversion=1\nnode.id={node_id}\ncluster.id={cluster_id}\n"
            f"directory.id={directory_id}\n",
        )

    # ---- logs ----------------------------------------------------------------------------------------
    def load_all(self) -> list[tuple[str, int]]:
        """Opens (and recovers) every partition log found in the data dir."""
        for path in sorted(self.data_dir.iterdir()):
            match = _PARTITION_DIR.match(path.name)
            if path.is_dir() and match:
                key = (match["topic"], int(match["partition"]))
                self.logs[key] = PartitionLog.open(
                    path, self.config, self._recovery_points.get(key, 0), self.tail
                )
        return list(self.logs)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        key = (topic, partition)
        plog = self.logs.get(key)
        if plog is None:
            path = self.data_dir / partition_dir_name(topic, partition)
            plog = self.logs[key] = PartitionLog.open(
                path, self.config, self._recovery_points.get(key, 0), self.tail
            )
        return plog

    def delete(self, topic: str, partition: int) -> None:
        plog = self.logs.pop((topic, partition), None)
        if plog is not None:
            plog.close()
        shutil.rmtree(self.data_dir / partition_dir_name(topic, partition), ignore_errors=True)
        self.high_watermarks.pop((topic, partition), None)

    # ---- checkpoints ---------------------------------------------------------------------------------
    def checkpoint_high_watermarks(self, high_watermarks: dict[tuple[str, int], int]) -> None:
        self.high_watermarks = dict(high_watermarks)
        write_offsets(self.data_dir / HW_CHECKPOINT, self.high_watermarks)

    def checkpoint_recovery_points(self, points: dict[tuple[str, int], int] | None = None) -> None:
        if points is None:
            points = {key: plog.recovery_point for key, plog in self.logs.items()}
        write_offsets(self.data_dir / RECOVERY_CHECKPOINT, points)

    def flush_all(self) -> None:
        for plog in self.logs.values():
            plog.flush()
        self.checkpoint_recovery_points()

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()


def cut_to_recovery_point(data_dir: str | Path) -> dict[tuple[str, int], int]:
    """Simulated power loss for a stopped broker: every log loses what was never fsync'd, i.e. is cut
    back to its checkpointed recovery point. Returns the offsets each log was cut to."""
    data_dir = Path(data_dir)
    points = read_offsets(data_dir / RECOVERY_CHECKPOINT)
    cut: dict[tuple[str, int], int] = {}
    for path in sorted(data_dir.iterdir()) if data_dir.exists() else []:
        match = _PARTITION_DIR.match(path.name)
        if not (path.is_dir() and match):
            continue
        key = (match["topic"], int(match["partition"]))
        point = points.get(key, 0)
        plog = PartitionLog.open(path, LogConfig(), recovery_point=point)
        plog.truncate_to(point)
        cut[key] = plog.log_end_offset
        plog.close()
    return cut


def wipe(data_dir: str | Path) -> None:
    """Simulated disk replacement: the data dir is emptied."""
    shutil.rmtree(data_dir, ignore_errors=True)
