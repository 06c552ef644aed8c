"""ListOffsets responses (key 2, v1-v11) encoded here rather than by kio: a request names hundreds of
partitions, and building a kio entity per partition, converting it to the asked version and walking it to
encode took about two thirds of a broker's time per ListOffsets under a flood of them. Tests compare the
bytes with kio's at every version.

Fields by version (ListOffsetsResponse.json): ThrottleTimeMs from v2, LeaderEpoch from v4, flexible from
v6 (compact strings and arrays, an empty tagged-field section after each struct); v0's OldStyleOffsets is
not served.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from epochkraft.protocol.framing import write_uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PARTITION_V1 = struct.Struct(">ihqq")  # index, error, timestamp, offset
_PARTITION_V4 = struct.Struct(">ihqqi")  # ... leader epoch
FIRST_FLEXIBLE = 6


class Offset(NamedTuple):
    """One partition of the response."""

    partition: int
    error: int
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


def encode_response(version: int, throttle_ms: int, topics: Sequence[tuple[str, Sequence[Offset]]]) -> bytes:
    """The response body (no header) at ``version``; it opens with the throttle time from v2."""
    flexible = version >= FIRST_FLEXIBLE
    with_epoch = version >= 4
    out = bytearray(_I32.pack(throttle_ms) if version >= 2 else b"")

    def length(n: int) -> None:
        if flexible:
            write_uvarint(out, n + 1)
        else:
            out.extend(_I32.pack(n))

    length(len(topics))
    for name, offsets in topics:
        encoded = name.encode()
        if flexible:
            write_uvarint(out, len(encoded) + 1)
        else:
            out.extend(_I16.pack(len(encoded)))
        out.extend(encoded)
        length(len(offsets))
        for o in offsets:
            if with_epoch:
                out.extend(_PARTITION_V4.pack(o.partition, o.error, o.timestamp, o.offset, o.leader_epoch))
            else:
                out.extend(_PARTITION_V1.pack(o.partition, o.error, o.timestamp, o.offset))
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    return bytes(out)
