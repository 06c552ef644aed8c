"""Whether the chaos workload's consumer group heals after a fault: within a bound, every partition of the
topic is owned by exactly one member, as the group's coordinator describes the group (confluent-kafka's
AdminClient: ConsumerGroupDescribe for a ``group.protocol=consumer`` group, DescribeGroups for a classic
one). What the group consumed is judged apart: every acknowledged value must reach it (``missed_by_group``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

GROUP = "chaos-readers"
PROTOCOLS = ("classic", "consumer")
HEAL_TIMEOUT_S = 60.0  # longer than a member's session (45 s by default), so a lost member is replaced


@dataclass(frozen=True)
class GroupHeal:
    fault: str
    seconds: float | None  # until every partition was owned once; None: not within the bound
    members: int
    owned: list[int]  # partitions owned, as last described (a partition twice: listed twice)
    problem: str | None = None  # what was still wrong at the bound

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ownership_problem(owned: Iterable[int], partitions: int) -> str | None:
    """None if each of the topic's partitions is owned exactly once, else what is wrong."""
    counts = Counter(owned)
    unowned = [p for p in range(partitions) if counts[p] == 0]
    twice = sorted(p for p, n in counts.items() if n > 1)
    if unowned:
        return f"partitions {unowned} owned by no member"
    if twice:
        return f"partitions {twice} owned by more than one member"
    return None


def describe_owned(admin: Any, group: str, topic: str) -> tuple[int, list[int]]:
    """(members, partitions of ``topic`` each member is assigned, concatenated) as the coordinator says."""
    description = admin.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10)
    owned = [
        tp.partition
        for member in description.members
        if member.assignment is not None
        for tp in member.assignment.topic_partitions
        if tp.topic == topic
    ]
    return len(description.members), owned


def wait_healed(
    bootstrap: str,
    conf: dict[str, str],
    topic: str,
    partitions: int,
    fault: str,
    timeout: float = HEAL_TIMEOUT_S,
    group: str = GROUP,
) -> GroupHeal:
    """Describes the group every half second until each partition is owned once (blocking: run it in a
    thread); the seconds it took, counted from the call, which comes once the cluster's ISRs are whole."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **conf, "log_level": 0})
    started = time.monotonic()
    members, owned = 0, list[int]()
    while True:
        try:
            members, owned = describe_owned(admin, group, topic)
            if ownership_problem(owned, partitions) is None:
                return GroupHeal(fault, round(time.monotonic() - started, 2), members, sorted(owned))
        except Exception as exc:  # a coordinator moving: ask again
            log.debug("describing %s failed: %r", group, exc)
        if time.monotonic() - started > timeout:
            problem = ownership_problem(owned, partitions) if members else "no member described"
            return GroupHeal(fault, None, members, sorted(owned), problem)
        time.sleep(0.5)


def heal_problems(heals: list[dict[str, Any]]) -> list[str]:
    return [f"after {h['fault']}: {h['problem']}" for h in heals if h["seconds"] is None]
