"""A broker's heartbeat loop (server/broker_daemon.py) against a scripted controller channel, on one event
loop and no sockets: what Kafka's BrokerLifecycleManager does when a heartbeat fails or the broker shuts
down."""

from __future__ import annotations

import argparse
import asyncio
import datetime
from collections.abc import Callable
from typing import Any

import pytest
import structlog
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.static.primitive import i32Timedelta

from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.server import broker_daemon
from epochkraft.server.broker_daemon import BrokerNode, State

Answer = Callable[[Any], Any]


def answer(error: ErrorCode = ErrorCode.none, *, fenced: bool = False, shut_down: bool = False) -> Answer:
    def respond(request: Any) -> BrokerHeartbeatResponse:
        return BrokerHeartbeatResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            error_code=error,
            is_caught_up=True,
            is_fenced=fenced,
            should_shut_down=shut_down,
        )

    return respond


def fail(error: Exception) -> Answer:
    def respond(request: Any) -> Any:
        raise error

    return respond


class ScriptedChannel:
    """The heartbeat channel: each request gets the next scripted answer (the last one repeats)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[Any] = []
        self.address = "controller:9093"

    async def send(self, request: Any, response_type: type, **kwargs: Any) -> Any:
        self.requests.append(request)
        respond = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return respond(request)


@pytest.fixture
def node(tmp_path, monkeypatch) -> BrokerNode:
    monkeypatch.setattr(broker_daemon, "HEARTBEAT_ERROR_BACKOFF_S", 0.01)
    return make_node(tmp_path)


def make_node(tmp_path, controllers: str = "127.0.0.1:9093") -> BrokerNode:
    args = argparse.Namespace(
        node_id=1,
        data_dir=str(tmp_path),
        metrics_dir=None,
        listen="127.0.0.1:0",
        controller=controllers,
        config=None,
        override=["broker.heartbeat.interval.ms=20"],
        admin_secure=False,
    )
    settings, listeners, controller = broker_daemon.load(args)
    node = BrokerNode(args, settings, listeners, controller, structlog.get_logger())
    node.broker_epoch, node.state = 10, State.RUNNING
    node.cache.next_offset = node.follower.published_offset = 11
    return node


async def run_heartbeats(node: BrokerNode, channel: ScriptedChannel, until: Callable[[], bool]) -> None:
    """The heartbeat loop on this event loop (standing for the heartbeat thread's) until ``until()``."""
    node.heartbeat_channel = channel  # type: ignore[assignment]
    loop = asyncio.get_running_loop()
    task = loop.create_task(node.heartbeat_loop(asyncio.Event(), asyncio.Event(), loop))
    try:
        async with asyncio.timeout(5):
            while not until():
                assert not task.done() or task.exception() is None, task.exception()
                assert not task.done(), "the heartbeat loop ended"
                await asyncio.sleep(0.005)
    finally:
        task.cancel()


async def test_heartbeats_go_on_after_an_unexpected_error(node):
    """An error other than a network one (a malformed answer) is logged and the next heartbeat follows,
    as BrokerLifecycleManager's event queue goes on after a failed event; the loop used to end, and the
    broker's session lapsed while it ran."""
    channel = ScriptedChannel(fail(ProtocolError("malformed answer")), answer())
    await run_heartbeats(node, channel, lambda: len(channel.requests) >= 3)
    assert node.state == State.RUNNING


async def test_a_failed_background_task_stops_the_broker():
    """The heartbeats task ending with an error is reported (the broker stops through its shutdown steps,
    exit code 1), not found only when the shutdown awaits it; a cancelled one is not."""

    async def broken() -> None:
        raise RuntimeError("event loop is closed")

    reasons: list[str] = []
    failed = asyncio.create_task(broken(), name="heartbeats")
    cancelled = asyncio.create_task(asyncio.sleep(1), name="heartbeats")
    cancelled.cancel()
    await asyncio.wait([failed, cancelled])
    for task in (failed, cancelled):
        broker_daemon._report_failed(structlog.get_logger(), task, reasons.append)
    assert reasons == ["heartbeats ended: RuntimeError('event loop is closed')"]


async def test_an_answer_arriving_during_shutdown_changes_nothing(node, monkeypatch):
    """Cancelling the heartbeats reaches their thread a hop later: a STALE_BROKER_EPOCH answer arriving as
    the broker shuts down must not register it again (a new broker epoch in the clean shutdown marker, an
    AllocateProducerIds on a closing channel), nor its state move."""
    registrations: list[int] = []

    async def register() -> None:
        registrations.append(node.broker_epoch)

    monkeypatch.setattr(node, "register", register)

    def shut_down_meanwhile(request: Any) -> BrokerHeartbeatResponse:
        node.shutting_down.set()
        return answer(ErrorCode.stale_broker_epoch)(request)

    channel = ScriptedChannel(shut_down_meanwhile)
    node.heartbeat_channel = channel
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(5):
        await node.heartbeat_loop(asyncio.Event(), asyncio.Event(), loop)  # ends: shutting down
    assert registrations == [] and node.state == State.RUNNING and node.broker_epoch == 10


async def test_a_registration_again_that_failed_is_tried_again(node, monkeypatch):
    """A STALE_BROKER_EPOCH answer registers again; if that registration fails (here: raises, as a
    malformed answer would), the next turn of the loop registers again rather than heartbeating with no
    registration, as Kafka's CommunicationEvent sends a registration until one is answered."""
    registrations: list[int] = []

    async def register() -> None:
        registrations.append(len(registrations))
        node.lifecycle.begin_registration(-1)
        if len(registrations) == 1:
            raise ProtocolError("malformed registration answer")
        node.lifecycle.broker_epoch, node.lifecycle.state = 20, State.RECOVERY

    monkeypatch.setattr(node, "register", register)
    channel = ScriptedChannel(answer(ErrorCode.stale_broker_epoch), answer(fenced=False))
    await run_heartbeats(node, channel, lambda: node.state == State.RUNNING and node.broker_epoch == 20)
    assert registrations == [0, 1]
    assert len(channel.requests) < 20, "no heartbeats while unregistered"


async def test_no_registration_once_shutting_down(node):
    channel = ScriptedChannel(fail(AssertionError("a registration was sent")))
    node.lifecycle_channel = channel
    node.shutting_down.set()
    await node.register()
    assert channel.requests == [] and node.broker_epoch == 10


async def test_heartbeats_report_the_metadata_offset_the_replicas_carried_out(node):
    """The metadata offset a heartbeat reports (and whether it asks to stay fenced) is the one every
    listener has carried out, as Kafka's broker reports MetadataLoader's last applied offset once every
    publisher ran: the cache's offset moves per record, before the replica manager has seen them, and a
    controller unfencing a broker or completing a controlled shutdown on it would act too early."""
    node.cache.next_offset = 20  # records 11..19 in the image, not yet handed to the replica manager
    channel = ScriptedChannel(answer())
    await run_heartbeats(node, channel, lambda: len(channel.requests) >= 1)
    assert channel.requests[0].current_metadata_offset == 10
    node.follower.published_offset, node.broker_epoch = 11, 15  # registered at 15, published to 10
    assert not node.caught_up()


async def test_stopping_the_heartbeat_thread_takes_bounded_time(node, monkeypatch):
    """A heartbeat channel that never finishes closing (its thread stuck) does not hang the broker's
    shutdown: the thread is stopped once the wait is over."""
    monkeypatch.setattr(broker_daemon, "HEARTBEAT_STOP_TIMEOUT_S", 0.1)

    class StuckChannel:
        async def close(self) -> None:
            await asyncio.sleep(3600)

    node.heartbeat_channel = StuckChannel()
    node.heartbeat_thread.start()
    async with asyncio.timeout(3):
        await broker_daemon._stop_heartbeat_thread(node)
    assert not node.heartbeat_thread.loop.is_running()


async def test_after_registering_every_channel_starts_at_the_active_controller(tmp_path, monkeypatch):
    """The registration found the active controller (the third of three): the heartbeats, and the
    metadata fetches, control requests and AlterPartitions that follow them, start there at once instead
    of at the first controller, a standby answering NOT_CONTROLLER."""
    node = make_node(tmp_path, "127.0.0.1:9093,127.0.0.1:9094,127.0.0.1:9095")

    def registration(error: ErrorCode) -> Callable[..., Any]:
        async def send(request: Any, response_type: type, **kwargs: Any) -> BrokerRegistrationResponse:
            return BrokerRegistrationResponse(
                throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=error, broker_epoch=42
            )

        return send

    clients = node.lifecycle_channel.clients
    for client, error in zip(clients, [ErrorCode.not_controller] * 2 + [ErrorCode.none], strict=True):
        monkeypatch.setattr(client, "send", registration(error))
    await node.register()
    assert node.broker_epoch == 42
    assert node.heartbeat_channel.current == 2
    monkeypatch.setattr(node.control.clients[2], "send", registration(ErrorCode.none))
    await node.control.send(
        object(), BrokerRegistrationResponse
    )  # would go to a client never opened, were it not the third
    assert node.control.current == 2


async def test_no_heartbeat_while_the_daemon_loop_is_stalled(node):
    """The heartbeat thread sends nothing while the daemon's loop has not ticked for longer than the
    watch's bound, so the session lapses and the controller fences a broker that cannot serve; it
    heartbeats again once the loop runs."""
    channel = ScriptedChannel(answer())
    node.loop_watch.last_tick -= node.loop_watch.bound_s + 1  # the loop stuck since
    node.heartbeat_channel = channel
    loop = asyncio.get_running_loop()
    task = loop.create_task(node.heartbeat_loop(asyncio.Event(), asyncio.Event(), loop))
    try:
        await asyncio.sleep(0.3)
        assert channel.requests == []
        node.loop_watch.start(loop)  # the loop runs again: it ticks
        async with asyncio.timeout(5):
            while not channel.requests:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        node.loop_watch.stop()


async def test_a_registration_refused_for_good_ends_the_heartbeats(node):
    """A stale epoch makes the broker register again; a controller that answers INCONSISTENT_CLUSTER_ID (its
    quorum formatted anew under a running broker) refuses it for good: the heartbeat loop ends with the
    refusal, so the failed heartbeats task stops the broker through its shutdown steps (a SystemExit raised
    in a task would leave the event loop at once, without them)."""
    refused = BrokerRegistrationResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.inconsistent_cluster_id,
        broker_epoch=-1,
    )

    async def refuse(request: Any, response_type: type, **kwargs: Any) -> BrokerRegistrationResponse:
        return refused

    node.lifecycle_channel.send = refuse  # type: ignore[method-assign]
    node.heartbeat_channel = ScriptedChannel(answer(ErrorCode.stale_broker_epoch))  # type: ignore[assignment]
    loop = asyncio.get_running_loop()
    with pytest.raises(broker_daemon.RegistrationRefused):
        async with asyncio.timeout(5):
            await node.heartbeat_loop(asyncio.Event(), asyncio.Event(), loop)
