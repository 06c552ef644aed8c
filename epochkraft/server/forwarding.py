"""A client's request forwarded to the active controller in an Envelope (API 58), as Kafka's ForwardingManager
and EnvelopeUtils: the broker wraps the request with the client's header (its client id and correlation id),
its principal (KafkaPrincipalSerde bytes) and its address; the controller unwraps it, runs it as that client
and answers with the client's response inside the EnvelopeResponse. Sans-IO: requests and bytes in, requests
and responses out.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.static.protocol import Payload, RequestPayload, ResponsePayload

from epochkraft.protocol.error_response import error_response
from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.protocol.framing import (
    RequestHeader,
    decode_entity,
    decode_request_body,
    encode_entity,
    encode_request,
    encode_response_entity,
    parse_request_header,
    parse_response_header,
    response_class,
)
from epochkraft.security.principal import KafkaPrincipal, deserialize_principal, serialize_principal

ENVELOPE_KEY = 58
# The APIs a broker forwards to the controller for a client (Kafka's ApiKeys.forwardable, of those we serve):
# CreateTopics, DeleteTopics, CreateAcls, DeleteAcls, AlterConfigs, CreatePartitions, ElectLeaders,
# IncrementalAlterConfigs, Alter/ListPartitionReassignments, AlterClientQuotas, AlterUserScramCredentials,
# UpdateFeatures.
FORWARDABLE_APIS = frozenset({19, 20, 30, 31, 33, 37, 43, 44, 45, 46, 49, 51, 57})

# The response class a caller of the controller names for its request's answer
R = TypeVar("R", bound=ResponsePayload)


class EnvelopeError(Exception):
    """An Envelope the controller refuses as a whole (its EnvelopeResponse's error code)."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class ForwardedRequest:
    """What the controller unwraps: the client's header and request, who sent it and from where."""

    header: RequestHeader
    request: RequestPayload
    principal: KafkaPrincipal
    client_host: str


LOOPBACK = ipaddress.IPv4Address("127.0.0.1").packed


def client_address(host: str) -> bytes:
    """The client's address as Kafka's InetAddress.getAddress (4 or 16 bytes)."""
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        # No peer address (a test's stand-in transport, never a TCP connection): the loopback, which every
        # listener here binds.
        return LOOPBACK


def wrap(
    request: RequestPayload,
    client_id: str | None,
    correlation_id: int,
    principal: KafkaPrincipal,
    client_host: str,
) -> EnvelopeRequest:
    """The Envelope carrying ``request`` at its own version with the client's header (ForwardingManager.
    buildEnvelopeRequest)."""
    key, version = int(request.__api_key__), int(request.__version__)
    frame = encode_request(key, version, correlation_id, client_id, encode_entity(request))
    return EnvelopeRequest(
        request_data=frame[4:],  # no size prefix: the embedded header and body
        request_principal=serialize_principal(principal),
        client_host_address=client_address(client_host),
    )


def answer_as(answer: object, response_type: type[R]) -> R:
    """The controller's ``answer`` as the ``response_type`` its caller named. An answer of another class
    (another API or version) is a bug, here or in the caller: TypeError, which the handler's error path
    answers UNKNOWN_SERVER_ERROR, rather than an answer of the wrong shape on the client's connection."""
    if not isinstance(answer, response_type):
        raise TypeError(
            f"the controller's answer is a {_named(type(answer))}, not the {_named(response_type)} asked for"
        )
    return answer


def _named(cls: type) -> str:
    version = getattr(cls, "__version__", None)
    return cls.__name__ if version is None else f"{cls.__name__} v{version}"


def unwrap_response(envelope: EnvelopeResponse, request: RequestPayload, response_type: type[R]) -> R:
    """The client's response inside an EnvelopeResponse, at the forwarded request's version, which is to
    be ``response_type``. An envelope refused as a whole answers the client NOT_CONTROLLER (retriable: no
    controller was active) or, as Kafka's ForwardingManager does for any other envelope error,
    UNKNOWN_SERVER_ERROR."""
    key, version = int(request.__api_key__), int(request.__version__)
    cls = response_class(key, version)
    if envelope.error_code != ErrorCode.none or envelope.response_data is None:
        error = ErrorCode.not_controller if envelope.error_code == ErrorCode.not_controller else None
        return answer_as(error_response(request, cls, error or ErrorCode.unknown_server_error), response_type)
    data = envelope.response_data
    _correlation_id, header_size = parse_response_header(key, version, data)
    return answer_as(decode_entity(cls, data, header_size, allow_trailing=True), response_type)


def timed_out(request: RequestPayload, response_type: type[R]) -> R:
    """The client's answer, a ``response_type``, when no controller answered its forwarded request in time
    (Kafka's ForwardingManager.onTimeout: REQUEST_TIMED_OUT)."""
    cls = response_class(int(request.__api_key__), int(request.__version__))
    return answer_as(error_response(request, cls, ErrorCode.request_timed_out), response_type)


def unwrap_request(envelope: EnvelopeRequest) -> ForwardedRequest:
    """The client's request inside an Envelope (EnvelopeUtils.handleEnvelopeRequest); EnvelopeError with
    PRINCIPAL_DESERIALIZATION_FAILURE or INVALID_REQUEST for what Kafka refuses."""
    if envelope.request_principal is None:
        raise EnvelopeError(ErrorCode.principal_deserialization_failure, "The envelope names no principal")
    try:
        principal = deserialize_principal(envelope.request_principal)
    except ValueError as exc:
        raise EnvelopeError(ErrorCode.principal_deserialization_failure, str(exc)) from exc
    address = envelope.client_host_address
    if len(address) not in (4, 16):
        raise EnvelopeError(ErrorCode.invalid_request, f"client address of {len(address)} bytes")
    client_host = str(ipaddress.ip_address(address))
    try:
        header = parse_request_header(envelope.request_data)
        if header.api_key not in FORWARDABLE_APIS:
            raise EnvelopeError(
                ErrorCode.invalid_request,
                f"API {header.api_key} is not enabled or is not eligible for forwarding",
            )
        request = decode_request_body(header, envelope.request_data)
    except ProtocolError as exc:
        raise EnvelopeError(ErrorCode.invalid_request, f"malformed forwarded request: {exc}") from exc
    return ForwardedRequest(header, request, principal, client_host)


def envelope_response(header: RequestHeader, response: Payload) -> EnvelopeResponse:
    """The client's response, with its response header, in an EnvelopeResponse
    (RequestContext.buildResponseEnvelopePayload)."""
    frame = encode_response_entity(header.correlation_id, header.api_key, header.api_version, response)
    return EnvelopeResponse(response_data=frame[4:], error_code=ErrorCode.none)


def refused_envelope(error: ErrorCode) -> EnvelopeResponse:
    return EnvelopeResponse(response_data=None, error_code=error)
