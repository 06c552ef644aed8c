"""AlterClientQuotas in the controller and DescribeClientQuotas over the image, as Kafka's
ClientQuotaControlManagerTest and ClientQuotasRequestTest (their describe and invalid-request cases)."""

from __future__ import annotations

import pytest

from epochkraft.controller.client_quota_control import (
    IP_KEYS,
    USER_AND_CLIENT_KEYS,
    alter_client_quotas,
    config_keys_for_entity,
    is_valid_ip_entity,
    validate_quota_value,
)
from epochkraft.metadata.client_quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    DescribeError,
    describe,
)
from epochkraft.protocol.errors import ErrorCode
from tests.controller_context import ControllerContext

OK = ErrorCode.none
INVALID = ErrorCode.invalid_request
ALICE = (("user", "alice"),)
ALICE_APP = (("client-id", "app"), ("user", "alice"))


def errors(results):
    return {entity: error for entity, (error, _) in results.items()}


def test_invalid_entity_types():
    """ClientQuotaControlManagerTest.testInvalidEntityTypes: unknown types, empty names, an empty entity."""
    ctx = ControllerContext()
    results = ctx.alter_client_quotas(
        {
            (("user", ""),): {"producer_byte_rate": 10.0},
            (("group", "g"),): {"producer_byte_rate": 10.0},
            (("client-id", ""),): {"producer_byte_rate": 10.0},
            (): {"producer_byte_rate": 10.0},
        }
    )
    assert set(errors(results).values()) == {INVALID}
    messages = {message for _, message in results.values()}
    assert "Unhandled client quota entity type: group" in messages
    assert "Empty user not supported" in messages
    assert "Invalid empty client quota entity" in messages
    assert ctx.controller.image.client_quotas == {}


def test_invalid_quota_keys():
    """ClientQuotaControlManagerTest.testInvalidQuotaKeys: a key of another entity kind, or unknown."""
    ctx = ControllerContext()
    results = ctx.alter_client_quotas(
        {ALICE: {"connection_creation_rate": 10.0}, (("ip", "10.0.0.1"),): {"producer_byte_rate": 10.0}}
    )
    assert errors(results) == {ALICE: INVALID, (("ip", "10.0.0.1"),): INVALID}
    assert results[ALICE][1] == "Invalid configuration key connection_creation_rate"


def test_alter_and_remove():
    """ClientQuotaControlManagerTest.testAlterAndRemove: set, change, remove; a value that does not change
    and a removal of what is not set write nothing."""
    ctx = ControllerContext()
    log = ctx.controller.log
    start = log.next_offset
    assert errors(
        ctx.alter_client_quotas({ALICE: {"producer_byte_rate": 1000.0, "request_percentage": 50.0}})
    ) == {ALICE: OK}
    assert log.next_offset == start + 2
    assert ctx.controller.image.client_quotas == {
        ALICE: {"producer_byte_rate": 1000.0, "request_percentage": 50.0}
    }
    ctx.alter_client_quotas({ALICE: {"producer_byte_rate": 1000.0, "consumer_byte_rate": None}})
    assert log.next_offset == start + 2, "no change, no record"
    ctx.alter_client_quotas({ALICE: {"producer_byte_rate": None, "request_percentage": 75.0}})
    assert ctx.controller.image.client_quotas == {ALICE: {"request_percentage": 75.0}}
    ctx.alter_client_quotas({ALICE: {"request_percentage": None}})
    assert ctx.controller.image.client_quotas == {}, "an entity without quotas is gone"


def test_alter_client_quotas_request_validate_only():
    """ClientQuotasRequestTest.testAlterClientQuotasRequestValidateOnly: checked, nothing written."""
    ctx = ControllerContext()
    start = ctx.controller.log.next_offset
    results = ctx.alter_client_quotas({ALICE_APP: {"producer_byte_rate": 1000.0}}, validate_only=True)
    assert errors(results) == {ALICE_APP: OK}
    assert ctx.controller.log.next_offset == start and ctx.controller.image.client_quotas == {}
    results = ctx.alter_client_quotas({ALICE_APP: {"producer_byte_rate": -1.0}}, validate_only=True)
    assert errors(results) == {ALICE_APP: INVALID}


def test_alter_client_quotas_invalid_entity_combination():
    """ClientQuotasRequestTest.testAlterClientQuotasInvalidEntityCombination: ip with user or client-id."""
    ctx = ControllerContext()
    entity = (("ip", "1.2.3.4"), ("user", "alice"))
    assert errors(ctx.alter_client_quotas({entity: {"connection_creation_rate": 1.0}})) == {entity: INVALID}


def test_alter_client_quotas_bad_ip():
    """ClientQuotasRequestTest.testAlterClientQuotasBadIp (we resolve no host names: literal addresses)."""
    ctx = ControllerContext()
    bad = (("ip", "not-an-ip"),)
    default_ip = (("ip", None),)
    results = ctx.alter_client_quotas(
        {bad: {"connection_creation_rate": 1.0}, default_ip: {"connection_creation_rate": 5.0}}
    )
    assert errors(results) == {bad: INVALID, default_ip: OK}


def test_duplicate_quota_key_refuses_the_entity():
    """A key named twice for an entity: nothing written for it, INVALID_REQUEST (alterClientQuotas)."""
    ops = [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]
    records, results = alter_client_quotas({}, [(ALICE, ops)])
    assert records == [] and results[ALICE][0] == INVALID


def test_is_valid_ip_entity_with_null():
    """ClientQuotaControlManagerTest.testIsValidIpEntityWithNull (and WithLocalhost, as an address)."""
    assert is_valid_ip_entity(None) and is_valid_ip_entity("127.0.0.1") and is_valid_ip_entity("::1")


def test_is_valid_ip_entity_with_unresolvable_hostname():
    """ClientQuotaControlManagerTest.testIsValidIpEntityWithUnresolvableHostname."""
    assert not is_valid_ip_entity("example.invalid")


def test_alter_ip_quotas_request():
    """ClientQuotasRequestTest.testAlterIpQuotasRequest: a specific address's and the default ip entity's
    connection_creation_rate are ClientQuotaRecords in the log, described back, and removed."""
    ctx = ControllerContext()
    ip, default_ip = (("ip", "1.2.3.4"),), (("ip", None),)
    rates = {ip: {"connection_creation_rate": 100.0}, default_ip: {"connection_creation_rate": 200.0}}
    assert errors(ctx.alter_client_quotas(rates)) == {ip: OK, default_ip: OK}
    assert ctx.controller.image.client_quotas == rates
    assert dict(describe(ctx.controller.image.client_quotas, [("ip", MATCH_SPECIFIED, None)], False)) == rates
    ctx.alter_client_quotas({ip: {"connection_creation_rate": None}})
    assert ctx.controller.image.client_quotas == {default_ip: {"connection_creation_rate": 200.0}}


@pytest.mark.parametrize(
    ("value", "ok"),
    [(5.0, True), (0.0, False), (-1.0, False), (2.5, False), (2.0**31, False), (2.0**31 - 1, True)],
)
def test_validate_ip_connection_creation_rate(value, ok):
    """connection_creation_rate is Kafka's INT ip quota: > 0, integral, at most Integer.MAX_VALUE."""
    assert (validate_quota_value(IP_KEYS, "connection_creation_rate", value)[0] == OK) == ok


@pytest.mark.parametrize(
    ("types", "keys"),
    [
        ({"user": "a"}, USER_AND_CLIENT_KEYS),  # testConfigKeysForEntityTypeWithUser
        ({"client-id": "a"}, USER_AND_CLIENT_KEYS),  # testConfigKeysForEntityTypeWithClientId
        ({"user": "a", "client-id": None}, USER_AND_CLIENT_KEYS),  # ...WithUserAndClientId
        ({"ip": "1.2.3.4"}, IP_KEYS),  # testConfigKeysForEntityTypeWithIp
    ],
)
def test_config_keys_for_entity_type(types, keys):
    error, got = config_keys_for_entity(types)
    assert error[0] == OK and got == keys


@pytest.mark.parametrize(
    "types", [{}, {"ip": "1.2.3.4", "user": "a"}, {"ip": "1.2.3.4", "client-id": "a"}, {"ip": "nowhere"}]
)
def test_config_keys_for_empty_entity_and_ip_with_user_or_client_id(types):
    """testConfigKeysForEmptyEntity, ...WithIpAndUser, ...WithIpAndClientId, ...ForUnresolvableIpEntity."""
    assert config_keys_for_entity(types)[0][0] == INVALID


@pytest.mark.parametrize(
    ("key", "value", "ok"),
    [
        ("unknown_quota", 1.0, False),  # testValidateQuotaKeyValueForUnknownQuota
        ("consumer_byte_rate", 0.0, False),  # ...ForZeroQuota
        ("consumer_byte_rate", -2.0, False),  # ...ForNegativeQuota
        ("consumer_byte_rate", 1234.0, True),  # ...ForValidConsumerByteRate
        ("consumer_byte_rate", 1e30, False),  # ...ForConsumerByteRateTooLarge
        ("consumer_byte_rate", 12.5, False),  # ...ForFractionalConsumerByteRate
        ("consumer_byte_rate", 1234.0000001, True),  # ...ForValidConsumerByteRate2
        ("request_percentage", 56.62, True),  # ...ForValidRequestPercentage
        ("controller_mutation_rate", 0.5, True),
    ],
)
def test_validate_quota_key_value(key, value, ok):
    assert (validate_quota_value(USER_AND_CLIENT_KEYS, key, value)[0] == OK) == ok


# ---- describe (ClientQuotasImage.describe) ------------------------------------------------------------
QUOTAS = {
    (("user", "alice"),): {"producer_byte_rate": 1.0},
    (("user", None),): {"producer_byte_rate": 2.0},
    (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 3.0},
    (("client-id", None), ("user", "alice")): {"consumer_byte_rate": 4.0},
    (("client-id", "app"),): {"request_percentage": 5.0},
    (("ip", "1.2.3.4"),): {"connection_creation_rate": 6.0},
}


def matched(components, strict=False):
    return {entity for entity, _ in describe(QUOTAS, components, strict)}


def test_describe_client_quotas_match_exact():
    """ClientQuotasRequestTest.testDescribeClientQuotasMatchExact."""
    assert matched([("user", MATCH_EXACT, "alice")], strict=True) == {(("user", "alice"),)}
    assert matched([("user", MATCH_EXACT, "alice"), ("client-id", MATCH_EXACT, "app")], strict=True) == {
        (("client-id", "app"), ("user", "alice"))
    }
    assert matched([("user", MATCH_EXACT, "bob")]) == set()


def test_describe_client_quotas_match_partial():
    """ClientQuotasRequestTest.testDescribeClientQuotasMatchPartial: without strict, entities with more
    types match too."""
    assert matched([("user", MATCH_EXACT, "alice")]) == {
        (("user", "alice"),),
        (("client-id", "app"), ("user", "alice")),
        (("client-id", None), ("user", "alice")),
    }
    assert matched([("client-id", MATCH_SPECIFIED, None)]) == {
        (("client-id", "app"), ("user", "alice")),
        (("client-id", None), ("user", "alice")),
        (("client-id", "app"),),
    }
    assert len(matched([])) == len(QUOTAS)
    assert matched([], strict=True) == set()


def test_client_quotas_with_default_name():
    """ClientQuotasRequestTest.testClientQuotasWithDefaultName: MATCH_DEFAULT finds the default entity."""
    assert matched([("user", MATCH_DEFAULT, None)], strict=True) == {(("user", None),)}
    assert matched([("user", MATCH_EXACT, "alice"), ("client-id", MATCH_DEFAULT, None)]) == {
        (("client-id", None), ("user", "alice"))
    }


@pytest.mark.parametrize(
    ("components", "unsupported"),
    [
        ([("", MATCH_EXACT, "x")], False),
        ([("user", MATCH_EXACT, "a"), ("user", MATCH_SPECIFIED, None)], False),
        ([("user", MATCH_EXACT, None)], False),
        ([("user", MATCH_DEFAULT, "a")], False),
        ([("user", MATCH_SPECIFIED, "a")], False),
        ([("user", 7, None)], False),
        ([("ip", MATCH_SPECIFIED, None), ("user", MATCH_SPECIFIED, None)], False),
        ([("group", MATCH_SPECIFIED, None)], True),
    ],
)
def test_describe_client_quotas_invalid_filter_combination(components, unsupported):
    """ClientQuotasRequestTest.testDescribeClientQuotasInvalidFilterCombination and
    testClientQuotasUnsupportedEntityTypes (UNSUPPORTED_VERSION)."""
    with pytest.raises(DescribeError) as caught:
        describe(QUOTAS, components, False)
    assert caught.value.unsupported == unsupported
