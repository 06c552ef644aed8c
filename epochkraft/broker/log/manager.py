"""All partition logs of one broker's data dir, its checkpoints and meta.properties.

Layout (as Kafka's): ``<data-dir>/meta.properties``, ``<data-dir>/<topic>-<partition>/`` per partition,
and data-dir-level ``replication-offset-checkpoint`` (high watermarks),
``recovery-point-offset-checkpoint`` (the offset up to which each log was fsync'd) and
``log-start-offset-checkpoint`` (log start offsets above the first segment's base). Files of deleted
segments are renamed ``.deleted`` and removed once file.delete.delay.ms has passed.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

import structlog

from epochkraft.broker.log.checkpoints import read_offsets, write_atomically, write_offsets
from epochkraft.broker.log.partition_log import LogConfig, PartitionLog
from epochkraft.broker.log.tail_cache import TailCache

HW_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
META = "meta.properties"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
log = structlog.get_logger()


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
        self.high_watermarks: dict[tuple[str, int], int] = _read_checkpoint(self.data_dir / HW_CHECKPOINT)
        self._recovery_points = _read_checkpoint(self.data_dir / RECOVERY_CHECKPOINT)
        self._log_starts = _read_checkpoint(self.data_dir / LOG_START_CHECKPOINT)
        self._pending_removal: list[tuple[int, list[Path]]] = []  # (due at ms, files renamed .deleted)
        # One writer of a checkpoint file at a time (Kafka's CheckpointFile.write holds a lock): the periodic
        # round writes on a worker thread, which a shutdown's last checkpoint on the loop must not meet in
        # the same temporary file.
        self._checkpoint_lock = threading.Lock()

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
                self.logs[key] = self._open(key, path, self.config)
        return list(self.logs)

    def _open(self, key: tuple[str, int], path: Path, config: LogConfig) -> PartitionLog:
        return PartitionLog.open(
            path, config, self._recovery_points.get(key, 0), self.tail, self._log_starts.get(key, 0)
        )

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> PartitionLog:
        """The partition's log, opened with ``config`` (the broker's defaults if None) if not yet open."""
        key = (topic, partition)
        plog = self.logs.get(key)
        if plog is None:
            path = self.data_dir / partition_dir_name(topic, partition)
            plog = self.logs[key] = self._open(key, path, config or self.config)
        return plog

    def update_topic_config(self, topic: str, partitions: Iterable[int], config: LogConfig) -> int:
        """``config`` for the open logs of ``topic`` among ``partitions``, as Kafka's
        LogManager.updateTopicConfig; how many logs took it."""
        updated = 0
        for index in partitions:
            plog = self.logs.get((topic, index))
            if plog is not None:
                plog.config = config
                updated += 1
        return updated

    def delete(self, topic: str, partition: int) -> None:
        plog = self.logs.pop((topic, partition), None)
        if plog is not None:
            plog.close()
        shutil.rmtree(self.data_dir / partition_dir_name(topic, partition), ignore_errors=True)
        self.high_watermarks.pop((topic, partition), None)
        self._recovery_points.pop((topic, partition), None)  # a topic created again starts afresh
        self._log_starts.pop((topic, partition), None)

    # ---- checkpoints ---------------------------------------------------------------------------------
    def checkpoint_high_watermarks(self, high_watermarks: dict[tuple[str, int], int]) -> None:
        self.high_watermarks = dict(high_watermarks)
        with self._checkpoint_lock:
            write_offsets(self.data_dir / HW_CHECKPOINT, self.high_watermarks)

    def checkpoint_recovery_points(self, points: dict[tuple[str, int], int] | None = None) -> None:
        if points is None:
            points = {key: plog.recovery_point for key, plog in self.logs.items()}
        with self._checkpoint_lock:
            write_offsets(self.data_dir / RECOVERY_CHECKPOINT, points)

    def checkpoint_log_start_offsets(self, starts: dict[tuple[str, int], int] | None = None) -> None:
        """Kafka's checkpointLogStartOffsets: only logs whose start is above their first segment's base
        need an entry (``starts`` taken on the event loop when called from a worker thread)."""
        if starts is None:
            starts = self.log_start_offsets()
        with self._checkpoint_lock:
            write_offsets(self.data_dir / LOG_START_CHECKPOINT, starts)

    def log_start_offsets(self) -> dict[tuple[str, int], int]:
        return {
            key: plog.log_start_offset
            for key, plog in self.logs.items()
            if plog.log_start_offset > plog.segments[0].base_offset
        }

    # ---- segment deletion ----------------------------------------------------------------------------
    def schedule_removal(self, now_ms: int, renamed: list[Path], delay_ms: int) -> None:
        """Files a log renamed ``.deleted`` are removed after ``delay_ms`` (file.delete.delay.ms)."""
        if renamed:
            self._pending_removal.append((now_ms + delay_ms, renamed))

    def due_removals(self, now_ms: int) -> list[Path]:
        """The renamed files whose delay has passed (the caller removes them off the event loop)."""
        due = [paths for at, paths in self._pending_removal if at <= now_ms]
        self._pending_removal = [(at, paths) for at, paths in self._pending_removal if at > now_ms]
        return [path for paths in due for path in paths]

    @staticmethod
    def remove_files(paths: list[Path]) -> None:
        """Removes every file it can; then raises the first error (Kafka's deleteSegmentFiles: an
        IOException takes the log dir offline)."""
        failure: OSError | None = None
        for path in paths:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not remove a deleted segment file", path=str(path), error=str(exc))
                failure = failure or exc
        if failure is not None:
            raise failure

    def flush_all(self) -> None:
        for plog in self.logs.values():
            plog.flush()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        with contextlib.suppress(OSError):  # stopping: each file that stays was logged; recovery finds it
            self.remove_files(self.due_removals(2**62))

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()


def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """An offset checkpoint, or none if the file cannot be read: a broker must not fail to start over
    it, and each is safe to lose (high watermarks are learned again from the leaders, recovery points
    of 0 recover every segment, log start offsets fall back to the first segments' bases)."""
    try:
        return read_offsets(path)
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("unreadable checkpoint file; starting without it", path=str(path), error=str(exc))
        return {}


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
        plog = PartitionLog.open(path, LogConfig(), recovery_point=point, log_start_offset=0)
        plog.truncate_to(point)
        cut[key] = plog.log_end_offset
        plog.close()
    return cut


def wipe(data_dir: str | Path) -> None:
    """Simulated disk replacement: the data dir is emptied."""
    shutil.rmtree(data_dir, ignore_errors=True)
