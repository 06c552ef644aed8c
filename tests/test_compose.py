"""docker-compose.yml and the Dockerfile checked without a Docker engine: structure, volumes, readiness
health checks, loopback-only ports below the ephemeral range, listeners the host can reach, the controller
quorum (three voters, node ids apart from the brokers', every broker given every controller), stop grace,
nothing pulled, no root, and every daemon service's command run locally in config-check mode.
scripts/compose-test runs the stack for real."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
CONTROLLERS = ["controller-1", "controller-2", "controller-3"]
BROKERS = ["broker-1", "broker-2", "broker-3"]
DAEMONS = CONTROLLERS + BROKERS
EPHEMERAL_PORTS = range(32768, 61000)  # Linux's ip_local_port_range: a host port there may be taken


def test_services_volumes_and_health_checks():
    services = COMPOSE["services"]
    assert set(services) == {*DAEMONS, "notebook"}
    assert {f"{daemon}-data" for daemon in DAEMONS} | {"metrics"} <= set(COMPOSE["volumes"])
    for name, service in services.items():
        assert "healthcheck" in service, name
        assert any(v.startswith("metrics:") for v in service["volumes"]), name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    for daemon in DAEMONS:
        assert f"{daemon}-data:/data" in services[daemon]["volumes"], daemon
    for name in [*BROKERS, "notebook"]:
        depends = services[name]["depends_on"]
        conditions = {c: depends[c]["condition"] for c in CONTROLLERS}
        assert conditions == dict.fromkeys(CONTROLLERS, "service_healthy"), name
    assert services["notebook"]["environment"]["EPOCHKRAFT_METRICS_DIR"] == "/metrics"
    assert (ROOT / "Dockerfile").exists() and "ENTRYPOINT" in (ROOT / "Dockerfile").read_text()


def test_published_host_ports_are_distinct_and_below_the_ephemeral_range():
    published = [
        int(port.split(":")[1])
        for service in COMPOSE["services"].values()
        for port in service.get("ports", [])
    ]
    assert len(published) == len(set(published))
    # Broker 3's EXTERNAL and admin ports (39092, 39192) are in it, kept for the clients configured with
    # them; no other port may be.
    assert [p for p in published if p in EPHEMERAL_PORTS] == [39092, 39192]


def test_three_controllers_form_one_quorum_that_every_broker_follows():
    services = COMPOSE["services"]
    voters = {option(services[c]["command"], "quorum-voters") for c in CONTROLLERS}
    assert len(voters) == 1, "every controller is given the same voters"
    (text,) = voters
    endpoints = {int(node): address for node, address in (v.split("@") for v in text.split(","))}
    assert len(endpoints) == 3
    for name in CONTROLLERS:
        command = services[name]["command"]
        node = int(option(command, "node-id"))
        assert endpoints[node] == option(command, "listen") == f"{name}:9090"
        assert option(command, "data-dir") == "/data"
        assert option(command, "cluster-id") == "epochkraft-compose"
    broker_ids = {int(option(services[b]["command"], "node-id")) for b in BROKERS}
    assert not broker_ids & set(endpoints), "controller node ids differ from broker ids"
    for name in BROKERS:
        assert option(services[name]["command"], "controller").split(",") == list(endpoints.values())
    admin = {name: services[name]["ports"] for name in CONTROLLERS}
    assert admin["controller-1"] == ["127.0.0.1:9190:9190"], "the admin port docs/operations.md names"


def option(command: list[str], name: str) -> str:
    """The value of ``--override name=...`` or ``--name`` in a service's command."""
    for flag, value in itertools.pairwise(command):
        if flag == "--override" and value.startswith(f"{name}="):
            return value.split("=", 1)[1]
        if flag == f"--{name}":
            return value
    raise AssertionError(f"{name} not in {command}")


def test_nothing_is_pulled_and_daemons_stop_within_their_grace():
    from epochkraft.broker.settings import BrokerSettings
    from epochkraft.config import load_settings
    from epochkraft.server.broker_daemon import SHUTDOWN_STEPS_TIMEOUT_S

    shutdown_ms = (
        SHUTDOWN_STEPS_TIMEOUT_S * 1000
        + load_settings(BrokerSettings, ROOT / "config" / "broker.properties").controlled_shutdown_timeout_ms
    )
    for name, service in COMPOSE["services"].items():
        assert service.get("pull_policy") == "never", f"{name} would be pulled from a registry"
        image = service["image"]
        assert any(s.get("build") and s["image"] == image for s in COMPOSE["services"].values()), name
        grace = service.get("stop_grace_period", "10s")
        assert grace.endswith("s") and int(grace[:-1]) * 1000 > shutdown_ms, f"{name}: {grace}"
    images = {s["image"] for s in COMPOSE["services"].values()}
    assert len(images) == 2, "a slim daemon image and a notebook image"


def test_health_checks_ask_for_readiness_on_admin_ports_open_to_the_network():
    for name in DAEMONS:
        service = COMPOSE["services"][name]
        admin = option(service["command"], "admin-port")
        assert option(service["command"], "admin-host") == "0.0.0.0"
        assert f"http://127.0.0.1:{admin}/readyz" in " ".join(service["healthcheck"]["test"]), name


def test_brokers_advertise_the_service_name_inside_and_the_published_port_outside():
    for node in (1, 2, 3):
        service = COMPOSE["services"][f"broker-{node}"]
        command = service["command"]
        endpoint = re.compile(r"(\w+)://([\w.-]*):(\d+)")
        listeners = {name: port for name, _, port in endpoint.findall(option(command, "listeners"))}
        advertised = {
            name: (host, port)
            for name, host, port in endpoint.findall(option(command, "advertised.listeners"))
        }
        assert advertised["INTERNAL"] == (f"broker-{node}", listeners["INTERNAL"])
        host, port = advertised["EXTERNAL"]
        assert host == "127.0.0.1" and port == f"{node}9092"
        assert f"127.0.0.1:{port}:{listeners['EXTERNAL']}" in service["ports"]
        assert option(command, "inter.broker.listener.name") == "INTERNAL"


def test_images_run_as_a_user_and_compose_needs_v2():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=" in dockerfile and "FROM ${BASE_IMAGE}" in dockerfile
    assert dockerfile.count("USER epochkraft") == 2, "both images end as the non-root user"
    assert "EXPOSE" not in dockerfile
    assert "amd64" not in dockerfile
    assert dockerfile.index("pip install -c constraints.txt") < dockerfile.index("COPY epochkraft")
    assert "--allow-root" not in (ROOT / "docker-compose.yml").read_text()
    assert COMPOSE["name"] == "epochkraft"
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert "Compose v2" in operations and "scripts/compose-test" in operations


@pytest.mark.net
@pytest.mark.parametrize("service", DAEMONS)
def test_service_command_passes_config_check(service, tmp_path):
    command = [
        arg.replace("/opt/epochkraft/config", str(ROOT / "config"))
        for arg in COMPOSE["services"][service]["command"]
    ]
    command = [
        arg.replace("/data", str(tmp_path / "data")).replace("/metrics", str(tmp_path / "metrics"))
        for arg in command
    ]
    result = subprocess.run(
        [sys.executable, "-m", "epochkraft.cli", *command, "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "configuration ok" in result.stdout


@pytest.mark.net
def test_config_check_rejects_garbage(tmp_path):
    bad = tmp_path / "broker.properties"
    bad.write_text("replica.lag.time.max.ms=-5\n")
    command = COMPOSE["services"]["broker-1"]["command"]
    command = [str(bad) if arg.endswith("broker.properties") else arg for arg in command]
    result = subprocess.run(
        [sys.executable, "-m", "epochkraft.cli", *command, "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "replica.lag.time.max.ms" in result.stderr
    unknown = tmp_path / "unknown.properties"
    unknown.write_text("no.such.setting=1\n")
    command = [str(unknown) if arg.endswith(str(bad)) else arg for arg in command]
    result = subprocess.run(
        [sys.executable, "-m", "epochkraft.cli", *command, "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "unknown property" in result.stderr
