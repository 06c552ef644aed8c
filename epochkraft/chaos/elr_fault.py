"""The chaos tool's KIP-966 fault (``elr``) on real processes, as a user meets it with Kafka 4.x
(EligibleLeaderReplicasIntegrationTest.testElrMemberCanBeElected): on a partition with three replicas and
min.insync.replicas 2, one follower is SIGKILLed (fenced, the ISR falls to min ISR), the other is stopped
cleanly (controlled shutdown: the ISR falls below min ISR and that follower goes into the eligible leader
replicas), then the leader is SIGKILLed: once it is fenced the partition has no ISR and no leader. The
cleanly stopped follower is started again and must be elected from the ELR (Kafka's election order: ISR,
then unfenced ELR members; PartitionChangeBuilder.electLeader), having rejoined no ISR since it stopped;
then the other two are started. What the fault saw, read with DescribeTopicPartitions, goes into the run's
report; the workload and the checker judge that nothing acknowledged was lost."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient, PartitionView

log = logging.getLogger(__name__)

NO_LEADER = -1
STEP_TIMEOUT_S = 20.0  # each step waits at most this long: a broker's session timeout is 2 s in a chaos run


@dataclass
class ElrElection:
    """What the ``elr`` fault saw on its partition (broker ids; lists as DescribeTopicPartitions sorts)."""

    topic: str
    partition: int
    leader_killed: int
    follower_killed: int
    follower_stopped: int  # the cleanly stopped follower, the one the ELR should bring back
    isr_below_min: list[int]  # the ISR once the stopped follower had left it
    elr_seen: list[int]  # the ELR then
    elected: int  # the leader once the stopped follower is back (the old one or -1: none in the step timeout)
    seconds_to_elect: (
        float  # from the leader's SIGKILL (the stopped follower started right after) to the election
    )
    isr_at_election: list[int]  # the partition as the first broker back answered with the new leader
    elr_at_election: list[int]
    last_known_elr_at_election: list[int]

    @property
    def elected_from_elr(self) -> bool:
        """The returning follower leads, having been in the ELR (not the ISR) when it stopped: with every
        other replica down or just back from an unclean shutdown, only the ELR could elect it."""
        stopped = self.follower_stopped
        return self.elected == stopped and stopped in self.elr_seen and stopped not in self.isr_below_min

    def to_json(self) -> dict[str, object]:
        return asdict(self) | {"elected_from_elr": self.elected_from_elr}

    def detail(self) -> str:
        outcome = (
            f"elected from the ELR {self.seconds_to_elect:.1f}s after the leader's SIGKILL"
            if self.elected_from_elr
            else f"NOT elected from the ELR (leader {self.elected})"
        )
        return (
            f"ELR on {self.topic}-{self.partition}: SIGKILL of follower {self.follower_killed}, clean stop of "
            f"follower {self.follower_stopped} (ISR {self.isr_below_min}, ELR {self.elr_seen}), SIGKILL of "
            f"leader {self.leader_killed}; {self.follower_stopped} restarted: {outcome} (ISR "
            f"{self.isr_at_election}, ELR {self.elr_at_election}); {self.follower_killed} and "
            f"{self.leader_killed} restarted"
        )


Views = dict[int, PartitionView]


async def _views(client: MiniClient, topic: str) -> Views | None:
    try:
        return await client.describe_partitions(topic)
    except Exception as exc:  # brokers stopping and starting: ask again
        log.debug("DescribeTopicPartitions failed: %r", exc)
        return None


async def _wait_views(
    client: MiniClient, topic: str, until: Callable[[Views], bool], timeout: float = STEP_TIMEOUT_S
) -> tuple[Views | None, bool]:
    """(the last views of the topic's partitions, whether ``until`` held) once it holds or the timeout
    has passed."""
    deadline = time.monotonic() + timeout
    views = None
    while True:
        views = await _views(client, topic) or views
        if views is not None and until(views):
            return views, True
        if time.monotonic() > deadline:
            return views, False
        await asyncio.sleep(0.1)


async def apply_elr_fault(
    cluster: LocalCluster, client: MiniClient, topic: str, rng: random.Random
) -> ElrElection:
    """Runs the fault on a seeded partition of ``topic`` (three replicas, min.insync.replicas 2) and
    returns what it saw; every broker it stopped is running again when it returns."""
    views = await client.describe_partitions(topic)
    partition = rng.choice(sorted(views))
    leader = views[partition].leader
    followers = sorted(b for b in views[partition].replicas if b != leader)
    if leader < 0 or len(followers) < 2:
        raise ValueError(f"the elr fault needs a led partition with three replicas, not {views[partition]}")
    killed, stopped = rng.sample(followers, 2)

    await asyncio.to_thread(cluster.node(killed).kill)
    # Fenced (out of every ISR) while the ISRs are still at min ISR: it goes into no ELR. Only the
    # leader's lag check would take it out of this partition's ISR sooner, and elsewhere it would be
    # fenced after the clean stop, into those ELRs.
    seen, fenced = await _wait_views(client, topic, lambda vs: all(killed not in v.isr for v in vs.values()))
    if not fenced:
        await asyncio.to_thread(cluster.node(killed).start)  # every broker it stopped runs again
        raise TimeoutError(f"elr fault on {topic}: {killed} still in an ISR ({seen})")
    await asyncio.to_thread(cluster.node(stopped).stop)
    seen, _ = await _wait_views(
        client,
        topic,
        lambda vs: partition in vs and stopped not in vs[partition].isr and bool(vs[partition].elr),
    )
    below = seen.get(partition) if seen else None
    await asyncio.to_thread(cluster.node(leader).kill)
    killed_at = time.monotonic()
    # The leader is fenced once its session expires (while this one starts): no ISR left, the ELR elects.
    await asyncio.to_thread(cluster.node(stopped).start)
    seen, _ = await _wait_views(
        client, topic, lambda vs: partition in vs and vs[partition].leader not in (NO_LEADER, leader)
    )
    elected = seen.get(partition) if seen else None
    seconds = time.monotonic() - killed_at
    await asyncio.gather(*(asyncio.to_thread(cluster.node(b).start) for b in (killed, leader)))
    return ElrElection(
        topic=topic,
        partition=partition,
        leader_killed=leader,
        follower_killed=killed,
        follower_stopped=stopped,
        isr_below_min=list(below.isr) if below else [],
        elr_seen=list(below.elr) if below else [],
        elected=elected.leader if elected else NO_LEADER,
        seconds_to_elect=round(seconds, 2),
        isr_at_election=list(elected.isr) if elected else [],
        elr_at_election=list(elected.elr) if elected else [],
        last_known_elr_at_election=list(elected.last_known_elr) if elected else [],
    )
