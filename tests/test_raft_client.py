"""The Raft core, scenario by scenario from Kafka's KafkaRaftClientTest and KafkaRaftClientPreVoteTest."""

from __future__ import annotations

import pytest

from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft import replication as raft_client
from epochkraft.raft.log import LogEntry, RaftLog
from epochkraft.raft.messages import (
    BeginQuorumEpochRequest,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    SnapshotRef,
    VoteRequest,
    VoteResponse,
)
from epochkraft.raft.quorum_state import QuorumStateData
from tests.raft_context import SETTINGS, RaftTestContext, leader_change


def test_testInitializeSingleMemberQuorum():
    ctx = RaftTestContext(1, (1,))
    assert ctx.client.role == "unattached"
    ctx.poll_until_deadline()
    assert ctx.client.is_leader and ctx.client.epoch == 1
    assert ctx.persisted[-1] == QuorumStateData(1, 1, 1, (1,))
    assert ctx.sent == []


def test_testLeaderAppendSingleMemberQuorum():
    ctx = RaftTestContext(1, (1,))
    ctx.poll_until_deadline()
    # the LeaderChangeMessage at offset 0 is committed at once: the leader is the majority
    assert ctx.client.high_watermark == 1
    assert ctx.log.entries[0].is_control
    assert ctx.client.append(ctx.now_ms, [b"a", b"b"]) == 2
    assert ctx.client.high_watermark == 3
    assert [e.value for e in ctx.log.entries[1:]] == [b"a", b"b"]


def test_testInitializeAsResignedLeaderFromStateStore():
    ctx = RaftTestContext(1, persisted=QuorumStateData(5, 1, 1, (1, 2, 3)), log=[(5, b"x")])
    assert ctx.client.role == "resigned" and ctx.client.epoch == 5
    ctx.poll()
    assert {e.destination for e in ctx.take(EndQuorumEpochRequest)} == {2, 3}
    assert ctx.client.append(ctx.now_ms, [b"y"]) is None
    # it votes for nobody in its own epoch
    correlation = ctx.deliver(2, VoteRequest(5, 2, 4, 9))
    assert ctx.reply_to(correlation) == VoteResponse(ErrorCode.none, -1, 5, False)


def test_testInitializeAsFollowerNonEmptyLog():
    ctx = RaftTestContext(1, persisted=QuorumStateData(4, 2, -1, (1, 2, 3)), log=[(3, b"a")])
    assert ctx.client.role == "follower" and ctx.client.leader_id == 2
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 2)
    assert fetch.message == FetchRequest(1, 4, 1, 3, 500)


def test_testInitializeAsCandidateAndBecomeLeaderQuorumOfThree():
    ctx = RaftTestContext(1)
    ctx.become_leader()
    assert ctx.client.epoch == 1 and ctx.persisted[-1] == QuorumStateData(1, 1, 1, (1, 2, 3))
    [entry] = ctx.log.entries
    assert entry.is_control and entry.value.leader_id == 1
    assert {e.destination for e in ctx.take(BeginQuorumEpochRequest)} == {2, 3}
    # no high watermark until a majority holds the LeaderChangeMessage
    assert ctx.client.high_watermark is None
    ctx.fetch_from(2, 0, 0)
    assert ctx.client.high_watermark is None
    ctx.fetch_from(2, 1, 1)
    assert ctx.client.high_watermark == 1


def test_prospective_asks_pre_votes_without_raising_the_epoch():
    """KIP-996: the pre-vote asks for epoch + 1, nothing is persisted, and one rejection from a voter that
    has a leader sends the prospective voter back to following it."""
    ctx = RaftTestContext(1, persisted=QuorumStateData(3, -1, -1, (1, 2, 3)), log=[(3, b"a")])
    persisted = list(ctx.persisted)
    ctx.poll_until_deadline()
    assert ctx.client.role == "prospective" and ctx.client.epoch == 3 and ctx.persisted == persisted
    requests = ctx.take(VoteRequest)
    assert {r.message for r in requests} == {VoteRequest(4, 1, 3, 1, pre_vote=True)}
    ctx.respond(requests[0], VoteResponse(ErrorCode.none, 3, 3, False))
    assert ctx.client.role == "follower" and ctx.client.leader_id == 3 and ctx.client.epoch == 3


@pytest.mark.parametrize("has_fetched_from_leader", [True, False])
def test_testHandlePreVoteRequestAsFollowerWithElectedLeader(has_fetched_from_leader):
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, 3, -1, (1, 2, 3)))
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    if has_fetched_from_leader:
        ctx.respond(fetch, FetchResponse(ErrorCode.none, 3, 2, 0))
    correlation = ctx.deliver(2, VoteRequest(3, 2, 0, 0, pre_vote=True))
    reply = ctx.reply_to(correlation)
    assert reply.vote_granted is (not has_fetched_from_leader)
    assert ctx.client.role == "follower" and ctx.client.epoch == 2  # a pre-vote changes nothing


def test_testHandleValidVoteRequestAsFollower():
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, -1, -1, (1, 2, 3)))
    correlation = ctx.deliver(2, VoteRequest(3, 2, 0, 0))
    assert ctx.reply_to(correlation) == VoteResponse(ErrorCode.none, -1, 3, True)
    assert ctx.persisted[-1] == QuorumStateData(3, -1, 2, (1, 2, 3))
    # the same epoch: a second candidate is refused, the first granted again
    assert not ctx.reply_to(ctx.deliver(3, VoteRequest(3, 3, 0, 0))).vote_granted
    assert ctx.reply_to(ctx.deliver(2, VoteRequest(3, 2, 0, 0))).vote_granted


def test_vote_refused_to_a_candidate_with_an_older_log():
    """Election restriction: a candidate whose last epoch is older, or the same with a shorter log, loses."""
    ctx = RaftTestContext(1, log=[(1, b"a"), (2, b"b")])
    assert not ctx.reply_to(ctx.deliver(2, VoteRequest(3, 2, 1, 5))).vote_granted
    assert not ctx.reply_to(ctx.deliver(3, VoteRequest(4, 3, 2, 1))).vote_granted
    assert ctx.reply_to(ctx.deliver(3, VoteRequest(5, 3, 2, 2))).vote_granted


def test_testHandleInvalidVoteRequest():
    ctx = RaftTestContext(1)
    assert ctx.reply_to(ctx.deliver(2, VoteRequest(1, 2, 1, 0))).error_code == ErrorCode.invalid_request
    assert ctx.reply_to(ctx.deliver(2, VoteRequest(1, 2, 0, -1))).error_code == ErrorCode.invalid_request
    assert (
        ctx.reply_to(ctx.deliver(9, VoteRequest(1, 9, 0, 0))).error_code == ErrorCode.inconsistent_voter_set
    )


def test_testLeaderIgnoreVoteRequestOnSameEpoch():
    ctx = RaftTestContext(1)
    ctx.become_leader()
    reply = ctx.reply_to(ctx.deliver(2, VoteRequest(ctx.client.epoch, 2, 0, 0)))
    assert reply == VoteResponse(ErrorCode.none, 1, 1, False) and ctx.client.is_leader


def test_testRetryElection():
    ctx = RaftTestContext(1)
    ctx.become_candidate()
    epoch = ctx.client.epoch
    for request in ctx.take(VoteRequest):
        ctx.respond(request, VoteResponse(ErrorCode.none, -1, epoch, False))
    ctx.poll()
    assert ctx.client.role == "candidate"  # lost: backing off
    ctx.poll_until_deadline()
    assert ctx.client.role == "prospective"
    for request in ctx.take(VoteRequest):
        ctx.respond(request, VoteResponse(ErrorCode.none, -1, epoch, True))
    assert ctx.client.role == "candidate" and ctx.client.epoch == epoch + 1


def test_testVoteResponseIgnoredAfterBecomingFollower():
    ctx = RaftTestContext(1)
    ctx.become_candidate()
    requests = ctx.take(VoteRequest)
    ctx.deliver(3, BeginQuorumEpochRequest(3, ctx.client.epoch))
    assert ctx.client.role == "follower" and ctx.client.leader_id == 3
    for request in requests:
        ctx.respond(request, VoteResponse(ErrorCode.none, -1, ctx.client.epoch, True))
    assert ctx.client.role == "follower" and ctx.client.leader_id == 3


def test_testHandleBeginQuorumRequest():
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, -1, 1, (1, 2, 3)))
    correlation = ctx.deliver(2, BeginQuorumEpochRequest(2, 2))
    assert ctx.reply_to(correlation).error_code == ErrorCode.none
    assert ctx.client.role == "follower" and ctx.client.leader_id == 2
    assert ctx.persisted[-1] == QuorumStateData(2, 2, 1, (1, 2, 3))


def test_testHandleEndQuorumRequest():
    ctx = RaftTestContext(1, persisted=QuorumStateData(6, 2, -1, (1, 2, 3)))
    correlation = ctx.deliver(2, EndQuorumEpochRequest(2, 6, (1, 3)))
    assert ctx.reply_to(correlation) == EndQuorumEpochResponse(ErrorCode.none, 2, 6)
    # the first preferred successor starts its election at once
    ctx.poll()
    assert ctx.client.role == "prospective"


def test_testHandleEndQuorumRequestWithLowerPriorityToBecomeLeader():
    ctx = RaftTestContext(1, persisted=QuorumStateData(6, 2, -1, (1, 2, 3)))
    ctx.deliver(2, EndQuorumEpochRequest(2, 6, (3, 1)))
    ctx.poll()
    assert ctx.client.role == "follower"
    ctx.poll(SETTINGS.retry_backoff_ms)
    assert ctx.client.role == "prospective"


def test_testElectionTimeoutAfterUserInitiatedResign():
    ctx = RaftTestContext(1)
    ctx.become_leader()
    ctx.fetch_from(3, 1, 1)
    epoch = ctx.client.epoch
    ctx.take(BeginQuorumEpochRequest)
    ctx.resign()
    assert ctx.client.role == "resigned"
    requests = ctx.take(EndQuorumEpochRequest)
    assert {r.destination for r in requests} == {2, 3}
    assert requests[0].message.preferred_successors == (3, 2)  # the most caught up first
    # the election timeout makes it a prospective voter in the same epoch
    ctx.respond(requests[0], EndQuorumEpochResponse(ErrorCode.none, 1, epoch))
    ctx.poll_until_deadline()
    assert ctx.client.role == "prospective" and ctx.client.epoch == epoch


def test_testLeaderShouldResignLeadershipIfNotGetFetchRequestFromMajorityVoters():
    ctx = RaftTestContext(1)
    ctx.become_leader()
    check_quorum_ms = SETTINGS.fetch_timeout_ms * 3 // 2
    ctx.poll(check_quorum_ms - 1)
    ctx.fetch_from(2, 1, 1)
    ctx.poll(1)
    assert ctx.client.is_leader  # voter 2 fetched: a majority with the leader
    ctx.poll(check_quorum_ms)
    assert ctx.client.role == "resigned"


def test_testLeaderShouldNotResignLeadershipIfOnlyOneVoters():
    ctx = RaftTestContext(1, (1,))
    ctx.poll_until_deadline()
    ctx.poll(SETTINGS.fetch_timeout_ms * 10)
    assert ctx.client.is_leader


def test_testVoterBecomeCandidateAfterFetchTimeout():
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, 2, -1, (1, 2, 3)))
    ctx.poll()
    ctx.take(FetchRequest)
    ctx.poll(SETTINGS.fetch_timeout_ms)
    assert ctx.client.role == "prospective"
    for request in ctx.take(VoteRequest):
        ctx.respond(request, VoteResponse(ErrorCode.none, -1, 2, True))
    assert ctx.client.role == "candidate" and ctx.client.epoch == 3


def test_testFetchResponseIgnoredAfterBecomingCandidate():
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, 2, -1, (1, 2, 3)))
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    ctx.poll(SETTINGS.fetch_timeout_ms)
    for request in ctx.take(VoteRequest):
        ctx.respond(request, VoteResponse(ErrorCode.none, -1, 2, True))
    assert ctx.client.role == "candidate"
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 2, 1, (LogEntry(2, b"late"),)))
    assert ctx.client.role == "candidate" and ctx.log.end_offset == 0


def test_testFetchResponseIgnoredAfterBecomingFollowerOfDifferentLeader():
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, 2, -1, (1, 2, 3)))
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    ctx.deliver(3, BeginQuorumEpochRequest(3, 3))
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 2, 1, (LogEntry(2, b"late"),)))
    assert ctx.client.leader_id == 3 and ctx.log.end_offset == 0


def test_follower_truncates_to_the_diverging_epoch_and_fetches_on():
    """The follower holds entries of epoch 3 the new leader never had; the leader answers its fetch with a
    DivergingEpoch from its epoch cache and the follower truncates to it, then fetches on."""
    ctx = RaftTestContext(
        1,
        persisted=QuorumStateData(5, 2, -1, (1, 2, 3)),
        log=[(1, b"a"), (1, b"b"), (3, b"stale-1"), (3, b"stale-2")],
    )
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (4, 3)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 2, diverging_epoch=DivergingEpoch(2, 3)))
    assert [e.value for e in ctx.log.entries] == [b"a", b"b"]
    [fetch] = ctx.take(FetchRequest)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (2, 1)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 4, (LogEntry(2, b"c"), leader_change(5, 2))))
    assert ctx.log.end_offset == 4 and ctx.client.high_watermark == 4


def test_testFollowerLogReconciliation():
    """Leader side: the fetch of a follower whose last epoch the leader does not hold up to that offset gets
    the leader's end of that epoch (LeaderEpochFileCache.endOffsetFor)."""
    ctx = RaftTestContext(
        1, log=[(1, b"a"), (1, b"b"), (2, b"c")], persisted=QuorumStateData(2, -1, -1, (1, 2, 3))
    )
    ctx.become_leader()
    epoch = ctx.client.epoch
    reply = ctx.fetch_from(2, 3, 1)
    assert reply.diverging_epoch == DivergingEpoch(1, 2) and reply.records == ()
    reply = ctx.fetch_from(2, 2, 1)
    assert reply.diverging_epoch is None and reply.records[0].value == b"c"
    assert reply.leader_epoch == epoch


def test_a_truncation_below_the_high_watermark_raises():
    ctx = RaftTestContext(1, persisted=QuorumStateData(5, 2, -1, (1, 2, 3)), log=[(1, b"a"), (1, b"b")])
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 2))
    assert ctx.client.high_watermark == 2
    [fetch] = ctx.take(FetchRequest)
    with pytest.raises(raft_client.RaftSafetyError):
        ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 2, diverging_epoch=DivergingEpoch(1, 1)))


def test_testPurgatoryFetchSatisfiedByWrite():
    ctx = RaftTestContext(1)
    ctx.become_leader()
    ctx.fetch_from(2, 1, 1)
    correlation = ctx.deliver(2, FetchRequest(2, ctx.client.epoch, 1, 1, 500))
    assert [e for e in ctx.sent if e.is_response] == []  # parked at the log end
    ctx.client.append(ctx.now_ms, [b"x"])
    ctx.poll()
    reply = ctx.reply_to(correlation)
    assert [e.value for e in reply.records] == [b"x"]


def test_testPurgatoryFetchTimeout():
    ctx = RaftTestContext(1)
    ctx.become_leader()
    ctx.fetch_from(2, 1, 1)
    correlation = ctx.deliver(2, FetchRequest(2, ctx.client.epoch, 1, 1, 500))
    ctx.poll(499)
    assert [e for e in ctx.sent if e.is_response] == []
    ctx.poll(1)
    assert ctx.reply_to(correlation).records == ()


def test_leader_answers_fetches_of_older_and_newer_epochs_with_errors():
    ctx = RaftTestContext(1)
    ctx.become_leader()
    old = ctx.reply_to(ctx.deliver(2, FetchRequest(2, 0, 0, 0)))
    assert old.error_code == ErrorCode.fenced_leader_epoch and (old.leader_id, old.leader_epoch) == (1, 1)
    follower = RaftTestContext(3, persisted=QuorumStateData(2, 2, -1, (1, 2, 3)))
    reply = follower.reply_to(follower.deliver(1, FetchRequest(1, 2, 0, 0)))
    assert reply.error_code == ErrorCode.not_leader_or_follower and reply.leader_id == 2


def test_fenced_fetch_answer_moves_the_follower_to_the_new_leader():
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, 2, -1, (1, 2, 3)))
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    ctx.respond(fetch, FetchResponse(ErrorCode.fenced_leader_epoch, 3, 4, -1))
    assert ctx.client.role == "follower" and (ctx.client.leader_id, ctx.client.epoch) == (3, 4)
    [fetch] = ctx.take(FetchRequest)
    assert fetch.destination == 3 and fetch.message.current_leader_epoch == 4


def test_leader_commits_entries_of_an_earlier_epoch_only_with_one_of_its_own():
    """Raft's figure 8: the new leader's log holds an entry of epoch 2 that a majority now has, but the high
    watermark waits until the LeaderChangeMessage of its own epoch is on a majority too. The unsafe
    switch (counting replicas) commits it at once."""
    for unsafe in (False, True):
        raft_client.UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS = unsafe
        try:
            ctx = RaftTestContext(
                1, log=[(1, b"a"), (2, b"b")], persisted=QuorumStateData(3, -1, -1, (1, 2, 3))
            )
            ctx.become_leader()
            assert ctx.client.epoch == 4 and ctx.log.epoch_at(2) == 4
            ctx.fetch_from(2, 2, 2)  # voter 2 holds offset 1 (epoch 2), not the LeaderChangeMessage
            assert ctx.client.high_watermark == (2 if unsafe else None)
            ctx.fetch_from(2, 3, 4)
            assert ctx.client.high_watermark == 3
        finally:
            raft_client.UNSAFE_COMMIT_PREVIOUS_EPOCH_FOR_TESTS = False


def test_quorum_state_file_is_kafkas_json():
    data = QuorumStateData(7, 2, 3, (1, 2, 3))
    text = data.to_json()
    assert '"leaderEpoch": 7' in text and '"votedId": 3' in text and '"data_version": 0' in text
    assert QuorumStateData.from_json(text) == data


def test_epoch_cache_end_offset_for_epoch():
    log = RaftLog([LogEntry(1, b"a"), LogEntry(1, b"b"), LogEntry(3, b"c"), LogEntry(5, b"d")])
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert log.end_offset_for_epoch(9) == (5, 4)
    assert log.end_offset_for_epoch(0) == (0, 0)  # before the first epoch: that epoch, the first's start
    log.truncate_to(3)
    assert log.end_offset_for_epoch(9) == (3, 3) and log.last_fetched_epoch == 3


def test_high_watermark_waits_for_a_fetch_without_divergence():
    """After a DivergingEpoch the follower's log below the truncation point is not known to match the
    leader's yet (another round may truncate further), so the leader's high watermark is not taken from
    that answer. (The simulator found a follower that applied an entry the leader never had.)"""
    ctx = RaftTestContext(
        1,
        persisted=QuorumStateData(5, 2, -1, (1, 2, 3)),
        log=[(1, b"a"), (2, b"stale-1"), (3, b"stale-2")],
    )
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 3, diverging_epoch=DivergingEpoch(2, 3)))
    assert ctx.log.end_offset == 2 and ctx.client.high_watermark is None
    [fetch] = ctx.take(FetchRequest)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 3, diverging_epoch=DivergingEpoch(1, 1)))
    assert ctx.log.end_offset == 1 and ctx.client.high_watermark is None
    [fetch] = ctx.take(FetchRequest)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 3, (LogEntry(4, b"b"), leader_change(5, 2))))
    assert ctx.client.high_watermark == 3


def test_testDescribeQuorum():
    """DescribeQuorum (55) from the leader: itself at its log end and caught up now, each voter's fetch
    offset and times (LeaderState.ReplicaState.updateFetchState), an observer that fetched; other voters
    answer NOT_LEADER_OR_FOLLOWER. The answer encodes and decodes as Kafka's v2 response."""
    import io

    from kio.schema.describe_quorum.v2 import response as v1
    from kio.serial import entity_reader, entity_writer

    from epochkraft.raft.describe_quorum import describe_quorum

    ctx = RaftTestContext(1)
    ctx.become_leader()
    ctx.now_ms = 1000
    ctx.fetch_from(2, 0, 0)  # behind the leader's end (1): not caught up
    ctx.now_ms = 1100
    ctx.fetch_from(2, 1, 1)  # at the end: caught up now
    ctx.fetch_from(100, 0, 0)  # a broker observing the log
    response = describe_quorum(ctx.client, 1200)
    [partition] = response.topics[0].partitions
    assert (partition.error_code, partition.leader_id, partition.leader_epoch, partition.high_watermark) == (
        ErrorCode.none,
        1,
        1,
        1,
    )
    voters = {r.replica_id: r for r in partition.current_voters}
    assert (voters[1].log_end_offset, voters[1].last_caught_up_timestamp) == (1, 1200)
    assert (voters[2].log_end_offset, voters[2].last_fetch_timestamp, voters[2].last_caught_up_timestamp) == (
        1,
        1100,
        1100,
    )
    assert (voters[3].log_end_offset, voters[3].last_fetch_timestamp) == (-1, -1)
    assert [(o.replica_id, o.log_end_offset) for o in partition.observers] == [(100, 0)]
    buffer = io.BytesIO()
    entity_writer(v1.DescribeQuorumResponse)(buffer, response)
    decoded, _ = entity_reader(v1.DescribeQuorumResponse)(memoryview(buffer.getvalue()), 0)
    assert decoded == response
    follower = RaftTestContext(2, persisted=QuorumStateData(1, 1, -1, (1, 2, 3)))
    [partition] = describe_quorum(follower.client, 0).topics[0].partitions
    assert partition.error_code == ErrorCode.not_leader_or_follower and partition.leader_id == 1


def test_testCandidateIgnoreVoteRequestOnSameEpoch():
    ctx = RaftTestContext(1)
    ctx.become_candidate()
    epoch = ctx.client.epoch
    reply = ctx.reply_to(ctx.deliver(2, VoteRequest(epoch, 2, 0, 0)))
    assert reply == VoteResponse(ErrorCode.none, -1, epoch, False) and ctx.client.role == "candidate"


def test_a_candidate_that_lost_keeps_its_vote_while_it_pre_votes_again_in_the_same_epoch():
    """A candidate whose election failed backs off and pre-votes again in its epoch (KIP-996's prospective
    state); it voted for itself in that epoch, so a late Vote of another candidate of the same epoch is
    refused (QuorumState.transitionToProspective keeps votedKey)."""
    ctx = RaftTestContext(1)
    ctx.become_candidate()
    epoch = ctx.client.epoch
    for request in ctx.take(VoteRequest):
        ctx.respond(request, VoteResponse(ErrorCode.none, -1, epoch, False))
    ctx.poll_until_deadline()  # lost: the election backoff
    ctx.poll_until_deadline()  # then a pre-vote in the same epoch
    assert ctx.client.role == "prospective" and ctx.client.epoch == epoch
    reply = ctx.reply_to(ctx.deliver(2, VoteRequest(epoch, 2, 0, 0)))
    assert not reply.vote_granted
    assert all(state.voted_id == 1 for state in ctx.persisted if state.leader_epoch == epoch)


def test_a_candidate_that_cannot_stand_again_keeps_its_vote():
    """A candidate in epoch 2^31-2 that lost waits unattached (its next epoch would not be usable) and
    keeps its vote for itself: no second vote in that epoch."""
    last_usable = LAST_INT32 - 1
    ctx = RaftTestContext(1, persisted=QuorumStateData(last_usable - 1, -1, -1, (1, 2, 3)))
    ctx.become_candidate()
    assert ctx.client.epoch == last_usable
    for request in ctx.take(VoteRequest):
        ctx.respond(request, VoteResponse(ErrorCode.none, -1, last_usable, False))
    ctx.poll_until_deadline()  # lost: the election backoff
    ctx.poll_until_deadline()
    assert ctx.client.role == "unattached" and ctx.client.epoch == last_usable
    assert not ctx.reply_to(ctx.deliver(3, VoteRequest(last_usable, 3, 0, 0))).vote_granted
    assert ctx.persisted[-1].voted_id == 1


def test_testHandleVoteRequestAsFollowerWithVotedCandidate():
    ctx = RaftTestContext(1, persisted=QuorumStateData(4, -1, 3, (1, 2, 3)))
    assert not ctx.reply_to(ctx.deliver(2, VoteRequest(4, 2, 0, 0))).vote_granted
    assert ctx.reply_to(ctx.deliver(3, VoteRequest(4, 3, 0, 0))).vote_granted
    # a higher epoch frees the vote
    assert ctx.reply_to(ctx.deliver(2, VoteRequest(5, 2, 0, 0))).vote_granted
    assert ctx.persisted[-1] == QuorumStateData(5, -1, 2, (1, 2, 3))


def test_testEndQuorumIgnoredAsCandidateIfOlderEpoch():
    ctx = RaftTestContext(1, persisted=QuorumStateData(4, -1, -1, (1, 2, 3)))
    ctx.become_candidate()
    reply = ctx.reply_to(ctx.deliver(2, EndQuorumEpochRequest(2, 3, (1,))))
    assert reply == EndQuorumEpochResponse(ErrorCode.none, -1, 5)
    assert ctx.client.role == "candidate" and ctx.client.epoch == 5


def test_testEndQuorumEpochSentBasedOnFetchOffset():
    """The resigning leader names the most caught-up voter first as preferred successor."""
    ctx = RaftTestContext(1, (1, 2, 3, 4, 5))
    ctx.become_leader()
    ctx.client.append(ctx.now_ms, [b"a", b"b"])
    ctx.fetch_from(4, 3, 1)
    ctx.fetch_from(2, 1, 1)
    ctx.take(BeginQuorumEpochRequest)
    ctx.resign()
    successors = {e.message.preferred_successors for e in ctx.take(EndQuorumEpochRequest)}
    assert successors == {(4, 2, 3, 5)}


def test_leader_told_of_a_higher_epoch_leader_steps_down_and_follows_it():
    """A leader that hears of a higher epoch's leader steps down and follows it. Its parked fetches are
    dropped unanswered (Kafka's testPurgatoryFetchCompletedByFollowerTransition answers them with the new
    leader; here the fetching voter asks again after its request timeout)."""
    ctx = RaftTestContext(1)
    ctx.become_leader()
    ctx.fetch_from(2, 1, 1)
    ctx.deliver(2, FetchRequest(2, 1, 1, 1, 500))
    ctx.deliver(3, BeginQuorumEpochRequest(3, 2))
    assert ctx.client.role == "follower" and (ctx.client.leader_id, ctx.client.epoch) == (3, 2)
    ctx.poll(500)
    assert [e for e in ctx.sent if e.is_response and isinstance(e.message, FetchResponse)] == []
    assert ctx.persisted[-1] == QuorumStateData(2, 3, -1, (1, 2, 3))


# ---- snapshots: a log that starts after offset 0 (KafkaRaftClientSnapshotTest) --------------------------------
def test_testFetchRequestOffsetLessThanLogStart():
    """The leader has dropped its log below a snapshot: a fetch from below the log start is answered with
    the snapshot's id, not records."""
    ctx = RaftTestContext(
        1, log=[(1, b"a"), (1, b"b"), (2, b"c")], persisted=QuorumStateData(2, -1, -1, (1, 2, 3))
    )
    ctx.log.trim_to(2)
    assert (ctx.log.start_offset, ctx.log.snapshot_epoch) == (2, 1)
    ctx.become_leader()
    reply = ctx.fetch_from(2, 1, 1)
    assert reply.snapshot_id == SnapshotRef(2, 1) and reply.records == ()
    reply = ctx.fetch_from(2, 2, 1)  # from the log start, after the snapshot's epoch: records
    assert reply.snapshot_id is None and reply.records[0].value == b"c"


def test_testFetchRequestWithLastFetchedEpochLessThanOldestSnapshot():
    """A follower whose last epoch the leader's remaining log does not hold, diverging below the log start:
    the snapshot, not a DivergingEpoch it could never truncate to."""
    ctx = RaftTestContext(
        1, log=[(1, b"a"), (2, b"b"), (2, b"c")], persisted=QuorumStateData(2, -1, -1, (1, 2, 3))
    )
    ctx.log.trim_to(2)
    ctx.become_leader()
    reply = ctx.fetch_from(2, 3, 1)  # epoch 1 ends at 1 in the leader's log: below its start
    assert reply.snapshot_id == SnapshotRef(2, 2) and reply.diverging_epoch is None


def test_testFetchResponseWithSnapshotId():
    """A follower told to fetch a snapshot stops fetching the log; once the driver installs it, the log
    is the snapshot (start and end at its end offset, its epoch the last fetched), the high watermark at
    least its end, and fetching goes on from there."""
    ctx = RaftTestContext(1, persisted=QuorumStateData(5, 2, -1, (1, 2, 3)), log=[(1, b"a")])
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 40, snapshot_id=SnapshotRef(30, 4)))
    assert ctx.client.snapshot_wanted == (30, 4)
    ctx.poll(100)
    assert not ctx.take(FetchRequest)  # waits for the snapshot
    ctx.client.install_snapshot(ctx.now_ms, 30, 4)
    assert (ctx.log.start_offset, ctx.log.end_offset, ctx.log.last_fetched_epoch) == (30, 30, 4)
    assert ctx.client.high_watermark == 30 and ctx.client.snapshot_wanted is None
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (30, 4)


def test_testFetchSnapshotResponseMissingSnapshot():
    """The leader no longer has the snapshot it named: the follower fetches again after its backoff and is
    told the current one."""
    ctx = RaftTestContext(1, persisted=QuorumStateData(5, 2, -1, (1, 2, 3)))
    ctx.poll()
    [fetch] = ctx.take(FetchRequest)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, 5, 40, snapshot_id=SnapshotRef(30, 4)))
    ctx.client.snapshot_unavailable(ctx.now_ms)
    ctx.client.install_snapshot(ctx.now_ms, 30, 4)  # too late: not wanted any more
    assert ctx.log.end_offset == 0
    ctx.poll(SETTINGS.retry_backoff_ms)
    [fetch] = ctx.take(FetchRequest)
    assert fetch.message.fetch_offset == 0


def test_trimming_keeps_batches_whole_and_the_epoch_cache_from_the_start():
    log = RaftLog([LogEntry(1, b"a", 2), LogEntry(1, b"b", 3), LogEntry(3, b"c", 1)])
    assert log.bases == [0, 2, 5] and log.end_offset == 6
    log.trim_to(3)  # inside the second entry: not a boundary, nothing dropped
    assert log.start_offset == 0
    log.trim_to(5)
    assert (log.start_offset, log.snapshot_epoch, log.bases) == (5, 1, [5])
    # an epoch wholly in the snapshot is not in the cache (truncateFromStart): it ends at the snapshot
    assert log.end_offset_for_epoch(3) == (3, 6) and log.end_offset_for_epoch(1) == (1, 5)
    log.truncate_to(4)  # below the start: never
    assert log.end_offset == 6


# ---- a failed Fetch (KafkaRaftClient.handleFetchResponse, RequestManager) -------------------------------------
@pytest.mark.parametrize(
    "answer",
    [
        # the request failed as a whole (the driver's answer to a disconnect): no epoch, no leader
        FetchResponse(ErrorCode.broker_not_available, -1, -1, -1),
        # a partition-level error in the current epoch, as testObserverLeaderRediscoveryAfterBrokerNotAvailableError
        FetchResponse(ErrorCode.broker_not_available, -1, 5, -1),
        FetchResponse(ErrorCode.unknown_server_error, 2, 5, -1),
    ],
)
def test_follower_backs_off_after_a_failed_fetch(answer):
    """A failed Fetch puts the leader's connection in backoff (RequestManager.onResponseResult with
    handledSuccessfully false): the next Fetch goes out after controller.quorum.retry.backoff.ms, not at
    once, so a follower of a dead leader sends one Fetch per backoff until its fetch timeout."""
    ctx = RaftTestContext(1, persisted=QuorumStateData(5, 2, -1, (1, 2, 3)))
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 2)
    ctx.respond(fetch, answer)
    assert ctx.take(FetchRequest) == []
    assert ctx.client.next_deadline_ms() == ctx.now_ms + SETTINGS.retry_backoff_ms
    ctx.poll(SETTINGS.retry_backoff_ms - 1)
    assert ctx.take(FetchRequest) == []
    ctx.poll(1)
    [fetch] = ctx.take(FetchRequest, 2)
    assert (ctx.client.role, ctx.client.epoch, ctx.client.leader_id) == ("follower", 5, 2)


def test_a_follower_of_a_dead_leader_fetches_once_per_backoff_until_its_fetch_timeout():
    ctx = RaftTestContext(1, persisted=QuorumStateData(5, 2, -1, (1, 2, 3)))
    bound = SETTINGS.fetch_timeout_ms // SETTINGS.retry_backoff_ms + 1
    fetches = 0
    while ctx.client.role == "follower" and fetches <= bound:
        ctx.poll_until_deadline()
        while (sent := ctx.take(FetchRequest, 2)) and fetches <= bound:
            for fetch in sent:  # each answered at once with the driver's failure
                fetches += 1
                ctx.respond(fetch, FetchResponse(ErrorCode.broker_not_available, -1, -1, -1))
    assert fetches <= bound
    assert ctx.client.role == "prospective"


# ---- the epoch cache and the leader's fetch validation (LeaderEpochFileCacheTest, KafkaMetadataLogTest) ----------
def _log(*epochs: tuple[int, int], snapshot: tuple[int, int] | None = None) -> RaftLog:
    """A log of (epoch, records) entries, after a snapshot (end offset, epoch) when given."""
    log = RaftLog()
    if snapshot is not None:
        log.install_snapshot(*snapshot)
    for epoch, records in epochs:
        log.append(LogEntry(epoch, b"x", records))
    return log


@pytest.mark.parametrize(
    ("epochs", "requested", "expected"),
    [
        # shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch
        (((5, 11), (6, 1), (7, 1)), 4, (4, 0)),
        # shouldReturnUndefinedOffsetIfUndefinedEpochRequested
        (((2, 11), (3, 1)), -1, (-1, -1)),
        # shouldReturnUnsupportedIfNoEpochRecorded
        ((), 0, (-1, -1)),
        # shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch
        (((1, 2), (2, 2), (3, 2)), 2, (2, 4)),
        # shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested
        (((0, 10), (2, 3), (4, 4)), 1, (0, 10)),
        # the latest epoch ends at the log end; above it nothing is known
        (((1, 2), (3, 1)), 3, (3, 3)),
        (((1, 2), (3, 1)), 9, (-1, -1)),
    ],
)
def test_LeaderEpochFileCacheTest_endOffsetFor(epochs, requested, expected):
    assert _log(*epochs).end_offset_for(requested) == expected


@pytest.mark.parametrize(
    ("log", "offset", "epoch", "expected"),
    [
        ("testValidateEpochGreaterThanLastKnownEpoch", 1, 2, ("diverging", 1, 1)),
        ("testValidateEpochLessThanOldestSnapshotEpoch", 10, 0, ("snapshot", 1, 10)),
        ("testValidateOffsetLessThanOldestSnapshotOffset", 1, 1, ("snapshot", 1, 2)),
        ("testValidateOffsetEqualToOldestSnapshotOffset", 2, 1, ("valid", 1, 2)),
        ("testValidateUnknownEpochLessThanLastKnownGreaterThanOldestSnapshot", 100, 3, ("diverging", 2, 20)),
        ("testValidateEpochLessThanFirstEpochInLog", 100, 2, ("diverging", 1, 10)),
        ("testValidateOffsetGreatThanEndOffset", 2, 1, ("diverging", 1, 1)),
        ("testValidateOffsetLessThanLEO", 11, 1, ("diverging", 1, 10)),
        ("testValidateValidEpochAndOffset", 4, 1, ("valid", 1, 4)),
        # no snapshot, the follower's last epoch older than the leader's first: truncate to the log start
        ("epochLessThanFirstEpochWithoutSnapshot", 1, 1, ("diverging", 1, 0)),
    ],
)
def test_KafkaMetadataLogTest_validateOffsetAndEpoch(log, offset, epoch, expected):
    logs = {
        "testValidateEpochGreaterThanLastKnownEpoch": lambda: _log((1, 1)),
        "testValidateEpochLessThanOldestSnapshotEpoch": lambda: _trimmed(_log((1, 10)), 10),
        "testValidateOffsetLessThanOldestSnapshotOffset": lambda: _trimmed(_log((1, 2)), 2),
        "testValidateOffsetEqualToOldestSnapshotOffset": lambda: _trimmed(_log((1, 2)), 2),
        "testValidateUnknownEpochLessThanLastKnownGreaterThanOldestSnapshot": lambda: _log(
            (1, 5), (2, 5), (4, 5), snapshot=(10, 1)
        ),
        "testValidateEpochLessThanFirstEpochInLog": lambda: _log((3, 5), snapshot=(10, 1)),
        "testValidateOffsetGreatThanEndOffset": lambda: _log((1, 1)),
        "testValidateOffsetLessThanLEO": lambda: _log((1, 10), (2, 10)),
        "testValidateValidEpochAndOffset": lambda: _log((1, 5)),
        "epochLessThanFirstEpochWithoutSnapshot": lambda: _log((2, 1), (2, 1)),
    }
    validated = logs[log]().validate_offset_and_epoch(offset, epoch)
    assert (validated.kind, validated.epoch, validated.offset) == expected


def _trimmed(log: RaftLog, offset: int) -> RaftLog:
    log.trim_to(offset)
    return log


def test_a_follower_whose_last_epoch_the_leader_never_held_truncates_instead_of_fetching_a_snapshot():
    """The first leader (voter 2) wrote its LeaderChangeMessage in epoch 1 and died before anyone fetched
    it; voter 1 leads epoch 2 with no snapshot. Voter 2's fetch (offset 1, epoch 1) is below the leader's
    first epoch: LeaderEpochFileCache.endOffsetFor answers (1, 0), a DivergingEpoch, not a snapshot id
    (0, 0) the leader does not have; voter 2 truncates to 0 and fetches the leader's log."""
    leader = RaftTestContext(1, persisted=QuorumStateData(1, -1, -1, (1, 2, 3)))
    leader.become_leader()
    assert leader.client.epoch == 2 and leader.log.epochs == [(2, 0)]
    reply = leader.fetch_from(2, 1, 1)
    assert reply.snapshot_id is None
    assert reply.diverging_epoch == DivergingEpoch(1, 0)

    follower = RaftTestContext(2, persisted=QuorumStateData(2, 1, -1, (1, 2, 3)), log=[])
    follower.log.append(leader_change(1, 2))
    follower.poll()
    [fetch] = follower.take(FetchRequest, 1)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (1, 1)
    follower.respond(fetch, reply)
    assert follower.log.end_offset == 0 and follower.client.snapshot_wanted is None
    [fetch] = follower.take(FetchRequest, 1)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (0, 0)
    reply = leader.fetch_from(2, 0, 0)
    assert reply.diverging_epoch is None and reply.records[0].epoch == 2


# ---- epochs and ids from the wire are range-checked before use ------------------------------------------------
LAST_INT32 = 2**31 - 1


def test_a_forged_begin_quorum_epoch_with_the_last_int32_epoch_is_refused():
    """BeginQuorumEpoch naming a real voter as leader in epoch 2^31-1: a voter that followed it could never
    raise its epoch again (2^31 does not fit the wire's int32). Refused with INVALID_REQUEST, as
    KafkaRaftClient refuses an invalid Vote; nothing changes or is persisted, and the voter still elects."""
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, -1, -1, (1, 2, 3)))
    reply = ctx.reply_to(ctx.deliver(2, BeginQuorumEpochRequest(2, LAST_INT32)))
    assert reply.error_code == ErrorCode.invalid_request and reply.leader_epoch == 2
    assert (ctx.client.role, ctx.client.epoch) == ("unattached", 2) and ctx.persisted == []
    ctx.become_leader()
    assert ctx.client.epoch == 3


@pytest.mark.parametrize(
    "request_",
    [
        VoteRequest(LAST_INT32, 2, 0, 0),
        VoteRequest(LAST_INT32, 2, 0, 0, pre_vote=True),
        VoteRequest(2**40, 2, 0, 0),
        VoteRequest(3, 2, -1, 0),  # testInvalidVoteRequest: a negative last epoch
        EndQuorumEpochRequest(2, LAST_INT32, (1,)),
        EndQuorumEpochRequest(2, -5, (1,)),
    ],
)
def test_testInvalidVoteRequest_and_end_quorum_epoch_with_an_epoch_no_voter_can_hold(request_):
    ctx = RaftTestContext(1, persisted=QuorumStateData(2, -1, -1, (1, 2, 3)))
    reply = ctx.reply_to(ctx.deliver(2, request_))
    assert reply.error_code == ErrorCode.invalid_request
    assert ctx.client.epoch == 2 and ctx.persisted == []


@pytest.mark.parametrize(
    ("current_leader_epoch", "fetch_offset", "last_fetched_epoch", "max_wait_ms"),
    [
        (LAST_INT32, 0, 0, 0),  # would move every voter to an epoch it cannot raise
        (2, -1, 0, 0),  # testInvalidFetchRequest: a negative offset
        (2, 0, -1, 0),  # ... a negative last fetched epoch
        (2, 0, 3, 0),  # ... a last fetched epoch above the request's epoch
        (2, 0, 0, -1),  # ... a negative max wait
    ],
)
def test_testInvalidFetchRequest(current_leader_epoch, fetch_offset, last_fetched_epoch, max_wait_ms):
    ctx = RaftTestContext(1, persisted=QuorumStateData(1, -1, -1, (1, 2, 3)))
    ctx.become_leader()
    request = FetchRequest(2, current_leader_epoch, fetch_offset, last_fetched_epoch, max_wait_ms)
    reply = ctx.reply_to(ctx.deliver(2, request))
    assert reply.error_code == ErrorCode.invalid_request
    assert ctx.client.is_leader and ctx.client.epoch == 2


def test_answers_naming_an_epoch_or_leader_no_voter_can_hold_are_ignored():
    ctx = RaftTestContext(1, persisted=QuorumStateData(5, 2, -1, (1, 2, 3)))
    ctx.poll()
    [fetch] = ctx.take(FetchRequest, 2)
    ctx.respond(fetch, FetchResponse(ErrorCode.fenced_leader_epoch, 3, LAST_INT32, -1))
    assert (ctx.client.epoch, ctx.client.leader_id) == (5, 2)
    ctx.poll(SETTINGS.retry_backoff_ms - 1)
    assert ctx.take(FetchRequest) == []  # an ignored answer still waits the backoff
    ctx.poll(1)
    [fetch] = ctx.take(FetchRequest, 2)
    ctx.respond(fetch, FetchResponse(ErrorCode.fenced_leader_epoch, -7, 6, -1))
    assert (ctx.client.epoch, ctx.client.leader_id) == (5, 2) and ctx.persisted == []
    ctx.poll(SETTINGS.retry_backoff_ms)
    [fetch] = ctx.take(FetchRequest, 2)
    ctx.respond(fetch, FetchResponse(ErrorCode.none, 2, LAST_INT32, -1))  # no error, unusable epoch
    assert (ctx.client.epoch, ctx.client.leader_id) == (5, 2)
    ctx.poll(SETTINGS.retry_backoff_ms - 1)
    assert ctx.take(FetchRequest) == []


def test_a_voter_whose_next_epoch_would_not_be_usable_does_not_stand():
    """In epoch 2^31-2 a voter's candidacy would take 2^31-1, which it could never raise again: it waits
    unattached, its timers reset, instead of standing or failing."""
    last_usable = LAST_INT32 - 1
    ctx = RaftTestContext(1, persisted=QuorumStateData(last_usable, 2, -1, (1, 2, 3)))
    ctx.poll_until_deadline()  # the fetch timeout
    ctx.poll_until_deadline()
    assert ctx.client.role == "unattached" and ctx.client.epoch == last_usable
    assert ctx.take(VoteRequest) == []
    deadline = ctx.client.next_deadline_ms()
    assert deadline > ctx.now_ms
    ctx.poll_until_deadline()
    assert ctx.client.role == "unattached" and ctx.client.next_deadline_ms() > deadline
    assert all(state.leader_epoch <= last_usable for state in ctx.persisted)
