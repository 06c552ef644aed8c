"""A dynamic quorum (KIP-853) on real processes, driven with Kafka's own ``kafka-metadata-quorum``: three
controllers formatted with --initial-controllers; one loses its disk and comes back with a new directory id
as an observer (it fetches, never votes); ``remove-controller`` takes its old key out of the voter set and
``add-controller`` (run with the new controller's config, as an operator runs it) puts the new one in; then
the leader is killed and the quorum that elects a new one (the re-added voter needed for its majority) has
lost nothing committed."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from epochkraft.controller.storage import kafka_uuid, read_meta_properties
from epochkraft.harness.cluster import LocalCluster
from tests.test_kafka_tools import METADATA_QUORUM, quorum_status, run_tool, run_until, tools  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.peers, pytest.mark.timeout(240)]
TOPICS = [f"before-disk-loss-{i}" for i in range(3)]


def replication_rows(out: str) -> dict[tuple[str, str], str]:
    """(node id, directory id) -> status, from describe --replication."""
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return {(row[0], row[1]): row[-1] for row in rows}


def controller_config(cluster: LocalCluster, voter: int, path: Path) -> Path:
    """The new controller's config as ``add-controller --command-config`` reads it: its id, its
    controller listener and the log dir whose meta.properties holds its directory id."""
    path.write_text(
        "process.roles=controller\n"
        f"node.id={voter}\n"
        "controller.listener.names=CONTROLLER\n"
        f"listeners=CONTROLLER://{cluster.voter_address(voter)}\n"
        f"log.dirs={cluster.voters[voter].data_dir}\n"
        f"controller.quorum.bootstrap.servers={cluster.controller_addresses}\n"
    )
    return path


def wait_active(cluster: LocalCluster, not_this: int | None, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = cluster.active_voter()
        if active is not None and active != not_this:
            return active
        time.sleep(0.2)
    raise AssertionError(f"no active controller but {not_this} within {timeout} s")


def test_replace_a_controllers_disk_with_kafka_metadata_quorum(tools: Path, tmp_path: Path) -> None:  # noqa: F811
    cluster = LocalCluster(data_dir=tmp_path / "quorum", brokers=1, controllers=3)
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
            future.result(30)
        leader = wait_active(cluster, None)
        victim = next(v for v in sorted(cluster.voters) if v != leader)
        old = cluster.directory_id(victim)
        controllers = cluster.controller_addresses

        cluster.voters[victim].restart(wipe=True)  # formatted again: no initial controllers
        meta = read_meta_properties(cluster.voters[victim].data_dir)
        assert meta is not None
        new = kafka_uuid(meta.directory_id)
        assert new != old
        out = run_until(
            tools, METADATA_QUORUM, "--bootstrap-controller", controllers, "describe", "--replication",
            ready=lambda out: replication_rows(out).get((str(victim), new)) == "Observer",
        )  # fmt: skip
        rows = replication_rows(out)
        assert rows[(str(victim), new)] == "Observer", out  # the new disk fetches, as an observer
        assert rows[(str(victim), old)] in ("Follower", "Leader"), out  # the old key is still a voter

        run_tool(
            tools, METADATA_QUORUM, "--bootstrap-controller", controllers,
            "remove-controller", "--controller-id", str(victim), "--controller-directory-id", old,
        )  # fmt: skip
        config = controller_config(cluster, victim, tmp_path / "new-controller.properties")
        added = run_tool(
            tools, METADATA_QUORUM, "--command-config", str(config), "--bootstrap-controller", controllers,
            "add-controller",
        )  # fmt: skip
        assert f"Added controller {victim} with directory id {new}" in added, added
        status = quorum_status(
            run_tool(tools, METADATA_QUORUM, "--bootstrap-controller", controllers, "describe", "--status")
        )
        voters = re.findall(r'"id": (\d+), "directoryId": "([\w-]+)"', status["CurrentVoters"])
        assert (str(victim), new) in voters and (str(victim), old) not in voters, status

        cluster.voters[leader].kill()  # the new leader needs the re-added voter for its majority
        successor = wait_active(cluster, leader)
        assert successor != leader
        state = cluster.voter_state(successor)
        assert state is not None and state["voters"] == sorted(cluster.voters), state
        # the new active controller's own state holds every topic committed before (not only the broker's)
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.admin_port(successor)}/v1/state") as answer:
            assert json.loads(answer.read())["GlobalTopicCount"] == len(TOPICS)
        listed = admin.list_topics(timeout=30).topics
        assert set(TOPICS) <= set(listed), sorted(listed)
    finally:
        cluster.stop()
        cluster.kill_all()
