"""What a handler knows about the request it serves."""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from typing import cast

from structlog.typing import FilteringBoundLogger

from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.protocol.framing import RequestHeader
from epochkraft.security.authorizer import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    StandardAuthorizer,
    operations_bitfield,
)
from epochkraft.security.principal import ANONYMOUS, KafkaPrincipal
from epochkraft.security.sasl import SaslServerSession
from epochkraft.server.apis import BrokerApis, ControllerApis


class WrongListener(TypeError):
    """A handler asked for the daemon of the other listener: a bug in the API registry's listeners."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    listener: str
    header: RequestHeader
    api_version: int
    node: (
        BrokerApis | ControllerApis
    )  # the daemon serving the listener: reach it by ``broker``/``controller_node``
    peer: tuple[object, ...] | None  # the client's address as the transport gives it (host, port, ...)
    log: FilteringBoundLogger
    listener_name: str = "PLAINTEXT"  # the named listener the request came in on
    principal: KafkaPrincipal = ANONYMOUS  # who the connection authenticated as
    authorizer: StandardAuthorizer | None = None  # None: every request is allowed (no authorizer.class.name)
    sasl: SaslServerSession | None = None  # the connection's SASL state on a SASL listener
    forwarded: bool = False  # a client's request a broker forwarded in an Envelope

    @property
    def broker(self) -> BrokerApis:
        """The broker serving the request (a handler of the broker listener)."""
        if self.listener != BROKER:
            raise WrongListener(f"a broker's handler served on the {self.listener} listener")
        return cast(BrokerApis, self.node)

    @property
    def controller_node(self) -> ControllerApis:
        """The controller serving the request (a handler of the controller listener)."""
        if self.listener != CONTROLLER:
            raise WrongListener(f"a controller's handler served on the {self.listener} listener")
        return cast(ControllerApis, self.node)

    @staticmethod
    def now_ms() -> int:
        """Wall-clock milliseconds: the state machines take time as an argument, read here at the edge."""
        return int(time.time() * 1000)

    @property
    def client_host(self) -> str:
        return str(self.peer[0]) if self.peer else ""

    @property
    def group_client_host(self) -> str:
        """The client's address as Kafka's group coordinator keeps it for a member (InetAddress.toString:
        ``/127.0.0.1``), shown by DescribeGroups and ConsumerGroupDescribe and written to __consumer_offsets."""
        host = self.client_host
        if not host:
            return ""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:  # not an address (a forwarded client's host as its broker wrote it)
            return host if host.startswith("/") else "/" + host
        if address.version == 6:  # Java writes each group in full, without leading zeros
            host = ":".join(format(int(group, 16), "x") for group in address.exploded.split(":"))
        return "/" + host

    def authorized(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Kafka's AuthHelper.authorize: always true without an authorizer."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.client_host, operation, resource_type, name)

    def authorized_cluster(self, operation: AclOperation) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_cluster(self.principal, self.client_host, operation)

    def authorized_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(
            self.principal, self.client_host, operation, resource_type
        )

    def authorized_operations(self, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """The bitfield of the operations on ``name`` the principal may perform, of those Kafka supports for
        the resource type: all of them without an authorizer (AuthHelper.authorizedOperations)."""
        supported = SUPPORTED_OPERATIONS[resource_type]
        return operations_bitfield(op for op in supported if self.authorized(op, resource_type, name))

    @property
    def is_super_user(self) -> bool:
        """Without an authorizer everyone may do everything, as in Kafka."""
        return self.authorizer is None or self.authorizer.is_super_user(self.principal)
