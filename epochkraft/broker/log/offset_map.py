"""The cleaner's key -> offset map in a fixed buffer (Kafka's SkimpyOffsetMap).

Each entry is a key's 16-byte MD5 hash and its 8-byte offset (24 bytes), in open addressing over
``log.cleaner.dedupe.buffer.size`` bytes; the cleaner stops filling it at ``log.cleaner.io.buffer.load.factor``
of its slots, so a pass never holds more than the buffer whatever the number of distinct keys. As in Kafka,
two keys with the same hash count as one. Unlike Kafka's, the table starts small and doubles while it is
half full, up to the buffer's slots, so a log with few keys touches little memory; it is an anonymous
mapping, and closing the map gives it back.
"""

from __future__ import annotations

import mmap
import struct
from hashlib import md5

HASH_SIZE = 16
BYTES_PER_ENTRY = HASH_SIZE + 8
_EMPTY = bytes(HASH_SIZE)
_OFFSET = struct.Struct(">q")
_INT = struct.Struct(">i")
INITIAL_SLOTS = 1 << 16


class SkimpyOffsetMap:
    def __init__(self, memory: int) -> None:
        self.slots = memory // BYTES_PER_ENTRY  # the most entries the buffer holds (Kafka's slots)
        if self.slots < 1:
            raise ValueError(f"an offset map of {memory} bytes holds no entry")
        self._table_slots = min(self.slots, INITIAL_SLOTS)
        self._buffer = mmap.mmap(-1, self._table_slots * BYTES_PER_ENTRY)
        self.size = 0  # entries in use
        self.latest_offset = -1  # the highest offset mapped (Kafka's latestOffset)

    def put(self, key: bytes, offset: int) -> None:
        digest = md5(key).digest()
        position, found = self._position_of(digest)
        if not found:
            if self._table_slots < self.slots and (self.size + 1) * 2 > self._table_slots:
                self._grow()
                position, found = self._position_of(digest)
            self._buffer[position : position + HASH_SIZE] = digest
            self.size += 1
        _OFFSET.pack_into(self._buffer, position + HASH_SIZE, offset)
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The key's offset, or -1 if it is not in the map."""
        position, found = self._position_of(md5(key).digest())
        return _OFFSET.unpack_from(self._buffer, position + HASH_SIZE)[0] if found else -1

    def _grow(self) -> None:
        """Twice the slots (at most the buffer's), every entry placed again."""
        old, old_size = self._buffer, self._table_slots * BYTES_PER_ENTRY
        self._table_slots = min(self._table_slots * 2, self.slots)
        self._buffer = mmap.mmap(-1, self._table_slots * BYTES_PER_ENTRY)
        for start in range(0, old_size, BYTES_PER_ENTRY):
            entry = old[start : start + BYTES_PER_ENTRY]
            if entry[:HASH_SIZE] != _EMPTY:
                position, _found = self._position_of(entry[:HASH_SIZE])
                self._buffer[position : position + BYTES_PER_ENTRY] = entry
        old.close()

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    def close(self) -> None:
        self._buffer.close()

    def _position_of(self, digest: bytes) -> tuple[int, bool]:
        """The entry holding ``digest`` (True), or the empty one it goes to (False): Kafka's probe sequence
        (a 4-byte window sliding along the hash, then linear)."""
        buffer, slots = self._buffer, self._table_slots
        attempt = 0
        while True:
            start = min(attempt, HASH_SIZE - 4)
            probe = _INT.unpack_from(digest, start)[0] + max(0, attempt - HASH_SIZE + 4)
            position = (abs(probe) % slots) * BYTES_PER_ENTRY
            stored = buffer[position : position + HASH_SIZE]
            if stored == digest:
                return position, True
            if stored == _EMPTY:
                return position, False
            attempt += 1
