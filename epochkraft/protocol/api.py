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
# Called with (request, ctx) before a request waits for the controller's write gate (see ``api``).
Arrival = Callable[[Any, Any], None]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    listeners: frozenset[str]
    handler: Handler
    on_arrival: Arrival | None = None

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_REGISTRY: dict[str, dict[int, ApiSpec]] = {BROKER: {}, CONTROLLER: {}}


def api(
    key: int,
    name: str,
    versions: tuple[int, int],
    listeners: tuple[str, ...],
    on_arrival: Arrival | None = None,
) -> Callable[[Handler], Handler]:
    """Registers ``handler(request, ctx) -> response`` for ``key`` in ``versions`` on ``listeners``.
    ``on_arrival(request, ctx)``, if given, runs as the request arrives, before it waits for its turn at the
    controller's write gate (a broker heartbeat's contact time)."""

    def register(handler: Handler) -> Handler:
        spec = ApiSpec(key, name, versions[0], versions[1], frozenset(listeners), handler, on_arrival)
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
