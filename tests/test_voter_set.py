"""Replica keys, the voter set and its history in the log, after Kafka's VoterSetTest and
VoterSetHistoryTest, and the log reading its VotersRecord and KRaftVersionRecord control records back
(KRaftControlRecordStateMachine)."""

from __future__ import annotations

import uuid
from typing import Literal

import pytest

from epochkraft.raft.log import LeaderChangeMessage, LogEntry, RaftLog
from epochkraft.raft.voter_set import (
    KRAFT_VERSION_0,
    KRAFT_VERSION_1,
    KRaftVersionRecord,
    ReplicaKey,
    VoterSet,
    VoterSetHistory,
    VotersRecord,
)

DIR = {n: uuid.UUID(int=n) for n in range(1, 10)}
OTHER_DIR = uuid.UUID(int=99)


def key(node: int, directory: uuid.UUID | Literal["own"] | None = "own") -> ReplicaKey:
    """Node ``node``'s replica key: its own disk's directory id by default."""
    return ReplicaKey(node, DIR[node] if isinstance(directory, str) else directory)


def voters(*nodes: int) -> VoterSet:
    return VoterSet(tuple(key(n) for n in nodes))


@pytest.mark.parametrize(
    ("replica", "is_voter"),
    [
        (key(1), True),
        (key(1, OTHER_DIR), False),  # node 1 on another disk
        (key(1, None), False),  # no directory id, the voter has one
        (key(4), False),
    ],
)
def test_testIsVoterWithDirectoryId(replica, is_voter):
    assert voters(1, 2, 3).is_voter(replica) is is_voter


@pytest.mark.parametrize("replica", [key(1), key(1, OTHER_DIR), key(1, None)])
def test_testIsVoterWithoutDirectoryId(replica):
    """A static voter (controller.quorum.voters) has no directory id: any disk of the node is it."""
    assert VoterSet.static((1, 2, 3)).is_voter(replica)
    assert not VoterSet.static((1, 2, 3)).is_voter(ReplicaKey(4, DIR[4]))


def test_testAddVoter():
    assert voters(1, 2).add_voter(key(3)) == voters(1, 2, 3)
    assert voters(1, 2, 3).add_voter(key(3)) is None
    assert voters(1, 2, 3).add_voter(key(3, OTHER_DIR)) is None  # one key per id


@pytest.mark.parametrize(
    ("removed", "remaining"),
    [
        (key(3), voters(1, 2)),
        (key(3, OTHER_DIR), None),  # not that disk
        (key(3, None), None),
        (key(4), None),
    ],
)
def test_testRemoveVoter(removed, remaining):
    assert voters(1, 2, 3).remove_voter(removed) == remaining


def test_testCannotRemoveToEmptyVoterSet():
    assert voters(1).remove_voter(key(1)) is None


def test_testIsOnlyVoterInStandalone():
    assert voters(1).is_only_voter(key(1))
    assert not voters(1).is_only_voter(key(1, OTHER_DIR))
    assert not voters(1, 2).is_only_voter(key(1))


@pytest.mark.parametrize(
    ("other", "overlapping"),
    [
        (voters(1, 2, 3), True),
        (voters(1, 2, 3, 4), True),
        (voters(1, 2), True),
        (VoterSet((key(1), key(2), key(3, OTHER_DIR))), True),  # one key out, one in
        (voters(1, 2, 3, 4, 5), False),  # testNonoverlappingMajority: two added
        (voters(1), False),
        (VoterSet((key(1), key(2, OTHER_DIR), key(3, OTHER_DIR))), False),
    ],
)
def test_testOverlappingMajority(other, overlapping):
    assert voters(1, 2, 3).has_overlapping_majority(other) is overlapping


def test_two_voters_with_one_id_are_refused():
    with pytest.raises(ValueError):
        VoterSet((key(1), key(1, OTHER_DIR)))


# ---- VoterSetHistoryTest ----------------------------------------------------------------------------------
def test_testAddAt():
    history = VoterSetHistory()
    history.add_voters_at(-1, voters(1, 2, 3))
    history.add_voters_at(10, voters(1, 2, 3, 4))
    history.add_voters_at(20, voters(1, 2, 4))
    assert history.last_value() == voters(1, 2, 4) and history.last_offset() == 20
    table = {-1: voters(1, 2, 3), 9: voters(1, 2, 3), 10: voters(1, 2, 3, 4), 25: voters(1, 2, 4)}
    for offset, expected in table.items():
        assert history.value_at_or_before(offset) == expected
    assert history.value_at_or_before(-2) is None
    with pytest.raises(ValueError):
        history.add_voters_at(20, voters(1, 2))  # offsets only grow


def test_testAddAtNonOverlapping():
    history = VoterSetHistory()
    history.add_voters_at(-1, voters(1, 2, 3))
    with pytest.raises(ValueError):
        history.add_voters_at(10, voters(1, 2, 3, 4, 5))


def test_testTruncateTo():
    history = VoterSetHistory()
    history.add_voters_at(-1, voters(1, 2, 3))
    history.add_voters_at(10, voters(1, 2, 3, 4))
    history.add_voters_at(20, voters(1, 2, 4))
    history.truncate_new_entries(20)
    assert history.last_value() == voters(1, 2, 3, 4)
    history.truncate_new_entries(0)
    assert history.last_value() == voters(1, 2, 3) and history.last_offset() == -1


def test_testTrimPrefixTo():
    history = VoterSetHistory()
    history.add_voters_at(-1, voters(1, 2, 3))
    history.add_voters_at(10, voters(1, 2, 3, 4))
    history.add_voters_at(20, voters(1, 2, 4))
    history.truncate_old_entries(15)  # the value at 15 (set at 10) stays
    assert history.value_at_or_before(15) == voters(1, 2, 3, 4)
    assert history.value_at_or_before(9) is None
    assert history.last_value() == voters(1, 2, 4)


# ---- the log's control records (KRaftControlRecordStateMachine) ----------------------------------------------
def dynamic_log() -> RaftLog:
    log = RaftLog()
    log.bootstrap(voters(1, 2, 3))
    log.append(LogEntry(1, LeaderChangeMessage(1, (1, 2, 3))))
    log.append(LogEntry(1, KRaftVersionRecord(KRAFT_VERSION_1)))
    log.append(LogEntry(1, VotersRecord(voters(1, 2, 3))))
    for value in (b"a", b"b"):
        log.append(LogEntry(1, value))
    log.append(LogEntry(1, VotersRecord(voters(1, 2, 3, 4))))  # offset 5
    log.append(LogEntry(1, b"c"))
    return log


def test_static_log_has_no_voter_set_and_kraft_version_0():
    log = RaftLog([LogEntry(1, b"a")])
    assert log.voter_history.last_value() is None
    assert log.voter_history.kraft_version() == KRAFT_VERSION_0


def test_testFollowerReadsKRaftBootstrapRecords():
    log = dynamic_log()
    assert log.voter_history.kraft_version() == KRAFT_VERSION_1
    assert log.voter_history.last_value() == voters(1, 2, 3, 4)
    assert log.voter_history.value_at_or_before(4) == voters(1, 2, 3)
    assert log.entries[2].is_control and log.entries[5].is_control


def test_truncation_forgets_the_voter_sets_it_drops():
    log = dynamic_log()
    log.truncate_to(5)
    assert log.voter_history.last_value() == voters(1, 2, 3)
    log.truncate_to(1)  # below the first VotersRecord and KRaftVersionRecord: the bootstrap's
    assert log.voter_history.last_value() == voters(1, 2, 3) and log.voter_history.last_offset() == -1
    assert log.voter_history.kraft_version() == KRAFT_VERSION_1


def test_a_snapshot_keeps_the_voter_set_it_holds():
    log = dynamic_log()
    log.trim_to(6)
    assert log.voter_history.last_value() == voters(1, 2, 3, 4)
    log.truncate_to(6)  # nothing above the snapshot to forget
    assert log.voter_history.last_value() == voters(1, 2, 3, 4)
    installed = RaftLog()
    installed.install_snapshot(6, 1, voters(1, 2, 3, 4), KRAFT_VERSION_1)
    assert installed.voter_history.last_value() == voters(1, 2, 3, 4)
    assert installed.voter_history.kraft_version() == KRAFT_VERSION_1


def test_only_an_empty_log_is_bootstrapped():
    with pytest.raises(ValueError):
        dynamic_log().bootstrap(voters(1, 2, 3))


def test_a_voter_set_the_history_refuses_leaves_the_log_as_it_was():
    log = RaftLog([])
    log.append(LogEntry(1, VotersRecord(voters(1, 2, 3))))
    end, entries = log.end_offset, len(log.entries)
    with pytest.raises(ValueError):
        log.append(LogEntry(1, VotersRecord(voters(1, 2, 3, 4, 5))))  # no overlapping majority
    assert (log.end_offset, len(log.entries), len(log.bases)) == (end, entries, entries)
    assert log.voter_history.last_value() == voters(1, 2, 3)
