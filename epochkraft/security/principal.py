"""Kafka principals (``User:name``) as Kafka's DefaultKafkaPrincipalBuilder names them: User:ANONYMOUS on a
PLAINTEXT listener, the SASL user on a SASL listener, the certificate's distinguished name (RFC 2253, as
Java's ``X500Principal.getName()``) on an SSL listener with a client certificate."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

USER_TYPE = "User"
# ssl.SSLSocket.getpeercert(): "subject" a tuple of RDNs, each a tuple of (attribute, value) pairs
PeerCertificate: TypeAlias = Mapping[str, object]
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


def principal_from_peer_certificate(peercert: PeerCertificate | None) -> KafkaPrincipal:
    """The principal of a TLS connection: the client certificate's DN, or ANONYMOUS without one."""
    subject = peercert.get("subject") if peercert else None
    if not subject:
        return ANONYMOUS
    if not isinstance(subject, tuple):
        raise TypeError(f"a certificate subject of {type(subject).__name__}, not ssl's tuple of RDNs")
    return KafkaPrincipal(USER_TYPE, distinguished_name(subject))


def parse_super_users(value: str) -> frozenset[KafkaPrincipal]:
    """``super.users``: principals separated by semicolons (DNs hold commas)."""
    return frozenset(KafkaPrincipal.parse(item) for item in value.split(";") if item.strip())


# Kafka's KafkaPrincipalSerde as DefaultKafkaPrincipalBuilder implements it: DefaultPrincipalData (flexible
# version 0: compact strings Type and Name, bool tokenAuthenticated, no tagged fields) after an int16 version
# prefix (MessageUtil.toVersionPrefixedBytes). A broker forwarding a client's request in an Envelope carries
# the client's principal so.
PRINCIPAL_DATA_VERSION = 0


def _write_compact_string(out: bytearray, text: str) -> None:
    data = text.encode()
    length = len(data) + 1
    while length >= 0x80:
        out.append((length & 0x7F) | 0x80)
        length >>= 7
    out.append(length)
    out += data


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise ValueError("truncated or overlong varint in principal data")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _read_compact_string(data: bytes, pos: int) -> tuple[str, int]:
    length, pos = _read_uvarint(data, pos)
    if length == 0:
        raise ValueError("null string in principal data")
    end = pos + length - 1
    if end > len(data):
        raise ValueError("string runs past the end of the principal data")
    return data[pos:end].decode(), end


def serialize_principal(principal: KafkaPrincipal, token_authenticated: bool = False) -> bytes:
    """DefaultKafkaPrincipalBuilder.serialize."""
    out = bytearray(PRINCIPAL_DATA_VERSION.to_bytes(2, "big"))
    _write_compact_string(out, principal.principal_type)
    _write_compact_string(out, principal.name)
    out.append(1 if token_authenticated else 0)
    out.append(0)  # no tagged fields
    return bytes(out)


def deserialize_principal(data: bytes) -> KafkaPrincipal:
    """DefaultKafkaPrincipalBuilder.deserialize; ValueError for anything it would not read (Kafka then
    answers PRINCIPAL_DESERIALIZATION_FAILURE)."""
    if len(data) < 2:
        raise ValueError("principal data too short for its version")
    version = int.from_bytes(data[:2], "big", signed=True)
    if version != PRINCIPAL_DATA_VERSION:
        raise ValueError(f"unsupported principal data version {version}")
    try:
        principal_type, pos = _read_compact_string(data, 2)
        name, pos = _read_compact_string(data, pos)
    except UnicodeDecodeError as exc:
        raise ValueError("principal data is not UTF-8") from exc
    if pos >= len(data) or data[pos] not in (0, 1):
        raise ValueError("principal data lacks tokenAuthenticated")
    tagged, pos = _read_uvarint(data, pos + 1)
    for _ in range(tagged):  # tagged fields a later version may add: skipped
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
    if pos > len(data):
        raise ValueError("tagged field runs past the end of the principal data")
    return KafkaPrincipal(principal_type, name)
