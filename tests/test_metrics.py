"""Structured events (schema, rotation, surviving SIGTERM) and the admin HTTP port on a real cluster."""

from __future__ import annotations

import asyncio
import json
import time
import typing
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from epochkraft.analytics.schema import COMMON, FIELDS, validate_event
from epochkraft.harness.kio_client import MiniClient
from epochkraft.metrics.event_schema import Event
from epochkraft.metrics.events import EventLog
from epochkraft.metrics.registry import controller_registry
from epochkraft.protocol.errors import ErrorCode


def read_events(root: Path) -> list[dict]:
    return [
        json.loads(line) for path in sorted(root.rglob("*.jsonl")) for line in path.read_text().splitlines()
    ]


def test_event_round_trip_matches_the_schema(tmp_path):
    log = EventLog(tmp_path, "broker-7")
    log.emit("broker_started", broker=7, epoch=42, incarnation="abc")
    log.emit(
        "isr_change_committed",
        topic="t",
        partition=0,
        isr=[1, 2],
        previous_isr=[1],
        partition_epoch=3,
        offset=9,
    )
    log.emit("produce_latency", count=10, p50_ms=1.5, p99_ms=9.0, p999_ms=9.0, max_ms=9.5, interval_s=2.0)
    log.close()
    events = read_events(tmp_path)
    assert [e["event"] for e in events] == ["broker_started", "isr_change_committed", "produce_latency"]
    assert all(validate_event(e) == [] for e in events), [validate_event(e) for e in events]
    assert events[1]["isr"] == [1, 2] and events[0]["node"] == "broker-7"
    paths = list(tmp_path.rglob("*.jsonl"))
    assert paths[0].parent.name == "node=broker-7" and paths[0].parent.parent.name.startswith("dt=")
    assert validate_event({**events[0], "bogus": 1}) == ["undeclared field bogus"]


def test_the_typed_event_declares_the_schemas_fields_with_their_types():
    hints = typing.get_type_hints(Event)
    declared = {name: types for name, _, types in COMMON + FIELDS}
    assert set(hints) == set(declared)
    for name, hint in hints.items():
        python_type = typing.get_origin(hint) or hint  # list[int] -> list
        accepted = (int, float) if python_type is float else (python_type,)  # a float field takes an int
        assert accepted == declared[name], name
    assert Event.__required_keys__ == {name for name, _, _ in COMMON}


def test_a_metrics_snapshot_round_trips_and_matches_the_schema(tmp_path):
    log = EventLog(tmp_path, "controller-1")
    log.emit_metrics("controller_snapshot", {"OfflinePartitionsCount": 0, "ActiveBrokerCount": 3.0})
    log.close()
    [event] = read_events(tmp_path)
    assert validate_event(event) == []
    assert (event["event"], event["OfflinePartitionsCount"], event["ActiveBrokerCount"]) == (
        "controller_snapshot",
        0,
        3.0,
    )


class _State:
    def __init__(self, state):
        self.value = state

    def state(self):
        return self.value


def test_the_controllers_gauges_are_read_from_its_state():
    registry = controller_registry(_State({"metadata_offset": 12, "ActiveBrokerCount": 3}))
    assert registry.get_sample_value("kafka_ActiveBrokerCount") == 3.0
    assert registry.get_sample_value("kafka_FencedBrokerCount") == 0.0  # absent: 0
    assert registry.get_sample_value("kafka_MetadataLogEndOffset") == 12.0


def test_a_gauge_that_is_not_a_number_is_refused():
    registry = controller_registry(_State({"metadata_offset": "12"}))
    with pytest.raises(TypeError, match="a gauge of str"):
        registry.get_sample_value("kafka_MetadataLogEndOffset")


def test_rotation_by_size(tmp_path):
    log = EventLog(tmp_path, "broker-1", max_file_bytes=2000)
    for i in range(200):
        log.emit("high_watermark_advanced", topic="t", partition=0, high_watermark=i)
    log.close()
    files = list(tmp_path.rglob("*.jsonl"))
    assert len(files) > 5
    assert all(f.stat().st_size <= 2000 for f in files)
    assert [e["high_watermark"] for e in read_events(tmp_path)] == list(range(200))


def test_disabled_event_log_is_a_no_op():
    log = EventLog(None, "x")
    log.emit("broker_started", broker=1)
    log.close()
    assert log.emitted == 0


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_metrics_endpoint_and_events_survive_sigterm(make_cluster):
    cluster = make_cluster(3, metrics=True, admin=True)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("watched", 1, 3) == ErrorCode.none
        for i in range(5):
            assert (await client.produce("watched", 0, [f"{i}".encode()]))[0] == ErrorCode.none
        p, _ = await client.partition_state("watched")
        leader_port = cluster.admin_port(p.leader_id)

        def scrape(port: int) -> dict[str, float]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                text = response.read().decode()
            return {
                s.name: s.value
                for f in text_string_to_metric_families(text)
                for s in f.samples
                if not s.labels
            }

        async def wait_value(name: str, predicate, timeout: float = 20.0) -> float:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                value = scrape(leader_port).get(name)
                if value is not None and predicate(value):
                    return value
                await asyncio.sleep(0.2)
            raise AssertionError(f"{name} never satisfied the condition")

        assert await wait_value("kafka_UnderReplicatedPartitions", lambda v: v == 0) == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{leader_port}/healthz", timeout=5) as response:
            assert json.loads(response.read()) == {"status": "ok"}
        with urllib.request.urlopen(f"http://127.0.0.1:{leader_port}/v1/state", timeout=5) as response:
            state = json.loads(response.read())
        assert state["state"] == "RUNNING" and any(x["topic"] == "watched" for x in state["partitions"])

        follower = next(b for b in p.replica_nodes if b != p.leader_id)
        cluster.node(follower).kill()
        assert await wait_value("kafka_UnderReplicatedPartitions", lambda v: v >= 1) >= 1
        assert await wait_value("kafka_IsrShrinksPerSec_total", lambda v: v >= 1) >= 1
        cluster.node(follower).start()
        assert await wait_value("kafka_UnderReplicatedPartitions", lambda v: v == 0) == 0
        controller_port = cluster.admin_port(0)
        with urllib.request.urlopen(f"http://127.0.0.1:{controller_port}/metrics", timeout=5) as response:
            assert "kafka_ActiveBrokerCount" in response.read().decode()
    finally:
        await client.close()
    cluster.stop()  # SIGTERM everywhere: queued events must reach the files
    events = read_events(cluster.metrics_dir)
    names = {e["event"] for e in events}
    assert {
        "broker_registered",
        "broker_started",
        "isr_change_committed",
        "broker_fenced",
        "metrics_snapshot",
        "partition_snapshot",
        "produce_latency",
        "isr_change_requested",
    } <= names, names
    assert all(validate_event(e) == [] for e in events), next(
        validate_event(e) for e in events if validate_event(e)
    )
