"""The broker's lifecycle core (broker/lifecycle.py), as Kafka's BrokerLifecycleManagerTest drives
BrokerLifecycleManager, but with no channel or clock: requests are built, answers handed in, and the outcome
(what the daemon or the simulator must do) checked."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.request import Listener
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.static.primitive import i16, i32Timedelta, i64, u16

from epochkraft.broker.lifecycle import (
    FAST_HEARTBEAT_MS,
    HEARTBEAT_RETRY_MS,
    REGISTRATION_RETRY_MS,
    BrokerLifecycle,
    Fenced,
    Ignored,
    NextHeartbeat,
    Refused,
    RegisterAgain,
    Registered,
    Registration,
    RetryAfter,
    ShutDownNow,
    State,
    Unfenced,
)
from epochkraft.protocol.errors import ErrorCode

INTERVAL_MS = 2000
NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
LOG_DIR = uuid.UUID("80a9c0b9-3f6e-4bb1-8c2a-c8b3f8f3d9a1")
REGISTRATION = Registration(
    cluster_id="cluster-1",
    listeners=(Listener(name="PLAINTEXT", host="127.0.0.1", port=u16(9092), security_protocol=i16(0)),),
    features=(),
    log_dirs=(LOG_DIR,),
)


def registration_answer(error: ErrorCode = ErrorCode.none, epoch: int = 1000) -> BrokerRegistrationResponse:
    return BrokerRegistrationResponse(throttle_time=NO_THROTTLE, error_code=error, broker_epoch=i64(epoch))


def heartbeat_answer(
    error: ErrorCode = ErrorCode.none, *, fenced: bool = False, shut_down: bool = False
) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(
        throttle_time=NO_THROTTLE,
        error_code=error,
        is_caught_up=True,
        is_fenced=fenced,
        should_shut_down=shut_down,
    )


def registered(epoch: int = 1000, previous: int = -1) -> BrokerLifecycle:
    lifecycle = BrokerLifecycle(3, uuid.uuid4(), INTERVAL_MS)
    lifecycle.begin_registration(previous)
    assert lifecycle.on_registration_response(registration_answer(epoch=epoch)) == Registered(epoch)
    return lifecycle


def running() -> BrokerLifecycle:
    lifecycle = registered()
    assert lifecycle.on_heartbeat_response(heartbeat_answer(fenced=False)) == Unfenced(INTERVAL_MS)
    return lifecycle


def test_successful_registration():
    """testSuccessfulRegistration: the registration presents the clean shutdown marker's epoch, and the
    answer's epoch is the broker's; fenced (RECOVERY) until a heartbeat says otherwise."""
    incarnation = uuid.uuid4()
    lifecycle = BrokerLifecycle(3, incarnation, INTERVAL_MS)
    lifecycle.begin_registration(previous_broker_epoch=10)
    request = lifecycle.registration_request(REGISTRATION)
    assert (request.broker_id, request.incarnation_id, request.previous_broker_epoch) == (3, incarnation, 10)
    assert request.cluster_id == "cluster-1" and request.listeners == REGISTRATION.listeners
    assert lifecycle.on_registration_response(registration_answer(epoch=1000)) == Registered(1000)
    assert (lifecycle.broker_epoch, lifecycle.state) == (1000, State.RECOVERY)


def test_registration_includes_dirs():
    """testRegistrationIncludesDirs."""
    lifecycle = BrokerLifecycle(3, uuid.uuid4(), INTERVAL_MS)
    assert lifecycle.registration_request(REGISTRATION).log_dirs == (LOG_DIR,)


def test_registration_is_retried_after_a_refusal_or_no_answer():
    """testRegistrationTimeout, the part before the timeout: DUPLICATE_BROKER_REGISTRATION (the old
    incarnation's session still alive) or no answer at all: the registration is sent again after a
    backoff, and the broker stays unregistered until one succeeds."""
    lifecycle = BrokerLifecycle(3, uuid.uuid4(), INTERVAL_MS)
    refused = lifecycle.on_registration_response(registration_answer(ErrorCode.duplicate_broker_registration))
    assert refused == RetryAfter(REGISTRATION_RETRY_MS, ErrorCode.duplicate_broker_registration)
    assert lifecycle.on_registration_failed() == RetryAfter(REGISTRATION_RETRY_MS)
    assert (lifecycle.broker_epoch, lifecycle.state) == (-1, State.STARTING)
    assert lifecycle.on_registration_response(registration_answer(epoch=7)) == Registered(7)


def test_another_cluster_refuses_the_registration_for_good():
    lifecycle = BrokerLifecycle(3, uuid.uuid4(), INTERVAL_MS)
    answer = registration_answer(ErrorCode.inconsistent_cluster_id, epoch=-1)
    assert lifecycle.on_registration_response(answer) == Refused(ErrorCode.inconsistent_cluster_id)
    assert lifecycle.state == State.STARTING


def test_an_answer_to_a_resent_registration_changes_nothing():
    """The simulator resends its registration until answered: a second answer keeps the first epoch."""
    lifecycle = registered(epoch=1000)
    assert lifecycle.on_registration_response(registration_answer(epoch=1200)) == Ignored()
    assert (lifecycle.broker_epoch, lifecycle.state) == (1000, State.RECOVERY)


def test_fenced_is_asked_for_until_the_metadata_passes_the_registration():
    """want_fence while the published metadata has not passed the broker epoch (the registration record's
    offset), as Kafka's ``setWantFence(!readyToUnfence)``; the offset reported is the last one published."""
    lifecycle = registered(epoch=1000)
    behind = lifecycle.heartbeat_request(published_offset=1000)
    assert (behind.want_fence, behind.current_metadata_offset, behind.broker_epoch) == (True, 999, 1000)
    assert not lifecycle.heartbeat_request(published_offset=1001).want_fence
    assert not lifecycle.heartbeat_request(published_offset=1001).want_shut_down


def test_unfenced_and_the_heartbeat_interval():
    """RECOVERY -> RUNNING on the first unfenced answer; heartbeats fast until then, at the configured
    interval after."""
    lifecycle = registered()
    assert lifecycle.on_heartbeat_response(heartbeat_answer(fenced=True)) == NextHeartbeat(FAST_HEARTBEAT_MS)
    assert lifecycle.state == State.RECOVERY
    assert lifecycle.on_heartbeat_response(heartbeat_answer(fenced=False)) == Unfenced(INTERVAL_MS)
    assert lifecycle.on_heartbeat_response(heartbeat_answer(fenced=False)) == NextHeartbeat(INTERVAL_MS)
    assert lifecycle.state == State.RUNNING


def test_fenced_while_running():
    """The controller fenced a running broker (its session lapsed): back to RECOVERY, heartbeating fast."""
    lifecycle = running()
    assert lifecycle.on_heartbeat_response(heartbeat_answer(fenced=True)) == Fenced(FAST_HEARTBEAT_MS)
    assert lifecycle.state == State.RECOVERY


def test_stale_broker_epoch_registers_again():
    """STALE_BROKER_EPOCH: the controller no longer knows this registration; the broker registers again
    (and an answer to a heartbeat of the old registration changes nothing meanwhile)."""
    lifecycle = running()
    assert lifecycle.on_heartbeat_response(heartbeat_answer(ErrorCode.stale_broker_epoch)) == RegisterAgain()
    assert lifecycle.state == State.STARTING
    assert lifecycle.on_heartbeat_response(heartbeat_answer(shut_down=True)) == Ignored()
    lifecycle.begin_registration(previous_broker_epoch=-1)
    assert lifecycle.registration_request(REGISTRATION).previous_broker_epoch == -1
    assert lifecycle.on_registration_response(registration_answer(epoch=1500)) == Registered(1500)
    assert (lifecycle.broker_epoch, lifecycle.state) == (1500, State.RECOVERY)


def test_heartbeat_errors_retry_after_a_backoff():
    """NOT_CONTROLLER (no active controller yet) or no answer: the next heartbeat follows a backoff, and
    nothing else changes."""
    lifecycle = running()
    answer = heartbeat_answer(ErrorCode.not_controller, fenced=True)
    assert lifecycle.on_heartbeat_response(answer) == RetryAfter(HEARTBEAT_RETRY_MS, ErrorCode.not_controller)
    assert lifecycle.on_heartbeat_failed() == RetryAfter(HEARTBEAT_RETRY_MS)
    assert lifecycle.state == State.RUNNING


def test_controlled_shutdown():
    """testControlledShutdown: RUNNING -> PENDING_CONTROLLED_SHUTDOWN, whose heartbeats ask to shut down
    (fast, until the controller has moved the leaderships away) -> SHUTTING_DOWN once it allows it."""
    lifecycle = running()
    assert lifecycle.begin_controlled_shutdown()
    assert lifecycle.state == State.PENDING_CONTROLLED_SHUTDOWN
    assert lifecycle.heartbeat_request(published_offset=2000).want_shut_down
    assert lifecycle.on_heartbeat_response(heartbeat_answer()) == NextHeartbeat(FAST_HEARTBEAT_MS)
    assert lifecycle.state == State.PENDING_CONTROLLED_SHUTDOWN
    assert lifecycle.on_heartbeat_response(heartbeat_answer(shut_down=True)) == ShutDownNow()
    assert lifecycle.state == State.SHUTTING_DOWN


def test_controlled_shutdown_waits_for_a_registration():
    """Not registered: no heartbeat can ask yet; the caller asks again once registered."""
    lifecycle = BrokerLifecycle(3, uuid.uuid4(), INTERVAL_MS)
    assert not lifecycle.begin_controlled_shutdown()
    assert lifecycle.state == State.STARTING


def test_should_shut_down_means_nothing_unless_asked():
    lifecycle = running()
    assert lifecycle.on_heartbeat_response(heartbeat_answer(shut_down=True)) == NextHeartbeat(INTERVAL_MS)
    assert lifecycle.state == State.RUNNING


def test_answers_after_close_change_nothing():
    """testCreateStartAndClose's end state: closed, SHUTTING_DOWN; no answer moves it (no registering
    again, no new broker epoch for the clean shutdown marker)."""
    lifecycle = running()
    lifecycle.close()
    assert lifecycle.on_heartbeat_response(heartbeat_answer(ErrorCode.stale_broker_epoch)) == Ignored()
    assert lifecycle.on_registration_response(registration_answer(epoch=3000)) == Ignored()
    assert (lifecycle.broker_epoch, lifecycle.state) == (1000, State.SHUTTING_DOWN)
