#!/usr/bin/env python3
"""AlterPartition throughput of a real controller process through one connection.

Starts ``epochkraft controller`` with a data dir (every batch is appended to the on-disk metadata log),
registers and unfences three brokers, creates one topic of ``max(batch sizes)`` partitions on [1, 2, 3],
then for each batch size sends AlterPartition v3 requests one at a time (request -> response -> next) from
the leader, alternating shrink to [1, 2] and expand back to [1, 2, 3], so every partition in every request
is a committed change. Prints requests/s and partition changes/s per batch size.

    .venv/bin/python scripts/bench_controller.py [--seconds 5] [--batch 1 --batch 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import tempfile
import time
import uuid
from pathlib import Path

from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v3.request import BrokerRegistrationRequest, Listener
from kio.schema.create_topics.v7 import request as ct

from epochkraft.chaos.processes import LocalProcess
from epochkraft.net.client import KafkaClient
from epochkraft.protocol.errors import ErrorCode

CLUSTER = "bench-cluster-000000000"
BROKERS = (1, 2, 3)


async def setup(client: KafkaClient, partitions: int) -> tuple[dict[int, int], uuid.UUID]:
    epochs: dict[int, int] = {}
    for broker_id in BROKERS:
        registered = await client.send(
            BrokerRegistrationRequest(
                broker_id=broker_id,
                cluster_id=CLUSTER,
                incarnation_id=uuid.uuid4(),
                listeners=(
                    Listener(name="PLAINTEXT", host="127.0.0.1", port=19000 + broker_id, security_protocol=0),
                ),
                features=(),
                rack=None,
                is_migrating_zk_broker=False,
                log_dirs=(),
                previous_broker_epoch=-1,
            )
        )
        assert registered.error_code == ErrorCode.none, registered
        epochs[broker_id] = registered.broker_epoch
        beat = await client.send(
            BrokerHeartbeatRequest(
                broker_id=broker_id,
                broker_epoch=registered.broker_epoch,
                current_metadata_offset=1 << 40,
                want_fence=False,
                want_shut_down=False,
                offline_log_dirs=(),
            )
        )
        assert not beat.is_fenced, beat
    topic = ct.CreatableTopic(
        name="bench",
        num_partitions=-1,
        replication_factor=-1,
        assignments=tuple(
            ct.CreatableReplicaAssignment(partition_index=i, broker_ids=BROKERS) for i in range(partitions)
        ),
        configs=(),
    )
    created = await client.send(
        ct.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False)
    )
    assert created.topics[0].error_code == ErrorCode.none, created
    return epochs, created.topics[0].topic_id


def request(
    epochs: dict[int, int], topic_id: uuid.UUID, partition_epochs: dict[int, int], batch: int, shrink: bool
) -> ap3.AlterPartitionRequest:
    isr = BROKERS[:2] if shrink else BROKERS
    states = tuple(ap3.BrokerState(broker_id=b, broker_epoch=epochs[b]) for b in isr)
    return ap3.AlterPartitionRequest(
        broker_id=1,
        broker_epoch=epochs[1],
        topics=(
            ap3.TopicData(
                topic_id=topic_id,
                partitions=tuple(
                    ap3.PartitionData(
                        partition_index=i,
                        leader_epoch=0,
                        new_isr_with_epochs=states,
                        leader_recovery_state=0,
                        partition_epoch=partition_epochs[i],
                    )
                    for i in range(batch)
                ),
            ),
        ),
    )


async def run(port: int, batches: list[int], seconds: float) -> None:
    async with KafkaClient("127.0.0.1", port, request_timeout_ms=60000) as client:
        epochs, topic_id = await setup(client, max(batches))
        partition_epochs = dict.fromkeys(range(max(batches)), 0)
        shrink = True
        for batch in batches:
            requests = changes = 0
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                response = await client.send(request(epochs, topic_id, partition_epochs, batch, shrink))
                assert response.error_code == ErrorCode.none, response
                for p in response.topics[0].partitions:
                    assert p.error_code == ErrorCode.none, p
                    partition_epochs[p.partition_index] = p.partition_epoch
                    changes += 1
                requests += 1
                shrink = not shrink
            elapsed = time.perf_counter() - started
            print(
                f"batch={batch:5d} partitions/request: {requests / elapsed:9.1f} requests/s  "
                f"{changes / elapsed:10.1f} partition changes/s  ({requests} requests in {elapsed:.1f} s)"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration per batch size")
    parser.add_argument("--batch", type=int, action="append", help="partitions per request (repeatable)")
    args = parser.parse_args()
    batches = args.batch or [1, 1000]
    with tempfile.TemporaryDirectory(prefix="bench-controller-") as tmp:
        daemon = LocalProcess(
            "controller",
            # A long session so the three idle brokers stay unfenced for the whole run.
            [
                "controller",
                "--listen",
                "127.0.0.1:0",
                "--cluster-id",
                CLUSTER,
                "--session-timeout-ms",
                "600000",
                "--data-dir",
                str(Path(tmp) / "controller"),
            ],
            Path(tmp) / "controller.log",
        )
        daemon.start()
        try:
            asyncio.run(run(daemon.port, batches, args.seconds))
        finally:
            daemon.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
