"""The ``quorum-state`` file of a voter (Kafka's FileQuorumStateStore): QuorumStateData as JSON, written
to ``quorum-state.tmp``, flushed, then renamed over the old file (Utils.atomicMoveWithFallback) and the
directory flushed, so a crash leaves either the old state or the new one, never a torn file.

This is the driver's IO for what ``RaftClient`` hands out in ``Output.persist``; write it before
sending the messages of the same output (a vote must be durable before it is granted).
"""

from __future__ import annotations

from pathlib import Path

from epochkraft.files import write_atomically
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
        write_atomically(self.path, data.to_json(), fsync=self.fsync)
