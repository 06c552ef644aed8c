"""Message versions Kafka serves that kio (0.6.5) has no schema for, written as kio writes its own.

``framing.request_class`` and ``response_class`` look here before kio, so these decode, encode and convert
(protocol/versions) like any kio class.

- ApiVersions v5 (Kafka 4.4, KIP-1242): the request names the cluster and node the client means to reach;
  the response is v4's.
- DeleteGroups v3 (Kafka 4.4): the request is v2's; each group's result carries an error message.
- DescribeTransactions v0 with the start time as the int64 it is on the wire: kio reads it as a datetime
  and refuses -1, which Kafka answers for a transaction not started (Empty, Complete*).

No ``from __future__ import annotations`` here: kio reads the field types at run time.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.api_versions.v4 import response as v4
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequestV5:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    client_software_name: str = field(metadata={"kafka_type": "string"})
    """The name of the client."""
    client_software_version: str = field(metadata={"kafka_type": "string"})
    """The version of the client."""
    cluster_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The cluster id the client means to reach; given with node_id or not at all."""
    node_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    """The node id the client means to reach; given with cluster_id or not at all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponseV5:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    api_keys: tuple[v4.ApiVersion, ...]
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    supported_features: tuple[v4.SupportedFeatureKey, ...] = field(metadata={"tag": 0}, default=())
    finalized_features_epoch: i64 = field(metadata={"kafka_type": "int64", "tag": 1}, default=i64(-1))
    finalized_features: tuple[v4.FinalizedFeatureKey, ...] = field(metadata={"tag": 2}, default=())
    zk_migration_ready: bool = field(metadata={"kafka_type": "bool", "tag": 3}, default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsRequestV3:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(42)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    groups_names: tuple[GroupId, ...] = field(metadata={"kafka_type": "string"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableGroupResultV3:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(42)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The error's cause, or null if there was no error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsResponseV3:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(42)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[DeletableGroupResultV3, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTransactionTopicV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    topic: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTransactionV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_start_time_ms: i64 = field(metadata={"kafka_type": "int64"})
    """Epoch milliseconds the ongoing transaction started; -1 when none is."""
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[DescribedTransactionTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[DescribedTransactionV0, ...]


REQUESTS: dict[tuple[int, int], type] = {(18, 5): ApiVersionsRequestV5, (42, 3): DeleteGroupsRequestV3}
RESPONSES: dict[tuple[int, int], type] = {
    (18, 5): ApiVersionsResponseV5,
    (42, 3): DeleteGroupsResponseV3,
    (65, 0): DescribeTransactionsResponseV0,
}
