"""Controller load through the wire: AlterPartition partition changes per second over one connection,
and the registration and heartbeats of 100 simulated brokers."""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path
from typing import Any

from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v3.request import BrokerRegistrationRequest, Listener
from kio.schema.create_topics.v7 import request as ct

from epochkraft.chaos.processes import LocalProcess
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode

CLUSTER = "bench-controller"


def registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER,
        incarnation_id=uuid.uuid4(),
        listeners=(
            Listener(name="PLAINTEXT", host="127.0.0.1", port=20000 + broker_id, security_protocol=0),
        ),
        features=(),
        rack=None,
        is_migrating_zk_broker=False,
        log_dirs=(),
        previous_broker_epoch=-1,
    )


def heartbeat(broker_id: int, epoch: int) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        broker_id=broker_id,
        broker_epoch=epoch,
        current_metadata_offset=1 << 40,
        want_fence=False,
        want_shut_down=False,
        offline_log_dirs=(),
    )


async def run(work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    controller = LocalProcess(
        "controller",
        ["controller", "--listen", "127.0.0.1:0", "--cluster-id", CLUSTER, "--data-dir", str(work / "data")],
        work / "controller.log",
    )
    controller.start()
    try:
        async with KafkaClient("127.0.0.1", controller.port) as client:
            epochs = {}
            for b in (1, 2, 3):
                epochs[b] = (await client.send(registration(b))).broker_epoch
                await client.send(heartbeat(b, epochs[b]))
            partitions = 1000
            topic = ct.CreatableTopic(
                name="isr",
                num_partitions=-1,
                replication_factor=-1,
                configs=(),
                assignments=tuple(
                    ct.CreatableReplicaAssignment(partition_index=i, broker_ids=(1, 2, 3))
                    for i in range(partitions)
                ),
            )
            created = await client.send(
                ct.CreateTopicsRequest(
                    topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False
                )
            )
            topic_id = created.topics[0].topic_id
            partition_epochs = dict.fromkeys(range(partitions), 0)
            shrunk = dict.fromkeys(range(partitions), False)

            def item(p: int) -> ap3.PartitionData:
                members = (1, 2, 3) if shrunk[p] else (1, 2)
                return ap3.PartitionData(
                    partition_index=p,
                    leader_epoch=0,
                    partition_epoch=partition_epochs[p],
                    leader_recovery_state=0,
                    new_isr_with_epochs=tuple(
                        ap3.BrokerState(broker_id=b, broker_epoch=epochs[b]) for b in members
                    ),
                )

            async def alter(batch: list[int]) -> int:
                request = ap3.AlterPartitionRequest(
                    broker_id=1,
                    broker_epoch=epochs[1],
                    topics=(ap3.TopicData(topic_id=topic_id, partitions=tuple(item(p) for p in batch)),),
                )
                response = await client.send(request)
                done = 0
                for data in response.topics[0].partitions:
                    if data.error_code == ErrorCode.none:
                        partition_epochs[data.partition_index] = data.partition_epoch
                        shrunk[data.partition_index] = not shrunk[data.partition_index]
                        done += 1
                return done

            results: dict[str, Any] = {}
            for per_request, requests in ((1, 2000), (1000, 40)):
                start = time.monotonic()
                changes = 0
                for r in range(requests):
                    first = (r * per_request) % partitions
                    changes += await alter([(first + i) % partitions for i in range(per_request)])
                elapsed = time.monotonic() - start
                results[f"{per_request}_partitions_per_request"] = {
                    "requests_per_s": round(requests / elapsed),
                    "partition_changes_per_s": round(changes / elapsed),
                }
            start = time.monotonic()
            fleet = {}
            for b in range(100, 200):
                fleet[b] = (await client.send(registration(b))).broker_epoch
            registered = time.monotonic() - start
            start = time.monotonic()
            beats = 0
            for _round in range(20):
                responses = await client.send_many([heartbeat(b, e) for b, e in fleet.items()])
                beats += sum(r.error_code == ErrorCode.none for r in responses)
            beat_seconds = time.monotonic() - start
            results["100_brokers"] = {
                "registrations_per_s": round(100 / registered),
                "heartbeats_per_s": round(beats / beat_seconds),
            }
            return results
    finally:
        controller.kill()
