"""The wire client, the broker's way to the controller and the request dispatch are typed by the protocol's
own classes: none of them falls back on ``Any``, so mypy checks what every caller reads of a response. Nor do
the modules typed by their own shapes (records' field values, JSON documents, events, kio classes as TypeVars)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "epochkraft"

TYPED_BY_THE_PROTOCOL = (
    "net/client.py",
    "net/controller_channel.py",
    "metadata/fetch_snapshot.py",
    "server/request_rules.py",
    "server/socket_server.py",
)
# Typed by their own shapes: metadata records' field values, JSON documents and events, kio classes as TypeVars.
TYPED_BY_THEIR_OWN_SHAPES = (
    "protocol/metadata_codec.py",
    "protocol/error_response.py",
    "protocol/produce_request.py",
    "protocol/framing.py",
    "protocol/versions.py",
    "protocol/fetch_response.py",
    "metrics/documents.py",
    "metrics/event_schema.py",
    "metrics/events.py",
    "metrics/live_view.py",
    "metrics/admin_http.py",
    "metrics/registry.py",
    "server/controller_daemon.py",
    "config.py",
    "broker/log/tail_cache.py",
    "raft/wire.py",
    "broker/consumer_group_records.py",
    "broker/group_service.py",
    "broker/replica_manager.py",
    "controller/controller.py",
    "controller/quorum_driver.py",
    "controller/requests.py",
    "controller/snapshots.py",
    "metrics/admin_auth.py",
    "security/principal.py",
    "server/broker_daemon.py",
    "server/broker_metrics.py",
    "server/loop_thread.py",
)


def uses_of_any(source: str) -> list[int]:
    """The lines naming ``typing.Any``, as a name or an attribute."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if (isinstance(node, ast.Name) and node.id == "Any")
        or (isinstance(node, ast.Attribute) and node.attr == "Any")
        or (isinstance(node, ast.alias) and node.name == "Any")
    ]


def test_the_check_sees_any_however_it_is_named():
    source = "from typing import Any\nimport typing\nx: typing.Any\ndef f(y: list[Any]) -> None: ...\n"
    assert uses_of_any(source) == [1, 3, 4]


def test_the_client_and_the_dispatch_name_no_any():
    found = {
        path: lines for path in TYPED_BY_THE_PROTOCOL if (lines := uses_of_any((PACKAGE / path).read_text()))
    }
    assert found == {}


def test_the_records_documents_and_codecs_name_no_any():
    found = {
        path: lines
        for path in TYPED_BY_THEIR_OWN_SHAPES
        if (lines := uses_of_any((PACKAGE / path).read_text()))
    }
    assert found == {}
