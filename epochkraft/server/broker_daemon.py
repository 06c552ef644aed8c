"""The broker daemon: registration and heartbeats, the metadata log follower, replicas, client APIs.

``epochkraft broker --node-id N (--listen HOST:PORT | --override listeners=...) --controller HOST:PORT
--data-dir DIR [--metrics-dir DIR] [--admin-port P [--admin-host H]] [--config FILE]
[--override KEY=VALUE ...] [--check-config]``

Listeners are Kafka's named listeners (``epochkraft.net.listeners``); ``--listen`` is the one-listener form.

Lifecycle, as Kafka's BrokerLifecycleManager (its rules in ``epochkraft.broker.lifecycle``; this module does
their IO: the heartbeat thread, the channels, the clean shutdown marker): STARTING (registering a new
incarnation) -> RECOVERY (registered and fenced, catching up with the metadata log) -> RUNNING (unfenced;
the ready line is logged) -> PENDING_CONTROLLED_SHUTDOWN (SIGTERM: heartbeats ask to shut down until the
controller has moved every leadership away) -> SHUTTING_DOWN (flush, checkpoints, exit 0). A
STALE_BROKER_EPOCH answer makes it register again. SIGKILL loses only what was not fsync'd, as Kafka would.
Its listeners are bound from the start (their ports are registered) but serve clients only once the metadata
log has been applied past the registration, as Kafka's BrokerServer enables request processing after its
initial catch-up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import uvloop
from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.allocate_producer_ids.v0.response import AllocateProducerIdsResponse
from kio.schema.alter_partition.v3.response import AlterPartitionResponse
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.request import Feature, Listener
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.types import BrokerId, TopicName
from kio.schema.update_features.v1.request import UpdateFeaturesRequest
from kio.schema.update_features.v1.response import UpdateFeaturesResponse
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64, u16
from kio.static.protocol import Payload, RequestPayload
from structlog.typing import FilteringBoundLogger

from epochkraft import logs
from epochkraft.broker.client_quotas import ClientQuotas
from epochkraft.broker.config_describer import ConfigDescriber
from epochkraft.broker.connection_quotas import (
    MAX_CONNECTION_CREATION_RATE,
    ConnectionQuotas,
    creation_rates,
    listener_rate_key,
)
from epochkraft.broker.consumer_group import ConsumerGroupSettings, parse_assignors
from epochkraft.broker.fetcher import ReplicaFetcher
from epochkraft.broker.group_coordinator import OFFSETS_TOPIC, GroupCoordinator, GroupSettings
from epochkraft.broker.group_migration import MigrationPolicy
from epochkraft.broker.group_service import GroupService, LoggedOffsetRecord
from epochkraft.broker.lifecycle import (
    BrokerLifecycle,
    Fenced,
    HeartbeatOutcome,
    Ignored,
    NextHeartbeat,
    Refused,
    RegisterAgain,
    Registered,
    Registration,
    RetryAfter,
    State,
    Unfenced,
)
from epochkraft.broker.log import LogManager
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.metadata_follower import MetadataFollower
from epochkraft.broker.offsets_topic import OffsetsTopic
from epochkraft.broker.producer_id_manager import GeneratedProducerId, RpcProducerIdManager
from epochkraft.broker.replica_manager import ReplicaManager, log_config
from epochkraft.broker.settings import BrokerSettings
from epochkraft.broker.topics_image import CacheTopics
from epochkraft.broker.transaction_coordinator import TransactionCoordinator, TransactionSettings
from epochkraft.broker.transaction_log import TRANSACTION_STATE_TOPIC
from epochkraft.broker.transaction_service import TransactionService, TransactionStateTopic
from epochkraft.config import ConfigError, load_settings, parse_host_port, parse_overrides
from epochkraft.controller.feature_control import SUPPORTED_FEATURES as FEATURE_RANGES
from epochkraft.metadata import group_config
from epochkraft.metadata.config_schema import ResourceType
from epochkraft.metadata.image import TRANSACTION_VERSION
from epochkraft.metrics.admin_flags import add_admin_arguments
from epochkraft.metrics.documents import BrokerPositions, BrokerState
from epochkraft.net.controller_channel import ControllerChannel, parse_controllers
from epochkraft.net.errors import NetworkError
from epochkraft.net.listeners import ListenerEndpoint, Listeners, resolve_listeners
from epochkraft.protocol.api import BROKER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import convert
from epochkraft.security import tls
from epochkraft.security.node import NodeSecurity, controller_protocol
from epochkraft.server import forwarding
from epochkraft.server.context import RequestContext
from epochkraft.server.forwarding import R
from epochkraft.server.loop_thread import LoopThread, LoopWatch, stall_bound_s
from epochkraft.server.malloc_tuning import keep_read_buffers
from epochkraft.server.socket_server import KafkaServer, TurnGate, parse_ip_overrides

if TYPE_CHECKING:
    from epochkraft.broker.alter_partition_manager import AlterPartitionRequest
    from epochkraft.metrics.admin_http import AdminServer
    from epochkraft.metrics.events import EventLog
    from epochkraft.server.broker_metrics import BrokerMetrics

CREATE_TOPICS_KEY = 19
UPDATE_FEATURES_KEY = 57
# The clean shutdown marker: the broker epoch, written as a controlled shutdown ends (Kafka's clean
# shutdown file); the next registration presents it as PreviousBrokerEpoch, and reads it once.
LAST_EPOCH_FILE = "last-broker-epoch"
SUPPORTED_FEATURES = tuple(
    Feature(name=name, min_supported_version=i16(low), max_supported_version=i16(high))
    for name, (low, high) in FEATURE_RANGES.items()
)
SHUTDOWN_STEPS_TIMEOUT_S = 30.0  # stopping listeners, fetchers and tasks; a broker stops in bounded time
LOG_DIR_FAILURE_GRACE_S = 0.2  # for error answers to leave before a halt
FENCED_REPORT_SECONDS = 5.0  # how often a fenced broker says at info why it still is
HEARTBEAT_ERROR_BACKOFF_S = 0.5  # after a heartbeat failed other than on the network
HEARTBEAT_STOP_TIMEOUT_S = 5.0  # for the heartbeat thread's loop to end once cancelled


def _seconds(text: str) -> float:
    """A test switch's seconds; anything not a positive number is 0 (off): a bad value must not stop a broker."""
    try:
        value = float(text)
    except ValueError:
        return 0.0
    return value if value > 0 else 0.0


class RegistrationRefused(Exception):
    """The controller refused this broker for good (INCONSISTENT_CLUSTER_ID): the broker stops, with its
    shutdown steps when it was already serving."""


# A test switch: SIGUSR1 blocks the daemon's event loop this many seconds (a stuck loop, whose broker the
# controller must fence though its heartbeat thread runs); 0, the default: no such signal handler.
UNSAFE_STALL_LOOP_S_FOR_TESTS = _seconds(os.environ.get("UNSAFE_STALL_LOOP_ON_SIGUSR1_FOR_TESTS", ""))


class BrokerNode:
    """What handlers on the broker listener reach through ``ctx.node``."""

    def __init__(
        self,
        args: argparse.Namespace,
        settings: BrokerSettings,
        listeners: Listeners,
        controller: list[tuple[str, int]],
        log: FilteringBoundLogger,
    ) -> None:
        self.node_id: int = args.node_id
        self.settings = settings
        self.listeners = listeners
        # What is registered: the advertised endpoints, with the ports bound once the servers start.
        self.endpoints: tuple[ListenerEndpoint, ...] = listeners.registered({})
        self.controller_address = controller
        self.data_dir = Path(args.data_dir)
        self.log = log
        self.incarnation_id = uuid.uuid4()
        # what to send the controller, and what its answers mean (epochkraft/broker/lifecycle.py)
        self.lifecycle = BrokerLifecycle(self.node_id, self.incarnation_id, settings.heartbeat_interval_ms)
        self.cluster_id: str | None = None
        self.cache = MetadataCache(self.node_id)
        # KIP-13/124/599 client quotas, following the quotas in our metadata
        self.client_quotas = ClientQuotas(
            lambda: self.cache.image, settings.quota_window_num, settings.quota_window_size_seconds * 1000
        )
        # KIP-612 connection creation rates, shared by our listeners, following our configs and the image
        self.connection_quotas = ConnectionQuotas(
            [endpoint.name for endpoint in listeners.bind],
            listeners.inter_broker,
            settings.quota_window_num,
            settings.quota_window_size_seconds * 1000,
            current_image=lambda: self.cache.image,
        )
        self.refresh_connection_quotas()
        self.config_describer = ConfigDescriber(self.node_id, settings, self.cache)
        self.logs = LogManager(self.data_dir, log_config(settings), settings.log_tail_cache_bytes)
        self.security = NodeSecurity.build(settings)
        self.authorizer = self.security.authorizer
        if self.authorizer is not None:
            self.cache.publishers.append(self.authorizer.publish_acls)  # the ACLs the metadata log holds
        to_controller = self.security.client_ssl(controller_protocol(settings, dict(listeners.protocols)))
        # Heartbeats on a connection and a thread of their own, as Kafka's BrokerLifecycleManager has its
        # own channel ("heartbeat") and event queue thread: the controller answers a connection's requests
        # in order, so a heartbeat must never wait behind a forwarded CreateTopics or an AlterPartition,
        # nor behind this loop applying a large metadata change (server/loop_thread.py). The heartbeat
        # channel is used on that thread only; the other channels start where it last found the active
        # controller.
        self.heartbeat_thread = LoopThread(f"heartbeat-{self.node_id}")
        # ... yet no heartbeat while this loop is stuck, so the controller fences a broker that cannot serve
        self.loop_watch = LoopWatch(stall_bound_s(settings.heartbeat_interval_ms))
        self.heartbeat_channel = ControllerChannel(
            controller,
            client_id=f"broker-{self.node_id}-heartbeat",
            request_timeout_ms=10_000,
            ssl_context=to_controller,
        )
        self.lifecycle_channel = ControllerChannel(  # registrations, on this loop
            controller,
            client_id=f"broker-{self.node_id}-registration",
            request_timeout_ms=10_000,
            ssl_context=to_controller,
            follow=self.heartbeat_channel,
        )
        self.control = ControllerChannel(
            controller,
            client_id=f"broker-{self.node_id}-control",
            request_timeout_ms=10_000,
            ssl_context=to_controller,
            follow=self.heartbeat_channel,
        )
        # AlterPartition on a channel of its own too, as Kafka's ("alter-partition"): the controller runs a
        # connection's forwarded client requests (CreateTopics ...) one at a time, and an ISR change must
        # not wait behind them.
        self.alter_partition_channel = ControllerChannel(
            controller,
            client_id=f"broker-{self.node_id}-alter-partition",
            request_timeout_ms=10_000,
            ssl_context=to_controller,
            follow=self.heartbeat_channel,
        )
        self.metadata_client = ControllerChannel(
            controller,
            client_id=f"broker-{self.node_id}-metadata",
            ssl_context=to_controller,
            follow=self.heartbeat_channel,
        )
        self.events = _event_log(args.metrics_dir, f"broker-{self.node_id}")
        self.replica_manager = ReplicaManager(
            self.node_id,
            settings,
            self.logs,
            self.cache,
            lambda: self.broker_epoch,
            self._send_alter_partition,
            self.events,
        )
        self.replica_manager.fetcher_factory = lambda source: ReplicaFetcher(
            source,
            self.replica_manager,
            lambda: self.broker_epoch,
            settings.unsafe_pre_kip903_mode,
            self.security.client_ssl(listeners.inter_broker_protocol),
        )
        self.offsets_topic = OffsetsTopic(self)
        self.groups = GroupService(
            self.offsets_topic,
            GroupCoordinator(
                GroupSettings(
                    initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
                    offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
                    offset_metadata_max_bytes=settings.offset_metadata_max_bytes,
                    max_size=settings.group_max_size,
                )
            ),
            settings.offsets_retention_check_interval_ms,
            ConsumerGroupSettings(
                session_timeout_ms=settings.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
                assignors=parse_assignors(settings.group_consumer_assignors),
                max_size=settings.group_consumer_max_size,
                classic_max_size=settings.group_max_size,
                migration_policy=MigrationPolicy.parse(settings.group_consumer_migration_policy),
                bounds=group_config.bounds_of(settings),
            ),
            lambda group_id: self.cache.image.dynamic_config(ResourceType.GROUP, group_id),
        )
        self.replica_manager.leadership_listeners.append(self._on_leadership)
        self.transactions = TransactionService(
            self,
            TransactionCoordinator(
                TransactionSettings(
                    num_partitions=settings.transaction_state_log_num_partitions,
                    max_timeout_ms=settings.transaction_max_timeout_ms,
                ),
                self.generate_producer_id,
                lambda: self.cache.image.features.get(TRANSACTION_VERSION, 0),
            ),
            TransactionStateTopic(self),
        )
        self.producer_ids = RpcProducerIdManager(self.node_id)
        self._producer_id_requests: set[asyncio.Task[None]] = set()
        self.follower = MetadataFollower(
            self.metadata_client,
            self.cache,
            self._on_metadata,
            self.node_id,
            on_published=self._on_metadata_published,
        )
        self.servers: list[KafkaServer] = []
        self.metrics: BrokerMetrics | None = None
        self.unfenced = asyncio.Event()
        self.initially_caught_up = asyncio.Event()  # the metadata log applied past our first registration
        self._last_heartbeat = "none yet"
        self._fenced_since = time.monotonic()  # the heartbeat thread's, as the two below
        self._stall_reported = False
        # Set (on the daemon's loop) before the heartbeats are cancelled: cancelling reaches the heartbeat
        # thread a hop later, and an answer arriving meanwhile must change nothing (no registering again,
        # no new broker epoch for the clean shutdown marker).
        self.shutting_down = threading.Event()
        self._heartbeat_loop_ended = threading.Event()

    # The lifecycle core's, read (and, by tests, set) as the node's own.
    @property
    def state(self) -> State:
        return self.lifecycle.state

    @state.setter
    def state(self, state: State) -> None:
        self.lifecycle.state = state

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch

    @broker_epoch.setter
    def broker_epoch(self, epoch: int) -> None:
        self.lifecycle.broker_epoch = epoch

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    # ---- metadata ----------------------------------------------------------------------------------------
    async def _on_metadata(self, changes: Changes) -> None:
        await self.replica_manager.on_metadata(changes)
        self.refresh_connection_quotas()
        if self.metrics is not None:
            self.metrics.on_metadata(self)

    def _on_metadata_published(self) -> None:
        if self.caught_up():
            self.initially_caught_up.set()

    def refresh_connection_quotas(self) -> None:
        """The connection creation rates from this broker's dynamic configs, the cluster-wide default and
        the static settings (Kafka's DynamicConnectionQuota): every metadata batch, a few lookups. The ip
        entities' rates ConnectionQuotas reads from the image itself when they changed."""
        settings, quotas = self.settings, self.connection_quotas
        static = {MAX_CONNECTION_CREATION_RATE: str(settings.max_connection_creation_rate)}
        for listener, name, value in settings.listener_properties:
            if name == MAX_CONNECTION_CREATION_RATE:
                static[listener_rate_key(listener)] = value
        image = self.cache.image
        broker, per_listener = creation_rates(
            quotas.listeners,
            (
                image.dynamic_config(ResourceType.BROKER, str(self.node_id)),
                image.dynamic_config(ResourceType.BROKER, ""),
                static,
            ),
        )
        quotas.update_broker_rate(broker)
        for listener, rate in per_listener.items():
            quotas.update_listener_rate(listener, rate)

    def _on_leadership(self, topic: str, partition: int, leader: bool) -> None:
        if topic == TRANSACTION_STATE_TOPIC:
            self.transactions.on_leadership(partition, leader)
        if topic != OFFSETS_TOPIC:
            return
        if leader:
            self.groups.load_partition(partition, self._offsets_records(partition), CacheTopics(self.cache))
        else:
            self.groups.unload_partition(partition)

    def _offsets_records(self, partition: int) -> Iterator[LoggedOffsetRecord]:
        """Read as the load iterates them, so a log that cannot be read fails that partition's coordinator
        alone, not the leadership change."""
        yield from self.offsets_topic.read_all(partition)

    def caught_up(self) -> bool:
        """The metadata log has been applied, and its changes carried out, past our own registration
        record."""
        return self.lifecycle.caught_up(self.follower.published_offset)

    # ---- controller calls --------------------------------------------------------------------------------
    async def _send_alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        # v2 or v3 (alter_partition_manager picks the version); their answers have the same fields
        return await self.alter_partition_channel.send(request, AlterPartitionResponse)

    def generate_producer_id(self) -> GeneratedProducerId:
        """An id for InitProducerId; asks the controller for the next block when the manager wants one."""
        generated = self.producer_ids.generate_producer_id(self.now_ms())
        self._maybe_allocate_producer_ids()
        return generated

    def _maybe_allocate_producer_ids(self) -> None:
        if self.producer_ids.take_block_request():
            task = asyncio.create_task(self._allocate_producer_ids(), name="allocate-producer-ids")
            self._producer_id_requests.add(task)
            task.add_done_callback(self._producer_id_requests.discard)

    async def _allocate_producer_ids(self) -> None:
        request = AllocateProducerIdsRequest(
            broker_id=BrokerId(self.node_id), broker_epoch=i64(self.broker_epoch)
        )
        error, start, length = ErrorCode.unknown_server_error, -1, 0
        try:
            response = await self.control.send(request, AllocateProducerIdsResponse)
            error, start, length = response.error_code, response.producer_id_start, response.producer_id_len
        except NetworkError as exc:
            self.log.info("AllocateProducerIds failed", error=str(exc))
        finally:  # any outcome settles the request, so the next InitProducerId may ask again
            self.producer_ids.handle_allocate_producer_ids_response(self.now_ms(), error, start, length)
        if error != ErrorCode.none:
            self.log.info("AllocateProducerIds refused", error=error.name)

    async def forward_to_controller(
        self, request: RequestPayload, response_type: type[R], client: RequestContext | None = None
    ) -> R:
        """The active controller's answer to ``request``, a ``response_type`` (TypeError if it is not): a
        client's (``client`` its context) in an Envelope carrying the client's header, principal and
        address, so the controller authorizes it and charges its quota as the client's (Kafka's
        ForwardingManager); the broker's own bare."""
        if client is None:
            response = forwarding.answer_as(await self.control.send(request, response_type), response_type)
        else:
            header = client.header
            envelope = forwarding.wrap(
                request, header.client_id, header.correlation_id, client.principal, client.client_host
            )
            try:
                answer = await self.control.send(envelope, EnvelopeResponse)
            except NetworkError:
                # No controller answered in time: REQUEST_TIMED_OUT, which admin clients retry (Kafka's
                # ForwardingManager.onTimeout), not UNKNOWN_SERVER_ERROR.
                return forwarding.timed_out(request, response_type)
            response = forwarding.unwrap_response(answer, request, response_type)
        await self._until_applied(request, response)
        return response

    async def _until_applied(self, request: RequestPayload, response: Payload) -> None:
        """Returns once our own metadata holds what ``response`` says the controller wrote, for the APIs a
        client reads back from us next (validate_only changes nothing)."""
        if getattr(request, "validate_only", False):
            return
        if response.__api_key__ == UPDATE_FEATURES_KEY:
            updated: UpdateFeaturesResponse = convert(response, UpdateFeaturesResponse)
            if updated.error_code != ErrorCode.none:
                return
            # Answer once our own metadata has the levels, so a describeFeatures next sees them.
            updates: UpdateFeaturesRequest = convert(request, UpdateFeaturesRequest)
            wanted = {u.feature: u.max_version_level for u in updates.feature_updates}

            def levels_applied() -> bool:
                features = self.cache.image.features
                return all(features.get(f, 0) == level for f, level in wanted.items())

            await self.wait_for_metadata(levels_applied)
        elif response.__api_key__ == CREATE_TOPICS_KEY:
            topics: CreateTopicsResponse = convert(response, CreateTopicsResponse)
            created = [t.name for t in topics.topics if t.error_code == ErrorCode.none]

            # Answer once our own metadata knows the topics, so the client's next Metadata call sees them.
            def topics_applied() -> bool:
                image = self.cache.image
                return all(image.topic(n) is not None for n in created)

            await self.wait_for_metadata(topics_applied)

    async def wait_for_metadata(self, applied: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Returns once ``applied()`` holds for our metadata cache (or the wait ends), so a client's next
        request to this broker sees what the controller has just written."""
        deadline = time.monotonic() + timeout_s
        while not applied() and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.follower.progress.wait(), 0.5)

    async def auto_create_topic(self, name: str) -> None:
        from kio.schema.create_topics.v7 import request as ct

        alive = len(self.cache.image.alive_brokers())
        topic = ct.CreatableTopic(
            name=TopicName(name),
            num_partitions=i32(self.settings.num_partitions),
            replication_factor=i16(max(1, min(self.settings.default_replication_factor, alive))),
            assignments=(),
            configs=(),
        )
        import datetime

        request = ct.CreateTopicsRequest(
            topics=(topic,), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), validate_only=False
        )
        with contextlib.suppress(NetworkError):
            await self.forward_to_controller(request, CreateTopicsResponse)

    # ---- registration and heartbeats ---------------------------------------------------------------------
    async def discover_cluster_id(self) -> str:
        while True:
            try:
                response = await self.control.send(
                    DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(2)),
                    DescribeClusterResponse,
                )
                return response.cluster_id
            except NetworkError as exc:
                self.log.info("waiting for the controller", error=str(exc))
                await asyncio.sleep(0.5)

    async def register(self) -> None:
        """Registers this incarnation (Kafka's BrokerRegistration); refused once the broker shuts down."""
        if self.shutting_down.is_set():
            self.log.info("not registering again: shutting down")
            return
        self.lifecycle.begin_registration(self._take_clean_shutdown_marker())
        directory = uuid.UUID(self.logs.read_meta().get("directory.id", str(uuid.uuid4())))
        registration = Registration(
            cluster_id=self.cluster_id or "",
            listeners=tuple(
                Listener(
                    name=e.name,
                    host=e.host,
                    port=u16(e.port),
                    security_protocol=i16(self.listeners.security_protocol_id(e.name)),
                )
                for e in self.endpoints
            ),
            features=SUPPORTED_FEATURES,
            log_dirs=(directory,),
        )
        while True:
            try:
                response = await self.lifecycle_channel.send(
                    self.lifecycle.registration_request(registration), BrokerRegistrationResponse
                )
            except NetworkError as exc:
                self.log.info("registration failed; retrying", error=str(exc))
                await asyncio.sleep(self.lifecycle.on_registration_failed().delay_ms / 1000)
                continue
            if self.shutting_down.is_set():
                return
            outcome = self.lifecycle.on_registration_response(response)
            if isinstance(outcome, Registered):
                self._on_registered()
                return
            if isinstance(outcome, Refused):
                raise RegistrationRefused(
                    f"data dir {self.data_dir} belongs to cluster {self.cluster_id}, not the controller's"
                )
            if isinstance(outcome, Ignored):
                self.log.info("registration answer ignored: registered already")
                return
            self.log.info("registration refused; retrying", error=response.error_code.name)
            await asyncio.sleep(outcome.delay_ms / 1000)

    def _take_clean_shutdown_marker(self) -> int:
        """The epoch a controlled shutdown ended, or -1; read once: a crash after this start is unclean."""
        previous = -1
        marker = self.data_dir / LAST_EPOCH_FILE
        if marker.exists():
            with contextlib.suppress(ValueError):
                previous = int(marker.read_text().strip())
            marker.unlink()
        return previous

    def _on_registered(self) -> None:
        # the channels that follow the heartbeats' (metadata, control, AlterPartition) start at the active
        # controller at once, not only once a heartbeat has found it
        self.heartbeat_channel.current = self.lifecycle_channel.current
        self.producer_ids.request_block_now(self.now_ms())
        self._maybe_allocate_producer_ids()
        self.log.info("registered", broker_epoch=self.broker_epoch, incarnation=str(self.incarnation_id))
        if self.events is not None:
            self.events.emit(
                "broker_started",
                broker=self.node_id,
                epoch=self.broker_epoch,
                incarnation=str(self.incarnation_id),
            )

    async def heartbeats(self, stopping: asyncio.Event) -> None:
        """The heartbeat loop on the heartbeat thread, until the controller lets this broker shut down;
        cancelling this cancels the loop."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()  # the heartbeat thread's: a SIGTERM sends the next heartbeat at once
        self.heartbeat_thread.start()
        self.loop_watch.start(loop)
        waker = loop.create_task(stopping.wait())
        waker.add_done_callback(lambda _: self.heartbeat_thread.call_soon(wake.set))
        try:
            await self.heartbeat_thread.submit(self.heartbeat_loop(stopping, wake, loop))
        finally:
            waker.cancel()
            self.loop_watch.stop()
            # cancelled: the loop on the heartbeat thread ends a hop later
            await asyncio.to_thread(self._heartbeat_loop_ended.wait, HEARTBEAT_STOP_TIMEOUT_S)

    async def heartbeat_loop(
        self, stopping: asyncio.Event, wake: asyncio.Event, daemon_loop: asyncio.AbstractEventLoop
    ) -> None:
        """Runs on the heartbeat thread. It reads and moves the lifecycle core and hands what
        belongs to the daemon's loop back to it: registering again, and setting ``unfenced``. An error
        other than a network one (a malformed answer, the daemon's loop closing) is logged and the next
        heartbeat follows a backoff later, as Kafka's lifecycle manager's event queue goes on after a
        failed event: a broker that stopped heartbeating would be fenced while it runs."""
        self._fenced_since = time.monotonic()
        try:
            while self.state != State.SHUTTING_DOWN and not self.shutting_down.is_set():
                try:
                    await self._heartbeat(stopping, wake, daemon_loop)
                except RegistrationRefused:
                    raise  # ends the heartbeats task, which stops the broker through its shutdown steps
                except Exception:
                    self.log.exception("heartbeat failed; retrying")
                    await asyncio.sleep(HEARTBEAT_ERROR_BACKOFF_S)
        finally:
            self._heartbeat_loop_ended.set()

    async def _heartbeat(
        self, stopping: asyncio.Event, wake: asyncio.Event, daemon_loop: asyncio.AbstractEventLoop
    ) -> None:
        """One heartbeat, its answer acted on, and the wait for the next."""
        self._stall_reported = self._loop_stalled(self._stall_reported)
        if self._stall_reported:
            await asyncio.sleep(LoopWatch.TICK_S)
            return
        self._report_fenced()
        if self.state == State.STARTING:  # a registration again that failed: as Kafka's CommunicationEvent
            await self._register_on(daemon_loop)
            return
        # the offset every metadata listener (the replicas) has carried out
        request = self.lifecycle.heartbeat_request(self.follower.published_offset)
        try:
            response = await self.heartbeat_channel.send(request, BrokerHeartbeatResponse)
        except NetworkError as exc:
            self._last_heartbeat = f"failed: {exc}"
            self.log.debug("heartbeat failed", error=str(exc))
            await asyncio.sleep(self.lifecycle.on_heartbeat_failed().delay_ms / 1000)
            return
        if self.shutting_down.is_set():
            return  # the daemon's loop is shutting down: the answer changes nothing now
        self._last_heartbeat = f"{response.error_code.name} fenced={response.is_fenced}"
        outcome = self.lifecycle.on_heartbeat_response(response)
        delay_ms = await self._carry_out(outcome, daemon_loop)
        if delay_ms is not None:
            await self._until_next_heartbeat(delay_ms, request, stopping, wake)

    async def _carry_out(
        self, outcome: HeartbeatOutcome, daemon_loop: asyncio.AbstractEventLoop
    ) -> int | None:
        """What a heartbeat's answer asks of the broker; the milliseconds until the next heartbeat, or None
        when the wait is over already (registered again, a retry's backoff slept) or the loop ends."""
        if isinstance(outcome, RegisterAgain):
            self.log.warning("stale broker epoch; registering again")
            await self._register_on(daemon_loop)
        elif isinstance(outcome, RetryAfter):  # NOT_CONTROLLER: no active controller yet
            self.log.debug("heartbeat refused", error=outcome.error.name if outcome.error else None)
            await asyncio.sleep(outcome.delay_ms / 1000)
        elif isinstance(outcome, Unfenced):
            daemon_loop.call_soon_threadsafe(self.unfenced.set)
            return outcome.next_heartbeat_ms
        elif isinstance(outcome, Fenced):
            self.log.warning("fenced by the controller")
            return outcome.next_heartbeat_ms
        elif isinstance(outcome, NextHeartbeat):
            return outcome.delay_ms
        elif isinstance(outcome, Ignored):  # never at once: an answer ignored again would spin
            return self.lifecycle.next_heartbeat_ms()
        return None  # ShutDownNow

    async def _register_on(self, daemon_loop: asyncio.AbstractEventLoop) -> None:
        """Registers again, on the daemon's loop (its channels and the producer-id block live there)."""
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.register(), daemon_loop))

    async def _until_next_heartbeat(
        self, delay_ms: int, sent: BrokerHeartbeatRequest, stopping: asyncio.Event, wake: asyncio.Event
    ) -> None:
        """A SIGTERM wakes the wait (the next heartbeat asks to shut down), unless this one did already."""
        interval = delay_ms / 1000
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                wake.wait() if not sent.want_shut_down else asyncio.sleep(interval), interval
            )
        if stopping.is_set() and not self.shutting_down.is_set():
            self.lifecycle.begin_controlled_shutdown()

    def _report_fenced(self) -> None:
        """Why a broker stays fenced, every few seconds at info, without debug logging."""
        if self.state == State.RUNNING:
            self._fenced_since = time.monotonic()
        elif time.monotonic() - self._fenced_since > FENCED_REPORT_SECONDS:
            self._fenced_since = time.monotonic()
            self.log.info(
                "still fenced",
                broker_epoch=self.broker_epoch,
                metadata_offset=self.follower.published_offset - 1,
                controller=self.heartbeat_channel.address,
                metadata_from=self.metadata_client.address,
                last_heartbeat=self._last_heartbeat,
            )

    def _loop_stalled(self, reported: bool) -> bool:
        """Whether the daemon's loop has stalled past the watch's bound (no heartbeat then: the session
        lapses and the controller fences this broker); says so once a stall, and once it is over."""
        stalled = self.loop_watch.stalled_for()
        if stalled is not None and not reported:
            self.log.warning(
                "event loop stalled; no heartbeats until it runs again",
                stalled_s=round(stalled, 3),
                bound_s=self.loop_watch.bound_s,
            )
        elif stalled is None and reported:
            self.log.warning("event loop running again; heartbeats resume")
        return stalled is not None

    # ---- observability ----------------------------------------------------------------------------------
    def observe_produce(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_produce_latency(seconds)

    def observe_fetch(self, is_follower: bool, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_fetch(is_follower, seconds)

    def state_json(self) -> BrokerState:
        return {
            "node_id": self.node_id,
            "state": self.state.value,
            "broker_epoch": self.broker_epoch,
            "incarnation": str(self.incarnation_id),
            "metadata_offset": self.cache.next_offset,
            "brokers": [
                {
                    "id": r.broker_id,
                    "epoch": r.epoch,
                    "fenced": r.fenced,
                    "in_controlled_shutdown": r.in_controlled_shutdown,
                }
                for r in sorted(self.cache.image.brokers.values(), key=lambda r: r.broker_id)
            ],
            "partitions": self.replica_manager.partition_metrics(),
        }

    def positions_json(self) -> BrokerPositions:
        """/v1/positions: the replicas' log end offsets and high watermarks (the controller's live view)."""
        return {"node_id": self.node_id, "positions": self.replica_manager.replica_positions()}


def _event_log(metrics_dir: str | None, node: str) -> EventLog | None:
    if not metrics_dir:
        return None
    try:
        from epochkraft.metrics.events import EventLog
    except ImportError:
        return None
    return EventLog(metrics_dir, node)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="epochkraft broker", description="Run a broker daemon.")
    parser.add_argument("--node-id", type=int, required=True, help="this broker's id (>= 0)")
    parser.add_argument(
        "--listen",
        help="HOST:PORT of the one listener, named PLAINTEXT (port 0: any free); or the listeners property",
    )
    parser.add_argument(
        "--controller",
        required=True,
        help="HOST:PORT of the controller listener; of each controller, comma-separated, for a quorum",
    )
    parser.add_argument("--data-dir", required=True, help="directory holding this broker's logs")
    parser.add_argument("--metrics-dir", help="directory for structured events (JSON lines)")
    add_admin_arguments(parser)
    parser.add_argument("--config", help="a .properties file (see config/broker.properties)")
    parser.add_argument(
        "--override",
        action="append",
        metavar="KEY=VALUE",
        help="a property, over the config file's (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--check-config", action="store_true", help="validate flags and config, then exit")
    return parser


async def serve(
    args: argparse.Namespace,
    settings: BrokerSettings,
    listeners: Listeners,
    controller: list[tuple[str, int]],
) -> int:
    log = logs.configure(f"broker-{args.node_id}", args.log_level)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    if UNSAFE_STALL_LOOP_S_FOR_TESTS > 0:
        loop.add_signal_handler(signal.SIGUSR1, time.sleep, UNSAFE_STALL_LOOP_S_FOR_TESTS)
    started = time.monotonic()
    try:
        node = BrokerNode(args, settings, listeners, controller, log)
        loaded = node.logs.load_all()
    except OSError as exc:  # one line saying what and where, not a traceback
        log.error(
            f"cannot open the log dir {args.data_dir}: {exc.strerror or exc}"
            + (f" ({exc.filename})" if exc.filename else "")
        )
        return 1
    log.info("logs recovered", partitions=len(loaded), seconds=round(time.monotonic() - started, 3))
    try:
        return await _run(args, node, stopping)
    finally:  # on every way out, early ones too: the heartbeat thread is not left running
        await _stop_heartbeat_thread(node)


async def _run(args: argparse.Namespace, node: BrokerNode, stopping: asyncio.Event) -> int:
    """The broker from its listeners' start to its clean shutdown marker; the exit code."""
    log, settings, listeners = node.log, node.settings, node.listeners
    loop = asyncio.get_running_loop()
    exit_code = 0
    halting: list[asyncio.Task[None]] = []

    def log_dir_offline(reason: str) -> None:
        halting.append(loop.create_task(_halt(log, node, reason), name="log-dir-failure"))

    def background_task_failed(reason: str) -> None:
        nonlocal exit_code
        exit_code = 1
        stopping.set()

    node.replica_manager.log_dir_failures.listeners.append(log_dir_offline)
    node.replica_manager.on_fatal = background_task_failed
    turns = TurnGate()  # one event loop: its listeners' client requests share one bound per turn
    for endpoint in listeners.bind:
        server = KafkaServer(
            BROKER,
            node,
            endpoint.host,
            endpoint.port,
            max_frame_bytes=settings.socket_request_max_bytes,
            max_connections=settings.max_connections,
            idle_timeout_ms=settings.connections_max_idle_ms,
            log=log,
            listener_name=endpoint.name,
            max_connections_per_ip=settings.max_connections_per_ip,
            max_connections_per_ip_overrides=parse_ip_overrides(settings.max_connections_per_ip_overrides),
            reserved_connections=settings.max_connections_reserved_inter_broker,
            quotas=node.client_quotas,
            connection_quotas=node.connection_quotas,
            turns=turns,
            ssl_context=node.security.server_ssl(listeners.protocols[endpoint.name], endpoint.name),
            sasl=node.security.sasl_sessions(
                listeners.protocols[endpoint.name], lambda: node.cache.image.scram_credentials
            ),
        )
        await server.start(serving=False)  # bound now (its port registered), serving once caught up
        node.servers.append(server)
    node.endpoints = listeners.registered({s.listener_name: s.port for s in node.servers})
    node.cluster_id = await node.discover_cluster_id()
    meta = node.logs.read_meta()
    if meta.get("cluster.id") and meta["cluster.id"] != node.cluster_id:
        node.cluster_id = meta["cluster.id"]  # the controller will answer INCONSISTENT_CLUSTER_ID
    try:
        await node.register()
    except RegistrationRefused as exc:
        log.critical("registration refused", reason=str(exc))
        return 1
    node.logs.write_meta(node.node_id, node.cluster_id)
    node.follower.start(on_fatal=background_task_failed)
    node.replica_manager.start()
    node.groups.start()
    node.transactions.start()
    admin = await _start_admin(args, node)
    heartbeats = asyncio.create_task(node.heartbeats(stopping), name="heartbeats")
    heartbeats.add_done_callback(lambda task: _report_failed(log, task, background_task_failed))
    stop_wait = asyncio.create_task(stopping.wait())
    # Clients are served once the metadata log is applied past our registration, as Kafka's BrokerServer
    # enables request processing only after its initial catch-up: a restarted broker with no metadata yet
    # would answer Metadata with no brokers and topics, and Produce with UNKNOWN_TOPIC_OR_PARTITION.
    caught_up = asyncio.create_task(node.initially_caught_up.wait())
    await asyncio.wait([caught_up, stop_wait, heartbeats], return_when=asyncio.FIRST_COMPLETED)
    if node.initially_caught_up.is_set():
        for server in node.servers:
            await server.start_serving()
    ready = asyncio.create_task(node.unfenced.wait())
    await asyncio.wait([ready, stop_wait, heartbeats], return_when=asyncio.FIRST_COMPLETED)
    if node.unfenced.is_set():
        inter = next(e for e in node.endpoints if e.name == listeners.inter_broker)
        log.info(
            f"broker ready node_id={node.node_id} listen={inter.host}:{inter.port}",
            listeners=",".join(str(e) for e in node.endpoints),
            broker_epoch=node.broker_epoch,
        )
    await stop_wait
    log.info("controlled shutdown starting")
    # Not wait_for, which would cancel the heartbeats on timeout before the flag below is set; a failed
    # heartbeats task was reported by its done callback, and the shutdown goes on.
    await asyncio.wait([heartbeats], timeout=settings.controlled_shutdown_timeout_ms / 1000)
    node.shutting_down.set()
    heartbeats.cancel()
    await asyncio.wait([heartbeats], timeout=HEARTBEAT_STOP_TIMEOUT_S + 1)
    node.lifecycle.close()
    try:
        async with asyncio.timeout(SHUTDOWN_STEPS_TIMEOUT_S):
            # Fetchers and every other writer stop for good before the logs close.
            for server in node.servers:
                await server.stop()
            await node.follower.stop()
            await node.groups.stop()
            await node.transactions.stop()
            await node.replica_manager.stop()
            if admin is not None:
                await admin.stop()
    except TimeoutError:
        log.error(f"broker shutdown steps took over {SHUTDOWN_STEPS_TIMEOUT_S} s; exiting without them")
        return 1
    if node.metrics is not None:
        node.metrics.stop()
    node.logs.close()
    # The clean shutdown marker goes last, once every log is closed (flushed): a broker killed before
    # this point registers as back from an unclean shutdown and leaves the ELR (KIP-966).
    (node.data_dir / LAST_EPOCH_FILE).write_text(str(node.broker_epoch))
    await node.control.close()
    await node.alter_partition_channel.close()
    await node.lifecycle_channel.close()
    await node.metadata_client.close()
    if node.events is not None:
        await node.events.aclose()
    log.info("broker stopped")
    return exit_code


def _report_failed(
    log: FilteringBoundLogger, task: asyncio.Task[None], on_fatal: Callable[[str], None]
) -> None:
    """A background task that ended with an error stops the broker (exit code 1), through its shutdown."""
    if task.cancelled() or (error := task.exception()) is None:
        return
    log.critical(f"{task.get_name()} failed; stopping the broker", exc_info=error)
    on_fatal(f"{task.get_name()} ended: {error!r}")


async def _stop_heartbeat_thread(node: BrokerNode) -> None:
    """Closes the heartbeat channel on its thread, in bounded time (a stuck thread must not hang the
    shutdown), then stops the thread."""
    if node.heartbeat_thread.loop.is_running():
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                node.heartbeat_thread.submit(node.heartbeat_channel.close()), HEARTBEAT_STOP_TIMEOUT_S
            )
    node.heartbeat_thread.stop()


async def _halt(log: FilteringBoundLogger, node: BrokerNode, reason: str) -> None:
    """Kafka's ReplicaManager.handleLogDirFailure with no online log dir left: the broker halts without
    touching the disk again, and the controller moves its leaderships when its session expires. The
    error answers already written get a moment to leave first."""
    log.critical(f"Shutdown broker because all log dirs in {node.data_dir} have failed", reason=reason)
    await asyncio.sleep(LOG_DIR_FAILURE_GRACE_S)
    os._exit(1)


async def _start_admin(args: argparse.Namespace, node: BrokerNode) -> AdminServer | None:
    try:
        from epochkraft.server.broker_metrics import BrokerMetrics
    except ImportError:
        return None
    node.metrics = BrokerMetrics(node)
    node.metrics.start()
    if args.admin_port is None:
        return None
    from epochkraft.metrics.admin_http import AdminServer, admin_security

    secured = (
        admin_security(node.security, lambda: node.cache.image.scram_credentials)
        if args.admin_secure
        else None
    )
    admin = AdminServer(
        args.admin_host,
        args.admin_port,
        node.metrics.registry,
        node.state_json,
        ready_fn=lambda: node.state == State.RUNNING,
        positions_fn=node.positions_json,
        security=secured,
    )
    await admin.start()
    return admin


def load(args: argparse.Namespace) -> tuple[BrokerSettings, Listeners, list[tuple[str, int]]]:
    if args.node_id < 0:
        raise ConfigError("--node-id must be >= 0")
    listen = parse_host_port(args.listen) if args.listen is not None else None
    controller = parse_controllers(args.controller)
    settings = load_settings(BrokerSettings, args.config, properties=parse_overrides(args.override))
    try:
        parse_ip_overrides(settings.max_connections_per_ip_overrides)
        for listener, name, value in settings.listener_properties:
            if name == MAX_CONNECTION_CREATION_RATE and not value.strip().isdigit():
                raise ValueError(f"{listener_rate_key(listener)}: {value!r} is not a whole number >= 0")
        parse_assignors(settings.group_consumer_assignors)
        MigrationPolicy.parse(settings.group_consumer_migration_policy)
        group_config.check_settings(group_config.bounds_of(settings))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    listeners = resolve_listeners(
        listen,
        settings.listeners,
        settings.advertised_listeners,
        settings.listener_security_protocol_map,
        settings.inter_broker_listener_name,
    )
    # Bad keystores, truststores and authorizer settings are configuration errors at start-up.
    security = NodeSecurity.build(settings)
    for endpoint in listeners.bind:
        security.server_ssl(listeners.protocols[endpoint.name], endpoint.name)
        security.sasl_sessions(listeners.protocols[endpoint.name], dict)
    security.client_ssl(controller_protocol(settings, dict(listeners.protocols)))
    security.client_ssl(listeners.inter_broker_protocol)
    if args.admin_secure:
        tls.admin_server_context(settings)
    return settings, listeners, controller


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings, listeners, controller = load(args)
    except ConfigError as exc:
        print(f"epochkraft broker: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.check_config:
        print(f"configuration ok: {settings}; listeners {', '.join(map(str, listeners.bind))}")
        return 0
    # Worker threads (produce validation, the log cleaner) hold the GIL in parsing loops: the event loop
    # waits at most this long for it between its turns (5 ms by default; 1 ms measured to cut the loop's
    # worst lag under record bombs from 21 to 15 ms, see epochkraft/bench/hostile.py).
    sys.setswitchinterval(0.001)
    keep_read_buffers()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(serve(args, settings, listeners, controller))
