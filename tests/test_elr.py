"""Eligible leader replicas (KIP-966): Kafka's PartitionChangeBuilderTest and ReplicationControlManagerTest
ELR cases, on the pure builder and on a controller built from its records."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.schema.update_features.v1 import request as uf
from kio.static.primitive import i8, i16

from epochkraft.controller import partition_change
from epochkraft.controller.configuration_control import OpType
from epochkraft.controller.partition_change import Election, PartitionChangeBuilder
from epochkraft.metadata.config_schema import ResourceType
from epochkraft.metadata.image import apply_change
from epochkraft.metadata.registrations import NO_LEADER, LeaderRecoveryState, PartitionRegistration
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    FeatureLevelRecord,
    PartitionChangeRecord,
    UnregisterBrokerRecord,
)
from tests.controller_context import ControllerContext

TOPIC_ID = uuid.UUID(int=7)
TOPIC, BROKER = ResourceType.TOPIC, ResourceType.BROKER
SET, DELETE = OpType.SET, OpType.DELETE


def registration(
    isr: tuple[int, ...], leader: int, elr: tuple[int, ...] = (), last_known_elr: tuple[int, ...] = ()
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=(1, 2, 3, 4),
        isr=isr,
        leader=leader,
        leader_epoch=100,
        partition_epoch=200,
        elr=elr,
        last_known_elr=last_known_elr,
    )


def builder(
    partition: PartitionRegistration,
    acceptable: set[int] | None = None,
    *,
    min_isr: int = 3,
    elr: bool = True,
    last_known_leader: bool = False,
    election: Election = Election.PREFERRED,
) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(
        partition,
        TOPIC_ID,
        0,
        (lambda b: True) if acceptable is None else acceptable.__contains__,
        election,
        min_isr=min_isr,
        elr_enabled=elr,
        use_last_known_leader=last_known_leader,
    )


def change(**fields: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, **fields)  # type: ignore[arg-type]


# ---- PartitionChangeBuilderTest -------------------------------------------------------------------------


@pytest.mark.parametrize("elr", [True, False])
def test_eligible_leader_replicas_isr_shrink_below_min_isr(elr):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrShrinkBelowMinISR."""
    partition = registration((1, 2, 3, 4), 1)
    built = builder(partition, {1, 2, 4}, elr=elr).set_target_isr((1, 2)).build()
    assert built is not None
    expected = change(isr=(1, 2), eligible_leader_replicas=(3, 4)) if elr else change(isr=(1, 2))
    assert built.record == expected
    after = apply_change(partition, built.record)
    assert (after.elr, after.last_known_elr) == (((3, 4), ()) if elr else ((), ()))


@pytest.mark.parametrize("elr", [True, False])
def test_eligible_leader_replicas_isr_expand_above_min_isr(elr):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrExpandAboveMinISR."""
    partition = registration((1, 2), 1, elr=(3,), last_known_elr=(4,))
    built = builder(partition, {1, 2, 4}, elr=elr).set_target_isr((1, 2, 3)).build()
    assert built is not None
    assert built.record == change(isr=(1, 2, 3), eligible_leader_replicas=(), last_known_elr=())
    after = apply_change(partition, built.record)
    assert (after.elr, after.last_known_elr) == ((), ())


def test_eligible_leader_replicas_isr_add_new_member_not_in_elr():
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrAddNewMemberNotInELR."""
    partition = registration((1,), 1, elr=(3,), last_known_elr=(2,))
    built = builder(partition, {1, 2, 4}).set_target_isr((1, 4)).build()
    assert built is not None and built.record == change(isr=(1, 4))
    after = apply_change(partition, built.record)
    assert (after.elr, after.last_known_elr) == ((3,), (2,))


def test_eligible_leader_replicas_remove_unclean_shutdown_replicas_from_elr():
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_RemoveUncleanShutdownReplicasFromElr."""
    partition = registration((1,), 1, elr=(2, 3))
    built = builder(partition, {1, 2, 4}).set_unclean_shutdown_replicas((3,)).build()
    assert built is not None
    assert built.record == change(eligible_leader_replicas=(2,), last_known_elr=(3,))


@pytest.mark.parametrize("last_known_leader", [True, False])
def test_eligible_leader_replicas_elr_can_be_elected(last_known_leader):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElrCanBeElected: the ISR empties, so the
    unfenced ELR member leads and becomes the ISR."""
    last_known = () if last_known_leader else (2,)
    partition = registration((1,), 1, elr=(3,), last_known_elr=last_known)
    built = builder(partition, {2, 3, 4}, last_known_leader=last_known_leader).set_target_isr(()).build()
    assert built is not None
    assert built.record == change(isr=(3,), leader=3, eligible_leader_replicas=(1,))
    after = apply_change(partition, built.record)
    assert (after.isr, after.elr, after.last_known_elr) == ((3,), (1,), last_known)
    assert after.leader_recovery_state == LeaderRecoveryState.RECOVERED, "an ELR election is clean"


@pytest.mark.parametrize("last_known_leader", [True, False])
def test_eligible_leader_replicas_isr_can_shrink_to_zero(last_known_leader):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrCanShrinkToZero."""
    partition = registration((1, 2, 3, 4), 1)
    built = builder(partition, set(), last_known_leader=last_known_leader).set_target_isr(()).build()
    assert built is not None
    fields: dict[str, object] = {"isr": (), "leader": NO_LEADER, "eligible_leader_replicas": (1, 2, 3, 4)}
    if last_known_leader:
        fields["last_known_elr"] = (1,)
    assert built.record == change(**fields)
    after = apply_change(partition, built.record)
    assert after.elr == (1, 2, 3, 4) and after.isr == ()
    if last_known_leader:
        again = builder(after, set(), last_known_leader=True).set_unclean_shutdown_replicas((2,)).build()
        assert again is not None and again.record.last_known_elr is None, "the last leader is kept"


def test_eligible_leader_replicas_elect_last_known_leader():
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElectLastKnownLeader: ISR and ELR empty, the
    last known leader is elected, as an unclean election (RECOVERING)."""
    partition = registration((), NO_LEADER, last_known_elr=(1,))
    built = builder(partition, last_known_leader=True).set_target_isr(()).build()
    assert built is not None
    assert built.record == change(isr=(1,), leader=1, leader_recovery_state=1, last_known_elr=())


def test_eligible_leader_replicas_elect_last_known_leader_should_fail():
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElectLastKnownLeaderShouldFail: the ELR is not
    empty (its member fenced), so the last known leader is not elected."""
    partition = registration((), NO_LEADER, elr=(3,), last_known_elr=(1,))
    assert builder(partition, {1, 2, 4}, last_known_leader=True).set_target_isr(()).build() is None


def test_without_elr_the_isr_keeps_its_last_member():
    """KIP-903's rule, still the rule with the feature at level 0."""
    partition = registration((1,), 1)
    built = builder(partition, {2, 3, 4}, elr=False).set_target_isr(()).build()
    assert built is not None and built.record == change(leader=NO_LEADER)


# ---- ReplicationControlManagerTest ----------------------------------------------------------------------


def elr_context(brokers: tuple[int, ...], replicas: list[int], min_isr: str) -> ControllerContext:
    ctx = ControllerContext()
    ctx.brokers_ready(*brokers)
    ctx.create_topic("foo", [replicas])
    assert ctx.incremental_alter_configs({(TOPIC, "foo"): {"min.insync.replicas": (SET, min_isr)}}) == {
        (TOPIC, "foo"): (ErrorCode.none, None)
    }
    return ctx


def elr_state(ctx: ControllerContext) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    p = ctx.partition("foo")
    return p.isr, p.elr, p.last_known_elr, p.leader


def test_elr_is_on_for_a_new_cluster():
    ctx = ControllerContext()
    assert ctx.controller.image.features["eligible.leader.replicas.version"] == 1
    assert ctx.controller.image.elr_enabled
    assert ctx.configs(BROKER, "") == {"min.insync.replicas": "1"}, "written at bootstrap"
    assert not ControllerContext(eligible_leader_replicas_version=0).controller.image.elr_enabled


def test_eligible_leader_replicas_shrink_and_expand_isr():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_ShrinkAndExpandIsr."""
    ctx = elr_context((0, 1, 2), [0, 1, 2], "2")
    _, p = ctx.alter_partition(0, "foo", [0])
    assert p.error_code == ErrorCode.none
    assert elr_state(ctx) == ((0,), (1, 2), (), 0)
    _, p = ctx.alter_partition(0, "foo", [0, 1])
    assert p.error_code == ErrorCode.none
    assert elr_state(ctx) == ((0, 1), (), (), 0)


def test_eligible_leader_replicas_broker_fence():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_BrokerFence: fenced members stay in the ELR."""
    ctx = elr_context((0, 1, 2, 3), [0, 1, 2, 3], "3")
    ctx.fence_brokers(2, 3)
    assert elr_state(ctx)[:3] == ((0, 1), (3,), ())
    ctx.fence_brokers(1)
    assert elr_state(ctx)[:3] == ((0,), (1, 3), ())
    ctx.unfence_brokers(1, 2, 3)
    assert elr_state(ctx)[:3] == ((0,), (1, 3), ()), "unfencing alone does not re-add to the ISR"


def test_eligible_leader_replicas_effective_min_isr():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_EffectiveMinIsr."""
    ctx = elr_context((0, 1, 2), [0, 1, 2], "5")
    topic = ctx.controller.replication.topic("foo")
    assert topic is not None and ctx.controller.replication.effective_min_isr(topic) == 3


def test_eligible_leader_replicas_clean_election():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_CleanElection."""
    ctx = elr_context((0, 1, 2, 3), [0, 1, 2, 3], "3")
    ctx.fence_brokers(1, 2, 3)
    assert elr_state(ctx)[:3] == ((0,), (2, 3), ())
    ctx.unfence_brokers(2)
    ctx.fence_brokers(0, 1)
    assert elr_state(ctx) == ((2,), (0, 3), (), 2)
    assert ctx.partition("foo").leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_eligible_leader_replicas_unclean_shutdown():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_UncleanShutdown: a broker back from an
    unclean shutdown leaves the ELR; the last ISR member's becomes the last known leader."""
    ctx = elr_context((0, 1, 2, 3), [0, 1, 2, 3], "3")
    ctx.fence_brokers(1, 2, 3)
    assert elr_state(ctx)[:3] == ((0,), (2, 3), ())
    ctx.registration(3, incarnation=uuid.uuid4(), previous_broker_epoch=-1)  # no clean shutdown marker
    assert elr_state(ctx)[:3] == ((0,), (2,), ())
    controller = ctx.controller  # Kafka's test calls handleBrokerShutdown for the live leader directly
    controller._commit(controller._shutdown_changes(0, clean=False), ctx.now)
    assert elr_state(ctx) == ((), (2,), (0,), NO_LEADER)


def test_clean_restart_keeps_the_broker_in_the_elr():
    """A broker presenting its last epoch (the clean shutdown marker) keeps its ELR membership and is elected
    from it when it returns, the issue's user scenario on the controller."""
    ctx = elr_context((1, 2, 3), [1, 2, 3], "2")
    ctx.fence_brokers(3)  # SIGKILLed follower: out of the ISR, ISR still at min ISR
    ctx.shut_down_brokers(2)  # cleanly stopped follower: leaves the ISR below min ISR -> ELR
    assert elr_state(ctx) == ((1,), (2,), (), 1)
    ctx.fence_brokers(1)  # the leader SIGKILLed
    assert elr_state(ctx) == ((), (1, 2), (1,), NO_LEADER)
    ctx.registration(2, incarnation=uuid.uuid4(), previous_broker_epoch=ctx.epoch(2))
    ctx.unfence_brokers(2)
    assert elr_state(ctx) == ((2,), (1,), (), 2)
    assert ctx.partition("foo").leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_unclean_restart_of_the_only_elr_member_elects_nothing_cleanly():
    """The same scenario with broker 2 back from an unclean shutdown: it left the ELR, so it is not elected
    from it; with the unsafe switch on it stays in the ELR and is elected, which the simulator shows loses
    acknowledged records."""
    ctx = elr_context((1, 2, 3), [1, 2, 3], "2")
    ctx.fence_brokers(3)
    ctx.shut_down_brokers(2)
    ctx.fence_brokers(1)
    ctx.registration(2, incarnation=uuid.uuid4(), previous_broker_epoch=-1)
    ctx.unfence_brokers(2)
    assert elr_state(ctx) == ((), (1,), (1,), NO_LEADER)


def test_unsafe_switch_keeps_an_unclean_broker_in_the_elr(monkeypatch):
    monkeypatch.setattr(partition_change, "UNSAFE_KEEP_UNCLEAN_SHUTDOWN_IN_ELR_FOR_TESTS", True)
    ctx = elr_context((1, 2, 3), [1, 2, 3], "2")
    ctx.fence_brokers(3)
    ctx.shut_down_brokers(2)
    ctx.fence_brokers(1)
    ctx.registration(2, incarnation=uuid.uuid4(), previous_broker_epoch=-1)
    ctx.unfence_brokers(2)
    assert elr_state(ctx)[3] == 2, "elected from the ELR despite its unclean shutdown"


def test_min_isr_change_clears_the_elr():
    """A topic's min.insync.replicas change clears its ELR (Kafka writes no record for an unchanged topic
    value); a cluster-level one clears every ELR; the
    cluster-level value cannot be removed while ELR is on."""
    ctx = elr_context((0, 1, 2), [0, 1, 2], "2")
    ctx.create_topic("bar", [[0, 1, 2]], configs={"min.insync.replicas": "3"})
    ctx.fence_brokers(2)
    assert elr_state(ctx)[:2] == ((0, 1), ())
    assert ctx.partition("bar").elr == (2,)
    ctx.fence_brokers(1)
    assert elr_state(ctx)[:2] == ((0,), (1,)), "2 left while the ISR was at min ISR: not eligible"
    ctx.incremental_alter_configs({(TOPIC, "foo"): {"min.insync.replicas": (SET, "3")}})
    assert elr_state(ctx)[:3] == ((0,), (), ())
    assert ctx.partition("bar").elr == (1, 2), "another topic's ELR stays"
    ctx.incremental_alter_configs({(BROKER, ""): {"min.insync.replicas": (SET, "1")}})
    assert ctx.partition("bar").elr == (), "a cluster-level write clears every ELR, even unchanged"
    result = ctx.incremental_alter_configs({(BROKER, ""): {"min.insync.replicas": (DELETE, None)}})
    assert result[(BROKER, "")][0] == ErrorCode.invalid_config


# ---- the feature: UpdateFeatures (FeatureControlManagerTest) --------------------------------------------


def update_features(
    ctx: ControllerContext, level: int, upgrade_type: int = 1, validate_only: bool = False
) -> tuple[ErrorCode, str | None]:
    request = uf.UpdateFeaturesRequest(
        feature_updates=(
            uf.FeatureUpdateKey(
                feature="eligible.leader.replicas.version",
                max_version_level=i16(level),
                upgrade_type=i8(upgrade_type),
            ),
        ),
        validate_only=validate_only,
    )
    response = ctx.controller.update_features(ctx.now, request)
    listed = [r.error_code for r in response.results]
    assert listed == ([ErrorCode.none] if response.error_code == ErrorCode.none else []), listed
    return response.error_code, response.error_message


def test_downgrade_to_zero_clears_the_elr_and_upgrade_turns_it_on_again():
    ctx = elr_context((0, 1, 2), [0, 1, 2], "3")
    ctx.fence_brokers(2)
    assert elr_state(ctx)[:2] == ((0, 1), (2,))
    error, message = update_features(ctx, 0)
    assert error == ErrorCode.invalid_update_version and "safe or unsafe downgrade" in (message or "")
    assert update_features(ctx, 0, upgrade_type=2, validate_only=True) == (ErrorCode.none, None)
    assert ctx.controller.image.elr_enabled, "validate_only writes nothing"
    assert update_features(ctx, 0, upgrade_type=2) == (ErrorCode.none, None)
    assert not ctx.controller.image.elr_enabled
    assert "eligible.leader.replicas.version" not in ctx.controller.image.features
    assert elr_state(ctx)[:3] == ((0, 1), (), ()), "the downgrade cleared the ELR"
    ctx.fence_brokers(1)
    assert elr_state(ctx)[:2] == ((0,), ()), "ELR off: nothing joins it"
    assert update_features(ctx, 1) == (ErrorCode.none, None)
    assert ctx.controller.image.elr_enabled
    ctx.fence_brokers(0)
    assert elr_state(ctx) == ((), (0,), (0,), NO_LEADER)


def test_update_features_refuses_unsupported_levels_and_features():
    ctx = ControllerContext()
    assert update_features(ctx, 2)[0] == ErrorCode.invalid_update_version
    request = uf.UpdateFeaturesRequest(
        feature_updates=(uf.FeatureUpdateKey(feature="metadata.version", max_version_level=i16(26)),)
    )
    assert ctx.controller.update_features(ctx.now, request).error_code == ErrorCode.invalid_update_version
    request = uf.UpdateFeaturesRequest(
        feature_updates=(uf.FeatureUpdateKey(feature="no.such.version", max_version_level=i16(1)),)
    )
    assert ctx.controller.update_features(ctx.now, request).error_code == ErrorCode.invalid_update_version
    assert update_features(ctx, 1) == (ErrorCode.none, None), "the current level: a no-op"


def test_update_features_refuses_elr_without_the_metadata_version_it_depends_on():
    """FeatureControlManager's dependency check: eligible.leader.replicas.version 1 depends on
    metadata.version 4.0-IV1 (23); below it the update is refused with INVALID_UPDATE_VERSION (it was
    accepted while ELR stayed off)."""
    ctx = ControllerContext(eligible_leader_replicas_version=0)
    ctx.controller._commit([FeatureLevelRecord(name="metadata.version", feature_level=22)], ctx.now)
    error, message = update_features(ctx, 1)
    assert error == ErrorCode.invalid_update_version
    assert "metadata.version 23" in (message or "")
    assert "eligible.leader.replicas.version" not in ctx.controller.image.features
    assert ctx.configs(BROKER, "") == {}, "nothing written"
    assert update_features(ctx, 0) == (ErrorCode.none, None), "level 0 needs nothing"
    ctx.controller._commit([FeatureLevelRecord(name="metadata.version", feature_level=23)], ctx.now)
    assert update_features(ctx, 1) == (ErrorCode.none, None)
    assert ctx.controller.image.elr_enabled


def test_upgrade_writes_the_cluster_min_isr_when_missing():
    ctx = ControllerContext(eligible_leader_replicas_version=0, min_insync_replicas=2)
    assert ctx.configs(BROKER, "") == {}
    assert update_features(ctx, 1) == (ErrorCode.none, None)
    assert ctx.configs(BROKER, "") == {"min.insync.replicas": "2"}


def test_elr_changes_are_events_for_the_analysis():
    """elr_change_committed (metrics SCHEMA.md): the ELR and last known ELR after each change."""
    ctx = elr_context((0, 1, 2), [0, 1, 2], "2")
    ctx.controller.outbox.clear()
    ctx.fence_brokers(2)
    ctx.fence_brokers(1)
    events = [fields for name, fields in ctx.controller.outbox if name == "elr_change_committed"]
    assert [(e["elr"], e["last_known_elr"]) for e in events] == [([1], [])]
    assert events[0]["topic"] == "foo" and events[0]["partition"] == 0


# ---- min.insync.replicas while ELR is on (ConfigurationControlManagerTest) ------------------------------


def test_disallowed_broker_min_isr_transition_while_elr_is_enabled():
    """ConfigurationControlManager.isDisallowedBrokerMinIsrTransition: a broker-level min.insync.replicas
    is refused (set or deleted, incremental or legacy) while ELR is on, since the broker freezes its high
    watermark with its own value while the controller judges the ELR by another."""
    ctx = ControllerContext(min_insync_replicas=2)
    message = "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
    for op, value in ((SET, "1"), (DELETE, None)):
        result = ctx.incremental_alter_configs({(BROKER, "1"): {"min.insync.replicas": (op, value)}})
        assert result == {(BROKER, "1"): (ErrorCode.invalid_config, message)}
    assert ctx.configs(BROKER, "1") == {}
    result = ctx.incremental_alter_configs({(BROKER, ""): {"min.insync.replicas": (SET, "3")}})
    assert result == {(BROKER, ""): (ErrorCode.none, None)}, "the cluster-level value may change"
    off = ControllerContext(eligible_leader_replicas_version=0)
    result = off.incremental_alter_configs({(BROKER, "1"): {"min.insync.replicas": (SET, "1")}})
    assert result == {(BROKER, "1"): (ErrorCode.none, None)}, "allowed while ELR is off"


def test_enabling_elr_deletes_broker_level_min_isr():
    """ConfigurationControlManager.maybeGenerateElrSafetyRecords: turning ELR on writes the cluster-level
    min.insync.replicas and removes every broker-level one."""
    ctx = ControllerContext(eligible_leader_replicas_version=0, min_insync_replicas=2)
    for broker in ("1", "2"):
        result = ctx.incremental_alter_configs(
            {(BROKER, broker): {"min.insync.replicas": (SET, "1"), "log.cleaner.threads": (SET, "2")}}
        )
        assert result == {(BROKER, broker): (ErrorCode.none, None)}
    assert update_features(ctx, 1) == (ErrorCode.none, None)
    assert ctx.configs(BROKER, "") == {"min.insync.replicas": "2"}
    assert ctx.configs(BROKER, "1") == ctx.configs(BROKER, "2") == {"log.cleaner.threads": "2"}


# ---- unregistered brokers (ReplicationControlManager.handleBrokerUnregistered) --------------------------


def unregister(ctx: ControllerContext, broker_id: int) -> None:
    request = UnregisterBrokerRequest(broker_id=broker_id)
    assert ctx.controller.unregister_broker(ctx.now, request).error_code == ErrorCode.none


def test_handle_broker_unregistered_removes_it_from_isr_and_elr():
    """ReplicationControlManager.handleBrokerUnregistered removes the broker from any ISR or ELR (the
    partitions where it is only in the ELR too), and from the last known ELR."""
    ctx = elr_context((1, 2, 3), [1, 2, 3], "3")
    ctx.fence_brokers(3)
    assert elr_state(ctx) == ((1, 2), (3,), (), 1)
    unregister(ctx, 3)  # only in the ELR
    assert elr_state(ctx) == ((1, 2), (), (), 1)
    unregister(ctx, 2)  # in the ISR, under min ISR: it does not join the ELR
    assert elr_state(ctx) == ((1,), (), (), 1)
    ctx.fence_brokers(1)
    assert elr_state(ctx) == ((), (1,), (1,), NO_LEADER)
    unregister(ctx, 1)
    assert elr_state(ctx) == ((), (), (), NO_LEADER)


def test_a_registration_without_an_existing_entry_leaves_every_elr():
    """A broker registering with no registration to compare with (a new disk after UnregisterBroker, or
    after a controller that lost the entry) has no clean shutdown to show: it leaves every ELR and the
    last known ELR, and is not elected from them with an empty log."""
    ctx = elr_context((1, 2, 3), [1, 2, 3], "2")
    ctx.fence_brokers(3)
    ctx.shut_down_brokers(2)
    ctx.fence_brokers(1)
    assert elr_state(ctx) == ((), (1, 2), (1,), NO_LEADER)
    partition = ctx.partition("foo")
    topic = ctx.controller.replication.topic("foo")
    assert topic is not None
    # The controller forgets broker 1's registration but not the ELR (as the unregister path used to).
    ctx.controller._commit([UnregisterBrokerRecord(broker_id=1, broker_epoch=ctx.epoch(1))], ctx.now)
    assert ctx.partition("foo") == partition
    ctx.registration(1, incarnation=uuid.uuid4(), previous_broker_epoch=-1)
    assert elr_state(ctx) == ((), (2,), (), NO_LEADER)
    ctx.unfence_brokers(1)
    assert elr_state(ctx)[3] == NO_LEADER, "the new disk is not elected"


# ---- one batch per decision (Kafka's atomic ControllerResult) -------------------------------------------


def batches(ctx: ControllerContext, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The record types of each batch the controller appends from now on."""
    appended: list[list[str]] = []
    append = ctx.controller.log.append

    def recording(records: list, now_ms: int) -> int:
        appended.append([type(r).__name__ for r in records])
        return append(records, now_ms)

    monkeypatch.setattr(ctx.controller.log, "append", recording)
    return appended


def test_min_isr_change_and_elr_clearing_are_one_atomic_result(monkeypatch):
    """ConfigurationControlManager's ControllerResult holds the config record and the PartitionChangeRecords
    clearing the ELR it invalidates: committed apart, a failover between them keeps an ELR chosen under
    the old min ISR after min ISR was lowered."""
    ctx = elr_context((0, 1, 2), [0, 1, 2], "3")
    ctx.fence_brokers(2)
    assert elr_state(ctx)[:2] == ((0, 1), (2,))
    appended = batches(ctx, monkeypatch)
    ctx.incremental_alter_configs({(TOPIC, "foo"): {"min.insync.replicas": (SET, "2")}})
    assert appended == [["ConfigRecord", "PartitionChangeRecord"]]
    assert elr_state(ctx)[:2] == ((0, 1), ())


def test_broker_registration_unregistration_and_fencing_are_one_atomic_result(monkeypatch):
    """ReplicationControlManager's handleBrokerUnregistered / handleBrokerShutdown / handleBrokerFenced
    records and the broker's own record are one ControllerResult."""
    ctx = elr_context((1, 2, 3), [1, 2, 3], "3")
    appended = batches(ctx, monkeypatch)
    ctx.fence_brokers(3)
    assert appended == [["PartitionChangeRecord", "FenceBrokerRecord"]]
    ctx.fence_brokers(2)
    assert elr_state(ctx)[:2] == ((1,), (2, 3))
    appended.clear()
    ctx.registration(2, incarnation=uuid.uuid4(), previous_broker_epoch=-1)  # unclean: leaves the ELR
    assert appended == [["PartitionChangeRecord", "RegisterBrokerRecord"]]
    appended.clear()
    unregister(ctx, 3)
    assert appended == [["PartitionChangeRecord", "UnregisterBrokerRecord"]]
    appended.clear()
    ctx.registration(3, incarnation=uuid.uuid4())
    assert appended == [["RegisterBrokerRecord"]]


def test_unclean_shutdown_replicas_leave_the_elr_not_the_last_known_leader():
    """Kafka's PartitionChangeBuilder: setUncleanShutdownReplicas takes a replica out of the target ELR only
    (maybePopulateTargetElr); the last known leader (useLastKnownLeaderInBalancedRecovery, on by default)
    is left to maybeUpdateLastKnownLeader, which does not look at them. A last leader back from an unclean
    shutdown is elected by canElectLastKnownLeader as an unclean election (RECOVERING), as in Kafka."""
    ctx = elr_context((1, 2, 3), [1, 2, 3], "2")
    ctx.fence_brokers(3)
    ctx.fence_brokers(2)
    ctx.registration(2, incarnation=uuid.uuid4(), previous_broker_epoch=-1)
    ctx.fence_brokers(1)
    assert elr_state(ctx) == ((), (1,), (1,), NO_LEADER)
    ctx.registration(1, incarnation=uuid.uuid4(), previous_broker_epoch=-1)
    assert elr_state(ctx) == ((), (), (1,), NO_LEADER)
    ctx.unfence_brokers(1)
    assert elr_state(ctx) == ((1,), (), (), 1)
    assert ctx.partition("foo").leader_recovery_state == LeaderRecoveryState.RECOVERING
