"""TLS contexts from the ssl.* settings (PEM keystore and truststore), on the stdlib ``ssl`` module."""

from __future__ import annotations

import ssl

from epochkraft.config import ConfigError
from epochkraft.security.settings import SecuritySettings

CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def _load_keystore(context: ssl.SSLContext, settings: SecuritySettings) -> None:
    try:
        context.load_cert_chain(settings.ssl_keystore_location, password=settings.ssl_key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.keystore.location {settings.ssl_keystore_location}: {exc}") from exc


def _load_truststore(context: ssl.SSLContext, settings: SecuritySettings) -> None:
    try:
        context.load_verify_locations(cafile=settings.ssl_truststore_location)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.truststore.location {settings.ssl_truststore_location}: {exc}") from exc


def server_context(settings: SecuritySettings, listener: str = "", *, sasl: bool = False) -> ssl.SSLContext:
    """The context of an SSL or (``sasl``) SASL_SSL listener (its ssl.client.auth may be its own)."""
    if not settings.ssl_keystore_location:
        raise ConfigError("an SSL listener needs ssl.keystore.location (a PEM key and certificate chain)")
    client_auth = settings.ssl_client_auth_for(listener, sasl=sasl)
    mode = CLIENT_AUTH_MODES.get(client_auth.lower())
    if mode is None:
        name = f"listener.name.{listener.lower()}.ssl.client.auth" if listener else "ssl.client.auth"
        raise ConfigError(f"{name} must be none, requested or required, got {client_auth!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_keystore(context, settings)
    if mode != ssl.CERT_NONE:
        if not settings.ssl_truststore_location:
            raise ConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location")
        _load_truststore(context, settings)
    context.verify_mode = mode
    return context


def client_context(settings: SecuritySettings) -> ssl.SSLContext:
    """The context this daemon's own clients (to the controller, to leaders) connect with: the server is
    checked against the truststore; the keystore, when given, is presented for client authentication."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = settings.ssl_endpoint_identification_algorithm.lower() == "https"
    if settings.ssl_truststore_location:
        _load_truststore(context, settings)
    else:
        context.load_default_certs()
    if settings.ssl_keystore_location:
        _load_keystore(context, settings)
    return context


def admin_server_context(settings: SecuritySettings) -> ssl.SSLContext:
    """The context of a secured admin HTTP port: this daemon's keystore, and a client certificate asked
    for but not required (tools present one; a browser logs in with a password instead)."""
    if not settings.ssl_keystore_location:
        raise ConfigError("--admin-secure needs ssl.keystore.location (a PEM key and certificate chain)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_keystore(context, settings)
    if settings.ssl_truststore_location:
        _load_truststore(context, settings)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
