"""The replica fetcher: a failure of any kind is logged and the fetcher starts again; once stopped it stays
stopped; its requests go through a fetch session with the leader (KIP-227)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from dataclasses import dataclass, field

import pytest
import structlog

from epochkraft.broker.fetcher import ReplicaFetcher
from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.broker.settings import BrokerSettings
from epochkraft.metadata.image import MetadataImage
from epochkraft.metadata.registrations import Endpoint
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.fetch_response import Answer, encode_response
from epochkraft.protocol.framing import (
    decode_entity,
    decode_request_body,
    encode_entity,
    parse_request_header,
)


class FailingImage(MetadataImage):
    """A metadata image whose endpoint lookup raises the first ``failures`` times (an injected fault)."""

    def __init__(self, failures: int) -> None:
        super().__init__(1)
        self.failures = failures
        self.lookups = 0

    def endpoint(self, broker_id: int, *args, **kwargs):
        self.lookups += 1
        if self.lookups <= self.failures:
            raise RuntimeError("injected fetcher failure")
        return super().endpoint(
            broker_id, *args, **kwargs
        )  # unknown broker: the fetcher waits and asks again


def failing_cache(failures: int) -> MetadataCache:
    cache = MetadataCache(1)
    cache.publish(FailingImage(failures), 0)
    return cache


@dataclass
class Manager:
    cache: MetadataCache
    node_id: int = 1
    settings: BrokerSettings = field(default_factory=BrokerSettings)


@dataclass
class Replica:
    key: tuple[str, int] = ("foo", 0)


async def test_a_failed_fetcher_logs_and_restarts_and_a_stopped_one_stays_stopped():
    manager = Manager(failing_cache(failures=2))
    image = manager.cache.image
    assert isinstance(image, FailingImage)
    with structlog.testing.capture_logs() as logs:
        fetcher = ReplicaFetcher(2, manager, lambda: 101, unsafe_pre_kip903=False)
        fetcher.add(Replica())
        for _ in range(100):
            if image.lookups > 2:
                break
            await asyncio.sleep(0.05)
    assert fetcher.restarts == 2 and not fetcher._task.done(), "restarted, not vanished"
    failures = [e for e in logs if e["event"] == "replica fetcher failed; restarting"]
    assert len(failures) == 2 and failures[0]["log_level"] == "error"
    await fetcher.stop()
    assert fetcher._task.done() and fetcher.stopped
    fetcher.add(Replica())
    assert fetcher.partitions == {}, "a stopped fetcher takes no partition"
    lookups = image.lookups
    await asyncio.sleep(0.3)
    assert image.lookups == lookups, "nothing runs after stop"


@dataclass
class _Epochs:
    latest_epoch: int = 3


@dataclass
class _Log:
    log_end_offset: int = 10
    log_start_offset: int = 0
    epochs: _Epochs = field(default_factory=_Epochs)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        return False


@dataclass
class _Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    leader_epoch: int = 3
    high_watermark: int = 0
    isr: tuple[int, ...] = (1, 2)

    def update_follower_high_watermark(self, leader_high_watermark: int, local_log_end: int) -> None:
        self.high_watermark = min(leader_high_watermark, local_log_end)


@dataclass
class _Producers:
    def on_high_watermark_updated(self, high_watermark: int) -> None:
        pass


@dataclass
class _Replica:
    partition: _Partition
    log: _Log = field(default_factory=_Log)
    producers: _Producers = field(default_factory=_Producers)

    @property
    def key(self) -> tuple[str, int]:
        return self.partition.topic, self.partition.index


def _answer(session_id: int, topic_id: uuid.UUID, high_watermarks: dict[int, int], error: int = 0) -> bytes:
    """A leader's v16 answer naming the given partitions (index: high watermark) with the session id."""
    answers = [Answer(index, 0, hw, 0) for index, hw in high_watermarks.items()]
    body = bytearray(
        b"".join(bytes(p) for p in encode_response(16, [(topic_id, answers)] if answers else []))
    )
    body[4:10] = struct.pack(">hi", error, session_id)
    return bytes(body)


def _on_the_wire(request):
    """The request as the leader decodes it (kio encodes and decodes each version's session fields)."""
    return decode_entity(type(request), encode_entity(request))


def _sent(request) -> dict[int, int]:
    return {p.partition: p.fetch_offset for t in request.topics for p in t.partitions}


def _forgotten(request) -> list[int]:
    return [i for t in request.forgotten_topics_data for i in t.partitions]


@pytest.mark.parametrize("unsafe", [False, True], ids=["v16", "v14"])
async def test_follower_fetches_incrementally_once_the_leader_keeps_a_session(unsafe):
    """The fetcher through its fetch session (KIP-227): a full first request; once the leader answers with a
    session id, only changed partitions are sent, an answer naming only some applies only those, a
    partition no longer fetched is forgotten, and a new connection starts a full session again."""
    topic_id = uuid.uuid4()
    manager = Manager(failing_cache(failures=0))  # no endpoint known: the fetch loop itself sends nothing
    fetcher = ReplicaFetcher(2, manager, lambda: 101, unsafe_pre_kip903=unsafe)
    a, b = _Replica(_Partition("foo", 0, topic_id)), _Replica(_Partition("foo", 1, topic_id))
    by_key = {(topic_id, 0): a, (topic_id, 1): b}
    for r in (a, b):
        fetcher.add(r)
    try:
        first = _on_the_wire(fetcher._request(fetcher._build([a, b])))
        assert (first.session_id, first.session_epoch) == (0, 0) and _sent(first) == {0: 10, 1: 10}
        assert not fetcher._apply(_answer(7, topic_id, {0: 4, 1: 5}), 0, by_key)
        assert (a.partition.high_watermark, b.partition.high_watermark) == (4, 5)

        a.log.log_end_offset = 12  # a fetched on; b idle
        second = _on_the_wire(fetcher._request(fetcher._build([a, b])))
        assert (second.session_id, second.session_epoch) == (7, 1)
        assert _sent(second) == {0: 12} and _forgotten(second) == []
        assert not fetcher._apply(_answer(7, topic_id, {1: 9}), 0, by_key), "absent partitions: unchanged"
        assert (a.partition.high_watermark, b.partition.high_watermark) == (4, 9)

        third = _on_the_wire(fetcher._request(fetcher._build([a])))  # b throttled out or removed
        assert (third.session_id, third.session_epoch) == (7, 2)
        assert _sent(third) == {} and _forgotten(third) == [1]
        assert not fetcher._apply(_answer(7, topic_id, {1: 20}), 0, by_key), "refused, fetched again at once"
        assert b.partition.high_watermark == 9
        assert (fetcher.session.session_id, fetcher.session.next_metadata.epoch) == (7, 0)

        fourth = _on_the_wire(fetcher._request(fetcher._build([a, b])))  # a new session, full
        assert (fourth.session_id, fourth.session_epoch) == (7, 0) and _sent(fourth) == {0: 12, 1: 10}
        assert not fetcher._apply(_answer(0, topic_id, {0: 6, 1: 9}), 0, by_key)
        fetcher.session.handle_error("new connection")
        fifth = _on_the_wire(fetcher._request(fetcher._build([a, b])))
        assert (fifth.session_id, fifth.session_epoch) == (0, 0) and _sent(fifth) == {0: 12, 1: 10}
    finally:
        await fetcher.stop()


@pytest.mark.parametrize(
    ("error", "backs_off"),
    [
        (ErrorCode.fetch_session_id_not_found, False),
        (ErrorCode.invalid_fetch_session_epoch, False),
        (ErrorCode.fetch_session_topic_id_error, True),
        (ErrorCode.unknown_server_error, True),
    ],
)
async def test_a_session_refusal_is_fetched_again_at_once(error, backs_off):
    """RemoteLeaderEndPoint.fetch: a session the leader refuses (or an answer the session refuses) gives
    no partitions, and the next request, a full one, goes out without a back-off; FETCH_SESSION_TOPIC_ID_ERROR
    is raised and backs off, as other errors do."""
    topic_id = uuid.uuid4()
    fetcher = ReplicaFetcher(2, Manager(failing_cache(failures=0)), lambda: 101, unsafe_pre_kip903=False)
    a = _Replica(_Partition("foo", 0, topic_id))
    fetcher.add(a)
    try:
        fetcher._request(fetcher._build([a]))
        assert not fetcher._apply(_answer(7, topic_id, {0: 4}), 0, {(topic_id, 0): a})
        fetcher._request(fetcher._build([a]))
        assert fetcher._apply(_answer(0, topic_id, {}, error=error), 0, {(topic_id, 0): a}) == backs_off
        assert fetcher.session.next_metadata.is_full and a.partition.high_watermark == 4
    finally:
        await fetcher.stop()


async def test_a_new_connection_starts_a_full_session():
    """A new connection to the leader (its endpoint changed) cannot continue the session the last one held:
    the next request is a full one asking for a new session (Kafka's FetchSessionHandler.handleError)."""
    topic_id = uuid.uuid4()
    manager = Manager(failing_cache(failures=0))
    fetcher = ReplicaFetcher(2, manager, lambda: 101, unsafe_pre_kip903=False)
    a = _Replica(_Partition("foo", 0, topic_id))
    try:
        manager.cache.image.endpoint = lambda *args, **kwargs: Endpoint("PLAINTEXT", "127.0.0.1", 1)
        first = fetcher._connect()  # no socket until a send
        fetcher._request(fetcher._build([a]))
        fetcher._apply(_answer(7, topic_id, {0: 1}), 0, {(topic_id, 0): a})
        assert not fetcher.session.next_metadata.is_full
        assert fetcher._connect() is first, "the same connection: the session goes on"
        assert not fetcher.session.next_metadata.is_full
        manager.cache.image.endpoint = lambda *args, **kwargs: Endpoint("PLAINTEXT", "127.0.0.1", 2)
        assert fetcher._connect() not in (None, first)
        request = fetcher._request(fetcher._build([a]))
        assert (request.session_id, request.session_epoch) == (7, 0) and _sent(request) == {0: 10}
    finally:
        await fetcher.stop()


class _SessionLeader:
    """A stand-in leader on loopback that keeps a fetch session: it opens session 9 on a full request, then
    answers incremental ones with what they name, and drops the connection at its third request. It records
    each request as (connection, session id, epoch, partitions sent, partitions forgotten)."""

    def __init__(self, topic_id: uuid.UUID) -> None:
        self.topic_id = topic_id
        self.requests: list[tuple[int, int, int, dict[int, int], list[int]]] = []
        self.connections = 0
        self.done = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                header = parse_request_header(frame)
                request = decode_request_body(header, frame)
                sent = _sent(request)
                self.requests.append(
                    (connection, request.session_id, request.session_epoch, sent, _forgotten(request))
                )
                if len(self.requests) == 3:
                    return  # the connection drops with the request unanswered
                if len(self.requests) >= 4:
                    self.done.set()
                await asyncio.sleep(0.05)  # the long poll
                body = _answer(9, self.topic_id, {i: 7 for i in sent})
                answer = struct.pack(">i", header.correlation_id) + b"\x00" + body
                writer.write(struct.pack(">i", len(answer)) + answer)
                await writer.drain()
        except asyncio.IncompleteReadError:
            return
        finally:
            writer.close()


@pytest.mark.net
@pytest.mark.timeout(30)
async def test_fetcher_keeps_a_leaders_session_and_starts_a_full_one_after_a_lost_connection():
    """The fetch loop against a leader keeping a session, over a real socket: the first request is full, the
    next ones incremental and empty while nothing changes, and after the connection drops the fetcher
    asks for a new session with a full request (Kafka's FetchSessionHandler.handleError); partitions
    removed are forgotten in one more request, and with none left no request is sent."""
    topic_id = uuid.uuid4()
    leader = _SessionLeader(topic_id)
    server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    manager = Manager(failing_cache(failures=0))
    manager.cache.image.endpoint = lambda *args, **kwargs: Endpoint("PLAINTEXT", "127.0.0.1", port)
    fetcher = ReplicaFetcher(2, manager, lambda: 101, unsafe_pre_kip903=False)
    a, b = _Replica(_Partition("foo", 0, topic_id)), _Replica(_Partition("foo", 1, topic_id))
    try:
        fetcher.add(a)
        fetcher.add(b)
        await asyncio.wait_for(leader.done.wait(), 20)
        fetcher.remove(a.key)  # while the fourth request is in flight
        fetcher.remove(b.key)
        await asyncio.sleep(0.5)
    finally:
        await fetcher.stop()
        server.close()
        await server.wait_closed()
    assert leader.requests == [
        (1, 0, 0, {0: 10, 1: 10}, []),
        (1, 9, 1, {}, []),
        (1, 9, 2, {}, []),
        (2, 9, 0, {0: 10, 1: 10}, []),
        (2, 9, 1, {}, [0, 1]),  # the removed partitions forgotten, then no request while none is wanted
    ]
    assert (a.partition.high_watermark, b.partition.high_watermark) == (7, 7)
