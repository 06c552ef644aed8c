"""Security settings both daemons take, with Kafka's property names; the default is today's: PLAINTEXT
everywhere and no authorizer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from epochkraft.config import prop


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    # taken per listener too, as Kafka's listener.name.<listener>.<property> (the listener's value wins)
    PER_LISTENER_PROPERTIES: ClassVar[frozenset[str]] = frozenset({"ssl.client.auth"})

    listener_security_protocol_map: str = prop(
        "listener.security.protocol.map",
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "NAME:PROTOCOL for every listener (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).",
    )
    controller_listener_names: str = prop(
        "controller.listener.names",
        "",
        "The controller's listener name (its security protocol comes from listener.security.protocol.map); "
        "a broker connects to the controller with the first one's protocol. Empty: PLAINTEXT.",
    )
    authorizer_class_name: str = prop(
        "authorizer.class.name",
        "",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer turns on ACL authorization (empty: none).",
    )
    super_users: str = prop(
        "super.users",
        "",
        "Principals allowed everything, separated by semicolons (User:CN=broker,O=x;User:admin).",
    )
    allow_everyone_if_no_acl_found: bool = prop(
        "allow.everyone.if.no.acl.found", False, "Allow access to a resource that has no ACL at all."
    )
    ssl_keystore_location: str = prop(
        "ssl.keystore.location", "", "PEM file with this daemon's private key and certificate chain."
    )
    ssl_key_password: str = prop(
        "ssl.key.password", "", "Password of the private key (empty: not encrypted)."
    )
    ssl_truststore_location: str = prop(
        "ssl.truststore.location",
        "",
        "PEM file of the CA certificates peers' certificates are checked against.",
    )
    ssl_client_auth: str = prop(
        "ssl.client.auth",
        "none",
        "none, requested or required: whether SSL listeners ask clients for a certificate.",
    )
    ssl_endpoint_identification_algorithm: str = prop(
        "ssl.endpoint.identification.algorithm",
        "https",
        "https: this daemon's clients check the server certificate's host name; empty: they do not.",
    )
    sasl_enabled_mechanisms: str = prop(
        "sasl.enabled.mechanisms",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "Mechanisms SASL_PLAINTEXT and SASL_SSL listeners offer (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).",
    )
    sasl_jaas_config: str = prop(
        "sasl.jaas.config",
        "",
        "PLAIN's users, as Kafka's PlainLoginModule entry: user_NAME=\"password\" options (SCRAM users live in "
        "the metadata log).",
    )
    # (LISTENER, property, value) from listener.name.<listener>.<property> lines
    listener_properties: tuple[tuple[str, str, str], ...] = field(default=())

    def ssl_client_auth_for(self, listener: str) -> str:
        """ssl.client.auth of ``listener``: listener.name.<listener>.ssl.client.auth, else the
        daemon-wide value."""
        return self._for_listener(listener, "ssl.client.auth", self.ssl_client_auth)

    def _for_listener(self, listener: str, name: str, default: str) -> str:
        for known, prop_name, value in self.listener_properties:
            if known == listener.upper() and prop_name == name:
                return value
        return default
