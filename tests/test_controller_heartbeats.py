"""Broker heartbeat and registration scenarios on the sans-IO controller, named after the Kafka tests
they reproduce (BrokerHeartbeatManagerTest, ClusterControlManagerTest, ReplicationControlManagerTest,
PartitionChangeBuilderTest)."""

from __future__ import annotations

import uuid

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest

from epochkraft.controller.cluster_control import BrokerControlState, ClusterControl, Session
from epochkraft.controller.partition_change import PartitionChangeBuilder
from epochkraft.metadata.image import apply_change
from epochkraft.metadata.registrations import NO_LEADER, LeaderRecoveryState, PartitionRegistration
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    BrokerEndpoint,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tests.controller_context import CLUSTER_ID, ControllerContext

FENCED, UNFENCED = BrokerControlState.FENCED, BrokerControlState.UNFENCED
CONTROLLED_SHUTDOWN, SHUTDOWN_NOW = BrokerControlState.CONTROLLED_SHUTDOWN, BrokerControlState.SHUTDOWN_NOW


def register_record(broker_id: int, epoch: int, *, fenced: bool = True, shutting_down: bool = False):
    return RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=broker_id + 1),
        broker_epoch=epoch,
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="example.com", port=9092, security_protocol=0),),
        rack="arack",
        fenced=fenced,
        in_controlled_shutdown=shutting_down,
    )


# ---- ClusterControlManagerTest ------------------------------------------------------------------------


def test_replay_register_broker_record():
    """ClusterControlManagerTest.testReplayRegisterBrokerRecord: a replayed registration is the broker's
    state, and its record's offset is remembered."""
    cluster = ClusterControl(CLUSTER_ID, 1000)
    assert not cluster.is_active(0)
    cluster.replay(register_record(0, 100, shutting_down=True), 100)
    registration = cluster.brokers[0]
    assert registration.fenced and registration.in_controlled_shutdown
    cluster.replay(register_record(0, 100), 100)
    assert cluster.brokers[0].fenced and not cluster.brokers[0].in_controlled_shutdown
    assert cluster.register_offsets[0] == 100
    cluster.replay(register_record(0, 100, fenced=False), 100)
    assert cluster.is_active(0)


def test_unregister():
    """ClusterControlManagerTest.testUnregister: unregistering forgets the registration and its offset."""
    cluster = ClusterControl(CLUSTER_ID, 1000)
    cluster.replay(register_record(1, 100), 100)
    assert cluster.brokers[1].epoch == 100 and cluster.register_offsets[1] == 100
    cluster.replay(UnregisterBrokerRecord(broker_id=1, broker_epoch=100), 101)
    assert 1 not in cluster.brokers and 1 not in cluster.register_offsets


def test_re_registration_is_unfenced_only_past_its_own_register_record():
    """A new incarnation's ISR removals are written before its RegisterBrokerRecord, so its broker epoch
    (the next offset when it registered) is below the record: Kafka unfences at the record's offset."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2)
    ctx.create_topic("foo", [[1, 2]])
    response = ctx.registration(1, incarnation=uuid.uuid4(), previous_broker_epoch=ctx.epoch(1))
    assert response.error_code == ErrorCode.none
    epoch = response.broker_epoch
    record_offset = ctx.controller.cluster.register_offsets[1]
    assert record_offset > epoch, "the ISR removal comes first"
    behind = ctx.heartbeat(1, metadata_offset=record_offset - 1)
    assert behind.is_fenced and not behind.is_caught_up
    assert ctx.controller.cluster.brokers[1].fenced
    caught_up = ctx.heartbeat(1, metadata_offset=record_offset)
    assert not caught_up.is_fenced and caught_up.is_caught_up


# ---- BrokerHeartbeatManagerTest -----------------------------------------------------------------------


def heartbeat_cluster() -> ClusterControl:
    """Brokers 0-5 as in BrokerHeartbeatManagerTest: 0 and 4 fenced, 5 in controlled shutdown at 99."""
    cluster = ClusterControl(CLUSTER_ID, 1000)
    offsets = {0: 100, 1: 98, 2: 100, 3: 100, 4: 100, 5: 99}
    for broker_id, offset in offsets.items():
        cluster.replay(register_record(broker_id, 10 + broker_id), 100)
        if broker_id not in (0, 4):
            cluster.replay(UnfenceBrokerRecord(id=broker_id, epoch=10 + broker_id))
        cluster.sessions[broker_id] = Session(0, offset)
    cluster.maybe_update_controlled_shutdown_offset(5, 99, 0)
    from dataclasses import replace

    cluster.brokers[5] = replace(cluster.brokers[5], in_controlled_shutdown=True)
    return cluster


def next_state(cluster, broker_id, *, fence=False, shut_down=False, offset=0, leads=False):
    return cluster.calculate_next_broker_state(
        broker_id,
        want_fence=fence,
        want_shut_down=shut_down,
        current_metadata_offset=offset,
        has_leaderships=lambda: leads,
    )


def test_calculate_next_broker_state():
    """BrokerHeartbeatManagerTest.testCalculateNextBrokerState."""
    cluster = heartbeat_cluster()
    assert cluster.lowest_active_offset() == 98
    assert next_state(cluster, 0, shut_down=True) == (FENCED, SHUTDOWN_NOW)
    assert next_state(cluster, 0, offset=100) == (FENCED, UNFENCED)
    assert next_state(cluster, 0, offset=50) == (FENCED, FENCED)
    assert next_state(cluster, 0, fence=True, offset=100) == (FENCED, FENCED)
    assert next_state(cluster, 1, shut_down=True, leads=True) == (UNFENCED, CONTROLLED_SHUTDOWN)
    assert next_state(cluster, 1, shut_down=True) == (UNFENCED, SHUTDOWN_NOW)
    assert next_state(cluster, 1) == (UNFENCED, UNFENCED)
    assert next_state(cluster, 5, shut_down=True, leads=True) == (CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN)
    assert next_state(cluster, 5, shut_down=True) == (CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN), (
        "broker 1 has not replayed offset 99"
    )
    from dataclasses import replace

    cluster.brokers[1] = replace(cluster.brokers[1], fenced=True)  # manager.fence(1)
    assert next_state(cluster, 5, shut_down=True) == (CONTROLLED_SHUTDOWN, SHUTDOWN_NOW)
    assert next_state(cluster, 5, shut_down=True, leads=True) == (CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN)


def test_controlled_shutdown_offset_is_only_updated_once():
    """BrokerHeartbeatManagerTest.testControlledShutdownOffsetIsOnlyUpdatedOnce."""
    cluster = heartbeat_cluster()
    assert cluster.controlled_shutdown_offset(2) is None
    cluster.maybe_update_controlled_shutdown_offset(2, 98, 0)
    assert cluster.controlled_shutdown_offset(2) == 98
    cluster.maybe_update_controlled_shutdown_offset(2, 99, 0)
    assert cluster.controlled_shutdown_offset(2) == 98
    assert cluster.controlled_shutdown_offset(3) is None
    cluster.maybe_update_controlled_shutdown_offset(3, 101, 0)
    cluster.maybe_update_controlled_shutdown_offset(3, 102, 0)
    assert cluster.controlled_shutdown_offset(3) == 101


# ---- ReplicationControlManagerTest --------------------------------------------------------------------


def test_process_broker_heartbeat_in_controlled_shutdown():
    """ReplicationControlManagerTest.testProcessBrokerHeartbeatInControlledShutdown: entering controlled
    shutdown writes the registration change, then moves the leadership and shrinks the ISR."""
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1, 2)
    ctx.create_topic("foo", [[0, 1, 2]])
    before = ctx.controller.log.next_offset
    response = ctx.heartbeat(0, want_shut_down=True, metadata_offset=0)
    records = [r for _, r in ctx.controller.log.records() if _ >= before]
    assert [type(r).__name__ for r in records] == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord"]
    assert records[0].in_controlled_shutdown == 1 and records[0].broker_id == 0
    change = records[1]
    assert (change.leader, tuple(change.isr)) == (1, (1, 2))
    assert not response.should_shut_down and not response.is_fenced


def test_preferred_election_does_not_trigger_unclean_election():
    """ReplicationControlManagerTest.testPreferredElectionDoesNotTriggerUncleanElection (ELR off, as
    Kafka's test runs it)."""
    ctx = ControllerContext(eligible_leader_replicas_version=0)
    ctx.brokers_ready(1, 2, 3, 4)
    ctx.create_topic("foo", [[1, 2, 3]])
    ctx.fence_brokers(2, 3)
    ctx.fence_brokers(1)
    ctx.unfence_brokers(2)
    partition = ctx.partition("foo")
    assert (partition.leader, partition.isr) == (NO_LEADER, (1,))
    assert ctx.alter_configs(2, "foo", {"unclean.leader.election.enable": "true"})[0] == ErrorCode.none
    ctx.fence_brokers(2)  # unclean elections run when the config changes; start leaderless again
    ctx.unfence_brokers(2)
    offset = ctx.controller.log.next_offset
    before = ctx.partition("foo")
    assert ctx.elect("foo", [0], unclean=False) == ErrorCode.preferred_leader_not_available
    assert ctx.controller.log.next_offset == offset and ctx.partition("foo") == before


def test_remove_leaderships():
    """ReplicationControlManagerTest.testRemoveLeaderships: fencing a broker removes it from every ISR
    and leadership."""
    ctx = ControllerContext()
    ctx.brokers_ready(0, 1, 2, 3)
    ctx.create_topic("foo", [[0, 1, 2], [1, 2, 3], [2, 3, 0], [0, 2, 1]])
    led = {i for i in range(4) if ctx.partition("foo", i).leader == 0}
    assert led == {0, 3}
    ctx.fence_brokers(0)
    for index in range(4):
        partition = ctx.partition("foo", index)
        assert partition.leader != 0 and 0 not in partition.isr


def test_create_topics_isr_invariants():
    """ReplicationControlManagerTest.testCreateTopicsISRInvariants: a fenced broker or one in controlled
    shutdown gets replicas but is not in the initial ISR, and does not lead. (Kafka's placer may also
    choose such brokers; ours places only on active ones, so the assignment is given, as Kafka's result.)"""
    ctx = ControllerContext()
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1)
    ctx.create_topic("bar", [[1, 0]])  # broker 1 leads something, so its shutdown is controlled
    ctx.heartbeat(1, want_shut_down=True)
    assert ctx.controller.cluster.brokers[1].in_controlled_shutdown
    result = ctx.create_topic("foo", [[1, 0, 2]])
    assert (result.num_partitions, result.replication_factor) == (1, 3)
    partition = ctx.partition("foo")
    assert partition.replicas == (1, 0, 2)
    assert (partition.isr, partition.leader) == ((0,), 0)
    assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)


# ---- PartitionChangeBuilderTest -----------------------------------------------------------------------

RECOVERING_LEADER = PartitionRegistration(
    replicas=(1, 2, 3),
    isr=(1,),
    leader=1,
    leader_epoch=100,
    partition_epoch=200,
    leader_recovery_state=LeaderRecoveryState.RECOVERING,
)


def test_change_in_leadership_does_not_change_recovery_state():
    """PartitionChangeBuilderTest.testChangeInLeadershipDoesNotChangeRecoveryState."""
    offline = PartitionChangeBuilder(RECOVERING_LEADER, uuid.UUID(int=1), 0, lambda b: False)
    change = offline.set_target_isr(()).build()
    assert change is not None and change.record.leader_recovery_state == -1 and change.leader == NO_LEADER
    registration = apply_change(RECOVERING_LEADER, change.record)
    assert (registration.leader, registration.isr) == (NO_LEADER, (1,))
    assert registration.leader_recovery_state == LeaderRecoveryState.RECOVERING
    online = PartitionChangeBuilder(registration, uuid.UUID(int=1), 0, lambda b: True).build()
    assert online is not None and online.record.leader_recovery_state == -1
    registration = apply_change(registration, online.record)
    assert (registration.leader, registration.isr) == (1, (1,))
    assert registration.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_no_leader_epoch_bump_on_isr_expansion():
    """PartitionChangeBuilderTest.testNoLeaderEpochBumpOnIsrExpansion."""
    base = PartitionRegistration(
        replicas=(2, 1, 3, 4), isr=(2, 1), leader=1, leader_epoch=100, partition_epoch=200
    )
    change = (
        PartitionChangeBuilder(base, uuid.UUID(int=1), 0, lambda b: True).set_target_isr((2, 1, 3, 4)).build()
    )
    assert change is not None and change.record.leader == -2  # NO_LEADER_CHANGE
    after = apply_change(base, change.record)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (1, 100, 201)


# ---- BrokerHeartbeatTrackerTest, QuorumController.processBrokerHeartbeat ------------------------------


def heartbeat_request(broker_id: int, epoch: int) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        broker_id=broker_id,
        broker_epoch=epoch,
        current_metadata_offset=0,
        want_fence=False,
        want_shut_down=False,
        offline_log_dirs=(),
    )


def test_update_contact_time():
    """A heartbeat's arrival moves its broker's contact time, for its current epoch only: a broker whose
    heartbeat arrived within the session timeout, and then waited longer than that behind the quorum's
    other writes, is not fenced by the expiry check that runs before its turn comes."""
    ctx = ControllerContext()
    epochs = ctx.register_brokers(1, 2)
    ctx.unfence_brokers(1, 2)
    timeout = ctx.controller.cluster.session_timeout_ms
    arrived = ctx.now + timeout - 100
    assert ctx.controller.track_heartbeat(arrived, heartbeat_request(1, epochs[1]))
    assert not ctx.controller.track_heartbeat(arrived, heartbeat_request(2, epochs[2] - 1))  # a past epoch
    assert not ctx.controller.track_heartbeat(arrived, heartbeat_request(3, 0))  # never registered
    assert ctx.controller.tick(ctx.now + timeout + 200) == [2]
    assert not ctx.controller.cluster.brokers[1].fenced


def test_update_contact_time_of_a_broker_with_no_session():
    """A new active controller clears every session (QuorumController.claim; a restarted controller
    starts with none): the first heartbeat to arrive after it starts a session there and then, as Kafka's
    tracker records contact for any broker id and epoch, so a heartbeat that waits behind the new
    controller's first writes is not fenced by the expiry check that runs before its turn."""
    ctx = ControllerContext()
    epochs = ctx.register_brokers(1)
    ctx.unfence_brokers(1)
    claimed = ctx.now + 5_000
    ctx.controller.cluster.sessions.clear()  # what ControllerQuorum._claim does
    ctx.controller.cluster.started_ms = claimed
    timeout = ctx.controller.cluster.session_timeout_ms
    assert ctx.controller.track_heartbeat(claimed + timeout - 100, heartbeat_request(1, epochs[1]))
    assert not ctx.controller.track_heartbeat(claimed, heartbeat_request(1, epochs[1] - 1))
    assert ctx.controller.tick(claimed + timeout + 200) == []
    assert not ctx.controller.cluster.brokers[1].fenced
