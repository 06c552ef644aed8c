"""SaslAuthenticate (key 36), versions 0-2, broker listener.

- Carries the chosen mechanism's tokens (``security.sasl``): PLAIN in one step, SCRAM in two (server-first,
  then server-final). A wrong user or password is answered SASL_AUTHENTICATION_FAILED with Kafka's message;
  a token before a handshake, after authentication, or on a listener without SASL ILLEGAL_SASL_STATE.
- session_lifetime_ms (v1+) is 0: no re-authentication is asked for (KIP-368 is not served).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.static.primitive import i64Timedelta

from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

NO_LIFETIME = i64Timedelta.parse(datetime.timedelta(0))


@api(key=36, name="SaslAuthenticate", versions=(0, 2), listeners=(BROKER,))
async def handle(request: rt.SaslAuthenticate, ctx: RequestContext):
    session = ctx.sasl
    if session is None or session.authenticated:
        response = SaslAuthenticateResponse(
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate outside a SASL authentication",
            auth_bytes=b"",
            session_lifetime=NO_LIFETIME,
        )
    else:
        step = session.authenticate(request.auth_bytes)
        if step.error == ErrorCode.sasl_authentication_failed:
            ctx.log.info("SASL authentication failed", mechanism=session.mechanism or "")
        response = SaslAuthenticateResponse(
            error_code=step.error,
            error_message=step.message,
            auth_bytes=step.auth_bytes,
            session_lifetime=NO_LIFETIME,
        )
    return downgrade_response(response, ctx.api_version)
