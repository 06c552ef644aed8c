"""Our replica fetcher's fetch session (KIP-227) against Apache Kafka's own leader, which keeps sessions:
Kafka opens one on our first, full request, takes our incremental requests at each epoch without a
top-level error, and stops answering a partition our fetcher forgets. The replica id is one Kafka does not
host, so every partition is answered with an error; the session's bookkeeping is what is checked."""

from __future__ import annotations

import asyncio

import pytest

from epochkraft.broker.fetcher import ReplicaFetcher
from epochkraft.harness.kio_client import MiniClient
from epochkraft.metadata.registrations import Endpoint
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.fetch_response import decode_partitions
from tests.test_fetcher import Manager, _forgotten, _Log, _Partition, _Replica, _sent, failing_cache

pytestmark = [pytest.mark.slow, pytest.mark.peers, pytest.mark.timeout(300)]
TOPIC = "fetch-session-follower"


async def _leader_of_topic(client: MiniClient):
    """The topic's id and the address of the broker leading both its partitions (broker 1)."""
    error = await client.create_topic(TOPIC, assignment=[[1], [1]])
    assert error in (ErrorCode.none, ErrorCode.topic_already_exists), error
    for _ in range(100):
        metadata = await client.metadata(TOPIC)
        partitions = metadata.topics[0].partitions
        if len(partitions) == 2 and all(p.leader_id == 1 for p in partitions):
            broker = next(b for b in metadata.brokers if b.node_id == 1)
            return metadata.topics[0].topic_id, (broker.host, broker.port)
        await asyncio.sleep(0.1)
    raise AssertionError("the topic has no leader")


async def _wait(condition, seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def test_kafka_leader_keeps_our_followers_fetch_session(kafka_peer):
    client = MiniClient(kafka_peer.bootstrap)
    try:
        topic_id, (host, port) = await _leader_of_topic(client)
    finally:
        await client.close()
    manager = Manager(failing_cache(failures=0), node_id=99)
    manager.cache.image.endpoint = lambda *args, **kwargs: Endpoint("PLAINTEXT", host, port)
    fetcher = ReplicaFetcher(1, manager, lambda: 1, unsafe_pre_kip903=False)
    requests: list[tuple[int, int, dict[int, int], list[int]]] = []
    answers: list[tuple[int, int, list[int]]] = []
    build_request, apply_answer = fetcher._request, fetcher._apply

    def recording_request(data):
        request = build_request(data)
        requests.append((request.session_id, request.session_epoch, _sent(request), _forgotten(request)))
        return request

    def recording_apply(frame, pos, by_key):
        answer = decode_partitions(frame, pos)
        answers.append((answer.error, answer.session_id, sorted(p.index for p in answer.partitions)))
        return apply_answer(frame, pos, by_key=by_key)

    fetcher._request, fetcher._apply = recording_request, recording_apply
    a, b = (_Replica(_Partition(TOPIC, i, topic_id, leader_epoch=0), _Log(log_end_offset=0)) for i in (0, 1))
    try:
        fetcher.add(a)
        fetcher.add(b)
        await _wait(lambda: len(answers) >= 3)
        fetcher.remove(b.key)
        forgotten_at = len(requests)
        await _wait(lambda: len(answers) >= forgotten_at + 3)
    finally:
        await fetcher.stop()
    session_id = answers[0][1]
    assert session_id != 0, "Kafka opened a session for the full request"
    assert requests[0] == (0, 0, {0: 0, 1: 0}, [])
    assert requests[1] == (session_id, 1, {}, []), "unchanged partitions are not sent again"
    assert [(error, sid) for error, sid, _ in answers] == [(ErrorCode.none, session_id)] * len(answers)
    assert [epoch for _, epoch, _, _ in requests[: len(answers)]] == list(range(len(answers)))
    [forgetting] = [r for r in requests if r[3]]
    assert forgetting[2:] == ({}, [1])
    assert answers[-1][2] == [0], "a forgotten partition is no longer answered"
