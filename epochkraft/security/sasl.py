"""SASL on a connection, sans-IO, as Kafka's SaslServerAuthenticator: SaslHandshake picks a mechanism,
then SaslAuthenticate carries its tokens until the mechanism is complete; bytes in, bytes out.

- Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served; anything else
  closes the connection (Kafka: "Unexpected Kafka request ... during SASL handshake").
- An unknown or disabled mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled ones; a token out of
  turn ILLEGAL_SASL_STATE; a wrong user or password SASL_AUTHENTICATION_FAILED, answered, after which the
  client may start over with a new handshake.
- PLAIN checks ``user_NAME="password"`` entries of ``sasl.jaas.config`` (Kafka's PlainServerCallbackHandler);
  SCRAM-SHA-256/512 the credentials in the metadata log (UserScramCredentialRecords). The principal is
  ``User:<name>``.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from epochkraft.config import ConfigError
from epochkraft.protocol.errors import ErrorCode
from epochkraft.security.principal import USER_TYPE, KafkaPrincipal
from epochkraft.security.scram import MECHANISMS, ScramCredential, ScramError, ScramServer

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISMS)
# APIs served on a SASL listener before authentication completes
PRE_AUTHENTICATION_APIS = frozenset({17, 18, 36})
AUTHENTICATION_FAILED = "Authentication failed: Invalid username or password"
_JAAS_ENTRY = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')

ScramLookup = Callable[[str, int], ScramCredential | None]  # (user, mechanism type id) -> credential


def parse_jaas(config: str) -> dict[str, str]:
    """The ``key="value"`` options of a JAAS entry (``... PlainLoginModule required username="a" ...;``)."""
    return {key: value.replace('\\"', '"') for key, value in _JAAS_ENTRY.findall(config)}


def plain_users(jaas: str) -> dict[str, str]:
    """PLAIN's users: the ``user_NAME="password"`` options."""
    return {key[len("user_") :]: value for key, value in parse_jaas(jaas).items() if key.startswith("user_")}


def parse_mechanisms(value: str) -> tuple[str, ...]:
    mechanisms = tuple(m.strip().upper() for m in value.split(",") if m.strip())
    for mechanism in mechanisms:
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(
                f"sasl.enabled.mechanisms: {mechanism} is not served ({', '.join(SUPPORTED_MECHANISMS)})"
            )
    return mechanisms


class SaslState(Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake
    AUTHENTICATE = "authenticate"  # mechanism chosen, tokens flowing
    COMPLETE = "complete"


@dataclass(frozen=True, slots=True)
class SaslStep:
    error: ErrorCode
    message: str | None = None
    auth_bytes: bytes = b""


class SaslServerSession:
    def __init__(self, enabled: tuple[str, ...], plain: Mapping[str, str], scram: ScramLookup) -> None:
        self.enabled = enabled
        self.plain = plain
        self.scram = scram
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self._scram: ScramServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == SaslState.COMPLETE

    def handshake(self, mechanism: str) -> ErrorCode:
        if self.state != SaslState.HANDSHAKE:
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.enabled:
            return ErrorCode.unsupported_sasl_mechanism
        self.mechanism = mechanism
        self.state = SaslState.AUTHENTICATE
        if mechanism in MECHANISMS:
            type_id = MECHANISMS[mechanism][0]
            self._scram = ScramServer(mechanism, lambda user: self.scram(user, type_id))
        return ErrorCode.none

    def authenticate(self, token: bytes) -> SaslStep:
        if self.state != SaslState.AUTHENTICATE:
            return SaslStep(ErrorCode.illegal_sasl_state, "SaslAuthenticate before SaslHandshake")
        if self._scram is None:
            return self._plain(token)
        try:
            if not self._scram.started:
                return SaslStep(ErrorCode.none, None, self._scram.first(token))
            reply = self._scram.final(token)
        except ScramError:
            return self._fail()
        self._complete(self._scram.username or "")
        return SaslStep(ErrorCode.none, None, reply)

    def _plain(self, token: bytes) -> SaslStep:
        parts = token.split(b"\0")
        if len(parts) != 3:
            return self._fail()
        authzid, user, password = (p.decode(errors="replace") for p in parts)
        expected = self.plain.get(user)
        if (
            not user
            or expected is None
            or (authzid and authzid != user)
            or not hmac.compare_digest(expected.encode(), password.encode())
        ):
            return self._fail()
        self._complete(user)
        return SaslStep(ErrorCode.none)

    def _complete(self, user: str) -> None:
        self.principal = KafkaPrincipal(USER_TYPE, user)
        self.state = SaslState.COMPLETE

    def _fail(self) -> SaslStep:
        # Start over: the client may try again with a new SaslHandshake.
        self.state, self.mechanism, self._scram = SaslState.HANDSHAKE, None, None
        return SaslStep(ErrorCode.sasl_authentication_failed, AUTHENTICATION_FAILED)
