"""KIP-599 charged at the active controller, as Kafka's ControllerMutationQuotaTest: a strict quota (the
newer versions) refuses a topic once the client's bucket is in deficit with THROTTLING_QUOTA_EXCEEDED, a
permissive one (older versions) creates everything and answers a throttle time, and without a quota nothing is
throttled. The client's requests go to three brokers in turn; each broker's handler forwards them in an
Envelope (encoded to bytes and back) to the controller's Envelope handler over a sans-IO controller, so the
quota holds for the cluster, not per broker, and is keyed by the forwarded principal and client id."""

from __future__ import annotations

import asyncio
import datetime
import itertools
from typing import Any

import structlog
from kio.schema.create_partitions.v3 import request as cp3
from kio.schema.create_topics.v5 import request as ct5
from kio.schema.create_topics.v7 import request as ct7
from kio.schema.delete_topics.v4.request import DeleteTopicsRequest as DeleteTopicsV4
from kio.schema.delete_topics.v6 import request as dt6
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.static.protocol import RequestPayload

from epochkraft.broker.client_quotas import ClientQuotas
from epochkraft.broker.settings import BrokerSettings
from epochkraft.metadata.image import MetadataImage
from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import RequestHeader, decode_entity, encode_entity
from epochkraft.security.principal import ANONYMOUS, KafkaPrincipal
from epochkraft.server import forwarding
from epochkraft.server.context import RequestContext
from epochkraft.server.controller_daemon import ControllerImageQuotas
from epochkraft.server.forwarding import R
from epochkraft.server.handlers import (
    k19_create_topics,
    k20_delete_topics,
    k37_create_partitions,
    k58_envelope,
)
from tests.controller_context import ControllerContext

CLIENT = "admin-client"
RATE = 2.0  # partitions a second: a burst of 22 (11 windows)
THROTTLED = ErrorCode.throttling_quota_exceeded
TIMEOUT = datetime.timedelta(seconds=30)
LOG = structlog.get_logger()


class ControllerStandIn:
    """What the controller's handlers use: the sans-IO controller and the quotas of its image."""

    authorizer = None

    def __init__(self, ctx: ControllerContext) -> None:
        self.controller = ctx.controller
        quotas_image = ControllerImageQuotas(ctx.controller)
        self.client_quotas = ClientQuotas(lambda: quotas_image)


class ControllerImage:
    """The controller's image where a broker's handlers read their cache's (the controller replays into
    it in place, and replaces it when it renounces)."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.controller = ctx.controller

    @property
    def image(self) -> MetadataImage:
        return self.controller.image


class BrokerStandIn:
    """What the broker's handlers use: its metadata and settings, and forwarding in an Envelope."""

    def __init__(self, node_id: int, ctx: ControllerContext, controller: ControllerStandIn) -> None:
        self.node_id = node_id
        self.cache = ControllerImage(ctx)
        self.settings = BrokerSettings()
        self.controller = controller

    async def forward_to_controller(
        self, request: RequestPayload, response_type: type[R], client: RequestContext | None = None
    ) -> R:
        assert client is not None, "a client's request is forwarded in an Envelope"
        header = client.header
        envelope = forwarding.wrap(
            request, header.client_id, header.correlation_id, client.principal, client.client_host
        )
        on_the_wire = decode_entity(EnvelopeRequest, encode_entity(envelope))
        sender = RequestContext(
            CONTROLLER,
            RequestHeader(58, 0, 1, f"broker-{self.node_id}-control", 0),
            0,
            self.controller,
            ("127.0.0.1", 9000 + self.node_id),
            LOG,
            principal=KafkaPrincipal("User", f"broker-{self.node_id}"),
        )
        answer = await k58_envelope.handle_on_controller(on_the_wire, sender)
        on_the_way_back = decode_entity(EnvelopeResponse, encode_entity(answer))
        return forwarding.unwrap_response(on_the_way_back, request, response_type)

    async def wait_for_metadata(self, applied: Any) -> None:
        assert applied()


class Cluster:
    """Three brokers over one controller; each call of the client goes to the next broker."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.cache = ControllerImage(ctx)
        controller = ControllerStandIn(ctx)
        self.brokers = [BrokerStandIn(n, ctx, controller) for n in (1, 2, 3)]
        self._next = itertools.cycle(self.brokers)
        self.last_throttle_ms = 0.0
        self.principal = ANONYMOUS
        self.client_id = CLIENT

    def broker(self) -> BrokerStandIn:
        return next(self._next)


def cluster(quota: float | None) -> Cluster:
    ctx = ControllerContext()
    ctx.brokers_ready(1, 2, 3)
    if quota is not None:
        ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": quota}})
    return Cluster(ctx)


def call(node: Cluster, handler: Any, request: Any, key: int, version: int) -> Any:
    header = RequestHeader(key, version, 1, node.client_id, 0)
    ctx = RequestContext(
        BROKER, header, version, node.broker(), ("127.0.0.1", 1), LOG, principal=node.principal
    )
    return asyncio.run(handler.handle_on_broker(request, ctx))


def create_topics(node: Cluster, version: int, *names: str, partitions: int = 30) -> dict[str, int]:
    module = ct7 if version >= 6 else ct5
    topics = tuple(
        module.CreatableTopic(
            name=n, num_partitions=partitions, replication_factor=1, assignments=(), configs=()
        )
        for n in names
    )
    request = module.CreateTopicsRequest(topics=topics, timeout=TIMEOUT, validate_only=False)
    response = call(node, k19_create_topics, request, 19, version)
    node.last_throttle_ms = response.throttle_time / datetime.timedelta(milliseconds=1)
    return {t.name: t.error_code for t in response.topics}


def test_strict_create_topics_request():
    """ControllerMutationQuotaTest.testStrictCreateTopicsRequest: of two topics of 30 partitions, the first
    empties the bucket of 22 and is created, the second is refused; the response says how long to wait."""
    node = cluster(RATE)
    assert create_topics(node, 7, "t1", "t2") == {"t1": ErrorCode.none, "t2": THROTTLED}
    assert 3_900 <= node.last_throttle_ms <= 4_000  # a deficit of 8 partitions at 2 a second
    assert node.cache.image.topic("t2") is None


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


def delete_topics(node: Cluster, version: int, *names: str) -> dict[str, int]:
    if version >= 6:
        request = dt6.DeleteTopicsRequest(
            topics=tuple(dt6.DeleteTopicState(name=n, topic_id=None) for n in names), timeout=TIMEOUT
        )
    else:
        request = DeleteTopicsV4(topic_names=names, timeout=TIMEOUT)
    response = call(node, k20_delete_topics, request, 20, version)
    node.last_throttle_ms = response.throttle_time / datetime.timedelta(milliseconds=1)
    return {r.name: r.error_code for r in response.responses}


def test_strict_delete_topics_request():
    """ControllerMutationQuotaTest.testStrictDeleteTopicsRequest: the quota raised to create two topics of
    30 partitions, then lowered: the first deletion passes, the second is refused."""
    node = cluster(100.0)
    assert set(create_topics(node, 7, "t1", "t2").values()) == {ErrorCode.none}
    node.ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": RATE}})
    assert delete_topics(node, 6, "t1", "t2") == {"t1": ErrorCode.none, "t2": THROTTLED}
    assert node.cache.image.topic("t1") is None and node.cache.image.topic("t2") is not None
    assert node.last_throttle_ms > 0


def test_permissive_delete_topics_request():
    """ControllerMutationQuotaTest.testPermissiveDeleteTopicsRequest: v4 deletes both, throttled."""
    node = cluster(100.0)
    create_topics(node, 7, "t1", "t2")
    node.ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": RATE}})
    assert delete_topics(node, 4, "t1", "t2") == {"t1": ErrorCode.none, "t2": ErrorCode.none}
    assert node.last_throttle_ms > 0


def create_partitions(node: Cluster, version: int, counts: dict[str, int]) -> dict[str, int]:
    request = cp3.CreatePartitionsRequest(
        topics=tuple(cp3.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in counts.items()),
        timeout=TIMEOUT,
        validate_only=False,
    )
    response = call(node, k37_create_partitions, request, 37, version)
    node.last_throttle_ms = response.throttle_time / datetime.timedelta(milliseconds=1)
    return {r.name: r.error_code for r in response.results}


def test_strict_create_partitions_request():
    """ControllerMutationQuotaTest.testStrictCreatePartitionsRequest: two topics each gaining 30 partitions;
    the second is refused."""
    node = cluster(100.0)
    create_topics(node, 7, "t1", "t2", partitions=1)
    node.ctx.alter_client_quotas({(("client-id", CLIENT),): {"controller_mutation_rate": RATE}})
    assert create_partitions(node, 3, {"t1": 31, "t2": 31}) == {"t1": ErrorCode.none, "t2": THROTTLED}
    assert (
        len(node.cache.image.topic("t1").partitions) == 31
        and len(node.cache.image.topic("t2").partitions) == 1
    )


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


def test_strict_create_topics_request_through_another_broker():
    """testStrictCreateTopicsRequest's retry, sent to another broker before the throttle time has passed:
    the bucket the first broker's request emptied is the controller's, so the retry is refused too (a quota
    charged by each receiving broker would have given the client three buckets)."""
    node = cluster(RATE)
    assert create_topics(node, 7, "t1", "t2") == {"t1": ErrorCode.none, "t2": THROTTLED}
    assert create_topics(node, 7, "t2") == {"t2": THROTTLED}
    assert create_topics(node, 7, "t2") == {"t2": THROTTLED}
    assert node.last_throttle_ms > 3_000 and node.cache.image.topic("t2") is None


def test_strict_create_topics_request_of_the_forwarded_principal():
    """The quota of the client's principal (a user entity), forwarded in the Envelope: the brokers' own
    principals have none, so a quota keyed by who the connection is would not hold."""
    node = cluster(None)
    node.ctx.alter_client_quotas({(("user", "alice"),): {"controller_mutation_rate": RATE}})
    node.principal = KafkaPrincipal("User", "alice")
    assert create_topics(node, 7, "t1", "t2") == {"t1": ErrorCode.none, "t2": THROTTLED}
    node.principal = KafkaPrincipal("User", "bob")
    assert create_topics(node, 7, "t2") == {"t2": ErrorCode.none}


def _on_controller(node: Cluster, client_id: str, request: Any) -> Any:
    header = RequestHeader(19, 7, 1, client_id, 0)
    controller = node.brokers[0].controller
    ctx = RequestContext(CONTROLLER, header, 7, controller, ("127.0.0.1", 1), LOG)
    return asyncio.run(k19_create_topics.handle_on_controller(request, ctx))


def test_a_brokers_own_create_topics_is_not_charged():
    """A broker's own CreateTopics (its internal topics, sent bare on its controller channel) is not held
    back by a quota on the default client id; a client naming itself as a broker's channel still is, its
    request forwarded in an Envelope."""
    node = cluster(None)
    node.ctx.alter_client_quotas({(("client-id", None),): {"controller_mutation_rate": RATE}})
    topics = tuple(
        ct7.CreatableTopic(name=n, num_partitions=30, replication_factor=1, assignments=(), configs=())
        for n in ("own-1", "own-2")
    )
    request = ct7.CreateTopicsRequest(topics=topics, timeout=TIMEOUT, validate_only=False)
    response = _on_controller(node, "broker-1-control", request)
    assert [t.error_code for t in response.topics] == [ErrorCode.none, ErrorCode.none]
    node.client_id = "broker-2-control"  # a client may call itself anything
    assert create_topics(node, 7, "f1", "f2") == {"f1": ErrorCode.none, "f2": THROTTLED}


def test_an_invalid_topic_is_not_charged():
    """ReplicationControlManager.createTopic applies the partition change quota once the topic is valid and
    placed: a topic refused for its replication factor (99 on 3 brokers) spends nothing, so the valid topic
    after it is created."""
    node = cluster(RATE)
    module = ct7
    bad = module.CreatableTopic(
        name="bad", num_partitions=30, replication_factor=99, assignments=(), configs=()
    )
    good = module.CreatableTopic(
        name="good", num_partitions=20, replication_factor=1, assignments=(), configs=()
    )
    request = module.CreateTopicsRequest(topics=(bad, good), timeout=TIMEOUT, validate_only=False)
    response = call(node, k19_create_topics, request, 19, 7)
    answers = {t.name: t.error_code for t in response.topics}
    assert answers == {"bad": ErrorCode.invalid_replication_factor, "good": ErrorCode.none}
