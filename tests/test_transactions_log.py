"""Transactions on the log path end to end, without a transaction coordinator: transactional batches
produced with kio, WriteTxnMarkers sent as a coordinator sends them (one commit, one abort), and real
read_committed and read_uncommitted consumers (confluent-kafka) reading the result."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.describe_producers.v0 import request as dp
from kio.schema.init_producer_id.v4 import request as ip
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
from kio.schema.list_offsets.v8 import request as lo
from kio.schema.produce.v9 import request as pr
from kio.schema.write_txn_markers.v1 import request as wm

from epochkraft.harness.kio_client import MiniClient
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import TRANSACTIONAL_BIT, Record, RecordBatch, build_batch, encode_batch

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(120)]

TOPIC = "txn"
SECONDS = datetime.timedelta(seconds=10)
# No coordinator holds these transactions, so the leaders must not ask one (KIP-890 part 1): Kafka's own
# log-level tests turn the verification off the same way.
NO_VERIFICATION = "transaction.partition.verification.enable=false\n"


def txn_batch(producer_id: int, sequence: int, values: list[bytes]) -> bytes:
    records = [Record(i, 0, None, v) for i, v in enumerate(values)]
    batch = RecordBatch(
        0, -1, TRANSACTIONAL_BIT, len(values) - 1, 1_700_000_000_000, 1_700_000_000_000,
        producer_id, 0, sequence, records,
    )  # fmt: skip
    return encode_batch(batch)


async def leader_client(client: MiniClient):
    p, brokers = await client.partition_state(TOPIC)
    return client._client(brokers[p.leader_id])


async def produce(client: MiniClient, batch: bytes, transactional_id: str | None) -> int:
    request = pr.ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout=SECONDS,
        topic_data=(
            pr.TopicProduceData(
                name=TOPIC, partition_data=(pr.PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )
    answer = (await (await leader_client(client)).send(request)).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none, answer
    return answer.base_offset


async def producer_id(client: MiniClient) -> int:
    request = ip.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=SECONDS, producer_id=-1, producer_epoch=-1
    )
    response = await client.any_send(request, InitProducerIdResponse)
    assert response.error_code == ErrorCode.none
    return response.producer_id


async def latest(client: MiniClient, isolation_level: int) -> int:
    request = lo.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(
            lo.ListOffsetsTopic(
                name=TOPIC,
                partitions=(
                    lo.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),
                ),
            ),
        ),
    )
    return (await (await leader_client(client)).send(request)).topics[0].partitions[0].offset


async def txn_start_offsets(client: MiniClient) -> dict[int, int]:
    request = dp.DescribeProducersRequest(topics=(dp.TopicRequest(name=TOPIC, partition_indexes=(0,)),))
    answer = (await (await leader_client(client)).send(request)).topics[0].partitions[0]
    return {p.producer_id: p.current_txn_start_offset for p in answer.active_producers}


async def write_markers(
    client: MiniClient,
    markers: list[tuple[int, bool]],
    coordinator_epoch: int = 1,
    partitions: tuple[int, ...] = (0,),
    broker=None,
) -> list[int]:
    """The error per partition of WriteTxnMarkers sent as a coordinator sends it (to the leader unless
    another ``broker`` connection is given)."""
    request = wm.WriteTxnMarkersRequest(
        markers=tuple(
            wm.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=0,
                transaction_result=committed,
                topics=(wm.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=partitions),),
                coordinator_epoch=coordinator_epoch,
            )
            for pid, committed in markers
        )
    )
    response = await (broker or await leader_client(client)).send(request)
    return [p.error_code for m in response.markers for t in m.topics for p in t.partitions]


async def new_leader(client: MiniClient, old: int) -> int:
    for _ in range(100):
        p, _brokers = await client.partition_state(TOPIC)
        if p.leader_id >= 0 and p.leader_id != old:
            return p.leader_id
        await asyncio.sleep(0.2)
    raise AssertionError("no new leader")


async def same_indexes_everywhere(cluster, deadline: float) -> bool:
    """Whether every broker's .txnindex of the partition came to hold the same single entry."""
    while time.monotonic() < deadline:
        indexes = sorted(cluster.data_dir.glob(f"broker-*/**/{TOPIC}-0/*.txnindex"))
        contents = {path.read_bytes() for path in indexes}
        if len(indexes) == 3 and len(contents) == 1 and len(contents.pop()) == 34:
            return True
        await asyncio.sleep(0.5)
    return False


def consume(bootstrap: str, isolation: str, expected: int, timeout: float = 8.0) -> list[bytes]:
    """Every value a consumer of that isolation level reads from offset 0 within ``timeout``, stopping
    early once ``expected`` values arrived."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{isolation}-{expected}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while (len(values) < expected or expected == 0) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


async def test_read_committed_sees_committed_records_only_and_stops_at_the_lso(make_cluster):
    cluster = make_cluster(brokers=3, broker_extra=NO_VERIFICATION)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic(TOPIC, partitions=1, rf=3) == ErrorCode.none
        await asyncio.sleep(1)
        committed_pid, aborted_pid = await producer_id(client), await producer_id(client)
        await produce(client, build_batch([(None, b"plain-0", (), 1_700_000_000_000)]), None)
        first = await produce(client, txn_batch(committed_pid, 0, [b"c-0", b"c-1"]), "t-commit")
        await produce(client, txn_batch(aborted_pid, 0, [b"a-0"]), "t-abort")
        await produce(client, txn_batch(committed_pid, 2, [b"c-2"]), "t-commit")
        # A transactional batch without a transactional id is refused (KafkaApis.handleProduceRequest).
        with pytest.raises(AssertionError):
            await produce(client, txn_batch(aborted_pid, 1, [b"a-1"]), None)

        # While both transactions are open, read_committed stops at the first one's start.
        assert await latest(client, isolation_level=1) == first
        assert await latest(client, isolation_level=0) == first + 4
        assert await txn_start_offsets(client) == {committed_pid: first, aborted_pid: first + 2}
        open_view = await asyncio.to_thread(consume, cluster.bootstrap, "read_committed", 0, 5.0)
        assert open_view == [b"plain-0"]

        # The leader dies with both transactions open: its successor, a follower that replicated the
        # batches, holds the last stable offset at the same place.
        old_leader = (await client.partition_state(TOPIC))[0].leader_id
        cluster.node(old_leader).kill()
        await new_leader(client, old_leader)
        assert await latest(client, isolation_level=1) == first
        assert await write_markers(client, [(committed_pid, True), (aborted_pid, False)]) == [0, 0]
        # KafkaApis.handleWriteTxnMarkersRequest's refusals: a partition not hosted here, a broker that
        # does not lead it, a marker from an older coordinator than the last one.
        assert await write_markers(client, [(committed_pid, True)], partitions=(7,)) == [
            ErrorCode.unknown_topic_or_partition
        ]
        p, brokers = await client.partition_state(TOPIC)
        follower = next(b for b in p.isr_nodes if b != p.leader_id)
        assert await write_markers(
            client, [(committed_pid, True)], broker=client._client(brokers[follower])
        ) == [ErrorCode.not_leader_or_follower]
        assert await write_markers(client, [(committed_pid, False)], coordinator_epoch=0) == [
            ErrorCode.transaction_coordinator_fenced
        ]
        await produce(client, build_batch([(None, b"plain-1", (), 1_700_000_000_000)]), None)
        assert await txn_start_offsets(client) == {committed_pid: -1, aborted_pid: -1}
        assert await latest(client, isolation_level=1) == await latest(client, isolation_level=0)

        committed = await asyncio.to_thread(consume, cluster.bootstrap, "read_committed", 5)
        assert committed == [b"plain-0", b"c-0", b"c-1", b"c-2", b"plain-1"]
        everything = await asyncio.to_thread(consume, cluster.bootstrap, "read_uncommitted", 6)
        assert sorted(everything) == sorted([b"plain-0", b"c-0", b"c-1", b"a-0", b"c-2", b"plain-1"])

        # Every replica indexes the same aborted transaction: followers replicate the markers, and the
        # old leader, back from SIGKILL, recovers its log and catches up.
        node = cluster.node(old_leader)
        node.launch()
        node.wait_ready(60)
        assert await same_indexes_everywhere(cluster, deadline=time.monotonic() + 30)
    finally:
        await client.close()


def transactions_tool(bootstrap: str, args: list[str], cwd) -> list[list[str]]:
    """Kafka's ``kafka-transactions`` (TransactionsCommand) against ``bootstrap``: its table's rows."""
    from tests.test_metadata_snapshot import kafka_tool

    result = kafka_tool(
        "org.apache.kafka.tools.TransactionsCommand", ["--bootstrap-server", bootstrap, *args], cwd
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [line.split() for line in result.stdout.splitlines()[1:] if line.strip()]


async def test_kafka_transactions_finds_and_aborts_a_hanging_transaction(make_cluster, tmp_path):
    """A hanging transaction (a transactional batch its coordinator never heard of, as the bug KIP-890
    closes leaves one) found and aborted with Kafka's own tool: ``describe-producers`` shows its start
    offset, on the leader and on a follower (``--broker-id``, Kafka's Partition.activeProducerState on
    any replica); ``find-hanging --broker-id`` finds it (DescribeProducers on that broker, ListTransactions
    filtered by producer id, DescribeTransactions); ``abort --start-offset`` sends WriteTxnMarkers from the
    admin client to the leader (Admin.abortTransaction), after which read_committed reads past it."""
    cluster = make_cluster(brokers=3, broker_extra=NO_VERIFICATION)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic(TOPIC, partitions=1, rf=3) == ErrorCode.none
        await asyncio.sleep(1)
        pid = await producer_id(client)
        start = await produce(client, txn_batch(pid, 0, [b"hanging-0", b"hanging-1"]), "never-coordinated")
        after = await produce(client, build_batch([(None, b"after", (), 1_700_000_000_001)]), None)
        assert await latest(client, isolation_level=1) == start
        p, _brokers = await client.partition_state(TOPIC)
        follower = next(b for b in p.replica_nodes if b != p.leader_id)
        await asyncio.sleep(1)  # the follower has the batches
    finally:
        await client.close()

    def tool(*args: str) -> list[list[str]]:
        return transactions_tool(cluster.bootstrap, list(args), tmp_path)

    where = ("--topic", TOPIC, "--partition", "0")
    # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp CurrentTransactionStartOffset
    expected = [str(pid), "0", "-1", "1", "1700000000000", str(start)]
    assert await asyncio.to_thread(tool, "describe-producers", "--broker-id", str(follower), *where) == [
        expected
    ]
    # Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp Duration(min)
    hanging = await asyncio.to_thread(
        tool, "find-hanging", "--broker-id", str(follower), "--max-transaction-timeout", "0"
    )
    assert [row[:7] for row in hanging] == [[TOPIC, "0", str(pid), "0", "-1", str(start), "1700000000000"]]

    await asyncio.to_thread(tool, "abort", *where, "--start-offset", str(start))
    assert (
        await asyncio.to_thread(tool, "find-hanging", "--topic", TOPIC, "--max-transaction-timeout", "0")
        == []
    )
    [row] = await asyncio.to_thread(tool, "describe-producers", *where)  # from the leader
    assert row[0] == str(pid) and row[2] == "0" and row[-1] == "None"  # the abort's coordinator epoch
    client = MiniClient(cluster.bootstrap)
    try:
        assert await latest(client, isolation_level=1) == after + 2  # past "after" and the abort marker
    finally:
        await client.close()
    assert await asyncio.to_thread(consume, cluster.bootstrap, "read_committed", 1, 5.0) == [b"after"]
