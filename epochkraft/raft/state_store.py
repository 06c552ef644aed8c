"""The ``quorum-state`` file of a voter (Kafka's FileQuorumStateStore): QuorumStateData as JSON, written
to ``quorum-state.tmp``, flushed, then renamed over the old file (Utils.atomicMoveWithFallback) and the
directory flushed, so a crash leaves either the old state or the new one, never a torn file.

This is the driver's IO for what ``RaftClient`` hands out in ``Output.persist``; write it before
sending the messages of the same output (a vote must be durable before it is granted).
"""

from __future__ import annotations

from pathlib import Path

from epochkraft.files import write_atomically
from epochkraft.raft.quorum_state import QuorumStateData, is_leader_id, is_usable_epoch

FILE_NAME = "quorum-state"


class InvalidQuorumState(Exception):
    """A quorum-state file this voter cannot start from: unreadable, or holding an epoch or id no voter
    can use (this version never writes one)."""


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
        try:
            data = QuorumStateData.from_json(text)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidQuorumState(f"{self.path}: not a quorum-state file ({exc})") from exc
        if not is_usable_epoch(data.leader_epoch):
            raise InvalidQuorumState(
                f"{self.path}: epoch {data.leader_epoch} is not one a voter can hold (0 to 2^31-2)"
            )
        if not (is_leader_id(data.leader_id) and is_leader_id(data.voted_id)):
            raise InvalidQuorumState(
                f"{self.path}: leader {data.leader_id} or vote {data.voted_id} not a node id"
            )
        return data

    def write(self, data: QuorumStateData) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, data.to_json(), fsync=self.fsync)
