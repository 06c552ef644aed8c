"""Kafka's controller scenarios on the sans-IO core, named after the Kafka tests they reproduce
(ReplicationControlManagerTest, ClusterControlManagerTest, PartitionChangeBuilderTest)."""

import dataclasses
import uuid

import pytest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest

from epochkraft.controller.controller import Controller
from epochkraft.controller.partition_change import Election, PartitionChangeBuilder
from epochkraft.controller.settings import ControllerSettings
from epochkraft.metadata.registrations import LeaderRecoveryState, PartitionRegistration
from epochkraft.protocol.errors import ErrorCode
from tests.controller_context import CLUSTER_ID, ControllerContext

# ---- ClusterControlManagerTest ------------------------------------------------------------------------


def test_re_registration_and_broker_epoch():
    ctx = ControllerContext()
    offset = ctx.controller.log.next_offset
    first = ctx.registration(1)
    assert (first.error_code, first.broker_epoch) == (ErrorCode.none, offset)
    assert ctx.controller.cluster.brokers[1].fenced
    # The same incarnation retrying keeps its epoch and writes nothing.
    before = ctx.controller.log.next_offset
    assert ctx.registration(1).broker_epoch == offset
    assert ctx.controller.log.next_offset == before
    # A new incarnation (the old one is fenced, so it has no valid session) gets a new, higher epoch.
    again = ctx.registration(1, incarnation=uuid.uuid4())
    assert again.error_code == ErrorCode.none and again.broker_epoch > offset
    assert ctx.controller.cluster.brokers[1].fenced


def test_inconsistent_cluster_id():
    ctx = ControllerContext()
    assert ctx.registration(1, cluster_id="another-cluster").error_code == ErrorCode.inconsistent_cluster_id


def test_duplicate_broker_registration_while_the_old_session_is_valid():
    ctx = ControllerContext(session_timeout_ms=2000)
    ctx.brokers_ready(1)
    old_epoch = ctx.epoch(1)
    assert ctx.registration(1, incarnation=uuid.uuid4()).error_code == ErrorCode.duplicate_broker_registration
    # A clean restart that presents its previous epoch is admitted at once.
    assert (
        ctx.registration(1, incarnation=uuid.uuid4(), previous_broker_epoch=old_epoch).error_code
        == ErrorCode.none
    )


def test_duplicate_registration_allowed_after_session_expiry():
    ctx = ControllerContext(session_timeout_ms=2000)
    ctx.brokers_ready(1)
    ctx.now += 2001
    assert ctx.registration(1, incarnation=uuid.uuid4()).error_code == ErrorCode.none


def test_re_registration_removes_the_old_incarnation_from_isrs_and_leadership():
    """Kafka's handleBrokerShutdown on re-registration: the new incarnation's log may be shorter, so the
    old one leaves every ISR and leadership before the new registration record."""
    ctx = ControllerContext(session_timeout_ms=2000)
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    before = ctx.partition("foo")
    assert before.leader == 1
    old_epoch = ctx.epoch(1)
    again = ctx.registration(1, incarnation=uuid.uuid4(), previous_broker_epoch=old_epoch)
    assert again.error_code == ErrorCode.none
    after = ctx.partition("foo")
    assert (after.leader, tuple(after.isr)) == (2, (2, 3))
    assert after.leader_epoch == before.leader_epoch + 1
    assert again.broker_epoch > old_epoch and ctx.controller.cluster.brokers[1].fenced


# ---- heartbeats ---------------------------------------------------------------------------------------


def test_heartbeat_with_wrong_or_unknown_epoch_is_stale():
    ctx = ControllerContext()
    ctx.register_brokers(1)
    assert ctx.heartbeat(1, epoch=ctx.epoch(1) + 100).error_code == ErrorCode.stale_broker_epoch
    unknown = BrokerHeartbeatRequest(
        broker_id=9,
        broker_epoch=5,
        current_metadata_offset=0,
        want_fence=False,
        want_shut_down=False,
        offline_log_dirs=(),
    )
    assert ctx.controller.heartbeat(ctx.now, unknown).error_code == ErrorCode.stale_broker_epoch


def test_heartbeat_state_machine_unfences_only_when_caught_up():
    ctx = ControllerContext()
    ctx.register_brokers(1)
    registration_offset = ctx.epoch(1)
    behind = ctx.heartbeat(1, metadata_offset=registration_offset - 1)
    assert (behind.is_caught_up, behind.is_fenced) == (False, True)
    wants_fence = ctx.heartbeat(1, want_fence=True)
    assert (wants_fence.is_caught_up, wants_fence.is_fenced) == (True, True)
    unfenced = ctx.heartbeat(1)
    assert (unfenced.is_caught_up, unfenced.is_fenced, unfenced.should_shut_down) == (True, False, False)
    fenced_again = ctx.heartbeat(1, want_fence=True)
    assert fenced_again.is_fenced


def test_fenced_broker_wanting_shutdown_shuts_down_now():
    ctx = ControllerContext()
    ctx.register_brokers(1)
    response = ctx.heartbeat(1, want_shut_down=True)
    assert response.should_shut_down and response.is_fenced


def test_controlled_shutdown_moves_leadership_then_waits_for_active_brokers():
    """Leadership moves at once; the broker may stop only once every active broker has replayed those
    records (Kafka's controlled shutdown offset), and stopping fences it."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    response = ctx.heartbeat(1, want_shut_down=True)
    partition = ctx.partition("foo")
    assert partition.leader == 2 and 1 not in partition.isr
    assert ctx.controller.cluster.brokers[1].in_controlled_shutdown
    assert not response.should_shut_down and not response.is_fenced
    shutdown_offset = ctx.controller.log.next_offset - 1
    assert ctx.controller.cluster.controlled_shutdown_offset(1) == shutdown_offset
    assert not ctx.heartbeat(1, want_shut_down=True).should_shut_down, "2 and 3 have not replayed it"
    ctx.heartbeat(2, metadata_offset=shutdown_offset)
    assert not ctx.heartbeat(1, want_shut_down=True).should_shut_down, "3 has not replayed it"
    ctx.heartbeat(3, metadata_offset=shutdown_offset)
    done = ctx.heartbeat(1, want_shut_down=True)
    assert done.should_shut_down and done.is_fenced, "a completed controlled shutdown fences the broker"
    assert ctx.controller.cluster.brokers[1].fenced
    assert ctx.registration(1, incarnation=uuid.uuid4()).error_code == ErrorCode.none, (
        "no session to wait out"
    )


def test_broker_leading_nothing_shuts_down_now():
    """BrokerHeartbeatManager: UNFENCED + want_shut_down without leaderships -> SHUTDOWN_NOW."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[2, 3, 1]])
    response = ctx.heartbeat(1, want_shut_down=True)
    assert response.should_shut_down and response.is_fenced
    assert 1 not in ctx.partition("foo").isr


def test_process_expired_broker_heartbeat():
    ctx = ControllerContext(session_timeout_ms=2000)
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    ctx.now += 1500
    ctx.unfence_brokers(2, 3)  # 2 and 3 keep heartbeating, 1 goes silent
    assert ctx.advance(600) == [1]
    assert ctx.controller.cluster.brokers[1].fenced
    partition = ctx.partition("foo")
    assert partition.isr == (2, 3) and partition.leader == 2


def test_next_session_expiry_is_when_the_oldest_session_expires():
    ctx = ControllerContext(session_timeout_ms=2000)
    ctx.brokers_ready(1, 2)
    ctx.now += 500
    ctx.unfence_brokers(2)  # 2 heartbeats 500 ms after 1 did
    last_contact_of_1 = ctx.now - 500
    expiry = ctx.controller.next_session_expiry_ms(ctx.now)
    assert expiry == last_contact_of_1 + 2000 + 1, "the first instant past the session timeout"
    assert ctx.advance(expiry - 1 - ctx.now) == [], "not fenced at exactly the session timeout"
    assert ctx.advance(1) == [1]
    assert ctx.controller.next_session_expiry_ms(ctx.now) == last_contact_of_1 + 500 + 2000 + 1
    ctx.fence_brokers(2)
    assert ctx.controller.next_session_expiry_ms(ctx.now) is None, "no unfenced broker, nothing to expire"


def test_fence_multiple_brokers_keeps_the_last_replica_standing():
    """With ELR off (KIP-903's rule); with ELR on the ISR empties into the ELR (test_partition_change)."""
    ctx = ControllerContext(eligible_leader_replicas_version=0)
    ctx.brokers_ready(1, 2, 3, 4)
    ctx.create_topic("foo", [[1, 2, 3]])
    ctx.fence_brokers(2, 3)
    assert (ctx.partition("foo").isr, ctx.partition("foo").leader) == ((1,), 1)
    ctx.fence_brokers(1)
    partition = ctx.partition("foo")
    assert partition.isr == (1,), "the last ISR member stays in the ISR"
    assert partition.leader == -1, "and the partition goes offline"
    ctx.unfence_brokers(1)
    assert ctx.partition("foo").leader == 1, "unfencing the last ISR member elects it cleanly"


# ---- AlterPartition -----------------------------------------------------------------------------------


def test_shrink_and_expand_isr():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    before = ctx.partition("foo")
    top, p = ctx.alter_partition(1, "foo", [1, 2])
    assert (top.error_code, p.error_code, p.isr) == (ErrorCode.none, ErrorCode.none, (1, 2))
    after = ctx.partition("foo")
    assert after.partition_epoch == before.partition_epoch + 1
    assert after.leader_epoch == before.leader_epoch, "an ISR change alone does not bump the leader epoch"
    _, p = ctx.alter_partition(1, "foo", [1, 2, 3])
    assert (p.error_code, p.isr, p.partition_epoch) == (ErrorCode.none, (1, 2, 3), before.partition_epoch + 2)


def test_idempotent_retry_writes_nothing_and_answers_current_state():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    offset = ctx.controller.log.next_offset
    _, p = ctx.alter_partition(1, "foo", [1, 2, 3])
    assert (p.error_code, p.isr) == (ErrorCode.none, (1, 2, 3))
    assert ctx.controller.log.next_offset == offset


INVALID_ALTER_PARTITION = [
    # (description, kwargs for alter_partition, expected partition error or top-level error)
    ("wrong leader", {"requester": 2, "isr": [1, 2, 3]}, ErrorCode.invalid_request),
    ("stale requester epoch", {"requester_epoch": 0}, "top:" + str(int(ErrorCode.stale_broker_epoch))),
    ("future leader epoch", {"leader_epoch": 5}, ErrorCode.not_controller),
    ("future partition epoch", {"partition_epoch": 5}, ErrorCode.not_controller),
    ("past leader epoch", {"leader_epoch": -1}, ErrorCode.fenced_leader_epoch),
    ("past partition epoch", {"partition_epoch": -1}, ErrorCode.invalid_update_version),
    ("non-replica in ISR", {"isr": [1, 2, 4]}, ErrorCode.invalid_request),
    ("duplicate in ISR", {"isr": [1, 2, 2]}, ErrorCode.invalid_request),
    ("leader missing from ISR", {"isr": [2, 3]}, ErrorCode.invalid_request),
    ("RECOVERING with ISR > 1", {"recovery": 1, "isr": [1, 2]}, ErrorCode.invalid_request),
    ("RECOVERED -> RECOVERING", {"recovery": 1, "isr": [1]}, ErrorCode.invalid_request),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "expected"), INVALID_ALTER_PARTITION, ids=[c[0] for c in INVALID_ALTER_PARTITION]
)
def test_invalid_alter_partition_requests(case, kwargs, expected):
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3, 4)
    ctx.create_topic("foo", [[1, 2, 3]])
    offset = ctx.controller.log.next_offset
    requester = kwargs.pop("requester", 1)
    isr = kwargs.pop("isr", [1, 2, 3])
    top, partition = ctx.alter_partition(requester, "foo", isr, **kwargs)
    if isinstance(expected, str):
        assert top.error_code == int(expected.removeprefix("top:"))
        assert top.topics == ()
    else:
        assert top.error_code == ErrorCode.none
        assert partition.error_code == expected
    assert ctx.controller.log.next_offset == offset, "a rejected change writes nothing"


@pytest.mark.parametrize(
    ("version", "expected"), [(2, ErrorCode.unknown_topic_id), (3, ErrorCode.unknown_topic_id)]
)
def test_alter_partition_handle_unknown_topic_id_or_name(version, expected):
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    _, p = ctx.alter_partition(
        1, "foo", [1, 2], topic_id=uuid.uuid4(), version=version, leader_epoch=0, partition_epoch=0
    )
    assert p.error_code == expected


def test_alter_partition_unknown_partition():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    _, p = ctx.alter_partition(1, "foo", [1], index=7, leader_epoch=0, partition_epoch=0)
    assert p.error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("version", [2, 3])
def test_alter_partition_should_reject_fenced_brokers(version):
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3, 4)
    ctx.create_topic("foo", [[1, 2, 3, 4]])
    ctx.fence_brokers(4)
    assert 4 not in ctx.partition("foo").isr
    _, p = ctx.alter_partition(1, "foo", [1, 2, 3, 4], version=version)
    assert p.error_code == ErrorCode.ineligible_replica
    ctx.unfence_brokers(4)
    _, p = ctx.alter_partition(1, "foo", [1, 2, 3, 4], version=version)
    assert (p.error_code, p.isr) == (ErrorCode.none, (1, 2, 3, 4))


@pytest.mark.parametrize("version", [2, 3])
def test_alter_partition_should_reject_shutting_down_brokers(version):
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3, 4)
    ctx.create_topic("foo", [[1, 2, 3, 4]])
    ctx.shut_down_brokers(4)
    _, p = ctx.alter_partition(1, "foo", [1, 2, 3, 4], version=version)
    assert p.error_code == ErrorCode.ineligible_replica


@pytest.mark.parametrize(("version", "expected"), [(3, ErrorCode.ineligible_replica), (2, ErrorCode.none)])
def test_alter_partition_should_reject_brokers_with_stale_epoch(version, expected):
    """KIP-903: v3 carries each replica's broker epoch; a stale one is refused. v2 cannot tell."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    ctx.alter_partition(1, "foo", [1, 2])
    stale_epoch = ctx.epoch(3)
    ctx.registration(3, incarnation=uuid.uuid4(), previous_broker_epoch=stale_epoch)  # broker 3 reboots
    ctx.unfence_brokers(3)
    _, p = ctx.alter_partition(
        1, "foo", [(1, ctx.epoch(1)), (2, ctx.epoch(2)), (3, stale_epoch)], version=version
    )
    assert p.error_code == expected


def test_minus_one_broker_epoch_skips_the_epoch_check():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    ctx.alter_partition(1, "foo", [1, 2])
    _, p = ctx.alter_partition(1, "foo", [(1, -1), (2, -1), (3, -1)])
    assert (p.error_code, p.isr) == (ErrorCode.none, (1, 2, 3))


def test_unregistered_replica_is_ineligible():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    ctx.alter_partition(1, "foo", [1, 2])
    from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest

    assert (
        ctx.controller.unregister_broker(ctx.now, UnregisterBrokerRequest(broker_id=3)).error_code
        == ErrorCode.none
    )
    _, p = ctx.alter_partition(1, "foo", [(1, ctx.epoch(1)), (2, ctx.epoch(2)), (3, -1)])
    assert p.error_code == ErrorCode.ineligible_replica


def test_unsafe_switch_turns_the_eligibility_check_off():
    ctx = ControllerContext(unsafe_disable_kip841_eligibility_check=True)
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    ctx.alter_partition(1, "foo", [1, 2])
    stale_epoch = ctx.epoch(3)
    ctx.registration(3, incarnation=uuid.uuid4(), previous_broker_epoch=stale_epoch)
    _, p = ctx.alter_partition(1, "foo", [(1, ctx.epoch(1)), (2, ctx.epoch(2)), (3, stale_epoch)])
    assert (p.error_code, p.isr) == (ErrorCode.none, (1, 2, 3)), "the fenced, stale replica gets in"


def test_new_leader_elected_when_the_requesting_leader_is_no_longer_acceptable():
    ctx = ControllerContext(unsafe_disable_kip841_eligibility_check=True)
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    # Only reachable with the eligibility check off: the leader is fenced in the registry but the
    # fencing change has not reached the partition yet, and it proposes an ISR with itself.
    cluster = ctx.controller.cluster
    cluster.brokers[1] = dataclasses.replace(cluster.brokers[1], fenced=True)
    _, p = ctx.alter_partition(1, "foo", [1, 2])
    assert p.error_code == ErrorCode.new_leader_elected
    assert ctx.partition("foo").leader == 2


# ---- elections ----------------------------------------------------------------------------------------


def test_elect_unclean_leaders_without_elr_last_replica_standing():
    ctx = ControllerContext(eligible_leader_replicas_version=0)
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    ctx.alter_partition(1, "foo", [1])
    ctx.fence_brokers(1)
    partition = ctx.partition("foo")
    assert (partition.leader, partition.isr) == (-1, (1,))
    assert ctx.elect("foo", [0], unclean=False) == ErrorCode.preferred_leader_not_available
    assert ctx.elect("foo", [0], unclean=True) == ErrorCode.none
    partition = ctx.partition("foo")
    assert partition.leader == 2 and partition.isr == (2,)
    assert partition.leader_recovery_state == LeaderRecoveryState.RECOVERING
    # KIP-704: only the leader's AlterPartition with RECOVERED clears it; expansion waits until then.
    _, p = ctx.alter_partition(2, "foo", [2, 3], recovery=1)
    assert p.error_code == ErrorCode.invalid_request
    _, p = ctx.alter_partition(2, "foo", [2], recovery=0)
    assert (p.error_code, p.leader_recovery_state) == (ErrorCode.none, 0)
    _, p = ctx.alter_partition(2, "foo", [2, 3])
    assert (p.error_code, p.isr) == (ErrorCode.none, (2, 3))


def test_unclean_topic_config_elects_out_of_isr_on_fencing():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2)
    ctx.create_topic("foo", [[1, 2]], configs={"unclean.leader.election.enable": "true"})
    ctx.alter_partition(1, "foo", [1])
    ctx.fence_brokers(1)
    partition = ctx.partition("foo")
    assert (partition.leader, partition.isr, partition.leader_recovery_state) == (
        2,
        (2,),
        LeaderRecoveryState.RECOVERING,
    )


def test_unclean_election_without_any_live_replica():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2)
    ctx.create_topic("foo", [[1, 2]])
    ctx.fence_brokers(2, 1)
    assert ctx.elect("foo", [0], unclean=True) == ErrorCode.eligible_leaders_not_available


def test_preferred_election():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", [[1, 2, 3]])
    assert ctx.elect("foo", [0], unclean=False) == ErrorCode.election_not_needed
    ctx.fence_brokers(1)
    assert ctx.partition("foo").leader == 2
    ctx.unfence_brokers(1)
    ctx.alter_partition(2, "foo", [2, 3, 1])
    assert ctx.elect("foo", [0], unclean=False) == ErrorCode.none
    assert ctx.partition("foo").leader == 1


# ---- PartitionChangeBuilderTest ------------------------------------------------------------------------

BASE = PartitionRegistration(
    replicas=(2, 1, 3), isr=(2, 1, 3), leader=1, leader_epoch=100, partition_epoch=200
)


@pytest.mark.parametrize(
    ("isr", "active", "election", "expected_leader"),
    [
        ((2, 1, 3), {1, 2, 3}, Election.CLEAN, 1),  # current leader stays
        ((2, 3), {1, 2, 3}, Election.CLEAN, 2),  # leader left the ISR: first replica in ISR
        ((2, 1, 3), {2, 3}, Election.CLEAN, 2),  # leader not acceptable
        ((3,), {1, 2}, Election.CLEAN, -1),  # nobody in the ISR acceptable
        ((3,), {1, 2}, Election.UNCLEAN, 2),  # unclean: first acceptable replica
        ((2, 1, 3), {1, 2, 3}, Election.PREFERRED, 2),  # preferred: first replica
    ],
)
def test_elect_leader(isr, active, election, expected_leader):
    builder = PartitionChangeBuilder(
        BASE, uuid.UUID(int=1), 0, lambda b: b in active, election
    ).set_target_isr(isr)
    change = builder.build()
    leader = BASE.leader if change is None else change.leader
    assert leader == expected_leader


def test_unclean_sets_leader_recovering_state():
    change = (
        PartitionChangeBuilder(BASE, uuid.UUID(int=1), 0, lambda b: b == 3, Election.UNCLEAN)
        .set_target_isr((1,))
        .build()
    )
    assert change is not None and change.unclean
    assert (change.leader, change.isr, change.record.leader_recovery_state) == (3, (3,), 1)


def test_no_leader_epoch_bump_on_isr_shrink():
    from epochkraft.metadata.image import apply_change

    change = PartitionChangeBuilder(BASE, uuid.UUID(int=1), 0, lambda b: True).set_target_isr((2, 1)).build()
    assert change is not None and change.record.leader == -2
    after = apply_change(BASE, change.record)
    assert (after.leader_epoch, after.partition_epoch) == (100, 201)


def test_no_change_builds_nothing():
    assert PartitionChangeBuilder(BASE, uuid.UUID(int=1), 0, lambda b: True).build() is None


# ---- topics -----------------------------------------------------------------------------------------


def test_create_topics_errors():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", partitions=3, rf=3)
    ctx.create_topic("foo", partitions=1, rf=1, expected=ErrorCode.topic_already_exists)
    ctx.create_topic("bar", partitions=1, rf=4, expected=ErrorCode.invalid_replication_factor)
    ctx.create_topic("baz", [[1, 1]], expected=ErrorCode.invalid_replica_assignment)
    ctx.create_topic("baz", [[1, 9]], expected=ErrorCode.invalid_replica_assignment)
    ctx.create_topic("bad name!", partitions=1, rf=1, expected=ErrorCode.invalid_topic_exception)
    ctx.create_topic(
        "cfg", partitions=1, rf=1, configs={"min.insync.replicas": "zero"}, expected=ErrorCode.invalid_config
    )


def test_create_topic_places_replicas_and_initial_isr_is_active_replicas():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.register_brokers(4)  # registered but fenced
    result = ctx.create_topic("foo", partitions=6, rf=3, configs={"min.insync.replicas": "2"})
    assert (result.num_partitions, result.replication_factor) == (6, 3)
    leaders = {ctx.partition("foo", i).leader for i in range(6)}
    assert leaders == {1, 2, 3}
    assert ctx.controller.replication.min_insync("foo") == 2
    result = ctx.create_topic("bar", [[4, 1]])
    assert ctx.partition("bar").isr == (1,) and ctx.partition("bar").leader == 1


def test_delete_topics():
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState

    ctx = ControllerContext()
    ctx.brokers_ready(1)
    ctx.create_topic("foo", [[1]])
    topic_id = ctx.topic_id("foo")
    request = DeleteTopicsRequest(
        topics=(DeleteTopicState(name=None, topic_id=topic_id), DeleteTopicState(name="nope", topic_id=None)),
        timeout=__import__("datetime").timedelta(seconds=1),
    )
    response = ctx.controller.delete_topics(ctx.now, request)
    assert [r.error_code for r in response.responses] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert ctx.controller.replication.topic("foo") is None


def test_replaying_the_log_rebuilds_the_same_state():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("foo", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    ctx.alter_partition(ctx.partition("foo", 0).leader, "foo", [ctx.partition("foo", 0).leader])
    ctx.fence_brokers(2)
    data = ctx.controller.log.read(0, 1 << 30)
    fresh = Controller(CLUSTER_ID, ControllerSettings())
    fresh.load(data)
    assert fresh.state() == ctx.controller.state()
    assert fresh.log.next_offset == ctx.controller.log.next_offset
