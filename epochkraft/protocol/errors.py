"""Kafka error codes (one enum, from kio's generated table) and the project's protocol error."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "FrameTooLarge", "ProtocolError"]


class ProtocolError(Exception):
    """Bytes that do not parse as Kafka protocol: a malformed frame, header or body."""


class FrameTooLarge(ProtocolError):
    """A size prefix above the listener's socket.request.max.bytes."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit
