"""ssl.client.auth per listener, as Kafka's ``listener.name.<listener>.ssl.client.auth``: a listener's own
value wins over the daemon-wide one, so a broker's INTERNAL listener can require client certificates
while SASL clients on its SASL_SSL listener present none; ``cluster up --secure`` sets it so."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from epochkraft.broker.settings import BrokerSettings
from epochkraft.config import ConfigError, load_settings
from epochkraft.security.certs import LocalCA
from epochkraft.security.local_setup import INTER_BROKER_LISTENER, LocalSecurity
from epochkraft.security.node import NodeSecurity

pytestmark = pytest.mark.timeout(60)


def settings(tmp_path: Path, **properties: str) -> BrokerSettings:
    ca = LocalCA.create()
    truststore = ca.write_truststore(tmp_path / "ca.pem")
    ca.issue("broker-1", tmp_path / "broker-1.pem")
    ca.issue("client", tmp_path / "client.pem")
    return load_settings(
        BrokerSettings,
        properties={
            "ssl.keystore.location": str(tmp_path / "broker-1.pem"),
            "ssl.truststore.location": str(truststore),
            "ssl.client.auth": "requested",
            **properties,
        },
    )


def test_a_listener_prefixed_ssl_client_auth_wins_over_the_daemon_wide_one(tmp_path):
    loaded = settings(tmp_path, **{"listener.name.internal.ssl.client.auth": "required"})
    assert loaded.ssl_client_auth_for("INTERNAL") == "required"
    assert loaded.ssl_client_auth_for("internal") == "required"
    assert loaded.ssl_client_auth_for("SECURE") == "requested"
    security = NodeSecurity.build(loaded)
    assert security.server_ssl("SSL", "INTERNAL").verify_mode == ssl.CERT_REQUIRED
    assert security.server_ssl("SASL_SSL", "SECURE").verify_mode == ssl.CERT_OPTIONAL
    assert security.server_ssl("PLAINTEXT", "INTERNAL") is None


def test_per_listener_forms_of_other_properties_are_unknown(tmp_path):
    with pytest.raises(ConfigError, match="unknown property"):
        settings(tmp_path, **{"listener.name.internal.ssl.keystore.location": "x.pem"})
    with pytest.raises(ConfigError, match=r"listener\.name\.internal\.ssl\.client\.auth must be"):
        NodeSecurity.build(
            settings(tmp_path, **{"listener.name.internal.ssl.client.auth": "sometimes"})
        ).server_ssl("SSL", "INTERNAL")


async def handshakes(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> bool:
    """Whether a TLS client gets through to the listener (its handler runs only after the handshake)."""
    reached = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.set()
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context)
            await asyncio.wait_for(reader.read(1), 5)
            writer.close()
        except (ssl.SSLError, ConnectionError, TimeoutError):
            pass
        try:
            await asyncio.wait_for(reached.wait(), 1)
        except TimeoutError:
            return False
        return True
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.net
async def test_internal_refuses_a_tls_client_without_a_certificate(tmp_path):
    security = NodeSecurity.build(
        settings(tmp_path, **{"listener.name.internal.ssl.client.auth": "required"})
    )
    anonymous = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    with_certificate = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    with_certificate.load_cert_chain(str(tmp_path / "client.pem"))
    internal = security.server_ssl("SSL", "INTERNAL")
    secure = security.server_ssl("SASL_SSL", "SECURE")
    assert internal is not None and secure is not None
    assert not await handshakes(internal, anonymous)
    assert await handshakes(internal, with_certificate)
    assert await handshakes(secure, anonymous)


def test_cluster_up_secure_requires_certificates_on_internal(tmp_path):
    overrides = LocalSecurity.create(tmp_path, brokers=1).broker_overrides(1, 9092, 9093)
    loaded = load_settings(BrokerSettings, properties=dict(item.split("=", 1) for item in overrides))
    assert loaded.ssl_client_auth_for(INTER_BROKER_LISTENER) == "required"
    assert loaded.ssl_client_auth_for("SECURE") == "requested"
