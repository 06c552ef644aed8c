"""Free loopback ports for daemons a test or tool starts and binds later.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range it draws the local
ports of outgoing connections from: between our probe closing it and the daemon binding it, a client socket of
any process (a broker connecting to its controller, say) can take it, and the daemon dies with EADDRINUSE. So
ports are drawn below the ephemeral range, where only explicit binds land, probed, and never handed out twice
by this process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_handed_out: set[int] = set()
_LOWEST = 10_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port on 127.0.0.1 no one listens on now, outside the kernel's ephemeral range."""
    top = _ephemeral_start()
    for _ in range(200):
        port = random.randrange(_LOWEST, top) if top > _LOWEST + 1000 else 0
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = sock.getsockname()[1]
        _handed_out.add(port)
        return port
    raise OSError("no free port below the ephemeral range")


def free_ports(count: int) -> list[int]:
    return [free_port() for _ in range(count)]
