"""One metadata image for the controller and the brokers: the controller's state is exactly what a broker
builds by replaying the controller's metadata log, after a simulated run with faults (registrations,
fencing, ISR changes, elections) and after config changes and a topic deletion."""

from __future__ import annotations

import datetime

from kio.schema.delete_topics.v6 import request as dt
from kio.schema.incremental_alter_configs.v1 import request as iac

from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.controller.controller import Controller
from epochkraft.metadata.image import MetadataImage
from epochkraft.sim.cluster import SCHEDULES, TOPOLOGIES, SimCluster
from epochkraft.sim.nodes import SimController
from epochkraft.sim.quorum import SimQuorum
from tests.controller_context import ControllerContext


def rebuilt_from_the_log(controller: Controller) -> MetadataCache:
    cache = MetadataCache(controller.node_id)
    for offset, record in controller.log.records():
        cache.apply(offset, record, Changes())
    return cache


def assert_same_image(controller: Controller) -> None:
    cache = rebuilt_from_the_log(controller)
    image = controller.image
    assert cache.image.brokers == image.brokers
    assert cache.image.topic_ids == image.topic_ids
    assert {t: (i.name, i.partitions) for t, i in cache.image.topics.items()} == {
        t: (i.name, i.partitions) for t, i in image.topics.items()
    }
    assert cache.image.configs == image.configs
    # The managers read the image itself, not copies of it.
    assert controller.cluster.brokers is image.brokers and controller.replication.topics is image.topics
    assert controller.configuration.configs is image.configs


def test_controller_state_is_the_image_its_log_builds_after_a_faulty_run():
    for seed in (1, 2, 3):
        sim = SimCluster(seed, SCHEDULES["random"](seed))
        result = sim.run()
        assert result.violation is None
        assert isinstance(sim.controllers, SimController)
        assert len(sim.controllers.core.image.brokers) == 3
        assert_same_image(sim.controllers.core)


def image_parts(image: MetadataImage) -> tuple[object, ...]:
    topics = {t: (i.name, dict(i.partitions)) for t, i in image.topics.items()}
    return image.brokers, image.topic_ids, topics, image.configs, image.features


def test_every_controller_of_a_quorum_holds_the_image_of_the_committed_log():
    """Against a quorum the active controller decides on its image and the standbys replay what commits:
    after a run with controllers crashed and cut off, every controller that applied the whole committed
    log holds the image the committed batches build (the simulator's replay, as a broker's)."""
    for seed in (1, 2, 3):
        sim = SimCluster(seed, SCHEDULES["quorum"](seed), topology=TOPOLOGIES["quorum"], controllers=3)
        assert sim.run().violation is None
        quorum = sim.controllers
        assert isinstance(quorum, SimQuorum)
        caught_up = [
            m.quorum
            for m in quorum.members.values()
            if m.quorum is not None and m.quorum.applied == m.quorum.replayed_to == quorum.committed_end
        ]
        assert any(q.active for q in caught_up)
        for controller_quorum in caught_up:
            assert image_parts(controller_quorum.controller.image) == image_parts(quorum.image)


def test_configs_and_deleted_topics_leave_the_same_image():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("kept", [[1, 2, 3]])
    ctx.create_topic("gone", [[2, 3, 1]])
    request = iac.IncrementalAlterConfigsRequest(
        resources=tuple(
            iac.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=(iac.AlterableConfig(name="min.insync.replicas", config_operation=0, value="2"),),
            )
            for resource_type, name in ((2, "kept"), (2, "gone"), (4, ""))
        ),
        validate_only=False,
    )
    results = ctx.controller.incremental_alter_configs(ctx.now, request).responses
    assert [r.error_code for r in results] == [0, 0, 0]
    deleted = ctx.controller.delete_topics(
        ctx.now,
        dt.DeleteTopicsRequest(
            topics=(dt.DeleteTopicState(name="gone", topic_id=None),), timeout=datetime.timedelta(seconds=1)
        ),
    )
    assert deleted.responses[0].error_code == 0
    image = ctx.controller.image
    assert image.topic("gone") is None and (2, "gone") not in image.configs, "its configs went with it"
    assert image.configs[(2, "kept")] == {"min.insync.replicas": "2"}
    assert_same_image(ctx.controller)
