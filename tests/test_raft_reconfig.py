"""A dynamic quorum in the Raft core (KIP-853), scenario by scenario from Kafka's
KafkaRaftClientReconfigTest and QuorumStateTest: the voter set read from the log, observers (a replica on
another disk is not the voter), directory ids on Vote and BeginQuorumEpoch, and AddRaftVoter /
RemoveRaftVoter on the leader (AddVoterHandler, RemoveVoterHandler)."""

from __future__ import annotations

import random
import uuid

import pytest

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft.client import RaftClient
from epochkraft.raft.log import LeaderChangeMessage, LogEntry, RaftLog
from epochkraft.raft.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
)
from epochkraft.raft.quorum_state import QuorumStateData
from epochkraft.raft.voter_set import (
    KRAFT_VERSION_1,
    Endpoint,
    KRaftVersionRecord,
    ReplicaKey,
    VoterSet,
    VotersRecord,
)
from tests.raft_context import SETTINGS, RaftTestContext

DIR = {n: uuid.UUID(int=n) for n in range(1, 10)}
NEW_DISK = uuid.UUID(int=99)
OPERATOR = 0  # the admin client's connection


def voters(*nodes: int, **disks: uuid.UUID) -> VoterSet:
    return VoterSet(tuple(ReplicaKey(n, disks.get(f"n{n}", DIR[n])) for n in nodes))


def leader_with_high_watermark() -> RaftTestContext:
    """Voter 1 leads epoch 1 of the bootstrapped quorum {1, 2, 3}; voter 2 has fetched its start-of-epoch
    records (LeaderChange, KRaftVersion, Voters at 0-2), so the high watermark is 3."""
    ctx = RaftTestContext(1, bootstrap=voters(1, 2, 3), directory_id=DIR[1])
    ctx.become_leader()
    ctx.acknowledge_begin_quorum()
    ctx.fetch_from(2, 3, 1, directory_id=DIR[2])
    assert ctx.client.high_watermark == 3
    return ctx


def observer_caught_up(ctx: RaftTestContext, node: int, directory_id: uuid.UUID) -> None:
    reply = ctx.fetch_from(node, ctx.log.end_offset, ctx.log.last_fetched_epoch, directory_id=directory_id)
    assert reply.error_code == ErrorCode.none


def operator(ctx: RaftTestContext, request: AddRaftVoterRequest | RemoveRaftVoterRequest) -> int:
    return ctx.deliver(OPERATOR, request)


def answer(ctx: RaftTestContext, correlation: int) -> AddRaftVoterResponse | RemoveRaftVoterResponse | None:
    replies = [e for e in ctx.sent if e.is_response and e.correlation_id == correlation]
    if not replies:
        return None
    ctx.sent.remove(replies[0])
    reply = replies[0].message
    assert isinstance(reply, AddRaftVoterResponse | RemoveRaftVoterResponse)
    return reply


# ---- the voter set in the log ------------------------------------------------------------------------------
def test_testLeaderWritesBootstrapRecords():
    ctx = leader_with_high_watermark()
    values = [entry.value for entry in ctx.log.entries]
    assert values == [
        LeaderChangeMessage(1, (1, 2, 3), (1, 2)),
        KRaftVersionRecord(KRAFT_VERSION_1),
        VotersRecord(voters(1, 2, 3)),
    ]
    assert ctx.client.kraft_version == KRAFT_VERSION_1 and ctx.client.voters == (1, 2, 3)


def test_testLeaderDoesNotBootstrapRecordsWithKraftVersion0():
    ctx = RaftTestContext(1, (1, 2, 3))
    ctx.become_leader()
    assert [type(entry.value) for entry in ctx.log.entries] == [LeaderChangeMessage]
    assert ctx.client.kraft_version == 0 and ctx.client.voter_set == VoterSet.static((1, 2, 3))


def test_testFollowerReadsVotersRecordUncommitted():
    """A replica uses the latest voter set in its log, committed or not, and forgets it on truncation."""
    ctx = RaftTestContext(
        2, bootstrap=voters(1, 2, 3), directory_id=DIR[2], persisted=QuorumStateData(1, 1, -1, (1, 2, 3))
    )
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 1)
    assert fetch.message.replica_directory_id == DIR[2]
    records = (LogEntry(1, VotersRecord(voters(1, 2, 3))), LogEntry(1, VotersRecord(voters(1, 2, 3, 4))))
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 1, 1, 0, records))
    assert ctx.client.voters == (1, 2, 3, 4) and ctx.client.high_watermark == 0
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 1)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 1, 1, 1, diverging_epoch=DivergingEpoch(1, 1)))
    assert ctx.log.end_offset == 1 and ctx.client.voter_set == voters(1, 2, 3)


def test_snapshot_installed_with_its_voter_set():
    ctx = RaftTestContext(
        2, bootstrap=voters(1, 2, 3), directory_id=DIR[2], persisted=QuorumStateData(3, 1, -1, (1, 2, 3))
    )
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 1)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 1, 3, 50, snapshot_id=_snapshot(50, 3)))
    ctx.client.install_snapshot(ctx.now_ms, 50, 3, voters(1, 2, 4), KRAFT_VERSION_1)
    assert ctx.client.voter_set == voters(1, 2, 4) and ctx.client.high_watermark == 50


def _snapshot(end_offset: int, epoch: int):
    from epochkraft.raft.messages import SnapshotRef

    return SnapshotRef(end_offset, epoch)


# ---- directory ids on Vote and BeginQuorumEpoch ----------------------------------------------------------------
def test_vote_requests_name_each_voters_directory_id():
    ctx = RaftTestContext(1, bootstrap=voters(1, 2, 3), directory_id=DIR[1])
    ctx.poll_until_deadline()
    requests = {e.destination: e.message for e in ctx.take(VoteRequest)}
    assert {n: (r.candidate_directory_id, r.voter_directory_id) for n, r in requests.items()} == {
        2: (DIR[1], DIR[2]),
        3: (DIR[1], DIR[3]),
    }


@pytest.mark.parametrize(
    ("voter_directory_id", "error", "granted"),
    [
        (DIR[1], ErrorCode.none, True),
        (None, ErrorCode.none, True),  # a candidate of a static quorum names none
        (NEW_DISK, ErrorCode.invalid_voter_key, False),  # the candidate asks another disk of node 1
    ],
)
def test_testHandleVoteRequestWithDirectoryId(voter_directory_id, error, granted):
    """KafkaRaftClient.handleVoteRequest with isValidVoterKey."""
    ctx = RaftTestContext(1, bootstrap=voters(1, 2, 3), directory_id=DIR[1])
    correlation = ctx.deliver(2, VoteRequest(1, 2, 0, 0, False, DIR[2], voter_directory_id))
    assert ctx.reply_to(correlation) == VoteResponse(error, -1, 1, granted)
    assert ctx.client.quorum_state().voted_id == (2 if granted else -1)


def test_a_wiped_voter_refuses_the_vote_its_old_disk_would_have_given():
    """Issue 26's scenario 1, on the core: node 3 is back on a new disk (an empty log, a new directory
    id). Candidate 2, lacking committed entries, asks node 3's old key for its vote and is refused, so it
    cannot complete a majority with an empty log."""
    ctx = RaftTestContext(3, bootstrap=voters(1, 2, 3), directory_id=NEW_DISK)
    for pre_vote, epoch in ((True, 2), (False, 2)):
        correlation = ctx.deliver(2, VoteRequest(epoch, 2, 1, 5, pre_vote, DIR[2], DIR[3]))
        reply = ctx.reply_to(correlation)
        assert isinstance(reply, VoteResponse) and not reply.vote_granted
        assert reply.error_code == ErrorCode.invalid_voter_key


@pytest.mark.parametrize(
    ("voter_directory_id", "error", "role"),
    [(DIR[2], ErrorCode.none, "follower"), (NEW_DISK, ErrorCode.invalid_voter_key, "unattached")],
)
def test_testHandleBeginQuorumEpochRequestWithDirectoryId(voter_directory_id, error, role):
    ctx = RaftTestContext(2, bootstrap=voters(1, 2, 3), directory_id=DIR[2])
    correlation = ctx.deliver(1, BeginQuorumEpochRequest(1, 4, voter_directory_id))
    reply = ctx.reply_to(correlation)
    assert isinstance(reply, BeginQuorumEpochResponse) and reply.error_code == error
    assert ctx.client.role == role


def test_leader_sends_begin_quorum_epoch_with_the_voters_directory_id():
    ctx = RaftTestContext(1, bootstrap=voters(1, 2, 3), directory_id=DIR[1])
    ctx.become_leader()
    requests = {e.destination: e.message.voter_directory_id for e in ctx.take(BeginQuorumEpochRequest)}
    assert requests == {2: DIR[2], 3: DIR[3]}


# ---- observers (QuorumStateTest) --------------------------------------------------------------------------------
def test_testObserverCannotBecomeCandidateOrLeader():
    """Node 3 on a new disk: the voter set names its old disk, so it is an observer; it never stands and
    fetches from a bootstrap server instead."""
    ctx = RaftTestContext(3, bootstrap=voters(1, 2, 3), directory_id=NEW_DISK)
    assert not ctx.client.is_voter
    for _ in range(5):
        ctx.poll_until_deadline()
        assert ctx.client.role == "unattached"
    assert ctx.take(VoteRequest) == []
    fetches = ctx.take(FetchRequest)
    assert {e.destination for e in fetches} == {1, 2}
    assert all(e.message.replica_directory_id == NEW_DISK for e in fetches)


def test_testObserverDiscoversLeaderWithUnknownVoters():
    """A controller formatted without initial voters knows none: it finds the leader through a bootstrap
    server's answer, follows it, reads the voter set from the log and stays an observer."""
    log = RaftLog()
    client = RaftClient(
        4, (), log, 0, settings=SETTINGS, rng=random.Random(0), directory_id=DIR[4], bootstrap_servers=(1, 2)
    )
    ctx = RaftTestContext.__new__(RaftTestContext)
    ctx.__dict__.update(now_ms=0, log=log, client=client, local_id=4, voters=(), sent=[], persisted=[])
    ctx._correlation = 1000
    ctx.poll_until_deadline()
    [fetch] = ctx.take(FetchRequest)
    ctx.respond(fetch, FetchResponse(ErrorCode.not_leader_or_follower, 1, 5, -1))
    assert ctx.client.role == "follower" and ctx.client.leader_id == 1 and ctx.client.epoch == 5
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 1)
    records = (LogEntry(5, VotersRecord(voters(1, 2, 3))),)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 1, 5, 1, records))
    assert ctx.client.voters == (1, 2, 3) and not ctx.client.is_voter
    # testObserverFollowerToUnattached: its fetches time out; it looks for the leader, never stands
    ctx.poll(SETTINGS.fetch_timeout_ms)
    assert ctx.client.role == "unattached"
    ctx.poll_until_deadline()
    assert ctx.take(VoteRequest) == [] and ctx.take(FetchRequest)


def test_testObserverWithIdCanVote():
    """A replica that does not know itself a voter (its log lacks the VotersRecord that adds it) still
    votes for a candidate that names its exact key: the candidate's newer voter set has it."""
    ctx = RaftTestContext(4, bootstrap=voters(1, 2, 3), directory_id=DIR[4])
    correlation = ctx.deliver(1, VoteRequest(2, 1, 1, 5, False, DIR[1], DIR[4]))
    assert ctx.reply_to(correlation) == VoteResponse(ErrorCode.none, -1, 2, True)


def test_observer_fetches_do_not_advance_the_high_watermark():
    """LeaderState.updateReplicaState: node 3's fetch on another disk is an observer's."""
    ctx = leader_with_high_watermark()
    ctx.client.append(ctx.now_ms, [b"x"])
    ctx.fetch_from(3, 4, 1, directory_id=NEW_DISK)
    assert ctx.client.high_watermark == 3
    assert ReplicaKey(3, NEW_DISK) in ctx.client.state.observers
    ctx.fetch_from(3, 4, 1, directory_id=DIR[3])
    assert ctx.client.high_watermark == 4


@pytest.mark.parametrize(("disk", "role"), [(NEW_DISK, "resigned"), (None, "leader")])
def test_check_quorum_counts_only_voters(disk, role):
    ctx = leader_with_high_watermark()
    for _ in range(6):  # two check-quorum periods: the first counts voter 2's fetch at the election
        ctx.now_ms += SETTINGS.fetch_timeout_ms // 2
        for node in (2, 3):
            ctx.fetch_from(node, 3, 1, directory_id=disk or DIR[node])
        ctx.poll()
    assert ctx.client.role == role


# ---- AddRaftVoter (AddVoterHandler) --------------------------------------------------------------------------
def test_testAddVoter():
    ctx = leader_with_high_watermark()
    observer_caught_up(ctx, 4, DIR[4])
    correlation = operator(ctx, AddRaftVoterRequest(4, DIR[4]))
    # the new set holds as soon as it is in the log (uncommitted), the answer waits for its commit
    assert ctx.log.entries[-1].value == VotersRecord(voters(1, 2, 3, 4))
    assert ctx.client.voters == (1, 2, 3, 4) and answer(ctx, correlation) is None
    ctx.fetch_from(2, 4, 1, directory_id=DIR[2])
    assert ctx.client.high_watermark == 3  # 2 of 4 is no majority any more
    ctx.fetch_from(4, 4, 1, directory_id=DIR[4])
    assert ctx.client.high_watermark == 4
    assert answer(ctx, correlation) == AddRaftVoterResponse(ErrorCode.none)


def not_leader() -> RaftTestContext:
    return RaftTestContext(
        2, bootstrap=voters(1, 2, 3), directory_id=DIR[2], persisted=QuorumStateData(1, 1, -1, (1, 2, 3))
    )


def static_leader() -> RaftTestContext:
    ctx = RaftTestContext(1, (1, 2, 3))
    ctx.become_leader()
    ctx.fetch_from(2, 1, 1)
    assert ctx.client.high_watermark == 1
    return ctx


def unfenced_leader() -> RaftTestContext:
    ctx = RaftTestContext(1, bootstrap=voters(1, 2, 3), directory_id=DIR[1])
    ctx.become_leader()
    return ctx


def pending_add() -> RaftTestContext:
    ctx = leader_with_high_watermark()
    observer_caught_up(ctx, 4, DIR[4])
    operator(ctx, AddRaftVoterRequest(4, DIR[4]))
    observer_caught_up(ctx, 5, DIR[5])
    return ctx


def uncommitted_add_timed_out() -> RaftTestContext:
    ctx = pending_add()
    ctx.poll(SETTINGS.request_timeout_ms)  # the first change is answered REQUEST_TIMED_OUT, uncommitted
    return ctx


@pytest.mark.parametrize(
    ("name", "setup", "change", "error"),
    [
        ("testAddVoterToNotLeader", not_leader, AddRaftVoterRequest(5, DIR[5]), ErrorCode.not_leader_or_follower),
        ("testAddVoterWithKraftVersion0", static_leader, AddRaftVoterRequest(5, DIR[5]), ErrorCode.unsupported_version),
        ("testAddVoterWithoutFencedPreviousLeaders", unfenced_leader, AddRaftVoterRequest(5, DIR[5]), ErrorCode.request_timed_out),
        ("testAddVoterWithExistingVoter", leader_with_high_watermark, AddRaftVoterRequest(2, NEW_DISK), ErrorCode.duplicate_voter),
        ("testAddVoterWithLaggingNewVoter", leader_with_high_watermark, AddRaftVoterRequest(5, DIR[5]), ErrorCode.request_timed_out),
        ("testAddVoterWithPendingAddVoter", pending_add, AddRaftVoterRequest(5, DIR[5]), ErrorCode.request_timed_out),
        ("uncommitted VotersRecord", uncommitted_add_timed_out, AddRaftVoterRequest(5, DIR[5]), ErrorCode.request_timed_out),
        ("testRemoveVoterToNotLeader", not_leader, RemoveRaftVoterRequest(3, DIR[3]), ErrorCode.not_leader_or_follower),
        ("testRemoveVoterWithKraftVersion0", static_leader, RemoveRaftVoterRequest(3, DIR[3]), ErrorCode.unsupported_version),
        ("testRemoveVoterWithoutFencedPreviousLeaders", unfenced_leader, RemoveRaftVoterRequest(3, DIR[3]), ErrorCode.request_timed_out),
        ("testRemoveVoterWithNoneVoter", leader_with_high_watermark, RemoveRaftVoterRequest(5, DIR[5]), ErrorCode.voter_not_found),
        ("testRemoveVoterWithNoneVoter (other disk)", leader_with_high_watermark, RemoveRaftVoterRequest(3, NEW_DISK), ErrorCode.voter_not_found),
        ("testRemoveVoterWithPendingAddVoter", pending_add, RemoveRaftVoterRequest(3, DIR[3]), ErrorCode.request_timed_out),
    ],
)  # fmt: skip
def test_voter_change_refused(name, setup, change, error):
    ctx = setup()
    before = ctx.log.end_offset
    reply = answer(ctx, operator(ctx, change))
    assert reply is not None and reply.error_code == error, name
    adding = isinstance(change, AddRaftVoterRequest)
    assert isinstance(reply, AddRaftVoterResponse if adding else RemoveRaftVoterResponse)
    assert ctx.log.end_offset == before  # nothing written


def test_testAddVoterTimeout():
    ctx = leader_with_high_watermark()
    observer_caught_up(ctx, 4, DIR[4])
    correlation = operator(ctx, AddRaftVoterRequest(4, DIR[4]))
    ctx.poll(SETTINGS.request_timeout_ms - 1)
    assert answer(ctx, correlation) is None
    ctx.poll(1)
    assert answer(ctx, correlation) == AddRaftVoterResponse(ErrorCode.request_timed_out)
    assert ctx.client.voters == (1, 2, 3, 4)  # the record stays in the log, as in Kafka


def test_testAddVoterFailsWhenLosingLeadership():
    ctx = leader_with_high_watermark()
    observer_caught_up(ctx, 4, DIR[4])
    correlation = operator(ctx, AddRaftVoterRequest(4, DIR[4]))
    ctx.deliver(2, BeginQuorumEpochRequest(2, 2, DIR[1]))
    assert ctx.client.role == "follower"
    assert answer(ctx, correlation) == AddRaftVoterResponse(ErrorCode.not_leader_or_follower)


# ---- RemoveRaftVoter (RemoveVoterHandler) ------------------------------------------------------------------------
def test_testRemoveVoter():
    ctx = leader_with_high_watermark()
    correlation = operator(ctx, RemoveRaftVoterRequest(3, DIR[3]))
    assert ctx.client.voters == (1, 2) and answer(ctx, correlation) is None
    ctx.fetch_from(3, 4, 1, directory_id=DIR[3])  # no longer a voter: an observer's fetch
    assert ctx.client.high_watermark == 3
    ctx.fetch_from(2, 4, 1, directory_id=DIR[2])
    assert ctx.client.high_watermark == 4
    assert answer(ctx, correlation) == RemoveRaftVoterResponse(ErrorCode.none)


def test_testRemoveVoterIsLeader():
    """The leader removes itself: it leads until the removal commits (counting only {2, 3}), then resigns
    and, an observer now, never stands again."""
    ctx = leader_with_high_watermark()
    correlation = operator(ctx, RemoveRaftVoterRequest(1, DIR[1]))
    assert not ctx.client.is_voter and ctx.client.is_leader
    ctx.fetch_from(2, 4, 1, directory_id=DIR[2])
    assert ctx.client.high_watermark == 3  # itself not counted: 1 of {2, 3}
    ctx.fetch_from(3, 4, 1, directory_id=DIR[3])
    assert ctx.client.high_watermark == 4
    assert answer(ctx, correlation) == RemoveRaftVoterResponse(ErrorCode.none)
    ctx.poll()
    assert ctx.client.role == "resigned"
    assert {e.destination for e in ctx.take(EndQuorumEpochRequest)} == {2, 3}
    for _ in range(4):
        ctx.poll_until_deadline()
    assert ctx.client.role == "unattached" and ctx.take(VoteRequest) == []
    # it voted for itself in the epoch it led and keeps that vote (QuorumState.votedKey)
    assert ctx.client.state.voted_id == 1


def test_testRemoveVoterTimedOut():
    ctx = leader_with_high_watermark()
    correlation = operator(ctx, RemoveRaftVoterRequest(3, DIR[3]))
    ctx.poll(SETTINGS.request_timeout_ms)
    assert answer(ctx, correlation) == RemoveRaftVoterResponse(ErrorCode.request_timed_out)


def test_an_added_voter_stands_once_it_reads_itself_in_the_voter_set():
    ctx = RaftTestContext(
        4, bootstrap=voters(1, 2, 3), directory_id=DIR[4], persisted=QuorumStateData(1, 1, -1, ())
    )
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 1)
    ctx.respond(
        fetch, FetchResponse(ErrorCode.none, 1, 1, 1, (LogEntry(1, VotersRecord(voters(1, 2, 3, 4))),))
    )
    assert ctx.client.is_voter
    ctx.poll(SETTINGS.fetch_timeout_ms)
    assert ctx.client.role == "prospective"
    assert {e.destination for e in ctx.take(VoteRequest)} == {1, 2, 3}


# ---- listeners: AddRaftVoter's and UpdateRaftVoter (82) ----------------------------------------------------------
NEW_LISTENER = (Endpoint("CONTROLLER", "127.0.0.1", 9994),)


def test_added_voters_listeners_go_into_the_voters_record():
    """KafkaRaftClientReconfigTest.testAddVoter: the VotersRecord carries the new voter's listeners (the
    endpoints the others reach it on)."""
    ctx = leader_with_high_watermark()
    observer_caught_up(ctx, 4, DIR[4])
    operator(ctx, AddRaftVoterRequest(4, DIR[4], listeners=NEW_LISTENER))
    record = ctx.log.entries[-1].value
    assert isinstance(record, VotersRecord)
    assert (
        record.voters.endpoints_of(4) == NEW_LISTENER and ctx.client.voter_set.endpoints_of(4) == NEW_LISTENER
    )


def update(ctx: RaftTestContext, request: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
    reply = ctx.reply_to(ctx.deliver(request.voter_id, request))
    assert isinstance(reply, UpdateRaftVoterResponse)
    return reply


def test_testUpdateVoter():
    """KafkaRaftClientReconfigTest.testUpdateVoter: the leader writes the voter's new listeners in a
    VotersRecord and answers at once; the same listeners again write nothing."""
    ctx = leader_with_high_watermark()
    reply = update(ctx, UpdateRaftVoterRequest(1, 2, DIR[2], NEW_LISTENER))
    assert reply == UpdateRaftVoterResponse(ErrorCode.none, 1, 1)
    record = ctx.log.entries[-1].value
    assert isinstance(record, VotersRecord) and record.voters.endpoints_of(2) == NEW_LISTENER
    assert record.voters.voters == voters(1, 2, 3).voters
    ctx.fetch_from(2, ctx.log.end_offset, 1, directory_id=DIR[2])
    end = ctx.log.end_offset
    assert update(ctx, UpdateRaftVoterRequest(1, 2, DIR[2], NEW_LISTENER)).error_code == ErrorCode.none
    assert ctx.log.end_offset == end


@pytest.mark.parametrize(
    ("name", "setup", "change", "error"),
    [
        ("testUpdateVoterToNotLeader", not_leader, UpdateRaftVoterRequest(1, 2, DIR[2], NEW_LISTENER), ErrorCode.not_leader_or_follower),
        ("testUpdateVoterWithKraftVersion0 (nothing to write)", static_leader, UpdateRaftVoterRequest(1, 2, DIR[2], NEW_LISTENER), ErrorCode.none),
        ("testUpdateVoterWithoutFencedPreviousLeaders", unfenced_leader, UpdateRaftVoterRequest(1, 2, DIR[2], NEW_LISTENER), ErrorCode.request_timed_out),
        ("testUpdateVoterWithNoneVoter", leader_with_high_watermark, UpdateRaftVoterRequest(1, 5, DIR[5], NEW_LISTENER), ErrorCode.voter_not_found),
        ("testUpdateVoterWithNoneVoter (other disk)", leader_with_high_watermark, UpdateRaftVoterRequest(1, 2, NEW_DISK, NEW_LISTENER), ErrorCode.voter_not_found),
        ("testUpdateVoterWithPendingAddVoter", pending_add, UpdateRaftVoterRequest(1, 2, DIR[2], NEW_LISTENER), ErrorCode.request_timed_out),
        ("testInvalidUpdateVoter (no listeners)", leader_with_high_watermark, UpdateRaftVoterRequest(1, 2, DIR[2], ()), ErrorCode.invalid_request),
        ("testInvalidUpdateVoter (kraft.version unsupported)", leader_with_high_watermark, UpdateRaftVoterRequest(1, 2, DIR[2], NEW_LISTENER, (0, 0)), ErrorCode.invalid_request),
        ("testUpdateVoterOldEpoch", leader_with_high_watermark, UpdateRaftVoterRequest(0, 2, DIR[2], NEW_LISTENER), ErrorCode.fenced_leader_epoch),
        ("testUpdateVoterNewEpoch", leader_with_high_watermark, UpdateRaftVoterRequest(2, 2, DIR[2], NEW_LISTENER), ErrorCode.unknown_leader_epoch),
    ],
)  # fmt: skip
def test_update_voter_refused(name, setup, change, error):
    ctx = setup()
    before = ctx.log.end_offset
    assert update(ctx, change).error_code == error, name
    assert ctx.log.end_offset == before  # nothing written


def test_testDescribeQuorumWithVotersAndObservers():
    """KafkaRaftClientReconfigTest / KafkaRaftClientTest.testDescribeQuorum at v2: voters and observers with
    their directory ids, and the voters' listeners in ``nodes``."""
    from epochkraft.raft.describe_quorum import describe_quorum

    endpoints = {n: (Endpoint("CONTROLLER", "127.0.0.1", 9300 + n),) for n in (1, 2, 3)}
    bootstrap = VoterSet(voters(1, 2, 3).voters, tuple(endpoints.items()))
    ctx = RaftTestContext(1, bootstrap=bootstrap, directory_id=DIR[1])
    ctx.become_leader()
    ctx.fetch_from(2, 3, 1, directory_id=DIR[2])
    observer_caught_up(ctx, 4, DIR[4])
    [partition] = describe_quorum(ctx.client, 100).topics[0].partitions
    assert [(r.replica_id, r.replica_directory_id) for r in partition.current_voters] == [
        (n, DIR[n]) for n in (1, 2, 3)
    ]
    assert [(r.replica_id, r.replica_directory_id) for r in partition.observers] == [(4, DIR[4])]
    nodes = describe_quorum(ctx.client, 100).nodes
    assert {n.node_id: (n.listeners[0].host, n.listeners[0].port) for n in nodes} == {
        n: ("127.0.0.1", 9300 + n) for n in (1, 2, 3)
    }


def follower_voter(local_endpoints) -> RaftTestContext:
    """Voter 2 of the bootstrapped {1, 2, 3} (each on CONTROLLER://127.0.0.1:930N), following leader 1."""
    endpoints = {n: (Endpoint("CONTROLLER", "127.0.0.1", 9300 + n),) for n in (1, 2, 3)}
    bootstrap = VoterSet(voters(1, 2, 3).voters, tuple(endpoints.items()))
    return RaftTestContext(
        2,
        bootstrap=bootstrap,
        directory_id=DIR[2],
        persisted=QuorumStateData(1, 1, -1, (1, 2, 3)),
        local_endpoints=local_endpoints,
    )


def fetch_once(ctx: RaftTestContext) -> None:
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 1)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 1, 1, 0))


def test_testFollowerSendsUpdateVoter():
    """KafkaRaftClientReconfigTest.testFollowerSendsUpdateVoter: a voter whose listeners differ from the
    voter set's tells the leader once it has fetched from it; a failed answer is retried, a NONE is the
    last."""
    ctx = follower_voter(NEW_LISTENER)
    ctx.poll()
    assert not ctx.take(UpdateRaftVoterRequest)  # not before it has heard from the leader
    fetch_once(ctx)
    [update] = ctx.take(UpdateRaftVoterRequest, 1)
    assert update.message == UpdateRaftVoterRequest(1, 2, DIR[2], NEW_LISTENER)
    ctx.respond(update, UpdateRaftVoterResponse(ErrorCode.request_timed_out, 1, 1))
    ctx.poll(SETTINGS.retry_backoff_ms)
    [update] = ctx.take(UpdateRaftVoterRequest, 1)
    ctx.respond(update, UpdateRaftVoterResponse(ErrorCode.none, 1, 1))
    ctx.poll(SETTINGS.request_timeout_ms)
    assert not ctx.take(UpdateRaftVoterRequest)


def test_follower_with_its_listeners_in_the_voter_set_sends_no_update_voter():
    """Unlike Kafka, which sends UpdateRaftVoter to every new leader: only listeners that differ are sent,
    so a voter restarted on the same address writes no VotersRecord."""
    ctx = follower_voter((Endpoint("CONTROLLER", "127.0.0.1", 9302),))
    fetch_once(ctx)
    ctx.poll(SETTINGS.request_timeout_ms)
    assert not ctx.take(UpdateRaftVoterRequest)
