"""Controller load through the wire: AlterPartition partition changes per second over one connection,
and the registration and heartbeats of 100 simulated brokers."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from pathlib import Path
from typing import Any

from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.alter_partition.v3.response import AlterPartitionResponse
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Listener
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.schema.create_topics.v7 import request as ct
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64, u16

from epochkraft.harness.processes import LocalProcess
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode

CLUSTER = "bench-controller"


def registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=BrokerId(broker_id),
        cluster_id=CLUSTER,
        incarnation_id=uuid.uuid4(),
        listeners=(
            Listener(
                name="PLAINTEXT", host="127.0.0.1", port=u16(20000 + broker_id), security_protocol=i16(0)
            ),
        ),
        features=(),
        rack=None,
        is_migrating_zk_broker=False,
        log_dirs=(),
        previous_broker_epoch=i64(-1),
    )


def heartbeat(broker_id: int, epoch: int) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        broker_id=BrokerId(broker_id),
        broker_epoch=i64(epoch),
        current_metadata_offset=i64(1 << 40),
        want_fence=False,
        want_shut_down=False,
        offline_log_dirs=(),
    )


class IsrFlipper:
    """One leader's AlterPartition driver: flips each partition's ISR between (leader, a) and all three
    replicas, tracking the partition epochs the controller answers with."""

    def __init__(self, client: KafkaClient, leader: int, epochs: dict[int, int], topic_id: Any, size: int):
        self.client = client
        self.leader = leader
        self.epochs = epochs
        self.topic_id = topic_id
        self.size = size
        self.partition_epochs = dict.fromkeys(range(size), 0)
        self.full = dict.fromkeys(range(size), True)
        others = [b for b in epochs if b != leader]
        self.shrunk = (leader, others[0])
        self.everyone = (leader, *others)

    def _item(self, p: int) -> ap3.PartitionData:
        members = self.shrunk if self.full[p] else self.everyone
        return ap3.PartitionData(
            partition_index=i32(p),
            leader_epoch=i32(0),
            partition_epoch=i32(self.partition_epochs[p]),
            leader_recovery_state=i8(0),
            new_isr_with_epochs=tuple(
                ap3.BrokerState(broker_id=BrokerId(b), broker_epoch=i64(self.epochs[b])) for b in members
            ),
        )

    async def alter(self, batch: list[int]) -> int:
        """One request; the number of partition changes the controller accepted."""
        request = ap3.AlterPartitionRequest(
            broker_id=BrokerId(self.leader),
            broker_epoch=i64(self.epochs[self.leader]),
            topics=(ap3.TopicData(topic_id=self.topic_id, partitions=tuple(self._item(p) for p in batch)),),
        )
        response = await self.client.send(request, AlterPartitionResponse)
        done = 0
        for data in response.topics[0].partitions:
            if data.error_code == ErrorCode.none:
                self.partition_epochs[data.partition_index] = data.partition_epoch
                self.full[data.partition_index] = not self.full[data.partition_index]
                done += 1
        return done

    async def run(self, per_request: int, requests: int) -> int:
        changes = 0
        for r in range(requests):
            first = (r * per_request) % self.size
            changes += await self.alter([(first + i) % self.size for i in range(per_request)])
        return changes


async def _create(client: KafkaClient, name: str, size: int, replicas: tuple[int, ...]) -> Any:
    topic = ct.CreatableTopic(
        name=TopicName(name),
        num_partitions=i32(-1),
        replication_factor=i16(-1),
        configs=(),
        assignments=tuple(
            ct.CreatableReplicaAssignment(
                partition_index=i32(i), broker_ids=tuple(BrokerId(b) for b in replicas)
            )
            for i in range(size)
        ),
    )
    created = await client.send(
        ct.CreateTopicsRequest(
            topics=(topic,), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), validate_only=False
        ),
        CreateTopicsResponse,
    )
    return created.topics[0].topic_id


async def run(work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    controller = LocalProcess(
        "controller",
        ["controller", "--listen", "127.0.0.1:0", "--cluster-id", CLUSTER, "--data-dir", str(work / "data")],
        work / "controller.log",
    )
    controller.start()
    try:
        async with (
            KafkaClient("127.0.0.1", controller.port) as client,
            KafkaClient("127.0.0.1", controller.port) as second,
        ):
            epochs: dict[int, int] = {}
            for b in (1, 2, 3):
                epochs[b] = (await client.send(registration(b), BrokerRegistrationResponse)).broker_epoch
                await client.send(heartbeat(b, epochs[b]), BrokerHeartbeatResponse)
            size = 1000
            led_by_1 = IsrFlipper(client, 1, epochs, await _create(client, "isr-a", size, (1, 2, 3)), size)
            led_by_2 = IsrFlipper(second, 2, epochs, await _create(client, "isr-b", size, (2, 3, 1)), size)
            results: dict[str, Any] = {}
            # One request at a time from one broker: a round trip per change.
            start = time.monotonic()
            changes = await led_by_1.run(1, 2000)
            elapsed = time.monotonic() - start
            results["1_partitions_per_request"] = {
                "requests_per_s": round(2000 / elapsed),
                "partition_changes_per_s": round(changes / elapsed),
            }
            # Batched, two leaders each with a request in flight, as brokers send them concurrently:
            # the controller decides one while the other is encoded, sent and answered.
            requests = 30
            start = time.monotonic()
            done = await asyncio.gather(led_by_1.run(size, requests), led_by_2.run(size, requests))
            elapsed = time.monotonic() - start
            results["1000_partitions_per_request"] = {
                "brokers_sending": 2,
                "requests_per_s": round(2 * requests / elapsed),
                "partition_changes_per_s": round(sum(done) / elapsed),
            }
            start = time.monotonic()
            fleet = {}
            for b in range(100, 200):
                fleet[b] = (await client.send(registration(b), BrokerRegistrationResponse)).broker_epoch
            registered = time.monotonic() - start
            start = time.monotonic()
            beats = 0
            for _round in range(20):
                responses = await client.send_many(
                    [heartbeat(b, e) for b, e in fleet.items()], BrokerHeartbeatResponse
                )
                beats += sum(r.error_code == ErrorCode.none for r in responses)
            beat_seconds = time.monotonic() - start
            results["100_brokers"] = {
                "registrations_per_s": round(100 / registered),
                "heartbeats_per_s": round(beats / beat_seconds),
            }
            return results
    finally:
        controller.kill()
