"""SASL and SCRAM, sans-IO: bytes in, bytes out, as Kafka's SaslServerAuthenticator, ScramSaslServer and
PlainSaslServer answer them (ScramSaslServerTest, PlainSaslServerTest, RFC 7677's example)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochkraft.protocol.errors import ErrorCode
from epochkraft.security.sasl import SaslServerSession, SaslState, parse_jaas, plain_users
from epochkraft.security.scram import (
    MECHANISMS,
    ScramClient,
    ScramError,
    ScramServer,
    credential,
    parse_add_scram,
)

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="alice \\"quoted\\" secret";'
)


def test_rfc7677_example_exchange():
    stored = credential("SCRAM-SHA-256", "pencil", RFC7677_SALT, 4096)
    server = ScramServer("SCRAM-SHA-256", {"user": stored}.get, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert (
        server_first
        == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.username == "user"


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_scram_client_and_server_agree_and_a_wrong_password_fails(mechanism):
    stored = {"alice": credential(mechanism, "secret")}
    client = ScramClient(mechanism, "alice", "secret")
    server = ScramServer(mechanism, stored.get)
    assert client.verify(server.final(client.final(server.first(client.first()))))
    wrong = ScramClient(mechanism, "alice", "guess")
    server = ScramServer(mechanism, stored.get)
    with pytest.raises(ScramError):
        server.final(wrong.final(server.first(wrong.first())))


def session(users=None, scram=None):
    creds = scram or {}
    return SaslServerSession(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        users or {"alice": "secret"},
        lambda u, m: creds.get((u, m)),
    )


def test_plain_authenticates_and_names_the_principal():
    s = session()
    assert s.handshake("PLAIN") == ErrorCode.none
    assert s.authenticate(b"\0alice\0secret").error == ErrorCode.none
    assert s.authenticated and str(s.principal) == "User:alice"
    assert s.handshake("PLAIN") == ErrorCode.illegal_sasl_state  # once authenticated


@pytest.mark.parametrize(
    "token", [b"\0alice\0wrong", b"\0bob\0secret", b"alice\0secret", b"\0alice", b"bob\0alice\0secret"]
)
def test_wrong_credentials_get_sasl_authentication_failed_and_may_start_over(token):
    s = session()
    s.handshake("PLAIN")
    step = s.authenticate(token)
    assert step.error == ErrorCode.sasl_authentication_failed
    assert step.message == "Authentication failed: Invalid username or password"
    assert s.state == SaslState.HANDSHAKE and s.principal is None
    assert s.handshake("PLAIN") == ErrorCode.none


def test_scram_session_two_steps_and_unknown_user():
    stored = {("alice", 2): credential("SCRAM-SHA-512", "secret")}
    s = session(scram=stored)
    assert s.handshake("SCRAM-SHA-512") == ErrorCode.none
    client = ScramClient("SCRAM-SHA-512", "alice", "secret")
    first = s.authenticate(client.first())
    assert first.error == ErrorCode.none and not s.authenticated
    final = s.authenticate(client.final(first.auth_bytes))
    assert final.error == ErrorCode.none and client.verify(final.auth_bytes)
    assert str(s.principal) == "User:alice"
    other = session(scram=stored)
    other.handshake("SCRAM-SHA-256")  # alice has no SHA-256 credential
    assert other.authenticate(ScramClient("SCRAM-SHA-256", "alice", "secret").first()).error == (
        ErrorCode.sasl_authentication_failed
    )


def test_unsupported_mechanism_and_token_before_handshake():
    s = session()
    assert s.authenticate(b"\0alice\0secret").error == ErrorCode.illegal_sasl_state
    assert s.handshake("GSSAPI") == ErrorCode.unsupported_sasl_mechanism
    assert s.state == SaslState.HANDSHAKE


def test_jaas_users_and_add_scram_form():
    assert plain_users(JAAS) == {"admin": "admin-secret", "alice": 'alice "quoted" secret'}
    assert parse_jaas(JAAS)["username"] == "admin"
    assert parse_add_scram("SCRAM-SHA-512=[name=alice,password=alice-secret]") == (
        "SCRAM-SHA-512",
        "alice",
        "alice-secret",
        4096,
    )
    with pytest.raises(ValueError):
        parse_add_scram("SCRAM-SHA-1=[name=a,password=b]")


@settings(max_examples=150, deadline=None)
@given(
    mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    tokens=st.lists(st.binary(max_size=300), max_size=4),
)
def test_random_tokens_get_an_answer_never_an_exception(mechanism, tokens):
    stored = {
        ("alice", 1): credential("SCRAM-SHA-256", "secret", b"s" * 16),
        ("alice", 2): credential("SCRAM-SHA-512", "secret", b"s" * 16),
    }
    s = session(scram=stored)
    assert s.handshake(mechanism) == ErrorCode.none
    for token in tokens:
        step = s.authenticate(token)
        assert step.error in (
            ErrorCode.none,
            ErrorCode.sasl_authentication_failed,
            ErrorCode.illegal_sasl_state,
        )
        assert s.principal is None or s.authenticated


@settings(max_examples=100, deadline=None)
@given(tail=st.text(max_size=120))
def test_scram_messages_built_from_random_text_fail_cleanly(tail):
    stored = {("alice", 2): credential("SCRAM-SHA-512", "secret", b"s" * 16)}
    s = session(scram=stored)
    s.handshake("SCRAM-SHA-512")
    first = s.authenticate(f"n,,n=alice,r=abc{tail}".encode())
    if first.error == ErrorCode.none:
        final = s.authenticate(f"c=biws,r={first.auth_bytes.decode().split(',')[0][2:]},p={tail}".encode())
        assert final.error == ErrorCode.sasl_authentication_failed
