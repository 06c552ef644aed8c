"""KRaft metadata records: round trips at every version, golden bytes from Kafka's rules, no drift."""

import contextlib
import dataclasses
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochkraft.protocol import metadata_codec
from epochkraft.protocol import metadata_records as mr
from epochkraft.protocol.errors import ProtocolError
from epochkraft.protocol.metadata_codec import (
    MetadataRecordError,
    decode_metadata_record,
    decode_metadata_record_with_version,
    encode_metadata_record,
    metadata_batch,
    read_metadata_batches,
)
from epochkraft.protocol.metadata_schema import all_schemas

ROOT = Path(__file__).resolve().parent.parent
TOPIC = uuid.UUID("7b4a8c1e-0d2f-4e6a-9b3c-5d7e9f1a2b3c")

SAMPLES = [
    mr.RegisterBrokerRecord(
        broker_id=2,
        incarnation_id=uuid.UUID(int=99),
        broker_epoch=42,
        end_points=(mr.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9093, security_protocol=0),),
        features=(
            mr.BrokerFeature(name="metadata.version", min_supported_version=1, max_supported_version=20),
        ),
        rack=None,
        fenced=True,
        in_controlled_shutdown=False,
    ),
    mr.UnregisterBrokerRecord(broker_id=2, broker_epoch=42),
    mr.TopicRecord(name="orders", topic_id=TOPIC),
    mr.PartitionRecord(
        partition_id=0,
        topic_id=TOPIC,
        replicas=(1, 2, 3),
        isr=(1, 2),
        leader=1,
        leader_epoch=4,
        partition_epoch=9,
    ),
    mr.ConfigRecord(resource_type=2, resource_name="orders", name="min.insync.replicas", value="2"),
    mr.PartitionChangeRecord(partition_id=0, topic_id=TOPIC, isr=(1,), leader=1, leader_recovery_state=1),
    mr.FenceBrokerRecord(id=3, epoch=17),
    mr.UnfenceBrokerRecord(id=3, epoch=17),
    mr.RemoveTopicRecord(topic_id=TOPIC),
    mr.FeatureLevelRecord(name="metadata.version", feature_level=20),
    mr.ProducerIdsRecord(broker_id=1, broker_epoch=5, next_producer_id=1000),
    mr.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=-1, in_controlled_shutdown=1),
    mr.NoOpRecord(),
    mr.UserScramCredentialRecord(
        name="alice", mechanism=2, salt=b"s" * 32, stored_key=b"k" * 64, server_key=b"v" * 64, iterations=4096
    ),
    mr.RemoveUserScramCredentialRecord(name="alice", mechanism=2),
    mr.AccessControlEntryRecord(
        id=uuid.UUID(int=7),
        resource_type=2,
        resource_name="orders-",
        pattern_type=4,
        principal="User:alice",
        host="*",
        operation=3,
        permission_type=3,
    ),
    mr.RemoveAccessControlEntryRecord(id=uuid.UUID(int=7)),
    mr.ClientQuotaRecord(
        entity=(
            mr.EntityData(entity_type="user", entity_name="alice"),
            mr.EntityData(entity_type="client-id", entity_name=None),
        ),
        key="producer_byte_rate",
        value=1048576.0,
    ),
]


def _fields_in(record, version):
    schema = all_schemas()[type(record).__name__]
    return {f.name for f in schema.struct.fields if version in f.versions}


@pytest.mark.parametrize(
    ("record", "version"),
    [
        (record, version)
        for record in SAMPLES
        for version in range(type(record).LOWEST_VERSION, type(record).HIGHEST_VERSION + 1)
    ],
    ids=lambda v: type(v).__name__ if dataclasses.is_dataclass(v) else f"v{v}",
)
def test_round_trip_every_record_at_every_version(record, version):
    decoded, got_version = decode_metadata_record_with_version(encode_metadata_record(record, version))
    assert got_version == version
    for name in _fields_in(record, version):
        assert getattr(decoded, name) == getattr(record, name), name


def test_every_schema_has_a_sample():
    assert {type(r).__name__ for r in SAMPLES} == set(all_schemas())


def test_golden_partition_change_record_with_isr_and_leader_tags():
    # frame 1, apiKey 5, version 0 | PartitionId | TopicId | 2 tagged fields: tag 0 (Isr), tag 1 (Leader)
    record = mr.PartitionChangeRecord(partition_id=3, topic_id=uuid.UUID(int=5), isr=(1, 2), leader=1)
    expected = bytes.fromhex(
        "0105000000000300000000000000000000000000000005020009030000000100000002010400000001"
    )
    assert encode_metadata_record(record, 0) == expected
    assert decode_metadata_record(expected) == record


def test_golden_fence_broker_record():
    expected = bytes.fromhex("01070000000003000000000000001100")
    assert encode_metadata_record(mr.FenceBrokerRecord(id=3, epoch=17)) == expected


def test_golden_register_broker_record_v0():
    record = mr.RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=uuid.UUID(int=1),
        broker_epoch=2,
        end_points=(mr.BrokerEndpoint(name="P", host="h", port=9092, security_protocol=0),),
        rack=None,
    )
    expected = bytes.fromhex(
        "01"
        "00"
        "00"  # frame, apiKey 0, version 0
        "00000001"  # BrokerId
        "00000000000000000000000000000001"  # IncarnationId
        "0000000000000002"  # BrokerEpoch
        "02"
        "0250"
        "0268"
        "2384"
        "0000"
        "00"  # EndPoints: 1 entry {Name "P", Host "h", Port, Protocol, no tags}
        "01"  # Features: empty compact array
        "00"  # Rack: null
        "01"  # Fenced: true
        "00"  # no tagged fields
    )
    assert encode_metadata_record(record, 0) == expected


def test_unknown_tags_are_skipped():
    data = bytearray(encode_metadata_record(mr.FenceBrokerRecord(id=3, epoch=17)))
    data[-1:] = bytes.fromhex("016302abcd")  # one tagged field, tag 99, 2 bytes
    assert decode_metadata_record(bytes(data)) == mr.FenceBrokerRecord(id=3, epoch=17)


@pytest.mark.parametrize(
    "record",
    [
        mr.TopicRecord(name=5, topic_id=TOPIC),
        mr.TopicRecord(name="foo", topic_id=str(TOPIC)),
        mr.UserScramCredentialRecord(name="alice", salt="pepper"),
        mr.PartitionRecord(topic_id=TOPIC, replicas=3),
        mr.RegisterBrokerRecord(broker_id=1, end_points=mr.BrokerEndpoint()),
    ],
    ids=["string", "uuid", "bytes", "int array", "struct array"],
)
def test_a_value_not_of_its_fields_type_is_refused(record):
    with pytest.raises(TypeError, match="field"):
        encode_metadata_record(record)


def test_a_record_schema_decoding_to_no_record_class_is_refused(monkeypatch):
    data = encode_metadata_record(mr.FenceBrokerRecord(id=3, epoch=17))
    monkeypatch.setattr(
        metadata_codec, "_struct_reader", lambda spec, version: lambda view, pos: ((), len(view))
    )
    with pytest.raises(MetadataRecordError, match="FenceBrokerRecord decoded as a tuple"):
        decode_metadata_record(data)


def test_metadata_batches_carry_offsets():
    batch = metadata_batch(10, SAMPLES[:3], timestamp_ms=1)
    assert [(o, type(r).__name__) for o, r in read_metadata_batches(batch)] == [
        (10, "RegisterBrokerRecord"),
        (11, "UnregisterBrokerRecord"),
        (12, "TopicRecord"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_protocol_errors(data):
    with contextlib.suppress(ProtocolError):
        decode_metadata_record(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(SAMPLES) - 1), st.data())
def test_truncated_records_only_raise_protocol_errors(index, data):
    encoded = encode_metadata_record(SAMPLES[index])
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(ProtocolError):
        decode_metadata_record(encoded[:cut])


@pytest.mark.net
def test_generated_module_matches_the_generator():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, 'scripts'); import gen_metadata_records as g; "
            "print(g.generate(), end='')",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == (ROOT / "epochkraft/protocol/metadata_records.py").read_text()
