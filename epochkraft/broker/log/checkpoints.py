"""Kafka's checkpoint text files, written atomically (temp file, fsync, rename).

Offset checkpoints (``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``):
version 0, the entry count, then ``topic partition offset`` lines. The leader-epoch checkpoint has the
same shape with ``epoch startOffset`` lines.
"""

from __future__ import annotations

from pathlib import Path

from epochkraft import files

VERSION = 0


def write_atomically(path: Path, text: str) -> None:
    files.write_atomically(path, text, directory_sync_best_effort=True)


def _read_lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    if len(lines) < 2 or int(lines[0]) != VERSION:
        raise ValueError(f"{path}: unsupported checkpoint format")
    count = int(lines[1])
    entries = [line.split() for line in lines[2 : 2 + count]]
    if len(entries) != count:
        raise ValueError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    body = "".join(
        f"{topic} {partition} {offset}\n" for (topic, partition), offset in sorted(offsets.items())
    )
    write_atomically(path, f"{VERSION}\n{len(offsets)}\n{body}")


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, p, o in _read_lines(path)}


def write_epochs(path: Path, entries: list[tuple[int, int]]) -> None:
    body = "".join(f"{epoch} {start}\n" for epoch, start in entries)
    write_atomically(path, f"{VERSION}\n{len(entries)}\n{body}")


def read_epochs(path: Path) -> list[tuple[int, int]]:
    return [(int(e), int(s)) for e, s in _read_lines(path)]
