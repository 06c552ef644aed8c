"""Asking a running cluster this shell did not start: `epochkraft cluster status --bootstrap/--admin`,
and the admin port's readiness endpoint the compose health checks use (a controller of a Raft quorum is ready
while it leads or follows a leader)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from epochkraft.harness.ports import free_ports
from epochkraft.harness.processes import LocalProcess
from epochkraft.metrics.admin_http import AdminServer


def status(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "epochkraft.cli", "cluster", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_status_by_bootstrap_address_and_by_admin_ports(make_cluster):
    cluster = make_cluster(brokers=2, admin=True)
    by_bootstrap = status("--bootstrap", f"127.0.0.1:1,{cluster.bootstrap}")
    assert by_bootstrap.returncode == 0, by_bootstrap.stderr
    assert f"cluster {cluster.cluster_id}" in by_bootstrap.stdout
    for node_id, proc in cluster.nodes.items():
        assert f"{node_id:<8}127.0.0.1:{proc.port}" in by_bootstrap.stdout
    controller_admin = f"127.0.0.1:{cluster.admin_port(0)}"
    broker_admin = f"127.0.0.1:{cluster.admin_port(2)}"
    by_admin = status("--admin", f"{controller_admin},{broker_admin}")
    assert by_admin.returncode == 0, by_admin.stderr
    assert f"controller of cluster {cluster.cluster_id}" in by_admin.stdout
    broker_lines = [line.split() for line in by_admin.stdout.splitlines() if line[:1] in ("1", "2")]
    assert [(words[0], words[2]) for words in broker_lines] == [("1", "unfenced"), ("2", "unfenced")]
    assert f"admin {broker_admin}: broker 2 RUNNING" in by_admin.stdout
    assert "0 under-replicated, 0 without a leader" in by_admin.stdout


@pytest.mark.net
def test_status_says_when_nothing_answers():
    result = status("--bootstrap", "127.0.0.1:1", "--admin", "127.0.0.1:1")
    assert result.returncode == 1
    assert "no broker answered" in result.stdout and "no answer" in result.stdout


@pytest.mark.net
async def test_readyz_answers_503_until_ready_while_healthz_says_the_process_lives():
    ready = False
    admin = AdminServer("127.0.0.1", 0, CollectorRegistry(), lambda: {"state": "RECOVERY"}, lambda: ready)
    await admin.start()
    try:
        base = f"http://127.0.0.1:{admin.port}"

        def get(path: str) -> tuple[int, dict]:
            try:
                with urllib.request.urlopen(base + path, timeout=5) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        assert (await asyncio.to_thread(get, "/healthz"))[0] == 200
        assert await asyncio.to_thread(get, "/readyz") == (503, {"status": "not ready", "state": "RECOVERY"})
        ready = True
        assert (await asyncio.to_thread(get, "/readyz"))[0] == 200
    finally:
        await admin.stop()


def readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_for(condition, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_quorum_controller_is_ready_while_the_quorum_has_a_leader(tmp_path):
    listen = free_ports(4)
    admin = {3000: listen.pop(), 3001: listen.pop()}
    voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in zip(admin, listen, strict=True))
    daemons = {
        node: LocalProcess(
            f"controller-{node}",
            ["controller", "--listen", f"127.0.0.1:{port}", "--cluster-id", "ready-test", "--node-id",
             str(node), "--quorum-voters", voters, "--data-dir", str(tmp_path / str(node)),
             "--admin-port", str(admin[node])],
            tmp_path / f"{node}.log",
        )
        for node, port in zip(admin, listen, strict=True)
    }  # fmt: skip
    try:
        daemons[3000].start()
        # One voter of two has no majority: it asks for pre-votes again and again, and is never ready.
        wait_for(lambda: "role=prospective" in daemons[3000].log_text(), "3000 asks for pre-votes")
        assert readyz(admin[3000]) == 503
        daemons[3001].start()
        wait_for(lambda: readyz(admin[3000]) == readyz(admin[3001]) == 200, "both ready")
        by_admin = status("--admin", f"127.0.0.1:{admin[3001]}")
        assert "admin 127.0.0.1:" in by_admin.stdout and "controller of cluster ready-test" in by_admin.stdout
        assert "quorum: controller 3001 " in by_admin.stdout and "voters [3000, 3001]" in by_admin.stdout
        daemons[3001].signal("KILL")
        # The one left cannot lead alone: a leader resigns once no majority fetches, a follower stops following.
        wait_for(lambda: readyz(admin[3000]) == 503, "3000 not ready without a majority")
    finally:
        for daemon in daemons.values():
            daemon.kill()
