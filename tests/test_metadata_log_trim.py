"""The metadata log below a snapshot goes (KIP-630), and whoever is behind the log's start catches up from
the snapshot with FetchSnapshot (59): a broker (which keeps no metadata on disk) after a restart, and a
voter of a controller quorum that was down while the others moved on. Real processes, snapshots every
few KB of records so that a handful of topics moves the log's start."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from epochkraft.controller.controller import Controller
from epochkraft.harness.cluster import LocalCluster
from epochkraft.metadata.image import MetadataImage, image_after
from epochkraft.metadata.segment import find_segment
from epochkraft.metadata.snapshot import image_records, removals_for
from epochkraft.protocol.metadata_records import (
    ConfigRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from tests.controller_context import ControllerContext
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

# a snapshot every 1.5 KB of records: a CreateTopics request is one batch, five topics of three partitions
# about 700 bytes of it, so the topics the tests create pass it several times
SMALL_SNAPSHOTS = "metadata.log.max.record.bytes.between.snapshots=1500\nbroker.session.timeout.ms=6000\n"


def create_topics(bootstrap: str, prefix: str, count: int) -> None:
    """``count`` topics, five a request: each request is one metadata batch, and a snapshot is started
    by the batch that passes the threshold."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for first in range(0, count, 5):
        names = [f"{prefix}-{i}" for i in range(first, min(first + 5, count))]
        for future in admin.create_topics([NewTopic(name, 3, 3) for name in names]).values():
            future.result(30)


def topics_seen(bootstrap: str) -> set[str]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name for name, t in metadata.topics.items() if t.error is None and not name.startswith("__")}


def log_start(data_dir: Path) -> int:
    return find_segment(data_dir / "__cluster_metadata-0")[1]


def test_a_restarted_broker_and_controller_load_the_snapshot_the_log_was_cut_at(tmp_path: Path) -> None:
    config = tmp_path / "controller.properties"
    config.write_text(SMALL_SNAPSHOTS)
    cluster = LocalCluster(data_dir=tmp_path / "cluster", brokers=3, controller_config=config)
    try:
        cluster.start()
        create_topics(cluster.bootstrap, "before", 20)
        controller = cluster.node("controller")
        assert controller.data_dir is not None
        wait_until(lambda: log_start(controller.data_dir) > 0, 30, "the log to be cut below a snapshot")
        broker = cluster.node(3)
        broker.kill()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.delete_topics(["before-0"])["before-0"].result(30)
        create_topics(cluster.bootstrap, "while-down", 5)
        broker.start()
        assert "metadata snapshot loaded" in broker.log_text()
        expected = {f"before-{i}" for i in range(1, 20)} | {f"while-down-{i}" for i in range(5)}
        wait_until(lambda: topics_seen(f"127.0.0.1:{broker.port}") == expected, 30, "broker 3's metadata")
        # the controller restarts from its newest snapshot and the log after it
        controller.stop()
        controller.start()
        assert "metadata snapshot loaded" in controller.log_text()
        create_topics(cluster.bootstrap, "after", 2)
        wait_until(
            lambda: topics_seen(cluster.bootstrap) == expected | {"after-0", "after-1"}, 30, "every topic"
        )
    finally:
        cluster.stop()
        cluster.kill_all()


def test_a_voter_behind_the_leaders_log_start_installs_its_snapshot(tmp_path: Path) -> None:
    config = tmp_path / "controller.properties"
    config.write_text(SMALL_SNAPSHOTS)
    cluster = LocalCluster(data_dir=tmp_path / "quorum", brokers=3, controllers=3, controller_config=config)
    try:
        cluster.start()
        active = wait_until(cluster.active_voter, 20, "an active controller")
        behind = next(v for v in cluster.voters if v != active)
        cluster.voters[behind].kill()
        end_when_killed = max(s["log_end_offset"] for s in cluster.quorum_states().values() if s)
        create_topics(cluster.bootstrap, "quorum", 20)
        leader_dir = cluster.voters[active].data_dir
        assert leader_dir is not None
        wait_until(
            lambda: log_start(leader_dir) > end_when_killed,
            30,
            "the leader's log to start past the voter's end",
        )
        cluster.voters[behind].start()
        wait_until(
            lambda: "metadata snapshot installed" in cluster.voters[behind].log_text(), 30, "the install"
        )

        def caught_up() -> bool:
            states = cluster.quorum_states()
            return (
                states[behind] is not None
                and states[behind]["high_watermark"] == states[active]["high_watermark"]
            )

        wait_until(caught_up, 30, "the voter to reach the leader's high watermark")
        expected = {f"quorum-{i}" for i in range(20)}
        wait_until(lambda: topics_seen(cluster.bootstrap) == expected, 30, "every topic")
    finally:
        cluster.stop()
        cluster.kill_all()


def test_removals_take_out_what_a_snapshot_no_longer_holds() -> None:
    """A broker that fell behind a log's start: what the snapshot lacks (a deleted topic, an unregistered
    broker, a removed config, a deleted client quota) is taken out before the snapshot's records are applied."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2)
    ctx.create_topic("kept", [[1, 2]])
    ctx.create_topic("gone", [[1, 2]], configs={"retention.ms": "1000"})
    stale = image_after(MetadataImage(), (record for _offset, record in ctx.controller.log.records()))
    controller: Controller = ctx.controller
    gone = controller.image.topic_ids["gone"]
    controller.delete_topics(ctx.now, _delete_request("gone"))
    records = image_records(controller.image, 20)
    removals = removals_for(stale, records)
    assert RemoveTopicRecord(topic_id=gone) in removals
    assert not [r for r in removals if isinstance(r, UnregisterBrokerRecord)]
    stale = image_after(stale, removals + records)
    assert set(stale.topic_ids) == {"kept"}
    assert not [r for r in records if isinstance(r, TopicRecord) and r.topic_id == gone]
    assert all(not isinstance(r, ConfigRecord) or r.resource_name != "gone" for r in records)
    assert stale.configs == controller.image.configs


def _delete_request(name: str):
    import datetime

    from kio.schema.delete_topics.v6 import request as dt

    return dt.DeleteTopicsRequest(
        topics=(dt.DeleteTopicState(name=name, topic_id=None),), timeout=datetime.timedelta(seconds=5)
    )
