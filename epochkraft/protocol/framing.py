"""Sans-IO Kafka framing: 4-byte size prefix, request headers v1/v2, response headers v0/v1.

Bytes go in, frames and decoded headers come out; no sockets. A request frame is
``size | header | body``; the header version follows from the API key and version (flexible
versions use header v2 with tagged fields), and ApiVersions responses always use header v0 (KIP-511).
"""

from __future__ import annotations

import contextlib
import mmap
import struct
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import BufferUnderflow
from kio.static.protocol import Entity, RequestPayload, ResponsePayload

from epochkraft.protocol import kio_extra
from epochkraft.protocol.errors import FrameTooLarge, ProtocolError
from epochkraft.protocol.guard import check_lengths
from epochkraft.protocol.produce_request import PRODUCE_KEY, decode_produce_request

API_VERSIONS_KEY = 18
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhih")  # api key, api version, correlation id, client id length


class FrameDecoder:
    """Splits a byte stream into frames; FrameTooLarge / ProtocolError on a bad size prefix.

    Built for ``asyncio.BufferedProtocol``: the transport receives straight into ``get_buffer()`` and
    reports with ``buffer_updated(n)``, so frame bytes are not copied after the kernel writes them. Small
    frames are cut out of the connection's receive buffer (one copy each), which starts at
    ``initial_bytes`` and grows fourfold up to ``chunk_bytes`` each time a receive fills it, so an idle
    connection holds 4 KiB, not 256 (a bytearray is zeroed, so all of it is resident at once). A frame
    larger than ``chunk_bytes`` is received
    into a private anonymous mapping kept for the connection and handed out as a read-only memoryview,
    valid until the next ``buffer_updated``/``feed`` call (decode it, as kio does, before returning).
    Mapped pages become resident only as bytes arrive, so a hostile size prefix costs no memory, and a
    reused mapping costs no page faults. ``feed(data)`` does the same for bytes already in hand.
    """

    KEEP_LARGE_BUFFER_BYTES = 8 * 1024 * 1024  # a connection keeps a mapping up to this size for reuse

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        chunk_bytes: int = 256 * 1024,
        initial_bytes: int = 4 * 1024,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.chunk_bytes = chunk_bytes
        self.initial_bytes = min(initial_bytes, chunk_bytes)
        self._buffer = bytearray(self.initial_bytes)
        self._view = memoryview(self._buffer)
        self._start = 0  # first byte not yet handed out
        self._end = 0  # end of the bytes received
        self._large: memoryview | None = None  # the frame being received into its own buffer
        self._large_filled = 0
        self._spare: mmap.mmap | None = None  # the mapping kept for the next large frame

    def _large_buffer(self, size: int) -> memoryview:
        spare = self._spare
        if spare is None or len(spare) < size:
            spare = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            self._spare = spare if size <= self.KEEP_LARGE_BUFFER_BYTES else None
        return memoryview(spare)[:size]

    def release_buffers(self) -> bool:
        """For a connection gone quiet: back to the initial receive buffer, and the mapping kept for
        large frames goes (its pages stay resident otherwise). Only between frames; True if released."""
        if self._large is not None or self._end != self._start:
            return False
        released = self._spare is not None or len(self._buffer) > self.initial_bytes
        if self._spare is not None:
            with contextlib.suppress(BufferError):  # a frame still viewed: unmapped when it goes
                self._spare.close()
            self._spare = None
        if len(self._buffer) > self.initial_bytes:
            self._buffer = bytearray(self.initial_bytes)
            self._view = memoryview(self._buffer)
            self._start = self._end = 0
        return released

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        if self._large is not None:
            return self._large[self._large_filled :]
        if self._end == len(self._buffer):
            pending = self._end - self._start
            if len(self._buffer) < self.chunk_bytes:
                # Full: a busy connection (or a frame larger than the buffer) gets a larger buffer.
                grown = bytearray(min(self.chunk_bytes, 4 * len(self._buffer)))
                grown[:pending] = self._view[self._start : self._end]
                self._buffer, self._view = grown, memoryview(grown)
            else:
                # Full: move the partial frame at the tail to the front (it is shorter than the buffer).
                self._view[:pending] = self._view[self._start : self._end]
            self._start, self._end = 0, pending
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> list[bytes | memoryview]:
        if self._large is not None:
            self._large_filled += nbytes
            if self._large_filled < len(self._large):
                return []
            frames: list[bytes | memoryview] = [self._large.toreadonly()]  # kio reads read-only buffers only
            self._large = None
            return frames
        self._end += nbytes
        return self._split()

    def _split(self) -> list[bytes | memoryview]:
        frames: list[bytes | memoryview] = []
        view, pos, end = self._view, self._start, self._end
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(view, pos)
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            if end - pos - 4 >= size:
                frames.append(bytes(view[pos + 4 : pos + 4 + size]))
                pos += 4 + size
                continue
            if size + 4 > self.chunk_bytes:
                # Too large for the receive buffer: receive the rest of it into a buffer of its own.
                have = end - pos - 4
                large = self._large_buffer(size)
                large[:have] = view[pos + 4 : end]
                self._large, self._large_filled = large, have
                pos = end
            break
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | memoryview]:
        frames: list[bytes | memoryview] = []
        data = memoryview(data)
        while data:
            target = self.get_buffer()
            n = min(len(target), len(data))
            target[:n] = data[:n]
            data = data[n:]
            frames += self.buffer_updated(n)
        return frames

    @property
    def buffered(self) -> int:
        if self._large is not None:
            return self._large_filled + 4
        return self._end - self._start


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
    """kio's request class for a key and version (or ours, protocol/kio_extra, for a version kio lacks);
    ProtocolError if neither knows it."""
    if (api_key, api_version) in kio_extra.REQUESTS:
        return kio_extra.REQUESTS[api_key, api_version]
    try:
        return load_request_schema(api_key, api_version)
    except Exception as exc:  # kio raises several index errors for unknown keys/versions
        raise ProtocolError(f"unknown API key {api_key} version {api_version}") from exc


@cache
def response_class(api_key: int, api_version: int) -> type[ResponsePayload]:
    if (api_key, api_version) in kio_extra.RESPONSES:
        return kio_extra.RESPONSES[api_key, api_version]
    try:
        return load_response_schema(api_key, api_version)
    except Exception as exc:
        raise ProtocolError(f"unknown API key {api_key} version {api_version}") from exc


def is_flexible(api_key: int, api_version: int) -> bool:
    try:
        return bool(getattr(request_class(api_key, api_version), "__flexible__"))  # noqa: B009  (kio sets it)
    except ProtocolError:
        return False


def skip_tagged_fields(data: bytes | memoryview, pos: int) -> int:
    """The position after a tagged-field section; ProtocolError if it runs past the data."""
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise ProtocolError("tagged field runs past the end of the data")
    return pos


def write_uvarint(out: bytearray, value: int) -> None:
    """Appends an unsigned varint (compact lengths, tag counts)."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
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


def parse_request_header(data: bytes | memoryview) -> RequestHeader:
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
            client_id = bytes(data[pos : pos + client_id_len]).decode()
        except UnicodeDecodeError as exc:
            raise ProtocolError("client id is not UTF-8") from exc
        pos += client_id_len
    elif client_id_len != -1:
        raise ProtocolError(f"bad client id length {client_id_len}")
    if is_flexible(api_key, api_version):
        pos = skip_tagged_fields(data, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def decode_request_body(header: RequestHeader, data: bytes | memoryview) -> RequestPayload:
    """Decodes the body after the header with kio; ProtocolError when malformed.

    Trailing bytes after a complete body are ignored, as Kafka's own parsers do: some clients (librdkafka's
    Metadata v12, for one) send fields a later schema added. A Produce request is read by
    protocol/produce_request first (its records as views of a ``bytes`` frame), kio taking what that leaves.
    """
    if header.api_key == PRODUCE_KEY:
        produce = decode_produce_request(data, header.api_version, header.header_size)
        if produce is not None:
            return produce
    cls = request_class(header.api_key, header.api_version)
    return decode_entity(cls, data, header.header_size, allow_trailing=True, request=True)


E = TypeVar("E", bound=Entity)  # a kio class


def decode_entity(
    cls: type[E],
    data: bytes | memoryview,
    offset: int = 0,
    *,
    allow_trailing: bool = False,
    request: bool = False,
) -> E:
    """Decodes a kio entity, requests and responses alike; ProtocolError when malformed, or for a
    ``request`` holding a string over Kafka's 32,767 bytes (responses are not held to it)."""
    # Before kio: its native reader aborts the process on absurd counts.
    check_lengths(cls, data, offset, request=request)
    obj: E
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


def encode_entity(obj: Entity) -> bytes:
    import io

    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def _response_header(correlation_id: int, api_key: int, api_version: int, body_size: int) -> bytes:
    """The size prefix and response header (v0, or v1 with no tagged fields) for a body of this size."""
    if response_header_version(api_key, api_version) == 1:
        return _SIZE.pack(body_size + 5) + _SIZE.pack(correlation_id) + b"\x00"
    return _SIZE.pack(body_size + 4) + _SIZE.pack(correlation_id)


def encode_response(correlation_id: int, api_key: int, api_version: int, body: bytes) -> bytes:
    """The full response frame: size, response header (v0 or v1), body."""
    return _response_header(correlation_id, api_key, api_version, len(body)) + body


def encode_response_pieces(
    correlation_id: int, api_key: int, api_version: int, body: list[bytes | memoryview]
) -> list[bytes | memoryview]:
    """Like ``encode_response`` for a body in pieces, which stay as they are (a Fetch response's records
    are not joined); the header goes in front of the first piece."""
    header = _response_header(correlation_id, api_key, api_version, sum(map(len, body)))
    return [header + body[0], *body[1:]]


def encode_response_entity(correlation_id: int, api_key: int, api_version: int, entity: Entity) -> bytes:
    """Like ``encode_response`` for a kio entity."""
    return encode_response(correlation_id, api_key, api_version, encode_entity(entity))


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


def parse_response_header(api_key: int, api_version: int, data: bytes | memoryview) -> tuple[int, int]:
    """Returns (correlation id, header size) of a response frame's payload."""
    if len(data) < 4:
        raise ProtocolError("response header truncated")
    (correlation_id,) = _SIZE.unpack_from(data, 0)
    pos = 4
    if response_header_version(api_key, api_version) == 1:
        pos = skip_tagged_fields(data, pos)
    return correlation_id, pos
