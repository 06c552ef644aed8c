"""Fetch (key 1), versions 4-16, broker listener: consumers and follower replicas.

- Consumers read up to the high watermark from the leader, with MaxWait/MinBytes long polling (woken as
  soon as the HW moves). OFFSET_OUT_OF_RANGE outside the log, NOT_LEADER_OR_FOLLOWER on a non-leader,
  FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when the client's leader epoch is older / newer.
- Followers identify themselves with ReplicaState{ReplicaId, ReplicaEpoch} (v15+, KIP-903) or ReplicaId
  (older versions, broker epoch unknown). The leader refuses a fetch whose broker epoch is older than the
  metadata cache's (NOT_LEADER_OR_FOLLOWER), answers a diverging LastFetchedEpoch (v12+) with
  DivergingEpoch and no data, reads up to its log end, and records the follower's position, which may
  expand the ISR and advance the high watermark.
- v13+ address topics by id (UNKNOWN_TOPIC_ID), older versions by name. Fetch sessions are not kept:
  every response is a full one (session id 0), which clients accept.
"""

from __future__ import annotations

import asyncio
import importlib
import time

from kio.schema.fetch.v16 import response as r16

from epochkraft.broker.partition import Role
from epochkraft.net.handlers._util import NO_THROTTLE, ms
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import response_class
from epochkraft.protocol.versions import convert

NO_DIVERGENCE = r16.EpochEndOffset(epoch=-1, end_offset=-1)


def _partition(index, error, hw=-1, start=-1, records=None, diverging=NO_DIVERGENCE):
    return r16.PartitionData(
        partition_index=index,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=hw,
        log_start_offset=start,
        diverging_epoch=diverging,
        aborted_transactions=None if records is None else (),
        preferred_read_replica=-1,
        records=records,
    )


def _follower_identity(request, version):
    if version >= 15:
        state = request.replica_state
        return state.replica_id, state.replica_epoch
    return request.replica_id, -1


def _read(node, topic_name, p, replica_id, replica_epoch, is_follower, budget):
    """One partition's answer (and the bytes it used)."""
    manager = node.replica_manager
    replica = manager.replica(topic_name, p.partition)
    if replica is None:
        known = node.cache.topic(topic_name)
        if known is None or p.partition not in known.partitions:
            return _partition(p.partition, ErrorCode.unknown_topic_or_partition), 0
        return _partition(p.partition, ErrorCode.not_leader_or_follower), 0
    part = replica.partition
    plog = replica.log
    if is_follower:
        error = part.check_follower_fetch(replica_id, replica_epoch, p.current_leader_epoch, node.cache)
    else:
        error = ErrorCode.none
        if p.current_leader_epoch >= 0 and p.current_leader_epoch < part.leader_epoch:
            error = ErrorCode.fenced_leader_epoch
        elif p.current_leader_epoch > part.leader_epoch:
            error = ErrorCode.unknown_leader_epoch
        elif part.role != Role.LEADER:
            error = ErrorCode.not_leader_or_follower
    if error != ErrorCode.none:
        return _partition(p.partition, error), 0
    hw, start, end = part.high_watermark, plog.log_start_offset, plog.log_end_offset
    last_fetched = getattr(p, "last_fetched_epoch", -1)
    if last_fetched >= 0:
        epoch, epoch_end = plog.epochs.end_offset_for(last_fetched)
        if epoch == -1 or epoch < last_fetched or epoch_end < p.fetch_offset:
            diverging = r16.EpochEndOffset(epoch=epoch, end_offset=epoch_end)
            return _partition(p.partition, ErrorCode.none, hw, start, b"", diverging), 0
    if p.fetch_offset < start or p.fetch_offset > end:
        return _partition(p.partition, ErrorCode.offset_out_of_range, hw, start), 0
    limit = end if is_follower else hw
    data = plog.read(p.fetch_offset, min(p.partition_max_bytes, max(budget, 1)), max_offset=limit)
    if is_follower:
        manager.on_follower_fetch(replica, replica_id, replica_epoch, p.fetch_offset)
        hw = part.high_watermark
    return _partition(p.partition, ErrorCode.none, hw, start, data), len(data)


@api(key=1, name="Fetch", versions=(4, 16), listeners=(BROKER,))
async def handle(request, ctx):
    node = ctx.node
    version = ctx.api_version
    replica_id, replica_epoch = _follower_identity(request, version)
    is_follower = replica_id >= 0
    names: list[tuple[object, str | None]] = []
    for topic in request.topics:
        if version >= 13:
            info = node.cache.topics.get(topic.topic_id)
            names.append((topic, info.name if info else None))
        else:
            names.append((topic, topic.topic))
    deadline = time.monotonic() + ms(request.max_wait) / 1000
    started = time.monotonic()
    while True:
        budget = request.max_bytes
        total = 0
        answers = []
        waits = []
        for topic, name in names:
            parts = []
            for p in topic.partitions:
                if name is None:
                    parts.append(_partition(p.partition, ErrorCode.unknown_topic_id))
                    continue
                data, used = _read(node, name, p, replica_id, replica_epoch, is_follower, budget)
                budget -= used
                total += used
                parts.append(data)
                replica = node.replica_manager.replica(name, p.partition)
                if replica is not None:
                    waits.append(replica.data_event)
            answers.append((topic, name, parts))
        remaining = deadline - time.monotonic()
        errors = any(
            part.error_code != ErrorCode.none or part.diverging_epoch.epoch >= 0
            for _, _, ps in answers
            for part in ps
        )
        if total >= max(request.min_bytes, 1) or errors or remaining <= 0 or not waits:
            break
        await _wait_any(waits, remaining)
    node.observe_fetch(is_follower, time.monotonic() - started)
    return _build(answers, version)


async def _wait_any(events, timeout):
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


def _build(answers, version):
    if version >= 13:
        responses = tuple(
            r16.FetchableTopicResponse(topic_id=t.topic_id, partitions=tuple(ps)) for t, _, ps in answers
        )
        response = r16.FetchResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0, responses=responses
        )
        if version == 16:
            return response
        return convert(response, response_class(1, version))
    cls = response_class(1, version)
    module = importlib.import_module(cls.__module__)
    responses = tuple(
        module.FetchableTopicResponse(
            topic=name or "", partitions=tuple(convert(p, module.PartitionData) for p in ps)
        )
        for _, name, ps in answers
    )
    fields = {
        "throttle_time": NO_THROTTLE,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": responses,
    }
    return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})
