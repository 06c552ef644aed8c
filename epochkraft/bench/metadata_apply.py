"""One broker's event-loop time to apply a metadata change on a topic of many partitions
(``python -m epochkraft.bench.metadata_apply [--partitions 10000]``).

The broker's real ReplicaManager, ReplicaSet and metadata cache, over logs that touch no disk: a topic of
``--partitions`` partitions at RF 3 on brokers 1-3 is applied (this broker holds every partition, a third
as leader), then 20 topic config changes (retention.ms) and 20 one-partition ISR changes, each timed
twice: replayed into a delta over the published image and the next image published (``_replayed``), then
from the changes handed on to ``ReplicaManager.on_metadata`` returning; medians. What the disk adds
(creating the logs, their leader-epoch checkpoints) comes on top; the scale part of ``epochkraft bench``
measures the whole on real processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
import uuid
from typing import Any

import structlog
from kio.schema.alter_partition.v3.response import AlterPartitionResponse

from epochkraft.broker.alter_partition_manager import AlterPartitionRequest
from epochkraft.broker.log import LogManager
from epochkraft.broker.log.partition_log import LogConfig
from epochkraft.broker.metadata_cache import Changes, MetadataCache
from epochkraft.broker.replica_manager import ReplicaManager, log_config
from epochkraft.broker.settings import BrokerSettings
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.metadata_records import (
    BrokerEndpoint,
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)

ASSIGNMENTS = [(1, 2, 3), (2, 3, 1), (3, 1, 2)]


async def _no_controller(request: AlterPartitionRequest) -> AlterPartitionResponse:
    raise NetworkError("no controller: the bench applies metadata only")


class _Epochs:
    def assign(self, epoch: int, start_offset: int) -> None:
        pass


class _Log:
    """What the replica manager asks of a log on this path, in memory."""

    def __init__(self, config: LogConfig) -> None:
        self.config = config
        self.log_end_offset = 0
        self.epochs = _Epochs()

    def rebuild_producer_state(self, *args: object) -> None:
        pass


class _Broker:
    def __init__(self) -> None:
        self.cache = MetadataCache(1)
        self.logs = LogManager(tempfile.mkdtemp(prefix="epochkraft-apply-"), log_config(BrokerSettings()))
        in_memory: dict[tuple[str, int], Any] = self.logs.logs

        def get_or_create(topic: str, partition: int, config: LogConfig | None = None) -> Any:
            return in_memory.setdefault((topic, partition), _Log(config or self.logs.config))

        self.logs.get_or_create = get_or_create  # type: ignore[method-assign]
        self.manager = ReplicaManager(1, BrokerSettings(), self.logs, self.cache, lambda: 10, _no_controller)
        self.offset = 0

    async def apply(self, *records: object) -> tuple[float, float]:
        """Seconds to replay the records into a delta and publish the next image, then to carry its
        changes out (ReplicaManager.on_metadata)."""
        changes = Changes()
        started = time.perf_counter()
        self.cache.load(enumerate(records, start=self.offset), changes)
        self.offset += len(records)
        published = time.perf_counter()
        await self.manager.on_metadata(changes)
        return published - started, time.perf_counter() - published


async def measure(partitions: int) -> dict[str, Any]:
    broker = _Broker()
    endpoint = BrokerEndpoint(name="P", host="h", port=1, security_protocol=0)
    for b in (1, 2, 3):
        register = RegisterBrokerRecord(
            broker_id=b,
            incarnation_id=uuid.UUID(int=b),
            broker_epoch=10,
            end_points=(endpoint,),
            rack=None,
            fenced=True,
            in_controlled_shutdown=False,
        )
        await broker.apply(register, UnfenceBrokerRecord(id=b, epoch=10))
    topic_id = uuid.uuid4()
    created = await broker.apply(
        TopicRecord(name="scale", topic_id=topic_id),
        *(
            PartitionRecord(
                partition_id=i,
                topic_id=topic_id,
                replicas=ASSIGNMENTS[i % 3],
                isr=ASSIGNMENTS[i % 3],
                leader=ASSIGNMENTS[i % 3][0],
            )
            for i in range(partitions)
        ),
    )
    configs = [
        await broker.apply(
            ConfigRecord(resource_type=2, resource_name="scale", name="retention.ms", value=str(1000 + n))
        )
        for n in range(20)
    ]
    isr_changes = [
        await broker.apply(
            PartitionChangeRecord(partition_id=n, topic_id=topic_id, isr=ASSIGNMENTS[n % 3][:2])
        )
        for n in range(20)
    ]

    def median_ms(seconds: list[float]) -> float:
        return round(1000 * statistics.median(seconds), 3)

    return {
        "partitions": partitions,
        "creation_replayed_s": round(created[0], 2),
        "creation_applied_s": round(created[1], 2),
        "topic_config_change_replayed_ms": median_ms([replayed for replayed, _ in configs]),
        "topic_config_change_ms": median_ms([applied for _, applied in configs]),
        "one_partition_isr_change_replayed_ms": median_ms([replayed for replayed, _ in isr_changes]),
        "one_partition_isr_change_ms": median_ms([applied for _, applied in isr_changes]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m epochkraft.bench.metadata_apply", description=__doc__)
    parser.add_argument("--partitions", type=int, default=10_000)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(json.dumps(asyncio.run(measure(args.partitions))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
