"""The controller's live web view: brokers, partitions, the quorum and a timeline of the metadata log's
events, pushed to browsers as server-sent events (`/view/`, `/view/events` on the admin HTTP port).

``ViewDiffer`` is sans-IO: it turns the controller's state (what `/v1/state` serves) into what a browser has
not seen yet, once per tick whatever the number of browsers. A partition's row is made only when its
registration (immutable: replaced by each PartitionChangeRecord), its topic's min ISR or its replicas'
positions changed, so a tick at 10,000 partitions costs a comparison per partition and a row per change;
each delta, and the snapshot given to browsers attaching until the next change, is encoded once.
``LiveView`` is the asyncio edge: it ticks only while a browser is attached, and gives each browser a bounded
queue; a browser that does not keep up is dropped (its EventSource reconnects and starts from a snapshot),
so a slow or stuck browser never holds the controller back. While it ticks it also reads each broker's
`/v1/positions` (replicas' log end offsets and high watermarks, which only the brokers know) when it is given
their admin addresses (``BrokerReads``, sans-IO, keeps a broker's last answer through a few failed reads),
and the chaos tool's faults from the metrics directory the controller writes to. A stream opened with a
password (HTTP Basic on a secured admin port) is checked again every few seconds and ended once the password
no longer matches the user's SCRAM credential in the metadata.
"""

from __future__ import annotations

import asyncio
import collections
import json
import ssl
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Generic, NotRequired, TypedDict, TypeVar

import aiohttp
import structlog
from aiohttp import web

from epochkraft.metrics.admin_auth import STILL_ALLOWED_KEY
from epochkraft.metrics.documents import (
    BrokerPositions,
    BrokerRow,
    PartitionRow,
    QuorumDescription,
    ViewState,
)
from epochkraft.metrics.event_schema import Event, EventFields

TICK_S = 0.5  # how often attached browsers get what changed
QUEUE_MESSAGES = 64  # per browser; a browser this far behind is dropped
TIMELINE_EVENTS = 2_000  # the newest timeline events a new browser is sent
BROKER_POLL_TICKS = 2  # brokers' /v1/positions read every second tick
BROKER_TIMEOUT_S = 1.0
STALE_READS = (
    3  # failed reads in a row of a broker's /v1/positions before its replicas' positions are dropped
)
RECHECK_TICKS = 4  # a password-opened stream's credential checked again every fourth tick (2 s)
CHAOS_NODE = "chaos"  # the event log node the chaos tool writes its faults as

log = structlog.get_logger()

PartitionKey = tuple[str, int]  # topic, partition
# Each partition as (topic, index, token): the token compares equal while the partition's row would not change
# (the controller gives its immutable registration and its topic's min ISR: mostly an identity check).
Token = TypeVar("Token")
Partitions = Iterable[tuple[str, int, Token]]
RowOf = Callable[[str, int, Token], PartitionRow]  # a partition's /v1/state row from its token
# (topic, partition) -> (broker, its replica's log end offset, its high watermark) by broker
Positions = dict[PartitionKey, list[tuple[int, int, int]]]
NO_POSITIONS: Positions = {}


class ViewBroker(BrokerRow):
    """A broker as the view draws it."""

    heartbeat_age_s: int | None  # whole seconds since its last heartbeat; None before the first
    positions_stale: NotRequired[bool]  # its replicas' positions are from an earlier read


class ViewPartition(PartitionRow):
    """A partition as the view draws it: its row, and from its replicas' positions the log ends, the high
    watermark and the lag."""

    leaderless: bool
    under_min_isr: bool
    log_end: NotRequired[dict[str, int]]  # by broker id
    high_watermark: NotRequired[int]
    lag: NotRequired[int]


class ViewCluster(TypedDict, total=False):
    cluster_id: str | None
    metadata_offset: int | None


class ViewDelta(TypedDict, total=False):
    """What changed since the last tick."""

    cluster: ViewCluster
    brokers: list[ViewBroker]
    removed_brokers: list[int]
    partitions: list[ViewPartition]
    removed_partitions: list[str]  # topic-partition
    quorum: QuorumDescription | None


class ViewSnapshot(TypedDict):
    """Everything a newly attached browser draws."""

    brokers: list[ViewBroker]
    partitions: list[ViewPartition]
    quorum: QuorumDescription | None
    cluster: ViewCluster
    timeline: NotRequired[list[TimelineEvent]]


class TimelineEvent(EventFields):
    """An event on the view's timeline: a controller's domain event or a chaos fault, when it was seen."""

    ts_ms: int
    event: str


def row_is_token(_topic: str, _index: int, token: PartitionRow) -> PartitionRow:
    """The row of a partition whose token is its row (``state_partitions``)."""
    return PartitionRow(**token)


@dataclass
class ViewDiffer(Generic[Token]):
    """What changed since the last tick, by broker id and by partition. A partition's row is built only when
    its token or its replicas' positions changed, so a tick costs one comparison per partition (an identity
    check for an unchanged one) and a row per change, not a row per partition."""

    row: RowOf[Token]
    brokers: dict[int, ViewBroker] = field(default_factory=dict)
    partitions: dict[PartitionKey, ViewPartition] = field(default_factory=dict)  # the rows the browsers have
    tokens: dict[PartitionKey, Token] = field(default_factory=dict)
    positions: Positions = field(default_factory=dict)
    quorum: QuorumDescription | None = None
    cluster: ViewCluster = field(default_factory=ViewCluster)  # empty before the first update

    def update(
        self,
        state: ViewState,
        now_ms: int,
        partitions: Callable[[], Partitions[Token]],
        positions: Positions = NO_POSITIONS,
        stale: frozenset[int] = frozenset(),
    ) -> ViewDelta | None:
        """The changes of ``state`` (the controller's /v1/state without its partitions), the
        ``partitions()`` and the replicas' ``positions`` against what was last seen, or None when nothing
        changed. The brokers in ``stale`` are marked: their positions are from an earlier read."""
        brokers = {b["id"]: b for b in _brokers(state, now_ms, stale)}
        quorum = state.get("quorum")
        cluster: ViewCluster = {
            "cluster_id": state.get("cluster_id"),
            "metadata_offset": state.get("metadata_offset"),
        }
        delta: ViewDelta = {}
        if cluster != self.cluster:
            delta["cluster"] = cluster
        changed_brokers = [b for i, b in brokers.items() if self.brokers.get(i) != b]
        if changed_brokers:
            delta["brokers"] = changed_brokers
        if gone := sorted(set(self.brokers) - set(brokers)):
            delta["removed_brokers"] = gone
        changed, gone_partitions = self._partitions(partitions, positions)
        if changed:
            delta["partitions"] = changed
        if gone_partitions:
            delta["removed_partitions"] = gone_partitions
        if quorum != self.quorum:
            delta["quorum"] = quorum
        self.brokers, self.quorum, self.cluster = brokers, quorum, cluster
        return delta or None

    def _partitions(
        self, partitions: Callable[[], Partitions[Token]], positions: Positions
    ) -> tuple[list[ViewPartition], list[str]]:
        """The rows that changed, and the partitions gone."""
        new_positions = positions is not self.positions  # the brokers were read again since the last tick
        tokens, rows, held = self.tokens, self.partitions, 0
        changed: list[ViewPartition] = []
        for topic, index, token in partitions():
            key = (topic, index)
            held += 1
            known = tokens.get(key, _UNSEEN)
            if known == token and not (new_positions and positions.get(key) != self.positions.get(key)):
                continue
            tokens[key] = token
            row = _with_positions(self.row(topic, index, token), positions.get(key))
            if rows.get(key) != row:
                rows[key] = row
                changed.append(row)
        self.positions = positions
        gone: list[str] = []
        if held < len(tokens):  # only then look for the partitions that are no more
            seen = {(topic, index) for topic, index, _ in partitions()}
            for key in [k for k in tokens if k not in seen]:
                del tokens[key], rows[key]
                gone.append(_name(key))
        return changed, sorted(gone)

    def snapshot(self) -> ViewSnapshot:
        """Everything a newly attached browser needs to draw the view."""
        return {
            "brokers": list(self.brokers.values()),
            "partitions": list(self.partitions.values()),
            "quorum": self.quorum,
            "cluster": self.cluster,
        }


_UNSEEN = object()


def _name(key: PartitionKey) -> str:
    return f"{key[0]}-{key[1]}"


def _brokers(state: ViewState, now_ms: int, stale: frozenset[int]) -> Iterator[ViewBroker]:
    heartbeats = state.get("last_heartbeat_ms", {})
    for b in state.get("brokers", []):
        last = heartbeats.get(str(b["id"]))
        # whole seconds, so an idle broker does not change every tick
        age_s = None if last is None else max(now_ms - last, 0) // 1000
        broker: ViewBroker = {**b, "heartbeat_age_s": age_s}
        if b["id"] in stale:
            broker["positions_stale"] = True
        yield broker


def _with_positions(p: PartitionRow, held: list[tuple[int, int, int]] | None) -> ViewPartition:
    """A partition's row with what the view adds: leaderless, under min ISR, and from the replicas'
    positions the log ends, the high watermark and the lag."""
    row: ViewPartition = {
        **p,
        "leaderless": p["leader"] < 0,
        "under_min_isr": len(p["isr"]) < p.get("min_insync_replicas", 1),
    }
    if held:
        ends = {str(b): end for b, end, _ in held}
        row["log_end"] = ends
        for broker, leader_end, high_watermark in held:
            if broker == p["leader"]:
                row["high_watermark"] = high_watermark
                row["lag"] = max(leader_end - end for end in ends.values())
    return row


def state_partitions(state: ViewState) -> Partitions[PartitionRow]:
    """The partitions of a whole /v1/state, each row its own token (tests, and a state without a source)."""
    return [(p["topic"], p["partition"], p) for p in state.get("partitions", [])]


def replica_positions(broker_positions: dict[int, BrokerPositions]) -> Positions:
    """Each partition's replicas' log end offset and high watermark, from the brokers' /v1/positions
    ({"positions": {topic: [[partition, log end offset, high watermark], ...]}})."""
    positions: Positions = {}
    for broker, answer in sorted(broker_positions.items()):
        for topic, held in answer.get("positions", {}).items():
            for index, log_end, high_watermark in held:
                positions.setdefault((topic, index), []).append((broker, log_end, high_watermark))
    return positions


@dataclass
class BrokerReads:
    """The brokers' /v1/positions as last read, and the replicas' positions from them. A read that fails or times
    out keeps the broker's last state, marked stale, until STALE_READS reads in a row have failed: dropping it
    at once would take its replicas' positions off every partition it hosts and put them back at the next
    read that succeeds, two deltas of 10,000 rows for one slow answer."""

    states: dict[int, BrokerPositions] = field(default_factory=dict)
    failed: dict[int, int] = field(default_factory=dict)  # failed reads in a row, of the brokers kept
    positions: Positions = field(default_factory=dict)

    def read(self, answers: dict[int, BrokerPositions | None]) -> None:
        """One round of reads: each broker's /v1/positions, or None for a broker that did not answer."""
        for broker, state in answers.items():
            if state is not None:
                self.states[broker] = state
                self.failed.pop(broker, None)
            elif broker in self.states:
                self.failed[broker] = self.failed.get(broker, 0) + 1
                if self.failed[broker] >= STALE_READS:
                    del self.states[broker], self.failed[broker]
        self.positions = replica_positions(self.states)

    def stale(self) -> frozenset[int]:
        """The brokers whose positions are from an earlier read than the last."""
        return frozenset(self.failed)


# Whether a stream may go on, asked every few seconds (now_ms in): see admin_auth.AdminAuth.stream_check
StillAllowed = Callable[[int], bool]


class LiveView(Generic[Token]):
    """Ticks the differ while browsers are attached and fans its deltas and the timeline out to them."""

    def __init__(
        self,
        state_fn: Callable[[], ViewState],
        now_ms: Callable[[], int],
        broker_admin: dict[int, str] | None = None,
        metrics_dir: Path | None = None,
        broker_ssl: ssl.SSLContext | None = None,
        *,
        partitions: Callable[[], Partitions[Token]],
        row: RowOf[Token],
    ) -> None:
        self.state_fn = state_fn  # the controller's /v1/state without its partitions
        self.partitions = (
            partitions  # each partition's token (Controller.view_partitions), made a row by ``row``
        )
        self.row = row
        self.now_ms = now_ms
        self.broker_admin = broker_admin or {}  # broker id -> HOST:PORT of its admin port
        self.broker_ssl = broker_ssl  # the brokers' admin ports are secured: HTTPS with this context
        self.reads = BrokerReads()
        self.faults = ChaosFaults(metrics_dir) if metrics_dir is not None else None
        self.differ = ViewDiffer(row)
        self.timeline: collections.deque[TimelineEvent] = collections.deque(maxlen=TIMELINE_EVENTS)
        self.browsers: set[asyncio.Queue[str | None]] = set()
        self.checks: dict[asyncio.Queue[str | None], StillAllowed] = {}  # the password-opened streams
        self.aborts: dict[asyncio.Queue[str | None], Callable[[], None]] = {}  # each browser's connection
        self.dropped = 0  # browsers dropped for falling behind
        self.refused = 0  # streams ended because their credential no longer verifies
        self._ticker: asyncio.Task[None] | None = None
        self._snapshot: str | None = None  # encoded once for every browser attaching until something changes

    # ---- fed by the controller ---------------------------------------------------------------------------
    def on_event(self, name: str, fields: EventFields) -> None:
        """A domain event of the controller (the names the metrics schema documents) for the timeline."""
        event: TimelineEvent = {"ts_ms": self.now_ms(), "event": name, **fields}
        self.timeline.append(event)
        self._publish("timeline", [event])

    # ---- browsers ---------------------------------------------------------------------------------------
    def attach(
        self, still_allowed: StillAllowed | None = None, abort: Callable[[], None] | None = None
    ) -> asyncio.Queue[str | None]:
        """A new browser's queue, a snapshot first; ``still_allowed`` is asked every RECHECK_TICKS ticks
        whether the stream may go on, and ``abort`` closes its connection if it is dropped."""
        queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_MESSAGES)
        if not self.browsers:  # the first browser: the differ has not run since the last one left
            self.differ = ViewDiffer(self.row)
            self._update()
            self._snapshot = None
        if self._snapshot is None:
            snapshot: ViewSnapshot = {**self.differ.snapshot(), "timeline": list(self.timeline)}
            self._snapshot = _message("snapshot", snapshot)
        queue.put_nowait(self._snapshot)
        self.browsers.add(queue)
        if still_allowed is not None:
            self.checks[queue] = still_allowed
        if abort is not None:
            self.aborts[queue] = abort
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick(), name="live-view")
        return queue

    def detach(self, queue: asyncio.Queue[str | None]) -> None:
        self.browsers.discard(queue)
        self.checks.pop(queue, None)
        self.aborts.pop(queue, None)

    def _publish(self, kind: str, payload: Message) -> None:
        self._snapshot = None
        if not self.browsers:
            return
        message = _message(kind, payload)
        for queue in list(self.browsers):
            try:
                queue.put_nowait(message)
            except asyncio.QueueFull:
                self._drop(queue)

    def recheck(self, now_ms: int) -> None:
        """Ends the password-opened streams whose password no longer verifies (the user's SCRAM credential
        changed or deleted since the stream opened)."""
        for queue, still_allowed in list(self.checks.items()):
            if not still_allowed(now_ms):
                self.refused += 1
                self._end(queue)

    def _drop(self, queue: asyncio.Queue[str | None]) -> None:
        self.dropped += 1
        abort = self.aborts.get(queue)
        self._end(queue)
        if abort is not None:  # its handler may be stuck writing to a browser that does not read: free it
            abort()

    def _end(self, queue: asyncio.Queue[str | None]) -> None:
        self.detach(queue)
        while not queue.empty():  # make room for the end marker: the browser reconnects to a snapshot
            queue.get_nowait()
        queue.put_nowait(None)

    def _update(self) -> ViewDelta | None:
        """One pass of the differ over the controller's state now."""
        reads = self.reads
        return self.differ.update(
            self.state_fn(), self.now_ms(), self.partitions, reads.positions, reads.stale()
        )

    async def _tick(self) -> None:
        ticks = 0
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=BROKER_TIMEOUT_S)) as http:
            while self.browsers:
                await asyncio.sleep(TICK_S)
                if self.broker_admin and ticks % BROKER_POLL_TICKS == 0:
                    await self._read_brokers(http)
                if ticks % RECHECK_TICKS == 0:
                    self.recheck(self.now_ms())
                ticks += 1
                if self.faults is not None:
                    for fault in self.faults.read_new():
                        self.on_event("fault_injected", fault)
                delta = self._update()
                if delta is not None:
                    self._publish("delta", delta)

    async def _read_brokers(self, http: aiohttp.ClientSession) -> None:
        scheme = "http" if self.broker_ssl is None else "https"
        tls: ssl.SSLContext | bool = self.broker_ssl or True

        async def read(address: str) -> BrokerPositions | None:
            try:
                async with http.get(f"{scheme}://{address}/v1/positions", ssl=tls) as answer:
                    answer.raise_for_status()
                    positions: BrokerPositions = await answer.json()
                    return positions if isinstance(positions, dict) else None
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return None

        brokers = list(self.broker_admin)
        answers = await asyncio.gather(*(read(self.broker_admin[b]) for b in brokers))
        self.reads.read(dict(zip(brokers, answers, strict=True)))

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
        transport = request.transport
        queue = self.attach(request.get(STILL_ALLOWED_KEY), transport.abort if transport else None)
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

    def read_new(self) -> list[EventFields]:
        faults: list[EventFields] = []
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
                    event: Event = json.loads(line)
                except ValueError:
                    log.warning("unreadable chaos event", file=str(path))
                    continue
                if event.get("event") == "fault_injected":
                    faults.append(_fault_fields(event))
        return faults


def _fault_fields(event: Event) -> EventFields:
    """What the timeline shows of a fault: its name and what it did, the fields it has of the two."""
    fields: EventFields = {}
    if "fault" in event:
        fields["fault"] = event["fault"]
    if "detail" in event:
        fields["detail"] = event["detail"]
    return fields


Message = ViewDelta | ViewSnapshot | list[TimelineEvent]  # what a browser is sent


def _message(kind: str, payload: Message) -> str:
    return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _static(name: str, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    body = resources.files("epochkraft.metrics").joinpath("view", name).read_bytes()

    async def serve(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type, headers={"Cache-Control": "no-cache"})

    return serve


async def _redirect_to_page(_request: web.Request) -> web.Response:
    raise web.HTTPFound("/view/")
