"""What the Fetch handler reads of a request, at every version the broker listener registers: each field
from the version that has it (FetchRequest.Builder's fields by version), the default before."""

from __future__ import annotations

import dataclasses
import sys
import uuid
from typing import Any

import pytest

from epochkraft.broker.fetch_session import FINAL_EPOCH, INVALID_SESSION_ID, PartitionData
from epochkraft.protocol.api import BROKER
from epochkraft.protocol.framing import request_class
from epochkraft.server.handlers import k01_fetch, served

TOPIC_ID = uuid.UUID(int=42)
FETCH = served(BROKER)[1]
VERSIONS = range(FETCH.min_version, FETCH.max_version + 1)


def built(cls: type, **values: object) -> Any:
    """An instance of a kio class of one version from the values its fields take (others: defaults)."""
    return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})


def fetch_request(version: int) -> Any:
    cls = request_class(1, version)
    schema = sys.modules[cls.__module__]
    topic = {"topic": "t", "topic_id": TOPIC_ID}
    partition = built(
        schema.FetchPartition,
        partition=0,
        current_leader_epoch=3,
        fetch_offset=5,
        last_fetched_epoch=2,
        log_start_offset=1,
        partition_max_bytes=100,
    )
    forgotten = () if version < 7 else (built(schema.ForgottenTopic, partitions=(1,), **topic),)
    replica_state = built(schema.ReplicaState, replica_id=2, replica_epoch=9) if version >= 15 else None
    return built(
        cls,
        replica_id=2,
        replica_state=replica_state,
        max_wait=0,
        min_bytes=0,
        session_id=7,
        session_epoch=1,
        topics=(built(schema.FetchTopic, partitions=(partition,), **topic),),
        forgotten_topics_data=forgotten,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_the_fields_read_at_each_version(version: int) -> None:
    request = fetch_request(version)
    key = TOPIC_ID if version >= 13 else "t"
    assert k01_fetch._follower_identity(request) == (2, 9 if version >= 15 else -1)
    assert k01_fetch._fetch_data(request) == {
        (key, 0): PartitionData(
            fetch_offset=5,
            max_bytes=100,
            current_leader_epoch=3 if version >= 9 else -1,
            last_fetched_epoch=2 if version >= 12 else -1,
            log_start_offset=1 if version >= 5 else -1,
        )
    }
    assert k01_fetch._to_forget(request) == ([(key, 1)] if version >= 7 else [])
    assert k01_fetch._session(request) == ((7, 1) if version >= 7 else (INVALID_SESSION_ID, FINAL_EPOCH))
