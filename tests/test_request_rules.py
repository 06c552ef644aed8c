"""The authorization rules read the group, topics, transactional ids and config resources of every version
of every API in their tables that a listener serves: a super user is allowed each request, a principal with
no ACLs refused it, and neither meets a request the rules cannot read."""

from __future__ import annotations

import pytest

from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import RequestHeader
from epochkraft.security.authorizer import StandardAuthorizer
from epochkraft.security.principal import KafkaPrincipal, parse_super_users
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers import served
from epochkraft.server.request_rules import (
    CONFIG_OPERATIONS,
    GROUP_OPERATIONS,
    TOPIC_OPERATIONS,
    TRANSACTIONAL_ID_OPERATIONS,
    refusal,
)
from tests.support.kio_requests import Scenario, request_for

ALICE = KafkaPrincipal("User", "alice")
RULED_KEYS = (
    set(GROUP_OPERATIONS) | set(TOPIC_OPERATIONS) | set(CONFIG_OPERATIONS) | set(TRANSACTIONAL_ID_OPERATIONS)
)
SCENARIO = Scenario("rules", topic="orders", group="app", overrides={"transactional_id": "txn"})


def _served_versions() -> list[tuple[str, int, int]]:
    return sorted(
        {
            (spec.name, key, version)
            for listener in (BROKER, CONTROLLER)
            for key, spec in served(listener).items()
            if key in RULED_KEYS
            for version in range(spec.min_version, spec.max_version + 1)
        }
    )


def _context(super_users: str) -> RequestContext:
    authorizer = StandardAuthorizer(parse_super_users(super_users), False)
    header = RequestHeader(0, 0, 1, "client", 0)
    return RequestContext(
        "broker", header, 0, None, ("127.0.0.1", 1), None, principal=ALICE, authorizer=authorizer
    )


@pytest.mark.parametrize(("name", "key", "version"), _served_versions())
def test_every_served_version_is_read_and_ruled(name: str, key: int, version: int) -> None:
    request = request_for(key, version, SCENARIO)
    assert refusal(key, request, _context("User:alice")) is None
    assert refusal(key, request, _context("")) not in (None, ErrorCode.none)


def test_the_tables_rule_apis_the_listeners_serve() -> None:
    """Each API key the rules name is served somewhere, so the sweep above covers it."""
    assert {key for _, key, _ in _served_versions()} == RULED_KEYS
