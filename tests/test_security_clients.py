"""Real clients on a secured cluster: confluent-kafka, aiokafka and kafka-python authenticate with
SCRAM-SHA-512 over TLS (SASL_SSL) and with PLAIN (SASL_PLAINTEXT); a wrong password is answered
SASL_AUTHENTICATION_FAILED on a connection that stays open; a user without READ gets
TOPIC_AUTHORIZATION_FAILED; ACLs created through the brokers survive a controller restart (replayed from
the metadata log). Brokers and the controller authenticate each other with TLS client certificates; the
SCRAM users are bootstrapped with ``--add-scram`` as ``kafka-storage format --add-scram``."""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.api_versions.v3 import request as av
from kio.schema.describe_acls.v3 import request as da
from kio.schema.sasl_authenticate.v2 import request as sa
from kio.schema.sasl_handshake.v1 import request as sh

from epochkraft.harness.processes import LocalProcess
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode
from epochkraft.security.certs import LocalCA
from epochkraft.security.scram import ScramClient
from tests.conftest import write_fast_configs
from tests.test_listeners import advertised

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(300)]
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TOPIC = "secured"


@dataclass
class SecuredCluster:
    tmp: Path
    controller: LocalProcess
    brokers: list[LocalProcess]
    ca: Path
    admin_tls: ssl.SSLContext  # the admin's client certificate, for the controller listener

    def bootstrap(self, listener: str) -> str:
        return ",".join("{}:{}".format(*advertised(b)[listener]) for b in self.brokers)

    def stop(self) -> None:
        for proc in [*self.brokers, self.controller]:
            proc.stop()


def start(tmp: Path) -> SecuredCluster:
    ca = LocalCA.create()
    trust = ca.write_truststore(tmp / "ca.pem")
    principals = [ca.issue("controller", tmp / "controller.pem"), ca.issue("admin", tmp / "admin.pem")]
    principals += [ca.issue(f"broker-{n}", tmp / f"broker-{n}.pem") for n in (1, 2, 3)]
    super_users = ";".join(f"User:{p}" for p in principals) + ";User:admin"
    jaas = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    common = (
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        f"super.users={super_users}\n"
        f"ssl.truststore.location={trust}\n"
        "ssl.client.auth=requested\n"
        "controller.listener.names=CONTROLLER\n"
    )
    broker_extra = common + (
        "offsets.topic.replication.factor=3\n"
        "listeners=INTERNAL://127.0.0.1:0,SCRAMTLS://127.0.0.1:0,SASLPLAIN://127.0.0.1:0\n"
        "listener.security.protocol.map=INTERNAL:SSL,SCRAMTLS:SASL_SSL,SASLPLAIN:SASL_PLAINTEXT,CONTROLLER:SSL\n"
        "inter.broker.listener.name=INTERNAL\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required {jaas};\n"
    )
    controller_extra = common + (
        f"listener.security.protocol.map=CONTROLLER:SSL\nssl.keystore.location={tmp / 'controller.pem'}\n"
    )
    broker_cfg, controller_cfg = write_fast_configs(tmp / "config", broker_extra, controller_extra)
    scram = [f"SCRAM-SHA-512=[name={u},password={p}]" for u, p in USERS.items()]
    scram.append(f"SCRAM-SHA-256=[name=alice,password={USERS['alice']}]")
    args = ["controller", "--listen", "127.0.0.1:0", "--cluster-id", f"sec-{uuid.uuid4().hex[:8]}"]
    args += ["--data-dir", str(tmp / "controller"), "--config", str(controller_cfg)]
    for item in scram:
        args += ["--add-scram", item]
    controller = LocalProcess("controller", args, tmp / "logs" / "controller.log", tmp / "controller")
    controller.start(60)
    brokers = []
    for n in (1, 2, 3):
        args = ["broker", "--node-id", str(n), "--controller", f"127.0.0.1:{controller.port}"]
        args += ["--data-dir", str(tmp / f"broker-{n}"), "--config", str(broker_cfg)]
        args += ["--override", f"ssl.keystore.location={tmp / f'broker-{n}.pem'}"]
        brokers.append(
            LocalProcess(f"broker-{n}", args, tmp / "logs" / f"broker-{n}.log", tmp / f"broker-{n}")
        )
    for proc in brokers:
        proc.launch()
    try:
        for proc in brokers:
            proc.wait_ready(60)
    except BaseException:
        for proc in [*brokers, controller]:
            proc.stop()
        raise
    admin_tls = ssl.create_default_context(cafile=str(trust))
    admin_tls.load_cert_chain(str(tmp / "admin.pem"))
    return SecuredCluster(tmp, controller, brokers, trust, admin_tls)


def scram_tls(cluster: SecuredCluster, user: str, password: str | None = None) -> dict[str, str]:
    """librdkafka settings for SCRAM-SHA-512 over TLS."""
    return {
        "bootstrap.servers": cluster.bootstrap("SCRAMTLS"),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password or USERS[user],
        "ssl.ca.location": str(cluster.ca),
    }


def plain(cluster: SecuredCluster, user: str) -> dict[str, str]:
    return {
        "bootstrap.servers": cluster.bootstrap("SASLPLAIN"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    secured = start(tmp_path_factory.mktemp("secured"))
    try:
        admin = AdminClient(scram_tls(secured, "admin"))
        admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=3)])[TOPIC].result(30)
        bindings = [
            AclBinding(
                ResourceType.TOPIC,
                TOPIC,
                ResourcePatternType.LITERAL,
                "User:alice",
                "*",
                op,
                AclPermissionType.ALLOW,
            )
            for op in (AclOperation.READ, AclOperation.WRITE)
        ]
        bindings.append(  # bob may use his group, not read the topic
            AclBinding(
                ResourceType.GROUP,
                "g-bob",
                ResourcePatternType.LITERAL,
                "User:bob",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            )
        )
        bindings.append(
            AclBinding(
                ResourceType.GROUP,
                "g-",
                ResourcePatternType.PREFIXED,
                "User:alice",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            )
        )
        for future in admin.create_acls(bindings).values():
            future.result(30)
        wait_for_acls(secured, 4)
        yield secured
    finally:
        secured.stop()


def wait_for_acls(cluster: SecuredCluster, count: int) -> None:
    """Until every broker's metadata holds ``count`` ACLs (they follow the controller's log)."""

    async def each():
        for broker in cluster.brokers:
            for _ in range(300):
                response = await describe_acls(("127.0.0.1", broker.port), cluster.admin_tls)
                if sum(len(r.acls) for r in response.resources) == count:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"{broker.name} never saw {count} ACLs")

    asyncio.run(each())


async def describe_acls(address: tuple[str, int], tls: ssl.SSLContext):
    client = KafkaClient(*address, ssl_context=tls, request_timeout_ms=15_000)
    try:
        request = da.DescribeAclsRequest(
            resource_type_filter=1,
            resource_name_filter=None,
            pattern_type_filter=1,
            principal_filter=None,
            host_filter=None,
            operation=1,
            permission_type=1,
        )
        return await client.send(request)
    finally:
        await client.close()


def confluent_round_trip(conf: dict[str, str], group: str, count: int = 20) -> int:
    from confluent_kafka import Consumer, KafkaError, Producer

    producer = Producer({**conf, "linger.ms": 5, "acks": "all"})
    errors: list[str] = []
    marker = uuid.uuid4().hex[:6].encode()
    for i in range(count):
        producer.produce(
            TOPIC, value=marker + b"-%d" % i, on_delivery=lambda e, m: e and errors.append(str(e))
        )
    assert producer.flush(30) == 0 and not errors, errors[:3]
    consumer = Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 40
    while seen < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
        if msg.error() is None and msg.value().startswith(marker):
            seen += 1
    consumer.close()
    return seen


def test_confluent_scram_sha512_over_tls(cluster):
    assert confluent_round_trip(scram_tls(cluster, "alice"), "g-confluent-scram") == 20


def test_confluent_plain(cluster):
    assert confluent_round_trip(plain(cluster, "alice"), "g-confluent-plain") == 20


def _aiokafka(cluster: SecuredCluster, mechanism: str) -> int:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    if mechanism == "PLAIN":
        conf = {"bootstrap_servers": cluster.bootstrap("SASLPLAIN"), "security_protocol": "SASL_PLAINTEXT"}
    else:
        context = ssl.create_default_context(cafile=str(cluster.ca))
        conf = {
            "bootstrap_servers": cluster.bootstrap("SCRAMTLS"),
            "security_protocol": "SASL_SSL",
            "ssl_context": context,
        }
    conf |= {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }
    marker = uuid.uuid4().hex[:6].encode()

    async def run() -> int:
        producer = AIOKafkaProducer(acks="all", **conf)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(TOPIC, marker + b"-%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            TOPIC, group_id=f"g-aio-{mechanism}", auto_offset_reset="earliest", **conf
        )
        await consumer.start()
        seen = 0
        try:
            async with asyncio.timeout(40):
                async for msg in consumer:
                    seen += msg.value.startswith(marker)
                    if seen == 20:
                        break
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(run())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_aiokafka_authenticates(cluster, mechanism):
    assert _aiokafka(cluster, mechanism) == 20


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_authenticates(cluster, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    if mechanism == "PLAIN":
        conf = {"bootstrap_servers": cluster.bootstrap("SASLPLAIN"), "security_protocol": "SASL_PLAINTEXT"}
    else:
        conf = {
            "bootstrap_servers": cluster.bootstrap("SCRAMTLS"),
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(cluster.ca),
        }
    conf |= {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }
    marker = uuid.uuid4().hex[:6].encode()
    producer = KafkaProducer(acks="all", **conf)
    for i in range(20):
        producer.send(TOPIC, marker + b"-%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        TOPIC, group_id=f"g-kp-{mechanism}", auto_offset_reset="earliest", consumer_timeout_ms=20000, **conf
    )
    seen = 0
    for msg in consumer:
        seen += msg.value.startswith(marker)
        if seen == 20:
            break
    consumer.close()
    assert seen == 20


async def scram_client(address: tuple[str, int], tls: ssl.SSLContext, user: str) -> KafkaClient:
    """A raw client authenticated as ``user`` with SCRAM-SHA-512."""
    client = KafkaClient(*address, ssl_context=tls, request_timeout_ms=15_000)
    assert (
        await client.send(sh.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    ).error_code == ErrorCode.none
    scram = ScramClient("SCRAM-SHA-512", user, USERS[user])
    first = await client.send(sa.SaslAuthenticateRequest(auth_bytes=scram.first()))
    final = await client.send(sa.SaslAuthenticateRequest(auth_bytes=scram.final(first.auth_bytes)))
    assert final.error_code == ErrorCode.none and scram.verify(final.auth_bytes)
    return client


BOB_REFUSED = [
    (44, 1, "alter the topic's configs", ErrorCode.topic_authorization_failed),
    (21, 2, "delete the topic's records", ErrorCode.topic_authorization_failed),
    (37, 3, "add partitions", ErrorCode.topic_authorization_failed),
    (2, 7, "list offsets", ErrorCode.topic_authorization_failed),
    (11, 9, "join another group", ErrorCode.group_authorization_failed),
    (42, 2, "delete another group", ErrorCode.group_authorization_failed),
    (35, 4, "describe log dirs", ErrorCode.cluster_authorization_failed),
    (30, 3, "create ACLs", ErrorCode.cluster_authorization_failed),
    (51, 0, "alter SCRAM credentials", ErrorCode.cluster_authorization_failed),
    (19, 7, "create a topic", ErrorCode.topic_authorization_failed),
]


def test_an_authenticated_user_without_acls_is_refused_what_kafka_refuses(cluster):
    from tests.support.kio_requests import Scenario, request_for
    from tests.test_wire_versions import error_codes

    host, port = advertised(cluster.brokers[0])["SCRAMTLS"]
    tls = ssl.create_default_context(cafile=str(cluster.ca))
    scenario = Scenario("bob", topic=TOPIC, group="someone-elses", overrides={"validate_only": False})

    async def run():
        client = await scram_client((host, port), tls, "bob")
        got = {}
        try:
            for key, version, what, _ in BOB_REFUSED:
                response = await client.send(request_for(key, version, scenario))
                got[what] = set(error_codes(response))
        finally:
            await client.close()
        return got

    got = asyncio.run(run())
    assert got == {what: {error} for _, _, what, error in BOB_REFUSED}


async def sasl_exchange(address: tuple[str, int], tls: ssl.SSLContext, user: str, password: str):
    """SaslHandshake + SCRAM-SHA-512 SaslAuthenticate by hand; then ApiVersions on the same connection."""
    client = KafkaClient(*address, ssl_context=tls, request_timeout_ms=15_000)
    try:
        handshake = await client.send(sh.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert handshake.error_code == ErrorCode.none
        assert "SCRAM-SHA-512" in handshake.mechanisms
        scram = ScramClient("SCRAM-SHA-512", user, password)
        first = await client.send(sa.SaslAuthenticateRequest(auth_bytes=scram.first()))
        if first.error_code != ErrorCode.none:
            return first, None
        final = await client.send(sa.SaslAuthenticateRequest(auth_bytes=scram.final(first.auth_bytes)))
        versions = await client.send(
            av.ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        return final, versions
    finally:
        await client.close()


def test_wrong_password_gets_sasl_authentication_failed(cluster):
    host, port = advertised(cluster.brokers[0])["SCRAMTLS"]
    tls = ssl.create_default_context(cafile=str(cluster.ca))
    final, versions = asyncio.run(sasl_exchange((host, port), tls, "alice", "not-the-password"))
    assert final.error_code == ErrorCode.sasl_authentication_failed
    assert final.error_message == "Authentication failed: Invalid username or password"
    assert versions is not None and versions.error_code == ErrorCode.none  # answered, not hung up on
    final, _ = asyncio.run(sasl_exchange((host, port), tls, "alice", USERS["alice"]))
    assert final.error_code == ErrorCode.none


def test_confluent_wrong_password_is_an_authentication_error(cluster):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(scram_tls(cluster, "alice", "not-the-password"))
    with pytest.raises(KafkaException) as failure:
        admin.list_topics(timeout=10)
    # librdkafka reports the broker's SASL_AUTHENTICATION_FAILED as an authentication error, or, when the
    # metadata request times out first on a loaded machine, as no broker being reachable
    assert failure.value.args[0].code() in (
        KafkaError._AUTHENTICATION,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    )


def test_user_without_read_gets_topic_authorization_failed(cluster):
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer({**scram_tls(cluster, "bob"), "group.id": "g-bob", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    error = None
    deadline = time.monotonic() + 30
    while error is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is not None and msg.error().code() != KafkaError._PARTITION_EOF:
            error = msg.error().code()
    consumer.close()
    assert error == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_acls_survive_a_controller_restart(cluster):
    before = asyncio.run(describe_acls(("127.0.0.1", cluster.controller.port), cluster.admin_tls))
    cluster.controller.restart(clean=True, timeout=60)
    after = asyncio.run(describe_acls(("127.0.0.1", cluster.controller.port), cluster.admin_tls))
    assert after.error_code == ErrorCode.none
    assert sum(len(r.acls) for r in after.resources) == 4
    assert after.resources == before.resources
    # and alice still reads and writes once the brokers are back in touch
    assert confluent_round_trip(scram_tls(cluster, "alice"), "g-after-restart", count=5) == 5


def test_admin_creates_a_scram_user_who_then_logs_in(cluster):
    """AlterUserScramCredentials and DescribeUserScramCredentials through confluent-kafka's AdminClient,
    then the new user authenticates (the brokers learn the credential from the metadata log)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(scram_tls(cluster, "admin"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upsert = UserScramCredentialUpsertion("carol", info, b"carol-secret", b"carol-salt-0123456789")
    admin.alter_user_scram_credentials([upsert])["carol"].result(30)
    futures = admin.describe_user_scram_credentials(["carol"])
    described = futures["carol"].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]
    host, port = advertised(cluster.brokers[1])["SCRAMTLS"]
    tls = ssl.create_default_context(cafile=str(cluster.ca))
    for _ in range(300):  # the broker follows the controller's log (slower on a loaded machine)
        final, _versions = asyncio.run(sasl_exchange((host, port), tls, "carol", "carol-secret"))
        if final.error_code == ErrorCode.none:
            break
        time.sleep(0.1)
    assert final.error_code == ErrorCode.none
    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([deletion])["carol"].result(30)
    with pytest.raises(KafkaException):
        admin.alter_user_scram_credentials([deletion])["carol"].result(30)  # RESOURCE_NOT_FOUND


def test_authorized_operations_are_what_the_acls_allow(cluster):
    """describe_topics / describe_cluster with include_authorized_operations: alice's ACLs allow READ and
    WRITE on the topic, which imply DESCRIBE, and nothing on the cluster (0: no DESCRIBE there); a super
    user may do everything (AuthHelper.authorizedOperations over AclEntry.supportedOperations)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    def operations(user: str) -> tuple[set, set]:
        admin = AdminClient(scram_tls(cluster, user))
        topics = TopicCollection([TOPIC])
        topic = admin.describe_topics(topics, include_authorized_operations=True)[TOPIC].result(30)
        described = admin.describe_cluster(include_authorized_operations=True).result(30)
        return set(topic.authorized_operations), set(described.authorized_operations or ())

    topic_ops, cluster_ops = operations("alice")
    assert topic_ops == {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}
    assert cluster_ops == set()
    topic_ops, cluster_ops = operations("admin")
    assert topic_ops == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }
    assert AclOperation.CLUSTER_ACTION in cluster_ops and len(cluster_ops) == 7
