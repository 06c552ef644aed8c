"""Shared fixtures: real clusters of daemon processes on loopback, with fast timings for tests."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from epochkraft.harness.cluster import LocalCluster

# Property tests check behaviour, not speed: no per-example deadline, which a loaded machine would miss.
settings.register_profile("epochkraft", deadline=None)
settings.load_profile("epochkraft")

# The unit tier (`scripts/test-fast`, `pytest -m unit`): every test without one of these markers. It opens no
# network socket and starts no process, which the guard below enforces, so it runs in about a minute.
NOT_UNIT = ("slow", "clients", "peers", "spark", "net", "sweep")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(name) for name in NOT_UNIT):
            item.add_marker(pytest.mark.unit)


class NotInTheUnitTier(RuntimeError):
    """A unit-tier test reached for the network or a process: mark it `net` or `slow` instead."""


@pytest.fixture(autouse=True)
def _unit_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("unit") is None or os.environ.get("EPOCHKRAFT_UNIT_GUARD") == "off":
        return
    inet = (socket.AF_INET, socket.AF_INET6)

    def refuse(what: str):
        def refused(*args: object, **kwargs: object) -> None:
            raise NotInTheUnitTier(f"{request.node.nodeid}: {what} in a unit-tier test")

        return refused

    for method in ("bind", "connect", "connect_ex"):
        original = getattr(socket.socket, method)

        def guarded(self: socket.socket, *args: object, _original=original, _method=method) -> object:
            if self.family in inet:
                refuse(f"socket.{_method}")()
            return _original(self, *args)

        monkeypatch.setattr(socket.socket, method, guarded)
    for method in ("create_server", "create_connection"):
        monkeypatch.setattr(asyncio.BaseEventLoop, method, refuse(f"loop.{method}"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("a process"))


FAST_BROKER = """
broker.heartbeat.interval.ms=200
replica.lag.time.max.ms=1500
replica.fetch.wait.max.ms=200
replica.high.watermark.checkpoint.interval.ms=500
group.initial.rebalance.delay.ms=0
offsets.topic.num.partitions=3
"""
FAST_CONTROLLER = """
broker.session.timeout.ms=2000
"""


def fast_properties(text: str) -> dict[str, str]:
    """FAST_BROKER or FAST_CONTROLLER as a dict, for a Kafka peer timed as our test clusters."""
    return dict(line.split("=", 1) for line in text.split())


def write_fast_configs(
    directory: Path, broker_extra: str = "", controller_extra: str = ""
) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    broker = directory / "broker.properties"
    broker.write_text(FAST_BROKER + broker_extra)
    controller = directory / "controller.properties"
    controller.write_text(FAST_CONTROLLER + controller_extra)
    return broker, controller


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator:
    """make_cluster(brokers=3, broker_extra="", controller_extra="", metrics=False) -> a started LocalCluster."""
    started: list[LocalCluster] = []

    def make(
        brokers: int = 3,
        broker_extra: str = "",
        controller_extra: str = "",
        metrics: bool = False,
        name: str = "cluster",
        admin: bool = False,
    ) -> LocalCluster:
        broker_cfg, controller_cfg = write_fast_configs(
            tmp_path / f"{name}-config", broker_extra, controller_extra
        )
        cluster = LocalCluster(
            data_dir=tmp_path / name,
            brokers=brokers,
            broker_config=broker_cfg,
            controller_config=controller_cfg,
            metrics_dir=tmp_path / f"{name}-metrics" if metrics else None,
            admin_ports=admin,
        )
        started.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in started:
        cluster.kill_all()


@pytest.fixture(scope="session")
def kafka_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A real Apache Kafka cluster (one controller, three brokers) for the whole session, started once.

    ``EPOCHKRAFT_KAFKA_PEER=<run dir>`` reuses one that ``scripts/peers kafka up --dir ...`` started.
    Skips, with the reason, where Kafka's jars cannot be fetched (no Maven, Java or network)."""
    from epochkraft.peers.fetch import PeerUnavailable, kafka_libs
    from epochkraft.peers.kafka import KafkaPeer

    reuse = os.environ.get("EPOCHKRAFT_KAFKA_PEER")
    if reuse:
        yield KafkaPeer.load(Path(reuse) / "kafka" if (Path(reuse) / "kafka").is_dir() else Path(reuse))
        return
    try:
        kafka_libs()
    except PeerUnavailable as exc:
        pytest.skip(f"Apache Kafka peer unavailable: {exc}")
    peer = KafkaPeer(run_dir=tmp_path_factory.mktemp("kafka-peer"), brokers=3, heap_mb=384)
    peer.start(timeout=240)
    yield peer
    peer.stop(timeout=20)


@pytest.fixture(scope="session")
def kfake_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """franz-go's kfake (three brokers in one process) for the whole session, started once.

    ``EPOCHKRAFT_KFAKE_PEER=<run dir>`` reuses one that ``scripts/peers kfake up --dir ...`` started.
    Skips, with the reason, where kfake cannot be built (no Go or network)."""
    from epochkraft.peers.fetch import PeerUnavailable, kfake_binary
    from epochkraft.peers.kfake import KfakePeer

    reuse = os.environ.get("EPOCHKRAFT_KFAKE_PEER")
    if reuse:
        yield KfakePeer.load(Path(reuse) / "kfake" if (Path(reuse) / "kfake").is_dir() else Path(reuse))
        return
    try:
        kfake_binary()
    except PeerUnavailable as exc:
        pytest.skip(f"kfake peer unavailable: {exc}")
    peer = KfakePeer(run_dir=tmp_path_factory.mktemp("kfake-peer"), brokers=3)
    peer.start(timeout=60)
    yield peer
    peer.stop()


@pytest.fixture(scope="session")
def epochkraft_peer_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Our side of the comparisons with Kafka: a controller and three brokers (ids 1-3, as the Kafka
    peer's), started once per session and shared by the differential, tool and Java client tests."""
    root = tmp_path_factory.mktemp("epochkraft-peer")
    broker_cfg, controller_cfg = write_fast_configs(root / "config")
    cluster = LocalCluster(
        data_dir=root / "data", brokers=3, broker_config=broker_cfg, controller_config=controller_cfg
    )
    cluster.start()
    yield cluster
    cluster.kill_all()
