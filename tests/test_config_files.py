"""config/broker.properties and config/controller.properties show every setting with its documentation
and its default, exactly as the daemons declare them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from epochkraft.broker.settings import BrokerSettings
from epochkraft.config import property_fields
from epochkraft.controller.settings import ControllerSettings

CONFIG = Path(__file__).resolve().parents[1] / "config"


def shown(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def documented(path: Path) -> dict[str, tuple[str, str]]:
    """{property: (doc comment above it, default shown)} from the commented-out lines of a file."""
    lines = path.read_text().splitlines()
    found = {}
    for i, line in enumerate(lines):
        if line.startswith("#") and "=" in line and not line.startswith("# "):
            name, _, value = line[1:].partition("=")
            found[name] = (lines[i - 1].removeprefix("# "), value)
    return found


@pytest.mark.parametrize(
    ("filename", "settings"),
    [("broker.properties", BrokerSettings), ("controller.properties", ControllerSettings)],
)
def test_config_file_shows_every_setting_and_its_default(filename, settings):
    expected = {
        name: (f.metadata["doc"], shown(f.default))
        for name, f in property_fields(settings).items()
        if f.default is not dataclasses.MISSING
    }
    assert documented(CONFIG / filename) == expected


def served_line(listener: str) -> str:
    from epochkraft.server.handlers import served

    def versions(spec) -> str:
        if spec.min_version == spec.max_version:
            return str(spec.min_version)
        return f"{spec.min_version}-{spec.max_version}"

    name = {1: "Fetch of `__cluster_metadata`"} if listener == "controller" else {}
    items = ", ".join(
        f"{name.get(key, spec.name)} ({key}) {versions(spec)}" for key, spec in served(listener).items()
    )
    return f"| {listener} | {items} |"


def test_docs_what_is_served_table_is_the_registry():
    page = (CONFIG.parent / "docs" / "kafka-compatibility.md").read_text()
    for listener in ("broker", "controller"):
        assert served_line(listener) in page, served_line(listener)
