"""Fuzzing: codecs round-trip generated values and fail only with ProtocolError on random bytes; both
listeners of real daemons survive hostile frames, refuse the other listener's APIs, keep serving others,
and keep their memory bounded."""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.broker_registration.v3.request import BrokerRegistrationRequest, Listener

from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import ConnectionLost
from epochkraft.protocol.errors import ErrorCode, ProtocolError
from epochkraft.protocol.framing import decode_entity, encode_entity, encode_request, request_class
from epochkraft.protocol.guard import check_lengths
from epochkraft.protocol.records import (
    LONG_MAX,
    TIMESTAMP_TYPE_BIT,
    Compression,
    CorruptRecordError,
    RecordRules,
    build_batch,
    decode_batch,
    iter_batches,
    parse_header,
    validate,
)
from tests.support.lying_batches import LYING_BATCHES, answer, batch, lying_batch, needs_walk

REQUEST_TYPES = [(0, 9), (1, 12), (1, 16), (3, 12), (11, 7), (18, 3), (19, 7), (56, 3), (62, 3), (63, 1)]

entries = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3).map(tuple),
        st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(entries, st.sampled_from(list(Compression)), st.integers(0, 2**40), st.integers(-1, 2**31 - 1))
def test_record_batches_round_trip(values, codec, base_offset, epoch):
    batch = decode_batch(build_batch(values, base_offset=base_offset, leader_epoch=epoch, compression=codec))
    assert [(r.key, r.value, r.headers, batch.timestamp_of(r)) for r in batch.records] == [
        (k, v, tuple(h), ts) for k, v, h, ts in values
    ]
    assert (batch.base_offset, batch.partition_leader_epoch) == (base_offset, epoch)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_are_only_protocol_errors_for_batches(data):
    with contextlib.suppress(ProtocolError):
        decode_batch(data)
    with contextlib.suppress(ProtocolError):
        list(iter_batches(data))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(REQUEST_TYPES), st.binary(max_size=200))
def test_random_request_bodies_are_only_protocol_errors(key_version, data):
    with contextlib.suppress(ProtocolError):
        decode_entity(request_class(*key_version), data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries,
    st.sampled_from(list(Compression)),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(-5, 2**31 - 1),
)
def test_produced_batches_with_lying_bytes_are_only_record_errors(values, codec, flips, count):
    """A valid batch's records with bytes changed and any declared count, its CRC made correct again:
    validation accepts it or refuses it with CORRUPT_MESSAGE / INVALID_RECORD, never anything else."""
    data = build_batch(values, compression=codec)
    payload = bytearray(data[61:])
    for position, value in flips:
        payload[position % len(payload)] = value
    lying = batch(bytes(payload), count, last_offset_delta=count - 1, attributes=int(codec))
    with contextlib.suppress(CorruptRecordError):
        validate(lying, 0, parse_header(lying))


ascii_keyed_entries = st.lists(  # header keys mostly ASCII: the walk leaves other keys to the reader
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        st.lists(
            st.tuples(
                st.text(st.characters(codec="ascii"), max_size=10) | st.text(max_size=3),
                st.none() | st.binary(max_size=20),
            ),
            max_size=3,
        ).map(tuple),
        st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=20,
)
rules = st.builds(
    RecordRules,
    compacted=st.booleans(),
    now_ms=st.none() | st.integers(-(2**41), 2**41),
    timestamp_before_max_ms=st.integers(0, 2**41) | st.just(LONG_MAX),
    timestamp_after_max_ms=st.integers(0, 2**41) | st.just(LONG_MAX),
)


@needs_walk
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ascii_keyed_entries,
    st.sampled_from(list(Compression)),
    st.sampled_from([[], []]) | st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.sampled_from([None, None]) | st.integers(-1, 25),
    st.booleans(),
    rules,
)
def test_the_record_walk_answers_as_the_record_reader(values, codec, flips, count, log_append_time, rules):
    """Batches as producers write them, some with bytes changed or a lying count (CRC made correct again),
    against any partition rules: validate gives the same answer, word for word, with the C record walk
    as with aiokafka's record reader alone."""
    payload = bytearray(build_batch(values, compression=codec)[61:])
    for position, value in flips:
        payload[position % len(payload)] = value
    declared = len(values) if count is None else count
    attributes = int(codec) | (TIMESTAMP_TYPE_BIT if log_append_time else 0)
    lying = batch(bytes(payload), declared, last_offset_delta=declared - 1, attributes=attributes)
    assert answer(lying, rules) == answer(lying, rules, walk=False)


def produce_frame(records: bytes, correlation_id: int = 9) -> bytes:
    from kio.schema.produce.v9 import request as pr

    request = pr.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=__import__("datetime").timedelta(seconds=5),
        topic_data=(
            pr.TopicProduceData(
                name="fuzz", partition_data=(pr.PartitionProduceData(index=0, records=records),)
            ),
        ),
    )
    return encode_request(0, 9, correlation_id, "fuzz", encode_entity(request))


def well_formed_requests() -> list:
    import datetime
    import uuid

    from kio.schema.create_topics.v7 import request as ct
    from kio.schema.metadata.v12 import request as md
    from kio.schema.produce.v9 import request as pr

    from epochkraft.broker.metadata_follower import MetadataFollower

    seconds = datetime.timedelta(seconds=1)
    follower = object.__new__(MetadataFollower)
    follower.max_wait_ms = 500
    follower.node_id = 1
    batch = build_batch([(b"k", b"v" * 100, (("h", b"x"),), 1)] * 3)
    return [
        md.MetadataRequest(
            topics=(md.MetadataRequestTopic(topic_id=None, name="t"),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
        pr.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=seconds,
            topic_data=(
                pr.TopicProduceData(
                    name="t", partition_data=(pr.PartitionProduceData(index=0, records=batch),)
                ),
            ),
        ),
        follower._request(42),  # the broker's metadata Fetch v16
        ap3.AlterPartitionRequest(
            broker_id=1,
            broker_epoch=5,
            topics=(
                ap3.TopicData(
                    topic_id=uuid.uuid4(),
                    partitions=(
                        ap3.PartitionData(
                            partition_index=0,
                            leader_epoch=1,
                            partition_epoch=2,
                            leader_recovery_state=0,
                            new_isr_with_epochs=(ap3.BrokerState(broker_id=1, broker_epoch=5),),
                        ),
                    ),
                ),
            ),
        ),
        BrokerRegistrationRequest(
            broker_id=1,
            cluster_id="c",
            incarnation_id=uuid.uuid4(),
            features=(),
            rack=None,
            listeners=(Listener(name="P", host="h", port=1, security_protocol=0),),
            is_migrating_zk_broker=False,
            log_dirs=(uuid.uuid4(),),
            previous_broker_epoch=-1,
        ),
        ct.CreateTopicsRequest(
            topics=(
                ct.CreatableTopic(
                    name="t",
                    num_partitions=3,
                    replication_factor=1,
                    assignments=(),
                    configs=(ct.CreatableTopicConfig(name="min.insync.replicas", value="1"),),
                ),
            ),
            timeout=seconds,
            validate_only=False,
        ),
    ]


@pytest.mark.parametrize("request_obj", well_formed_requests(), ids=lambda r: type(r).__name__)
def test_the_length_pre_check_accepts_well_formed_requests(request_obj):
    cls = type(request_obj)
    encoded = encode_entity(request_obj)
    check_lengths(cls, encoded)
    assert decode_entity(cls, encoded) == request_obj
    with pytest.raises(ProtocolError):
        check_lengths(cls, encoded[: len(encoded) // 2] + b"\xff" * 4)


def hostile_frames(rng: random.Random) -> list[bytes]:
    frames = [
        rng.randbytes(rng.randint(1, 400)),  # noise
        struct.pack(">i", 2**31 - 1),  # size far over socket.request.max.bytes
        struct.pack(">i", -1),
        struct.pack(">i", 8) + b"\x00\x03",  # truncated, then closed
        encode_request(rng.randint(70, 32000), 0, 1, "fuzz", b""),  # unknown key
        encode_request(3, 99, 1, "fuzz", b""),  # unsupported version
        encode_request(18, 99, 1, "fuzz", b""),  # ApiVersions at a future version: answered
        encode_request(3, 1, 1, "fuzz", struct.pack(">i", 2**31 - 1)),  # huge array count
    ]
    key, version = rng.choice(REQUEST_TYPES)
    frames.append(encode_request(key, version, 7, "fuzz", rng.randbytes(rng.randint(0, 300))))
    frames.append(produce_frame(lying_batch(rng.choice(sorted(LYING_BATCHES)))))  # lying counts and lengths
    return frames


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


async def hammer(port: int, seed: int, rounds: int) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        for frame in hostile_frames(rng):
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(frame)
                with contextlib.suppress(OSError):
                    await writer.drain()
                with contextlib.suppress(TimeoutError, OSError):
                    await asyncio.wait_for(reader.read(1 << 16), 0.3)
                writer.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_both_listeners_survive_fuzzing_and_refuse_foreign_apis(make_cluster):
    cluster = make_cluster(1)
    broker, controller = cluster.node(1), cluster.node("controller")
    before = {name: rss_mb(node.pid) for name, node in (("broker", broker), ("controller", controller))}
    async with (
        KafkaClient("127.0.0.1", broker.port) as steady_broker,
        KafkaClient("127.0.0.1", controller.port) as steady_controller,
    ):
        for round_seed in range(8):
            await asyncio.gather(
                hammer(broker.port, round_seed, 5), hammer(controller.port, 100 + round_seed, 5)
            )
            assert (await steady_broker.api_versions()).error_code == ErrorCode.none
            assert (await steady_controller.api_versions()).error_code == ErrorCode.none

        # Control-plane APIs on the broker listener are refused (the connection is closed).
        stray = KafkaClient("127.0.0.1", broker.port, request_timeout_ms=3000)
        with pytest.raises(ConnectionLost):
            await stray.send(ap3.AlterPartitionRequest(broker_id=1, broker_epoch=0, topics=()))
        await stray.close()

        # A registration for another broker's id does not steal it while that broker holds a session.
        impostor = BrokerRegistrationRequest(
            broker_id=1,
            cluster_id=cluster.cluster_id,
            incarnation_id=__import__("uuid").uuid4(),
            listeners=(Listener(name="PLAINTEXT", host="127.0.0.1", port=1, security_protocol=0),),
            features=(),
            rack=None,
            is_migrating_zk_broker=False,
            log_dirs=(),
            previous_broker_epoch=-1,
        )
        refused = await steady_controller.send(impostor)
        assert refused.error_code == ErrorCode.duplicate_broker_registration
        assert (await steady_broker.api_versions()).error_code == ErrorCode.none
    assert broker.alive and controller.alive
    for name, node in (("broker", broker), ("controller", controller)):
        grown = rss_mb(node.pid) - before[name]
        assert grown < 60, f"{name} grew by {grown:.0f} MB under hostile input"


def hostile_sasl_frames(rng: random.Random) -> list[bytes]:
    """Frames against a SASL listener's handshake: garbage mechanisms and tokens, tokens out of turn, and
    APIs before authentication (which close the connection)."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    def request(obj, correlation_id: int) -> bytes:
        return encode_request(obj.__api_key__, obj.__version__, correlation_id, "fuzz", encode_entity(obj))

    mechanism = rng.choice(["SCRAM-SHA-512", "PLAIN", "GSSAPI", rng.randbytes(8).hex(), ""])
    token = rng.choice(
        [
            rng.randbytes(rng.randint(0, 300)),
            b"n,,n=admin,r=" + rng.randbytes(20),
            b"\0admin\0" + rng.randbytes(12),
            b"c=biws,r=x,p=" + rng.randbytes(40),
        ]
    )
    key, version = rng.choice(REQUEST_TYPES)
    return [
        request(SaslHandshakeRequest(mechanism=mechanism), 1)
        + request(SaslAuthenticateRequest(auth_bytes=token), 2),
        request(SaslAuthenticateRequest(auth_bytes=token), 1),  # before any handshake
        encode_request(36, 2, 3, "fuzz", rng.randbytes(rng.randint(0, 200))),  # undecodable token request
        encode_request(key, version, 7, "fuzz", rng.randbytes(rng.randint(0, 300))),  # before authentication
        rng.randbytes(rng.randint(1, 400)),
    ]


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_sasl_listener_survives_fuzzing_of_its_handshake(tmp_path):
    import ssl

    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from epochkraft.harness.cluster import LocalCluster
    from epochkraft.security.scram import ScramClient
    from tests.conftest import write_fast_configs

    broker_cfg, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(
        data_dir=tmp_path / "c",
        brokers=1,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        secure=True,
    )
    try:
        await asyncio.to_thread(cluster.start)
        security = cluster.security
        assert security is not None
        port = int(cluster.client_bootstrap.split(",")[0].rsplit(":", 1)[1])
        tls = ssl.create_default_context(cafile=str(security.truststore))
        broker = cluster.node(1)
        before = rss_mb(broker.pid)
        rng = random.Random(17)
        for _ in range(40):
            for frame in hostile_sasl_frames(rng):
                with contextlib.suppress(OSError):
                    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
                    writer.write(frame)
                    with contextlib.suppress(OSError):
                        await writer.drain()
                    with contextlib.suppress(TimeoutError, OSError):
                        await asyncio.wait_for(reader.read(1 << 16), 0.3)
                    writer.close()
        # Still serving: the admin logs in with SCRAM-SHA-512.
        async with KafkaClient("127.0.0.1", port, ssl_context=tls) as client:
            assert (
                await client.send(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
            ).error_code == ErrorCode.none
            scram = ScramClient("SCRAM-SHA-512", "admin", security.admin_password)
            first = await client.send(SaslAuthenticateRequest(auth_bytes=scram.first()))
            final = await client.send(SaslAuthenticateRequest(auth_bytes=scram.final(first.auth_bytes)))
            assert final.error_code == ErrorCode.none and scram.verify(final.auth_bytes)
        assert broker.alive
        assert rss_mb(broker.pid) - before < 60
    finally:
        cluster.kill_all()
