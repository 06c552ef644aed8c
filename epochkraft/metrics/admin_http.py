"""The admin HTTP port of every daemon (aiohttp): /metrics (Prometheus text), /healthz (the process
answers), /readyz (the daemon serves: a broker is RUNNING, i.e. registered and unfenced; a controller of a Raft
quorum leads it or follows its leader; 503 otherwise)
and /v1/state (JSON); a controller's also serves the live web view (/view/, metrics/live_view.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from epochkraft.metrics.live_view import LiveView


class AdminServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        state_fn: Callable[[], dict[str, Any]],
        ready_fn: Callable[[], bool] | None = None,
        live_view: LiveView | None = None,
    ):
        self.host = host
        self.ready_fn = ready_fn
        self.requested_port = port
        self.registry = registry
        self.state_fn = state_fn
        self.live_view = live_view  # a controller's /view/
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/v1/state", self._state)
        if self.live_view is not None:
            self.live_view.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, self.requested_port)
        await self._site.start()

    @property
    def port(self) -> int:
        server = self._site._server if self._site is not None else None
        assert isinstance(server, asyncio.Server)
        return int(server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.live_view is not None:
            await self.live_view.stop()  # ends the browsers' streams, which the runner would wait for
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, _request: web.Request) -> web.Response:
        if self.ready_fn is None or self.ready_fn():
            return web.json_response({"status": "ready"})
        state = self.state_fn().get("state")
        return web.json_response({"status": "not ready", "state": state}, status=503)

    async def _state(self, _request: web.Request) -> web.Response:
        return web.json_response(self.state_fn())
