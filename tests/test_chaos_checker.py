"""The checker on crafted histories: it must catch a lost write, a duplicate, two values at one offset,
non-monotonic offsets and a divergent replica, and pass a clean history."""

from epochkraft.chaos.checker import History, check


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
