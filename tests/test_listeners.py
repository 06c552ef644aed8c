"""Named listeners (listeners, advertised.listeners, listener.security.protocol.map,
inter.broker.listener.name): the configuration checks of Kafka's KafkaConfig, and real brokers on loopback
that answer Metadata and FindCoordinator with the endpoints of the listener a client came in on while
followers replicate over the inter-broker listener (Kafka's MetadataCacheTest
getTopicMetadataPartitionListenerNotAvailableOnLeader, on real processes)."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from kio.schema.find_coordinator.v4 import request as fc
from kio.schema.metadata.v5 import request as md5
from kio.schema.metadata.v12 import request as md12

from epochkraft.config import ConfigError
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import MiniClient
from epochkraft.harness.processes import LocalProcess
from epochkraft.net.client import KafkaClient
from epochkraft.net.listeners import ListenerEndpoint, resolve_listeners
from epochkraft.protocol.errors import ErrorCode
from tests.conftest import write_fast_configs

TWO_LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
    "advertised.listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://localhost:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}
DEFAULT_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


def resolve(listeners="", advertised="", protocol_map=DEFAULT_MAP, inter="PLAINTEXT", listen=None):
    return resolve_listeners(listen, listeners, advertised, protocol_map, inter)


def test_listen_flag_is_the_one_plaintext_listener():
    result = resolve(listen=("127.0.0.1", 0))
    assert result.bind == result.advertised == (ListenerEndpoint("PLAINTEXT", "127.0.0.1", 0),)
    assert result.inter_broker == "PLAINTEXT"
    assert result.registered({"PLAINTEXT": 4242}) == (ListenerEndpoint("PLAINTEXT", "127.0.0.1", 4242),)


def test_named_listeners_register_the_advertised_endpoints_with_bound_ports():
    result = resolve(
        "INTERNAL://:9092,EXTERNAL://:19092",
        "INTERNAL://broker-1:9092,external://127.0.0.1:0",
        "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "INTERNAL",
    )
    assert [e.host for e in result.bind] == ["", ""]
    assert result.registered({"INTERNAL": 9092, "EXTERNAL": 19092}) == (
        ListenerEndpoint("INTERNAL", "broker-1", 9092),
        ListenerEndpoint("EXTERNAL", "127.0.0.1", 19092),
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"listen": ("127.0.0.1", 1), "listeners": "PLAINTEXT://127.0.0.1:2"}, "not both"),
        ({}, "no listener"),
        ({"listeners": "PLAINTEXT://127.0.0.1:1,plaintext://127.0.0.1:2"}, "more than once"),
        ({"listeners": "PLAINTEXT:/127.0.0.1:1"}, "NAME://HOST:PORT"),
        ({"listeners": "PLAINTEXT://127.0.0.1:70000"}, "out of range"),
        ({"listeners": "INTERNAL://127.0.0.1:1", "inter": "INTERNAL"}, "no security protocol"),
        ({"listeners": "SASL_SSL://127.0.0.1:1", "inter": "SASL_SSL"}, "must be PLAINTEXT or SSL"),
        ({"listeners": "PLAINTEXT://:1", "advertised": "OTHER://h:1"}, "not in listeners"),
        ({"listeners": "PLAINTEXT://0.0.0.0:1"}, "0.0.0.0"),
        ({"listeners": "PLAINTEXT://127.0.0.1:1", "inter": "INTERNAL"}, "inter.broker.listener.name"),
        ({"listeners": "PLAINTEXT://127.0.0.1:1", "protocol_map": "PLAINTEXT:TLS"}, "NAME:PROTOCOL"),
    ],
)
def test_bad_listener_configuration_is_refused_with_a_reason(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        resolve(**kwargs)


def overrides(settings: dict[str, str]) -> list[str]:
    return [arg for key, value in settings.items() for arg in ("--override", f"{key}={value}")]


def start_broker(tmp_path, controller: LocalProcess, node_id: int, args: list[str]) -> LocalProcess:
    broker_cfg, _ = write_fast_configs(tmp_path / "config", "offsets.topic.replication.factor=2\n")
    proc = LocalProcess(
        f"broker-{node_id}",
        [
            "broker",
            "--node-id",
            str(node_id),
            "--controller",
            f"127.0.0.1:{controller.port}",
            "--data-dir",
            str(tmp_path / f"broker-{node_id}"),
            "--config",
            str(broker_cfg),
            *args,
        ],
        tmp_path / "logs" / f"broker-{node_id}.log",
        tmp_path / f"broker-{node_id}",
    )
    proc.start(60)
    return proc


def advertised(proc: LocalProcess) -> dict[str, tuple[str, int]]:
    """Listener name -> (host, port) from the broker's ready line."""
    line = re.search(r"broker ready .*", proc.log_text())
    assert line is not None
    return {
        name: (host, int(port))
        for name, host, port in re.findall(r"([A-Z]+)://([\w.]+):(\d+)", line.group(0).split("listeners=")[1])
    }


def brokers_seen(response) -> dict[int, tuple[str, int]]:
    return {b.node_id: (b.host, b.port) for b in response.brokers}


async def metadata(address: tuple[str, int], request) -> object:
    client = KafkaClient(*address, request_timeout_ms=15_000)
    try:
        return await client.send(request)
    finally:
        await client.close()


async def create_topic(bootstrap: str, name: str, **kwargs) -> ErrorCode:
    client = MiniClient(bootstrap)
    try:
        return await client.create_topic(name, **kwargs)
    finally:
        await client.close()


def all_topics(module):
    if module is md5:
        return md5.MetadataRequest(topics=None, allow_auto_topic_creation=False)
    return module.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


@pytest.mark.slow
@pytest.mark.clients
@pytest.mark.timeout(240)
def test_clients_get_the_endpoints_of_the_listener_they_came_in_on(tmp_path):
    from confluent_kafka import Consumer, Producer

    _, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(data_dir=tmp_path / "cluster", brokers=0, controller_config=controller_cfg)
    procs: list[LocalProcess] = []
    try:
        cluster.start_controller()
        assert cluster.controller is not None
        for node_id in (1, 2):
            procs.append(start_broker(tmp_path, cluster.controller, node_id, overrides(TWO_LISTENERS)))
        ends = {p.name: advertised(p) for p in procs}
        external = {n: ends[f"broker-{n}"]["EXTERNAL"] for n in (1, 2)}
        internal = {n: ends[f"broker-{n}"]["INTERNAL"] for n in (1, 2)}
        assert all(host == "localhost" for host, _ in external.values())
        assert set(external.values()).isdisjoint(internal.values())

        seen_outside = asyncio.run(metadata(external[1], all_topics(md12)))
        seen_inside = asyncio.run(metadata(internal[1], all_topics(md12)))
        assert brokers_seen(seen_outside) == external
        assert brokers_seen(seen_inside) == internal

        # acks=all through the EXTERNAL listener: the follower replicates over INTERNAL.
        inside = ",".join(f"{h}:{p}" for h, p in internal.values())
        error = asyncio.run(
            create_topic(inside, "two", partitions=1, rf=2, configs={"min.insync.replicas": "2"})
        )
        assert error == ErrorCode.none
        bootstrap = f"localhost:{external[1][1]}"
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        acked: list[int] = []
        for i in range(200):
            producer.produce(
                "two", str(i).encode(), on_delivery=lambda e, m: acked.append(0) if e is None else 0
            )
        producer.flush(60)
        del producer
        assert len(acked) == 200

        # A consumer group through EXTERNAL: FindCoordinator answers with an EXTERNAL endpoint.
        found = asyncio.run(
            metadata(external[2], fc.FindCoordinatorRequest(key_type=0, coordinator_keys=("g",)))
        )
        deadline = time.monotonic() + 60
        while found.coordinators[0].error_code != ErrorCode.none and time.monotonic() < deadline:
            time.sleep(0.5)
            found = asyncio.run(
                metadata(external[2], fc.FindCoordinatorRequest(key_type=0, coordinator_keys=("g",)))
            )
        coordinator = found.coordinators[0]
        assert coordinator.error_code == ErrorCode.none
        assert (coordinator.host, coordinator.port) == external[coordinator.node_id]
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["two"])
        values = set()
        deadline = time.monotonic() + 90
        while len(values) < 200 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.add(int(message.value()))
        consumer.close()
        assert values == set(range(200))

        # A broker with only the one-listener form: left out of EXTERNAL answers, and its partition's
        # leader is reported missing there (LISTENER_NOT_FOUND from Metadata v6, LEADER_NOT_AVAILABLE before).
        procs.append(start_broker(tmp_path, cluster.controller, 3, ["--listen", "127.0.0.1:0"]))
        error = asyncio.run(create_topic(f"127.0.0.1:{procs[-1].port}", "only3", assignment=[[3]]))
        assert error == ErrorCode.none
        outside = asyncio.run(metadata(external[1], all_topics(md12)))
        partition = next(t for t in outside.topics if t.name == "only3").partitions[0]
        assert brokers_seen(outside) == external
        assert partition.error_code == ErrorCode.listener_not_found and partition.leader_id == -1
        old = asyncio.run(metadata(external[1], all_topics(md5)))
        partition = next(t for t in old.topics if t.name == "only3").partitions[0]
        assert partition.error_code == ErrorCode.leader_not_available
        plain = asyncio.run(metadata(("127.0.0.1", procs[-1].port), all_topics(md12)))
        assert brokers_seen(plain) == {3: ("127.0.0.1", procs[-1].port)}
        partition = next(t for t in plain.topics if t.name == "only3").partitions[0]
        assert partition.error_code == ErrorCode.none and partition.leader_id == 3
    finally:
        for proc in procs:
            proc.kill()
        cluster.kill_all()
