"""A small Kafka client on kio for scenarios and tests: topics, metadata, produce with leader routing,
read to the high watermark. Exact control of every request, which real client libraries do not give."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from dataclasses import dataclass

from kio.schema.create_topics.v7 import request as ct
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.describe_topic_partitions.v0 import request as dtp
from kio.schema.describe_topic_partitions.v0.response import DescribeTopicPartitionsResponse
from kio.schema.fetch.v12 import request as f12
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.produce.v9 import request as pr
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64
from kio.static.protocol import RequestPayload

from epochkraft.net.client import KafkaClient, R
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.records import build_batch, decode_batches

SECONDS = i32Timedelta.parse(datetime.timedelta(seconds=10))


def split(bootstrap: str) -> list[tuple[str, int]]:
    return [(h, int(p)) for h, _, p in (a.rpartition(":") for a in bootstrap.split(","))]


@dataclass(frozen=True)
class PartitionView:
    """One partition as DescribeTopicPartitions answers it: leader (-1: none), replicas, ISR, ELR and last
    known ELR (sorted)."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]


class MiniClient:
    """Routes requests to partition leaders using Metadata, like a (very small) real client."""

    def __init__(self, bootstrap: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.addresses = split(bootstrap)
        self.ssl_context = ssl_context
        self.clients: dict[tuple[str, int], KafkaClient] = {}

    def _client(self, address: tuple[str, int]) -> KafkaClient:
        if address not in self.clients:
            self.clients[address] = KafkaClient(
                *address, request_timeout_ms=15_000, ssl_context=self.ssl_context
            )
        return self.clients[address]

    async def any_send(self, request: RequestPayload, response_type: type[R]) -> R:
        last: Exception | None = None
        for address in self.addresses:
            try:
                return await self._client(address).send(request, response_type)
            except NetworkError as exc:
                last = exc
        raise last or RuntimeError("no broker")

    async def create_topic(
        self,
        name: str,
        partitions: int = -1,
        rf: int = -1,
        configs: dict[str, str] | None = None,
        assignment: list[list[int]] | None = None,
    ):
        topic = ct.CreatableTopic(
            name=TopicName(name),
            num_partitions=i32(partitions),
            replication_factor=i16(rf),
            assignments=tuple(
                ct.CreatableReplicaAssignment(
                    partition_index=i32(i), broker_ids=tuple(BrokerId(b) for b in r)
                )
                for i, r in enumerate(assignment or [])
            ),
            configs=tuple(ct.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
        )
        response = await self.any_send(
            ct.CreateTopicsRequest(topics=(topic,), timeout=SECONDS, validate_only=False),
            CreateTopicsResponse,
        )
        return response.topics[0].error_code

    async def metadata(self, topic: str) -> MetadataResponse:
        request = md.MetadataRequest(
            topics=(md.MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return await self.any_send(request, MetadataResponse)

    async def partition_state(self, topic: str, partition: int = 0):
        response = await self.metadata(topic)
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        p = next((p for p in response.topics[0].partitions if p.partition_index == partition), None)
        if p is None:  # a topic just created: Kafka's brokers may not list its partitions yet
            raise LookupError(f"{topic}-{partition} is not in the metadata answer")
        return p, brokers

    async def describe_partitions(self, topic: str) -> dict[int, PartitionView]:
        """Every partition of ``topic`` as DescribeTopicPartitions (75) answers, with its ELR (KIP-966)."""
        request = dtp.DescribeTopicPartitionsRequest(
            topics=(dtp.TopicRequest(name=TopicName(topic)),), response_partition_limit=i32(2000), cursor=None
        )
        response = await self.any_send(request, DescribeTopicPartitionsResponse)
        assert response.topics[0].error_code == ErrorCode.none, response.topics[0].error_code
        return {
            p.partition_index: PartitionView(
                leader=p.leader_id,
                replicas=tuple(p.replica_nodes),
                isr=tuple(sorted(p.isr_nodes)),
                elr=tuple(sorted(p.eligible_leader_replicas or ())),
                last_known_elr=tuple(sorted(p.last_known_elr or ())),
            )
            for p in response.topics[0].partitions
        }

    async def produce(
        self, topic: str, partition: int, values: list[bytes], acks: int = -1, retries: int = 40
    ):
        """(error, base offset) from the partition's leader, retrying leader moves like a client."""
        batch = build_batch([(None, v, (), 1_700_000_000_000 + i) for i, v in enumerate(values)])
        error, base_offset, _message = await self.produce_batch(topic, partition, batch, acks, retries)
        return error, base_offset

    async def produce_batch(
        self, topic: str, partition: int, batch: bytes, acks: int = -1, retries: int = 40
    ) -> tuple[ErrorCode, int, str | None]:
        """(error, base offset, error message) for the record bytes ``batch`` sent as they are."""
        result = await self.produce_response(topic, partition, batch, acks, retries)
        if result is None:
            return ErrorCode.unknown_server_error, -1, None
        return result.error_code, result.base_offset, result.error_message

    async def produce_response(
        self, topic: str, partition: int, batch: bytes, acks: int = -1, retries: int = 40
    ):
        """The partition's ProduceResponse (with record_errors) for ``batch`` sent as it is to the leader,
        retrying leader moves like a client; None if no leader answered."""
        request = pr.ProduceRequest(
            transactional_id=None,
            acks=i16(acks),
            timeout=SECONDS,
            topic_data=(
                pr.TopicProduceData(
                    name=TopicName(topic),
                    partition_data=(pr.PartitionProduceData(index=i32(partition), records=Records(batch)),),
                ),
            ),
        )
        result = None
        for _ in range(retries):
            try:
                p, brokers = await self.partition_state(topic, partition)
            except LookupError:
                await asyncio.sleep(0.25)
                continue
            if p.leader_id < 0 or p.leader_id not in brokers:
                await asyncio.sleep(0.25)
                continue
            try:
                response = await self._client(brokers[p.leader_id]).send(request, ProduceResponse)
            except NetworkError:
                await asyncio.sleep(0.25)
                continue
            result = response.responses[0].partition_responses[0]
            if result.error_code in (
                ErrorCode.not_leader_or_follower,
                ErrorCode.not_enough_replicas,
                ErrorCode.request_timed_out,
            ):
                await asyncio.sleep(0.25)
                continue
            return result
        return result

    async def read_all(self, topic: str, partition: int = 0) -> list[tuple[int, bytes | None]]:
        """Every record up to the high watermark, from the leader (None: a tombstone's value)."""
        return (await self.read_retained(topic, partition))[1]

    async def read_retained(
        self, topic: str, partition: int = 0
    ) -> tuple[int, list[tuple[int, bytes | None]]]:
        """(log start offset, every record from it up to the high watermark), from the leader; a read
        below the log start (retention ran meanwhile) goes on from the new one."""
        p, brokers = await self.partition_state(topic, partition)
        client = self._client(brokers[p.leader_id])
        offset, start = 0, 0
        out: list[tuple[int, bytes | None]] = []
        while True:
            request = f12.FetchRequest(
                replica_id=BrokerId(-1),
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)),
                min_bytes=i32(1),
                max_bytes=i32(1 << 24),
                isolation_level=i8(0),
                session_id=i32(0),
                session_epoch=i32(-1),
                topics=(
                    f12.FetchTopic(
                        topic=TopicName(topic),
                        partitions=(
                            f12.FetchPartition(
                                partition=i32(partition),
                                current_leader_epoch=i32(-1),
                                fetch_offset=i64(offset),
                                last_fetched_epoch=i32(-1),
                                log_start_offset=i64(-1),
                                partition_max_bytes=i32(1 << 24),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            )
            data = (await client.send(request, FetchResponse)).responses[0].partitions[0]
            if data.error_code == ErrorCode.offset_out_of_range and offset < data.log_start_offset:
                offset = start = data.log_start_offset
                continue
            assert data.error_code == ErrorCode.none, data.error_code
            start = max(start, data.log_start_offset)
            batches = decode_batches(data.records or b"")
            for batch in batches:
                out += [(batch.offset_of(r), r.value) for r in batch.records if batch.offset_of(r) >= offset]
            if not batches or out[-1][0] + 1 >= data.high_watermark:
                return start, out
            offset = out[-1][0] + 1

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()


async def describe_quorum(address: str, timeout_ms: int = 5_000):
    """DescribeQuorum (55) of ``__cluster_metadata``-0 from the controller at ``address``: the leader's
    view (leader, epoch, high watermark, every voter's log end), or NOT_LEADER_OR_FOLLOWER naming the
    leader another voter knows (the partition's error_code says which)."""
    from kio.schema.describe_quorum.v1 import request as dq
    from kio.schema.describe_quorum.v1.response import DescribeQuorumResponse

    host, port = split(address)[0]
    client = KafkaClient(host, port, request_timeout_ms=timeout_ms, connect_timeout_ms=timeout_ms)
    try:
        request = dq.DescribeQuorumRequest(
            topics=(
                dq.TopicData(
                    topic_name=TopicName("__cluster_metadata"),
                    partitions=(dq.PartitionData(partition_index=i32(0)),),
                ),
            )
        )
        response = await client.send(request, DescribeQuorumResponse)
        return response.topics[0].partitions[0]
    finally:
        await client.close()
