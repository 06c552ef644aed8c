"""How much client work one turn of the event loop may hold: a connection's client requests run one at a time
(Kafka's SocketServer mutes a channel from a request's receipt until its response is sent), at most
REQUESTS_STARTED_PER_TURN client requests start in one turn (Kafka's bounded request queue served by
num.io.threads), and the daemons' own requests are neither held nor queued. A flood of pipelined requests then
keeps each turn to a few requests' work, so the heartbeat answers and replica fetches that wait for the next
turn are not held for seconds (the real-daemon check: tests/test_floods.py). Connections with a stand-in
transport, no sockets."""

from __future__ import annotations

import asyncio
import datetime
import struct
from types import SimpleNamespace
from typing import Any

from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from kio.schema.describe_client_quotas.v1.response import DescribeClientQuotasResponse
from kio.schema.produce.v9.request import ProduceRequest
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
from kio.static.primitive import i16

from epochkraft.protocol.api import BROKER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import encode_entity, encode_request
from epochkraft.server import socket_server as server_module
from epochkraft.server.socket_server import KafkaServer, _Connection

DESCRIBE_CLIENT_QUOTAS, WRITE_TXN_MARKERS, PRODUCE = 48, 27, 0  # client requests; a cluster action


class StandInTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def writelines(self, chunks: list[bytes | memoryview]) -> None:
        for chunk in chunks:
            self.written += chunk

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        pass

    def correlation_ids(self) -> list[int]:
        """The correlation ids of the responses written, in order (response header v0 after the size)."""
        ids, data, at = [], bytes(self.written), 0
        while at < len(data):
            size, correlation_id = struct.unpack_from(">ii", data, at)
            ids.append(correlation_id)
            at += 4 + size
        return ids


class Listener:
    """A broker listener whose DescribeClientQuotas and WriteTxnMarkers handlers wait until a test answers."""

    def __init__(self) -> None:
        self.server = KafkaServer(BROKER, SimpleNamespace(), "127.0.0.1", 0)  # type: ignore[arg-type]
        self.started: list[int] = []  # correlation ids whose handler started, in order
        self.answers: dict[int, asyncio.Future[None]] = {}
        for key, response in (
            (DESCRIBE_CLIENT_QUOTAS, self._quotas_response),
            (WRITE_TXN_MARKERS, self._markers_response),
            (PRODUCE, self._produce_response),
        ):
            self.server.apis[key] = _with_handler(self.server.apis[key], self._waiting(response))

    def _waiting(self, response: Any) -> Any:
        async def handle(request: Any, ctx: Any) -> Any:
            correlation_id = ctx.header.correlation_id
            self.started.append(correlation_id)
            await self.answers.setdefault(correlation_id, asyncio.get_running_loop().create_future())
            return response()

        return handle

    @staticmethod
    def _quotas_response() -> DescribeClientQuotasResponse:
        return DescribeClientQuotasResponse(
            throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None, entries=()
        )

    @staticmethod
    def _markers_response() -> WriteTxnMarkersResponse:
        return WriteTxnMarkersResponse(markers=())

    @staticmethod
    def _produce_response() -> ProduceResponse:
        return ProduceResponse(responses=(), throttle_time=datetime.timedelta(0))

    def connect(self) -> tuple[_Connection, StandInTransport]:
        connection, transport = _Connection(self.server), StandInTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        return connection, transport

    def answer(self, correlation_id: int) -> None:
        self.answers.setdefault(correlation_id, asyncio.get_running_loop().create_future()).set_result(None)

    async def answer_all(self) -> None:
        while unanswered := [i for i in self.started if not self.answers[i].done()]:
            for correlation_id in unanswered:
                self.answer(correlation_id)
            await turns()


def _with_handler(spec: Any, handler: Any) -> Any:
    import dataclasses

    return dataclasses.replace(spec, handler=handler)


def receive(connection: _Connection, *frames: bytes) -> None:
    """The frames as one read from the socket."""
    data = b"".join(frames)
    while data:
        buffer = connection.get_buffer(len(data))
        n = min(len(buffer), len(data))
        buffer[:n] = data[:n]
        connection.buffer_updated(n)
        data = data[n:]


def quotas_request(correlation_id: int) -> bytes:
    body = encode_entity(DescribeClientQuotasRequest(components=(), strict=False))
    return encode_request(DESCRIBE_CLIENT_QUOTAS, 1, correlation_id, "flooder", body)


def produce_request(correlation_id: int) -> bytes:
    body = encode_entity(
        ProduceRequest(
            transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=5), topic_data=()
        )
    )
    return encode_request(PRODUCE, 9, correlation_id, "producer", body)


def markers_request(correlation_id: int) -> bytes:
    body = encode_entity(WriteTxnMarkersRequest(markers=()))
    return encode_request(WRITE_TXN_MARKERS, 1, correlation_id, "broker-2", body)


async def turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_pipelined_client_requests_run_one_at_a_time_and_are_answered_in_order():
    listener = Listener()
    connection, transport = listener.connect()
    receive(connection, *(quotas_request(i) for i in range(1, 33)))
    await turns()
    assert listener.started == [1], "one request of the 32 pipelined started"
    for i in range(1, 33):
        listener.answer(i)
        await turns()
        assert listener.started == list(range(1, min(i + 1, 32) + 1))
    assert transport.correlation_ids() == list(range(1, 33))


async def test_a_producer_pipelines_up_to_produce_pipeline_requests_and_nothing_else_meanwhile():
    """Produce requests join a pipeline of Produce requests (librdkafka pipelines them without bound); the
    request after them waits for all of them, and none starts while it runs."""
    pipeline = server_module.PRODUCE_PIPELINE
    listener = Listener()
    connection, transport = listener.connect()
    produces = [produce_request(i) for i in range(1, pipeline + 2)]
    receive(connection, *produces, quotas_request(100), produce_request(101))
    await turns(pipeline)  # REQUESTS_STARTED_PER_TURN a turn
    assert listener.started == list(range(1, pipeline + 1))
    for i in range(1, pipeline + 1):
        listener.answer(i)
    await turns()
    assert listener.started[pipeline:] == [pipeline + 1]
    listener.answer(pipeline + 1)
    await turns()
    assert listener.started[pipeline + 1 :] == [100], "the DescribeClientQuotas alone"
    await listener.answer_all()
    assert transport.correlation_ids() == [*range(1, pipeline + 2), 100, 101]


async def test_the_daemons_own_requests_are_not_held_behind_each_other():
    """Cluster actions (here WriteTxnMarkers; a follower's Fetch goes by the same rule) pipeline as sent: a
    long poll of one must not stall the others."""
    listener = Listener()
    connection, transport = listener.connect()
    receive(connection, *(markers_request(i) for i in range(1, 9)))
    await turns()
    assert listener.started == list(range(1, 9))
    for i in reversed(range(1, 9)):
        listener.answer(i)
    await turns()
    assert transport.correlation_ids() == list(range(1, 9))


async def test_at_most_requests_started_per_turn_start_in_one_turn_round_robin_over_connections():
    per_turn = server_module.REQUESTS_STARTED_PER_TURN
    listener = Listener()
    connections = [listener.connect()[0] for _ in range(3 * per_turn)]
    for n, connection in enumerate(connections):
        receive(connection, quotas_request(1000 * n + 1), quotas_request(1000 * n + 2))
    started_by_turn = []
    for _ in range(5):
        before = len(listener.started)
        await asyncio.sleep(0)
        started_by_turn.append(len(listener.started) - before)
    assert max(started_by_turn) <= per_turn, started_by_turn
    assert sum(started_by_turn) == len(connections), "every connection's first request, none's second"
    assert sorted(listener.started) == [1000 * n + 1 for n in range(len(connections))]
    assert listener.started == sorted(listener.started), "in the order they were read"
    await listener.answer_all()
    assert len(listener.started) == 2 * len(connections)


async def test_a_cluster_action_is_not_queued_behind_client_requests():
    per_turn = server_module.REQUESTS_STARTED_PER_TURN
    listener = Listener()
    flooders = [listener.connect()[0] for _ in range(4 * per_turn)]
    for n, connection in enumerate(flooders):
        receive(connection, quotas_request(n + 1))
    broker, _ = listener.connect()
    receive(broker, markers_request(9999))
    await asyncio.sleep(0)
    assert 9999 in listener.started
    assert len(listener.started) <= per_turn + 1
    await listener.answer_all()


def test_what_is_held_goes_by_the_request_not_the_quota_exemption():
    """ApiVersions and SASL are exempt from quotas only: pipelined, they wait their turn like any client
    request (Kafka mutes every channel after a receive, before authentication too). A broker's
    AddPartitionsToTxn (v4+, a cluster action) is not held behind a client's; a client's (v3 and below) is."""
    apis = Listener().server.apis
    classify = _Connection._client_request

    def ctx(version: int) -> Any:
        return SimpleNamespace(api_version=version)

    assert classify(apis[18], None, ctx(3))  # ApiVersions
    assert classify(apis[17], None, ctx(1))  # SaslHandshake
    assert not classify(apis[WRITE_TXN_MARKERS], None, ctx(1))
    assert not classify(apis[24], None, ctx(4))
    assert classify(apis[24], None, ctx(3))
