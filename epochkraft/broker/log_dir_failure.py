"""The log dir failure channel: the first storage error on the data dir takes it offline, and listeners
(the daemon) learn of it once, as Kafka's LogDirFailureChannel.maybeAddOfflineLogDir feeding
ReplicaManager.handleLogDirFailure. With one log dir, offline means the broker has none left."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog

log = structlog.get_logger()


class LogDirFailureChannel:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.offline = False
        self.listeners: list[Callable[[str], None]] = []

    def maybe_add_offline_log_dir(self, message: str, error: BaseException) -> None:
        """Marks the log dir offline (once) and tells the listeners; later failures are only counted."""
        if self.offline:
            return
        self.offline = True
        reason = f"{message}: {error}"
        log.error("log dir offline", log_dir=str(self.log_dir), error=reason)
        for listener in self.listeners:
            listener(reason)
