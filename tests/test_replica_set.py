"""The broker's replica decisions on the sans-IO ReplicaSet and fetch rules, named after the Kafka tests they
reproduce (PartitionTest, AlterPartitionManagerTest, AbstractFetcherThreadTest's truncation)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.alter_partition.v3 import response as r3

from epochkraft.broker.fetch_rules import out_of_range_reset, plan_read, truncation_offset
from epochkraft.broker.log.epoch_cache import LeaderEpochCache
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.partition import RECOVERED, RECOVERING, Role
from epochkraft.broker.replica_set import NO_OUTPUTS, IsrEvent, ReplicaOutputs, ReplicaSet
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    BrokerEndpoint,
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)

TOPIC_ID = uuid.UUID(int=7)
KEY = ("foo", 0)
LAG_MS = 10_000
EPOCHS = {1: 101, 2: 102, 3: 103}


class Logs:
    """Log ends per partition: the replica set's storage."""

    def __init__(self, end: int = 10) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        self.default_end = end

    def open_replica(self, key: tuple[str, int]) -> int:
        self.ends.setdefault(key, self.default_end)
        return 0

    def log_end_offset(self, key: tuple[str, int]) -> int:
        return self.ends.get(key, self.default_end)


class Context:
    """Broker 1's replica set over a real metadata cache fed with metadata records."""

    def __init__(self, *, replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=5, min_isr: str | None = None):
        self.cache = MetadataCache(1)
        self.logs = Logs()
        self.offset = 0
        self.now = 1_000
        self.rs = ReplicaSet(1, lambda: EPOCHS[1], self.cache, self.logs, replica_lag_time_max_ms=LAG_MS)
        records: list[object] = []
        for broker_id, epoch in EPOCHS.items():
            records += [
                RegisterBrokerRecord(
                    broker_id=broker_id,
                    incarnation_id=uuid.UUID(int=broker_id),
                    broker_epoch=epoch,
                    end_points=(BrokerEndpoint(name="P", host="h", port=broker_id, security_protocol=0),),
                    rack=None,
                    fenced=True,
                    in_controlled_shutdown=False,
                ),
                UnfenceBrokerRecord(id=broker_id, epoch=epoch),
            ]
        records.append(TopicRecord(name="foo", topic_id=TOPIC_ID))
        if min_isr is not None:
            records.append(
                ConfigRecord(resource_type=2, resource_name="foo", name="min.insync.replicas", value=min_isr)
            )
        records.append(
            PartitionRecord(
                partition_id=0,
                topic_id=TOPIC_ID,
                replicas=replicas,
                isr=isr,
                leader=leader,
                leader_epoch=leader_epoch,
                partition_epoch=1,
            )
        )
        self.apply(*records)

    def apply(self, *records: object):
        changes = Changes()
        for record in records:
            self.cache.apply(self.offset, record, changes)
            self.offset += 1
        return self.rs.apply_metadata(self.now, changes)

    def change(self, **fields: object):
        return self.apply(PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, **fields))

    @property
    def p(self):
        return self.rs.partitions[KEY]

    def fetch(self, replica: int, offset: int, leader_end: int = 10) -> ReplicaOutputs:
        self.logs.ends[KEY] = leader_end
        return self.rs.on_follower_fetch(self.now, KEY, replica, EPOCHS[replica], offset, leader_end)

    def respond(self, error=ErrorCode.none, *, isr=None, partition_epoch_bump=1, top=ErrorCode.none):
        """Answers the AlterPartition request in flight (each item as proposed, or with ``error``)."""
        items = self.rs.alter.in_flight or []
        response = r3.AlterPartitionResponse(
            throttle_time=datetime.timedelta(0),
            error_code=top,
            topics=tuple(
                r3.TopicData(
                    topic_id=i.topic_id,
                    partitions=(
                        r3.PartitionData(
                            partition_index=i.partition,
                            error_code=error,
                            leader_id=1,
                            leader_epoch=i.leader_epoch,
                            isr=i.isr_ids if isr is None else isr,
                            leader_recovery_state=i.leader_recovery_state,
                            partition_epoch=i.partition_epoch + partition_epoch_bump,
                        ),
                    ),
                )
                for i in items
            ),
        )
        return self.rs.on_alter_partition_response(self.now, response)

    def send(self):
        return self.rs.poll_alter_partition(self.now)


# ---- PartitionTest ------------------------------------------------------------------------------------


def test_alter_isr_leader_and_isr_race():
    """PartitionTest.testAlterIsrLeaderAndIsrRace: metadata resets the pending shrink while its
    AlterPartition is in flight; the next proposal is refused by the sender (OPERATION_NOT_ATTEMPTED) and
    the partition reverts to its committed state instead of staying pending forever."""
    ctx = Context(replicas=(1, 2), isr=(1, 2))
    ctx.now += LAG_MS + 1
    ctx.rs.tick(ctx.now)
    assert ctx.p.pending is not None and ctx.p.pending.kind == "shrink"
    assert ctx.send() is not None
    ctx.change(isr=(1, 2))  # the controller re-sends the same ISR with a new partition epoch
    assert ctx.p.pending is None and ctx.p.partition_epoch == 2
    ctx.now += LAG_MS + 1
    ctx.rs.tick(ctx.now)
    assert ctx.p.pending is None, "refused while the first is in flight: committed, not pending"
    ctx.respond(ErrorCode.invalid_update_version)  # the old answer is ignored
    ctx.rs.tick(ctx.now)
    assert ctx.p.pending is not None and ctx.p.pending.kind == "shrink" and ctx.p.pending.partition_epoch == 2
    assert ctx.send() is not None


def test_kip704_recovered_report_is_made_again_after_it_is_refused():
    """KIP-704: an uncleanly elected leader whose RECOVERED report is refused reports it again on its next
    tick, then expands the ISR."""
    ctx = Context(replicas=(1, 2), isr=(2,), leader=2)
    ctx.change(leader=1, isr=(1,), leader_recovery_state=RECOVERING)
    assert ctx.p.role == Role.LEADER and ctx.p.pending is not None and ctx.p.pending.kind == "recovered"
    ctx.send()
    ctx.respond(ErrorCode.operation_not_attempted)
    assert ctx.p.pending is None and ctx.p.leader_recovery_state == RECOVERING
    ctx.rs.tick(ctx.now)
    assert ctx.p.pending is not None and ctx.p.pending.kind == "recovered"
    ctx.send()
    ctx.respond()
    assert ctx.p.leader_recovery_state == RECOVERED
    ctx.fetch(2, 10)
    assert ctx.p.pending is not None and ctx.p.pending.kind == "expand"


def test_kip704_follower_fetch_repeats_the_recovered_report():
    ctx = Context(replicas=(1, 2), isr=(2,), leader=2)
    ctx.change(leader=1, isr=(1,), leader_recovery_state=RECOVERING)
    ctx.send()
    ctx.change(isr=(1,))  # metadata supersedes the report; its answer never counts
    ctx.respond()
    assert ctx.p.pending is None and ctx.p.leader_recovery_state == RECOVERING
    ctx.fetch(2, 10)
    assert ctx.p.pending is not None and ctx.p.pending.kind == "recovered"


def test_isr_not_shrunk_if_update_fails():
    """PartitionTest.testIsrNotShrunkIfUpdateFails: INVALID_UPDATE_VERSION leaves the shrink pending (no
    retry) and the committed ISR and HW untouched."""
    ctx = Context(replicas=(1, 2), isr=(1, 2))
    ctx.now += LAG_MS + 1
    ctx.rs.tick(ctx.now)
    ctx.send()
    ctx.respond(ErrorCode.invalid_update_version)
    assert ctx.p.isr == (1, 2) and ctx.p.pending is not None and ctx.p.pending.kind == "shrink"
    assert ctx.send() is None and ctx.p.high_watermark == 0


def test_invalid_alter_partition_requests_are_not_retried():
    """PartitionTest.testInvalidAlterPartitionRequestsAreNotRetried."""
    ctx = Context(replicas=(1, 2), isr=(1,))
    ctx.fetch(2, 10)
    assert ctx.p.isr == (1,) and ctx.p.maximal_isr == (1, 2)
    request = ctx.send()
    assert [s.broker_id for s in request.topics[0].partitions[0].new_isr_with_epochs] == [1, 2]
    ctx.respond(ErrorCode.invalid_request)
    assert ctx.p.isr == (1,) and ctx.p.maximal_isr == (1, 2)
    assert ctx.send() is None
    assert ctx.rs.stats == {"isr_shrinks": 0, "isr_expands": 0, "failed_isr_updates": 1}


@pytest.mark.parametrize("state", ["fenced", "shutdown"])
def test_high_watermark_increases_with_fenced_or_shutdown_follower(state):
    """PartitionTest.testHighWatermarkIncreasesWithFencedOrShutdownFollower."""
    from epochkraft.protocol.metadata_records import BrokerRegistrationChangeRecord, FenceBrokerRecord

    ctx = Context(replicas=(1, 2), isr=(1, 2))
    ctx.fetch(2, 10)
    assert ctx.p.high_watermark == 10
    if state == "fenced":
        ctx.apply(FenceBrokerRecord(id=2, epoch=102))
    else:
        ctx.apply(
            BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=102, fenced=0, in_controlled_shutdown=1)
        )
    ctx.logs.ends[KEY] = 20  # the leader appends
    ctx.change(isr=(1,))  # the controller shrinks the ISR
    assert ctx.p.role == Role.LEADER and ctx.p.isr == (1,) and ctx.p.maximal_isr == (1,)
    assert ctx.p.high_watermark == 20


def test_do_not_reset_replica_state_if_leader_epoch_is_not_bumped():
    """PartitionTest.testDoNotResetReplicaStateIfLeaderEpochIsNotBumped."""
    ctx = Context(replicas=(1, 2), isr=(1,), leader_epoch=8)
    ctx.fetch(2, 0)
    state = ctx.p.remote[2]
    seen = (state.log_end_offset, state.last_caught_up_ms)
    (transition,) = ctx.change(replicas=(1, 2)).transitions  # a new partition epoch, the same leader epoch
    assert not transition.new_term and ctx.p.partition_epoch == 2 and ctx.p.leader_epoch == 8
    assert (ctx.p.remote[2].log_end_offset, ctx.p.remote[2].last_caught_up_ms) == seen


def test_make_leader_updates_epoch_cache():
    """PartitionTest.testMakeLeaderUpdatesEpochCache: the driver assigns the new leader epoch at the log
    end; the epoch's end is then the log end."""
    epochs = LeaderEpochCache(None, lambda: 4)
    epochs.assign(0, 0)
    epochs.assign(5, 2)
    ctx = Context(replicas=(1, 2), isr=(1, 2), leader=2, leader_epoch=7)
    ctx.logs.ends[KEY] = 4
    (transition,) = ctx.change(leader=1).transitions
    assert transition.kind == "leader" and transition.new_term and ctx.p.leader_epoch == 8
    epochs.assign(ctx.p.leader_epoch, 4)
    assert epochs.end_offset_for(8) == (8, 4)


def test_topic_config_change_is_not_a_partition_change():
    """A topic config change names its topic (Kafka's ConfigurationsDelta; TopicConfigHandler updates the
    topic's logs): its partitions are not applied again, so none is handed on as a transition and an ISR
    change in flight stays in flight (applying the partition again would drop it)."""
    ctx = Context(replicas=(1, 2), isr=(1,))
    ctx.fetch(2, 10)  # caught up: the leader proposes 2 for the ISR
    assert ctx.p.pending is not None
    assert (
        ctx.apply(
            ConfigRecord(resource_type=2, resource_name="foo", name="retention.ms", value="1000")
        ).transitions
        == ()
    )
    assert ctx.p.pending is not None and ctx.p.partition_epoch == 1


@pytest.mark.parametrize(
    ("resource", "value", "expected"),
    [
        ((2, "foo"), "3", 3),  # the topic's own value
        ((2, "bar"), "3", 2),  # another topic's: not this partition's
        ((4, ""), "1", 2),  # the cluster default: under the topic's own value
        ((4, "2"), "3", 2),  # another broker's
    ],
)
def test_min_insync_change_reaches_its_topics_partitions(resource, value, expected):
    """min.insync.replicas written reaches the partitions that read it, without a transition."""
    ctx = Context(replicas=(1, 2, 3), isr=(1, 2, 3), min_isr="2")
    resource_type, name = resource
    record = ConfigRecord(
        resource_type=resource_type, resource_name=name, name="min.insync.replicas", value=value
    )
    assert ctx.apply(record).transitions == ()
    assert ctx.p.min_insync_replicas == expected


def test_cluster_default_min_insync_change_reaches_partitions_without_their_own():
    ctx = Context(replicas=(1, 2, 3), isr=(1, 2, 3))
    assert (
        ctx.apply(
            ConfigRecord(resource_type=4, resource_name="", name="min.insync.replicas", value="3")
        ).transitions
        == ()
    )
    assert ctx.p.min_insync_replicas == 3


@pytest.mark.parametrize(
    ("replicas", "isr", "min_isr", "under", "at"),
    [
        ((1, 2), (1, 2), "2", False, True),  # testIsUnderMinIsr, before the shrink
        ((1, 2), (1,), "2", True, False),  # testIsUnderMinIsr, after it
        ((1, 2, 3), (1,), None, False, True),  # testAtMinIsr (default 1)
        ((1, 2), (1, 2), "3", False, True),  # min.insync.replicas above RF: capped at RF
    ],
)
def test_is_under_min_isr_and_at_min_isr(replicas, isr, min_isr, under, at):
    """PartitionTest.testIsUnderMinIsr and testAtMinIsr, against the effective min ISR."""
    ctx = Context(replicas=replicas, isr=isr, min_isr=min_isr)
    assert (ctx.p.is_under_min_isr, ctx.p.is_at_min_isr) == (under, at)


def test_min_insync_above_replication_factor_accepts_acks_all():
    """Kafka's effectiveMinIsr: min.insync.replicas=3 on a 2-replica partition behaves as 2."""
    ctx = Context(replicas=(1, 2), isr=(1, 2), min_isr="3")
    assert ctx.p.check_enough_replicas_before_append(-1) == ErrorCode.none
    ctx.fetch(2, 10)
    assert ctx.p.high_watermark == 10 and ctx.p.acks_all_result(10) == ErrorCode.none


def test_monotonic_offsets_after_leader_change():
    """PartitionTest.testMonotonicOffsetsAfterLeaderChange (the replica half): followers that fetched 2 of
    5 records hold the HW at 2; as a follower the HW never passes the local log end."""
    ctx = Context(replicas=(1, 2, 3), isr=(1, 3), leader_epoch=8)
    ctx.logs.ends[KEY] = 5
    ctx.rs.on_append(ctx.now, KEY)
    assert ctx.p.high_watermark == 0
    for follower in (2, 3):
        ctx.fetch(follower, 0, leader_end=5)
        ctx.fetch(follower, 2, leader_end=5)
    assert ctx.p.high_watermark == 2
    ctx.change(leader=3, isr=(1, 3))
    assert ctx.p.role == Role.FOLLOWER and ctx.p.high_watermark == 2
    assert ctx.p.update_follower_high_watermark(5, 3) == 3


# ---- what each call returns (nothing is left in the replica set for its driver to drain) --------------


def test_a_follower_fetch_that_moves_the_high_watermark_returns_the_partition_once():
    ctx = Context(replicas=(1, 2), isr=(1, 2))
    moved = ctx.fetch(2, 10)
    assert moved == ReplicaOutputs(hw_moved=(KEY,))
    assert ctx.p.high_watermark == 10
    assert ctx.fetch(2, 10) is NO_OUTPUTS, "the move was handed back once, not kept for a later call"
    assert ctx.fetch(2, 12, leader_end=12) is moved, "the partition's prebuilt outputs: nothing allocated"


def test_a_follower_fetch_that_changes_nothing_returns_the_shared_empty_outputs():
    """The hot path: every partition of every follower fetch; nothing moved allocates nothing."""
    ctx = Context(replicas=(1, 2), isr=(1, 2))
    ctx.fetch(2, 10)
    assert ctx.fetch(2, 10) is NO_OUTPUTS
    assert ctx.rs.on_follower_fetch(ctx.now, ("other", 0), 2, 102, 10, 10) is NO_OUTPUTS


def test_a_follower_fetch_that_expands_the_isr_returns_the_request_and_its_answer_the_change():
    ctx = Context(replicas=(1, 2), isr=(1,))
    outputs = ctx.fetch(2, 10)
    (requested,) = outputs.isr_events
    assert requested == IsrEvent(KEY, "requested", ctx.p.pending)
    assert outputs.hw_moved == ()  # the leader alone had taken the HW to its log end
    assert ctx.fetch(2, 10).isr_events == (), "the change is pending: not requested again"
    ctx.send()
    answered = ctx.respond()
    assert answered.isr_events == (IsrEvent(KEY, "changed", requested.item, isr=(1, 2)),)
    assert ctx.p.isr == (1, 2)


def test_a_refused_isr_change_is_returned_as_rejected():
    ctx = Context(replicas=(1, 2), isr=(1,))
    (requested,) = ctx.fetch(2, 10).isr_events
    ctx.send()
    answered = ctx.respond(ErrorCode.invalid_update_version)
    assert answered.isr_events == (
        IsrEvent(KEY, "rejected", requested.item, ErrorCode.invalid_update_version),
    )


def test_a_tick_returns_the_shrink_it_requested_and_a_quiet_tick_nothing():
    ctx = Context(replicas=(1, 2), isr=(1, 2))
    assert ctx.rs.tick(ctx.now) is NO_OUTPUTS
    ctx.now += LAG_MS + 1
    (requested,) = ctx.rs.tick(ctx.now).isr_events
    assert requested.kind == "requested" and requested.item is not None and requested.item.kind == "shrink"


def test_an_append_to_a_single_replica_isr_returns_the_moved_high_watermark():
    ctx = Context(replicas=(1, 2), isr=(1,))
    ctx.logs.ends[KEY] = 12
    assert ctx.rs.on_append(ctx.now, KEY) == ReplicaOutputs(hw_moved=(KEY,))
    assert ctx.rs.on_append(ctx.now, KEY) is NO_OUTPUTS


def test_an_uncleanly_elected_leader_returns_its_transition_and_recovered_report_together():
    ctx = Context(replicas=(1, 2), isr=(2,), leader=2)
    outputs = ctx.change(leader=1, isr=(1,), leader_recovery_state=RECOVERING)
    (transition,) = outputs.transitions
    (requested,) = outputs.isr_events
    assert transition.kind == "leader" and transition.new_term
    assert requested.kind == "requested" and requested.item is ctx.p.pending
    assert requested.item is not None and requested.item.kind == "recovered"


def test_a_fenced_follower_frees_the_high_watermark_in_the_metadata_change_that_fences_it():
    """A high watermark a metadata change frees is in apply_metadata's outputs, beside its transition."""
    from epochkraft.protocol.metadata_records import FenceBrokerRecord

    ctx = Context(replicas=(1, 2, 3), isr=(1, 2, 3))
    ctx.fetch(2, 10)
    assert ctx.p.high_watermark == 0  # broker 3 holds it back
    outputs = ctx.apply(
        FenceBrokerRecord(id=3, epoch=103),
        PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(1, 2)),
    )
    assert outputs.hw_moved == (KEY,) and ctx.p.high_watermark == 10


def daemon_driver(ctx: Context):
    """The daemon's ReplicaManager around the context's partition, with only what carrying out needs."""
    import asyncio

    from epochkraft.broker.replica_manager import Replica, ReplicaManager

    manager = object.__new__(ReplicaManager)
    replica = Replica(partition=ctx.p, log=None)  # type: ignore[arg-type]
    manager.replicas = {KEY: replica}
    manager._waiting = {}
    manager.events = None
    manager._alter_wakeup = asyncio.Event()
    return manager, replica


async def test_the_daemon_wakes_the_long_polls_of_the_partitions_a_call_returns_as_moved():
    import asyncio

    ctx = Context(replicas=(1, 2), isr=(1, 2))
    manager, replica = daemon_driver(ctx)
    long_poll = asyncio.get_running_loop().create_future()
    replica.fetch_waiters.add(long_poll)
    manager._after_replica_set(ctx.fetch(2, 8))
    assert ctx.p.high_watermark == 8 and long_poll.done()
    still_waiting = asyncio.get_running_loop().create_future()
    replica.fetch_waiters.add(still_waiting)
    manager._after_replica_set(ctx.fetch(2, 8))
    assert not still_waiting.done()


async def test_the_daemon_wakes_its_alter_partition_sender_for_a_requested_change_a_call_returns():
    ctx = Context(replicas=(1, 2), isr=(1,))
    manager, _ = daemon_driver(ctx)
    manager._after_replica_set(ctx.rs.tick(ctx.now))
    assert not manager._alter_wakeup.is_set()
    manager._after_replica_set(ctx.fetch(2, 10))
    assert manager._alter_wakeup.is_set()


# ---- AlterPartitionManagerTest --------------------------------------------------------------------------


def test_overwrite_within_batch():
    """AlterPartitionManagerTest.testOverwriteWithinBatch: a second change for a partition is refused while
    the first is queued or in flight, and accepted once it is answered."""
    ctx = Context(replicas=(1, 2, 3), isr=(1,))
    first = ctx.p.update_follower_fetch(ctx.now, 2, 102, 10, 10, ctx.cache.image, 101)
    assert ctx.rs.alter.submit(first)
    ctx.p.pending = None
    second = ctx.p.update_follower_fetch(ctx.now, 3, 103, 10, 10, ctx.cache.image, 101)
    assert not ctx.rs.alter.submit(second), "OPERATION_NOT_ATTEMPTED"
    ctx.send()
    ctx.respond()
    assert ctx.rs.alter.submit(second)
    assert [s.broker_id for s in ctx.send().topics[0].partitions[0].new_isr_with_epochs] == [1, 3]


def test_partition_missing_in_response():
    """AlterPartitionManagerTest.testPartitionMissingInResponse: an item the controller did not answer
    is sent again."""
    ctx = Context(replicas=(1, 2), isr=(1,))
    ctx.fetch(2, 10)
    sent = ctx.send()
    ctx.rs.on_alter_partition_response(
        ctx.now, r3.AlterPartitionResponse(throttle_time=datetime.timedelta(0), error_code=0, topics=())
    )
    assert ctx.p.pending is not None
    assert ctx.send() == sent


@pytest.mark.parametrize("state", [RECOVERED, RECOVERING])
def test_basic_sent_leader_recovery_state(state):
    """AlterPartitionManagerTest.testBasicSentLeaderRecoveryState: the request carries the proposal's
    LeaderRecoveryState."""
    ctx = Context(replicas=(1, 2), isr=(2,), leader=2)
    ctx.change(leader=1, isr=(1,), leader_recovery_state=state)
    if state == RECOVERED:
        ctx.fetch(2, 10)
    request = ctx.send()
    assert request.topics[0].partitions[0].leader_recovery_state == RECOVERED


# ---- fetch rules (PartitionTest.testLastFetchedOffsetValidation, divergence half) -----------------------


def leader_epochs(start: int = 0) -> LeaderEpochCache:
    epochs = LeaderEpochCache(None, lambda: 17)
    for epoch, offset in [(0, 0), (3, 2), (4, 8), (7, 13), (9, 14), (10, 17)]:
        epochs.assign(epoch, offset)
    if start:
        epochs.truncate_from_start(start)
    return epochs


def plan(last_fetched_epoch: int, fetch_offset: int, log_start: int = 0):
    ctx = Context(replicas=(1, 2), isr=(1, 2), leader_epoch=10)
    return plan_read(
        ctx.p,
        leader_epochs(log_start),
        log_start_offset=log_start,
        log_end_offset=17,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
        current_leader_epoch=10,
        replica_id=2,
        replica_epoch=102,
        brokers=ctx.cache.image,
    )


@pytest.mark.parametrize(
    ("last_fetched", "offset", "log_start", "diverging"),
    [
        (2, 5, 0, (0, 2)),
        (0, 4, 0, (0, 2)),
        (6, 6, 0, (4, 13)),
        (5, 9, 0, (4, 13)),
        (10, 18, 0, (10, 17)),
        (0, 2, 0, None),
        (7, 14, 0, None),
        (9, 17, 0, None),
        (10, 17, 0, None),
        (2, 8, 5, (2, 5)),  # below the first epoch once the log starts at 5: the first epoch's start
        (0, 5, 5, None),
        (3, 5, 5, None),
    ],
)
def test_last_fetched_offset_validation(last_fetched, offset, log_start, diverging):
    """PartitionTest.testLastFetchedOffsetValidation."""
    answer = plan(last_fetched, offset, log_start)
    assert answer.error == ErrorCode.none and answer.diverging == diverging
    assert answer.reads == (diverging is None)


@pytest.mark.parametrize(
    ("last_fetched", "offset", "log_start"), [(11, 5, 0), (0, 0, 5), (5, 6, 10), (3, 6, 10)]
)
def test_last_fetched_offset_validation_out_of_range(last_fetched, offset, log_start):
    assert plan(last_fetched, offset, log_start).error == ErrorCode.offset_out_of_range


def test_follower_behind_the_leaders_first_epoch_truncates_and_rejoins():
    """A follower whose last fetched epoch is older than everything the leader holds (the leader came
    back on an empty disk): the leader answers the first epoch's start, the follower truncates there and
    its next fetch reads."""
    leader = LeaderEpochCache(None, lambda: 3)
    leader.assign(6, 0)  # re-elected on an empty disk
    follower_end = 40
    follower = LeaderEpochCache(None, lambda: follower_end)
    follower.assign(2, 0)
    follower.assign(4, 25)
    ctx = Context(replicas=(1, 2), isr=(1,), leader_epoch=6)
    common = dict(
        log_start_offset=0, log_end_offset=3, current_leader_epoch=6, replica_id=2, replica_epoch=102
    )
    first = plan_read(ctx.p, leader, fetch_offset=40, last_fetched_epoch=4, brokers=ctx.cache.image, **common)
    assert first.diverging == (4, 0)
    target = truncation_offset(follower, follower_end, 30, first.diverging)
    assert target == 0
    follower.truncate_from_end(target)
    again = plan_read(ctx.p, leader, fetch_offset=0, last_fetched_epoch=-1, brokers=ctx.cache.image, **common)
    assert again.reads and again.max_offset == 3


@pytest.mark.parametrize(
    ("diverging", "expected"),
    [
        ((4, 30), 30),  # same epoch known: the smaller end
        ((4, 50), 40),  # never past our own end
        ((3, 20), 25),  # the leader's epoch unknown to us: the end of our largest epoch below it
        ((1, 20), 0),  # below our first epoch: our first epoch's start
        ((-1, 12), 12),  # no epoch: the leader's offset
        ((-1, -1), 30),  # nothing defined: back to our high watermark
    ],
)
def test_truncation_offset(diverging, expected):
    """AbstractFetcherThread.getOffsetTruncationState on the follower's epoch cache."""
    follower = LeaderEpochCache(None, lambda: 40)
    follower.assign(2, 0)
    follower.assign(4, 25)
    assert truncation_offset(follower, 40, 30, diverging) == expected


@pytest.mark.parametrize(
    ("log_end", "leader_start", "leader_hw", "expected"),
    [(5, 10, 20, 10), (30, 0, 20, 20), (15, 0, 20, 15), (3, 0, -1, 3)],
)
def test_out_of_range_reset(log_end, leader_start, leader_hw, expected):
    """AbstractFetcherThread.fetchOffsetAndTruncate: behind the leader's start -> start there; ahead of
    the leader -> back to what it holds; else keep the log."""
    assert out_of_range_reset(log_end, leader_start, leader_hw) == expected
