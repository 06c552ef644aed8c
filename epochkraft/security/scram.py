"""SCRAM (RFC 5802, RFC 7677) as Kafka's ScramSaslServer and ScramSaslClient speak it, sans-IO.

Credentials are what Kafka stores (UserScramCredentialRecord): salt, StoredKey = H(ClientKey),
ServerKey and iterations, never the password. ``ScramServer`` and ``ScramClient`` turn each message
into the next; no sockets, no clocks (nonces are passed in or drawn from ``secrets``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

# Kafka's ScramMechanism: name -> (type id in UserScramCredentialRecord, hash, minimum iterations)
MECHANISMS = {"SCRAM-SHA-256": (1, "sha256", 4096), "SCRAM-SHA-512": (2, "sha512", 4096)}
MECHANISM_NAMES = {type_id: name for name, (type_id, _, _) in MECHANISMS.items()}
DEFAULT_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism.maxIterations


class ScramError(Exception):
    """A SCRAM exchange that cannot succeed: malformed message, unknown user or wrong proof."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def credential(
    mechanism: str, password: str, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    """What Kafka stores for ``password`` (ScramFormatter.generateCredential)."""
    _, hash_name, minimum = MECHANISMS[mechanism]
    if not minimum <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"{mechanism} iterations must be in [{minimum}, {MAX_ITERATIONS}], got {iterations}")
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = _hmac(hash_name, salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def password_matches(mechanism: str, stored: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``stored`` was made from: its StoredKey is recomputed with the stored
    salt and iterations (ScramFormatter's saltedPassword, clientKey, storedKey), as ScramSaslServer checks a
    client's proof against StoredKey; the password itself is never kept."""
    hash_name = MECHANISMS[mechanism][1]
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), stored.salt, stored.iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), stored.stored_key)


def _attributes(message: str) -> dict[str, str]:
    result = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM attribute {part!r}")
        result[key] = value
    return result


def _username(saslname: str) -> str:
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name")
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


class ScramServer:
    """One server exchange: ``first(client_first) -> server_first``, ``final(client_final) -> server_final``.
    ``lookup(user)`` gives the stored credential or None; ``username`` is set once the proof checks."""

    def __init__(self, mechanism: str, lookup, server_nonce: str | None = None) -> None:
        self.hash_name = MECHANISMS[mechanism][1]
        self.lookup = lookup
        self.server_nonce = server_nonce or secrets.token_urlsafe(24)
        self.username: str | None = None
        self.started = False  # first() has run
        self._user = ""
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""

    def first(self, client_first: bytes) -> bytes:
        try:
            text = client_first.decode()
        except UnicodeDecodeError as exc:
            raise ScramError("client-first-message is not UTF-8") from exc
        gs2_cbind, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2_cbind not in ("n", "y"):
            raise ScramError("malformed client-first-message (channel binding is not supported)")
        attributes = _attributes(bare)
        if "n" not in attributes or "r" not in attributes:
            raise ScramError("client-first-message lacks n= or r=")
        user = _username(attributes["n"])
        if authzid and authzid != f"a={attributes['n']}":
            raise ScramError("authorization id differs from the user name")
        found = self.lookup(user)
        if found is None:
            raise ScramError("invalid user credentials")
        self.started = True
        self._user, self._credential = user, found
        self._nonce = attributes["r"] + self.server_nonce
        self._client_first_bare = bare
        salt = base64.b64encode(found.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={found.iterations}"
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        assert self._credential is not None, "first() before final()"
        try:
            text = client_final.decode()
        except UnicodeDecodeError as exc:
            raise ScramError("client-final-message is not UTF-8") from exc
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final-message lacks p=")
        attributes = _attributes(without_proof)
        if attributes.get("r") != self._nonce:
            raise ScramError("nonce mismatch")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError as exc:
            raise ScramError("proof is not base64") from exc
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self.hash_name, self._credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self.hash_name, client_key).digest(), self._credential.stored_key
        ):
            raise ScramError("invalid credentials")
        self.username = self._user
        server_signature = _hmac(self.hash_name, self._credential.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}".encode()


class ScramClient:
    """The client side, for tests and tools: ``first() -> client_first``, ``final(server_first) ->
    client_final``, ``verify(server_final)``."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self.hash_name = MECHANISMS[mechanism][1]
        self.password = password
        self.nonce = nonce or secrets.token_urlsafe(24)
        self._bare = f"n={_saslname(username)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attributes = _attributes(server_first.decode())
        if not attributes["r"].startswith(self.nonce):
            raise ScramError("server nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac(
            self.hash_name, self.password.encode(), base64.b64decode(attributes["s"]), int(attributes["i"])
        )
        client_key = _hmac(self.hash_name, salted, b"Client Key")
        without_proof = f"c=biws,r={attributes['r']}"
        auth_message = f"{self._bare},{server_first.decode()},{without_proof}".encode()
        signature = _hmac(self.hash_name, hashlib.new(self.hash_name, client_key).digest(), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(
            self.hash_name, _hmac(self.hash_name, salted, b"Server Key"), auth_message
        )
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return server_final.decode() == f"v={base64.b64encode(self._server_signature).decode()}"


def parse_add_scram(value: str) -> tuple[str, str, str, int]:
    """Kafka's ``kafka-storage format --add-scram`` form: ``SCRAM-SHA-512=[name=alice,password=secret]``
    (optionally ``iterations=N``) -> (mechanism, user, password, iterations); ValueError when malformed."""
    mechanism, sep, rest = value.partition("=")
    mechanism = mechanism.strip().upper()
    if not sep or mechanism not in MECHANISMS or not rest.startswith("[") or not rest.endswith("]"):
        raise ValueError(
            f"expected SCRAM-SHA-256=[name=USER,password=PASSWORD] or SCRAM-SHA-512=[...], got {value!r}"
        )
    options = {}
    for item in rest[1:-1].split(","):
        key, eq, option = item.partition("=")
        if not eq:
            raise ValueError(f"expected key=value in {value!r}, got {item!r}")
        options[key.strip()] = option.strip().strip('"')
    if not options.get("name") or "password" not in options:
        raise ValueError(f"--add-scram needs name= and password= in {value!r}")
    return mechanism, options["name"], options["password"], int(options.get("iterations", DEFAULT_ITERATIONS))
