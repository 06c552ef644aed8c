"""The metadata log's one segment file, named by its base offset as Kafka names segments
(``00000000000000000000.log`` until a snapshot lets the records before it go).

Dropping the records below a snapshot rewrites the file from that offset: the kept batches go to
``<base>.log.tmp``, which is flushed and renamed to ``<base>.log`` before the old segment is deleted, so a
crash leaves the old file, the new one, or both (the newer base wins at open, the other is deleted).
"""

from __future__ import annotations

from pathlib import Path

from epochkraft.files import write_atomically

SUFFIX = ".log"
OFFSET_WIDTH = 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:0{OFFSET_WIDTH}d}{SUFFIX}"


def find_segment(directory: Path) -> tuple[Path, int]:
    """The segment to read, the one with the highest base offset (others are leftovers of a rewrite
    that crashed after its rename, and are deleted), and its base offset; a new one at 0 if none."""
    found = []
    for path in directory.glob(f"*{SUFFIX}"):
        stem = path.name[: -len(SUFFIX)]
        if len(stem) == OFFSET_WIDTH and stem.isdigit():
            found.append((int(stem), path))
    if not found:
        return directory / segment_name(0), 0
    found.sort()
    for _base, stale in found[:-1]:
        stale.unlink(missing_ok=True)
    base, path = found[-1]
    return path, base


def rewrite_segment(directory: Path, old: Path, base_offset: int, batches: list[bytes], fsync: bool) -> Path:
    """Writes ``batches`` (starting at ``base_offset``) as the new segment and deletes ``old``."""
    final = write_atomically(directory / segment_name(base_offset), batches, fsync=fsync)
    if old != final:
        old.unlink(missing_ok=True)  # a crash before this: find_segment keeps the newer base
    return final
