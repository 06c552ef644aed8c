"""The API registry: one decorator per handler declares its key, version range and listeners.

The dispatcher and the ApiVersions handler both read this table, so what a listener advertises can
never drift from what it serves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

BROKER = "broker"
CONTROLLER = "controller"

Handler = Callable[[Any, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    listeners: frozenset[str]
    handler: Handler

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_REGISTRY: dict[str, dict[int, ApiSpec]] = {BROKER: {}, CONTROLLER: {}}


def api(
    key: int, name: str, versions: tuple[int, int], listeners: tuple[str, ...]
) -> Callable[[Handler], Handler]:
    """Registers ``handler(request, ctx) -> response`` for ``key`` in ``versions`` on ``listeners``."""

    def register(handler: Handler) -> Handler:
        spec = ApiSpec(key, name, versions[0], versions[1], frozenset(listeners), handler)
        for listener in listeners:
            if key in _REGISTRY[listener]:
                raise RuntimeError(f"API key {key} registered twice on the {listener} listener")
            _REGISTRY[listener][key] = spec
        return handler

    return register


def registered(listener: str) -> dict[int, ApiSpec]:
    """The APIs registered so far for a listener, by key (``epochkraft.server.handlers.served`` imports
    every handler first)."""
    return dict(sorted(_REGISTRY[listener].items()))
