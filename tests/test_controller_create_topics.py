"""CreateTopics on the sans-IO controller: one write per request, and the bound on the partitions one
request may create (Kafka's ReplicationControlManager.validateTotalNumberOfPartitions, KAFKA-17870)."""

from __future__ import annotations

from kio.schema.create_topics.v7 import request as ct

from epochkraft.controller.controller import MAX_PARTITIONS_PER_REQUEST, TOO_MANY_PARTITIONS
from epochkraft.protocol.errors import ErrorCode
from tests.controller_context import NO_TIMEOUT, ControllerContext


def create_request(topics: dict[str, int], rf: int = 3) -> ct.CreateTopicsRequest:
    return ct.CreateTopicsRequest(
        topics=tuple(
            ct.CreatableTopic(name=n, num_partitions=p, replication_factor=rf, assignments=(), configs=())
            for n, p in topics.items()
        ),
        timeout=NO_TIMEOUT,
        validate_only=False,
    )


def test_one_request_is_one_write():
    """Every topic a request creates is in one batch of the metadata log (Kafka's atomic ControllerResult),
    not one append (and, on disk, one fsync) per topic."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    writes: list[int] = []
    ctx.controller.log.listeners.append(lambda base, _data: writes.append(base))
    before = ctx.controller.log.next_offset
    response = ctx.controller.create_topics(ctx.now, create_request({f"t{i}": 2 for i in range(500)}))
    assert all(t.error_code == ErrorCode.none for t in response.topics)
    assert writes == [before]
    assert ctx.controller.log.next_offset == before + 500 * 3  # a TopicRecord and two PartitionRecords each
    assert len(ctx.controller.replication.topics) == 500


def test_failed_topics_are_left_out_of_the_write():
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    ctx.create_topic("taken", partitions=1, rf=1)
    response = ctx.controller.create_topics(ctx.now, create_request({"taken": 1, "new": 1, "wide": 1}, rf=4))
    errors = {t.name: t.error_code for t in response.topics}
    assert errors == {
        "taken": ErrorCode.topic_already_exists,
        "new": ErrorCode.invalid_replication_factor,
        "wide": ErrorCode.invalid_replication_factor,
    }
    response = ctx.controller.create_topics(ctx.now, create_request({"taken": 1, "new": 1}))
    assert [t.error_code for t in response.topics] == [ErrorCode.topic_already_exists, ErrorCode.none]
    assert ctx.controller.replication.topic("new") is not None


def test_too_many_partitions_in_one_request_are_refused():
    """More than MAX_PARTITIONS_PER_REQUEST partitions in one request: every topic is refused with
    POLICY_VIOLATION and Kafka's message, and nothing is written; exactly the bound is created."""
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    before = ctx.controller.log.next_offset
    half = MAX_PARTITIONS_PER_REQUEST // 2
    response = ctx.controller.create_topics(ctx.now, create_request({"a": half, "b": half, "c": 1}, rf=1))
    assert [(t.error_code, t.error_message) for t in response.topics] == [
        (ErrorCode.policy_violation, TOO_MANY_PARTITIONS)
    ] * 3
    assert ctx.controller.log.next_offset == before
    response = ctx.controller.create_topics(ctx.now, create_request({"a": half, "b": half}, rf=1))
    assert [t.error_code for t in response.topics] == [ErrorCode.none, ErrorCode.none]
