"""franz-go's kfake (a fake Kafka cluster in Go) on loopback: N brokers in one process, built from the
module pinned in ``peers/kfake/go.mod``; it prints its brokers' addresses once they listen."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from epochkraft.peers.fetch import kfake_binary

STATE_FILE = "kfake-peer.json"


@dataclass
class KfakePeer:
    run_dir: Path
    brokers: int = 3
    bootstrap: str = ""
    pid: int | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self, timeout: float = 60.0) -> None:
        binary = kfake_binary()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.run_dir / "kfake.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [str(binary), "-brokers", str(self.brokers)],
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        self.pid = self.proc.pid
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while not line and time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline().strip()
        if not line:
            self.stop()
            raise RuntimeError(f"kfake did not start (log: {self.run_dir / 'kfake.log'})")
        self.bootstrap = line.decode()
        self.save()

    def stop(self, timeout: float = 10.0) -> None:
        if self.pid is None or not self._ours():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self._ours() and time.monotonic() < deadline:
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=0.1)
            else:
                time.sleep(0.1)
        if self._ours():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=5)

    def _ours(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        try:
            exe = os.readlink(f"/proc/{self.pid}/exe")
        except OSError:
            return False
        return Path(exe).name.startswith("kfake-")

    @property
    def alive(self) -> bool:
        return self.pid is not None and self._ours()

    def save(self) -> None:
        state = {"bootstrap": self.bootstrap, "pid": self.pid, "brokers": self.brokers}
        (self.run_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, run_dir: Path) -> KfakePeer:
        state = json.loads((run_dir / STATE_FILE).read_text())
        return cls(run_dir=run_dir, brokers=state["brokers"], bootstrap=state["bootstrap"], pid=state["pid"])
