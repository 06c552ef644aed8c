"""Produce (key 0), versions 3-13, broker listener.

- The leader validates each batch as Kafka's LogValidator: CRC-32C (CORRUPT_MESSAGE); record count against
  the offset range and the records present, offset deltas, record lengths, varints, headers, no control
  batches from clients, compressed payloads decompressed within 16 MiB (INVALID_RECORD, with a message);
  nothing of a refused batch is appended. Records that break their partition's rules (no key in a
  compacted topic: INVALID_RECORD; a create time out of message.timestamp.before/after.max.ms:
  INVALID_TIMESTAMP) fill record_errors (v8+: each record's index in its batch and message) and
  error_message with LogValidator.processRecordErrors' summary. Compressed batches and those of many
  records are validated on worker threads (produce.validation.threads), so the event loop keeps serving.
  A batch larger than the topic's max.message.bytes, else message.max.bytes (1048588), gets
  MESSAGE_TOO_LARGE. The leader assigns offsets and stamps its leader epoch without re-encoding, then
  answers per acks: 0 no response, 1 after the local append, -1 (all) once the high watermark passes the
  batch. A topic with message.timestamp.type=LogAppendTime (or the broker's log.message.timestamp.type)
  gets each batch stamped with the leader's append time and that time back in log_append_time_ms (-1 for
  CreateTime), as Kafka's LogValidator and UnifiedLog.append.
- acks=all honours min.insync.replicas: NOT_ENOUGH_REPLICAS before appending when the ISR is too small,
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if it shrank while waiting, REQUEST_TIMED_OUT after the request timeout.
- NOT_LEADER_OR_FOLLOWER on a non-leader (clients refresh metadata), UNKNOWN_TOPIC_OR_PARTITION for
  unknown partitions. Idempotent producers: duplicates answered with their first offsets,
  OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH as Kafka.
- v13 names topics by id (UNKNOWN_TOPIC_ID for an id the broker does not know); v12 adds partitions to
  transactions (KIP-890 part 2, below).
- With an authorizer, a topic the principal may not WRITE gets TOPIC_AUTHORIZATION_FAILED; internal
  topics (``__consumer_offsets``) take no client's records: INVALID_TOPIC_EXCEPTION (Kafka's
  KafkaApis.handleProduceRequest, then ReplicaManager.appendToLocalLog).
- v10+ (KIP-951): a partition answered NOT_LEADER_OR_FOLLOWER carries the current leader and its epoch,
  and the response the leader's endpoint on the request's listener.
- Transactional batches (KIP-98) need a transactional id the principal may WRITE (with an authorizer),
  else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition (KafkaApis.handleProduceRequest). The
  leader opens the producer's transaction at its first transactional batch (the last stable offset
  stays there until the coordinator's marker); a plain batch from a producer in a transaction is
  INVALID_TXN_STATE. Before v12 (KIP-890 part 1, while transaction.partition.verification.enable) a
  partition whose producer has no transaction open here at its epoch is first verified with the
  transaction coordinator (AddPartitionsToTxn v5 ``verify_only`` from this broker): one the transaction
  does not hold is INVALID_TXN_STATE ("Partition was not added to the transaction"; TRANSACTION_ABORTABLE
  at v11), so a late batch of an ended transaction cannot open a hanging one. From v12 (KIP-890 part 2,
  transaction version 2 producers send no AddPartitionsToTxn) the partition is added to the transaction
  by its coordinator instead (AddPartitionsToTxn v5), asked again while it answers
  CONCURRENT_TRANSACTIONS for up to add.partitions.to.txn.retry.backoff.max.ms. A refusal is answered for
  the partition and nothing of it appended (a busy or unreachable coordinator as NOT_ENOUGH_REPLICAS,
  except CONCURRENT_TRANSACTIONS from v12, answered as it is), and until the producer's first batch there
  is appended no batch of a higher sequence is (OUT_OF_ORDER_SEQUENCE_NUMBER, Kafka's
  VerificationStateEntry). A transactional id's requests go through their verification one at a time, in
  the order they came, so a pipelined later request never reaches the append queue before an earlier one
  still waiting for the coordinator (Kafka reads one request per connection at a time). A transactional
  batch whose producer has no transaction open there when it is appended (a marker ended it after the
  check, or ended the verification after the coordinator's answer) is INVALID_TXN_STATE (Kafka's
  VerificationGuard).
- A partition's records must be exactly one record batch (ProduceRequest.validateRecords): none or more
  than one is INVALID_RECORD and nothing of it appended.
- acks other than -1, 0 and 1: INVALID_REQUIRED_ACKS for every partition and nothing appended (Kafka's
  ReplicaManager.appendRecords, isValidRequiredAcks).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from kio.schema.produce.v11 import response as r11
from kio.schema.produce.v13 import response as r13
from kio.schema.produce.v13.request import ProduceRequest as ProduceRequestV13

from epochkraft.broker.replica_manager import ProduceResult
from epochkraft.broker.transaction_service import ProduceAdds, produce_operation
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import CRC_START, LOG_OVERHEAD, TRANSACTIONAL_BIT
from epochkraft.protocol.versions import downgrade_response
from epochkraft.security.authorizer import AclOperation, ResourceType
from epochkraft.security.topics import INTERNAL_TOPICS
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, ms

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

# The client id Kafka's own tools use to write internal topics (AdminUtils.ADMIN_CLIENT_ID).
ADMIN_CLIENT_ID = "__admin_client"

ATTRIBUTES_LOW_BYTE = CRC_START + 1
TOPIC_IDS_FROM = 13
LEADER_HINTS_FROM = 10  # KIP-951: current leader and its endpoint on NOT_LEADER_OR_FOLLOWER


class _Partition(Protocol):
    """What the handler reads of a partition's data, the same in every version."""

    @property
    def index(self) -> int: ...
    @property
    def records(self) -> bytes | None: ...


class _Topic(Protocol):
    """What the handler reads of a topic's data in every version (its name, or id from v13, apart)."""

    @property
    def partition_data(self) -> Sequence[_Partition]: ...


NOT_VERIFIED = ProduceAdds({}, {})  # no transactional id: no partition verified

# (error, base offset, log append time, log start offset, message, record errors)
Answer = tuple[ErrorCode, int, int, int, str | None, tuple[tuple[int, str], ...]]


def _append_time(log_append_time_ms: int) -> datetime.datetime | None:
    """log_append_time_ms on the wire: -1 (None) for CreateTime, else the leader's append time."""
    if log_append_time_ms < 0:
        return None
    return datetime.datetime.fromtimestamp(log_append_time_ms / 1000, tz=datetime.UTC)


def _has_transactional_records(request: rt.Produce) -> bool:
    """Kafka's ProduceRequest.hasTransactionalRecords: a partition's first batch is transactional (the
    attributes' low byte sits at offset 22 of a batch)."""
    for t in request.topic_data:
        for p in t.partition_data:
            records = p.records
            if (
                records is not None
                and len(records) > ATTRIBUTES_LOW_BYTE
                and records[ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_BIT
            ):
                return True
    return False


async def _verify_transaction(
    ctx: RequestContext,
    request: rt.Produce,
    names: list[str | None],
    refused: dict[str, tuple[ErrorCode, str | None]],
) -> ProduceAdds:
    """The partitions the transaction coordinator did not verify (or, from v12, add) in the producer's
    transaction, and the guard of each transactional batch's verification."""
    if request.transactional_id is None:
        return NOT_VERIFIED
    topics: Sequence[_Topic] = request.topic_data
    batches = {
        (name, p.index): p.records or b""
        for t, name in zip(topics, names, strict=True)
        if name is not None and name not in refused
        for p in t.partition_data
    }
    operation = produce_operation(ctx.api_version)
    return await ctx.broker.transactions.add_for_produce(request.transactional_id, batches, operation)


async def _refused_append(error: ErrorCode, message: str | None) -> ProduceResult:
    return ProduceResult(error, message=message)


def _complete_batches(records: bytes, most: int = 2) -> int:
    """How many whole batches ``records`` holds, counting to ``most``, as Kafka's batch iterator reads them
    (a length that does not fit in the bytes left ends the iteration)."""
    count = pos = 0
    while count < most and len(records) - pos >= LOG_OVERHEAD:
        end = pos + LOG_OVERHEAD + int.from_bytes(records[pos + 8 : pos + LOG_OVERHEAD], "big", signed=True)
        if end <= pos + LOG_OVERHEAD or end > len(records):
            break
        count, pos = count + 1, end
    return count


def _one_batch(records: bytes | None) -> bool:
    """Kafka's ProduceRequest.validateRecords from v3: exactly one record batch per partition (else
    INVALID_RECORD), so the leader's transaction verification, which reads the first batch, sees every
    batch it appends."""
    return records is None or _complete_batches(records) == 1


def _answers(partitions, error: ErrorCode, message: str | None) -> list[Answer]:
    return [(error, -1, -1, -1, message, ())] * len(partitions)


@api(key=0, name="Produce", versions=(3, TOPIC_IDS_FROM), listeners=(BROKER,))
async def handle(request: rt.Produce, ctx: RequestContext):
    started = time.monotonic()
    version = ctx.api_version
    by_id = version >= TOPIC_IDS_FROM
    topics: Sequence[_Topic] = request.topic_data
    names: list[str | None] = []
    keys: Sequence[uuid.UUID | str | None]  # each topic's id (v13) or name, as its answer names it
    if isinstance(request, ProduceRequestV13):
        cached = ctx.broker.cache.image.topics  # the one read before the append awaits
        ids = []
        for with_id in request.topic_data:
            info = cached.get(with_id.topic_id) if with_id.topic_id is not None else None
            names.append(info.name if info else None)
            ids.append(with_id.topic_id)
        keys = ids
    else:
        for with_name in request.topic_data:
            names.append(with_name.name)
        keys = names
    refused: dict[str, tuple[ErrorCode, str | None]] = {}
    for known in filter(None, names):
        if not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, known):
            refused[known] = (ErrorCode.topic_authorization_failed, None)
        elif known in INTERNAL_TOPICS and ctx.header.client_id != ADMIN_CLIENT_ID:
            refused[known] = (ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {known}")
    # one Answer per partition, in request order
    results: list[list[Answer]] = []
    if request.acks not in (-1, 0, 1):
        results = [_answers(t.partition_data, ErrorCode.invalid_required_acks, None) for t in topics]
    elif _has_transactional_records(request) and not (
        request.transactional_id is not None
        and ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    ):
        error = ErrorCode.transactional_id_authorization_failed
        results = [_answers(t.partition_data, error, None) for t in topics]
    else:
        manager = ctx.broker.replica_manager
        timeout = ms(request.timeout)
        adds = await _verify_transaction(ctx, request, names, refused)
        appends = [
            _refused_append(*adds.refused[(name, p.index)])
            if (name, p.index) in adds.refused
            else _refused_append(ErrorCode.invalid_record, None)
            if not _one_batch(p.records)
            else manager.append(
                name,
                p.index,
                p.records or b"",
                request.acks,
                timeout,
                verification_guard=adds.guards.get((name, p.index)),
            )
            for t, name in zip(topics, names, strict=True)
            if name is not None and name not in refused
            for p in t.partition_data
        ]
        done = iter(await asyncio.gather(*appends))
        ctx.broker.observe_produce(time.monotonic() - started)
        for t, name in zip(topics, names, strict=True):
            if name is None:
                results.append(_answers(t.partition_data, ErrorCode.unknown_topic_id, None))
                continue
            if name in refused:
                results.append(_answers(t.partition_data, *refused[name]))
                continue
            answers = [next(done) for _ in t.partition_data]
            results.append(
                [
                    (
                        r.error,
                        r.base_offset,
                        r.log_append_time,
                        r.log_start_offset,
                        r.message,
                        r.record_errors,
                    )
                    for r in answers
                ]
            )
    if request.acks == 0:
        return None
    schema = r13 if by_id else r11
    response = schema.ProduceResponse(
        responses=tuple(
            schema.TopicProduceResponse(
                **({"topic_id": key} if by_id else {"name": key}),
                partition_responses=tuple(
                    schema.PartitionProduceResponse(
                        index=p.index,
                        error_code=error,
                        base_offset=base_offset,
                        log_append_time=_append_time(log_append_time),
                        log_start_offset=log_start_offset,
                        record_errors=tuple(
                            schema.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=text)
                            for i, text in record_errors
                        ),
                        error_message=message,
                    )
                    for p, (
                        error,
                        base_offset,
                        log_append_time,
                        log_start_offset,
                        message,
                        record_errors,
                    ) in zip(t.partition_data, answers, strict=True)
                ),
            )
            for t, key, answers in zip(topics, keys, results, strict=True)
        ),
        throttle_time=NO_THROTTLE,
    )
    if version >= LEADER_HINTS_FROM:
        response = _with_leader_hints(response, names, ctx, schema)
    return downgrade_response(response, version)


def _with_leader_hints(response, names: list[str | None], ctx: RequestContext, schema):
    """KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER names the current leader and its epoch, and the
    response carries that leader's endpoint on this listener, so the producer redirects without a Metadata
    round trip (KafkaApis.handleProduceRequest, getCurrentLeader)."""
    if not any(
        p.error_code == ErrorCode.not_leader_or_follower
        for topic in response.responses
        for p in topic.partition_responses
    ):
        return response  # nothing to hint: rebuilding it entity by entity would give the same response
    # the leaders now, after the append, from one image (KafkaApis.handleProduceRequest asks getCurrentLeader
    # in its response callback): the image the replica manager's NOT_LEADER_OR_FOLLOWER came from
    image = ctx.broker.cache.image
    endpoints: dict[int, object] = {}
    topics = []
    for topic, name in zip(response.responses, names, strict=True):
        partitions = []
        for p in topic.partition_responses:
            reg = image.partition(name, p.index) if name is not None else None
            if p.error_code == ErrorCode.not_leader_or_follower and reg is not None and reg.leader >= 0:
                leader = schema.LeaderIdAndEpoch(leader_id=reg.leader, leader_epoch=reg.leader_epoch)
                p = dataclasses.replace(p, current_leader=leader)
                endpoint = image.endpoint(reg.leader, ctx.listener_name)
                registration = image.brokers.get(reg.leader)
                if endpoint is not None and registration is not None:
                    endpoints[reg.leader] = schema.NodeEndpoint(
                        node_id=reg.leader, host=endpoint.host, port=endpoint.port, rack=registration.rack
                    )
            partitions.append(p)
        topics.append(dataclasses.replace(topic, partition_responses=tuple(partitions)))
    return dataclasses.replace(
        response, responses=tuple(topics), node_endpoints=tuple(endpoints[i] for i in sorted(endpoints))
    )
