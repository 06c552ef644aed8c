"""Snapshot files in a log directory, as Kafka's FileRawSnapshotWriter/Reader keep them (the IO edge).

A snapshot is written to ``<id>.checkpoint.part`` (``Snapshots.createTempFile``), flushed, then renamed to
``<id>.checkpoint`` and the directory flushed (``FileRawSnapshotWriter.freeze``), so a crash leaves either
the whole snapshot or a ``.part`` file that the next start deletes (``KafkaMetadataLog``'s load). Only
the newest ``keep`` snapshots are kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from epochkraft.files import write_atomically
from epochkraft.metadata.snapshot import (
    PARTIAL_SUFFIX,
    SUFFIX,
    Snapshot,
    SnapshotError,
    SnapshotId,
    decode_snapshot,
    parse_snapshot_filename,
    snapshot_filename,
)


def write_snapshot_file(
    log_dir: Path, snapshot_id: SnapshotId, batches: list[bytes], fsync: bool = True
) -> Path:
    """Writes the batches as ``<id>.checkpoint`` atomically; returns its path."""
    final = log_dir / snapshot_filename(snapshot_id)
    partial = final.with_name(final.name[: -len(SUFFIX)] + PARTIAL_SUFFIX)
    return write_atomically(final, batches, temporary=partial, fsync=fsync)


def snapshot_ids(log_dir: Path) -> list[SnapshotId]:
    """Ids of the complete snapshots in ``log_dir``, oldest first."""
    if not log_dir.is_dir():
        return []
    found = []
    for path in log_dir.iterdir():
        parsed = parse_snapshot_filename(path.name)
        if parsed is not None and parsed[1] == SUFFIX:
            found.append(parsed[0])
    return sorted(found)


def remove_partial_snapshots(log_dir: Path) -> list[Path]:
    """Deletes ``.checkpoint.part`` and ``.checkpoint.deleted`` files left by a crash."""
    removed = []
    if log_dir.is_dir():
        for path in log_dir.iterdir():
            parsed = parse_snapshot_filename(path.name)
            if parsed is not None and parsed[1] != SUFFIX:
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def read_snapshot_file(log_dir: Path, snapshot_id: SnapshotId) -> Snapshot:
    return decode_snapshot((log_dir / snapshot_filename(snapshot_id)).read_bytes(), snapshot_id)


def newest_valid_snapshot(
    log_dir: Path, log_end_offset: int, on_rejected: Callable[[SnapshotId, str], None] | None = None
) -> Snapshot | None:
    """The newest snapshot that reads whole and does not reach past the log's end; older ones are tried
    when a newer one is corrupt or truncated (None: replay the whole log)."""
    for snapshot_id in reversed(snapshot_ids(log_dir)):
        if snapshot_id.end_offset > log_end_offset:
            reason = f"ends at offset {snapshot_id.end_offset}, past the log's end {log_end_offset}"
        else:
            try:
                return read_snapshot_file(log_dir, snapshot_id)
            except (OSError, SnapshotError) as exc:
                reason = str(exc)
        if on_rejected is not None:
            on_rejected(snapshot_id, reason)
    return None


def delete_snapshots_past(log_dir: Path, log_end_offset: int) -> list[SnapshotId]:
    """Deletes the snapshots that end past ``log_end_offset``: of a history the log no longer holds (records
    a crash took back), to be loaded over a different one should the log grow past them again."""
    past = [i for i in snapshot_ids(log_dir) if i.end_offset > log_end_offset]
    for snapshot_id in past:
        _delete(log_dir, snapshot_id)
    return past


def delete_old_snapshots(log_dir: Path, keep: int) -> list[SnapshotId]:
    """Deletes all but the newest ``keep`` snapshots (renamed ``.deleted`` first, as Snapshots.markForDelete)."""
    ids = snapshot_ids(log_dir)
    old = ids[: max(len(ids) - keep, 0)]
    for snapshot_id in old:
        _delete(log_dir, snapshot_id)
    return old


def _delete(log_dir: Path, snapshot_id: SnapshotId) -> None:
    path = log_dir / snapshot_filename(snapshot_id)
    marked = path.with_name(path.name + ".deleted")
    os.replace(path, marked)
    marked.unlink(missing_ok=True)
