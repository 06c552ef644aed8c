"""Files replaced whole: the new content goes to a temporary file beside the old, is flushed, and is
renamed over it, then the directory is flushed, so a crash leaves the old file or the new one, never a
torn one (Kafka's Utils.atomicMoveWithFallback after a flushed write)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path


def write_atomically(
    path: Path,
    content: bytes | str | Iterable[bytes],
    *,
    temporary: Path | None = None,
    fsync: bool = True,
    directory_sync_best_effort: bool = False,
) -> Path:
    """Replaces ``path`` by ``content`` (text, bytes, or chunks of bytes) through ``temporary`` (default
    ``<name>.tmp``); with ``directory_sync_best_effort`` a directory that cannot be flushed (not every
    filesystem allows it) is not an error."""
    temporary = temporary or path.with_name(path.name + ".tmp")
    with open(temporary, "w" if isinstance(content, str) else "wb") as f:
        if isinstance(content, str | bytes):
            f.write(content)
        else:
            f.writelines(content)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(temporary, path)
    if fsync:
        with contextlib.suppress(*((OSError,) if directory_sync_best_effort else ())):
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return path
