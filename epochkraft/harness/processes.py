"""Local daemon processes: start, wait for the ready line, signal, stop, restart (with a wiped disk or
after a simulated power loss). The chaos tool, ``epochkraft cluster`` and the tests all drive daemons
through this one driver; a container driver would implement the same methods over ``docker compose``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

READY = re.compile(r"(controller|broker) ready .*?listen=([\d.]+):(\d+)")
SIGNALS = {
    "KILL": signal.SIGKILL,
    "TERM": signal.SIGTERM,
    "STOP": signal.SIGSTOP,
    "CONT": signal.SIGCONT,
    "INT": signal.SIGINT,
}


class Driver(Protocol):
    """What the chaos tool needs from a way of running daemons (local processes, containers)."""

    def start(self, timeout: float = 30.0) -> None: ...

    def signal(self, name: str) -> None: ...

    def stop(self, timeout: float = 15.0) -> int | None: ...

    def restart(
        self, *, wipe: bool = False, power_loss: bool = False, clean: bool = False, timeout: float = 30.0
    ) -> None: ...

    @property
    def alive(self) -> bool: ...


@dataclass
class LocalProcess:
    """One daemon run as ``python -m epochkraft.cli <args>`` in its own process group."""

    name: str
    args: list[str]
    log_path: Path
    data_dir: Path | None = None
    proc: subprocess.Popen | None = None
    port: int = 0
    pid: int | None = None
    starts: int = field(default=0)
    _log_offset: int = field(default=0, repr=False)

    def start(self, timeout: float = 30.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Starts the process without waiting for it to be ready."""
        self.starts += 1
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "epochkraft.cli", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Waits for the daemon's ready line and learns its port."""
        assert self.proc is not None
        offset = self._log_offset
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            match = READY.search(text)
            if match:
                self.port = int(match.group(3))
                self._pin_port()
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"{self.name} not ready within {timeout}s:\n{self.log_text()[-3000:]}")

    def _pin_port(self) -> None:
        """A restarted daemon comes back on the port it first bound (named listeners: as configured)."""
        if "--listen" not in self.args:
            return
        index = self.args.index("--listen") + 1
        host = self.args[index].rpartition(":")[0]
        self.args[index] = f"{host}:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        try:  # a killed child that its parent has not reaped yet is a zombie, not alive
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return True

    def signal(self, name: str) -> None:
        sig = SIGNALS[name.upper()]
        if self.pid is not None and self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def wait(self, timeout: float) -> int | None:
        if self.proc is not None:
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        deadline = time.monotonic() + timeout
        while self.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        return None if self.alive else 0

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited in time; the exit code (None if killed)."""
        if not self.alive:
            return self.proc.returncode if self.proc is not None else None
        self.signal("CONT")  # a paused process cannot handle SIGTERM
        self.signal("TERM")
        code = self.wait(timeout)
        if code is None:
            self.kill()
        return code

    def kill(self) -> None:
        if self.alive:
            self.signal("CONT")
            self.signal("KILL")
            self.wait(10)

    def restart(
        self, *, wipe: bool = False, power_loss: bool = False, clean: bool = False, timeout: float = 30.0
    ) -> None:
        """Stops the process (SIGKILL, or SIGTERM when ``clean``), optionally simulates a lost disk or a
        power loss, and starts it again."""
        if clean:
            self.stop()
        else:
            self.kill()
        if self.data_dir is not None:
            from epochkraft.broker.log import cut_to_recovery_point
            from epochkraft.broker.log import wipe as wipe_dir

            if wipe:
                wipe_dir(self.data_dir)
            elif power_loss:
                cut_to_recovery_point(self.data_dir)
        if wipe:
            self.args = args_for_new_disk(self.args)
        self.start(timeout)


def args_for_new_disk(args: list[str]) -> list[str]:
    """A controller's arguments for a new disk: without --initial-controllers and --standalone, so it is
    formatted with no initial controllers (kafka-storage format --no-initial-controllers): a new directory
    id, an observer until it is added again. With --initial-controllers it would take its old directory id
    from the list and vote as the voter it was; with --standalone it would be a quorum of its own (the
    daemon refuses either on an unformatted data dir)."""
    out = list(args)
    while "--initial-controllers" in out:
        at = out.index("--initial-controllers")
        del out[at : at + 2]
    return [arg for arg in out if arg != "--standalone"]
