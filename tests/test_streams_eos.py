"""A Kafka Streams application with exactly_once_v2 (kafka-streams from Maven Central: a repartition topic and
a RocksDB count store) against three brokers, one SIGKILLed mid-run and restarted: its output, read
read_committed, is exact. The checker itself is tested on sequences with a duplicate, a gap or a short end."""

from __future__ import annotations

import subprocess

import pytest

from epochkraft.peers import fetch
from epochkraft.peers.fetch import PeerUnavailable, kafka_classpath
from epochkraft.peers.streams_eos import StreamsRun, count_problems, run


def test_count_problems_exact_output():
    output = [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]
    assert count_problems(output, {"a": 3, "b": 2}) == []


def test_count_problems_detects_a_duplicate():
    """A batch written twice (at_least_once after a crash replays a count): 1, 2, 2, 3."""
    output = [("a", 1), ("a", 2), ("a", 2), ("a", 3)]
    assert count_problems(output, {"a": 3}) == ["duplicate: a counted 2 after 2"]


def test_count_problems_detects_a_replayed_count_from_a_stale_store():
    """The store restored from a changelog behind the output: 1, 2, 3, 2, 3."""
    output = [("a", 1), ("a", 2), ("a", 3), ("a", 2), ("a", 3)]
    assert count_problems(output, {"a": 3}) == ["duplicate: a counted 2 after 3"]


def test_count_problems_detects_a_gap_and_a_short_end():
    output = [("a", 1), ("a", 3), ("b", 1)]
    assert count_problems(output, {"a": 3, "b": 2, "c": 1}) == [
        "gap: a counted 3 after 1",
        "final: b counted 1, expected 2",
        "final: c counted 0, expected 1",
    ]


def test_summary_of_a_run_with_no_broker_killed():
    """``--no-kill``: the summary says no broker was killed, not that broker None was."""
    run_ = StreamsRun("exactly_once_v2", 3000, 0, 13.7, None, 0, False, "", 3000, 3000)
    assert run_.summary().startswith(
        "exactly_once_v2: app exit 0 in 13.7 s, no broker killed, 3000 input records, output read_committed"
    )


def test_kafka_libs_fetched_again_when_the_pom_changes(tmp_path, monkeypatch):
    """A cache of Kafka's jars fetched before kafka-streams joined the pom is fetched again (into the same
    directory), once; a pom fetched already is not."""
    fetches: list[list[str]] = []

    def mvn(command, **kwargs):
        fetches.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setenv("EPOCHKRAFT_PEERS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(fetch.subprocess, "run", mvn)
    pom = tmp_path / "pom.xml"
    pom.write_text(fetch.KAFKA_POM.read_text())
    monkeypatch.setattr(fetch, "KAFKA_POM", pom)
    libs = fetch.kafka_libs()
    assert fetch.kafka_libs() == libs and len(fetches) == 1
    pom.write_text(pom.read_text() + "<!-- a dependency added -->\n")
    assert fetch.kafka_libs() == libs and len(fetches) == 2
    assert fetch.kafka_libs() == libs and len(fetches) == 2


@pytest.fixture(scope="module")
def streams_jars() -> None:
    """Kafka's jars with kafka-streams, fetched outside the test's time limit (a first fetch runs Maven)."""
    try:
        kafka_classpath()
    except PeerUnavailable as exc:
        pytest.skip(f"kafka-streams unavailable: {exc}")


@pytest.mark.slow
@pytest.mark.peers
@pytest.mark.timeout(360)
def test_streams_exactly_once_v2_with_a_broker_killed(streams_jars, make_cluster, tmp_path):
    """1,500 keyed records over 6 partitions; the application starts; once it has written a tenth of its
    output, the broker coordinating its transactions (found by ListTransactions; never the controller, a
    process of its own) is SIGKILLed, 1,500 more records are produced, and it is restarted 3 s after."""
    cluster = make_cluster(brokers=3)
    result = run(cluster, tmp_path, guarantee="exactly_once_v2", records=3000, partitions=6)
    print(result.summary())
    assert result.killed_broker is not None, result.app_log
    assert result.app_code == 0, result.app_log
    assert result.problems == [], result.summary()
    assert result.committed == 3000
