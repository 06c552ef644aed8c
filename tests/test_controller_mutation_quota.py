"""KIP-599 in the broker's CreateTopics, CreatePartitions and DeleteTopics handlers, as Kafka's
ControllerMutationQuotaTest: a strict quota (the newer versions) refuses a topic once the client's bucket
is in deficit with THROTTLING_QUOTA_EXCEEDED, a permissive one (older versions) creates everything and
answers a throttle time, and without a quota nothing is throttled. The handlers run against a broker
stand-in whose forwarding goes straight to a sans-IO controller."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.create_partitions.v3 import request as cp3
from kio.schema.create_topics.v5 import request as ct5
from kio.schema.create_topics.v7 import request as ct7
from kio.schema.delete_topics.v4.request import DeleteTopicsRequest as DeleteTopicsV4
from kio.schema.delete_topics.v6 import request as dt6

from epochkraft.broker.client_quotas import ClientQuotas
from epochkraft.broker.settings import BrokerSettings
from epochkraft.protocol.api import BROKER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import RequestHeader
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers import k19_create_topics, k20_delete_topics, k37_create_partitions
from tests.controller_context import ControllerContext

CLIENT = "admin-client"
RATE = 2.0  # partitions a second: a burst of 22 (11 windows)
THROTTLED = ErrorCode.throttling_quota_exceeded
TIMEOUT = datetime.timedelta(seconds=30)


class BrokerStandIn:
    """What the handlers use of a broker: its metadata, quotas and settings, and forwarding."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.cache = ctx.controller.image
        self.client_quotas = ClientQuotas(self.cache)
        self.settings = BrokerSettings()

    async def forward_to_controller(self, request: Any) -> Any:
        controller = self.ctx.controller
        if isinstance(request, ct7.CreateTopicsRequest):
            return controller.create_topics(self.ctx.now, request)
        if isinstance(request, dt6.DeleteTopicsRequest):
            return controller.delete_topics(self.ctx.now, request)
        return controller.create_partitions(self.ctx.now, request)

    async def wait_for_metadata(self, applied: Any) -> None:
        assert applied()


def cluster(quota: float | None) -> BrokerStandIn:
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    if quota is not None:
        ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": quota}})
    return BrokerStandIn(ctx)


def call(node: BrokerStandIn, handler: Any, request: Any, key: int, version: int) -> Any:
    header = RequestHeader(key, version, 1, CLIENT, 0)
    ctx = RequestContext(BROKER, header, version, node, ("127.0.0.1", 1), None)
    return asyncio.run(handler.handle_on_broker(request, ctx))


def create_topics(node: BrokerStandIn, version: int, *names: str, partitions: int = 30) -> dict[str, int]:
    module = ct7 if version >= 6 else ct5
    topics = tuple(
        module.CreatableTopic(
            name=n, num_partitions=partitions, replication_factor=1, assignments=(), configs=()
        )
        for n in names
    )
    request = module.CreateTopicsRequest(topics=topics, timeout=TIMEOUT, validate_only=False)
    response = call(node, k19_create_topics, request, 19, version)
    node.last_throttle_ms = response.throttle_time / datetime.timedelta(milliseconds=1)  # type: ignore[attr-defined]
    return {t.name: t.error_code for t in response.topics}


def test_strict_create_topics_request():
    """ControllerMutationQuotaTest.testStrictCreateTopicsRequest: of two topics of 30 partitions, the first
    empties the bucket of 22 and is created, the second is refused; the response says how long to wait."""
    node = cluster(RATE)
    assert create_topics(node, 7, "t1", "t2") == {"t1": ErrorCode.none, "t2": THROTTLED}
    assert 3_900 <= node.last_throttle_ms <= 4_000  # a deficit of 8 partitions at 2 a second
    assert node.cache.topic("t2") is None


def test_permissive_create_topics_request():
    """ControllerMutationQuotaTest.testPermissiveCreateTopicsRequest: v5 is never refused, but throttled."""
    node = cluster(RATE)
    assert create_topics(node, 5, "t1", "t2") == {"t1": ErrorCode.none, "t2": ErrorCode.none}
    assert node.last_throttle_ms > 18_000  # a deficit of 38 partitions


def test_unbounded_create_topics_request():
    """ControllerMutationQuotaTest.testUnboundedCreateTopicsRequest: no quota, no throttle."""
    node = cluster(None)
    assert create_topics(node, 7, "t1", "t2") == {"t1": ErrorCode.none, "t2": ErrorCode.none}
    assert node.last_throttle_ms == 0


def delete_topics(node: BrokerStandIn, version: int, *names: str) -> dict[str, int]:
    if version >= 6:
        request = dt6.DeleteTopicsRequest(
            topics=tuple(dt6.DeleteTopicState(name=n, topic_id=None) for n in names), timeout=TIMEOUT
        )
    else:
        request = DeleteTopicsV4(topic_names=names, timeout=TIMEOUT)
    response = call(node, k20_delete_topics, request, 20, version)
    node.last_throttle_ms = response.throttle_time / datetime.timedelta(milliseconds=1)  # type: ignore[attr-defined]
    return {r.name: r.error_code for r in response.responses}


def test_strict_delete_topics_request():
    """ControllerMutationQuotaTest.testStrictDeleteTopicsRequest: the quota raised to create two topics of
    30 partitions, then lowered: the first deletion passes, the second is refused."""
    node = cluster(100.0)
    assert set(create_topics(node, 7, "t1", "t2").values()) == {ErrorCode.none}
    node.ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": RATE}})
    assert delete_topics(node, 6, "t1", "t2") == {"t1": ErrorCode.none, "t2": THROTTLED}
    assert node.cache.topic("t1") is None and node.cache.topic("t2") is not None
    assert node.last_throttle_ms > 0


def test_permissive_delete_topics_request():
    """ControllerMutationQuotaTest.testPermissiveDeleteTopicsRequest: v4 deletes both, throttled."""
    node = cluster(100.0)
    create_topics(node, 7, "t1", "t2")
    node.ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": RATE}})
    assert delete_topics(node, 4, "t1", "t2") == {"t1": ErrorCode.none, "t2": ErrorCode.none}
    assert node.last_throttle_ms > 0


def create_partitions(node: BrokerStandIn, version: int, counts: dict[str, int]) -> dict[str, int]:
    request = cp3.CreatePartitionsRequest(
        topics=tuple(cp3.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in counts.items()),
        timeout=TIMEOUT,
        validate_only=False,
    )
    response = call(node, k37_create_partitions, request, 37, version)
    node.last_throttle_ms = response.throttle_time / datetime.timedelta(milliseconds=1)  # type: ignore[attr-defined]
    return {r.name: r.error_code for r in response.results}


def test_strict_create_partitions_request():
    """ControllerMutationQuotaTest.testStrictCreatePartitionsRequest: two topics each gaining 30 partitions;
    the second is refused."""
    node = cluster(100.0)
    create_topics(node, 7, "t1", "t2", partitions=1)
    node.ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": RATE}})
    assert create_partitions(node, 3, {"t1": 31, "t2": 31}) == {"t1": ErrorCode.none, "t2": THROTTLED}
    assert len(node.cache.topic("t1").partitions) == 31 and len(node.cache.topic("t2").partitions) == 1


def test_permissive_create_partitions_request():
    """ControllerMutationQuotaTest.testPermissiveCreatePartitionsRequest: v2 grows both, throttled."""
    node = cluster(100.0)
    create_topics(node, 7, "t1", "t2", partitions=1)
    node.ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": RATE}})
    assert create_partitions(node, 2, {"t1": 31, "t2": 31}) == {"t1": ErrorCode.none, "t2": ErrorCode.none}
    assert node.last_throttle_ms > 0


def test_unbounded_create_partitions_request():
    """ControllerMutationQuotaTest.testUnboundedCreatePartitionsRequest."""
    node = cluster(None)
    create_topics(node, 7, "t1", "t2", partitions=1)
    assert create_partitions(node, 3, {"t1": 31, "t2": 31}) == {"t1": ErrorCode.none, "t2": ErrorCode.none}
    assert node.last_throttle_ms == 0
