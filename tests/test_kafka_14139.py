"""KAFKA-14139, the race KIP-903 closes, staged step by step on the sans-IO cores.

Leader A (1) and follower B (2) replicate a partition. B catches up under its old incarnation and A
proposes adding it back to the ISR; that AlterPartition is held back. B's disk is replaced: it reboots
empty and re-registers with a new broker epoch. The held request then reaches the controller.
With KIP-903 it names B's old epoch and is rejected with INELIGIBLE_REPLICA; before KIP-903 (v2, no
epochs, and with the KIP-841 check off) it is accepted, and when A then fails the empty B is elected
from the ISR and every acknowledged record is gone.
"""

from __future__ import annotations

import uuid

import pytest
from kio.schema.alter_partition.v2 import request as ap2
from kio.schema.alter_partition.v3 import request as ap3

from epochkraft.broker.alter_partition_manager import AlterPartitionManager
from epochkraft.broker.partition import Partition
from epochkraft.controller.requests import alter_partition_v3
from epochkraft.protocol.errors import ErrorCode
from tests.controller_context import ControllerContext

A, B = 1, 2


class CacheView:
    """The leader's metadata cache, read from the controller's registrations."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    def is_fenced(self, b: int) -> bool:
        reg = self.ctx.controller.cluster.brokers.get(b)
        return reg is None or reg.fenced

    def in_controlled_shutdown(self, b: int) -> bool:
        reg = self.ctx.controller.cluster.brokers.get(b)
        return reg is not None and reg.in_controlled_shutdown

    def broker_epoch(self, b: int) -> int | None:
        reg = self.ctx.controller.cluster.brokers.get(b)
        return None if reg is None else reg.epoch


def deliver(ctx: ControllerContext, request, version: int):
    return ctx.controller.alter_partition(ctx.now, alter_partition_v3(request), version)


def run_race(unsafe: bool) -> dict:
    ctx = ControllerContext(unsafe_disable_kip841_eligibility_check=unsafe, session_timeout_ms=2000)
    ctx.brokers_ready(A, B)
    ctx.create_topic("orders", [[A, B]], configs={"min.insync.replicas": "1"})
    view = CacheView(ctx)
    reg = ctx.partition("orders")
    topic_id = ctx.topic_id("orders")
    logs: dict[int, list[str]] = {A: [], B: []}
    acked: list[str] = []

    leader = Partition("orders", topic_id, 0, A, replica_lag_time_max_ms=1000, unsafe_pre_kip903=unsafe)
    leader.make_leader(
        ctx.now,
        leader_epoch=reg.leader_epoch,
        partition_epoch=reg.partition_epoch,
        replicas=reg.replicas,
        isr=reg.isr,
        leader_recovery_state=0,
        log_end_offset=0,
        min_insync_replicas=1,
    )
    manager = AlterPartitionManager(A, lambda: ctx.epoch(A), unsafe_pre_kip903=unsafe)
    b_epoch_old = ctx.epoch(B)

    def produce(values: list[str]) -> None:
        logs[A].extend(values)
        leader.maybe_increment_high_watermark(ctx.now, len(logs[A]), view)

    def b_fetches(epoch: int) -> object:
        logs[B] = list(logs[A])  # B copies the leader's log and reports its position
        return leader.update_follower_fetch(
            ctx.now, B, -1 if unsafe else epoch, len(logs[B]), len(logs[A]), view, ctx.epoch(A)
        )

    def commit(item, request_response) -> None:
        for result in manager.on_response(ctx.now, request_response):
            leader.on_alter_partition_result(
                result.item,
                result.error,
                leader_epoch=result.leader_epoch,
                isr=result.isr,
                partition_epoch=result.partition_epoch,
            )

    # 1. Records replicated to both, acknowledged.
    produce([f"r{i}" for i in range(10)])
    b_fetches(b_epoch_old)
    leader.maybe_increment_high_watermark(ctx.now, len(logs[A]), view)
    assert leader.high_watermark == 10
    acked += logs[A][:10]
    # 2. B stops fetching. A appends more, waits out replica.lag.time.max.ms, shrinks the ISR to itself,
    #    and then acknowledges with min.insync.replicas=1.
    produce([f"r{i}" for i in range(10, 20)])
    assert leader.high_watermark == 10, "B holds the high watermark back while in the ISR"
    ctx.now += 1500
    ctx.unfence_brokers(A, B)  # both still heartbeat
    shrink = leader.maybe_shrink_isr(ctx.now, len(logs[A]), view, ctx.epoch(A))
    assert shrink is not None
    manager.submit(shrink)
    commit(shrink, deliver(ctx, manager.poll(ctx.now), manager.version))
    assert leader.isr == (A,) and ctx.partition("orders").isr == (A,)
    leader.maybe_increment_high_watermark(ctx.now, len(logs[A]), view)
    assert leader.high_watermark == 20
    acked += logs[A][10:20]
    # 3. B catches up under its old incarnation: A proposes adding it. The request is held back.
    expand = b_fetches(b_epoch_old)
    assert expand is not None and expand.kind == "expand"
    manager.submit(expand)
    held = manager.poll(ctx.now)
    # 4. B's disk is replaced: it reboots empty, re-registers (new incarnation, new epoch), is unfenced.
    logs[B] = []
    ctx.now += 2500  # B's old session expires meanwhile
    ctx.unfence_brokers(A)
    ctx.controller.tick(ctx.now)
    registration = ctx.registration(B, incarnation=uuid.uuid4())
    assert registration.error_code == ErrorCode.none and registration.broker_epoch > b_epoch_old
    ctx.unfence_brokers(B)
    # 5. The held AlterPartition arrives.
    response = deliver(ctx, held, manager.version)
    error = response.topics[0].partitions[0].error_code
    commit(expand, response)
    isr_after = ctx.partition("orders").isr
    # 6. A fails: its session expires; the controller elects from the ISR.
    ctx.now += 2500
    ctx.unfence_brokers(B)
    ctx.controller.tick(ctx.now)
    new_leader = ctx.partition("orders").leader
    surviving = logs.get(new_leader, []) if new_leader != -1 else logs[A]
    lost = [v for v in acked if v not in surviving]
    return {"error": error, "isr_after": isr_after, "new_leader": new_leader, "lost": lost, "held": held}


def test_kip903_rejects_the_stale_replica_and_nothing_acknowledged_is_lost():
    outcome = run_race(unsafe=False)
    assert isinstance(outcome["held"], ap3.AlterPartitionRequest)
    assert outcome["error"] == ErrorCode.ineligible_replica
    assert outcome["isr_after"] == (A,)
    assert outcome["new_leader"] == -1, "the partition goes offline rather than electing the empty replica"
    assert outcome["lost"] == []


def test_pre_kip903_accepts_the_stale_replica_and_loses_acknowledged_records():
    outcome = run_race(unsafe=True)
    assert isinstance(outcome["held"], ap2.AlterPartitionRequest)
    assert outcome["error"] == ErrorCode.none
    assert outcome["isr_after"] == (A, B)
    assert outcome["new_leader"] == B
    assert len(outcome["lost"]) == 20


@pytest.mark.parametrize("unsafe", [False, True])
def test_race_is_deterministic(unsafe):
    first, second = run_race(unsafe), run_race(unsafe)
    assert (first["error"], first["lost"]) == (second["error"], second["lost"])
