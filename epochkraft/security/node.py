"""A daemon's security, built once from its settings: the authorizer (or none), the TLS context of its SSL
listeners and the one its own clients use."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from epochkraft.config import ConfigError
from epochkraft.security import tls
from epochkraft.security.authorizer import STANDARD_AUTHORIZER, StandardAuthorizer
from epochkraft.security.principal import parse_super_users
from epochkraft.security.sasl import SaslServerSession, parse_mechanisms, plain_users
from epochkraft.security.scram import ScramCredential
from epochkraft.security.settings import SecuritySettings

TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
PLAINTEXT = "PLAINTEXT"


class StoredScram(Protocol):
    """A stored SCRAM credential (the metadata log's UserScramCredentialRecord, read-only)."""

    @property
    def salt(self) -> bytes: ...
    @property
    def stored_key(self) -> bytes: ...
    @property
    def server_key(self) -> bytes: ...
    @property
    def iterations(self) -> int: ...


def scram_lookup(
    credentials: Callable[[], Mapping[tuple[str, int], StoredScram]],
) -> Callable[[str, int], ScramCredential | None]:
    """SCRAM credentials as the metadata image holds them (UserScramCredentialRecords by user and mechanism),
    read from the image current at each lookup."""

    def lookup(user: str, mechanism: int) -> ScramCredential | None:
        record = credentials().get((user, mechanism))
        if record is None:
            return None
        return ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)

    return lookup


def build_authorizer(settings: SecuritySettings) -> StandardAuthorizer | None:
    name = settings.authorizer_class_name.strip()
    if not name:
        return None
    if name not in (STANDARD_AUTHORIZER, "StandardAuthorizer"):
        raise ConfigError(f"authorizer.class.name: only {STANDARD_AUTHORIZER} is served, got {name!r}")
    try:
        super_users = parse_super_users(settings.super_users)
    except ValueError as exc:
        raise ConfigError(f"super.users: {exc}") from exc
    return StandardAuthorizer(super_users, settings.allow_everyone_if_no_acl_found)


def controller_protocol(settings: SecuritySettings, protocols: dict[str, str]) -> str:
    """The controller listener's security protocol: that of the first of controller.listener.names."""
    names = [n.strip().upper() for n in settings.controller_listener_names.split(",") if n.strip()]
    if not names:
        return PLAINTEXT
    protocol = protocols.get(names[0])
    if protocol is None:
        raise ConfigError(
            f"controller.listener.names {names[0]} has no security protocol in listener.security.protocol.map"
        )
    return protocol


@dataclass
class NodeSecurity:
    settings: SecuritySettings
    authorizer: StandardAuthorizer | None
    _server_ssl: dict[str, ssl.SSLContext] = field(default_factory=dict, repr=False)  # by client auth
    _client_ssl: ssl.SSLContext | None = field(default=None, repr=False)

    @staticmethod
    def build(settings: SecuritySettings) -> NodeSecurity:
        return NodeSecurity(settings, build_authorizer(settings))

    def server_ssl(self, protocol: str, listener: str = "") -> ssl.SSLContext | None:
        """The TLS context of ``listener``, with ``protocol`` (None: not TLS)."""
        if protocol not in TLS_PROTOCOLS:
            return None
        sasl = protocol == "SASL_SSL"
        client_auth = self.settings.ssl_client_auth_for(listener, sasl=sasl).lower()
        if client_auth not in self._server_ssl:
            self._server_ssl[client_auth] = tls.server_context(self.settings, listener, sasl=sasl)
        return self._server_ssl[client_auth]

    def client_ssl(self, protocol: str) -> ssl.SSLContext | None:
        """The TLS context this daemon's clients use towards a listener with ``protocol``."""
        if protocol not in TLS_PROTOCOLS:
            return None
        if self._client_ssl is None:
            self._client_ssl = tls.client_context(self.settings)
        return self._client_ssl

    def sasl_sessions(
        self, protocol: str, credentials: Callable[[], Mapping[tuple[str, int], StoredScram]]
    ) -> Callable[[], SaslServerSession] | None:
        """A new SASL session per connection on a SASL listener (None: not SASL)."""
        if protocol not in SASL_PROTOCOLS:
            return None
        mechanisms = parse_mechanisms(self.settings.sasl_enabled_mechanisms)
        users = plain_users(self.settings.sasl_jaas_config)
        lookup = scram_lookup(credentials)
        return lambda: SaslServerSession(mechanisms, users, lookup)
