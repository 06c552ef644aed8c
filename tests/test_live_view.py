"""The controller's live web view (metrics/live_view.py): the differ's deltas, a slow browser dropped, and the
page in a real headless Chromium against a running cluster while a broker is killed and restarted."""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import typing
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from epochkraft.harness.kio_client import MiniClient
from epochkraft.harness.ports import free_port
from epochkraft.metrics import documents, live_view
from epochkraft.metrics.live_view import LiveView, ViewDiffer
from epochkraft.protocol.errors import ErrorCode


def _state(
    fenced: bool = False, isr: tuple[int, ...] = (1, 2, 3), heartbeat_ms: int = 10_000
) -> dict[str, Any]:
    return {
        "cluster_id": "c",
        "metadata_offset": 7,
        "brokers": [
            {"id": 1, "epoch": 4, "incarnation": "a" * 32, "fenced": False, "in_controlled_shutdown": False},
            {"id": 2, "epoch": 5, "incarnation": "b" * 32, "fenced": fenced, "in_controlled_shutdown": False},
        ],
        "last_heartbeat_ms": {"1": heartbeat_ms, "2": heartbeat_ms},
        "partitions": [
            {"topic": "t", "partition": 0, "replicas": [1, 2, 3], "isr": list(isr), "leader": 1,
             "leader_epoch": 0, "partition_epoch": 0, "min_insync_replicas": 2},
        ],
    }  # fmt: skip


def _view_of_state() -> LiveView:
    """A view of ``_state()`` whose partitions are the state's own rows."""
    return LiveView(
        _state, lambda: 0, partitions=lambda: live_view.state_partitions(_state()), row=live_view.row_is_token
    )


def _update(
    differ: ViewDiffer,
    state: dict[str, Any],
    now_ms: int,
    positions: live_view.Positions = live_view.NO_POSITIONS,
) -> dict[str, Any] | None:
    return differ.update(state, now_ms, lambda: live_view.state_partitions(state), positions)


def test_the_first_update_sends_everything_and_an_unchanged_state_nothing():
    differ = ViewDiffer(live_view.row_is_token)
    first = _update(differ, _state(), now_ms=10_500)
    assert first is not None
    assert [b["id"] for b in first["brokers"]] == [1, 2]
    assert first["partitions"][0]["under_min_isr"] is False
    assert _update(differ, _state(), now_ms=10_900) is None  # the heartbeat age moves in whole seconds


def test_a_fenced_broker_and_a_shrunk_isr_are_the_whole_delta():
    differ = ViewDiffer(live_view.row_is_token)
    _update(differ, _state(), now_ms=10_000)
    delta = _update(differ, _state(fenced=True, isr=(1,)), now_ms=10_000)
    assert delta is not None
    assert [b["id"] for b in delta["brokers"]] == [2] and delta["brokers"][0]["fenced"]
    assert delta["partitions"][0]["isr"] == [1] and delta["partitions"][0]["under_min_isr"]
    assert set(delta) == {"brokers", "partitions"}


def test_removed_brokers_and_partitions_are_named():
    differ = ViewDiffer(live_view.row_is_token)
    _update(differ, _state(), now_ms=10_000)
    state = _state()
    state["brokers"], state["partitions"] = state["brokers"][:1], []
    delta = _update(differ, state, now_ms=10_000)
    assert delta is not None
    assert delta["removed_brokers"] == [2] and delta["removed_partitions"] == ["t-0"]


def test_replica_positions_from_the_brokers_give_each_partition_its_high_watermark_and_lag():
    brokers = {1: {"positions": {"t": [[0, 10, 8]]}}, 2: {"positions": {"t": [[0, 8, 8]]}}}  # /v1/positions
    delta = _update(
        ViewDiffer(live_view.row_is_token), _state(), 10_000, live_view.replica_positions(brokers)
    )
    assert delta is not None
    (p,) = delta["partitions"]
    assert p["high_watermark"] == 8 and p["log_end"] == {"1": 10, "2": 8} and p["lag"] == 2


class Rows:
    """The controller's side of the differ at 10,000 partitions: a token per partition (an immutable
    registration and its topic's min ISR, as Controller.view_partitions), and each row made counted."""

    def __init__(self, partitions: int = 10_000) -> None:
        self.tokens = {("t", i): (("t", i, 1, 0), 2) for i in range(partitions)}  # (registration, min ISR)
        self.made = 0

    def partitions(self) -> live_view.Partitions:
        return [(topic, index, token) for (topic, index), token in self.tokens.items()]

    def row(self, topic: str, index: int, token: Any) -> dict[str, Any]:
        self.made += 1
        (_, _, leader, epoch), min_isr = token
        return {"topic": topic, "partition": index, "leader": leader, "leader_epoch": epoch, "isr": [1, 2],
                "min_insync_replicas": min_isr}  # fmt: skip


def test_a_tick_makes_rows_only_for_the_partitions_that_changed():
    rows = Rows()
    differ = ViewDiffer(rows.row)
    assert differ.update(_state(), 10_000, rows.partitions) is not None
    assert rows.made == 10_000
    rows.made = 0
    assert differ.update(_state(), 10_000, rows.partitions) is None
    assert rows.made == 0  # every token the same object: no row made, none compared
    rows.tokens[("t", 7)] = (("t", 7, 2, 1), 2)  # a new leader: a new registration
    delta = differ.update(_state(), 10_000, rows.partitions)
    assert rows.made == 1 and delta is not None
    assert [(p["partition"], p["leader"]) for p in delta["partitions"]] == [(7, 2)]


def test_a_hundred_config_writes_make_no_row_and_a_min_isr_write_only_its_topics():
    """The bench's load (``scripts/bench --parts view``): topic config writes, a hundred a second. The view's
    work per change is bounded: a tick after a hundred retention.ms writes makes no partition row (a config
    that no row shows leaves every token alone), and a min.insync.replicas write makes its topic's rows only."""
    from epochkraft.controller.configuration_control import OpType
    from epochkraft.controller.controller import partition_row
    from tests.controller_context import ControllerContext

    ctx = ControllerContext()
    ctx.register_brokers(1, 2, 3)
    ctx.unfence_brokers(1, 2, 3)
    for topic in ("view-0", "view-1"):
        ctx.create_topic(topic, partitions=1000, rf=3)
    made = collections.Counter[str]()

    def row(topic: str, index: int, token: Any) -> dict[str, Any]:
        made[topic] += 1
        return partition_row(*token)

    differ = ViewDiffer(row)
    controller = ctx.controller
    differ.update(controller.summary_state(), ctx.now, controller.view_partitions)
    made.clear()
    offset = controller.summary_state()["metadata_offset"]
    for n in range(100):
        ctx.incremental_alter_configs({(2, "view-0"): {"retention.ms": (OpType.SET, str(86_400_000 + n))}})
    delta = differ.update(controller.summary_state(), ctx.now, controller.view_partitions)
    assert not made and delta == {
        "cluster": {"cluster_id": controller.cluster_id, "metadata_offset": offset + 100}
    }
    ctx.incremental_alter_configs({(2, "view-0"): {"min.insync.replicas": (OpType.SET, "2")}})
    delta = differ.update(controller.summary_state(), ctx.now, controller.view_partitions)
    assert made == {"view-0": 1000} and delta is not None
    assert {p["min_insync_replicas"] for p in delta["partitions"]} == {2}


def test_the_controllers_state_has_the_keys_its_type_declares():
    """/v1/state as the controller builds it and as the view and the registry read it (metrics/documents.py)."""
    from tests.controller_context import ControllerContext

    ctx = ControllerContext()
    ctx.register_brokers(1)
    ctx.unfence_brokers(1)
    ctx.create_topic("typed", partitions=1, rf=1)
    state = ctx.controller.state()
    assert set(state) == set(typing.get_type_hints(documents.ControllerLogState))
    assert set(state["brokers"][0]) == set(typing.get_type_hints(documents.BrokerRow))
    assert set(state["partitions"][0]) == set(typing.get_type_hints(documents.PartitionRow))
    assert set(ctx.controller.summary_state()) == set(typing.get_type_hints(documents.ControllerSummary))


def test_new_replica_positions_make_rows_only_for_the_partitions_whose_positions_moved():
    rows = Rows()
    differ = ViewDiffer(rows.row)
    positions = {("t", i): [(1, 5, 5)] for i in range(10_000)}  # broker 1: log end 5, high watermark 5
    differ.update(_state(), 10_000, rows.partitions, positions)
    rows.made = 0
    moved = positions | {("t", 3): [(1, 9, 9)]}  # read again from the brokers
    delta = differ.update(_state(), 10_000, rows.partitions, moved)
    assert rows.made == 1 and delta is not None and delta["partitions"][0]["high_watermark"] == 9


def test_a_partition_gone_from_the_source_is_named_removed():
    rows = Rows(3)
    differ = ViewDiffer(rows.row)
    differ.update(_state(), 10_000, rows.partitions)
    del rows.tokens[("t", 1)]
    delta = differ.update(_state(), 10_000, rows.partitions)
    assert delta is not None and delta["removed_partitions"] == ["t-1"]
    assert [p["partition"] for p in differ.snapshot()["partitions"]] == [0, 2]


async def test_browsers_attaching_between_two_changes_share_one_encoded_snapshot():
    rows = Rows()
    view = LiveView(_state, lambda: 0, partitions=rows.partitions, row=rows.row)
    first, second = view.attach(), view.attach()
    assert first.get_nowait() is second.get_nowait()  # the same string: 10,000 rows encoded once
    view.on_event("broker_fenced", {"broker": 2, "epoch": 9})  # a change: the next browser's snapshot has it
    third = view.attach()
    assert '"broker_fenced"' in (third.get_nowait() or "")
    assert rows.made == 10_000  # attaching made no rows: the differ's are reused
    await view.stop()


@pytest.mark.net
async def test_a_broker_answering_no_json_object_is_a_failed_read():
    """/v1/positions answering a JSON array counts as a read that failed, as one that does not answer."""

    async def positions(_request: web.Request) -> web.Response:
        return web.json_response([[0, 10, 8]])

    app = web.Application()
    app.router.add_get("/v1/positions", positions)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        view = LiveView(
            _state, lambda: 0, {2: f"127.0.0.1:{port}"}, partitions=list, row=live_view.row_is_token
        )
        view.reads.read({2: {"node_id": 2, "positions": {"t": [(0, 10, 8)]}}})
        async with aiohttp.ClientSession() as http:
            await view._read_brokers(http)
        assert view.reads.stale() == {2}
    finally:
        await runner.cleanup()


def test_chaos_faults_are_read_as_they_are_appended(tmp_path: Path):
    events = tmp_path / "dt=2026-11-27" / f"node={live_view.CHAOS_NODE}" / "events-1-0000.jsonl"
    events.parent.mkdir(parents=True)
    line = json.dumps({"event": "fault_injected", "fault": "partition", "detail": "broker 2 cut off"})
    events.write_text(line + "\n" + line[:10])  # the second line is still being written
    faults = live_view.ChaosFaults(tmp_path)
    assert faults.read_new() == [{"fault": "partition", "detail": "broker 2 cut off"}]
    assert faults.read_new() == []
    events.write_text(line + "\n" + line + "\n")
    assert faults.read_new() == [{"fault": "partition", "detail": "broker 2 cut off"}]


async def test_a_browser_that_does_not_keep_up_is_dropped_and_the_others_are_not():
    view = _view_of_state()
    aborted: list[str] = []
    stuck = view.attach(abort=lambda: aborted.append("stuck"))
    reading = view.attach(abort=lambda: aborted.append("reading"))
    for i in range(live_view.QUEUE_MESSAGES + 1):
        view.on_event("broker_fenced", {"broker": 2, "epoch": i})
        while not reading.empty():
            reading.get_nowait()
    assert stuck not in view.browsers and reading in view.browsers and view.dropped == 1
    assert stuck.get_nowait() is None  # the end of its stream: the browser reconnects to a fresh snapshot
    assert aborted == [
        "stuck"
    ]  # its connection closed: a handler stuck in a write is woken, its buffer freed
    await view.stop()


def _broker_state(log_end: int, partitions: int = 10_000) -> dict[str, Any]:
    """A broker's /v1/positions holding a replica of every partition of Rows."""
    return {"positions": {"t": [[i, log_end, log_end] for i in range(partitions)]}}


def test_a_broker_missing_a_read_keeps_its_positions_marked_stale_until_it_misses_stale_reads():
    """One failed or timed-out read of a broker's /v1/positions changes its broker row only (marked stale), not
    the 10,000 partitions it hosts; after STALE_READS failed reads in a row its positions are dropped, and
    they come back when it answers again."""
    rows = Rows()
    differ = ViewDiffer(rows.row)
    reads = live_view.BrokerReads()

    def read(answers: dict[int, Any]) -> dict[str, Any] | None:
        reads.read(answers)
        return differ.update(_state(), 10_000, rows.partitions, reads.positions, reads.stale())

    read({1: _broker_state(5), 2: _broker_state(5)})
    rows.made = 0
    delta = read({1: _broker_state(5), 2: None})
    assert delta is not None and set(delta) == {"brokers"} and rows.made == 0
    assert [(b["id"], b.get("positions_stale")) for b in delta["brokers"]] == [(2, True)]
    for _ in range(live_view.STALE_READS - 2):
        assert read({1: _broker_state(5), 2: None}) is None
    dropped = read({1: _broker_state(5), 2: None})
    assert dropped is not None and len(dropped["partitions"]) == 10_000
    assert dropped["partitions"][0]["log_end"] == {"1": 5}
    assert [b.get("positions_stale") for b in dropped["brokers"]] == [None]
    back = read({1: _broker_state(5), 2: _broker_state(5)})
    assert back is not None and back["partitions"][0]["log_end"] == {"1": 5, "2": 5}


async def test_a_stream_opened_with_a_password_ends_when_the_password_no_longer_verifies():
    """The re-check a secured admin port attaches to a Basic-auth stream (AdminAuth.stream_check): the
    stream goes on while the user's SCRAM credential is unchanged and ends once it is changed; a stream
    opened with a certificate is not re-checked."""
    from epochkraft.metrics.admin_auth import AdminAuth
    from epochkraft.security.scram import MECHANISMS, credential

    key = ("admin", MECHANISMS["SCRAM-SHA-512"][0])
    held = {key: credential("SCRAM-SHA-512", "s3cret")}
    auth = AdminAuth(lambda: held, None)
    authorization = _basic("admin", "s3cret")["Authorization"]
    assert auth.status("/view/events", authorization, None, now_ms=0) == 200
    view = _view_of_state()
    by_password = view.attach(auth.stream_check(authorization))
    by_certificate = view.attach()
    view.recheck(2_000)
    assert by_password in view.browsers
    held[key] = credential("SCRAM-SHA-512", "changed")
    view.recheck(4_000)
    assert by_password not in view.browsers and by_certificate in view.browsers and view.refused == 1
    assert by_password.get_nowait() is None  # the end of its stream
    await view.stop()


# ---- the page in a real browser ------------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("the live view's browser test needs Debian's chromium: scripts/browser installs it")
    return found


class Browser:
    """Headless Chromium driven over the DevTools protocol (its own WebSocket; no driver library)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            message = json.loads((await self.ws.receive(timeout=30)).data)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message["result"])

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := await self.evaluate(expression):
                return value
            await asyncio.sleep(0.2)
        raise AssertionError(f"not seen in {timeout} s: {expression}")


@contextlib.asynccontextmanager
async def open_page(url: str, *flags: str) -> AsyncIterator[Browser]:
    port = free_port()
    profile = tempfile.mkdtemp(prefix="epochkraft-chromium-")
    process = subprocess.Popen(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
         f"--user-data-dir={profile}", "--window-size=1400,1000", *flags, "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as answer:
                    pages = [t for t in json.load(answer) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("chromium did not open its DevTools port")
            await asyncio.sleep(0.2)
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws,
        ):
            browser = Browser(ws)
            await browser.call("Page.enable")
            await browser.call("Page.navigate", url=url)
            yield browser
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(profile, ignore_errors=True)


BROKER_ROWS = "document.querySelectorAll('#brokers tbody tr').length"
PARTITION_ROWS = "document.querySelectorAll('#partitions tbody tr').length"


def _broker(node_id: int, attribute: str) -> str:
    return f"document.querySelector('#brokers tr[data-broker=\"{node_id}\"]')?.dataset.{attribute}"


def _isr(partition: str) -> str:
    return f"document.querySelector('#partitions tr[data-partition=\"{partition}\"]')?.dataset.isr"


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_the_view_in_chromium_shows_a_broker_fenced_and_back_under_a_new_epoch(make_cluster):
    """A SIGKILLed broker is shown fenced with its partitions' ISR shrunk within the session timeout (2 s
    here) plus 2 s; restarted, it is shown under a new broker epoch and back in the ISR."""
    cluster = make_cluster(3, admin=True)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("orders", 3, 3, {"min.insync.replicas": "2"}) == ErrorCode.none
        url = f"http://127.0.0.1:{cluster.admin_port(0)}/view/"
        async with open_page(url) as browser:
            await browser.wait_for(f"{BROKER_ROWS} === 3 && {PARTITION_ROWS} === 3", timeout=20)
            await browser.wait_for(f"{_isr('orders-0')} === '1,2,3'", timeout=20)
            for i in range(5):
                error, _ = await client.produce("orders", 0, [f"value-{i}".encode()])
                assert error == ErrorCode.none
            # the high watermark comes from the leader's /v1/positions, read while the page is open
            hw = "document.querySelector('#partitions tr[data-partition=\"orders-0\"]')?.dataset.hw"
            await browser.wait_for(f"{hw} === '5'", timeout=10)
            epoch_before = int(await browser.evaluate(_broker(2, "epoch")))
            cluster.node(2).kill()
            fenced_and_out = (
                f"{_broker(2, 'state')} === 'fenced' && !{_isr('orders-0')}.split(',').includes('2')"
            )
            await browser.wait_for(fenced_and_out, timeout=2 + 2)  # the session timeout, plus 2 s
            assert await browser.evaluate(
                "document.querySelector('#timeline li[data-event=\"broker_fenced\"]') !== null"
            )
            cluster.node(2).start()
            await browser.wait_for(f"{_broker(2, 'state')} === 'unfenced'", timeout=30)
            assert int(await browser.evaluate(_broker(2, "epoch"))) > epoch_before
            await browser.wait_for(f"{_isr('orders-0')}.split(',').includes('2')", timeout=30)
            if target := os.environ.get("EPOCHKRAFT_VIEW_SCREENSHOT"):
                shot = await browser.call("Page.captureScreenshot", format="png")
                Path(target).write_bytes(base64.b64decode(shot["data"]))
    finally:
        await client.close()


# ---- the view of a secure cluster ---------------------------------------------------------------------------


async def _first_events(
    response: aiohttp.ClientResponse, wanted: Any, timeout: float
) -> list[tuple[str, Any]]:
    """The stream's events until ``wanted(events)`` holds."""
    events: list[tuple[str, Any]] = []
    buffer = b""
    async with asyncio.timeout(timeout):
        while not wanted(events):
            buffer += await response.content.readany()
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                fields = dict(line.split(": ", 1) for line in block.decode().splitlines())
                events.append((fields["event"], json.loads(fields["data"])))
    return events


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _with_positions(events: list[tuple[str, Any]]) -> bool:
    """A partition with its high watermark: the controller read a broker's secured /v1/positions."""
    return any(
        "high_watermark" in p
        for _, data in events
        if isinstance(data, dict)  # a timeline event's data is a list
        for p in data.get("partitions", [])
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_the_view_of_a_secure_cluster_serves_the_admin_over_https_only(tmp_path: Path, capsys):
    """``cluster up --secure``: the admin ports serve HTTPS; the admin's password (HTTP Basic, checked against
    its SCRAM credential) or the admin's certificate opens them, nothing else does (401, plain HTTP refused),
    and the controller reads the brokers' secured /v1/positions with its own certificate; ``cluster status
    --bootstrap`` reads the brokers' SASL_SSL listener with the admin's SCRAM credential."""
    from epochkraft.harness import cluster_cli
    from epochkraft.harness.cluster import LocalCluster
    from tests.conftest import write_fast_configs

    broker_cfg, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(
        data_dir=tmp_path / "cluster",
        brokers=3,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        admin_ports=True,
        secure=True,
    )
    try:
        await asyncio.to_thread(cluster.start)
        security = cluster.security
        assert security is not None
        client = MiniClient(cluster.bootstrap, security.admin_tls())
        try:
            assert await client.create_topic("orders", 3, 3, {"min.insync.replicas": "2"}) == ErrorCode.none
        finally:
            await client.close()
        trust = ssl.create_default_context(
            cafile=str(security.truststore)
        )  # a browser's view: no certificate
        admin = _basic("admin", security.admin_password)
        view = cluster.admin_url(0, "/view/")
        assert view.startswith("https://")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as http:
            async with http.get(view, headers=admin) as page:
                assert page.status == 200 and "<html" in await page.text()
            async with http.get(cluster.admin_url(0, "/view/events"), headers=admin) as stream:
                assert stream.status == 200
                events = await _first_events(stream, _with_positions, timeout=60)
            snapshot = events[0][1]
            assert events[0][0] == "snapshot"
            assert len(snapshot["brokers"]) == 3 and len(snapshot["partitions"]) == 3
            for path, headers in (
                ("/view/", {}),
                ("/view/events", _basic("admin", "wrong")),
                ("/v1/state", _basic("nobody", security.admin_password)),
                ("/metrics", {}),
            ):
                async with http.get(cluster.admin_url(0, path), headers=headers) as refused:
                    assert refused.status == 401, path
                    assert refused.headers["WWW-Authenticate"].startswith("Basic ")
                    assert "<html" not in await refused.text()
            async with http.get(cluster.admin_url(1, "/v1/state")) as refused:
                assert refused.status == 401
            async with http.get(cluster.admin_url(1, "/healthz")) as health:
                assert health.status == 200  # open: says only that the process answers
            with pytest.raises(aiohttp.ClientError):
                async with http.get(view.replace("https://", "http://"), headers=admin) as plain:
                    await plain.read()
        # the tools read the admin ports with the admin's certificate
        state = await asyncio.to_thread(cluster.admin_get, 2, "/v1/state")
        assert state["state"] == "RUNNING"
        for _ in range(5):  # each node's answer within cluster status's 2 s, which a loaded machine may miss
            assert cluster_cli.main(["status", "--data-dir", str(cluster.data_dir)]) == 0
            out = capsys.readouterr().out
            if "no answer" not in out:
                break
        assert "no answer" not in out, out
        # a remote controller's admin address: HTTPS trusting the CA, with the admin's password or certificate
        controller = cluster.admin_url(0, "").removeprefix("https://")
        remote = ["status", "--admin", controller, "--cacert", str(security.truststore)]
        password = ["--user", "admin", "--password-file", str(security.directory / "admin.password")]
        for credentials in (password, ["--cert", str(security.keystore("admin"))]):
            assert cluster_cli.main(remote + credentials) == 0
            out = capsys.readouterr().out
            assert "controller of cluster" in out and "partitions: 3 in 1 topics" in out, out
        wrong = tmp_path / "wrong.password"
        wrong.write_text("wrong\n")
        assert cluster_cli.main([*remote, "--user", "admin", "--password-file", str(wrong)]) == 1
        assert f"admin {controller}: 401" in capsys.readouterr().out
        assert cluster_cli.main(["status", "--admin", controller]) == 1  # plain HTTP: refused
        assert "no answer" in capsys.readouterr().out
        # the brokers' SASL_SSL listener: TLS trusting the CA, SCRAM-SHA-512 as the admin; a wrong password or
        # no TLS gets no Metadata
        bootstrap = ["status", "--bootstrap", cluster.client_bootstrap, "--cacert", str(security.truststore)]
        assert await asyncio.to_thread(cluster_cli.main, bootstrap + password) == 0
        out = capsys.readouterr().out
        assert "(Metadata from localhost:" in out and "partitions: 3 in 1 topics" in out, out
        wrong_password = [*bootstrap, "--user", "admin", "--password-file", str(wrong)]
        assert await asyncio.to_thread(cluster_cli.main, wrong_password) == 1
        assert (
            await asyncio.to_thread(cluster_cli.main, ["status", "--bootstrap", cluster.client_bootstrap])
            == 1
        )
        assert "no broker answered Metadata" in capsys.readouterr().out
        # the user's way in: the password in the address (Chromium keeps it for the page's own requests), the
        # local CA not installed in this browser's profile
        logged_in = view.replace("https://", f"https://admin:{security.admin_password}@")
        async with open_page(logged_in, "--ignore-certificate-errors") as browser:
            await browser.wait_for(f"{BROKER_ROWS} === 3 && {PARTITION_ROWS} === 3", timeout=60)
    finally:
        cluster.kill_all()
