"""Starts real epochkraft daemons as processes on loopback for tests, and always cleans them up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

READY = re.compile(r"(controller|broker) ready .*?listen=([\d.]+):(\d+)")


@dataclass
class Daemon:
    name: str
    args: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    port: int = 0
    starts: int = field(default=0)

    def start(self, timeout: float = 20.0) -> Daemon:
        self.starts += 1
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "epochkraft.cli", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[offset:].decode(errors="replace")
            match = READY.search(text)
            if match:
                self.port = int(match.group(3))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"{self.name} not ready within {timeout}s:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.proc is not None
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(10)


def controller(
    tmp: Path, *extra: str, cluster_id: str = "test-cluster-0000000000", data: bool = True
) -> Daemon:
    args = ["controller", "--listen", "127.0.0.1:0", "--cluster-id", cluster_id, *extra]
    if data:
        args += ["--data-dir", str(tmp / "controller")]
    return Daemon("controller", args, tmp / "controller.log")


def pin_port(daemon: Daemon) -> None:
    """After the first start, keep the same port across restarts."""
    index = daemon.args.index("--listen") + 1
    daemon.args[index] = f"127.0.0.1:{daemon.port}"
