"""The attacks of an anonymous client on the same network, against real daemons: each works on a default
(PLAINTEXT, no authorizer) cluster and is refused with Kafka's error once the controller and inter-broker
listeners are TLS with client certificates and the StandardAuthorizer is on (KafkaApis.handleFetchRequest,
ControllerApis.authorizeClusterOperation, ControllerApis.createTopics, ReplicaManager.appendToLocalLog).

On the secured cluster the attacker connects without a client certificate (``ssl.client.auth=requested``),
so it reaches the protocol as User:ANONYMOUS and gets error codes rather than a failed handshake; the
brokers authenticate with certificates their super.users entry names. Clients keep a PLAINTEXT listener
and, with ``allow.everyone.if.no.acl.found``, their ordinary topics.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.broker_heartbeat.v1 import request as hb
from kio.schema.broker_registration.v3 import request as reg
from kio.schema.fetch.v12 import request as f12
from kio.schema.fetch.v16 import request as f16
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
from kio.schema.produce.v9 import request as pr
from kio.schema.unregister_broker.v0 import request as unreg

from epochkraft.harness.kio_client import MiniClient
from epochkraft.harness.processes import LocalProcess
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import build_batch
from epochkraft.security.certs import LocalCA
from tests.conftest import write_fast_configs
from tests.support.kio_requests import Scenario, request_for
from tests.test_listeners import advertised
from tests.test_wire_versions import error_codes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
METADATA_TOPIC_ID = uuid.UUID(int=1)


@dataclass
class Target:
    """Where the attacker aims: the controller listener and each broker's client listener."""

    controller: tuple[str, int]
    controller_tls: ssl.SSLContext | None  # the attacker's TLS without a client certificate
    clients: dict[int, tuple[str, int]]
    cluster_id: str
    procs: list[LocalProcess]
    admin_bootstrap: str  # where the test's own super user connects (the inter-broker listener)
    admin_tls: ssl.SSLContext | None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.clients.values())

    def admin(self) -> MiniClient:
        return MiniClient(self.admin_bootstrap, self.admin_tls)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def _launch(tmp: Path, name: str, args: list[str]) -> LocalProcess:
    proc = LocalProcess(name, args, tmp / "logs" / f"{name}.log", tmp / name)
    proc.launch()
    return proc


def start_cluster(tmp: Path, secure: bool, brokers: int = 3) -> Target:
    cluster_id = f"sec-{uuid.uuid4().hex[:8]}"
    broker_extra = "offsets.topic.replication.factor=3\n"
    controller_extra = ""
    controller_tls = admin_tls = None
    if secure:
        ca = LocalCA.create()
        trust = ca.write_truststore(tmp / "ca.pem")
        principals = [ca.issue("controller", tmp / "controller.pem")]
        principals += [ca.issue(f"broker-{n}", tmp / f"broker-{n}.pem") for n in range(1, brokers + 1)]
        principals.append(ca.issue("admin", tmp / "admin.pem"))
        common = (
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
            f"super.users={';'.join(f'User:{p}' for p in principals)}\n"
            "allow.everyone.if.no.acl.found=false\n"
            f"ssl.truststore.location={trust}\n"
            "ssl.client.auth=requested\n"
            "controller.listener.names=CONTROLLER\n"
        )
        controller_extra = (
            common + "listener.security.protocol.map=CONTROLLER:SSL\n"
            f"ssl.keystore.location={tmp / 'controller.pem'}\n"
        )
        broker_extra += common + (
            "listeners=INTERNAL://127.0.0.1:0,CLIENT://127.0.0.1:0\n"
            "listener.security.protocol.map=INTERNAL:SSL,CLIENT:PLAINTEXT,CONTROLLER:SSL\n"
            "inter.broker.listener.name=INTERNAL\n"
        )
        controller_tls = ssl.create_default_context(cafile=str(trust))
        admin_tls = ssl.create_default_context(cafile=str(trust))
        admin_tls.load_cert_chain(str(tmp / "admin.pem"))
    else:
        broker_extra += (
            "listeners=INTERNAL://127.0.0.1:0,CLIENT://127.0.0.1:0\n"
            "listener.security.protocol.map=INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT\n"
            "inter.broker.listener.name=INTERNAL\n"
        )
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config", broker_extra, controller_extra)
    controller = _launch(
        tmp,
        "controller",
        [
            *("controller", "--listen", "127.0.0.1:0", "--cluster-id", cluster_id),
            *("--data-dir", str(tmp / "c"), "--config", str(controller_cfg)),
        ],
    )
    procs = [controller]
    try:
        controller.wait_ready(60)
        for n in range(1, brokers + 1):
            args = ["broker", "--node-id", str(n), "--controller", f"127.0.0.1:{controller.port}"]
            args += ["--data-dir", str(tmp / f"broker-{n}"), "--config", str(broker_cfg)]
            if secure:
                args += ["--override", f"ssl.keystore.location={tmp / f'broker-{n}.pem'}"]
            procs.append(_launch(tmp, f"broker-{n}", args))
        for proc in procs[1:]:
            proc.wait_ready(60)
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    clients = {n: advertised(p)["CLIENT"] for n, p in enumerate(procs[1:], start=1)}
    internal = ",".join(
        f"127.0.0.1:{p.port}" for p in procs[1:]
    )  # the ready line names the inter-broker port
    admin_bootstrap = internal if secure else ",".join(f"{h}:{p}" for h, p in clients.values())
    return Target(
        ("127.0.0.1", controller.port), controller_tls, clients, cluster_id, procs, admin_bootstrap, admin_tls
    )


async def send(address: tuple[str, int], request, tls: ssl.SSLContext | None = None):
    client = KafkaClient(*address, request_timeout_ms=20_000, ssl_context=tls)
    try:
        return await client.send(request)
    finally:
        await client.close()


def rogue_registration(
    target: Target, broker_id: int, previous_epoch: int = -1
) -> reg.BrokerRegistrationRequest:
    return request_for(
        62,
        3,
        Scenario(
            "rogue",
            topic="t",
            broker_id=broker_id,
            cluster_id=target.cluster_id,
            overrides={"previous_broker_epoch": previous_epoch, "incarnation_id": uuid.uuid4()},
        ),
    )


async def attacks(target: Target) -> dict[str, ErrorCode]:
    """Runs every attack once; the error each got (NONE: it worked)."""
    ctl, tls = target.controller, target.controller_tls
    got: dict[str, ErrorCode] = {}
    admin = target.admin()  # the test's own super user sets the scene
    miner = MiniClient(target.bootstrap)  # the attacker, anonymous on the client listener
    try:
        assert await admin.create_topic("victim", partitions=1, rf=3) == ErrorCode.none
        for _ in range(100):
            p, _brokers = await admin.partition_state("victim")
            if p.leader_id >= 0 and len(p.isr_nodes) == 3:
                break
            await asyncio.sleep(0.1)
        leader = p.leader_id
        await offsets_topic(admin)
        followers = [b for b in p.replica_nodes if b != leader]

        # Register a rogue broker (a new node id) with the controller.
        response = await send(ctl, rogue_registration(target, 9), tls)
        got["register a rogue broker"] = response.error_code
        rogue_epoch = response.broker_epoch

        # Read the metadata log anonymously (it gives every broker's epoch).
        fetch = f16.FetchRequest(
            replica_state=f16.ReplicaState(replica_id=9, replica_epoch=-1),
            max_wait=_ms(0),
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                f16.FetchTopic(
                    topic_id=METADATA_TOPIC_ID,
                    partitions=(
                        f16.FetchPartition(
                            partition=0,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        response = await send(ctl, fetch, tls)
        got["read the metadata log"] = response.error_code or response.responses[0].partitions[0].error_code

        # Hijack broker 2's id: its epoch as the previous epoch of a new incarnation.
        epoch = await broker_epoch(target, 2)
        response = await send(ctl, rogue_registration(target, 2, epoch), tls)
        got["hijack a live broker's id"] = response.error_code

        # Heartbeat for the rogue broker (unfencing it), then unregister it.
        overrides = {"broker_epoch": rogue_epoch, "want_fence": False, "want_shut_down": False}
        beat = request_for(63, 1, Scenario("hb", topic="t", broker_id=9, overrides=overrides))
        assert isinstance(beat, hb.BrokerHeartbeatRequest)
        got["heartbeat as another broker"] = (await send(ctl, beat, tls)).error_code
        gone = unreg.UnregisterBrokerRequest(broker_id=9)
        got["unregister a broker"] = (await send(ctl, gone, tls)).error_code
        alter = request_for(56, 3, Scenario("ap", topic="victim", broker_id=leader))
        got["forge AlterPartition"] = (await send(ctl, alter, tls)).error_code

        # Change a topic's configs and add partitions straight on the controller listener.
        configs = request_for(44, 1, Scenario("iac", topic="victim", overrides={"validate_only": False}))
        got["alter topic configs on the controller"] = set(error_codes(await send(ctl, configs, tls))).pop()
        grow = request_for(37, 3, Scenario("cp", topic="victim", overrides={"validate_only": True}))
        got["add partitions on the controller"] = set(error_codes(await send(ctl, grow, tls))).pop()

        # Follower Fetches on the client listener, as replicas 2 and 3 with a made-up offset (Fetch v12).
        errors = []
        for fake in followers:
            follower_fetch = request_for(
                1,
                12,
                Scenario("ff", topic="victim", offset=0, overrides={"replica_id": fake, "max_wait": _ms(0)}),
            )
            assert isinstance(follower_fetch, f12.FetchRequest)
            response = await send(target.clients[leader], follower_fetch)
            errors.append(response.responses[0].partitions[0].error_code)
        got["follower Fetch from a client"] = errors[0] if len(set(errors)) == 1 else errors

        # End another producer's transaction as if a transaction coordinator (WriteTxnMarkers).
        got["forge a transaction marker"] = await forge_marker(target.clients[leader])

        # Internal topics.
        got["produce to __consumer_offsets"] = await produce_to(target.clients[1], "__consumer_offsets")
        got["produce to __consumer_offsets as a super user"] = await produce_to(
            admin.addresses[0], "__consumer_offsets", target.admin_tls
        )
        got["create __cluster_metadata"] = await miner.create_topic("__cluster_metadata", 1, 1)
        got["delete __consumer_offsets"] = await delete_topic(miner, "__consumer_offsets")
    finally:
        await miner.close()
        await admin.close()
    return got


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


async def produce_to(address: tuple[str, int], topic: str, tls: ssl.SSLContext | None = None) -> ErrorCode:
    """One record straight to a broker (the check comes before any leadership check)."""
    batch = build_batch([(None, b"x", (), 1_700_000_000_000)])
    request = pr.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=_ms(15_000),
        topic_data=(
            pr.TopicProduceData(
                name=topic, partition_data=(pr.PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )
    response = await send(address, request, tls)
    return response.responses[0].partition_responses[0].error_code


async def forge_marker(address: tuple[str, int]) -> ErrorCode:
    """An abort marker for a made-up producer on the victim's partition 0, from its leader."""
    from kio.schema.write_txn_markers.v1 import request as wm

    marker = wm.WritableTxnMarker(
        producer_id=4242,
        producer_epoch=0,
        transaction_result=False,
        topics=(wm.WritableTxnMarkerTopic(name="victim", partition_indexes=(0,)),),
        coordinator_epoch=0,
    )
    response = await send(address, wm.WriteTxnMarkersRequest(markers=(marker,)))
    return response.markers[0].topics[0].partitions[0].error_code


async def offsets_topic(client: MiniClient) -> None:
    """Has __consumer_offsets created (FindCoordinator) and led."""
    for _ in range(100):
        request = request_for(10, 4, Scenario("fc", topic="t", group="g", overrides={"key_type": 0}))
        response = await client.any_send(request, FindCoordinatorResponse)
        if response.coordinators[0].error_code == ErrorCode.none:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("no coordinator for group g")


async def delete_topic(client: MiniClient, name: str) -> ErrorCode:
    from kio.schema.delete_topics.v6 import request as dt
    from kio.schema.delete_topics.v6.response import DeleteTopicsResponse

    request = dt.DeleteTopicsRequest(
        topics=(dt.DeleteTopicState(name=name, topic_id=None),), timeout=_ms(15_000)
    )
    response = await client.any_send(request, DeleteTopicsResponse)
    return response.responses[0].error_code


async def broker_epoch(target: Target, broker_id: int) -> int:
    """What an attacker learns from the metadata log: broker ``broker_id``'s epoch (here read from the
    broker's own log line, so the secured case tries the same value)."""
    proc = target.procs[broker_id]
    found = re.findall(r"broker_epoch=(\d+)", proc.log_text())
    return int(found[-1]) if found else -1


OPEN = {
    "register a rogue broker": ErrorCode.none,
    "read the metadata log": ErrorCode.none,
    "hijack a live broker's id": ErrorCode.none,
    "heartbeat as another broker": ErrorCode.none,
    "unregister a broker": ErrorCode.none,
    "follower Fetch from a client": ErrorCode.none,
    "alter topic configs on the controller": ErrorCode.none,
    "forge a transaction marker": ErrorCode.none,  # as in Kafka without an authorizer
}
REFUSED = {
    "register a rogue broker": ErrorCode.cluster_authorization_failed,
    "read the metadata log": ErrorCode.cluster_authorization_failed,
    "hijack a live broker's id": ErrorCode.cluster_authorization_failed,
    "heartbeat as another broker": ErrorCode.cluster_authorization_failed,
    "unregister a broker": ErrorCode.cluster_authorization_failed,
    "forge AlterPartition": ErrorCode.cluster_authorization_failed,
    "follower Fetch from a client": ErrorCode.topic_authorization_failed,
    "alter topic configs on the controller": ErrorCode.topic_authorization_failed,
    "add partitions on the controller": ErrorCode.topic_authorization_failed,
    "forge a transaction marker": ErrorCode.cluster_authorization_failed,
    "produce to __consumer_offsets": ErrorCode.topic_authorization_failed,
    "produce to __consumer_offsets as a super user": ErrorCode.invalid_topic_exception,
    "create __cluster_metadata": ErrorCode.invalid_request,
    "delete __consumer_offsets": ErrorCode.topic_authorization_failed,
}


def test_attacks_work_on_a_default_cluster(tmp_path):
    target = start_cluster(tmp_path, secure=False)
    try:
        got = asyncio.run(attacks(target))
    finally:
        target.stop()
    print(got)
    assert {k: got[k] for k in OPEN} == OPEN, got
    # Kafka's rules that hold without an authorizer too
    assert got["produce to __consumer_offsets"] == ErrorCode.invalid_topic_exception
    assert got["create __cluster_metadata"] == ErrorCode.invalid_request
    assert got["delete __consumer_offsets"] == ErrorCode.none  # no authorizer: anyone may, as in Kafka


def test_attacks_are_refused_on_a_secured_cluster(tmp_path):
    target = start_cluster(tmp_path, secure=True)
    try:
        got = asyncio.run(attacks(target))
        # the cluster still replicates over TLS: an acks=all produce by the super user
        ok = asyncio.run(produce_one(target))
    finally:
        target.stop()
    assert got == REFUSED, got
    assert ok == ErrorCode.none


async def produce_one(target: Target) -> ErrorCode:
    client = target.admin()
    try:
        return (await client.produce("victim", 0, [b"after"]))[0]
    finally:
        await client.close()
