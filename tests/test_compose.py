"""docker-compose.yml checked without a Docker engine: structure, volumes, health checks, loopback-only
ports, and every daemon service's command run locally in config-check mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DAEMONS = ["controller", "broker-1", "broker-2", "broker-3"]


def test_services_volumes_and_health_checks():
    services = COMPOSE["services"]
    assert set(services) == {*DAEMONS, "notebook"}
    assert {"controller-data", "broker-1-data", "broker-2-data", "broker-3-data", "metrics"} <= set(
        COMPOSE["volumes"]
    )
    for name, service in services.items():
        assert "healthcheck" in service, name
        assert any(v.startswith("metrics:") for v in service["volumes"]), name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    for broker in DAEMONS[1:]:
        assert services[broker]["depends_on"]["controller"]["condition"] == "service_healthy"
        assert any(
            v.endswith(":/data") and v.startswith(f"{broker}-data") for v in services[broker]["volumes"]
        )
    assert services["notebook"]["environment"]["EPOCHKRAFT_METRICS_DIR"] == "/metrics"
    assert (ROOT / "Dockerfile").exists() and "ENTRYPOINT" in (ROOT / "Dockerfile").read_text()


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
