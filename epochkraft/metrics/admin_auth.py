"""Who may read a secured admin HTTP port (``--admin-secure``), sans-IO: a request's client certificate and
Authorization header in, an HTTP status out.

A principal is named as on Kafka's listeners: a client certificate's distinguished name (the daemons and
tools, which hold one: the controller reading the brokers' /v1/state, ``cluster status``), or the user of
HTTP Basic auth whose password matches that user's SCRAM credential in the metadata log (a person with a
browser, which asks for a user and password by itself; installing a client certificate in a browser is a
chore). Only super users (super.users) are served while an authorizer is on, any authenticated principal
without one, as Kafka allows everything without an authorizer. /healthz stays open: it says only that the
process answers, and liveness probes hold no credentials.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from epochkraft.security.node import StoredScram, scram_lookup
from epochkraft.security.principal import USER_TYPE, KafkaPrincipal, principal_from_peer_certificate
from epochkraft.security.scram import MECHANISMS, password_matches

REALM = "epochkraft admin"
OPEN_PATHS = frozenset({"/healthz"})
OK, UNAUTHORIZED, FORBIDDEN = 200, 401, 403


@dataclass(frozen=True)
class AdminAuth:
    # the SCRAM credentials the metadata image holds now, by (user, mechanism type)
    credentials: Callable[[], Mapping[tuple[str, int], StoredScram]]
    super_users: frozenset[KafkaPrincipal] | None  # None: no authorizer, any authenticated principal

    def status(self, path: str, authorization: str | None, peercert: Mapping[str, Any] | None) -> int:
        """OK to serve ``path``; UNAUTHORIZED without a principal; FORBIDDEN for one that is not a super user."""
        if path in OPEN_PATHS:
            return OK
        principal = self.principal(authorization, peercert)
        if principal is None:
            return UNAUTHORIZED
        if self.super_users is not None and principal not in self.super_users:
            return FORBIDDEN
        return OK

    def principal(
        self, authorization: str | None, peercert: Mapping[str, Any] | None
    ) -> KafkaPrincipal | None:
        if peercert:  # verified against the truststore by the TLS handshake
            return principal_from_peer_certificate(peercert)
        if authorization is None:
            return None
        basic = _basic(authorization)
        if basic is None:
            return None
        user, password = basic
        lookup = scram_lookup(self.credentials())
        for mechanism, (type_id, _, _) in MECHANISMS.items():
            stored = lookup(user, type_id)
            if stored is not None and password_matches(mechanism, stored, password):
                return KafkaPrincipal(USER_TYPE, user)
        return None


def _basic(authorization: str) -> tuple[str, str] | None:
    """``Basic base64(user:password)`` (RFC 7617, UTF-8) -> (user, password); None for anything else."""
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep and user else None


def challenge() -> str:
    """The WWW-Authenticate header of a 401: browsers then ask for a user and password."""
    return f'Basic realm="{REALM}", charset="UTF-8"'
