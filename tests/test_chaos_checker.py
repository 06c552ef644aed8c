"""The checker on crafted histories: it must catch a lost write, a duplicate, two values at one offset,
non-monotonic offsets, a divergent replica and an ELR fault whose member was not elected, and pass a clean
history."""

from epochkraft.chaos.checker import History, check
from epochkraft.chaos.elr_fault import ElrElection
from epochkraft.chaos.group_heal import ownership_problem


def clean() -> History:
    values = [f"{i}".encode() for i in range(10)]
    return History(
        acked={v: (0, i) for i, v in enumerate(values)},
        consumed=[(0, i, v) for i, v in enumerate(values)],
        replicas={b: {0: [(i, v) for i, v in enumerate(values)]} for b in (1, 2, 3)},
        high_watermarks={0: 10},
        isr_sizes=[(0, 3), (0, 2), (0, 3)],
        attempted=10,
    )


def test_clean_history_passes():
    report = check(clean())
    assert report.ok
    assert (report.acked, report.consumed, report.isr_shrank, report.isr_reexpanded) == (10, 10, True, True)
    assert "PASS" in report.table()


def test_lost_write_is_caught():
    history = clean()
    history.consumed = [r for r in history.consumed if r[2] != b"7"]
    report = check(history)
    assert report.lost == ["7"] and not report.ok


def test_duplicate_is_caught():
    history = clean()
    history.consumed.append((0, 10, b"3"))
    report = check(history)
    assert report.duplicated == ["3"] and not report.ok


def test_two_values_at_one_offset_are_caught():
    history = clean()
    history.consumed[4] = (0, 4, b"other")
    report = check(history)
    assert report.multi_value_offsets == ["0@4"]


def test_non_monotonic_offsets_are_caught():
    history = clean()
    history.consumed[5], history.consumed[6] = history.consumed[6], history.consumed[5]
    assert check(history).non_monotonic_partitions == [0]


def test_divergent_replica_is_caught_below_the_high_watermark_only():
    history = clean()
    history.replicas[2][0][6] = (6, b"diverged")
    report = check(history)
    assert report.divergent_replicas == ["partition 0: broker 2 differs from offset 6"]
    history.high_watermarks = {0: 6}
    assert check(history).divergent_replicas == [], "beyond the high watermark replicas may differ"


def test_report_json_counts():
    history = clean()
    history.rejected_alter_partitions = {"INELIGIBLE_REPLICA": 1}
    data = check(history).to_json()
    assert (
        data["ok"]
        and data["lost_count"] == 0
        and data["rejected_alter_partitions"] == {"INELIGIBLE_REPLICA": 1}
    )


def test_values_removed_by_retention_are_not_lost_but_a_retained_one_missing_is():
    """Under retention the final read starts at the log start offset: what lies below it was removed by
    retention; a value at or above it that is not read back is lost. Replicas are compared only from
    the latest first offset any of them still holds."""
    history = clean()
    history.log_start_offsets = {0: 4}
    history.consumed = [r for r in history.consumed if r[1] >= 4]
    history.replicas[2][0] = history.replicas[2][0][2:]  # broker 2 deleted its segments sooner
    history.replicas[3][0] = [(0, b"other"), *history.replicas[3][0][1:]]  # differs only below the start
    report = check(history)
    assert report.ok and report.removed_by_retention == 4 and report.lost == []
    history.consumed = [r for r in history.consumed if r[2] != b"6"]
    report = check(history)
    assert report.lost == ["6"] and report.removed_by_retention == 4 and not report.ok


def view(voter: int, leader: int = 3000, epoch: int = 4, hw: int = 120) -> dict:
    role = "leader" if voter == leader else "follower"
    return {
        "node_id": voter,
        "role": role,
        "epoch": epoch,
        "leader": leader,
        "active": voter == leader,
        "high_watermark": hw,
        "log_end_offset": hw,
    }


def test_a_healed_controller_quorum_passes_and_every_way_of_not_healing_is_caught():
    history = clean()
    history.quorum = {v: view(v) for v in (3000, 3001, 3002)}
    report = check(history)
    assert report.ok and report.quorum_checked and report.quorum_problems == []
    assert "controller quorum healed" in report.table()
    assert not check(clean()).quorum_checked, "a single controller: nothing to judge"

    history.quorum[3002] = view(3002, hw=118)  # a follower behind the leader
    report = check(history)
    assert report.quorum_problems == ["high watermarks differ: 3000: 120, 3001: 120, 3002: 118"]
    assert not report.ok and "FAIL" in report.table()

    history.quorum[3002] = None  # a voter down
    assert check(history).quorum_problems == ["voter 3002 does not answer"]

    history.quorum = {3000: view(3000), 3001: view(3001, leader=3001, epoch=5), 3002: view(3002)}
    problems = check(history).quorum_problems
    assert problems[0] == "active controllers: [3000, 3001]"
    assert problems[1].startswith("voters disagree on the leader: 3000 names 3000 in epoch 4")

    history.quorum = {v: view(v, leader=-1) for v in (3000, 3001, 3002)}  # an election under way
    assert "active controllers: none" in check(history).quorum_problems


def elr_election(elected: int, elr_seen: list[int]) -> ElrElection:
    return ElrElection(
        topic="chaos",
        partition=1,
        leader_killed=1,
        follower_killed=3,
        follower_stopped=2,
        isr_below_min=[1],
        elr_seen=elr_seen,
        elected=elected,
        seconds_to_elect=4.5,
        isr_at_election=[elected] if elected >= 0 else [],
        elr_at_election=[1] if elr_seen else [],
        last_known_elr_at_election=[],
    )


def test_an_elr_member_elected_passes_and_one_not_elected_is_caught():
    history = clean()
    history.elr_elections = [elr_election(2, [2]).to_json()]
    report = check(history)
    assert report.ok and report.elr_problems == []
    assert "ELR member elected (KIP-966)  1 of 1" in report.table()
    # ELR off: the partition stays offline until the dead leader returns
    history.elr_elections.append(elr_election(-1, []).to_json())
    report = check(history)
    assert not report.ok and "FAIL" in report.table()
    assert report.elr_problems == ["chaos-1: follower 2 not elected from the ELR (ELR [], leader -1)"]
    assert "1 of 2" in report.table()
    # elected, but not from the ELR (it was never seen there): not what the fault is for
    history.elr_elections[1] = elr_election(2, []).to_json()
    assert len(check(history).elr_problems) == 1


def heal(fault: str, seconds: float | None, owned: list[int], problem: str | None = None) -> dict:
    return {"fault": fault, "seconds": seconds, "members": 1, "owned": owned, "problem": problem}


def test_a_group_that_healed_passes_and_one_that_did_not_is_caught():
    history = clean()
    history.group_heals = [heal("pause", 1.5, [0])]
    report = check(history)
    assert report.ok and report.group_problems == []
    assert "1 of 1, slowest 1.5 s" in report.table()
    history.group_heals.append(heal("disk-loss", None, [], "partitions [0] owned by no member"))
    report = check(history)
    assert not report.ok
    assert report.group_problems == ["after disk-loss: partitions [0] owned by no member"]


def test_an_acknowledged_value_the_group_missed_is_caught():
    history = clean()
    history.group_consumed = set(history.acked)
    assert check(history).ok
    history.group_consumed.discard(b"3")
    report = check(history)
    assert not report.ok and report.missed_by_group == ["3"]


def test_ownership_problems():
    assert ownership_problem([0, 1, 2], 3) is None
    assert ownership_problem([0, 2], 3) == "partitions [1] owned by no member"
    assert ownership_problem([0, 1, 1, 2], 3) == "partitions [1] owned by more than one member"
