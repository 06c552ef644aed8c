"""KIP-848's server-side assignors: ``uniform`` (the default) and ``range``, as Kafka's UniformAssignor
(its homogeneous and heterogeneous builders) and RangeAssignor in the group-coordinator module.

An assignor is a pure function: the members' subscriptions (topic ids) and current target assignments, and
each subscribed topic's partition count, in; each member's new target assignment out. Members are taken in
a fixed order (instance id first, then member id, as Kafka's RangeAssignor sorts them) so an assignment
does not depend on dictionary order.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

# topic id -> partitions; treated as immutable once built
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What an assignor knows of a member (Kafka's MemberSubscriptionAndAssignmentImpl)."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    instance_id: str | None = None
    rack_id: str | None = None
    assignment: Assignment = field(default_factory=dict)  # the member's current target assignment


class Assignor(Protocol):
    name: str

    def assign(
        self, members: Mapping[str, MemberSubscription], partition_counts: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]: ...


def _member_order(members: Mapping[str, MemberSubscription]) -> list[str]:
    """Static members (by instance id) first, then dynamic ones by member id (RangeAssignor.sortMemberIds)."""
    return sorted(members, key=lambda m: (members[m].instance_id is None, members[m].instance_id or "", m))


def _freeze(assignment: Mapping[uuid.UUID, set[int]]) -> Assignment:
    return {topic: frozenset(parts) for topic, parts in assignment.items() if parts}


class RangeAssignor:
    """Each topic's partitions in contiguous ranges over the members subscribed to it, the first
    ``partitions % members`` members one more (Kafka's RangeAssignor, homogeneous or not)."""

    name = "range"

    def assign(
        self, members: Mapping[str, MemberSubscription], partition_counts: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        order = _member_order(members)
        subscribers: dict[uuid.UUID, int] = {}
        for member_id in order:
            for topic in members[member_id].subscribed_topic_ids:
                if topic in partition_counts:
                    subscribers[topic] = subscribers.get(topic, 0) + 1
        next_start = dict.fromkeys(subscribers, 0)
        extra = {t: partition_counts[t] % n for t, n in subscribers.items()}
        result: dict[str, Assignment] = {}
        for member_id in order:
            assignment: dict[uuid.UUID, set[int]] = {}
            for topic in sorted(t for t in members[member_id].subscribed_topic_ids if t in subscribers):
                quota = partition_counts[topic] // subscribers[topic]
                if extra[topic] > 0:
                    quota, extra[topic] = quota + 1, extra[topic] - 1
                start = next_start[topic]
                end = min(start + quota, partition_counts[topic])
                next_start[topic] = end
                assignment[topic] = set(range(start, end))
            result[member_id] = _freeze(assignment)
        return result


class UniformAssignor:
    """As many partitions to each member as possible, balanced, moving as few as possible (sticky).

    Every member subscribed to the same topics: Kafka's UniformHomogeneousAssignmentBuilder (quotas of
    ``total // members``, the first ``total % members`` members one more; each member keeps its partitions
    up to its quota; the rest go to members under quota). Otherwise a greedy form of the heterogeneous
    builder: members keep the partitions they still subscribe to, unassigned partitions go to the subscribed
    member with the fewest, then partitions move from the fullest to a subscribed member with at least two
    fewer until no move is left.
    """

    name = "uniform"

    def assign(
        self, members: Mapping[str, MemberSubscription], partition_counts: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        if not members:
            return {}
        subscriptions = {m.subscribed_topic_ids for m in members.values()}
        if len(subscriptions) == 1:
            return _homogeneous(members, partition_counts)
        return _heterogeneous(members, partition_counts)


def _subscribed(topics: frozenset[uuid.UUID], partition_counts: Mapping[uuid.UUID, int]) -> list[uuid.UUID]:
    return sorted(t for t in topics if t in partition_counts)


def _homogeneous(
    members: Mapping[str, MemberSubscription], partition_counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    order = _member_order(members)
    topics = _subscribed(members[order[0]].subscribed_topic_ids, partition_counts)
    if not topics:
        return dict.fromkeys(order, EMPTY_ASSIGNMENT)
    owned = {(t, p) for m in order for t, parts in members[m].assignment.items() for p in parts}
    unassigned = [(t, p) for t in topics for p in range(partition_counts[t]) if (t, p) not in owned]
    total = sum(partition_counts[t] for t in topics)
    minimum, extra = divmod(total, len(order))
    result: dict[str, dict[uuid.UUID, set[int]]] = {}
    remaining: dict[str, int] = {}
    for member_id in order:
        quota = minimum + (1 if extra > 0 else 0)
        extra -= 1 if extra > 0 else 0
        kept: dict[uuid.UUID, set[int]] = {}
        for topic, parts in sorted(members[member_id].assignment.items()):
            if topic not in partition_counts or topic not in topics:
                continue  # a topic no longer subscribed (or deleted) is dropped whole
            for partition in sorted(parts):
                if partition >= partition_counts[topic]:
                    continue
                if quota > 0:
                    kept.setdefault(topic, set()).add(partition)
                    quota -= 1
                else:
                    unassigned.append((topic, partition))
        result[member_id] = kept
        remaining[member_id] = quota
    position = 0
    for member_id in order:
        for _ in range(remaining[member_id]):
            if position == len(unassigned):
                break
            topic, partition = unassigned[position]
            result[member_id].setdefault(topic, set()).add(partition)
            position += 1
    return {m: _freeze(a) for m, a in result.items()}


def _heterogeneous(
    members: Mapping[str, MemberSubscription], partition_counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    order = _member_order(members)
    subscribed = {m: set(_subscribed(members[m].subscribed_topic_ids, partition_counts)) for m in order}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for member_id in order:
        for topic, parts in members[member_id].assignment.items():
            if topic not in subscribed[member_id]:
                continue
            for partition in parts:
                if partition < partition_counts[topic] and (topic, partition) not in owner:
                    owner[(topic, partition)] = member_id
    counts = dict.fromkeys(order, 0)
    for member_id in owner.values():
        counts[member_id] += 1
    every_topic = sorted({t for topics in subscribed.values() for t in topics})
    # topics with fewer subscribers first: their partitions have fewer places to go
    every_topic.sort(key=lambda t: sum(t in subscribed[m] for m in order))
    for topic in every_topic:
        candidates = [m for m in order if topic in subscribed[m]]
        for partition in range(partition_counts[topic]):
            if (topic, partition) not in owner:
                chosen = min(candidates, key=lambda m: counts[m])
                owner[(topic, partition)] = chosen
                counts[chosen] += 1
    _balance(owner, counts, subscribed, order)
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in order}
    for (topic, partition), member_id in owner.items():
        result[member_id].setdefault(topic, set()).add(partition)
    return {m: _freeze(a) for m, a in result.items()}


def _balance(
    owner: dict[tuple[uuid.UUID, int], str],
    counts: dict[str, int],
    subscribed: dict[str, set[uuid.UUID]],
    order: list[str],
) -> None:
    """Moves partitions from fuller members to subscribed members with at least two fewer, fullest first."""
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in order}
    for tp, member_id in sorted(owner.items()):
        owned[member_id].append(tp)
    while True:
        move = _next_move(owned, counts, subscribed, order)
        if move is None:
            return
        tp, giver, receiver = move
        owned[giver].remove(tp)
        owned[receiver].append(tp)
        owner[tp] = receiver
        counts[giver] -= 1
        counts[receiver] += 1


def _next_move(
    owned: dict[str, list[tuple[uuid.UUID, int]]],
    counts: dict[str, int],
    subscribed: dict[str, set[uuid.UUID]],
    order: list[str],
) -> tuple[tuple[uuid.UUID, int], str, str] | None:
    by_load = sorted(order, key=lambda m: counts[m])
    for giver in reversed(by_load):
        for tp in reversed(owned[giver]):  # the partitions it got last go first
            for receiver in by_load:
                if counts[receiver] + 1 >= counts[giver]:
                    break
                if tp[0] in subscribed[receiver]:
                    return tp, giver, receiver
    return None


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
