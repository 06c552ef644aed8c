"""The quorum-state file: Kafka's JSON, replaced atomically, read back by a restarted voter."""

from __future__ import annotations

import json

import pytest

from epochkraft.raft.client import RaftClient
from epochkraft.raft.log import RaftLog
from epochkraft.raft.quorum_state import QuorumStateData
from epochkraft.raft.state_store import FileQuorumStateStore, InvalidQuorumState


def test_a_new_voter_has_no_state_and_a_written_one_reads_back(tmp_path):
    store = FileQuorumStateStore(tmp_path / "meta")
    assert store.read() is None
    store.write(QuorumStateData(3, -1, 2, (1, 2, 3)))
    store.write(QuorumStateData(4, 1, 1, (1, 2, 3)))
    assert store.read() == QuorumStateData(4, 1, 1, (1, 2, 3))
    raw = json.loads((tmp_path / "meta" / "quorum-state").read_text())
    assert raw["leaderEpoch"] == 4 and raw["leaderId"] == 1 and raw["votedId"] == 1
    assert raw["currentVoters"] == [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}]
    assert not (tmp_path / "meta" / "quorum-state.tmp").exists()


def test_a_vote_survives_a_restart_and_is_not_given_twice(tmp_path):
    """A voter persists its vote before answering; restarted from the file it refuses another candidate
    of that epoch and grants the same one again (Raft's one vote per term)."""
    from epochkraft.raft.messages import Envelope, VoteRequest

    store = FileQuorumStateStore(tmp_path)
    voter = RaftClient(1, (1, 2, 3), RaftLog(), 0, persisted=store.read())
    output = voter.handle(0, Envelope(2, 1, 7, VoteRequest(1, 2, 0, 0)))
    assert output.persist is not None
    store.write(output.persist)
    assert output.sends[0].message.vote_granted
    restarted = RaftClient(1, (1, 2, 3), RaftLog(), 10, persisted=store.read())
    assert not restarted.handle(10, Envelope(3, 1, 8, VoteRequest(1, 3, 0, 0))).sends[0].message.vote_granted
    assert restarted.handle(10, Envelope(2, 1, 9, VoteRequest(1, 2, 0, 0))).sends[0].message.vote_granted


@pytest.mark.parametrize(
    ("epoch", "leader", "voted"), [(2**31 - 1, 1, -1), (-1, -1, -1), (4, -2, -1), (4, -1, 2**31)]
)
def test_a_quorum_state_a_voter_cannot_use_stops_it_at_start(tmp_path, epoch, leader, voted):
    """An epoch no voter can raise (2^31-1), or an id that is none, is never written; one found on disk
    (hand-edited, or left by an older version) is a clear error at start, not a voter that fails later."""
    store = FileQuorumStateStore(tmp_path)
    store.write(QuorumStateData(epoch, leader, voted, (1, 2, 3)))
    with pytest.raises(InvalidQuorumState, match="quorum-state"):
        store.read()


def test_a_torn_or_foreign_quorum_state_file_is_invalid(tmp_path):
    (tmp_path / "quorum-state").write_text('{"leaderEpoch": "x"}')
    with pytest.raises(InvalidQuorumState):
        FileQuorumStateStore(tmp_path).read()
