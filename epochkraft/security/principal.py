"""Kafka principals (``User:name``) as Kafka's DefaultKafkaPrincipalBuilder names them: User:ANONYMOUS on a
PLAINTEXT listener, the SASL user on a SASL listener, the certificate's distinguished name (RFC 2253, as
Java's ``X500Principal.getName()``) on an SSL listener with a client certificate."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

USER_TYPE = "User"
# X.509 attribute names -> the short names RFC 2253 (and Java) print
_RDN_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @staticmethod
    def parse(text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal; ValueError without a type (as Kafka's SecurityUtils)."""
        principal_type, sep, name = text.strip().partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"principal must be TYPE:NAME, got {text!r}")
        return KafkaPrincipal(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def _escape(value: str) -> str:
    escaped = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    return escaped


def distinguished_name(subject: Iterable[Iterable[tuple[str, str]]]) -> str:
    """``ssl.SSLSocket.getpeercert()['subject']`` -> the RFC 2253 string, most specific RDN first."""
    rdns = []
    for rdn in reversed(tuple(subject)):
        rdns.append("+".join(f"{_RDN_SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def principal_from_peer_certificate(peercert: Mapping[str, Any] | None) -> KafkaPrincipal:
    """The principal of a TLS connection: the client certificate's DN, or ANONYMOUS without one."""
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    return KafkaPrincipal(USER_TYPE, distinguished_name(peercert["subject"]))


def parse_super_users(value: str) -> frozenset[KafkaPrincipal]:
    """``super.users``: principals separated by semicolons (DNs hold commas)."""
    return frozenset(KafkaPrincipal.parse(item) for item in value.split(";") if item.strip())
