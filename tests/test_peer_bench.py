"""The pure pieces of the side-by-side benchmarks: ProducerPerformance's summary read, latency percentiles
and the warm-up cut, a restarted broker's state read from Metadata, when a group is stable, and the
epochkraft/Kafka ratios, and the consume part's: ConsumerPerformance's summary, the brokers' CPU over
a window, the topic's log files and the ratios; the latency curve's: its loads, the keep-up mark and
its plot; the scale part's topics and table; and the scale part run small on epochkraft."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from pathlib import Path

# matplotlib finds the system's fonts with fc-list the first time it runs: here, at collection, not inside
# the unit tier's no-process guard.
import matplotlib.font_manager  # noqa: F401
import numpy as np
import pytest
from matplotlib.lines import Line2D

from epochkraft.bench.cli import produce_ratios
from epochkraft.bench.cli import side_by_side as produce_side_by_side
from epochkraft.peers import perf
from epochkraft.peers.bench import main as bench_main
from epochkraft.peers.consume import (
    ConsumeFigures,
    LiveFigure,
    ReadFigure,
    consume_ratios,
    cpu_between,
    parse_consumer_performance,
    topic_logs,
)
from epochkraft.peers.groupjoin import consumer_config, is_stable
from epochkraft.peers.latency import LatencyFigure, fmt_ratio, keeps_up, latencies, percentile, ratio
from epochkraft.peers.latency_curve import (
    CurvePoint,
    curve_figure,
    median_point,
    offered_rate,
    parse_fractions,
    write_plot,
)
from epochkraft.peers.perf import PerfResult, parse_producer_performance
from epochkraft.peers.rejoin import broker_state
from epochkraft.peers.scale import (
    ProcessFigures,
    ScaleFigure,
    epochkraft_scale_cluster,
    full_isr_count,
    in_every_isr,
    limit_warnings,
    measure_scale,
    per_partition_kib,
    request_batches,
    side_by_side,
    topic_sizes,
)

PERF_OUTPUT = """\
9994 records sent, 1998.4 records/sec (1.95 MB/sec), 12.3 ms avg latency, 410.0 ms max latency.
20000 records sent, 1999.600080 records/sec (1.95 MB/sec), 9.87 ms avg latency, 410.00 ms max latency, \
7 ms 50th, 21 ms 95th, 116 ms 99th, 390 ms 99.9th.
"""


def test_producer_performance_summary_is_the_final_line_not_an_interim_one() -> None:
    assert parse_producer_performance(PERF_OUTPUT) == PerfResult(
        20000, 1999.600080, 1.95, 9.87, 410.0, 7.0, 21.0, 116.0
    )
    assert parse_producer_performance(PERF_OUTPUT.splitlines()[0]) is None  # no percentiles yet


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100
    assert percentile([7.0], 0.99) == 7
    assert percentile(values, 0.0) == 1
    assert math.isnan(percentile([], 0.5))


def test_latencies_leave_out_records_created_during_the_warm_up() -> None:
    # (create ms, receipt ms): the first record at 1000, a 2 s warm-up ends at 3000.
    samples = [(1000.0, 1400.0), (2999.0, 3100.0), (3000.0, 3012.0), (5000.0, 5003.5), (4000.0, 4030.0)]
    assert latencies(samples, 2000) == [3.5, 12.0, 30.0]
    assert latencies(samples, 0) == [3.5, 12.0, 30.0, 101.0, 400.0]
    assert latencies([], 2000) == []


def test_ratio_is_ours_over_theirs_and_nan_without_a_figure() -> None:
    assert ratio(6.0, 8.0) == 0.75
    assert math.isnan(ratio(5.0, 0.0))
    assert math.isnan(ratio(math.nan, 3.0))


def test_broker_state_from_metadata() -> None:
    partitions = [((1, 2, 3), (2, 3)), ((2, 3, 1), (2, 3)), ((2, 3, 4), (2, 3, 4))]
    fenced = broker_state([2, 3, 4], partitions, 1)
    assert (fenced.listed, fenced.in_every_isr, fenced.in_no_isr) == (False, False, True)
    unfenced_catching_up = broker_state([1, 2, 3, 4], [((1, 2, 3), (1, 2, 3)), *partitions[1:]], 1)
    assert (unfenced_catching_up.listed, unfenced_catching_up.in_every_isr) == (True, False)
    assert not unfenced_catching_up.in_no_isr
    back = broker_state([1, 2, 3, 4], [((1, 2, 3), (1, 2, 3)), ((2, 3, 1), (2, 3, 1))], 1)
    assert (back.listed, back.in_every_isr, back.in_no_isr) == (True, True, False)
    # Partitions the broker does not host say nothing about it.
    assert broker_state([2], [((2, 3), (2,))], 1).in_every_isr


def _produce(mb_a: float, cpu_a: float, mb_b: float, cpu_b: float) -> dict[str, object]:
    return {
        "1024B": {
            "a_rf3_acks_all": {"mb_per_s": mb_a, "broker_cpu_s_per_gb": cpu_a},
            "b_rf1_acks_1": {"mb_per_s": mb_b, "broker_cpu_s_per_gb": cpu_b},
        }
    }


def test_produce_ratios_and_side_by_side_lines() -> None:
    ours, kafka = _produce(200.0, 4.0, 400.0, 1.5), _produce(100.0, 8.0, 500.0, 1.0)
    ratios = produce_ratios(ours, kafka)
    assert ratios == {
        "1024B": {
            "a_mb_per_s": 2.0,
            "a_broker_cpu_s_per_gb": 0.5,
            "b_mb_per_s": 0.8,
            "b_broker_cpu_s_per_gb": 1.5,
        }
    }
    assert produce_ratios(ours, {}) == {}  # Kafka not measured: no ratios
    lines = produce_side_by_side({**ours, "kafka": kafka, "epochkraft/kafka": ratios}).splitlines()
    assert len(lines) == 3
    assert "200.0 |   100.0 | 2.0" in lines[1] and "0.5" in lines[1]
    assert "400.0 |   500.0 | 0.8" in lines[2]
    assert lines[1].endswith("load - | -")  # no load recorded in these figures


def test_a_produce_figure_carries_the_load_average_of_each_round() -> None:
    from epochkraft.bench.cli import _median_round

    rounds = [
        {"mb_per_s": m, "broker_cpu_s_per_gb": 1.0, "load_average_1m": load}
        for m, load in ((3.0, 1.5), (1.0, 2.5), (2.0, 4.0))
    ]
    figure = _median_round(rounds)
    assert figure["mb_per_s"] == 2.0 and figure["load_average_1m_rounds"] == [1.5, 2.5, 4.0]
    ours = {"1024B": {c: figure for c in ("a_rf3_acks_all", "b_rf1_acks_1")}}
    line = produce_side_by_side({**ours, "kafka": ours, "epochkraft/kafka": produce_ratios(ours, ours)})
    assert "load 1.5/2.5/4.0 | 1.5/2.5/4.0" in line


def test_small_ratios_keep_a_third_decimal() -> None:
    assert fmt_ratio(0.8849) == "0.88"
    assert fmt_ratio(5 / 1203) == "0.004"
    assert fmt_ratio(math.nan) == "nan"


def test_a_group_is_stable_when_every_partition_is_owned_once_and_every_member_owns_some() -> None:
    assert is_stable([{0, 1}, {2}], 3)
    assert not is_stable([{0, 1, 2}, set()], 3), "a member without partitions: the newcomer not in yet"
    assert not is_stable([{0, 1}, {1, 2}], 3), "a partition owned twice: not yet revoked"
    assert not is_stable([{0}, {2}], 3), "a partition owned by nobody"


def test_groupjoin_consumers_per_protocol() -> None:
    classic = consumer_config("b:1", "g", "classic")
    assert classic["partition.assignment.strategy"] == "cooperative-sticky"
    assert "group.protocol" not in classic
    consumer = consumer_config("b:1", "g", "consumer")
    assert consumer["group.protocol"] == "consumer"
    assert "partition.assignment.strategy" not in consumer  # the broker assigns


CONSUMER_PERF_OUTPUT = """\
WARNING: some line the JVM printed first
20261128014512345, 20261128014520345, 390.6250, 48.8281, 400000, 50000.0000, 3000, 5000, 78.1250, 80000.0000
"""


def test_consumer_performance_summary_is_read_in_bytes_over_its_fetch_window() -> None:
    parsed = parse_consumer_performance(CONSUMER_PERF_OUTPUT)
    assert parsed is not None
    assert parsed.nbytes == 400_000 * 1024  # the tool's MB are MiB
    assert parsed.end_s == datetime(2026, 11, 28, 1, 45, 20, 345_000, tzinfo=UTC).timestamp()
    assert parsed.fetch_ms == 5000  # after the 3 s join
    assert parsed.mb_per_s == 400_000 * 1024 / 1e6 / 5
    assert parse_consumer_performance("start.time, end.time, data.consumed.in.MB") is None


def test_cpu_between_covers_the_window_from_the_samples_just_outside_it() -> None:
    samples = [(10.0, 1.0), (10.1, 1.5), (10.2, 2.5), (10.3, 2.6), (10.4, 4.0)]
    assert cpu_between(samples, 10.1, 10.3) == 2.6 - 1.5
    assert cpu_between(samples, 10.15, 10.25) == 2.6 - 1.5
    assert cpu_between(samples, 9.0, 11.0) == 4.0 - 1.0  # beyond the samples: all of them


def test_topic_logs_are_the_segments_of_its_partitions_only(tmp_path: Path) -> None:
    for name in ("consume-read-0/00000000000000000000.log", "consume-read-11/00000000000000000512.log",
                 "consume-read-0/00000000000000000000.index", "consume-read-live-0/00000000000000000000.log",
                 "logs/broker-1.log"):  # fmt: skip
        (tmp_path / "broker-1" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "broker-1" / name).write_bytes(b"")
    found = sorted(
        p.relative_to(tmp_path / "broker-1").as_posix() for p in topic_logs(tmp_path, "consume-read")
    )
    assert found == ["consume-read-0/00000000000000000000.log", "consume-read-11/00000000000000000512.log"]


def _consume_figures(target: str, mb_per_s: float, cpu: float, p99_ms: float) -> ConsumeFigures:
    figures = ConsumeFigures(target, 400.0, 50.0, 1.0, (1.0, 1.0, 1.0))
    figures.reads = [ReadFigure(target, "librdkafka", mb_per_s, cpu, [mb_per_s], [cpu])]
    figures.live = LiveFigure(target, 5000, 2, 100.0, cpu * 2, 3.0, p99_ms, p99_ms)
    return figures


def test_consume_ratios_are_each_target_over_kafka() -> None:
    lines = consume_ratios(
        [_consume_figures("kafka", 200.0, 4.0, 20.0), _consume_figures("epochkraft", 150.0, 6.0, 10.0)]
    )
    assert lines == [
        "ratio epochkraft/kafka, librdkafka: MB/s 0.75, CPU per GB 1.50",
        "ratio epochkraft/kafka, caught up: CPU per GB 1.50, delay p50 1.00, p99 0.50",
    ]
    assert consume_ratios([_consume_figures("epochkraft", 150.0, 6.0, 10.0)]) == []  # no Kafka, no ratio


def test_curve_fractions_are_ascending_distinct_and_within_the_maximum() -> None:
    assert parse_fractions("0.1,0.3,0.5,0.7,0.9") == (0.1, 0.3, 0.5, 0.7, 0.9)
    assert parse_fractions("0.9, 0.1,0.5,0.1,") == (0.1, 0.5, 0.9)
    assert parse_fractions("1") == (1.0,)
    for bad in ("", "0", "0.5,1.2", "-0.1", "half"):
        with pytest.raises(ValueError):
            parse_fractions(bad)


def test_curve_loads_are_whole_records_per_second_of_the_maximum() -> None:
    assert [offered_rate(113_000.4, f) for f in (0.1, 0.5, 0.9)] == [11_300, 56_500, 101_700]
    assert offered_rate(3.0, 0.1) == 1  # never an unlimited (0 or -1) ProducerPerformance


def test_a_target_keeps_up_at_95_percent_of_the_offered_rate() -> None:
    assert keeps_up(10_000, 9_500)
    assert keeps_up(10_000, 10_200)
    assert not keeps_up(10_000, 9_499)


def _point(target: str, maximum: float, fraction: float, achieved: float, p99_ms: float) -> CurvePoint:
    rate = offered_rate(maximum, fraction)
    figure = LatencyFigure(
        target, rate, achieved, 100, 100, 90, p99_ms / 3, p99_ms, p99_ms * 2, p99_ms * 3, 2, 4
    )
    return CurvePoint(target, maximum, fraction, figure)


def test_a_load_measured_several_times_reports_the_run_of_the_median_p99() -> None:
    runs = [_point("epochkraft", 38_000, 0.5, 19_000, p99).figure for p99 in (47.0, 17.5, math.nan, 24.6)]
    point = median_point("epochkraft", 38_000, 0.5, runs)
    assert point.figure is runs[3], "the lower middle of 17.5, 24.6, 47.0 and a run with no p99 (slowest)"
    assert point.p99_runs_ms[:2] == [47.0, 17.5] and math.isnan(point.p99_runs_ms[2])
    assert median_point("epochkraft", 38_000, 0.5, runs[:1]).figure is runs[0]


def test_the_curve_takes_at_least_one_run_per_load() -> None:
    with pytest.raises(SystemExit):  # refused before any cluster starts
        bench_main(["--parts", "e2e-curve", "--e2e-runs", "0"])


def test_a_scratch_topic_is_deleted_however_its_block_ends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deleted: list[str] = []

    def delete(bootstrap: str, topic: str) -> None:
        deleted.append(topic)
        if topic == "refused":
            raise RuntimeError("the controller said no")

    monkeypatch.setattr(perf, "delete_topic", delete)
    with pytest.raises(ValueError), perf.scratch_topic("127.0.0.1:9", "failed-run"):
        raise ValueError("the measurement failed")
    with perf.scratch_topic("127.0.0.1:9", "refused") as topic:
        assert topic == "refused"
    assert deleted == ["failed-run", "refused"]
    assert "could not delete refused" in capsys.readouterr().out  # printed, not raised


def _xs(line: Line2D) -> list[float]:
    return [float(x) for x in np.asarray(line.get_xdata())]


def test_curve_plot_is_a_png_with_a_line_per_target(tmp_path: Path) -> None:
    points = [
        _point("kafka", 20_000, 0.1, 2_000, 4.0),
        _point("kafka", 20_000, 0.9, 15_000, 900.0),  # behind: an open ring
        _point("epochkraft", 100_000, 0.1, 10_000, 3.0),
        _point("epochkraft", 100_000, 0.5, 50_000, 0.0),  # 0 ms rounds: still on the log axis
        _point("kfake", 80_000, 0.5, 40_000, math.nan),  # nothing measured: no line
    ]
    assert [p.kept_up for p in points[:2]] == [True, False]
    absolute, relative = curve_figure(points).axes
    for axes in (absolute, relative):
        assert axes.get_yscale() == "log"
    legend = absolute.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [
        "kafka (max 20,000/s)",
        "epochkraft (max 100,000/s)",
    ]
    assert _xs(absolute.lines[0]) == [2_000, 18_000]
    assert _xs(relative.lines[0]) == [10, 90]
    ringed = [line for line in absolute.lines if line.get_linestyle() == "None"]
    assert [_xs(line) for line in ringed] == [[18_000]]
    path = tmp_path / "images" / "curve.png"
    write_plot(points, path)
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert path.stat().st_size > 10_000  # axes, lines and legend, not an empty canvas


def test_scale_topics_keep_every_create_topics_request_under_ten_thousand_partitions() -> None:
    assert topic_sizes(2500, 1000) == [1000, 1000, 500]
    assert topic_sizes(12, 1000) == [12]
    sizes = topic_sizes(100_000)
    assert sum(sizes) == 100_000
    batches = request_batches(sizes)
    assert sorted(i for batch in batches for i in batch) == list(range(len(sizes)))
    # ReplicationControlManager.validateTotalNumberOfPartitions, and QuorumController.MAX_RECORDS_PER_USER_OP
    # (a TopicRecord and a PartitionRecord each): 10,000 at most per request.
    assert max(sum(1 + sizes[i] for i in batch) for batch in batches) <= 10_000


def test_scale_full_isr_and_the_restarted_broker_in_every_isr() -> None:
    partitions = [
        (1, (1, 2, 3), (1, 2, 3)),
        (2, (2, 3, 1), (2, 3)),
        (-1, (3, 1, 2), (3, 1, 2)),
        (4, (4,), (4,)),
    ]
    assert full_isr_count(partitions) == 2, "a partition without a leader or short of a replica is not full"
    assert not in_every_isr(partitions, 1)
    assert in_every_isr(partitions, 3)
    assert in_every_isr([(4, (4,), (4,))], 1), "partitions it does not host say nothing about it"


def test_scale_rss_per_partition_is_the_slope_between_two_counts() -> None:
    assert per_partition_kib((500, 70.0), (10_500, 170.0)) == pytest.approx(10.24)
    assert math.isnan(per_partition_kib((500, 70.0), (500, 80.0)))


def _figure(target: str, rss: float, propagation: list[float]) -> ScaleFigure:
    processes = {"broker-1": ProcessFigures(rss, 100, 300), "controller": ProcessFigures(rss / 2, 50, 200)}
    return ScaleFigure(target, 500, 1, 500, 0.4, 2.0, processes, propagation, 1.0, 2.0, 4.0, [2.0, 3.5])


def test_scale_side_by_side_has_a_column_per_target_and_the_ratios() -> None:
    table = side_by_side(
        [_figure("kafka", 400.0, [100.0, 60.0, 80.0]), _figure("epochkraft", 100.0, [4.0, 8.0])]
    )
    lines = table.splitlines()
    assert lines[0] == "| figure | kafka | epochkraft | epochkraft/kafka |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert rows["broker-1 RSS, MB"] == "| broker-1 RSS, MB | 400 | 100 | 0.25 |"
    assert rows["propagation to every broker, median ms"].endswith("| 80 (100, 60, 80) | 6 (4, 8) | 0.07 |")
    assert rows["load average (1 min), start-end"].endswith("| 2.0-3.5 | 2.0-3.5 |  |"), "no ratio of loads"
    assert "epochkraft/kafka" not in side_by_side([_figure("epochkraft", 100.0, [4.0])])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_scale_part_runs_small_on_epochkraft(tmp_path: Path) -> None:
    """Two topics of 6 partitions in one CreateTopics request, two propagation changes, broker 2 stopped
    cleanly and started again."""
    with epochkraft_scale_cluster(tmp_path) as daemons:
        figure = measure_scale("epochkraft", daemons, 12, 2, timeout_s=60, per_topic=6)
        back = asyncio.run(_partition_rows(daemons.addresses[1]))
    assert (figure.partitions, figure.topics) == (12, 2)
    assert 0 < figure.created_s <= figure.settled_s
    assert sorted(figure.processes) == ["broker-1", "broker-2", "broker-3", "controller"]
    assert all(p.rss_mb > 0 and p.open_fds > 0 and p.memory_maps > 0 for p in figure.processes.values())
    assert len(figure.propagation_ms) == 2
    assert figure.shutdown_s > 0 and 0 < figure.running_s <= figure.in_every_isr_s
    assert len(back) == 12 and in_every_isr(back, 2) and full_isr_count(back) == 12


async def _partition_rows(address: str) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    from epochkraft.harness.kio_client import MiniClient

    client = MiniClient(address)
    try:
        rows = []
        for topic in ("scale-0", "scale-1"):
            answer = await client.metadata(topic)
            rows += [
                (p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) for p in answer.topics[0].partitions
            ]
        return rows
    finally:
        await client.close()


def test_scale_limit_warnings_for_kafkas_index_maps_and_every_broker_s_open_files() -> None:
    assert limit_warnings(10_000, 65_530, 20_000) == []
    maps, files = limit_warnings(40_000, 65_530, 20_000)
    assert "vm.max_map_count 65530" in maps and "82000" in maps
    assert "open files limit 20000" in files
    assert limit_warnings(19_500, 262_144, 20_000), "the daemon's own files leave less than the limit"
    assert limit_warnings(30_000, 262_144, 20_000) == [
        "open files limit 20000: each broker needs about 31000"
    ]
