"""Structured events as JSON lines, written off the event loop, rotated by size, flushed on close.

Files: ``<metrics-dir>/dt=YYYY-MM-DD/node=<node>/events-<start-ms>-<seq>.jsonl`` (Hive-style partition
folders, so Spark reads ``dt`` and ``node`` as columns). Each line: ``{"schema_version": 1, "ts_ms": ...,
"node": ..., "event": ..., <fields>}`` as documented in SCHEMA.md. ``emit`` only appends to a queue;
a writer thread renders (structlog's JSON renderer) and writes; ``close``/``aclose`` drain the queue,
so a clean stop loses nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, Unpack

import structlog

from epochkraft.metrics.event_schema import Event, EventFields

SCHEMA_VERSION = 1
DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024


class EventLog:
    def __init__(
        self, metrics_dir: str | Path | None, node: str, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    ) -> None:
        self.enabled = metrics_dir is not None
        self.root = Path(metrics_dir) if metrics_dir is not None else None
        self.node = node
        self.max_file_bytes = max_file_bytes
        self._queue: deque[tuple[int, dict[str, object]]] = deque()  # (ts_ms, the line to render)
        self._wakeup = threading.Event()
        self._closed = False
        self._render = structlog.processors.JSONRenderer(sort_keys=False)
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._written = 0
        self._seq = 0
        self._day = ""
        self.emitted = 0
        self._thread: threading.Thread | None = None
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name=f"events-{node}", daemon=True)
            self._thread.start()

    def emit(self, event: str, **fields: Unpack[EventFields]) -> None:
        """Queues one event; cheap, never blocks, never raises into the caller."""
        if not self.enabled or self._closed:
            return
        self._append(event, fields)

    def emit_metrics(self, event: str, values: Mapping[str, float]) -> None:
        """Queues a snapshot of metrics (``metrics_snapshot``, ``controller_snapshot``): Kafka-named values,
        as the daemon's metrics registry holds them."""
        if not self.enabled or self._closed:
            return
        self._append(event, values)

    def _append(self, event: str, fields: Mapping[str, object]) -> None:
        ts_ms = int(time.time() * 1000)
        record: dict[str, object] = {
            "schema_version": SCHEMA_VERSION,
            "ts_ms": ts_ms,
            "node": self.node,
            "event": event,
        }
        record.update(fields)
        self._queue.append((ts_ms, record))
        self.emitted += 1
        if len(self._queue) >= 256:
            self._wakeup.set()

    # ---- writer thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wakeup.wait(0.2)
            self._wakeup.clear()
            self._drain()
            if self._closed and not self._queue:
                break
        if self._file is not None:
            self._file.close()

    def _drain(self) -> None:
        lines = []
        while self._queue:
            ts_ms, record = self._queue.popleft()
            lines.append((ts_ms, str(self._render(None, "", record))))
        for ts_ms, line in lines:
            self._write(ts_ms, line + "\n")
        if self._file is not None:
            self._file.flush()

    def _write(self, ts_ms: int, line: str) -> None:
        day = datetime.datetime.fromtimestamp(ts_ms / 1000, datetime.UTC).strftime("%Y-%m-%d")
        data = line.encode()
        file = self._file
        if file is None or day != self._day or self._written + len(data) > self.max_file_bytes:
            file = self._rotate(day, ts_ms)
        file.write(data)
        self._written += len(data)

    def _rotate(self, day: str, ts_ms: int) -> BinaryIO:
        if self._file is not None:
            self._file.close()
        assert self.root is not None
        folder = self.root / f"dt={day}" / f"node={self.node}"
        folder.mkdir(parents=True, exist_ok=True)
        self._seq += 1
        self._path = folder / f"events-{ts_ms}-{self._seq:04d}.jsonl"
        file = self._file = open(self._path, "ab")  # noqa: SIM115 - kept open until rotation
        self._day = day
        self._written = 0
        return file

    # ---- closing ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Writes every queued event and stops the writer."""
        if not self.enabled or self._closed:
            return
        self._closed = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(10)

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)


def read_events(metrics_dir: Path, node: str = "*") -> Iterator[Event]:
    """The events of the nodes whose name matches ``node`` (a glob such as ``controller-*``), each node's
    in the order they were written."""
    for path in sorted(Path(metrics_dir).glob(f"dt=*/node={node}/events-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                yield json.loads(line)
