"""Handlers that encode their own response bodies produce exactly kio's bytes, at every version served."""

import datetime
import uuid

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.alter_partition.v2 import response as v2
from kio.schema.alter_partition.v3 import response as v3

from epochkraft.net.handlers.k56_alter_partition import encode_response
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import decode_entity, encode_entity
from epochkraft.protocol.versions import downgrade_response

int32 = st.integers(-(2**31), 2**31 - 1)
partitions = st.builds(
    v3.PartitionData,
    partition_index=int32,
    error_code=st.sampled_from(list(ErrorCode)),
    leader_id=int32,
    leader_epoch=int32,
    isr=st.lists(int32, max_size=200).map(tuple),
    leader_recovery_state=st.integers(-128, 127),
    partition_epoch=int32,
)
responses = st.builds(
    v3.AlterPartitionResponse,
    throttle_time=st.integers(0, 2**31 - 1).map(lambda n: datetime.timedelta(milliseconds=n)),
    error_code=st.sampled_from(list(ErrorCode)),
    topics=st.lists(
        st.builds(
            v3.TopicData, topic_id=st.uuids(), partitions=st.lists(partitions, max_size=150).map(tuple)
        ),
        max_size=4,
    ).map(tuple),
)


@given(responses)
def test_alter_partition_response_bytes_match_kio(response):
    ours = encode_response(response)
    assert ours == encode_entity(response)
    assert ours == encode_entity(downgrade_response(response, 2))
    assert decode_entity(v2.AlterPartitionResponse, ours) == downgrade_response(response, 2)


def test_alter_partition_response_of_a_thousand_partitions():
    topic_id = uuid.uuid4()
    response = v3.AlterPartitionResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        topics=(
            v3.TopicData(
                topic_id=topic_id,
                partitions=tuple(
                    v3.PartitionData(
                        partition_index=i,
                        error_code=ErrorCode.none if i % 7 else ErrorCode.invalid_update_version,
                        leader_id=1,
                        leader_epoch=3,
                        isr=(1, 2, 3)[: 1 + i % 3],
                        leader_recovery_state=0,
                        partition_epoch=i,
                    )
                    for i in range(1000)
                ),
            ),
        ),
    )
    assert encode_response(response) == encode_entity(response)
