"""The controller as a real process: registration, heartbeats, topics and AlterPartition over TCP with
kio-built requests; restart keeps state; metadata long poll; hostile input."""

from __future__ import annotations

import asyncio
import datetime
import struct
import uuid

import pytest
from kio.schema.alter_partition.v2 import request as ap2
from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v3.request import BrokerRegistrationRequest, Listener
from kio.schema.create_topics.v7 import request as ct
from kio.schema.fetch.v16 import request as fetch16
from kio.schema.produce.v8.request import ProduceRequest

from epochkraft.harness.processes import LocalProcess
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import ConnectionLost
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import encode_request
from epochkraft.protocol.metadata_codec import read_metadata_batches
from epochkraft.protocol.metadata_records import TopicRecord

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def controller(tmp, *extra: str, data: bool = True) -> LocalProcess:
    args = ["controller", "--listen", "127.0.0.1:0", "--cluster-id", "test-cluster-0000000000", *extra]
    if data:
        args += ["--data-dir", str(tmp / "controller")]
    return LocalProcess("controller", args, tmp / "controller.log")


CLUSTER = "test-cluster-0000000000"
SECONDS = datetime.timedelta(seconds=5)
METADATA_TOPIC_ID = uuid.UUID(int=1)


@pytest.fixture
def controller_process(tmp_path):
    daemon = controller(tmp_path, "--session-timeout-ms", "3000")
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.kill()


class Broker:
    """Just enough of a broker to drive the controller: registration and heartbeats."""

    def __init__(self, client: KafkaClient, broker_id: int) -> None:
        self.client = client
        self.id = broker_id
        self.incarnation = uuid.uuid4()
        self.epoch = -1

    async def register(self, previous_epoch: int = -1) -> ErrorCode:
        response = await self.client.send(
            BrokerRegistrationRequest(
                broker_id=self.id,
                cluster_id=CLUSTER,
                incarnation_id=self.incarnation,
                listeners=(
                    Listener(name="PLAINTEXT", host="127.0.0.1", port=19000 + self.id, security_protocol=0),
                ),
                features=(),
                rack=None,
                is_migrating_zk_broker=False,
                log_dirs=(),
                previous_broker_epoch=previous_epoch,
            )
        )
        self.epoch = response.broker_epoch
        return response.error_code

    async def heartbeat(self, *, want_fence: bool = False, offset: int = 1 << 40) -> object:
        return await self.client.send(
            BrokerHeartbeatRequest(
                broker_id=self.id,
                broker_epoch=self.epoch,
                current_metadata_offset=offset,
                want_fence=want_fence,
                want_shut_down=False,
                offline_log_dirs=(),
            )
        )


async def create_topic(client: KafkaClient, name: str, assignment: list[list[int]]) -> object:
    topic = ct.CreatableTopic(
        name=name,
        num_partitions=-1,
        replication_factor=-1,
        assignments=tuple(
            ct.CreatableReplicaAssignment(partition_index=i, broker_ids=tuple(r))
            for i, r in enumerate(assignment)
        ),
        configs=(ct.CreatableTopicConfig(name="min.insync.replicas", value="2"),),
    )
    response = await client.send(
        ct.CreateTopicsRequest(topics=(topic,), timeout=SECONDS, validate_only=False)
    )
    return response.topics[0]


def alter_v3(leader: Broker, topic_id, epochs: list[tuple[int, int]], leader_epoch=0, partition_epoch=0):
    return ap3.AlterPartitionRequest(
        broker_id=leader.id,
        broker_epoch=leader.epoch,
        topics=(
            ap3.TopicData(
                topic_id=topic_id,
                partitions=(
                    ap3.PartitionData(
                        partition_index=0,
                        leader_epoch=leader_epoch,
                        new_isr_with_epochs=tuple(
                            ap3.BrokerState(broker_id=b, broker_epoch=e) for b, e in epochs
                        ),
                        leader_recovery_state=0,
                        partition_epoch=partition_epoch,
                    ),
                ),
            ),
        ),
    )


def alter_v2(leader: Broker, topic_id, isr: list[int], leader_epoch=0, partition_epoch=0):
    return ap2.AlterPartitionRequest(
        broker_id=leader.id,
        broker_epoch=leader.epoch,
        topics=(
            ap2.TopicData(
                topic_id=topic_id,
                partitions=(
                    ap2.PartitionData(
                        partition_index=0,
                        leader_epoch=leader_epoch,
                        new_isr=tuple(isr),
                        leader_recovery_state=0,
                        partition_epoch=partition_epoch,
                    ),
                ),
            ),
        ),
    )


async def test_registration_alter_partition_and_restart(controller_process):
    async with KafkaClient("127.0.0.1", controller_process.port) as client:
        brokers = {i: Broker(client, i) for i in (1, 2, 3)}
        for b in brokers.values():
            assert await b.register() == ErrorCode.none
            assert not (await b.heartbeat()).is_fenced
        # A second incarnation while the first holds a valid session is refused.
        impostor = Broker(client, 1)
        assert await impostor.register() == ErrorCode.duplicate_broker_registration

        created = await create_topic(client, "orders", [[1, 2, 3]])
        assert created.error_code == ErrorCode.none
        topic_id = created.topic_id
        epochs = {i: b.epoch for i, b in brokers.items()}

        # Shrink, then the KIP-903 race: broker 3 reboots (new incarnation, new epoch) before the expand.
        shrink = await client.send(alter_v3(brokers[1], topic_id, [(1, epochs[1]), (2, epochs[2])]))
        p = shrink.topics[0].partitions[0]
        assert (p.error_code, tuple(p.isr), p.partition_epoch) == (ErrorCode.none, (1, 2), 1)
        reborn = Broker(client, 3)
        assert await reborn.register(previous_epoch=epochs[3]) == ErrorCode.none
        assert reborn.epoch > epochs[3]
        assert not (await reborn.heartbeat()).is_fenced
        stale = await client.send(
            alter_v3(
                brokers[1], topic_id, [(1, epochs[1]), (2, epochs[2]), (3, epochs[3])], partition_epoch=1
            )
        )
        assert stale.topics[0].partitions[0].error_code == ErrorCode.ineligible_replica
        # v2 cannot carry epochs, so the same request is accepted: the pre-KIP-903 hole.
        legacy = await client.send(alter_v2(brokers[1], topic_id, [1, 2, 3], partition_epoch=1))
        assert legacy.topics[0].partitions[0].error_code == ErrorCode.none
        # A requester with a stale broker epoch is refused outright.
        stale_requester = Broker(client, 1)
        stale_requester.epoch = epochs[1] - 1
        refused = await client.send(alter_v3(stale_requester, topic_id, [(1, -1)], partition_epoch=2))
        assert refused.error_code == ErrorCode.stale_broker_epoch

    assert controller_process.stop() == 0, "SIGTERM exits cleanly"
    controller_process.start()
    async with KafkaClient("127.0.0.1", controller_process.port) as client:
        again = await create_topic(client, "orders", [[1, 2, 3]])
        assert again.error_code == ErrorCode.topic_already_exists, "topics survive a restart"
        # Registrations and epochs survive: the reborn broker's epoch is still current.
        reborn.client = client
        response = await reborn.heartbeat()
        assert response.error_code == ErrorCode.none
        brokers[2].client = client
        assert (await brokers[2].heartbeat()).error_code == ErrorCode.none
        old = Broker(client, 3)
        old.epoch = epochs[3]
        assert (await old.heartbeat()).error_code == ErrorCode.stale_broker_epoch


async def test_metadata_fetch_long_poll_returns_when_the_log_grows(controller_process):
    async with (
        KafkaClient("127.0.0.1", controller_process.port) as follower,
        KafkaClient("127.0.0.1", controller_process.port) as admin,
    ):

        async def fetch(offset: int, wait_ms: int):
            request = fetch16.FetchRequest(
                replica_state=fetch16.ReplicaState(replica_id=7, replica_epoch=-1),
                max_wait=datetime.timedelta(milliseconds=wait_ms),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    fetch16.FetchTopic(
                        topic_id=METADATA_TOPIC_ID,
                        partitions=(
                            fetch16.FetchPartition(
                                partition=0,
                                current_leader_epoch=-1,
                                fetch_offset=offset,
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
            return (await follower.send(request)).responses[0].partitions[0]

        first = await fetch(0, 0)
        end = first.high_watermark
        assert end > 0 and first.records
        loop = asyncio.get_running_loop()
        started = loop.time()
        poll = asyncio.create_task(fetch(end, 10_000))
        await asyncio.sleep(0.3)
        assert not poll.done(), "the fetch waits at the log end"
        broker = Broker(admin, 1)
        await broker.register()
        await broker.heartbeat()
        await create_topic(admin, "events", [[1]])
        result = await poll
        elapsed = loop.time() - started
        assert elapsed < 5, "answered when the log grew, not at max_wait"
        records = [r for _, r in read_metadata_batches(result.records)]
        assert records, "new records delivered"
        beyond = await fetch(result.high_watermark + 100, 0)
        assert beyond.error_code == ErrorCode.offset_out_of_range
        # The topic record arrives in a later fetch if not in this one.
        everything = [r for _, r in read_metadata_batches((await fetch(0, 0)).records)]
        assert any(isinstance(r, TopicRecord) and r.name == "events" for r in everything)


HOSTILE = [
    b"\x00\x00\x00\x10" + bytes(range(16)),
    struct.pack(">i", 1 << 30),
    encode_request(999, 0, 1, "x", b""),
    encode_request(56, 1, 1, "x", b"\x00" * 8),
    encode_request(62, 3, 1, "x", b"\xff" * 40),
]


async def test_hostile_input_does_not_disturb_other_connections(controller_process):
    async with KafkaClient("127.0.0.1", controller_process.port) as steady:
        for payload in HOSTILE:
            reader, writer = await asyncio.open_connection("127.0.0.1", controller_process.port)
            writer.write(payload)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(1 << 16), 5) == b"", (
                "the offending connection is closed"
            )
            writer.close()
            assert (await steady.api_versions()).error_code == ErrorCode.none
        # A client API on the controller listener is refused: the connection is closed.
        stray = KafkaClient("127.0.0.1", controller_process.port, request_timeout_ms=3000)
        with pytest.raises(ConnectionLost):
            await stray.send(ProduceRequest(transactional_id=None, acks=1, timeout=SECONDS, topic_data=()))
        await stray.close()
    assert controller_process.alive
    assert "closing connection" in controller_process.log_text()


def test_check_config_rejects_garbage(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.properties"
    bad.write_text("broker.session.timeout.ms=soon\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochkraft.cli",
            "controller",
            "--listen",
            "127.0.0.1:0",
            "--cluster-id",
            "x",
            "--config",
            str(bad),
            "--check-config",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "broker.session.timeout.ms" in result.stderr
    good = tmp_path / "good.properties"
    good.write_text("# comment\nbroker.session.timeout.ms=4000\nmin.insync.replicas=2\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochkraft.cli",
            "controller",
            "--listen",
            "127.0.0.1:0",
            "--cluster-id",
            "x",
            "--config",
            str(good),
            "--check-config",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr


def test_sigint_also_exits_cleanly(tmp_path):
    daemon = controller(tmp_path, data=False)
    daemon.start()
    try:
        daemon.signal("INT")
        assert daemon.proc.wait(10) == 0
    finally:
        daemon.kill()
