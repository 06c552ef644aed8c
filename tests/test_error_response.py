"""A request's error response (Kafka's ``AbstractRequest.getErrorResponse``): the error where the client
looks for its answer, and no response for a Produce with acks=0."""

import datetime

import pytest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.types import TopicName

from epochkraft.protocol.error_response import error_answer, error_response
from epochkraft.protocol.errors import ErrorCode


def produce(acks: int) -> ProduceRequest:
    partitions = (PartitionProduceData(index=0, records=b""), PartitionProduceData(index=2, records=b""))
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(TopicProduceData(name=TopicName("foo"), partition_data=partitions),),
    )


def test_a_produce_answers_its_error_in_every_partition_it_named():
    response = error_response(produce(acks=1), ProduceResponse, ErrorCode.not_controller)
    assert response is not None
    [topic] = response.responses
    assert topic.name == "foo"
    assert [(p.index, p.error_code) for p in topic.partition_responses] == [
        (0, ErrorCode.not_controller),
        (2, ErrorCode.not_controller),
    ]


def test_a_produce_with_acks_0_has_no_error_response():
    assert error_response(produce(acks=0), ProduceResponse) is None


def test_error_answer_answers_what_error_response_answers():
    assert error_answer(produce(acks=-1), ProduceResponse) == error_response(
        produce(acks=-1), ProduceResponse
    )


def test_error_answer_refuses_a_request_that_has_no_error_response():
    with pytest.raises(ValueError, match="acks=0"):
        error_answer(produce(acks=0), ProduceResponse)
