"""What the broker's internal-topic services (``__consumer_offsets``, ``__transaction_state``) need of the
broker they run in: its metadata, replicas, settings and security, and the way to the controller. The
broker daemon (``epochkraft.server.broker_daemon.BrokerNode``) offers it; mypy checks that in
``epochkraft.server.apis``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.static.protocol import RequestPayload, ResponsePayload
from structlog.typing import FilteringBoundLogger

if TYPE_CHECKING:
    from epochkraft.broker.metadata_cache import MetadataCache
    from epochkraft.broker.replica_manager import ReplicaManager
    from epochkraft.broker.settings import BrokerSettings
    from epochkraft.net.listeners import Listeners
    from epochkraft.security.node import NodeSecurity


# The response class a caller names for the controller's answer
R = TypeVar("R", bound=ResponsePayload)


class BrokerServices(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def settings(self) -> BrokerSettings: ...
    @property
    def cache(self) -> MetadataCache: ...
    @property
    def replica_manager(self) -> ReplicaManager: ...
    @property
    def listeners(self) -> Listeners: ...
    @property
    def security(self) -> NodeSecurity: ...
    @property
    def log(self) -> FilteringBoundLogger: ...

    def now_ms(self) -> int: ...

    # the broker's own request, answered with a response_type
    async def forward_to_controller(self, request: RequestPayload, response_type: type[R]) -> R: ...
