"""SaslHandshake (key 17), version 1, broker listener.

- On a SASL listener: picks the mechanism for the SaslAuthenticate tokens that follow; the enabled
  mechanisms (``sasl.enabled.mechanisms``) come back either way; UNSUPPORTED_SASL_MECHANISM for another.
  A second handshake once authenticated, and any handshake on a listener without SASL, get
  ILLEGAL_SASL_STATE (Kafka's KafkaApis.handleSaslHandshakeRequest).
- v0 (raw tokens outside Kafka framing after the handshake) is not served: every client here uses v1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt


@api(key=17, name="SaslHandshake", versions=(1, 1), listeners=(BROKER,))
async def handle(request: rt.SaslHandshake, ctx: RequestContext):
    session = ctx.sasl
    if session is None:
        return SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    error = session.handshake(request.mechanism)
    return SaslHandshakeResponse(error_code=error, mechanisms=session.enabled)
