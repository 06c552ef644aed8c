"""Fetch (key 1), versions 4-18, broker listener: consumers and follower replicas.

- A response holds at most min(MaxBytes, fetch.max.bytes (55 MB)) of records, each partition at most its
  PartitionMaxBytes, except that the first partition with data returns at least one whole batch (Kafka's
  KafkaApis.handleFetchRequest and ReplicaManager.readFromLocalLog).
- Consumers read up to the high watermark from the leader, with MaxWait/MinBytes long polling (woken as
  soon as the HW moves). OFFSET_OUT_OF_RANGE outside the log, NOT_LEADER_OR_FOLLOWER on a non-leader,
  FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when the client's leader epoch is older / newer.
- Followers identify themselves with ReplicaState{ReplicaId, ReplicaEpoch} (v15+, KIP-903) or ReplicaId
  (older versions, broker epoch unknown). The leader refuses a fetch whose broker epoch is older than the
  metadata cache's (NOT_LEADER_OR_FOLLOWER), answers a diverging LastFetchedEpoch (v12+) with
  DivergingEpoch and no data, reads up to its log end, and records the follower's position, which may
  expand the ISR and advance the high watermark.
- With an authorizer, a follower's Fetch needs CLUSTER_ACTION on the cluster and a consumer's READ on each
  topic; every partition refused gets TOPIC_AUTHORIZATION_FAILED (KafkaApis.handleFetchRequest).
- v13+ address topics by id (UNKNOWN_TOPIC_ID), older versions by name. v17 and v18 add request fields a
  leader here does not use (a replica's directory id, KIP-853; a follower's high watermark, KIP-1166).
- v7+ keep incremental fetch sessions (KIP-227, ``broker.fetch_session``): epoch 0 opens one, an
  incremental fetch reads every partition of its session at the cached position and answers only the
  partitions that changed; a session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
  FETCH_SESSION_TOPIC_ID_ERROR) is answered at the top level with no partitions. v4-v6 are sessionless.
- v16+ (KIP-951): a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the current
  leader and its epoch, and the response carries that leader's endpoint on the request's listener.
- Every partition answered carries its last stable offset (the high watermark, or the first offset of the
  earliest transaction not yet decided below it). A consumer with isolation_level 1 (read_committed)
  reads no further than that, and gets the aborted transactions (producer id, first offset) overlapping
  the batches read, from the segments' aborted-transaction indexes (Kafka's collectAbortedTxns), so it
  drops the aborted records.
- The response is encoded by ``protocol.fetch_response``, not kio: record bytes read from the log go to
  the socket as they are, never copied into an encoding buffer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, TypeAlias

from kio.schema.fetch.v4.request import FetchRequest as FetchRequestV4
from kio.schema.fetch.v5.request import FetchRequest as FetchRequestV5
from kio.schema.fetch.v6.request import FetchRequest as FetchRequestV6
from kio.schema.fetch.v7.request import FetchRequest as FetchRequestV7
from kio.schema.fetch.v8.request import FetchRequest as FetchRequestV8
from kio.schema.fetch.v9.request import FetchRequest as FetchRequestV9
from kio.schema.fetch.v10.request import FetchRequest as FetchRequestV10
from kio.schema.fetch.v11.request import FetchRequest as FetchRequestV11
from kio.schema.fetch.v12.request import FetchRequest as FetchRequestV12
from kio.schema.fetch.v13.request import FetchRequest as FetchRequestV13
from kio.schema.fetch.v14.request import FetchRequest as FetchRequestV14
from kio.schema.fetch.v15.request import FetchRequest as FetchRequestV15
from kio.schema.fetch.v16.request import FetchRequest as FetchRequestV16
from kio.schema.fetch.v17.request import FetchRequest as FetchRequestV17
from kio.schema.fetch.v18.request import FetchRequest as FetchRequestV18
from kio.static.protocol import RequestPayload

from epochkraft.broker.fetch_messages import FetchParams, PartitionFetch
from epochkraft.broker.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    PartitionData,
    PartitionKey,
    TopicKey,
)
from epochkraft.metadata.image import MetadataImage
from epochkraft.protocol import fetch_response
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.fetch_response import Answer, encode_response
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import ms

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

# The versions that have a field, checked once per request (tests/test_request_types.py keeps them whole);
# newest first, as isinstance tries them in order and most clients fetch at a recent version.
WITH_SESSIONS = (
    FetchRequestV18,
    FetchRequestV17,
    FetchRequestV16,
    FetchRequestV15,
    FetchRequestV14,
    FetchRequestV13,
    FetchRequestV12,
    FetchRequestV11,
    FetchRequestV10,
    FetchRequestV9,
    FetchRequestV8,
    FetchRequestV7,
)  # v7+ (KIP-227): fetch sessions
BY_TOPIC_ID = (
    FetchRequestV18,
    FetchRequestV17,
    FetchRequestV16,
    FetchRequestV15,
    FetchRequestV14,
    FetchRequestV13,
)  # v13+ (KIP-516): topics by id
WITH_REPLICA_STATE = (FetchRequestV18, FetchRequestV17, FetchRequestV16, FetchRequestV15)  # v15+ (KIP-903)
FetchBeforeV12: TypeAlias = (
    FetchRequestV4
    | FetchRequestV5
    | FetchRequestV6
    | FetchRequestV7
    | FetchRequestV8
    | FetchRequestV9
    | FetchRequestV10
    | FetchRequestV11
)


def _follower_identity(request: rt.FetchOnBroker) -> tuple[int, int]:
    """The fetching replica's id and broker epoch (-1: unknown before KIP-903; a consumer's id is -1)."""
    if isinstance(request, WITH_REPLICA_STATE):
        state = request.replica_state
        return state.replica_id, state.replica_epoch
    return request.replica_id, -1


class _FetchPartition(Protocol):
    """The fields of a requested partition from v12 on, where every one of them is present."""

    @property
    def partition(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...
    @property
    def partition_max_bytes(self) -> int: ...
    @property
    def current_leader_epoch(self) -> int: ...
    @property
    def last_fetched_epoch(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...


def _fetch_data(request: rt.FetchOnBroker) -> dict[PartitionKey, PartitionData]:
    """The partitions asked for, keyed by topic id (v13+) or name, in order (FetchRequest.fetchData)."""
    topics: Iterable[tuple[TopicKey, Iterable[_FetchPartition]]]
    if isinstance(request, BY_TOPIC_ID):
        topics = ((topic.topic_id, topic.partitions) for topic in request.topics)
    elif isinstance(request, FetchRequestV12):
        topics = ((topic.topic, topic.partitions) for topic in request.topics)
    else:
        return _fetch_data_before_v12(request)
    return {
        (key, p.partition): PartitionData(
            p.fetch_offset,
            p.partition_max_bytes,
            p.current_leader_epoch,
            p.last_fetched_epoch,
            p.log_start_offset,
        )
        for key, partitions in topics
        for p in partitions
    }


def _fetch_data_before_v12(request: FetchBeforeV12) -> dict[PartitionKey, PartitionData]:
    """v4-v11, by name: the fields a version lacks take their defaults (clients this old are rare)."""
    return {
        (topic.topic, p.partition): PartitionData(
            fetch_offset=p.fetch_offset,
            max_bytes=p.partition_max_bytes,
            current_leader_epoch=getattr(p, "current_leader_epoch", -1),  # v9+ (KIP-320)
            log_start_offset=getattr(p, "log_start_offset", -1),  # v5+
        )
        for topic in request.topics
        for p in topic.partitions
    }


def _to_forget(request: rt.FetchOnBroker) -> list[PartitionKey]:
    """The partitions an incremental fetch drops from its session (v7+)."""
    if isinstance(request, BY_TOPIC_ID):
        return [
            (topic.topic_id, index) for topic in request.forgotten_topics_data for index in topic.partitions
        ]
    if isinstance(request, WITH_SESSIONS):
        return [(topic.topic, index) for topic in request.forgotten_topics_data for index in topic.partitions]
    return []


def _session(request: RequestPayload) -> tuple[int, int]:
    """The Fetch request's session id and epoch (v7+, KIP-227); before, a sessionless full fetch's."""
    if isinstance(request, WITH_SESSIONS):
        return request.session_id, request.session_epoch
    return INVALID_SESSION_ID, FINAL_EPOCH


def _topic_name(image: MetadataImage, topic: TopicKey, version: int) -> str | None:
    """The topic's name; None for a topic id this broker does not know."""
    if not isinstance(topic, uuid.UUID):  # a name (v4-v12), or the zero id
        return topic if version < 13 else None
    info = image.topics.get(topic)
    return info.name if info else None


@api(key=1, name="Fetch", versions=(4, 18), listeners=(BROKER,))
async def handle(request: rt.FetchOnBroker, ctx: RequestContext):
    node = ctx.broker
    version = ctx.api_version
    replica_id, replica_epoch = _follower_identity(request)
    is_follower = replica_id >= 0
    # The follower must have ClusterAction on the cluster to fetch partition data (and to have its fetch
    # session kept over consumers'); consumers READ per topic.
    follower_allowed = not is_follower or ctx.authorized_cluster(AclOperation.CLUSTER_ACTION)
    session_id, session_epoch = _session(request)
    context = node.replica_manager.fetch_manager.new_context(
        version,
        session_id,
        session_epoch,
        is_follower and follower_allowed,  # a privileged session
        _fetch_data(request),
        _to_forget(request),
        ctx.now_ms(),
    )
    # What the context reads: the partitions asked for, or every partition of an incremental session.
    partitions = context.partitions()
    topic_names = _topic_names(node.cache.image, partitions, version)
    readable = {
        name
        for name in set(topic_names)
        if name is not None
        and (
            ctx.authorized(AclOperation.READ, ResourceType.TOPIC, name)
            if not is_follower
            else follower_allowed
        )
    }
    # Unknown and refused partitions are answered here; the others are read by the replica manager.
    refused: dict[PartitionKey, Answer] = {}
    wanted: list[PartitionFetch] = []
    for (key, data), name in zip(partitions, topic_names, strict=True):
        if name is None:
            refused[key] = Answer(key[1], ErrorCode.unknown_topic_id)
        elif name not in readable:
            refused[key] = Answer(key[1], ErrorCode.topic_authorization_failed)
        else:
            wanted.append(PartitionFetch(name, key[1], data))
    # fetch.max.bytes caps the response whatever the request asks, and a consumer's by what its
    # consumer_byte_rate allows in a quota window (KafkaApis.handleFetchRequest).
    params = FetchParams(
        replica_id=replica_id,
        replica_epoch=replica_epoch,
        max_wait_ms=ms(request.max_wait),
        min_bytes=request.min_bytes,
        max_bytes=max(min(request.max_bytes, node.settings.fetch_max_bytes, _quota_cap(ctx, is_follower)), 0),
        read_committed=request.isolation_level == READ_COMMITTED,
    )
    started = time.monotonic()
    read = await node.replica_manager.fetch_messages(params, wanted)
    node.observe_fetch(is_follower, time.monotonic() - started)
    answers = _in_order(partitions, refused, read)
    endpoints: dict[int, tuple[int, str, int, str | None]] = {}
    if version >= LEADER_HINTS_FROM:
        # the leaders now, after the read, from one image (KafkaApis.handleFetchRequest asks getCurrentLeader
        # in its response callback): the image the replica manager's NOT_LEADER_OR_FOLLOWER came from
        image = node.cache.image
        answers = [
            pair
            if pair[1].error not in HINTED_ERRORS
            else (pair[0], _leader_hint(image, ctx.listener_name, name, pair[1], endpoints))
            for pair, name in zip(answers, topic_names, strict=True)
        ]
    # The context picks what goes out: all of it, or an incremental session's changed partitions.
    response = context.response(answers, ctx.now_ms())
    return encode_response(
        version,
        _by_topic(response.answers),
        read_committed=params.read_committed,
        node_endpoints=[endpoints[i] for i in sorted(endpoints)],
        error_code=response.error,
        session_id=response.session_id,
    )


def _topic_names(
    image: MetadataImage, partitions: list[tuple[PartitionKey, PartitionData]], version: int
) -> list[str | None]:
    """Each partition's topic name (None: an unknown topic id), in order; a run of partitions of one topic
    looks it up once (a topic id's hash is a Python call, and a Fetch names thousands of partitions)."""
    names: dict[TopicKey, str | None] = {}
    in_order: list[str | None] = []
    last: object = in_order  # no topic key
    name: str | None = None
    for (topic, _), _data in partitions:
        if topic is not last:
            last = topic
            if topic not in names:
                names[topic] = _topic_name(image, topic, version)
            name = names[topic]
        in_order.append(name)
    return in_order


def _in_order(
    partitions: list[tuple[PartitionKey, PartitionData]],
    refused: dict[PartitionKey, Answer],
    read: list[Answer],
) -> list[tuple[PartitionKey, Answer]]:
    """Every partition's answer in the order asked: the refused ones' and, between them, the ones read."""
    if not refused:
        return [(key, answer) for (key, _data), answer in zip(partitions, read, strict=True)]
    answers = iter(read)
    return [(key, refused.get(key) or next(answers)) for key, _data in partitions]


def _by_topic(answers: list[tuple[PartitionKey, Answer]]) -> list[tuple[TopicKey, list[Answer]]]:
    """Answers grouped by topic in their order, a new group whenever the topic changes (FetchResponse
    .toMessage): an incremental session's order can come back to a topic."""
    topics: list[tuple[TopicKey, list[Answer]]] = []
    for (topic, _), answer in answers:
        if topics and topics[-1][0] == topic:
            topics[-1][1].append(answer)
        else:
            topics.append((topic, [answer]))
    return topics


def throttled_response(
    ctx: RequestContext, request: RequestPayload, pieces: list[bytes | memoryview]
) -> list[bytes | memoryview]:
    """The empty answer of a Fetch a quota throttles (KafkaApis.handleFetchRequest), with its top-level
    error and session id 0 for a full fetch, whose new session is dropped, else its session's id
    (FetchContext.getThrottledResponse); the session forgets the answer it built, which is not sent."""
    _error, session_id = fetch_response.session_of(ctx.api_version, pieces)
    if session_id != INVALID_SESSION_ID:
        _id, epoch = _session(request)
        session_id = ctx.broker.replica_manager.fetch_manager.discard_response(session_id, epoch)
    return fetch_response.throttled(ctx.api_version, pieces, session_id)


def _quota_cap(ctx: RequestContext, is_follower: bool) -> int:
    """The most bytes a consumer's Fetch may answer under its consumer_byte_rate: its quota over the
    measured windows (ClientQuotaManager.getMaxValueInQuotaWindow), so a response is never too large to
    pass the quota; no cap for a follower or without a quota."""
    if is_follower or ctx.node is None:
        return FETCH_UNCAPPED
    quotas = ctx.broker.client_quotas
    if not quotas.active():
        return FETCH_UNCAPPED
    cap = quotas.fetch.max_value_in_quota_window(ctx.principal.name, ctx.header.client_id or "")
    return FETCH_UNCAPPED if cap >= FETCH_UNCAPPED else int(cap)


FETCH_UNCAPPED = 2**31 - 1
LEADER_HINTS_FROM = 16  # KIP-951
READ_COMMITTED = 1  # isolation_level
HINTED_ERRORS = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def _leader_hint(
    image: MetadataImage,
    listener_name: str,
    name: str | None,
    answer: Answer,
    endpoints: dict[int, tuple[int, str, int, str | None]],
) -> Answer:
    """KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (the caller picks those,
    HINTED_ERRORS) names the current leader and its epoch, and the response carries the leader's endpoint
    on this listener (KafkaApis.handleFetchRequest, getCurrentLeader)."""
    if name is None:
        return answer
    reg = image.partition(name, answer.index)
    if reg is None or reg.leader < 0:
        return answer
    endpoint = image.endpoint(reg.leader, listener_name)
    registration = image.brokers.get(reg.leader)
    if endpoint is not None and registration is not None:
        endpoints[reg.leader] = (reg.leader, endpoint.host, endpoint.port, registration.rack)
    return answer._replace(current_leader=(reg.leader, reg.leader_epoch))
