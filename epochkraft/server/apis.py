"""What a broker and a controller offer the request handlers: the two daemons' interfaces, as Kafka's
KafkaApis and ControllerApis are given their collaborators. A handler reaches them through
``RequestContext.broker`` or ``RequestContext.controller_node``; mypy checks the daemons against them below.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.static.protocol import RequestPayload, ResponsePayload

if TYPE_CHECKING:
    from epochkraft.broker.client_quotas import ClientQuotas
    from epochkraft.broker.config_describer import ConfigDescriber
    from epochkraft.broker.group_service import GroupService
    from epochkraft.broker.metadata_cache import MetadataCache
    from epochkraft.broker.node import BrokerServices
    from epochkraft.broker.producer_id_manager import GeneratedProducerId
    from epochkraft.broker.replica_manager import ReplicaManager
    from epochkraft.broker.settings import BrokerSettings
    from epochkraft.broker.transaction_service import TransactionService
    from epochkraft.controller.controller import Controller
    from epochkraft.controller.metadata_log import MetadataLog
    from epochkraft.controller.quorum_driver import QuorumDriver
    from epochkraft.net.controller_channel import ControllerChannel
    from epochkraft.security.authorizer import StandardAuthorizer
    from epochkraft.server.broker_daemon import BrokerNode
    from epochkraft.server.context import RequestContext
    from epochkraft.server.controller_daemon import ControllerNode


# The response class a caller names for the controller's answer
R = TypeVar("R", bound=ResponsePayload)


class BrokerApis(Protocol):
    """A broker: its metadata, replicas and groups, and the way to the active controller."""

    @property
    def node_id(self) -> int: ...
    @property
    def cluster_id(self) -> str | None: ...
    @property
    def settings(self) -> BrokerSettings: ...
    @property
    def data_dir(self) -> Path: ...
    @property
    def cache(self) -> MetadataCache: ...
    @property
    def config_describer(self) -> ConfigDescriber: ...
    @property
    def replica_manager(self) -> ReplicaManager: ...
    @property
    def groups(self) -> GroupService: ...
    @property
    def control(self) -> ControllerChannel: ...
    @property
    def authorizer(self) -> StandardAuthorizer | None: ...
    @property
    def client_quotas(self) -> ClientQuotas: ...
    @property
    def transactions(self) -> TransactionService: ...

    def now_ms(self) -> int: ...
    def generate_producer_id(self) -> GeneratedProducerId: ...

    # a client's request with its context goes in an Envelope; the answer is a response_type
    async def forward_to_controller(
        self, request: RequestPayload, response_type: type[R], client: RequestContext | None = ...
    ) -> R: ...
    async def wait_for_metadata(self, applied: Callable[[], bool], timeout_s: float = ...) -> None: ...
    async def auto_create_topic(self, name: str) -> None: ...
    def observe_produce(self, seconds: float) -> None: ...
    def observe_fetch(self, is_follower: bool, seconds: float) -> None: ...


class ControllerApis(Protocol):
    """A controller: the controller state machine, its quorum (None for a single controller) and the
    metadata log brokers fetch."""

    @property
    def controller(self) -> Controller: ...
    @property
    def quorum(self) -> QuorumDriver | None: ...
    @property
    def metadata_log(self) -> MetadataLog: ...
    @property
    def snapshot_dir(self) -> Path | None: ...
    @property
    def client_quotas(self) -> ClientQuotas: ...
    @property
    def authorizer(self) -> StandardAuthorizer | None: ...

    def now_ms(self) -> int: ...
    async def wait_for_records(self, offset: int, max_wait_ms: int) -> None: ...


if TYPE_CHECKING:
    # The daemons offer what the handlers use: mypy fails here when either loses or changes a member.
    def _broker_offers_broker_apis(node: BrokerNode) -> BrokerApis:
        return node

    def _controller_offers_controller_apis(node: ControllerNode) -> ControllerApis:
        return node

    def _broker_offers_broker_services(node: BrokerNode) -> BrokerServices:
        return node
