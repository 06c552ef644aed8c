"""The controller id a broker names in Metadata and DescribeCluster (not a handler itself: no leading 'k').

A KRaft broker names a live broker chosen at random, a new one in each answer (Kafka's KafkaApis with
KRaftMetadataCache.getRandomAliveBrokerId): admin clients send their controller-bound requests (CreateTopics,
IncrementalAlterConfigs ...) to that broker, which forwards them, so many clients spread over every
broker's forwarding channel instead of all queueing on one broker's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from kio.schema.types import BrokerId

NO_CONTROLLER = BrokerId(-1)


def random_broker_id(
    broker_ids: Sequence[BrokerId], choice: Callable[[Sequence[BrokerId]], BrokerId] = random.choice
) -> BrokerId:
    """One of ``broker_ids`` (the live brokers the answer lists) at random, NO_CONTROLLER for none."""
    return choice(broker_ids) if broker_ids else NO_CONTROLLER
