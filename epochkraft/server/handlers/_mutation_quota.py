"""KIP-599 for the handlers that create or delete partitions (not a handler itself: no leading 'k').

The active controller charges a client's controller_mutation_rate with the partitions each topic of a
CreateTopics, CreatePartitions or DeleteTopics request would create or delete (ControllerApis with
``quotas.controllerMutation.newQuotaFor``), from the client quotas of its own metadata image, keyed by the
principal and client id a broker forwarded in the Envelope (or the client's own on the controller's
listener): one bucket per client for the whole cluster, whichever broker the client sent to.
From the versions whose clients know THROTTLING_QUOTA_EXCEEDED (``strict_since``) a topic that finds the
client's bucket already empty is refused with it; older versions are charged but never refused (Kafka's
permissive quota). Either way the response carries the time until the bucket is no longer in deficit, and
the broker that forwarded the request mutes the client's connection that long.
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from epochkraft.broker.client_quotas import ControllerMutationQuota
from epochkraft.controller.controller import THROTTLED
from epochkraft.security.authorizer import AclOperation
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Response = TypeVar("_Response", bound="DataclassInstance")  # a kio response with a throttle_time

THROTTLED_MESSAGE = THROTTLED  # Errors.THROTTLING_QUOTA_EXCEEDED.message, as the controller answers it
BROKER_CLIENT_PREFIX = "broker-"  # a broker's controller channels' client ids (broker-<id>-control)
# The first versions whose quota is strict (Kafka's KafkaApis / ControllerApis strictSinceVersion)
CREATE_TOPICS_STRICT_SINCE, DELETE_TOPICS_STRICT_SINCE, CREATE_PARTITIONS_STRICT_SINCE = 6, 5, 3


def mutation_quota(ctx: RequestContext, strict_since: int) -> ControllerMutationQuota | None:
    """The controller mutation quota of the client a controller serves; None where none is set, and for a
    broker's own requests (its internal topics, sent bare: a quota on the default user or client id must
    not hold back ``__consumer_offsets``)."""
    if _brokers_own(ctx):
        return None
    quotas = ctx.controller_node.client_quotas
    if not quotas.active():
        return None
    manager = quotas.controller_mutation
    if not manager.enabled:
        return None
    client_id = ctx.header.client_id or ""
    return manager.new_quota_for(ctx.principal.name, client_id, ctx.api_version, strict_since, ctx.now_ms())


def _brokers_own(ctx: RequestContext) -> bool:
    """A broker's own request: not forwarded, from a broker's controller channel, by a principal allowed the
    cluster actions (every principal without an authorizer)."""
    client_id = ctx.header.client_id or ""
    return (
        not ctx.forwarded
        and client_id.startswith(BROKER_CLIENT_PREFIX)
        and ctx.authorized_cluster(AclOperation.CLUSTER_ACTION)
    )


def with_throttle(response: _Response, quota: ControllerMutationQuota | None, now_ms: int) -> _Response:
    """The response carrying what is left of the quota's throttle time (sendResponseMaybeThrottleWith-
    ControllerQuota)."""
    if quota is None:
        return response
    throttle = datetime.timedelta(milliseconds=quota.throttle_time_ms(now_ms))
    return replace(response, throttle_time=throttle)
