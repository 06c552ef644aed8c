"""The security of a local cluster (``epochkraft cluster up --secure``), kept under its data dir: a CA,
a certificate per daemon and one for the admin, an admin SCRAM password, and the daemons' settings.

The controller listener and the brokers' inter-broker listener are SSL with client certificates (mTLS);
clients use a SASL_SSL listener with SCRAM-SHA-512; the StandardAuthorizer is on with the daemons and the
admin as super users and nothing else allowed until ACLs say so. Files are made once and reused when the
cluster restarts on the same data dir.
"""

from __future__ import annotations

import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path

from epochkraft.security.authorizer import STANDARD_AUTHORIZER
from epochkraft.security.certs import LocalCA

ADMIN_USER = "admin"
CLIENT_LISTENER = "SECURE"  # SASL_SSL, for clients
INTER_BROKER_LISTENER = "INTERNAL"  # SSL with client certificates, for brokers


@dataclass(frozen=True)
class LocalSecurity:
    directory: Path
    brokers: int

    @property
    def truststore(self) -> Path:
        return self.directory / "ca.pem"

    def keystore(self, name: str) -> Path:
        return self.directory / f"{name}.pem"

    @property
    def admin_password(self) -> str:
        return (self.directory / "admin.password").read_text().strip()

    @staticmethod
    def create(directory: Path, brokers: int) -> LocalSecurity:
        """Makes what is missing (a new CA re-issues every certificate)."""
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        setup = LocalSecurity(directory, brokers)
        names = ["controller", "admin", *(f"broker-{n}" for n in range(1, brokers + 1))]
        if not setup.truststore.exists() or not all(setup.keystore(n).exists() for n in names):
            ca = LocalCA.create("epochkraft")
            ca.write_truststore(setup.truststore)
            for name in names:
                ca.issue(name, setup.keystore(name))
        password = directory / "admin.password"
        if not password.exists():
            password.write_text(secrets.token_urlsafe(18) + "\n")
            password.chmod(0o600)
        return setup

    def super_users(self) -> str:
        names = ["controller", "admin", *(f"broker-{n}" for n in range(1, self.brokers + 1))]
        return ";".join([*(f"User:CN={n},O=epochkraft" for n in names), f"User:{ADMIN_USER}"])

    def _common(self) -> list[str]:
        return [
            f"authorizer.class.name={STANDARD_AUTHORIZER}",
            f"super.users={self.super_users()}",
            f"ssl.truststore.location={self.truststore}",
            "controller.listener.names=CONTROLLER",
        ]

    def controller_overrides(self) -> list[str]:
        return [
            *self._common(),
            "listener.security.protocol.map=CONTROLLER:SSL",
            f"ssl.keystore.location={self.keystore('controller')}",
            "ssl.client.auth=required",
        ]

    def controller_args(self) -> list[str]:
        args = []
        for item in self.controller_overrides():
            args += ["--override", item]
        return [*args, "--add-scram", f"SCRAM-SHA-512=[name={ADMIN_USER},password={self.admin_password}]"]

    def broker_overrides(self, node_id: int, client_port: int, internal_port: int = 0) -> list[str]:
        listeners = (
            f"{CLIENT_LISTENER}://127.0.0.1:{client_port},{INTER_BROKER_LISTENER}://127.0.0.1:{internal_port}"
        )
        return [
            *self._common(),
            f"listeners={listeners}",
            f"listener.security.protocol.map={CLIENT_LISTENER}:SASL_SSL,{INTER_BROKER_LISTENER}:SSL,CONTROLLER:SSL",
            f"inter.broker.listener.name={INTER_BROKER_LISTENER}",
            f"ssl.keystore.location={self.keystore(f'broker-{node_id}')}",
            # SASL clients on SECURE need no certificate; INTERNAL serves only those that present one
            # (the brokers and the admin), as Kafka's listener.name.internal.ssl.client.auth=required
            "ssl.client.auth=requested",
            f"listener.name.{INTER_BROKER_LISTENER.lower()}.ssl.client.auth=required",
            "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256",
        ]

    def broker_args(self, node_id: int, client_port: int, internal_port: int = 0) -> list[str]:
        args = []
        for item in self.broker_overrides(node_id, client_port, internal_port):
            args += ["--override", item]
        return args

    def admin_tls(self) -> ssl.SSLContext:
        """TLS with the admin's certificate (a super user), for the SSL listeners."""
        context = ssl.create_default_context(cafile=str(self.truststore))
        context.load_cert_chain(str(self.keystore("admin")))
        return context

    def librdkafka(self, bootstrap: str) -> dict[str, str]:
        """confluent-kafka settings of the admin on the SASL_SSL listener."""
        return {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": ADMIN_USER,
            "sasl.password": self.admin_password,
            "ssl.ca.location": str(self.truststore),
        }

    def client_properties(self, bootstrap: str) -> str:
        """Settings for Kafka's Java tools and, below them, librdkafka's names."""
        password = self.admin_password
        return (
            f"bootstrap.servers={bootstrap}\n"
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN_USER}" password="{password}";\n'
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={self.truststore}\n"
            f"# librdkafka (confluent-kafka, kcat): sasl.username={ADMIN_USER} sasl.password={password} "
            f"ssl.ca.location={self.truststore}\n"
        )
