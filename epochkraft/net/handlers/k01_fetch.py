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
- The response is encoded here, not by kio: record bytes read from the log go to the socket as they are,
  never copied into an encoding buffer. kio's single-buffer encoding took about an eighth of a broker's
  time under RF 3 produce load (README, Benchmarks).
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any, NamedTuple

from epochkraft.broker.partition import Role
from epochkraft.net.handlers._util import ms
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import write_uvarint


class Answer(NamedTuple):
    """One partition of the response."""

    index: int
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: list[bytes | memoryview] | None = None  # None: null records (and aborted transactions)
    diverging: tuple[int, int] | None = None  # (epoch, end offset) for a diverging follower, v12+


def _follower_identity(request, version):
    if version >= 15:
        state = request.replica_state
        return state.replica_id, state.replica_epoch
    return request.replica_id, -1


def _read(node, topic_name, p, replica_id, replica_epoch, is_follower, budget) -> tuple[Answer, int]:
    """One partition's answer (and the bytes it used)."""
    manager = node.replica_manager
    replica = manager.replica(topic_name, p.partition)
    if replica is None:
        known = node.cache.topic(topic_name)
        if known is None or p.partition not in known.partitions:
            return Answer(p.partition, ErrorCode.unknown_topic_or_partition), 0
        return Answer(p.partition, ErrorCode.not_leader_or_follower), 0
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
        return Answer(p.partition, error), 0
    hw, start, end = part.high_watermark, plog.log_start_offset, plog.log_end_offset
    last_fetched = getattr(p, "last_fetched_epoch", -1)
    if last_fetched >= 0:
        epoch, epoch_end = plog.epochs.end_offset_for(last_fetched)
        if epoch == -1 or epoch < last_fetched or epoch_end < p.fetch_offset:
            return Answer(p.partition, ErrorCode.none, hw, start, [], (epoch, epoch_end)), 0
    if p.fetch_offset < start or p.fetch_offset > end:
        return Answer(p.partition, ErrorCode.offset_out_of_range, hw, start), 0
    limit = end if is_follower else hw
    chunks = plog.read_chunks(p.fetch_offset, min(p.partition_max_bytes, max(budget, 1)), max_offset=limit)
    if is_follower:
        manager.on_follower_fetch(replica, replica_id, replica_epoch, p.fetch_offset)
        hw = part.high_watermark
    return Answer(p.partition, ErrorCode.none, hw, start, chunks), sum(map(len, chunks))


@api(key=1, name="Fetch", versions=(4, 16), listeners=(BROKER,))
async def handle(request, ctx):
    node = ctx.node
    version = ctx.api_version
    replica_id, replica_epoch = _follower_identity(request, version)
    is_follower = replica_id >= 0
    names: list[tuple[Any, str | None]] = []
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
        answers: list[tuple[Any, str | None, list[Answer]]] = []
        waits = []
        for topic, name in names:
            parts = []
            for p in topic.partitions:
                if name is None:
                    parts.append(Answer(p.partition, ErrorCode.unknown_topic_id))
                    continue
                answer, used = _read(node, name, p, replica_id, replica_epoch, is_follower, budget)
                budget -= used
                total += used
                parts.append(answer)
                replica = node.replica_manager.replica(name, p.partition)
                if replica is not None:
                    waits.append(replica.data_event)
            answers.append((topic, name, parts))
        remaining = deadline - time.monotonic()
        errors = any(a.error != ErrorCode.none or a.diverging for _, _, ps in answers for a in ps)
        if total >= max(request.min_bytes, 1) or errors or remaining <= 0 or not waits:
            break
        await _wait_any(waits, remaining)
    node.observe_fetch(is_follower, time.monotonic() - started)
    return encode_response(version, [(t.topic_id if version >= 13 else name, ps) for t, name, ps in answers])


async def _wait_any(events, timeout):
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


# ---- response encoding --------------------------------------------------------------------------------
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_TOP = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id (v7+)
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable offset, log start (v5+)
_PARTITION_V4 = struct.Struct(">ihqq")
_DIVERGING = struct.Struct(">bbbiqb")  # one tagged field: tag 0, 13 bytes: epoch, end offset, no tags


def encode_response(version: int, topics: list[tuple[Any, list[Answer]]]) -> list[bytes | memoryview]:
    """The response body as pieces: encoded fields, and each partition's record buffers as the log read
    them, which the server writes to the socket without joining. ``topics`` holds (topic id for v13+,
    else name; answers). Tests compare the joined bytes with kio's at every version."""
    flexible = version >= 12
    pieces: list[bytes | memoryview] = []
    out = bytearray()

    def length(n: int) -> None:  # array, string or bytes length; -1 is null
        if flexible:
            write_uvarint(out, n + 1)
        else:
            out.extend(_I32.pack(n))

    out += _TOP.pack(0, 0, 0) if version >= 7 else _I32.pack(0)
    length(len(topics))
    for topic, answers in topics:
        if version >= 13:
            out += topic.bytes
        else:
            name = (topic or "").encode()
            if flexible:
                length(len(name))
            else:
                out += _I16.pack(len(name))
            out += name
        length(len(answers))
        for a in answers:
            if version >= 5:
                out += _PARTITION.pack(
                    a.index, a.error, a.high_watermark, a.high_watermark, a.log_start_offset
                )
            else:
                out += _PARTITION_V4.pack(a.index, a.error, a.high_watermark, a.high_watermark)
            length(-1 if a.records is None else 0)  # aborted transactions: none (no transactions)
            if version >= 11:
                out += _I32.pack(-1)  # preferred read replica
            if a.records is None:
                length(-1)
            else:
                length(sum(map(len, a.records)))
                if a.records:
                    pieces.append(bytes(out))
                    pieces.extend(a.records)
                    out = bytearray()
            if flexible:
                if a.diverging is None:
                    out.append(0)  # no tagged fields
                else:
                    out += _DIVERGING.pack(1, 0, 13, a.diverging[0], a.diverging[1], 0)
        if flexible:
            out.append(0)  # topic tagged fields
    if flexible:
        out.append(0)  # response tagged fields
    pieces.append(bytes(out))
    return pieces
