"""The null broker (the produce part's (c)): its replica manager takes the produce handler's calls."""

from __future__ import annotations

import asyncio

from epochkraft.bench.null_broker import NullReplicaManager
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import build_batch


def test_the_null_replica_manager_takes_every_argument_the_handler_passes():
    """The handler passes the produce's verification guard; a null broker refusing it answered no
    Produce at all, and the bench measured 0 MB/s for it."""
    batch = build_batch([(None, b"v" * 100, (), 1)] * 3)
    manager = NullReplicaManager()
    first = asyncio.run(manager.append("bench", 0, batch, 1, 30_000, verification_guard=None))
    second = asyncio.run(manager.append("bench", 0, memoryview(batch), 1, 30_000, verification_guard=None))
    assert (first.error, first.base_offset, second.base_offset) == (ErrorCode.none, 0, 3)
