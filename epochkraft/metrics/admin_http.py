"""The admin HTTP port of every daemon (aiohttp): /metrics (Prometheus text), /healthz (the process
answers), /readyz (the daemon serves: a broker is RUNNING, i.e. registered and unfenced; a controller of a Raft
quorum leads it or follows its leader; 503 otherwise)
and /v1/state (JSON); a broker's also /v1/positions (its replicas' log ends and high watermarks, which the
live view reads every second: /v1/state's partitions are twenty times the bytes), a controller's the live web
view (/view/, metrics/live_view.py).
Secured (``--admin-secure``), it serves HTTPS and answers only the principals metrics/admin_auth.py lets in."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from epochkraft.metrics import admin_auth
from epochkraft.metrics.admin_auth import AdminAuth
from epochkraft.metrics.documents import BrokerPositions, BrokerState, ControllerState
from epochkraft.metrics.live_view import LiveView
from epochkraft.security import tls
from epochkraft.security.node import NodeSecurity, StoredScram

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class AdminSecurity:
    """HTTPS with this context, and only the principals ``auth`` lets in."""

    ssl: ssl.SSLContext
    auth: AdminAuth


class AdminServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        state_fn: Callable[[], ControllerState | BrokerState],
        ready_fn: Callable[[], bool] | None = None,
        live_view: LiveView | None = None,
        security: AdminSecurity | None = None,
        positions_fn: Callable[[], BrokerPositions] | None = None,
    ):
        self.host = host
        self.ready_fn = ready_fn
        self.requested_port = port
        self.registry = registry
        self.state_fn = state_fn
        self.live_view = live_view  # a controller's /view/
        self.security = security
        self.positions_fn = positions_fn  # a broker's /v1/positions
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    async def start(self) -> None:
        app = web.Application(middlewares=[self._guard] if self.security is not None else [])
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/v1/state", self._state)
        if self.positions_fn is not None:
            app.router.add_get("/v1/positions", self._positions)
        if self.live_view is not None:
            self.live_view.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        tls = self.security.ssl if self.security is not None else None
        self._site = web.TCPSite(self._runner, self.host, self.requested_port, ssl_context=tls)
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

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        assert self.security is not None
        peercert = request.transport.get_extra_info("peercert") if request.transport is not None else None
        status = self.security.auth.status(
            request.path, request.headers.get("Authorization"), peercert, int(time.monotonic() * 1000)
        )
        if status == admin_auth.UNAUTHORIZED:
            return web.Response(
                status=status,
                text="401: credentials needed\n",
                headers={"WWW-Authenticate": admin_auth.challenge()},
            )
        if status != admin_auth.OK:
            return web.Response(status=status, text=f"{status}: not a super user\n")
        authorization = request.headers.get("Authorization")
        if not peercert and authorization is not None:  # a password: a stream it opens is checked again
            request[admin_auth.STILL_ALLOWED_KEY] = self.security.auth.stream_check(authorization)
        return await handler(request)

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

    async def _positions(self, _request: web.Request) -> web.Response:
        assert self.positions_fn is not None
        return web.json_response(self.positions_fn())


def admin_security(
    node: NodeSecurity, credentials: Callable[[], Mapping[tuple[str, int], StoredScram]]
) -> AdminSecurity:
    """A secured admin port from the daemon's security settings: its keystore and truststore, and its
    super.users while the authorizer is on."""
    authorizer = node.authorizer
    super_users = authorizer.super_users if authorizer is not None else None
    return AdminSecurity(tls.admin_server_context(node.settings), AdminAuth(credentials, super_users))
