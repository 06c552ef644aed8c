"""``epochkraft cluster up|status|kill|restart`` on loopback, as a user would run them."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "epochkraft.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_up_status_kill_restart_and_ctrl_c(tmp_path):
    base = random.randrange(10000, 32000, 1000)  # below the ephemeral range (32768-60999)
    data = tmp_path / "cluster"
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "epochkraft.cli",
            "cluster",
            "up",
            "--brokers",
            "3",
            "--base-port",
            str(base),
            "--data-dir",
            str(data),
            "--metrics-dir",
            str(tmp_path / "metrics"),
            "--config-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    (tmp_path / "broker.properties").write_text("broker.heartbeat.interval.ms=200\n")
    (tmp_path / "controller.properties").write_text("broker.session.timeout.ms=2000\n")
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            lines.append(line)
            if "every broker is RUNNING" in line or not line:
                break
        output = "".join(lines)
        assert "every broker is RUNNING" in output, output
        # Kafka's quick-start layout: broker 1 on the base port, the controller next.
        assert f"bootstrap servers: 127.0.0.1:{base},127.0.0.1:{base + 2},127.0.0.1:{base + 3}" in output
        assert f"controller:        127.0.0.1:{base + 1}" in output
        assert f"broker 1 admin:    http://127.0.0.1:{base + 100}/metrics" in output
        # `kcat -b localhost:9092 -L`: Metadata answered on the base port, naming every broker.
        metadata = AdminClient({"bootstrap.servers": f"localhost:{base}"}).list_topics(timeout=20)
        assert sorted(b.port for b in metadata.brokers.values()) == [base, base + 2, base + 3]

        status = cli("cluster", "status", "--data-dir", str(data))
        assert status.returncode == 0 and status.stdout.count("RUNNING") == 3, status.stdout

        assert cli("cluster", "kill", "2", "--signal", "KILL", "--data-dir", str(data)).returncode == 0
        time.sleep(0.5)
        status = cli("cluster", "status", "--data-dir", str(data))
        assert "2" in status.stdout and "False" in status.stdout

        restart = cli("cluster", "restart", "2", "--wipe", "--data-dir", str(data))
        assert restart.returncode == 0 and "empty data dir" in restart.stdout, restart.stderr
        status = cli("cluster", "status", "--data-dir", str(data))
        assert status.stdout.count("RUNNING") == 3, status.stdout

        assert cli("cluster", "kill", "3", "--signal", "STOP", "--data-dir", str(data)).returncode == 0
        assert cli("cluster", "kill", "3", "--signal", "CONT", "--data-dir", str(data)).returncode == 0
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
    assert up.returncode == 0
    status = cli("cluster", "status", "--data-dir", str(data))
    assert "True" not in status.stdout, "every node, the restarted one included, was stopped"


def test_up_with_a_controller_quorum_status_kill_active_and_restart_on_an_empty_disk(tmp_path):
    base = random.randrange(10000, 32000, 1000)  # below the ephemeral range (32768-60999)
    data = tmp_path / "cluster"
    (tmp_path / "broker.properties").write_text("broker.heartbeat.interval.ms=200\n")
    (tmp_path / "controller.properties").write_text("broker.session.timeout.ms=2000\n")
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "epochkraft.cli",
            "cluster",
            "up",
            "--controllers",
            "3",
            "--brokers",
            "2",
            "--base-port",
            str(base),
            "--data-dir",
            str(data),
            "--config-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def quorum_line() -> str:
        status = cli("cluster", "status", "--data-dir", str(data))
        assert status.returncode == 0, status.stderr
        return status.stdout

    def wait_status(ok, what: str) -> str:
        """`cluster status` until ``ok`` holds for its last line (the quorum summary)."""
        deadline = time.monotonic() + 20
        while True:
            out = quorum_line()
            if ok(out.splitlines()[-1]):
                return out
            assert time.monotonic() < deadline, f"{what}:\n{out}"
            time.sleep(0.3)

    def healed(summary: str) -> bool:
        one_hw = len(summary.split("high watermarks [")[1].split(",")) == 1
        return "3/3 voters answering" in summary and "active controller none" not in summary and one_hw

    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            lines.append(line)
            if "every broker is RUNNING" in line or not line:
                break
        output = "".join(lines)
        assert "every broker is RUNNING" in output, output
        # The voters below broker 1's port, the brokers where they always are.
        for i, voter in enumerate((3000, 3001, 3002)):
            assert f"controller {voter}:   127.0.0.1:{base - 1 - i}" in output, output
        assert f"bootstrap servers: 127.0.0.1:{base},127.0.0.1:{base + 2}" in output

        status = wait_status(healed, "a healed quorum")
        assert status.count(" leader, active, epoch ") == 1 and status.count(" follower, epoch ") == 2, status
        assert status.count("RUNNING") == 2, status
        active = next(line.split()[0] for line in status.splitlines() if " leader, active" in line)
        remote = cli("cluster", "status", "--admin", f"127.0.0.1:{base + 99}")  # voter 3000's admin port
        assert "quorum: controller 3000 " in remote.stdout and "voters [3000, 3001, 3002]" in remote.stdout

        kill = cli("cluster", "kill", "controller-active", "--data-dir", str(data))
        assert kill.returncode == 0 and f"to {active} (controller-active)" in kill.stdout, kill.stdout
        status = wait_status(
            lambda summary: (
                "2/3 voters answering" in summary
                and f"active controller {active[-4:]}" not in summary
                and "active controller none" not in summary
            ),
            "another voter active, the killed one down",
        )
        assert f"{active}" in status and "down" in status

        restart = cli("cluster", "restart", active, "--wipe", "--data-dir", str(data))
        assert restart.returncode == 0 and "empty data dir" in restart.stdout, restart.stdout + restart.stderr
        state = json.loads((data / "cluster.json").read_text())
        # formatted with no initial controllers: a new directory id, an observer until the CLI replaced its
        # old key in the voter set with the new one (RemoveRaftVoter, then AddRaftVoter)
        assert "--initial-controllers" not in state["nodes"][active]["args"]
        assert "is a voter again with directory id" in restart.stdout, restart.stdout
        # The wiped voter fetched the whole log again: every high watermark equal.
        status = wait_status(healed, "the wiped voter caught up")
        assert next(line for line in status.splitlines() if line.startswith(active)).split()[4] == "follower,"

        unknown = cli("cluster", "kill", "controller-9", "--data-dir", str(data))
        assert unknown.returncode != 0 and "no controller 9" in unknown.stderr
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
    assert up.returncode == 0
    status = cli("cluster", "status", "--data-dir", str(data))
    assert "True" not in status.stdout, "every node, the restarted controller included, was stopped"
