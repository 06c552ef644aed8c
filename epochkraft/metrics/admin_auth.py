"""Who may read a secured admin HTTP port (``--admin-secure``), sans-IO: a request's client certificate and
Authorization header in, an HTTP status out.

A principal is named as on Kafka's listeners: a client certificate's distinguished name (the daemons and
tools, which hold one: the controller reading the brokers' /v1/state, ``cluster status``), or the user of
HTTP Basic auth whose password matches that user's SCRAM credential in the metadata log (a person with a
browser, which asks for a user and password by itself; installing a client certificate in a browser is a
chore). Only super users (super.users) are served while an authorizer is on, any authenticated principal
without one, as Kafka allows everything without an authorizer. /healthz stays open: it says only that the
process answers, and liveness probes hold no credentials.

Checking a password derives the SCRAM key (PBKDF2, thousands of rounds) on the daemon's event loop, which a
flood of wrong passwords must not be able to stall: a password once checked is remembered (by user,
credential and a digest of the password, so a changed credential is checked anew), only the user's first
stored mechanism is tried, and at most CHECKS_PER_SECOND new checks run a second; beyond that a request is
refused (401) without one. A stream opened with a password (the live view's /view/events) outlives the
request that opened it: ``stream_check`` notes the credential its password matched (salt, stored key,
iterations), and the check it returns, asked every few seconds, ends the stream once that credential is
changed or deleted, a lookup that neither derives a key nor spends the budget (which wrong passwords could
use up, keeping a stream alive after its password was changed).
"""

from __future__ import annotations

import base64
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from epochkraft.security.node import StoredScram, scram_lookup
from epochkraft.security.principal import (
    ANONYMOUS,
    USER_TYPE,
    KafkaPrincipal,
    PeerCertificate,
    principal_from_peer_certificate,
)
from epochkraft.security.scram import MECHANISMS, ScramCredential, password_matches

REALM = "epochkraft admin"
OPEN_PATHS = frozenset({"/healthz"})
OK, UNAUTHORIZED, FORBIDDEN = 200, 401, 403
CHECKS_PER_SECOND = 2  # new password checks (each a PBKDF2 derivation of 10-40 ms)
REMEMBERED_CHECKS = 64
# the request's key of a Basic-auth request's re-check (a callable of now_ms), for the streams it opens
STILL_ALLOWED_KEY = "epochkraft.admin.still_allowed"


@dataclass
class AdminAuth:
    # the SCRAM credentials the metadata image holds now, by (user, mechanism type)
    credentials: Callable[[], Mapping[tuple[str, int], StoredScram]]
    super_users: frozenset[KafkaPrincipal] | None  # None: no authorizer, any authenticated principal
    _verified: OrderedDict[tuple[str, bytes, bytes, int, bytes], None] = field(default_factory=OrderedDict)
    _budget_second: int = -1
    _checks_this_second: int = 0

    def status(
        self, path: str, authorization: str | None, peercert: PeerCertificate | None, now_ms: int = 0
    ) -> int:
        """OK to serve ``path``; UNAUTHORIZED without a principal; FORBIDDEN for one that is not a super user."""
        if path in OPEN_PATHS:
            return OK
        principal = self.principal(authorization, peercert, now_ms)
        if principal is None:
            return UNAUTHORIZED
        return OK if self._may_read(principal) else FORBIDDEN

    def stream_check(self, authorization: str) -> Callable[[int], bool]:
        """The re-check of a stream that ``authorization`` (HTTP Basic, just let through by ``status``)
        opens, a callable of now_ms: whether the credential its password matched is still the user's, and
        the user may still read. A credential set again, even to the same password, ends the stream."""
        basic = _basic(authorization)
        user = basic[0] if basic is not None else ""
        opened = self._fingerprint(user)

        def still_allowed(_now_ms: int) -> bool:
            unchanged = opened is not None and self._fingerprint(user) == opened
            return unchanged and self._may_read(KafkaPrincipal(USER_TYPE, user))

        return still_allowed

    def _fingerprint(self, user: str) -> tuple[int, bytes, bytes, int] | None:
        """The user's credential that a password is checked against (the first stored mechanism's)."""
        lookup = scram_lookup(self.credentials)
        for type_id, _, _ in MECHANISMS.values():
            stored = lookup(user, type_id)
            if stored is not None:
                return type_id, stored.salt, stored.stored_key, stored.iterations
        return None

    def _may_read(self, principal: KafkaPrincipal) -> bool:
        return self.super_users is None or principal in self.super_users

    def principal(
        self, authorization: str | None, peercert: PeerCertificate | None, now_ms: int = 0
    ) -> KafkaPrincipal | None:
        if peercert:  # verified against the truststore by the TLS handshake
            principal = principal_from_peer_certificate(peercert)
            return None if principal == ANONYMOUS else principal  # a certificate naming nobody
        if authorization is None:
            return None
        user, matches = self._basic_user(authorization, now_ms)
        return KafkaPrincipal(USER_TYPE, user) if matches else None

    def _basic_user(self, authorization: str, now_ms: int) -> tuple[str, bool | None]:
        """The user of HTTP Basic ``authorization`` and whether the password matches its credential (None:
        not checked, no check left this second)."""
        basic = _basic(authorization)
        if basic is None:
            return "", False
        user, password = basic
        lookup = scram_lookup(self.credentials)
        for mechanism, (type_id, _, _) in MECHANISMS.items():
            stored = lookup(user, type_id)
            if stored is not None:  # the first stored mechanism decides: one derivation per attempt
                return user, self._password_matches(user, mechanism, stored, password, now_ms)
        return user, False

    def _password_matches(
        self, user: str, mechanism: str, stored: ScramCredential, password: str, now_ms: int
    ) -> bool | None:
        digest = hashlib.sha256(password.encode()).digest()
        key = (user, stored.salt, stored.stored_key, stored.iterations, digest)
        if key in self._verified:
            self._verified.move_to_end(key)
            return True
        if not self._take_check(now_ms):
            return None
        if not password_matches(mechanism, stored, password):
            return False
        self._verified[key] = None
        if len(self._verified) > REMEMBERED_CHECKS:
            self._verified.popitem(last=False)
        return True

    def _take_check(self, now_ms: int) -> bool:
        second = now_ms // 1000
        if second != self._budget_second:
            self._budget_second, self._checks_this_second = second, 0
        if self._checks_this_second >= CHECKS_PER_SECOND:
            return False
        self._checks_this_second += 1
        return True


def _basic(authorization: str) -> tuple[str, str] | None:
    """``Basic base64(user:password)`` (RFC 7617, UTF-8) -> (user, password); None for anything else."""
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except ValueError:  # binascii.Error, UnicodeDecodeError, and non-ASCII text
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep and user else None


def challenge() -> str:
    """The WWW-Authenticate header of a 401: browsers then ask for a user and password."""
    return f'Basic realm="{REALM}", charset="UTF-8"'
