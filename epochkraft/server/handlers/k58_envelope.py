"""Envelope (key 58), version 0, controller listener: a client's request a broker forwards (KIP-590).

- Only a sender with CLUSTER_ACTION on the cluster (a broker) may send one: anyone else's is answered
  CLUSTER_AUTHORIZATION_FAILED before it is opened (ControllerApis.handleEnvelopeRequest).
- The envelope holds the client's request header and body, its principal (KafkaPrincipalSerde bytes) and
  address (EnvelopeUtils.handleEnvelopeRequest): an unreadable principal is PRINCIPAL_DESERIALIZATION_FAILURE,
  an API not forwarded by brokers (an Envelope in an Envelope among them), a version the controller does not
  serve or a malformed request INVALID_REQUEST, each in the EnvelopeResponse's error code.
- Otherwise the request runs as the client: authorized as its principal and address, charged to its
  principal and client id (KIP-599's controller mutation quota), by the same handler a client reaching the
  controller's listener directly gets; the client's response, with its response header, comes back inside
  the EnvelopeResponse.
"""

from __future__ import annotations

from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse

from epochkraft.protocol.api import CONTROLLER, api, registered
from epochkraft.protocol.error_response import error_answer
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import response_class
from epochkraft.server.context import RequestContext
from epochkraft.server.forwarding import (
    EnvelopeError,
    ForwardedRequest,
    envelope_response,
    refused_envelope,
    unwrap_request,
)
from epochkraft.server.request_rules import listener_refusal


@api(key=58, name="Envelope", versions=(0, 0), listeners=(CONTROLLER,))
async def handle_on_controller(request: EnvelopeRequest, ctx: RequestContext) -> EnvelopeResponse:
    try:
        forwarded = unwrap_request(request)
    except EnvelopeError as exc:
        ctx.log.info("envelope refused", error=exc.error.name, reason=str(exc))
        return refused_envelope(exc.error)
    header = forwarded.header
    spec = registered(CONTROLLER).get(header.api_key)
    if spec is None or not spec.supports(header.api_version):
        ctx.log.info("envelope refused", api_key=header.api_key, api_version=header.api_version)
        return refused_envelope(ErrorCode.invalid_request)
    inner = _client_context(ctx, forwarded)
    refused = listener_refusal(CONTROLLER, header.api_key, forwarded.request, inner)
    cls = response_class(header.api_key, header.api_version)
    if refused is not None:
        inner.log.info("forwarded request refused", api=spec.name, principal=str(inner.principal))
        return envelope_response(header, error_answer(forwarded.request, cls, refused))
    try:
        response = await spec.handler(forwarded.request, inner)
    except Exception as exc:  # the client's error response, as Kafka's handleError answers it
        inner.log.error("forwarded request failed", api=spec.name, error=repr(exc), exc_info=exc)
        response = error_answer(forwarded.request, cls)
    return envelope_response(header, response)


def _client_context(ctx: RequestContext, forwarded: ForwardedRequest) -> RequestContext:
    """The request context of the client the broker forwards for (EnvelopeUtils' forwardedContext)."""
    header = forwarded.header
    return RequestContext(
        CONTROLLER,
        header,
        header.api_version,
        ctx.node,
        (forwarded.client_host, 0),
        ctx.log.bind(forwarded_for=str(forwarded.principal), client_id=header.client_id),
        ctx.listener_name,
        forwarded.principal,
        ctx.authorizer,
        forwarded=True,
    )
