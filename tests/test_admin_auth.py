"""Who a secured admin HTTP port serves (metrics/admin_auth.py): HTTP Basic passwords checked against the SCRAM
credentials of the metadata log as ScramSaslServer checks a proof, client certificates named as on an SSL
listener, super users only while an authorizer is on, /healthz open."""

from __future__ import annotations

import base64

import pytest

from epochkraft.metrics import admin_auth
from epochkraft.metrics.admin_auth import CHECKS_PER_SECOND, FORBIDDEN, OK, UNAUTHORIZED, AdminAuth
from epochkraft.security.principal import KafkaPrincipal
from epochkraft.security.scram import MECHANISMS, credential, password_matches

ADMIN = KafkaPrincipal("User", "admin")
CONTROLLER = KafkaPrincipal("User", "CN=controller,O=epochkraft")
CREDENTIALS = {
    ("admin", MECHANISMS["SCRAM-SHA-512"][0]): credential("SCRAM-SHA-512", "s3cret"),
    ("alice", MECHANISMS["SCRAM-SHA-256"][0]): credential("SCRAM-SHA-256", "alice-pw"),
}
SUPER_USERS = frozenset({ADMIN, CONTROLLER})


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def certificate(common_name: str) -> dict[str, object]:
    """``getpeercert()`` of a verified client certificate."""
    return {"subject": ((("organizationName", "epochkraft"),), (("commonName", common_name),))}


def auth(super_users: frozenset[KafkaPrincipal] | None = SUPER_USERS) -> AdminAuth:
    return AdminAuth(lambda: CREDENTIALS, super_users)


def test_password_matches_the_stored_key_and_nothing_else():
    stored = credential("SCRAM-SHA-512", "s3cret")
    assert password_matches("SCRAM-SHA-512", stored, "s3cret")
    assert not password_matches("SCRAM-SHA-512", stored, "s3cret ")
    assert not password_matches("SCRAM-SHA-256", stored, "s3cret")  # another hash, another key


@pytest.mark.parametrize(
    ("authorization", "peercert", "expected"),
    [
        (basic("admin", "s3cret"), None, OK),
        (basic("admin", "wrong"), None, UNAUTHORIZED),
        (basic("nobody", "s3cret"), None, UNAUTHORIZED),
        (None, None, UNAUTHORIZED),
        ("Bearer s3cret", None, UNAUTHORIZED),
        ("Basic not-base64!", None, UNAUTHORIZED),
        ("Basic " + base64.b64encode(b"admin").decode(), None, UNAUTHORIZED),  # no colon, no password
        (basic("alice", "alice-pw"), None, FORBIDDEN),  # authenticated (SCRAM-SHA-256), not a super user
        (None, certificate("controller"), OK),
        (None, certificate("broker-9"), FORBIDDEN),
    ],
)
def test_only_super_users_are_served_while_an_authorizer_is_on(authorization, peercert, expected):
    assert auth().status("/v1/state", authorization, peercert) == expected


def test_without_an_authorizer_any_authenticated_principal_is_served():
    assert auth(None).status("/view/", basic("alice", "alice-pw"), None) == OK
    assert auth(None).status("/view/", basic("alice", "wrong"), None) == UNAUTHORIZED


def test_healthz_stays_open_and_nothing_else_does():
    assert auth().status("/healthz", None, None) == OK
    for path in ("/metrics", "/readyz", "/v1/state", "/view/", "/view/events", "/healthz/../v1/state"):
        assert auth().status(path, None, None) == UNAUTHORIZED


def test_a_password_changed_in_the_metadata_log_is_checked_against_the_new_credential():
    held = dict(CREDENTIALS)
    live = AdminAuth(lambda: held, SUPER_USERS)
    held[("admin", MECHANISMS["SCRAM-SHA-512"][0])] = credential("SCRAM-SHA-512", "rotated")
    assert live.status("/metrics", basic("admin", "s3cret"), None) == UNAUTHORIZED
    assert live.status("/metrics", basic("admin", "rotated"), None) == OK


def test_malformed_authorization_and_a_certificate_naming_nobody_get_401():
    """A header base64 cannot decode (non-ASCII) is refused, not a server error; a verified certificate with
    an empty subject names no principal (it would be User:ANONYMOUS)."""
    assert auth(None).status("/v1/state", "Basic é", None) == UNAUTHORIZED
    assert auth(None).status("/v1/state", None, {"subject": ()}) == UNAUTHORIZED


def test_wrong_password_floods_cost_at_most_checks_per_second(monkeypatch):
    """Each new password check derives a SCRAM key on the event loop: a flood of wrong passwords runs at most
    CHECKS_PER_SECOND derivations a second (the rest refused without one), and a password once verified is
    remembered, so the admin's browser keeps being served during the flood."""
    from epochkraft.metrics import admin_auth

    derivations = []
    real = admin_auth.password_matches

    def counted(mechanism, stored, password):
        derivations.append(password)
        return real(mechanism, stored, password)

    monkeypatch.setattr(admin_auth, "password_matches", counted)
    guard = auth()
    assert guard.status("/v1/state", basic("admin", "s3cret"), None, now_ms=0) == OK
    for i in range(50):
        assert guard.status("/v1/state", basic("admin", f"guess-{i}"), None, now_ms=500) == UNAUTHORIZED
    assert len(derivations) == admin_auth.CHECKS_PER_SECOND
    assert guard.status("/v1/state", basic("admin", "s3cret"), None, now_ms=600) == OK  # remembered
    assert len(derivations) == admin_auth.CHECKS_PER_SECOND
    assert guard.status("/v1/state", basic("admin", "guess-x"), None, now_ms=1_000) == UNAUTHORIZED
    assert len(derivations) == admin_auth.CHECKS_PER_SECOND + 1  # a new second, a new budget


def test_a_stream_opened_with_a_password_ends_once_its_credential_changes_or_is_deleted(monkeypatch):
    """A live view stream outlives the request that opened it: its re-check, asked every few seconds, holds
    while the credential its password matched is unchanged and fails once that credential is set again (even
    to the same password: a new salt), changed or deleted; a lookup that derives no key, so wrong passwords
    that use up this second's checks cannot keep a stream alive after its password changed."""
    derivations: list[str] = []
    real = admin_auth.password_matches

    def counted(mechanism, stored, password):
        derivations.append(password)
        return real(mechanism, stored, password)

    monkeypatch.setattr(admin_auth, "password_matches", counted)
    held = dict(CREDENTIALS)
    live = AdminAuth(lambda: held, SUPER_USERS)
    admin = basic("admin", "s3cret")
    key = ("admin", MECHANISMS["SCRAM-SHA-512"][0])
    assert live.status("/view/events", admin, None, now_ms=0) == OK
    opened = live.stream_check(admin)
    assert opened(2_000) and opened(4_000)
    held[key] = credential("SCRAM-SHA-512", "rotated")
    for i in range(CHECKS_PER_SECOND):  # this second's checks spent on wrong passwords
        assert live.status("/v1/state", basic("admin", f"guess-{i}"), None, now_ms=6_000) == UNAUTHORIZED
    assert not opened(6_500)  # ended at once, the budget spent or not
    assert derivations == ["s3cret"] + [f"guess-{i}" for i in range(CHECKS_PER_SECOND)]
    rotated = basic("admin", "rotated")
    assert live.status("/view/events", rotated, None, now_ms=8_000) == OK
    reopened = live.stream_check(rotated)
    assert reopened(8_000)
    held[key] = credential("SCRAM-SHA-512", "rotated")  # the same password set again
    assert not reopened(10_000)
    assert live.status("/view/events", rotated, None, now_ms=12_000) == OK
    again = live.stream_check(rotated)
    del held[key]
    assert not again(14_000)
    assert not auth().stream_check(basic("alice", "alice-pw"))(0)  # verified, not a super user
    assert not auth().stream_check("Bearer x")(0)


def test_the_admin_password_is_not_sent_where_a_redirect_points():
    """``cluster status --admin`` with --user: urllib copies a request's ordinary headers to the request a
    redirect makes, so the Authorization header is one it does not copy (add_unredirected_header)."""
    import io
    import urllib.request
    from email.message import Message

    from epochkraft.harness.remote_status import AdminCredentials, state_request

    request = state_request("127.0.0.1:9193", AdminCredentials(user="admin", password="s3cret"))
    assert request.get_header("Authorization") == basic("admin", "s3cret")
    redirected = urllib.request.HTTPRedirectHandler().redirect_request(
        request, io.BytesIO(), 302, "Found", Message(), "https://elsewhere.example/v1/state"
    )
    assert redirected is not None and not redirected.has_header("Authorization")
    assert not state_request("127.0.0.1:9193", None).has_header("Authorization")
