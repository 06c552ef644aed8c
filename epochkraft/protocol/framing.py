"""Sans-IO Kafka framing: 4-byte size prefix, request headers v1/v2, response headers v0/v1.

Bytes go in, frames and decoded headers come out; no sockets. A request frame is
``size | header | body``; the header version follows from the API key and version (flexible
versions use header v2 with tagged fields), and ApiVersions responses always use header v0 (KIP-511).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import BufferUnderflow

from epochkraft.protocol.errors import FrameTooLarge, ProtocolError
from epochkraft.protocol.guard import check_lengths

API_VERSIONS_KEY = 18
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhih")  # api key, api version, correlation id, client id length


class FrameDecoder:
    """Splits a byte stream into frames. Raises FrameTooLarge / ProtocolError on a bad size prefix."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        frames: list[bytes] = []
        buf = self._buffer
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            if len(buf) - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int


@cache
def request_class(api_key: int, api_version: int) -> type:
    """kio's request class for a key and version; ProtocolError if kio does not know it."""
    try:
        return load_request_schema(api_key, api_version)
    except Exception as exc:  # kio raises several index errors for unknown keys/versions
        raise ProtocolError(f"unknown API key {api_key} version {api_version}") from exc


@cache
def response_class(api_key: int, api_version: int) -> type:
    try:
        return load_response_schema(api_key, api_version)
    except Exception as exc:
        raise ProtocolError(f"unknown API key {api_key} version {api_version}") from exc


def is_flexible(api_key: int, api_version: int) -> bool:
    try:
        return bool(request_class(api_key, api_version).__flexible__)
    except ProtocolError:
        return False


def _skip_tagged_fields(data: bytes, pos: int) -> int:
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise ProtocolError("tagged field runs past the end of the header")
    return pos


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ProtocolError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtocolError("varint too long")


def parse_request_header(data: bytes) -> RequestHeader:
    """Reads the request header (v1, or v2 when the API version is flexible)."""
    if len(data) < _HEADER_PREFIX.size:
        raise ProtocolError(f"request header truncated ({len(data)} bytes)")
    api_key, api_version, correlation_id, client_id_len = _HEADER_PREFIX.unpack_from(data, 0)
    pos = _HEADER_PREFIX.size
    client_id: str | None = None
    if client_id_len >= 0:
        if pos + client_id_len > len(data):
            raise ProtocolError("client id runs past the end of the frame")
        try:
            client_id = data[pos : pos + client_id_len].decode()
        except UnicodeDecodeError as exc:
            raise ProtocolError("client id is not UTF-8") from exc
        pos += client_id_len
    elif client_id_len != -1:
        raise ProtocolError(f"bad client id length {client_id_len}")
    if is_flexible(api_key, api_version):
        pos = _skip_tagged_fields(data, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def decode_request_body(header: RequestHeader, data: bytes) -> Any:
    """Decodes the body after the header with kio; ProtocolError when malformed.

    Trailing bytes after a complete body are ignored, as Kafka's own parsers do: some clients (librdkafka's
    Metadata v12, for one) send fields a later schema added.
    """
    cls = request_class(header.api_key, header.api_version)
    return decode_entity(cls, data, header.header_size, allow_trailing=True)


def decode_entity(cls: type, data: bytes, offset: int = 0, *, allow_trailing: bool = False) -> Any:
    """Decodes a kio entity, requests and responses alike; ProtocolError when malformed."""
    check_lengths(cls, data, offset)  # before kio: its native reader aborts the process on absurd counts
    try:
        obj, size = entity_reader(cls)(memoryview(data), offset)
    except ProtocolError:
        raise
    except (BufferUnderflow, ValueError, UnicodeDecodeError, IndexError, OverflowError, TypeError) as exc:
        raise ProtocolError(f"malformed {cls.__name__}: {exc}") from exc
    except Exception as exc:  # kio may raise its own errors on nonsense; never let them escape raw
        raise ProtocolError(f"malformed {cls.__name__}: {type(exc).__name__}: {exc}") from exc
    if offset + size != len(data) and not allow_trailing:
        raise ProtocolError(f"{len(data) - offset - size} trailing bytes after {cls.__name__}")
    return obj


def encode_entity(obj: Any) -> bytes:
    import io

    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def encode_response(correlation_id: int, api_key: int, api_version: int, body: bytes) -> bytes:
    """The full response frame: size, response header (v0 or v1), body."""
    header = _SIZE.pack(correlation_id)
    if response_header_version(api_key, api_version) == 1:
        header += b"\x00"  # no tagged fields
    return frame(header + body)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: bytes
) -> bytes:
    """The full request frame: size, request header (v1 or v2), body."""
    cid = b"" if client_id is None else client_id.encode()
    header = _HEADER_PREFIX.pack(
        api_key, api_version, correlation_id, len(cid) if client_id is not None else -1
    )
    header += cid
    if is_flexible(api_key, api_version):
        header += b"\x00"
    return frame(header + body)


def parse_response_header(api_key: int, api_version: int, data: bytes) -> tuple[int, int]:
    """Returns (correlation id, header size) of a response frame's payload."""
    if len(data) < 4:
        raise ProtocolError("response header truncated")
    (correlation_id,) = _SIZE.unpack_from(data, 0)
    pos = 4
    if response_header_version(api_key, api_version) == 1:
        pos = _skip_tagged_fields(data, pos)
    return correlation_id, pos
