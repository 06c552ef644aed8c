"""Client-side network failures."""


class NetworkError(Exception):
    """The request may or may not have reached the peer."""


class ConnectionLost(NetworkError):
    """The connection failed or closed before the response arrived."""


class RequestTimedOut(NetworkError):
    """No response within the request timeout."""
