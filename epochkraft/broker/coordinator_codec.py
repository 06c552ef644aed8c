"""The primitives of Kafka's generated messages as the coordinators' records use them (int16-length or
compact strings, arrays and bytes, uuids, tagged fields): a Writer and a Reader that checks every length
against the bytes it has."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class RecordError(ValueError):
    """Bytes that are no record of a known type and version."""


class Writer:
    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.out = bytearray()

    def pack(self, fmt: str, *values: int) -> None:
        self.out += struct.pack(">" + fmt, *values)

    def varint(self, value: int) -> None:
        while value > 0x7F:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def length(self, n: int | None) -> None:
        """An array's, string's or bytes' length; None for null (-1, or 0 when compact)."""
        if self.flexible:
            self.varint(0 if n is None else n + 1)
        else:
            self.pack("i", -1 if n is None else n)

    def string(self, value: str | None) -> None:
        data = None if value is None else value.encode()
        if self.flexible:
            self.varint(0 if data is None else len(data) + 1)
        else:
            self.pack("h", -1 if data is None else len(data))
        self.out += data or b""

    def bytes_(self, value: bytes | None) -> None:
        self.length(None if value is None else len(value))
        self.out += value or b""

    def uuid(self, value: uuid.UUID) -> None:
        self.out += value.bytes

    def array(self, items: list[T] | None, write: Callable[[T], None]) -> None:
        self.length(None if items is None else len(items))
        for item in items or ():
            write(item)

    def tagged(self, fields: list[tuple[int, bytes]]) -> None:
        """The tagged fields section (flexible versions only): the fields not at their default."""
        if not self.flexible:
            return
        self.varint(len(fields))
        for tag, data in fields:
            self.varint(tag)
            self.varint(len(data))
            self.out += data


class Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data, self.pos, self.flexible = data, 0, flexible

    def unpack(self, fmt: str) -> int:
        try:
            (value,) = struct.unpack_from(">" + fmt, self.data, self.pos)
        except struct.error as exc:
            raise RecordError(f"record ends early at byte {self.pos}") from exc
        self.pos += struct.calcsize(fmt)
        return int(value)

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.unpack("B")
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordError("varint too long")

    def length(self) -> int | None:
        n = self.varint() - 1 if self.flexible else self.unpack("i")
        return None if n < 0 else n

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise RecordError(f"record ends early at byte {self.pos}")
        data = self.data[self.pos : self.pos + n]
        self.pos += n
        return data

    def nullable_string(self) -> str | None:
        n = self.varint() - 1 if self.flexible else self.unpack("h")
        return None if n < 0 else self.take(n).decode()

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordError("null string where the schema has none")
        return value

    def nullable_bytes(self) -> bytes | None:
        n = self.length()
        return None if n is None else self.take(n)

    def bytes_(self) -> bytes:
        return self.nullable_bytes() or b""

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def nullable_array(self, read: Callable[[], T]) -> list[T] | None:
        n = self.length()
        return None if n is None else [read() for _ in range(n)]

    def array(self, read: Callable[[], T]) -> list[T]:
        return self.nullable_array(read) or []

    def tagged(self) -> dict[int, bytes]:
        """The tagged fields section; unknown tags are skipped, as Kafka's readers do."""
        if not self.flexible:
            return {}
        return {self.varint(): self.take(self.varint()) for _ in range(self.varint())}

    def end(self) -> None:
        if self.pos != len(self.data):
            raise RecordError(f"{len(self.data) - self.pos} bytes left after the record")
