"""``epochkraft cluster status --bootstrap HOST:PORT,... | --admin HOST:PORT,...``: the state of a running
cluster this shell did not start (containers, another machine), from a broker's Metadata answer and from
the daemons' admin ports (/v1/state: the controller's view of every broker and partition, and its place in
the Raft quorum if it is in one; a broker's own lifecycle state). The admin ports of a secure cluster
(``--admin-secure``) are read over HTTPS trusting ``--cacert``, with a client certificate (``--cert``) or
HTTP Basic (``--user`` and ``--password-file``), as ``AdminCredentials`` says; its brokers' SASL_SSL
listener over TLS trusting ``--cacert``, with SCRAM-SHA-512 as ``--user``."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import scramp
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1 import request as sasl_handshake
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from epochkraft.config import parse_host_port
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode


@dataclass
class RemoteStatus:
    lines: list[str] = field(default_factory=list)
    reached: bool = False  # something answered

    def add(self, line: str = "") -> None:
        self.lines.append(line)


async def _metadata(
    addresses: list[tuple[str, int]], credentials: AdminCredentials | None
) -> tuple[tuple[str, int], MetadataResponse] | None:
    request = md.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    context = credentials.context() if credentials is not None else None
    for address in addresses:
        client = KafkaClient(*address, request_timeout_ms=5_000, ssl_context=context)
        try:
            if credentials is not None and credentials.user is not None:
                await asyncio.wait_for(_scram(client, credentials.user, credentials.password), 8)
            return address, await asyncio.wait_for(client.send(request, MetadataResponse), 8)
        except (NetworkError, OSError, TimeoutError, scramp.ScramException):
            continue
        finally:
            await client.close()
    return None


async def _scram(client: KafkaClient, user: str, password: str) -> None:
    """SASL SCRAM-SHA-512, what ``cluster up --secure`` gives clients on its SASL_SSL listener: the
    handshake, then the client's first and final messages in SaslAuthenticate (Kafka's SaslClientAuthenticator)."""
    handshake = await client.send(
        sasl_handshake.SaslHandshakeRequest(mechanism=SCRAM_MECHANISM), SaslHandshakeResponse
    )
    if handshake.error_code != ErrorCode.none:
        raise NetworkError(f"SaslHandshake refused: {handshake.error_code.name}")
    scram = scramp.ScramClient([SCRAM_MECHANISM], user, password)
    for message, answer in (
        (scram.get_client_first, scram.set_server_first),
        (scram.get_client_final, scram.set_server_final),
    ):
        response = await client.send(
            sasl_authenticate.SaslAuthenticateRequest(auth_bytes=message().encode()), SaslAuthenticateResponse
        )
        if response.error_code != ErrorCode.none:
            raise NetworkError(
                f"SaslAuthenticate refused: {response.error_message or response.error_code.name}"
            )
        answer(response.auth_bytes.decode())


SCRAM_MECHANISM = "SCRAM-SHA-512"


class PartitionView(NamedTuple):
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def _partition_lines(partitions: list[PartitionView], status: RemoteStatus) -> None:
    under = {p for p in partitions if len(p.isr) < len(p.replicas)}
    offline = {p for p in partitions if p.leader < 0}
    status.add(
        f"partitions: {len(partitions)} in {len({p.topic for p in partitions})} topics, "
        f"{len(under)} under-replicated, {len(offline)} without a leader"
    )
    for p in sorted(under | offline):
        status.add(
            f"  {p.topic}-{p.partition}: leader {p.leader}, replicas {list(p.replicas)}, isr {list(p.isr)}"
        )


def from_bootstrap(bootstrap: str, status: RemoteStatus, credentials: AdminCredentials | None = None) -> None:
    addresses = [parse_host_port(a.strip()) for a in bootstrap.split(",") if a.strip()]
    answer = asyncio.run(_metadata(addresses, credentials))
    if answer is None:
        status.add(f"bootstrap {bootstrap}: no broker answered Metadata")
        return
    status.reached = True
    (host, port), response = answer
    status.add(f"cluster {response.cluster_id}   (Metadata from {host}:{port})")
    status.add(f"{'broker':<8}{'endpoint':<28}rack")
    for broker in sorted(response.brokers, key=lambda b: b.node_id):
        status.add(f"{broker.node_id:<8}{f'{broker.host}:{broker.port}':<28}{broker.rack or '-'}")
    partitions = [
        PartitionView(t.name, p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
        for t in response.topics
        if t.name is not None  # an answer to every topic names each
        for p in t.partitions
    ]
    _partition_lines(partitions, status)


@dataclass(frozen=True)
class AdminCredentials:
    """How to read secured admin ports: HTTPS trusting the CA in ``cafile`` (the system's CAs without one),
    presenting the client certificate in ``certfile`` (certificate and key in one PEM, as
    DATA_DIR/security/admin.pem) or, without one, HTTP Basic with ``user`` and ``password``."""

    cafile: str | None = None
    certfile: str | None = None
    user: str | None = None
    password: str = ""

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.cafile)
        if self.certfile is not None:
            context.load_cert_chain(self.certfile)
        return context

    def authorization(self) -> str | None:
        if self.user is None:
            return None
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return f"Basic {token}"


def state_request(address: str, credentials: AdminCredentials | None) -> urllib.request.Request:
    """The GET of a daemon's /v1/state; its password is sent to that address only, not where a redirect
    points (urllib copies a request's ordinary headers to the redirected one)."""
    scheme = "http" if credentials is None else "https"
    request = urllib.request.Request(f"{scheme}://{address}/v1/state")
    authorization = credentials.authorization() if credentials is not None else None
    if authorization is not None:
        request.add_unredirected_header("Authorization", authorization)
    return request


def _state(address: str, credentials: AdminCredentials | None) -> dict[str, Any] | str:
    """The daemon's /v1/state, or why there is none."""
    request = state_request(address, credentials)
    context = credentials.context() if credentials is not None else None
    try:
        with urllib.request.urlopen(request, timeout=3, context=context) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:  # answered, but not with the state: 401 or 403
        return f"{exc.code} {exc.reason}"
    except (OSError, ValueError, http.client.HTTPException):
        return "no answer" if credentials else "no answer (a secure cluster's needs --cacert and credentials)"


def from_admin(admin: str, status: RemoteStatus, credentials: AdminCredentials | None = None) -> None:
    for address in (a.strip() for a in admin.split(",") if a.strip()):
        parse_host_port(address)
        state = _state(address, credentials)
        if isinstance(state, str):
            status.add(f"admin {address}: {state}")
            continue
        status.reached = True
        if "node_id" in state:  # a broker's own view
            status.add(
                f"admin {address}: broker {state['node_id']} {state.get('state')}, "
                f"epoch {state.get('broker_epoch')}, metadata offset {state.get('metadata_offset')}"
            )
            continue
        status.add(f"admin {address}: controller of cluster {state.get('cluster_id')}")
        quorum = state.get("quorum")
        if quorum:  # one of a Raft quorum: what follows is the committed metadata it has replayed
            status.add(
                f"quorum: controller {quorum['node_id']} {quorum['role']}, leader {quorum['leader']}, "
                f"epoch {quorum['epoch']}, voters {quorum['voters']}, high watermark {quorum['high_watermark']}"
            )
        status.add(f"{'broker':<8}{'epoch':>8}  {'state':<22}endpoints")
        for broker in state.get("brokers", []):
            if broker.get("fenced"):
                condition = "fenced"
            elif broker.get("in_controlled_shutdown"):
                condition = "controlled shutdown"
            else:
                condition = "unfenced"
            endpoints = ", ".join(broker.get("endpoints", []))
            status.add(f"{broker['id']:<8}{broker['epoch']:>8}  {condition:<22}{endpoints}")
        partitions = [
            PartitionView(p["topic"], p["partition"], p["leader"], tuple(p["replicas"]), tuple(p["isr"]))
            for p in state.get("partitions", [])
        ]
        _partition_lines(partitions, status)


def remote_status(
    bootstrap: str | None, admin: str | None, credentials: AdminCredentials | None = None
) -> RemoteStatus:
    status = RemoteStatus()
    if bootstrap:
        from_bootstrap(bootstrap, status, credentials)
    if admin:
        if status.lines:
            status.add()
        from_admin(admin, status, credentials)
    return status
