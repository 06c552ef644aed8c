"""The StandardAuthorizer's decisions, table by table, as Kafka's StandardAuthorizerTest: super users,
literal, wildcard and prefixed patterns, DENY over ALLOW, the operations ALLOW implies, and
allow.everyone.if.no.acl.found; and principals from certificates (DefaultKafkaPrincipalBuilder)."""

from __future__ import annotations

import uuid

import pytest

from epochkraft.security.authorizer import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
)
from epochkraft.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    parse_super_users,
    principal_from_peer_certificate,
)

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
TOPIC = ResourceType.TOPIC
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def acl(name, op, permission=ALLOW, principal="User:alice", pattern=LITERAL, host="*", rtype=TOPIC):
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def authorizer(*acls, allow_everyone=False, super_users=""):
    result = StandardAuthorizer(parse_super_users(super_users), allow_everyone)
    for binding in acls:
        result.add(uuid.uuid4(), binding)
    return result


@pytest.mark.parametrize(
    ("acls", "principal", "op", "name", "allowed"),
    [
        ([acl("foo", AclOperation.READ)], ALICE, AclOperation.READ, "foo", True),
        ([acl("foo", AclOperation.READ)], BOB, AclOperation.READ, "foo", False),
        ([acl("foo", AclOperation.READ)], ALICE, AclOperation.WRITE, "foo", False),
        ([acl("foo", AclOperation.READ)], ALICE, AclOperation.READ, "foobar", False),
        ([acl("*", AclOperation.READ)], ALICE, AclOperation.READ, "anything", True),
        ([acl("foo", AclOperation.READ, pattern=PREFIXED)], ALICE, AclOperation.READ, "foobar", True),
        ([acl("foo", AclOperation.READ, pattern=PREFIXED)], ALICE, AclOperation.READ, "fo", False),
        ([acl("foo", AclOperation.READ, principal="User:*")], BOB, AclOperation.READ, "foo", True),
        ([acl("foo", AclOperation.ALL)], ALICE, AclOperation.DELETE, "foo", True),
        # READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS (ALLOW only)
        ([acl("foo", AclOperation.WRITE)], ALICE, AclOperation.DESCRIBE, "foo", True),
        ([acl("foo", AclOperation.ALTER_CONFIGS)], ALICE, AclOperation.DESCRIBE_CONFIGS, "foo", True),
        ([acl("foo", AclOperation.CREATE)], ALICE, AclOperation.DESCRIBE, "foo", False),
        (
            [acl("foo", AclOperation.ALL), acl("foo", AclOperation.READ, DENY)],
            ALICE,
            AclOperation.DESCRIBE,
            "foo",
            True,  # a DENY of READ does not deny DESCRIBE
        ),
        # DENY wins over ALLOW, whichever pattern carries it
        (
            [acl("foo", AclOperation.READ), acl("f", AclOperation.READ, DENY, pattern=PREFIXED)],
            ALICE,
            AclOperation.READ,
            "foo",
            False,
        ),
        ([acl("foo", AclOperation.READ, host="10.0.0.1")], ALICE, AclOperation.READ, "foo", False),
        ([acl("foo", AclOperation.READ, host="127.0.0.1")], ALICE, AclOperation.READ, "foo", True),
    ],
)
def test_testAuthorizationWithManyAcls(acls, principal, op, name, allowed):
    assert authorizer(*acls).authorize(principal, "127.0.0.1", op, TOPIC, name) is allowed


def test_testAllowEveryoneIfNoAclFound():
    # no ACL at all on the resource: the setting decides; once it has one, what is not allowed is denied
    assert authorizer(allow_everyone=True).authorize(BOB, "h", AclOperation.READ, TOPIC, "foo")
    assert not authorizer().authorize(BOB, "h", AclOperation.READ, TOPIC, "foo")
    with_acl = authorizer(acl("foo", AclOperation.READ), allow_everyone=True)
    assert not with_acl.authorize(BOB, "h", AclOperation.READ, TOPIC, "foo")
    assert with_acl.authorize(BOB, "h", AclOperation.READ, TOPIC, "other")


def test_testSuperUserHasAccess():
    denied = authorizer(
        acl("foo", AclOperation.ALL, DENY, principal="User:*"), super_users="User:admin;User:CN=b,O=x"
    )
    assert denied.authorize(KafkaPrincipal("User", "admin"), "h", AclOperation.READ, TOPIC, "foo")
    assert denied.authorize(
        KafkaPrincipal("User", "CN=b,O=x"), "h", AclOperation.CLUSTER_ACTION, TOPIC, "foo"
    )
    assert not denied.authorize(ALICE, "h", AclOperation.READ, TOPIC, "foo")


def test_acl_filters_match_as_kafka_binding_filters():
    binding = acl("foo", AclOperation.READ, pattern=PREFIXED)
    assert AclFilter().matches(binding)
    assert AclFilter(resource_type=TOPIC, resource_name="foo", pattern_type=PREFIXED).matches(binding)
    assert not AclFilter(resource_type=TOPIC, resource_name="foo", pattern_type=LITERAL).matches(binding)
    assert AclFilter(resource_name="foobar", pattern_type=PatternType.MATCH).matches(binding)
    assert not AclFilter(principal="User:bob").matches(binding)


def test_ssl_principal_is_the_certificate_dn_in_rfc2253_order():
    cert = {"subject": ((("organizationName", "epochkraft"),), (("commonName", "broker-1"),))}
    assert str(principal_from_peer_certificate(cert)) == "User:CN=broker-1,O=epochkraft"
    assert principal_from_peer_certificate({}) == ANONYMOUS
    assert principal_from_peer_certificate(None) == ANONYMOUS


def test_a_certificate_subject_not_in_ssls_shape_is_refused():
    with pytest.raises(TypeError, match="subject of str"):
        principal_from_peer_certificate({"subject": "CN=broker-1,O=epochkraft"})


def test_authorize_by_resource_type_as_idempotent_producers_need_it():
    # WRITE on some topic lets a principal get a producer id (KafkaApis.handleInitProducerIdRequest)
    writer = authorizer(acl("orders", AclOperation.WRITE))
    assert writer.authorize_by_resource_type(ALICE, "h", AclOperation.WRITE, TOPIC)
    assert not writer.authorize_by_resource_type(BOB, "h", AclOperation.WRITE, TOPIC)
    denied = authorizer(acl("orders", AclOperation.WRITE), acl("orders", AclOperation.WRITE, DENY))
    assert not denied.authorize_by_resource_type(ALICE, "h", AclOperation.WRITE, TOPIC)
    assert authorizer(allow_everyone=True).authorize_by_resource_type(BOB, "h", AclOperation.WRITE, TOPIC)


def _txn_context(*acls):
    from epochkraft.protocol.framing import RequestHeader
    from epochkraft.server.context import RequestContext

    header = RequestHeader(22, 4, 1, "producer", 0)
    return RequestContext(
        "broker", header, 4, None, ("127.0.0.1", 1), None, principal=ALICE, authorizer=authorizer(*acls)
    )


def test_transactional_apis_need_write_on_the_transactional_id():
    """KafkaApis: InitProducerId, EndTxn and the other transactional APIs need WRITE on the
    TRANSACTIONAL_ID (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), FindCoordinator key type 1 DESCRIBE;
    AddPartitionsToTxn also WRITE on its topics."""
    from kio.schema.add_partitions_to_txn.v3 import request as ap3
    from kio.schema.end_txn.v4.request import EndTxnRequest
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    from epochkraft.protocol.errors import ErrorCode
    from epochkraft.server.request_rules import refusal

    txn = ResourceType.TRANSACTIONAL_ID
    init = InitProducerIdRequest(transactional_id="t1", transaction_timeout=60_000)
    end = EndTxnRequest(transactional_id="t1", producer_id=1, producer_epoch=0, committed=True)
    find = FindCoordinatorRequest(key_type=1, coordinator_keys=("t1",))
    add = ap3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="t1",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=(ap3.AddPartitionsToTxnTopic(name="foo", partitions=(0,)),),
    )
    denied = ErrorCode.transactional_id_authorization_failed
    nobody = _txn_context()
    assert [refusal(k, r, nobody) for k, r in ((22, init), (26, end), (10, find), (24, add))] == [denied] * 4
    writer = _txn_context(acl("t1", AclOperation.WRITE, rtype=txn))
    assert [refusal(k, r, writer) for k, r in ((22, init), (26, end), (10, find))] == [None] * 3
    assert refusal(24, add, writer) == ErrorCode.topic_authorization_failed
    assert (
        refusal(
            24, add, _txn_context(acl("t1", AclOperation.WRITE, rtype=txn), acl("foo", AclOperation.WRITE))
        )
        is None
    )


def test_group_configs_need_the_groups_own_acls():
    """ConfigHelper / ControllerApis.authorizeAlterResource: DescribeConfigs and (Incremental)AlterConfigs of a
    GROUP resource need DESCRIBE_CONFIGS / ALTER_CONFIGS on that group (GROUP_AUTHORIZATION_FAILED), not on
    the cluster: a principal with the group's ACL may, one with only the cluster's may not."""
    from kio.schema.describe_configs.v4 import request as dc
    from kio.schema.incremental_alter_configs.v1 import request as ia

    from epochkraft.protocol.errors import ErrorCode
    from epochkraft.security.authorizer import PatternType
    from epochkraft.server.request_rules import refusal

    group = ResourceType.GROUP
    alter = ia.IncrementalAlterConfigsRequest(
        resources=(
            ia.AlterConfigsResource(
                resource_type=32,
                resource_name="app-1",
                configs=(
                    ia.AlterableConfig(name="consumer.session.timeout.ms", config_operation=0, value="50000"),
                ),
            ),
        ),
        validate_only=False,
    )
    describe = dc.DescribeConfigsRequest(
        resources=(
            dc.DescribeConfigsResource(resource_type=32, resource_name="app-1", configuration_keys=None),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    owner = _txn_context(
        acl("app-", AclOperation.ALTER_CONFIGS, pattern=PatternType.PREFIXED, rtype=group),
        acl("app-", AclOperation.DESCRIBE_CONFIGS, pattern=PatternType.PREFIXED, rtype=group),
    )
    assert refusal(44, alter, owner) is None and refusal(32, describe, owner) is None
    cluster_only = _txn_context(
        acl("kafka-cluster", AclOperation.ALTER_CONFIGS, rtype=ResourceType.CLUSTER),
        acl("kafka-cluster", AclOperation.DESCRIBE_CONFIGS, rtype=ResourceType.CLUSTER),
    )
    assert refusal(44, alter, cluster_only) == ErrorCode.group_authorization_failed
    assert refusal(32, describe, cluster_only) == ErrorCode.group_authorization_failed


def test_update_features_and_describe_quorum_need_their_cluster_operations_on_both_listeners():
    """ControllerApis.handleUpdateFeatures authorizes ALTER on the cluster and handleDescribeQuorum DESCRIBE,
    for the client's principal a broker forwards; ours refuses at the broker too (its DescribeQuorum reaches
    the controller as the broker's own request), and the controller checks UpdateFeatures' forwarded
    principal."""
    from epochkraft.protocol.errors import ErrorCode
    from epochkraft.server.request_rules import listener_refusal

    nobody = _txn_context()
    for listener in ("broker", "controller"):
        assert listener_refusal(listener, 57, None, nobody) == ErrorCode.cluster_authorization_failed
        assert listener_refusal(listener, 55, None, nobody) == ErrorCode.cluster_authorization_failed
    admin = _txn_context(acl("kafka-cluster", AclOperation.ALTER, rtype=ResourceType.CLUSTER))
    assert listener_refusal("controller", 57, None, admin) is None
