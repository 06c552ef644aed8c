"""Forwarding in an Envelope (KIP-590): the principal's bytes as Kafka's DefaultKafkaPrincipalBuilder writes
them, and the controller's Envelope handler refusing what Kafka refuses (a sender without CLUSTER_ACTION, a
principal it cannot read, an API brokers do not forward) and running the rest as the forwarded client."""

from __future__ import annotations

import asyncio
import datetime

import pytest
import structlog
from kio.schema.alter_partition_reassignments.v1.response import AlterPartitionReassignmentsResponse
from kio.schema.create_topics.v5.response import CreateTopicsResponse as CreateTopicsResponseV5
from kio.schema.create_topics.v7 import request as ct7
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.list_partition_reassignments.v0.response import ListPartitionReassignmentsResponse

from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import RequestHeader, decode_entity, parse_response_header
from epochkraft.security.authorizer import StandardAuthorizer
from epochkraft.security.principal import (
    KafkaPrincipal,
    deserialize_principal,
    serialize_principal,
)
from epochkraft.server import forwarding
from epochkraft.server.broker_daemon import BrokerNode
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers import k58_envelope
from epochkraft.server.handlers._util import NO_THROTTLE
from epochkraft.server.request_rules import listener_refusal
from tests.test_controller_mutation_quota import ControllerStandIn, cluster

BROKER_PRINCIPAL = KafkaPrincipal("User", "broker")
ALICE = KafkaPrincipal("User", "alice")
LOG = structlog.get_logger()


def test_principal_builder_serde():
    """DefaultKafkaPrincipalBuilderTest.testPrincipalBuilderSerde, against the bytes Kafka writes:
    version 0 (int16), then DefaultPrincipalData v0 (flexible): compact strings Type and Name, the bool
    tokenAuthenticated, an empty tagged-field section."""
    data = serialize_principal(ALICE)
    assert data == b"\x00\x00" + b"\x05User" + b"\x06alice" + b"\x00" + b"\x00"
    assert deserialize_principal(data) == ALICE
    long_name = KafkaPrincipal("User", "CN=" + "é" * 100)  # a length past one varint byte
    assert deserialize_principal(serialize_principal(long_name)) == long_name
    assert serialize_principal(ALICE, token_authenticated=True)[-2] == 1


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\x00\x01\x05User\x06alice\x00\x00",  # a version Kafka does not write
        b"\x00\x00\x05User\x06ali",  # truncated name
        b"\x00\x00\x05User\x06alice",  # no tokenAuthenticated
        b"\x00\x00\x00\x06alice\x00\x00",  # a null type
        b"\x00\x00\x05User\x06alice\x00\x01\x00\x09ab",  # a tagged field past the end
        b"\x00\x00\x05Us\xff\xfe\x06alice\x00\x00",  # not UTF-8
    ],
)
def test_principal_deserialization_refuses_what_kafka_cannot_read(data: bytes):
    with pytest.raises(ValueError):
        deserialize_principal(data)


def _sender(principal: KafkaPrincipal, authorizer: StandardAuthorizer | None = None) -> RequestContext:
    node = ControllerStandIn(cluster(None).ctx)
    node.authorizer = authorizer  # type: ignore[assignment]
    header = RequestHeader(58, 0, 1, "broker-1-control", 0)
    return RequestContext(
        CONTROLLER, header, 0, node, ("127.0.0.1", 1), LOG, principal=principal, authorizer=authorizer
    )


def _create_topic(name: str) -> ct7.CreateTopicsRequest:
    topic = ct7.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(), configs=())
    return ct7.CreateTopicsRequest(
        topics=(topic,), timeout=datetime.timedelta(seconds=5), validate_only=False
    )


def _handle(envelope: EnvelopeRequest, sender: RequestContext) -> EnvelopeResponse:
    return asyncio.run(k58_envelope.handle_on_controller(envelope, sender))


def _inner(answer: EnvelopeResponse, request: ct7.CreateTopicsRequest) -> CreateTopicsResponse:
    assert answer.error_code == ErrorCode.none and answer.response_data is not None
    correlation_id, _ = parse_response_header(19, 7, answer.response_data)
    assert correlation_id == 42  # the client's, so the broker answers it as its own
    return forwarding.unwrap_response(answer, request, CreateTopicsResponse)


def test_envelope_request_from_a_non_broker_is_refused():
    """ControllerApis.handleEnvelopeRequest: an Envelope needs CLUSTER_ACTION on the cluster, which a
    client's principal lacks; the brokers' (a super user here) has it."""
    authorizer = StandardAuthorizer(frozenset({BROKER_PRINCIPAL}), allow_everyone_if_no_acl_found=False)
    envelope = forwarding.wrap(_create_topic("t"), "client", 42, ALICE, "127.0.0.1")
    refused = listener_refusal(CONTROLLER, 58, envelope, _sender(ALICE, authorizer))
    assert refused == ErrorCode.cluster_authorization_failed
    assert listener_refusal(CONTROLLER, 58, envelope, _sender(BROKER_PRINCIPAL, authorizer)) is None


def test_forwarded_request_is_authorized_as_its_client():
    """The inner request runs with the forwarded principal: a broker (a super user) forwarding alice's
    CreateTopics gets TOPIC_AUTHORIZATION_FAILED for her, and nothing is created."""
    authorizer = StandardAuthorizer(frozenset({BROKER_PRINCIPAL}), allow_everyone_if_no_acl_found=False)
    sender = _sender(BROKER_PRINCIPAL, authorizer)
    request = _create_topic("t")
    answer = _handle(forwarding.wrap(request, "client", 42, ALICE, "10.1.2.3"), sender)
    response = _inner(answer, request)
    assert [t.error_code for t in response.topics] == [ErrorCode.topic_authorization_failed]
    answer = _handle(forwarding.wrap(request, "client", 42, BROKER_PRINCIPAL, "10.1.2.3"), sender)
    assert [t.error_code for t in _inner(answer, request).topics] == [ErrorCode.none]


def test_invalid_envelope_request_with_non_forwardable_api():
    """KafkaApisTest.testInvalidEnvelopeRequestWithNonForwardableAPI: an Envelope in an Envelope (or any
    API brokers do not forward) is INVALID_REQUEST, for the envelope as a whole."""
    inner = forwarding.wrap(_create_topic("t"), "client", 42, ALICE, "127.0.0.1")
    nested = forwarding.wrap(inner, "client", 43, ALICE, "127.0.0.1")
    answer = _handle(nested, _sender(BROKER_PRINCIPAL))
    assert answer.error_code == ErrorCode.invalid_request and answer.response_data is None


def test_envelope_with_an_unreadable_principal():
    """EnvelopeUtils.parseForwardedPrincipal: PRINCIPAL_DESERIALIZATION_FAILURE."""
    envelope = forwarding.wrap(_create_topic("t"), "client", 42, ALICE, "127.0.0.1")
    for principal in (None, b"\x00\x07junk"):
        bad = decode_entity(EnvelopeRequest, _encode(envelope, principal))
        assert (
            _handle(bad, _sender(BROKER_PRINCIPAL)).error_code == ErrorCode.principal_deserialization_failure
        )


def _encode(envelope: EnvelopeRequest, principal: bytes | None) -> bytes:
    from dataclasses import replace

    from epochkraft.protocol.framing import encode_entity

    return encode_entity(replace(envelope, request_principal=principal))


def test_envelope_error_reaches_the_client_as_kafka_answers_it():
    """ForwardingManager: an envelope refused as a whole is UNKNOWN_SERVER_ERROR for the client, except
    NOT_CONTROLLER (no active controller), which the client retries."""
    request = _create_topic("t")
    for envelope_error, client_error in (
        (ErrorCode.cluster_authorization_failed, ErrorCode.unknown_server_error),
        (ErrorCode.not_controller, ErrorCode.not_controller),
    ):
        refused = forwarding.refused_envelope(envelope_error)
        response = forwarding.unwrap_response(refused, request, CreateTopicsResponse)
        assert [t.error_code for t in response.topics] == [client_error]


def test_a_forwarded_request_no_controller_answered_times_out():
    """ForwardingManager.onTimeout: the client gets REQUEST_TIMED_OUT (retried by the Admin client), not
    UNKNOWN_SERVER_ERROR, when no controller answered its forwarded request."""
    response = forwarding.timed_out(_create_topic("t"), CreateTopicsResponse)
    assert [t.error_code for t in response.topics] == [ErrorCode.request_timed_out]


class _ControlChannel:
    """The broker's channel to the controller, answering every request with ``answer``."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    async def send(self, request: object, response_type: type) -> object:
        return self.answer


class _ForwardingBroker:
    """The broker daemon's own forwarding (BrokerNode.forward_to_controller) over a stand-in channel."""

    forward_to_controller = BrokerNode.forward_to_controller
    _until_applied = BrokerNode._until_applied

    def __init__(self, answer: object) -> None:
        self.control = _ControlChannel(answer)


def test_a_forwarded_answer_of_another_class_is_refused():
    """A caller names the response class of the request it forwards; an answer of another class (another
    API or version) is a bug and raises TypeError, which the handler's error path answers
    UNKNOWN_SERVER_ERROR, rather than reaching the client in the wrong shape: the broker's own request
    answered bare, a client's in an Envelope."""
    request = ListPartitionReassignmentsRequest(timeout=datetime.timedelta(seconds=5), topics=None)
    answer = ListPartitionReassignmentsResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, topics=()
    )
    client = RequestContext(BROKER, RequestHeader(46, 0, 42, "client", 0), 0, None, ("10.1.2.3", 1), LOG)
    wrong = "ListPartitionReassignmentsResponse v0, not the AlterPartitionReassignmentsResponse v1"
    for answered, ctx in ((answer, None), (forwarding.envelope_response(client.header, answer), client)):
        broker = _ForwardingBroker(answered)
        taken = asyncio.run(broker.forward_to_controller(request, ListPartitionReassignmentsResponse, ctx))
        assert taken == answer
        with pytest.raises(TypeError, match=wrong):
            asyncio.run(broker.forward_to_controller(request, AlterPartitionReassignmentsResponse, ctx))
    # the same API at another version than the request's
    created = _create_topic("t")
    envelope = _handle(forwarding.wrap(created, "client", 42, ALICE, "127.0.0.1"), _sender(BROKER_PRINCIPAL))
    with pytest.raises(TypeError, match="CreateTopicsResponse v7, not the CreateTopicsResponse v5"):
        forwarding.unwrap_response(envelope, created, CreateTopicsResponseV5)
    with pytest.raises(TypeError):
        forwarding.timed_out(created, CreateTopicsResponseV5)
