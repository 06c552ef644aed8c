"""The chaos driver for containers: the same methods as LocalProcess, carried out with ``docker compose``
on the services of docker-compose.yml. No Docker engine runs on the development machines, so this driver
is exercised only through the commands it builds (tests check them); the local-process driver is the one
the test suite runs.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


def _run(command: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=120)


@dataclass
class ComposeService:
    service: str
    compose_file: str = "docker-compose.yml"
    data_path: str = "/data"
    runner: Runner = field(default=_run, repr=False)

    def _compose(self, *args: str) -> subprocess.CompletedProcess:
        return self.runner(["docker", "compose", "-f", self.compose_file, *args])

    def start(self, timeout: float = 30.0) -> None:
        self._compose("start", self.service)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self._compose("ps", "--format", "{{.Health}}", self.service).stdout.strip()
            if status == "healthy":
                return
            time.sleep(0.5)
        raise TimeoutError(f"{self.service} not healthy within {timeout}s")

    def signal(self, name: str) -> None:
        if name.upper() == "STOP":
            self._compose("pause", self.service)
        elif name.upper() == "CONT":
            self._compose("unpause", self.service)
        else:
            self._compose("kill", "-s", f"SIG{name.upper()}", self.service)

    def stop(self, timeout: float = 15.0) -> int | None:
        result = self._compose("stop", "-t", str(int(timeout)), self.service)
        return result.returncode

    def restart(
        self, *, wipe: bool = False, power_loss: bool = False, clean: bool = False, timeout: float = 30.0
    ) -> None:
        if clean:
            self.stop()
        else:
            self.signal("KILL")
        if wipe:
            self._one_off(f"rm -rf {self.data_path}/*")
        elif power_loss:
            self._one_off(
                f'python -c "from epochkraft.broker.log import cut_to_recovery_point; '
                f"cut_to_recovery_point('{self.data_path}')\""
            )
        self.start(timeout)

    def _one_off(self, script: str) -> None:
        """Runs a shell command in a throwaway container that mounts the service's volumes."""
        self._compose("run", "--rm", "--no-deps", "--entrypoint", "sh", self.service, "-c", script)

    @property
    def alive(self) -> bool:
        return bool(self._compose("ps", "--status", "running", "-q", self.service).stdout.strip())
