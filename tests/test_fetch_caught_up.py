"""A leader's read of a caught-up partition (the fetch offset at the end of what the reader may read: the
log end for a follower, the high watermark for a consumer, the last stable offset for read_committed)
skips the log and answers what the log's read answers: no records, the same high watermark, log start and
last stable offset, no aborted transactions; a follower's position is recorded all the same (ISR, high
watermark). Each case is read twice on two brokers built alike, once by the fast path and once through
the log (``CAUGHT_UP_READS_THE_LOG_FOR_TESTS``), sessionless and in an incremental fetch session."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from epochkraft.broker import fetch_messages as fm
from epochkraft.broker.fetch_messages import FetchParams, PartitionFetch
from epochkraft.broker.fetch_session import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchManager,
    FetchSessionCache,
    PartitionData,
    SessionResponse,
)
from epochkraft.broker.log import LogManager
from epochkraft.broker.log.partition_log import PartitionLog
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.replica_manager import ReplicaManager, log_config
from epochkraft.broker.settings import BrokerSettings
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    BrokerEndpoint,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from epochkraft.protocol.records import build_batch

TOPIC_ID = uuid.UUID(int=7)
EPOCHS = {1: 101, 2: 102}
LEADER_EPOCH = 3
FOLLOWER = 2


class Broker:
    """Broker 1 leading foo-0 (replicas 1 and 2, both in the ISR) over real logs: 3 records, then an
    open transaction of 2, so the log ends at 5, the last stable offset is 3 and the high watermark waits
    for broker 2."""

    def __init__(self, path: Path) -> None:
        settings = BrokerSettings()
        self.cache = MetadataCache(1)
        self.manager = ReplicaManager(
            1, settings, LogManager(path, log_config(settings)), self.cache, lambda: EPOCHS[1], _unused
        )
        self.sessions = FetchManager(FetchSessionCache(10, 1000))

    async def start(self) -> Broker:
        records: list[object] = []
        for broker_id, epoch in EPOCHS.items():
            endpoint = BrokerEndpoint(name="P", host="h", port=broker_id, security_protocol=0)
            records += [
                RegisterBrokerRecord(
                    broker_id=broker_id,
                    incarnation_id=uuid.UUID(int=broker_id),
                    broker_epoch=epoch,
                    end_points=(endpoint,),
                    rack=None,
                    fenced=True,
                    in_controlled_shutdown=False,
                ),
                UnfenceBrokerRecord(id=broker_id, epoch=epoch),
            ]
        records += [
            TopicRecord(name="foo", topic_id=TOPIC_ID),
            PartitionRecord(
                partition_id=0,
                topic_id=TOPIC_ID,
                replicas=(1, 2),
                isr=(1, 2),
                leader=1,
                leader_epoch=LEADER_EPOCH,
                partition_epoch=1,
            ),
        ]
        changes = Changes()
        for offset, record in enumerate(records):
            self.cache.apply(offset, record, changes)
        await self.manager.on_metadata(changes)
        plain = build_batch([(None, b"v", (), 1_000)] * 3)
        txn = build_batch(
            [(None, b"t", (), 1_000)] * 2,
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
        for batch in (plain, txn):
            result = await self.manager.append("foo", 0, batch, acks=1, timeout_ms=1000)
            assert result.error == ErrorCode.none
        return self

    async def fetch(self, params: FetchParams, wanted: PartitionData) -> list:
        return await fm.fetch_messages(self.manager, params, [PartitionFetch("foo", 0, wanted)])

    async def session_fetch(self, params: FetchParams, wanted: PartitionData) -> list[SessionResponse]:
        """A full fetch opening a session, then two incremental ones naming nothing."""
        responses = []
        context = self.sessions.new_context(
            16, INVALID_SESSION_ID, INITIAL_EPOCH, params.is_follower, {(TOPIC_ID, 0): wanted}, [], 0
        )
        session_id = INVALID_SESSION_ID
        for epoch in (INITIAL_EPOCH, 1, 2):
            if epoch != INITIAL_EPOCH:
                context = self.sessions.new_context(16, session_id, epoch, params.is_follower, {}, [], 0)
            partitions = context.partitions()
            answers = await fm.fetch_messages(
                self.manager, params, [PartitionFetch("foo", key[1], data) for key, data in partitions]
            )
            response = context.response(list(zip([k for k, _ in partitions], answers, strict=True)), 0)
            session_id = response.session_id
            responses.append(response._replace(session_id=0))  # ids are random per broker
        return responses

    def state(self) -> tuple[int, int, int, bool]:
        """The leader's view after the fetch: high watermark, last stable offset, the follower's position
        and whether the follower's fetch counted as caught up."""
        replica = self.manager.replica("foo", 0)
        assert replica is not None
        remote = replica.partition.remote[FOLLOWER]
        return (
            replica.partition.high_watermark,
            replica.last_stable_offset,
            remote.log_end_offset,
            remote.last_caught_up_ms > 0,
        )


async def _unused(request: object) -> object:
    raise AssertionError("no AlterPartition expected")


def consumer(read_committed: bool) -> FetchParams:
    return FetchParams(-1, -1, 0, 1, 1 << 20, read_committed)


def follower() -> FetchParams:
    return FetchParams(FOLLOWER, EPOCHS[FOLLOWER], 0, 1, 1 << 20, False)


def at(offset: int, last_fetched_epoch: int = -1) -> PartitionData:
    return PartitionData(offset, 1 << 20, LEADER_EPOCH, last_fetched_epoch)


# (reader, its fetch, whether the follower fetched to the log end first, so the high watermark is at 5)
CASES = {
    "consumer at the high watermark below the log end": (consumer(False), at(0), False),
    "consumer at the high watermark": (consumer(False), at(5), True),
    "read_committed consumer at the last stable offset below the high watermark": (
        consumer(True),
        at(3),
        True,
    ),
    "follower at the log end": (follower(), at(5, LEADER_EPOCH), False),
    "follower at the log end again": (follower(), at(5, LEADER_EPOCH), True),
}


async def _read_both_ways(tmp_path, monkeypatch, follower_first, read):
    """``read(broker)`` on a broker whose caught-up reads take the fast path and on one reading the log
    (after the follower's fetch of the whole log if ``follower_first``); the log's reads counted."""
    calls: list[int] = []
    read_chunks = PartitionLog.read_chunks

    def counted(self, *args, **kwargs):
        calls.append(1)
        return read_chunks(self, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, "read_chunks", counted)
    results = []
    for name, through_log in (("fast", False), ("log", True)):
        broker = await Broker(tmp_path / name).start()
        if follower_first:
            await broker.fetch(follower(), at(5, LEADER_EPOCH))
        monkeypatch.setattr(fm, "CAUGHT_UP_READS_THE_LOG_FOR_TESTS", through_log)
        calls.clear()
        results.append((await read(broker), broker.state(), len(calls)))
    (fast, fast_state, fast_reads), (full, full_state, full_reads) = results
    assert fast_reads == 0 and full_reads > 0  # the fast path was taken, and only by the first
    return fast, fast_state, full, full_state


@pytest.mark.parametrize("case", CASES)
async def test_caught_up_partition_answered_as_the_log_read_answers(tmp_path, monkeypatch, case):
    params, wanted, follower_first = CASES[case]

    async def read(broker: Broker) -> list:
        return await broker.fetch(params, wanted)

    fast, fast_state, full, full_state = await _read_both_ways(tmp_path, monkeypatch, follower_first, read)
    assert fast == full
    assert fast_state == full_state
    assert fast[0].error == ErrorCode.none and not fast[0].records


@pytest.mark.parametrize("case", CASES)
async def test_caught_up_partition_in_a_fetch_session(tmp_path, monkeypatch, case):
    """FetchSessionTest's incremental fetches over caught-up partitions: the full fetch answers the
    partition, the incremental ones only when something changed, the same either way."""
    params, wanted, follower_first = CASES[case]

    async def read(broker: Broker) -> list[SessionResponse]:
        return await broker.session_fetch(params, wanted)

    fast, fast_state, full, full_state = await _read_both_ways(tmp_path, monkeypatch, follower_first, read)
    assert fast == full
    assert fast_state == full_state
    assert len(fast[0].answers) == 1  # the full fetch answers the partition


async def test_follower_position_recorded_by_a_caught_up_fetch(tmp_path):
    """PartitionTest.testUpdateFollowerFetchState: a follower's fetch at the log end records its position
    and moves the high watermark, whichever way it was read."""
    broker = await Broker(tmp_path).start()
    assert broker.state()[0] == 0
    (answer,) = await broker.fetch(follower(), at(5, LEADER_EPOCH))
    assert broker.state() == (5, 3, 5, True)
    assert answer.high_watermark == 5 and answer.last_stable_offset == 3
