"""Flink's exactly-once Kafka sink (Flink 2.2 in a local MiniCluster, flink-connector-kafka from Maven
Central: a transactional producer per subtask, committed when a checkpoint completes, its lingering
transactions committed or aborted on restore) against three brokers, with the broker coordinating its
transactions SIGKILLed mid-run and restarted and the job's own JVM SIGKILLed after a checkpoint and restored
from it. Its output, read read_committed, holds every input's output exactly once. The checker itself is
tested on outputs with a duplicate, a stranger and a gap."""

from __future__ import annotations

import pytest

from epochkraft.peers.fetch import PeerUnavailable
from epochkraft.peers.flink_eos import FlinkRun, compiled_job, exactly_once_problems, latest_checkpoint, run


def test_exactly_once_problems_exact_output():
    assert exactly_once_problems(["1:out", "0:out", "2:out"], 3) == []


def test_exactly_once_problems_detects_a_duplicate_a_stranger_and_a_gap():
    """A transaction committed twice (or an aborted one read), a record not from the input, one lost."""
    output = ["0:out", "1:out", "1:out", "7:out", "3:out"]
    assert exactly_once_problems(output, 5) == [
        "duplicate: 1:out 2 times",
        "unexpected: 7:out",
        "missing: 2 outputs, first ['2:out', '4:out']",
    ]


def test_latest_checkpoint_is_the_newest_completed_one(tmp_path):
    """A chk-N directory without its _metadata is a checkpoint still being written: not restored from."""
    for job, chk, complete in [("a", 2, True), ("a", 10, True), ("b", 11, False)]:
        (tmp_path / job / f"chk-{chk}").mkdir(parents=True)
        if complete:
            (tmp_path / job / f"chk-{chk}" / "_metadata").write_bytes(b"")
    assert latest_checkpoint(tmp_path) == tmp_path / "a" / "chk-10"
    assert latest_checkpoint(tmp_path / "none") is None


def test_summary_of_a_run_with_the_job_killed():
    run_ = FlinkRun(2000, 0, 21.5, None, False, 0, ", the job's JVM SIGKILLed after chk-4 and restored from it",
                    2000, 2000)  # fmt: skip
    assert run_.summary().startswith(
        "Flink EXACTLY_ONCE: job exit 0 in 21.5 s, no broker killed, the job's JVM SIGKILLed after chk-4"
    )


def test_summary_counts_the_answers_the_producers_retried():
    """The Java Sender's warning for each retried Produce answer: OUT_OF_ORDER_SEQUENCE_NUMBER behind a first
    batch answered CONCURRENT_TRANSACTIONS is Kafka's too (``--kafka`` runs the job against its brokers)."""
    warning = "WARN Sender: [Producer clientId=p] Got error produce response with correlation id {} on "
    output = "\n".join(
        warning.format(i)
        + f"topic-partition flink-out-0, retrying (2147483646 attempts left). Error: {error}"
        for i, error in enumerate(["CONCURRENT_TRANSACTIONS", "OUT_OF_ORDER_SEQUENCE_NUMBER"] + ["X"] * 2)
    )
    run_ = FlinkRun(2000, 0, 12.0, None, False, 0, "", 2000, 2000, job_output=output + "\nDONE 2000")
    assert run_.summary().endswith(
        "the producers retried 1 OUT_OF_ORDER_SEQUENCE_NUMBER and 1 CONCURRENT_TRANSACTIONS answers"
    )


@pytest.fixture(scope="module")
def flink_job() -> None:
    """Flink's jars fetched and the job compiled, before the runs (a first fetch runs Maven)."""
    try:
        compiled_job()
    except PeerUnavailable as exc:
        pytest.skip(f"Flink unavailable: {exc}")


@pytest.mark.slow
@pytest.mark.clients
@pytest.mark.timeout(240)
def test_flink_exactly_once_sink_with_the_coordinator_and_the_job_killed(flink_job, make_cluster, tmp_path):
    """2,000 keyed records over 3 partitions, parallelism 2. Once 200 outputs are committed, the broker
    coordinating the sink's transactions (never the controller) is SIGKILLed and the second half of the input
    produced; the job's JVM is SIGKILLed right after its next checkpoint completes (its pre-committed
    transactions perhaps not yet committed, the next ones open) and started again from that checkpoint,
    whose transactions the sink commits by resuming them, aborting the rest; the broker is restarted 3 s
    after its kill. (One test for both faults: the CI budget.)"""
    cluster = make_cluster(brokers=3)
    result = run(cluster, tmp_path, records=2000, kill_job=True)
    print(result.summary())
    assert result.killed_broker is not None, result.job_log
    assert result.job_killed, result.job_log
    assert result.job_code == 0, result.job_log
    assert result.problems == [], result.summary() + "\n" + result.job_log
    assert result.committed == 2000
