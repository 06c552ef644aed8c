"""A null broker: the same framing, dispatch and Produce/Metadata handlers as a real broker, answering
produce requests without storing or replicating anything. The ceiling for a Python asyncio server here.

``python -m epochkraft.bench.null_broker --port P --partitions N``
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any, cast

import uvloop

from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.producer_id_manager import GeneratedProducerId, RpcProducerIdManager
from epochkraft.broker.replica_manager import ProduceResult
from epochkraft.broker.settings import BrokerSettings
from epochkraft.protocol.api import BROKER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    BrokerEndpoint,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from epochkraft.protocol.records import iter_batches
from epochkraft.server.apis import BrokerApis
from epochkraft.server.socket_server import KafkaServer

TOPIC = "bench"


class NullReplicaManager:
    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], int] = {}

    async def append(
        self,
        topic: str,
        index: int,
        records: bytes | memoryview,
        acks: int,
        timeout_ms: int,
        verification_guard: object = None,
    ) -> ProduceResult:
        count = sum(h.record_count for _, h in iter_batches(records))  # parse headers, as the real path does
        base = self.offsets.get((topic, index), 0)
        self.offsets[(topic, index)] = base + count
        return ProduceResult(ErrorCode.none, base, 0)

    def replica(self, topic: str, index: int) -> Any:
        return None


class NullNode:
    def __init__(self, port: int, partitions: int) -> None:
        self.settings = BrokerSettings()
        self.cluster_id = "null-cluster"
        self.cache = MetadataCache()
        changes = Changes()
        topic_id = uuid.uuid4()
        records = [
            RegisterBrokerRecord(
                broker_id=1,
                incarnation_id=uuid.uuid4(),
                broker_epoch=0,
                fenced=False,
                rack=None,
                end_points=(BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=port),),
            ),
            TopicRecord(name=TOPIC, topic_id=topic_id),
            *[
                PartitionRecord(
                    partition_id=p,
                    topic_id=topic_id,
                    replicas=(1,),
                    isr=(1,),
                    leader=1,
                    leader_epoch=0,
                    partition_epoch=0,
                )
                for p in range(partitions)
            ],
        ]
        self.cache.load(enumerate(records), changes)
        self.replica_manager = NullReplicaManager()
        self.producer_ids = RpcProducerIdManager(1)
        self.producer_ids.handle_allocate_producer_ids_response(0, ErrorCode.none, 0, 2**62)  # no controller

    def generate_producer_id(self) -> GeneratedProducerId:
        return self.producer_ids.generate_producer_id(0)

    def observe_produce(self, seconds: float) -> None:
        pass

    def observe_fetch(self, is_follower: bool, seconds: float) -> None:
        pass


async def serve(port: int, partitions: int) -> None:
    # NullNode has only what Produce, Metadata and ApiVersions reach, not all of BrokerApis.
    server = KafkaServer(BROKER, cast(BrokerApis, NullNode(port, partitions)), "127.0.0.1", port)
    await server.start()
    print(f"null broker ready listen=127.0.0.1:{server.port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(args.port, args.partitions))


if __name__ == "__main__":
    main()
