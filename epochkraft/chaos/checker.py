"""The chaos run's judge, as Kafka's replication system tests and Jepsen's Kafka workload check:
every acknowledged value is consumed, one value per offset, offsets increase in every partition,
replicas agree up to the high watermark, the ISR shrank and re-expanded, and each KIP-966 (`elr`) fault's
cleanly stopped follower was elected from the ELR on its return, and the consumer group healed after each
fault (every partition owned once) and read every acknowledged value. Under retention, an
acknowledged value below its partition's log start offset at the final read was removed by retention,
not lost; everything at or above it must be there. The transactional workload's own checks are in
txn_checker.py. Pure: histories in, a report out."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from epochkraft.chaos.group_heal import heal_problems
from epochkraft.chaos.txn_checker import TxnHistory, TxnReport, check_transactions


@dataclass
class History:
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset)
    consumed: list[tuple[int, int, bytes | None]] = field(
        default_factory=list
    )  # final read: (partition, offset, value); None a tombstone's, which the workload never writes
    replicas: dict[int, dict[int, list[tuple[int, bytes]]]] = field(
        default_factory=dict
    )  # broker -> partition
    high_watermarks: dict[int, int] = field(default_factory=dict)  # partition -> HW all replicas must share
    isr_sizes: list[tuple[int, int]] = field(default_factory=list)  # (partition, ISR size) as observed
    replication_factor: int = 3
    rejected_alter_partitions: dict[str, int] = field(default_factory=dict)  # Kafka error -> count
    attempted: int = 0
    failed_produces: int = 0
    # partition -> the leader's log start offset at the final read (what retention had removed below it)
    log_start_offsets: dict[int, int] = field(default_factory=dict)
    # a controller quorum at the end: voter -> its own view (role, epoch, leader, active, high_watermark),
    # None for a voter that did not answer; None for a single controller (nothing to judge)
    quorum: dict[int, dict[str, Any] | None] | None = None
    # what each `elr` fault saw (elr_fault.ElrElection.to_json): the returning member elected from the ELR?
    elr_elections: list[dict[str, Any]] = field(default_factory=list)
    # the consumer group after each fault (group_heal.GroupHeal.to_json), and the values it consumed
    group_heals: list[dict[str, Any]] = field(default_factory=list)
    group_consumed: set[bytes] | None = None
    # the transactional workload's record (--workload txn), None for the plain one
    transactions: TxnHistory | None = None


@dataclass
class Report:
    attempted: int
    acked: int
    consumed: int
    failed_produces: int
    lost: list[str]
    duplicated: list[str]
    multi_value_offsets: list[str]
    non_monotonic_partitions: list[int]
    divergent_replicas: list[str]
    isr_shrank: bool
    isr_reexpanded: bool
    rejected_alter_partitions: dict[str, int]
    faults: list[str] = field(default_factory=list)
    removed_by_retention: int = 0
    quorum_checked: bool = False
    quorum_problems: list[str] = field(default_factory=list)
    elr_elections: list[dict[str, Any]] = field(default_factory=list)
    elr_problems: list[str] = field(default_factory=list)
    group_heals: list[dict[str, Any]] = field(default_factory=list)
    group_problems: list[str] = field(default_factory=list)
    missed_by_group: list[str] = field(default_factory=list)
    transactions: TxnReport | None = None

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.multi_value_offsets
            or self.non_monotonic_partitions
            or self.divergent_replicas
            or self.quorum_problems
            or self.elr_problems
            or self.group_problems
            or self.missed_by_group
            or (self.transactions is not None and not self.transactions.ok)
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        for key in ("lost", "duplicated", "multi_value_offsets", "divergent_replicas", "missed_by_group"):
            data[f"{key}_count"] = len(data[key])
            data[key] = data[key][:50]
        if self.transactions is not None:
            data["transactions"] = self.transactions.to_json()
        return data

    def table(self) -> str:
        rows: list[tuple[str, object]] = (
            self.transactions.rows()
            if self.transactions is not None
            else [
                ("attempted", self.attempted),
                ("acknowledged", self.acked),
                ("consumed", self.consumed),
                ("failed produces (not acked)", self.failed_produces),
                ("removed by retention", self.removed_by_retention),
                ("LOST acknowledged", len(self.lost)),
                ("duplicated", len(self.duplicated)),
            ]
        )
        rows += [
            ("offsets with >1 value", len(self.multi_value_offsets)),
            ("non-monotonic partitions", len(self.non_monotonic_partitions)),
            ("divergent replicas", len(self.divergent_replicas)),
            ("ISR shrank / re-expanded", f"{self.isr_shrank} / {self.isr_reexpanded}"),
        ]
        if self.quorum_checked:
            rows.append(("controller quorum healed", "; ".join(self.quorum_problems) or "yes"))
        if self.elr_elections:
            elected = sum(1 for e in self.elr_elections if e["elected_from_elr"])
            rows.append(("ELR member elected (KIP-966)", f"{elected} of {len(self.elr_elections)}"))
        if self.group_heals:
            healed = [h["seconds"] for h in self.group_heals if h["seconds"] is not None]
            slowest = f", slowest {max(healed):.1f} s" if healed else ""
            rows.append(
                ("group healed (partitions owned)", f"{len(healed)} of {len(self.group_heals)}{slowest}")
            )
            rows.append(("acknowledged missed by the group", len(self.missed_by_group)))
        rows += [
            (f"AlterPartition rejected: {error}", n)
            for error, n in sorted(self.rejected_alter_partitions.items())
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        lines.append(f"{'verdict':<{width}}  {'PASS' if self.ok else 'FAIL'}")
        return "\n".join(lines)


def _show(value: bytes | None) -> str:
    return "<null>" if value is None else value.decode(errors="replace")


def quorum_problems(views: dict[int, dict[str, Any] | None]) -> list[str]:
    """What keeps a controller quorum from being healed: every voter answering, exactly one active
    controller, every voter naming it as leader in the same epoch, every high watermark equal."""
    problems = [f"voter {voter} does not answer" for voter, view in sorted(views.items()) if view is None]
    up = {voter: view for voter, view in views.items() if view is not None}
    if not up:
        return problems
    active = sorted(voter for voter, view in up.items() if view.get("active"))
    if len(active) != 1:
        problems.append(f"active controllers: {active or 'none'}")
    named = {(view["leader"], view["epoch"]) for view in up.values()}
    if len(named) != 1 or (active and next(iter(named))[0] != active[0]):
        problems.append(
            "voters disagree on the leader: "
            + ", ".join(f"{v} names {up[v]['leader']} in epoch {up[v]['epoch']}" for v in sorted(up))
        )
    if len({view["high_watermark"] for view in up.values()}) != 1:
        problems.append(
            "high watermarks differ: " + ", ".join(f"{v}: {up[v]['high_watermark']}" for v in sorted(up))
        )
    return problems


def elr_problems(elections: list[dict[str, Any]]) -> list[str]:
    """Each `elr` fault whose cleanly stopped follower was not elected from the ELR on its return."""
    return [
        f"{e['topic']}-{e['partition']}: follower {e['follower_stopped']} not elected from the ELR "
        f"(ELR {e['elr_seen']}, leader {e['elected']})"
        for e in elections
        if not e["elected_from_elr"]
    ]


def check(history: History) -> Report:
    consumed_values = Counter(v for _, _, v in history.consumed)
    starts = history.log_start_offsets

    def retained(partition: int, offset: int) -> bool:
        return offset < 0 or offset >= starts.get(partition, 0)

    missing = [(v, where) for v, where in history.acked.items() if v not in consumed_values]
    group = history.group_consumed
    missed_by_group = sorted(
        (
            _show(v)
            for v, (p, o) in history.acked.items()
            if group is not None and v not in group and retained(p, o)
        ),
        key=lambda s: (len(s), s),
    )
    removed = [v for v, (p, o) in missing if not retained(p, o)]
    lost = sorted((_show(v) for v, (p, o) in missing if retained(p, o)), key=lambda s: (len(s), s))
    duplicated = sorted(_show(v) for v, n in consumed_values.items() if n > 1)

    by_offset: dict[tuple[int, int], set[bytes | None]] = defaultdict(set)
    for partition, offset, value in history.consumed:
        by_offset[(partition, offset)].add(value)
    for value, (partition, offset) in history.acked.items():
        if offset >= 0:
            by_offset[(partition, offset)].add(value)
    multi = sorted(f"{p}@{o}" for (p, o), values in by_offset.items() if len(values) > 1)

    last: dict[int, int] = {}
    non_monotonic: set[int] = set()
    for partition, offset, _ in history.consumed:
        if partition in last and offset <= last[partition]:
            non_monotonic.add(partition)
        last[partition] = offset

    divergent: list[str] = []
    partitions = {p for logs in history.replicas.values() for p in logs}
    for partition in sorted(partitions):
        hw = history.high_watermarks.get(partition, 0)
        # Replicas delete segments at their own pace: compare from the latest first offset any holds.
        floor = max(
            [starts.get(partition, 0)]
            + [logs[partition][0][0] for logs in history.replicas.values() if logs.get(partition)]
        )
        views = {
            broker: [entry for entry in logs.get(partition, []) if floor <= entry[0] < hw]
            for broker, logs in history.replicas.items()
            if partition in logs
        }
        reference = next(iter(views.values()), [])
        for broker, view in views.items():
            if view != reference:
                first_diff = next(
                    (a[0] for a, b in zip(view, reference, strict=False) if a != b),
                    min(len(view), len(reference)),
                )
                divergent.append(f"partition {partition}: broker {broker} differs from offset {first_diff}")

    shrank = any(size < history.replication_factor for _, size in history.isr_sizes)
    reexpanded = False
    seen_shrink: set[int] = set()
    for partition, size in history.isr_sizes:
        if size < history.replication_factor:
            seen_shrink.add(partition)
        elif partition in seen_shrink:
            reexpanded = True

    return Report(
        attempted=history.attempted,
        acked=len(history.acked),
        consumed=len(history.consumed),
        failed_produces=history.failed_produces,
        lost=lost,
        duplicated=duplicated,
        multi_value_offsets=multi,
        non_monotonic_partitions=sorted(non_monotonic),
        divergent_replicas=divergent,
        isr_shrank=shrank,
        isr_reexpanded=reexpanded,
        rejected_alter_partitions=dict(history.rejected_alter_partitions),
        removed_by_retention=len(removed),
        quorum_checked=history.quorum is not None,
        quorum_problems=quorum_problems(history.quorum) if history.quorum is not None else [],
        elr_elections=list(history.elr_elections),
        elr_problems=elr_problems(history.elr_elections),
        group_heals=list(history.group_heals),
        group_problems=heal_problems(history.group_heals),
        missed_by_group=missed_by_group,
        transactions=check_transactions(history.transactions) if history.transactions is not None else None,
    )
