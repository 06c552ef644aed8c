"""The ``quorum-state`` file of a voter (Kafka's FileQuorumStateStore): QuorumStateData as JSON, written
to ``quorum-state.tmp``, flushed, then renamed over the old file (Utils.atomicMoveWithFallback) and the
directory flushed, so a crash leaves either the old state or the new one, never a torn file.

This is the driver's IO for what ``RaftClient`` hands out in ``Output.persist``; write it before
sending the messages of the same output (a vote must be durable before it is granted).
"""

from __future__ import annotations

import os
from pathlib import Path

from epochkraft.raft.quorum_state import QuorumStateData

FILE_NAME = "quorum-state"


class FileQuorumStateStore:
    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.path = directory / FILE_NAME
        self.fsync = fsync

    def read(self) -> QuorumStateData | None:
        """The stored state, or None when there is none yet (a new voter)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        return QuorumStateData.from_json(text)

    def write(self, data: QuorumStateData) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        with open(tmp, "w") as f:
            f.write(data.to_json())
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self.fsync:
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
