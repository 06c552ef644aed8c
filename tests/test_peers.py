"""The reference peers themselves: a real Apache Kafka KRaft cluster (controller and brokers as separate
JVMs, storage formatted by Kafka's storage tool) and franz-go's kfake, started, seen and stopped."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from kio.schema.metadata.v12 import request as md

from epochkraft.net.client import KafkaClient
from epochkraft.peers import cli
from epochkraft.peers.fetch import PeerUnavailable, franz_go_version, kfake_binary
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.peers.kfake import KfakePeer
from epochkraft.peers.kgo_tests import GoTestResults

pytestmark = [pytest.mark.slow, pytest.mark.peers, pytest.mark.timeout(300)]

METADATA = md.MetadataRequest(
    topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


async def _metadata(address: str) -> md.MetadataRequest:
    host, _, port = address.rpartition(":")
    async with KafkaClient(host, int(port)) as client:
        return await client.send(METADATA)


def test_kafka_peer_is_a_kraft_cluster_of_three_brokers(kafka_peer: KafkaPeer) -> None:
    response = asyncio.run(_metadata(kafka_peer.bootstrap.split(",")[0]))
    assert sorted(b.node_id for b in response.brokers) == [1, 2, 3]
    assert response.cluster_id == kafka_peer.cluster_id
    assert {f"127.0.0.1:{b.port}" for b in response.brokers} == set(kafka_peer.bootstrap.split(","))

    async def controller_apis() -> set[int]:
        host, _, port = kafka_peer.controller_address.rpartition(":")
        async with KafkaClient(host, int(port)) as client:
            return {a.api_key for a in (await client.api_versions()).api_keys}

    # The controller listener is PLAINTEXT and serves the broker lifecycle APIs.
    assert {56, 62, 63, 64} <= asyncio.run(controller_apis())


def test_kfake_peer_up_status_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        kfake_binary()
    except PeerUnavailable as exc:
        pytest.skip(f"kfake unavailable: {exc}")
    assert cli.main(["kfake", "up", "--dir", str(tmp_path)]) == 0
    peer = KfakePeer.load(tmp_path / "kfake")
    try:
        assert cli.main(["kfake", "status", "--dir", str(tmp_path)]) == 0
        response = asyncio.run(_metadata(peer.bootstrap.split(",")[0]))
        assert len(response.brokers) == 3
        assert cli.main(["kfake", "up", "--dir", str(tmp_path)]) == 1  # one at a time
    finally:
        assert cli.main(["kfake", "down", "--dir", str(tmp_path)]) == 0
    assert not peer.alive
    assert cli.main(["kfake", "status", "--dir", str(tmp_path)]) == 1
    assert "bootstrap servers" in capsys.readouterr().out


def test_franz_go_kgo_tests_pin_and_outcomes() -> None:
    """scripts/franz_kgo_tests runs franz-go at the release kfake is built with, and reads go test's JSON
    events into one outcome per top-level test, a test cut off by the timeout counting as unfinished."""
    assert re.fullmatch(r"v1\.\d+\.\d+", franz_go_version())
    results = GoTestResults()
    events = [
        {"Action": "run", "Test": "TestA"},
        {"Action": "pass", "Test": "TestA"},
        {"Action": "run", "Test": "TestB"},
        {"Action": "run", "Test": "TestB/sub"},
        {"Action": "fail", "Test": "TestB/sub"},
        {"Action": "output", "Test": "TestB", "Output": "    b_test.go:9: wrong answer\n"},
        {"Action": "fail", "Test": "TestB"},
        {"Action": "run", "Test": "TestC"},
        {"Action": "skip", "Test": "TestD"},
    ]
    for event in events:
        results.feed(json.dumps(event) + "\n")
    results.feed("FAIL github.com/twmb/franz-go/pkg/kgo 1.0s\n")
    assert results.outcomes == {"TestA": "pass", "TestB": "fail", "TestC": "running", "TestD": "skip"}
    assert results.failure_lines() == {"TestB": ["b_test.go:9: wrong answer"], "TestC": []}
