"""What a handler knows about the request it serves."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from epochkraft.protocol.framing import RequestHeader


@dataclass(frozen=True, slots=True)
class RequestContext:
    listener: str
    header: RequestHeader
    api_version: int
    node: Any  # the daemon object: the controller or the broker
    peer: tuple[Any, ...] | None
    log: Any
    listener_name: str = "PLAINTEXT"  # the named listener the request came in on

    @staticmethod
    def now_ms() -> int:
        """Wall-clock milliseconds: the state machines take time as an argument, read here at the edge."""
        return int(time.time() * 1000)
