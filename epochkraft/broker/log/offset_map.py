"""The cleaner's key -> offset map in a fixed buffer (Kafka's SkimpyOffsetMap).

Each entry is a key's 16-byte MD5 hash and its 8-byte offset (24 bytes), in open addressing over
``log.cleaner.dedupe.buffer.size`` bytes; the cleaner stops filling it at ``log.cleaner.io.buffer.load.factor``
of its slots, so a pass never holds more than the buffer whatever the number of distinct keys. As in Kafka,
two keys with the same hash count as one. The buffer is an anonymous mapping: pages the pass never touches
take no memory, and closing the map gives them back.
"""

from __future__ import annotations

import hashlib
import mmap
import struct

HASH_SIZE = 16
BYTES_PER_ENTRY = HASH_SIZE + 8
_EMPTY = bytes(HASH_SIZE)
_OFFSET = struct.Struct(">q")


class SkimpyOffsetMap:
    def __init__(self, memory: int) -> None:
        self.slots = memory // BYTES_PER_ENTRY
        if self.slots < 1:
            raise ValueError(f"an offset map of {memory} bytes holds no entry")
        self._buffer = mmap.mmap(-1, self.slots * BYTES_PER_ENTRY)
        self.size = 0  # entries in use
        self.latest_offset = -1  # the highest offset mapped (Kafka's latestOffset)

    def put(self, key: bytes, offset: int) -> None:
        digest = hashlib.md5(key).digest()
        position = self._position_of(digest)
        if self._buffer[position : position + HASH_SIZE] != digest:
            self._buffer[position : position + HASH_SIZE] = digest
            self.size += 1
        _OFFSET.pack_into(self._buffer, position + HASH_SIZE, offset)
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The key's offset, or -1 if it is not in the map."""
        digest = hashlib.md5(key).digest()
        position = self._position_of(digest)
        if self._buffer[position : position + HASH_SIZE] != digest:
            return -1
        return _OFFSET.unpack_from(self._buffer, position + HASH_SIZE)[0]

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    def close(self) -> None:
        self._buffer.close()

    def _position_of(self, digest: bytes) -> int:
        """The entry holding ``digest``, or the empty one it goes to: Kafka's probe sequence (a 4-byte
        window sliding along the hash, then linear)."""
        attempt = 0
        while True:
            start = min(attempt, HASH_SIZE - 4)
            probe = int.from_bytes(digest[start : start + 4], "big", signed=True) + max(
                0, attempt - HASH_SIZE + 4
            )
            position = (abs(probe) % self.slots) * BYTES_PER_ENTRY
            stored = self._buffer[position : position + HASH_SIZE]
            if stored in (digest, _EMPTY):
                return position
            attempt += 1
