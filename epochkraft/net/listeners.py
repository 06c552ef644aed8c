"""A broker's named listeners, as Kafka configures them: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` and ``inter.broker.listener.name``.

Each listener is ``NAME://HOST:PORT``; an empty HOST binds every interface. A broker registers every
advertised listener with the controller, and Metadata and FindCoordinator answer with the endpoints of the
listener the request came in on, so clients inside a network and clients outside it each get addresses
they can reach. Followers fetch from leaders on the inter-broker listener. Every security protocol is
served; the inter-broker listener is PLAINTEXT or SSL (brokers authenticate to each other with TLS). The checks follow Kafka's KafkaConfig
(``validateValues``) and ListenerInfo (ephemeral ports and wildcard hosts in what is registered).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from epochkraft.config import ConfigError

DEFAULT_LISTENER_NAME = "PLAINTEXT"
# Kafka's default listener.security.protocol.map
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
# security protocol -> Kafka's id (SecurityProtocol.id)
SERVED_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
KNOWN_PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
_ENDPOINT = re.compile(r"^([A-Za-z0-9_.-]+)://(\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):(-?\d+)$")


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    name: str
    host: str  # empty: every interface
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_endpoints(value: str, property_name: str) -> tuple[ListenerEndpoint, ...]:
    """``NAME://HOST:PORT,...`` -> endpoints; names are case-insensitive (kept upper-case) and unique."""
    endpoints: list[ListenerEndpoint] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        match = _ENDPOINT.match(item)
        if match is None:
            raise ConfigError(f"{property_name}: expected NAME://HOST:PORT, got {item!r}")
        name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"{property_name}: port out of range in {item!r}")
        if any(e.name == name for e in endpoints):
            raise ConfigError(f"{property_name}: listener name {name} appears more than once")
        endpoints.append(ListenerEndpoint(name, host, port))
    return tuple(endpoints)


def parse_protocol_map(value: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...``."""
    result: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip() or protocol.strip().upper() not in KNOWN_PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: expected NAME:PROTOCOL with a protocol from "
                f"{', '.join(sorted(KNOWN_PROTOCOLS))}, got {item!r}"
            )
        result[name.strip().upper()] = protocol.strip().upper()
    return result


@dataclass(frozen=True, slots=True)
class Listeners:
    """What a broker binds, what it registers, and which listener its followers use."""

    bind: tuple[ListenerEndpoint, ...]
    advertised: tuple[ListenerEndpoint, ...]
    protocols: Mapping[str, str]
    inter_broker: str

    def registered(self, bound_ports: Mapping[str, int]) -> tuple[ListenerEndpoint, ...]:
        """The advertised endpoints with port 0 replaced by the port the same listener bound and an empty
        host by this machine's name, as Kafka's ListenerInfo does before registering."""
        result = []
        for endpoint in self.advertised:
            port = endpoint.port or bound_ports.get(endpoint.name, 0)
            host = endpoint.host or socket.getfqdn()
            result.append(ListenerEndpoint(endpoint.name, host, port))
        return tuple(result)

    def security_protocol_id(self, name: str) -> int:
        return SERVED_PROTOCOLS[self.protocols[name]]

    @property
    def inter_broker_protocol(self) -> str:
        return self.protocols[self.inter_broker]


def resolve_listeners(
    listen: tuple[str, int] | None,
    listeners: str,
    advertised_listeners: str,
    protocol_map: str,
    inter_broker_listener_name: str,
) -> Listeners:
    """Builds and checks a broker's listeners. ``--listen HOST:PORT`` is the one-listener form:
    ``listeners=PLAINTEXT://HOST:PORT``."""
    if listen is not None and listeners:
        raise ConfigError("give the listeners with --listen or with the listeners property, not both")
    if listen is not None:
        bind: tuple[ListenerEndpoint, ...] = (ListenerEndpoint(DEFAULT_LISTENER_NAME, *listen),)
    else:
        bind = parse_endpoints(listeners, "listeners")
    if not bind:
        raise ConfigError("no listener: give --listen HOST:PORT or the listeners property")
    advertised = (
        parse_endpoints(advertised_listeners, "advertised.listeners") if advertised_listeners else bind
    )
    protocols = parse_protocol_map(protocol_map or DEFAULT_PROTOCOL_MAP)
    for endpoint in bind:
        protocol = protocols.get(endpoint.name)
        if protocol is None:
            raise ConfigError(
                f"listener {endpoint.name} has no security protocol in listener.security.protocol.map"
            )
        if protocol not in SERVED_PROTOCOLS:
            raise ConfigError(
                f"listener {endpoint.name}: security protocol {protocol} is not served "
                f"({', '.join(SERVED_PROTOCOLS)})"
            )
    bound_names = {e.name for e in bind}
    for endpoint in advertised:
        if endpoint.name not in bound_names:
            raise ConfigError(
                f"advertised.listeners names {endpoint.name}, which is not in listeners "
                f"({', '.join(sorted(bound_names))})"
            )
        if endpoint.host == "0.0.0.0":
            raise ConfigError(
                f"advertised.listeners cannot use the nonroutable meta-address 0.0.0.0 ({endpoint}); "
                "name an address clients can reach"
            )
    inter_broker = (inter_broker_listener_name or DEFAULT_LISTENER_NAME).upper()
    if inter_broker not in {e.name for e in advertised}:
        raise ConfigError(
            f"inter.broker.listener.name must be a listener name defined in advertised.listeners; "
            f"{inter_broker} is not one of {', '.join(e.name for e in advertised)}"
        )
    if protocols.get(inter_broker, "").startswith("SASL"):
        raise ConfigError(
            f"inter.broker.listener.name {inter_broker} is {protocols[inter_broker]}: the inter-broker listener "
            "must be PLAINTEXT or SSL (brokers authenticate to each other with TLS client certificates)"
        )
    return Listeners(bind=bind, advertised=advertised, protocols=protocols, inter_broker=inter_broker)
