"""The controller's live web view: brokers, partitions, the quorum and a timeline of the metadata log's
events, pushed to browsers as server-sent events (`/view/`, `/view/events` on the admin HTTP port).

``ViewDiffer`` is sans-IO: it turns the controller's state (the same dict `/v1/state` serves) into what a
browser has not seen yet, so one tick costs one pass over the state whatever the number of browsers.
``LiveView`` is the asyncio edge: it ticks only while a browser is attached, and gives each browser a bounded
queue; a browser that does not keep up is dropped (its EventSource reconnects and starts from a snapshot),
so a slow or stuck browser never holds the controller back. While it ticks it also reads each broker's
`/v1/state` (replicas' log end offsets and high watermarks, which only the brokers know) when it is given
their admin addresses, and the chaos tool's faults from the metrics directory the controller writes to.
"""

from __future__ import annotations

import asyncio
import collections
import json
import ssl
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from aiohttp import web

TICK_S = 0.5  # how often attached browsers get what changed
QUEUE_MESSAGES = 64  # per browser; a browser this far behind is dropped
TIMELINE_EVENTS = 2_000  # the newest timeline events a new browser is sent
BROKER_POLL_TICKS = 2  # brokers' /v1/state read every second tick
BROKER_TIMEOUT_S = 1.0
CHAOS_NODE = "chaos"  # the event log node the chaos tool writes its faults as

log = structlog.get_logger()

Json = dict[str, Any]  # a JSON object as the controller's /v1/state gives it


@dataclass
class ViewDiffer:
    """What changed since the last tick, by broker id and by partition."""

    brokers: dict[int, Json] = field(default_factory=dict)
    partitions: dict[str, Json] = field(default_factory=dict)
    quorum: Json | None = None
    cluster: Json = field(default_factory=dict)

    def update(self, state: Json, now_ms: int) -> Json | None:
        """The changes of ``state`` against what was last seen, or None when nothing changed."""
        brokers = {b["id"]: b for b in _brokers(state, now_ms)}
        partitions = {_partition_key(p): p for p in _partitions(state)}
        quorum = state.get("quorum")
        cluster = {"cluster_id": state.get("cluster_id"), "metadata_offset": state.get("metadata_offset")}
        delta: Json = {}
        if cluster != self.cluster:
            delta["cluster"] = cluster
        changed_brokers = [b for i, b in brokers.items() if self.brokers.get(i) != b]
        if changed_brokers:
            delta["brokers"] = changed_brokers
        if gone := sorted(set(self.brokers) - set(brokers)):
            delta["removed_brokers"] = gone
        changed = [p for k, p in partitions.items() if self.partitions.get(k) != p]
        if changed:
            delta["partitions"] = changed
        if gone_partitions := sorted(set(self.partitions) - set(partitions)):
            delta["removed_partitions"] = gone_partitions
        if quorum != self.quorum:
            delta["quorum"] = quorum
        self.brokers, self.partitions, self.quorum, self.cluster = brokers, partitions, quorum, cluster
        return delta or None

    def snapshot(self) -> Json:
        """Everything a newly attached browser needs to draw the view."""
        return {
            "brokers": list(self.brokers.values()),
            "partitions": list(self.partitions.values()),
            "quorum": self.quorum,
            "cluster": self.cluster,
        }


def _brokers(state: Json, now_ms: int) -> Iterator[Json]:
    heartbeats: dict[str, int] = state.get("last_heartbeat_ms", {})
    for b in state.get("brokers", []):
        last = heartbeats.get(str(b["id"]))
        # whole seconds, so an idle broker does not change every tick
        age_s = None if last is None else max(now_ms - last, 0) // 1000
        yield b | {"heartbeat_age_s": age_s}


def _partitions(state: Json) -> Iterator[Json]:
    positions: dict[str, dict[int, Json]] = state.get("replica_positions", {})
    for p in state.get("partitions", []):
        leaderless = p["leader"] < 0
        under_min_isr = len(p["isr"]) < p.get("min_insync_replicas", 1)
        extra: Json = {"leaderless": leaderless, "under_min_isr": under_min_isr}
        if held := positions.get(_partition_key(p)):
            ends = {str(b): r["log_end_offset"] for b, r in sorted(held.items())}
            leader = held.get(p["leader"])
            extra |= {"log_end": ends}
            if leader is not None:
                extra |= {
                    "high_watermark": leader["high_watermark"],
                    "lag": max((leader["log_end_offset"] - end for end in ends.values()), default=0),
                }
        yield p | extra


def replica_positions(broker_states: dict[int, Json]) -> dict[str, dict[int, Json]]:
    """Each partition's replicas' log end offset and high watermark, from the brokers' /v1/state."""
    positions: dict[str, dict[int, Json]] = {}
    for broker, state in broker_states.items():
        for r in state.get("partitions", []):
            positions.setdefault(_partition_key(r), {})[broker] = {
                "log_end_offset": r["log_end_offset"],
                "high_watermark": r["high_watermark"],
            }
    return positions


def _partition_key(p: Json) -> str:
    return f"{p['topic']}-{p['partition']}"


class LiveView:
    """Ticks the differ while browsers are attached and fans its deltas and the timeline out to them."""

    def __init__(
        self,
        state_fn: Callable[[], Json],
        now_ms: Callable[[], int],
        broker_admin: dict[int, str] | None = None,
        metrics_dir: Path | None = None,
        broker_ssl: ssl.SSLContext | None = None,
    ) -> None:
        self.state_fn = state_fn
        self.now_ms = now_ms
        self.broker_admin = broker_admin or {}  # broker id -> HOST:PORT of its admin port
        self.broker_ssl = broker_ssl  # the brokers' admin ports are secured: HTTPS with this context
        self.broker_states: dict[int, Json] = {}
        self.faults = ChaosFaults(metrics_dir) if metrics_dir is not None else None
        self.differ = ViewDiffer()
        self.timeline: collections.deque[Json] = collections.deque(maxlen=TIMELINE_EVENTS)
        self.browsers: set[asyncio.Queue[str | None]] = set()
        self.dropped = 0  # browsers dropped for falling behind
        self._ticker: asyncio.Task[None] | None = None

    # ---- fed by the controller ---------------------------------------------------------------------------
    def on_event(self, name: str, fields: Json) -> None:
        """A domain event of the controller (the names the metrics schema documents) for the timeline."""
        event = {"ts_ms": self.now_ms(), "event": name} | fields
        self.timeline.append(event)
        self._publish("timeline", [event])

    # ---- browsers ---------------------------------------------------------------------------------------
    def attach(self) -> asyncio.Queue[str | None]:
        queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_MESSAGES)
        if not self.browsers:  # the first browser: the differ has not run since the last one left
            self.differ = ViewDiffer()
            self.differ.update(self._state(), self.now_ms())
        queue.put_nowait(_message("snapshot", self.differ.snapshot() | {"timeline": list(self.timeline)}))
        self.browsers.add(queue)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick(), name="live-view")
        return queue

    def detach(self, queue: asyncio.Queue[str | None]) -> None:
        self.browsers.discard(queue)

    def _publish(self, kind: str, payload: Json | list[Json]) -> None:
        if not self.browsers:
            return
        message = _message(kind, payload)
        for queue in list(self.browsers):
            try:
                queue.put_nowait(message)
            except asyncio.QueueFull:
                self._drop(queue)

    def _drop(self, queue: asyncio.Queue[str | None]) -> None:
        self.browsers.discard(queue)
        self.dropped += 1
        while not queue.empty():  # make room for the end marker: the browser reconnects to a snapshot
            queue.get_nowait()
        queue.put_nowait(None)

    def _state(self) -> Json:
        return self.state_fn() | {"replica_positions": replica_positions(self.broker_states)}

    async def _tick(self) -> None:
        ticks = 0
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=BROKER_TIMEOUT_S)) as http:
            while self.browsers:
                await asyncio.sleep(TICK_S)
                if self.broker_admin and ticks % BROKER_POLL_TICKS == 0:
                    await self._read_brokers(http)
                ticks += 1
                if self.faults is not None:
                    for fault in self.faults.read_new():
                        self.on_event("fault_injected", fault)
                delta = self.differ.update(self._state(), self.now_ms())
                if delta is not None:
                    self._publish("delta", delta)

    async def _read_brokers(self, http: aiohttp.ClientSession) -> None:
        scheme = "http" if self.broker_ssl is None else "https"
        tls: ssl.SSLContext | bool = self.broker_ssl or True

        async def read(broker: int, address: str) -> None:
            try:
                async with http.get(f"{scheme}://{address}/v1/state", ssl=tls) as answer:
                    answer.raise_for_status()
                    self.broker_states[broker] = await answer.json()
            except (aiohttp.ClientError, TimeoutError, ValueError):
                self.broker_states.pop(broker, None)  # a broker that does not answer shows no positions

        await asyncio.gather(*(read(b, a) for b, a in self.broker_admin.items()))

    async def stop(self) -> None:
        for queue in list(self.browsers):
            self._drop(queue)
        if self._ticker is not None:
            self._ticker.cancel()

    # ---- HTTP ---------------------------------------------------------------------------------------------
    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/view", _redirect_to_page)
        app.router.add_get("/view/", _static("index.html", "text/html"))
        app.router.add_get("/view/view.js", _static("view.js", "text/javascript"))
        app.router.add_get("/view/view.css", _static("view.css", "text/css"))
        app.router.add_get("/view/events", self._events)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        queue = self.attach()
        try:
            while (message := await queue.get()) is not None:
                await response.write(message.encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.detach(queue)
        return response


class ChaosFaults:
    """The chaos tool's faults, read as they are appended to its event files in the metrics directory."""

    def __init__(self, metrics_dir: Path) -> None:
        self.metrics_dir = metrics_dir
        self.read_to: dict[Path, int] = {}

    def read_new(self) -> list[Json]:
        faults: list[Json] = []
        for path in sorted(self.metrics_dir.glob(f"dt=*/node={CHAOS_NODE}/events-*.jsonl")):
            start = self.read_to.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read()
            except OSError:
                continue
            complete = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
            self.read_to[path] = start + len(complete)
            for line in complete.splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    log.warning("unreadable chaos event", file=str(path))
                    continue
                if event.get("event") == "fault_injected":
                    faults.append({k: v for k, v in event.items() if k in ("fault", "detail")})
        return faults


def _message(kind: str, payload: Json | list[Json]) -> str:
    return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _static(name: str, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    body = resources.files("epochkraft.metrics").joinpath("view", name).read_bytes()

    async def serve(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type, headers={"Cache-Control": "no-cache"})

    return serve


async def _redirect_to_page(_request: web.Request) -> web.Response:
    raise web.HTTPFound("/view/")
