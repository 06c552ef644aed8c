"""Differential conformance: the same kio-built requests sent to Apache Kafka and to epochkraft, the answers
compared field by field.

A ``Side`` is one cluster answering (its brokers found from Metadata); each request goes to the node a
client would send it to (the partition's leader, the group's coordinator). ``differences`` walks two
decoded responses of the same class and names every field whose values differ, except the fields that
must differ between two clusters (``MASKED``: ids, hosts, ports, throttle times, cluster ids, generated
member and producer ids, error message texts; ``NORMALIZED``: a log append time compared by its presence). ``KNOWN_DIFFERENCES`` lists what differs on purpose, each
with its reason; docs/kafka-compatibility.md ("Compared with Kafka") carries the same table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.find_coordinator.v4 import request as fc
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.types import TopicName
from kio.static.primitive import i8

from epochkraft.net.client import KafkaClient
from epochkraft.protocol.versions import response_for

# Fields whose values belong to one cluster, not to the protocol: compared neither in value nor presence.
MASKED = frozenset(
    {
        "throttle_time",
        "cluster_id",
        "controller_id",
        "node_id",
        "host",
        "port",
        "leader_id",
        "topic_id",
        "member_id",
        "leader",  # JoinGroup: the generated member id of the group's leader
        "producer_id",
        "error_message",  # the text is each broker's own; the error code is the contract
        "coordinator_key",
        "replica_nodes",
        "isr_nodes",
        "offline_replicas",
        "eligible_leader_replicas",
        "last_known_elr",
        "rack",
        "incarnation_id",
        "broker_epoch",
        "log_dir",  # DescribeLogDirs: paths
        "path",
        "size",  # bytes on disk: each log's own index and segment overheads
        "usable_bytes",
        "total_bytes",
        "finalized_features_epoch",
        "supported_features",
        "finalized_features",
        "zk_migration_ready",
    }
)
# Fields compared by what they say, not their value: a Produce response's log_append_time is each broker's
# clock, so only whether there is one (LogAppendTime) or not (-1: CreateTime) is compared.
NORMALIZED = {"log_append_time": lambda value: "none" if value is None else "the leader's append time"}


@dataclass(frozen=True)
class Difference:
    path: str
    ours: object
    theirs: object

    def __str__(self) -> str:
        return f"{self.path}: ours {self.ours!r}, Kafka {self.theirs!r}"


def _plain(value: object) -> object:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, bytes | memoryview):
        return bytes(value)
    return value


KEYS = ("name", "api_key", "group_id", "partition_index", "index", "topic", "config_name")


def _key(item: object) -> str | None:
    for name in KEYS:
        if dataclasses.is_dataclass(item) and hasattr(item, name):
            return str(getattr(item, name))
    return None


def _sort_key(item: object) -> str:
    """Arrays whose order means nothing (configs, groups, api keys) compare sorted by their name or key."""
    key = _key(item)
    return repr(item) if key is None else f"{key:>40}"


def differences(ours: object, theirs: object, path: str = "", masked: Iterable[str] = ()) -> list[Difference]:
    """Every field of two decoded kio entities that differs, by its path (``topics[0].error_code``)."""
    skip = MASKED | frozenset(masked)
    found: list[Difference] = []
    if dataclasses.is_dataclass(ours) and dataclasses.is_dataclass(theirs):
        for f in dataclasses.fields(ours):
            if f.name in skip:
                continue
            sub = f"{path}.{f.name}" if path else f.name
            found += differences(getattr(ours, f.name), getattr(theirs, f.name), sub, skip)
        return found
    if isinstance(ours, tuple) and isinstance(theirs, tuple):
        if len(ours) != len(theirs):
            mine, kafkas = {_key(i) for i in ours}, {_key(i) for i in theirs}
            if None in mine or None in kafkas:
                return [Difference(f"{path}[len]", len(ours), len(theirs))]
            # Entries with a name: which ones only one side has.
            return [
                Difference(f"{path}[{k}]", k in mine, k in kafkas)
                for k in sorted(k for k in mine ^ kafkas if k is not None)
            ]
        if ours and dataclasses.is_dataclass(ours[0]):
            ours, theirs = sorted(ours, key=_sort_key), sorted(theirs, key=_sort_key)
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            key = _key(a)
            label = i if key is None or key != _key(b) else key  # by name where the entries have one
            found += differences(a, b, f"{path}[{label}]", skip)
        return found
    field = path.rsplit(".", 1)[-1]
    if field in NORMALIZED:
        ours, theirs = NORMALIZED[field](ours), NORMALIZED[field](theirs)
    if _plain(ours) != _plain(theirs):
        found.append(Difference(path, _plain(ours), _plain(theirs)))
    return found


# ---- the differences kept on purpose --------------------------------------------------------------------
@dataclass(frozen=True)
class KnownDifference:
    """A difference that stays: which API and versions, which case (None: any), which field paths (a
    regular expression matched against the whole path), and why."""

    api_key: int
    versions: tuple[int, int]
    case: str | None
    path: str
    reason: str

    def covers(self, api_key: int, version: int, case: str, difference: Difference) -> bool:
        return (
            api_key == self.api_key
            and self.versions[0] <= version <= self.versions[1]
            and (self.case is None or self.case == case)
            and re.fullmatch(self.path, difference.path) is not None
        )


ANY = (0, 99)
KNOWN_DIFFERENCES: tuple[KnownDifference, ...] = (
    KnownDifference(
        35,
        ANY,
        None,
        r"results\[.*\]\.topics\[.*\]\.partitions\[.*\]\.partition_size",
        "After the sweep's WriteTxnMarkers, which epochkraft appends (the row below), the partition also "
        "holds those markers.",
    ),
    KnownDifference(
        82,
        ANY,
        None,
        r"error_code|current_leader\..*",
        "UpdateRaftVoter to a single controller (the comparison's: no Raft quorum, so no leader epoch to "
        "check): INVALID_REQUEST; Kafka's quorum checks the request's leader epoch first "
        "(FENCED_LEADER_EPOCH with the current leader).",
    ),
    KnownDifference(
        27,
        ANY,
        None,
        r"markers\[.*\]\.topics\[.*\]\.partitions\[.*\]\.error_code",
        "A marker for no producer (producer id and epoch -1, the sweep's values, which no coordinator "
        "sends): epochkraft appends it, changing no producer's state (as Kafka's producer state skips "
        "batches without a producer id); Kafka 4.4 answers UNKNOWN_SERVER_ERROR.",
    ),
    KnownDifference(
        1,
        ANY,
        "out-of-range",
        r"responses\[.*\]\.partitions\[.*\]\.(high_watermark|last_stable_offset|log_start_offset)",
        "An OFFSET_OUT_OF_RANGE partition carries the leader's high watermark and log start offset (Kafka: "
        "-1): our replica fetcher and clients restart at the log start offset without a ListOffsets round "
        "trip; Kafka's clients ignore these fields on an error.",
    ),
    KnownDifference(
        3,
        (0, 3),
        "unknown-topic",
        r"topics\[.*\]\.(error_code|partitions\[.*\])",
        "Auto-creation (Metadata v0-3 always asks for it): the topic is created before the answer, which "
        "lists it; Kafka's KRaft broker forwards the creation and answers UNKNOWN_TOPIC_OR_PARTITION "
        "meanwhile (DefaultAutoTopicCreationManager). Clients retry either answer the same way.",
    ),
    KnownDifference(
        19,
        (5, 99),
        None,
        r"topics\[.*\]\.configs\[.*\]",
        "CreateTopics v5+ (KIP-525): the new topic's configs are not returned (an empty array); Kafka lists "
        "them. Admin clients read them only through CreateTopicsResult.config(), which then has none.",
    ),
    KnownDifference(
        32,
        ANY,
        None,
        r"results\[.*\]\.configs\[.*\]\.documentation",
        "Each config's documentation (v3+, when asked) is a one-line text of our own, not Kafka's prose.",
    ),
    KnownDifference(
        1,
        (11, 99),
        "follower",
        r"responses\[.*\]\.partitions\[.*\]\.(error_code|high_watermark|last_stable_offset|"
        r"log_start_offset|records|current_leader\..*)|node_endpoints.*",
        "A consumer's Fetch (v11+) sent to a follower: Kafka serves it up to the follower's high watermark "
        "(KIP-392, fetch from follower); ours answers NOT_LEADER_OR_FOLLOWER (from v16 with the leader's "
        "KIP-951 hint). Clients fetch from a follower only when the leader names a preferred read replica, "
        "which ours never does (no replica.selector.class).",
    ),
    KnownDifference(
        62,
        ANY,
        None,
        "error_code",
        "The controller listener: a BrokerRegistration without log dirs (all v0-1 requests, and the sweep's "
        "v2-4) is accepted; Kafka 4.x refuses it (INVALID_REGISTRATION: directory assignment, KIP-858), and "
        "one whose metadata.version range misses the finalized level (UNSUPPORTED_VERSION). Our controller "
        "neither assigns directories nor checks a broker's feature ranges against the finalized levels; our "
        "brokers always send their log dir.",
    ),
    KnownDifference(
        64,
        ANY,
        "controller-existing",
        "error_code",
        "UnregisterBroker of the broker the sweep registered just before: ours had accepted that "
        "registration (see BrokerRegistration), Kafka had not (BROKER_ID_NOT_REGISTERED).",
    ),
    KnownDifference(
        59,
        ANY,
        None,
        r"error_code|topics\[.*\]",
        "FetchSnapshot on the controller listener for a topic other than __cluster_metadata: ours answers "
        "UNKNOWN_TOPIC_OR_PARTITION in the partition (KafkaRaftClient.handleFetchSnapshotRequest's own "
        "rule); Kafka 4.4.0's controller answers UNKNOWN_SERVER_ERROR with no topics.",
    ),
    KnownDifference(
        50,
        ANY,
        None,
        r"error_code|results\[.*\]\.error_code",
        "DescribeUserScramCredentials on the controller listener: Kafka's controller advertises it but "
        "answers UNKNOWN_SERVER_ERROR; ours describes the credentials (RESOURCE_NOT_FOUND for an unknown user).",
    ),
    KnownDifference(
        29,
        ANY,
        "DescribeAcls-unknown-pattern-type",
        "connection",
        "An ACL filter with an UNKNOWN enum: Kafka's request parsing fails and it closes the connection; "
        "ours answers with an error code (SECURITY_DISABLED without an authorizer), as it does "
        "wherever a response can carry one.",
    ),
)


# The entries of KNOWN_DIFFERENCES that explained a difference in this process: an entry never used in a
# whole run no longer describes anything and leaves the table.
USED: set[KnownDifference] = set()


def unexplained(
    api_key: int, version: int, case: str, found: list[Difference], known: Iterable[KnownDifference] = ()
) -> list[Difference]:
    table = tuple(known) or KNOWN_DIFFERENCES
    left = []
    for d in found:
        covering = [k for k in table if k.covers(api_key, version, case, d)]
        USED.update(covering)
        if not covering:
            left.append(d)
    return left


# ---- one cluster answering ----------------------------------------------------------------------------
GROUP_APIS = frozenset(
    {8, 9, 11, 12, 13, 14, 15, 28, 42, 47, 69}
)  # 28: TxnOffsetCommit, 69: ConsumerGroupDescribe
# The admin requests clients send to the node Metadata names as the controller (franz-go's
# kmsg.AdminRequest: CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, the reassignments,
# AlterUserScramCredentials). Kafka's brokers and ours take them anywhere; kfake only there (NOT_CONTROLLER).
ADMIN_APIS = frozenset({19, 20, 37, 43, 45, 46, 51})
LIST_GROUPS = 16
DESCRIBE_TRANSACTIONS = 65  # sent to the transactional id's coordinator, as clients do
# Answers a client retries while a cluster warms up (coordinators loading, a producer id block on its
# way): the comparison waits them out on each side rather than compare timing.
RETRIABLE = frozenset({14, 15, 16, 5})  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, LNA
# Answers that are final for an API although a client retries them: before __transaction_state exists,
# a TxnOffsetCommit's verification finds no transaction coordinator
# (COORDINATOR_NOT_AVAILABLE), and kfake answers the transactional APIs' empty id NOT_COORDINATOR (Kafka and ours
# INVALID_REQUEST at once).
SETTLED: dict[int, frozenset[int]] = {
    24: frozenset({16}),
    25: frozenset({16}),
    26: frozenset({16}),
    28: frozenset({15}),
    68: frozenset({16}),  # kfake answers the sweep's ConsumerGroupHeartbeat NOT_COORDINATOR (Kafka and ours
    # INVALID_REQUEST at once)
}


def error_codes(entity: object) -> list[int]:
    """Every error code in a decoded response."""
    found: list[int] = []
    if not dataclasses.is_dataclass(entity):
        return found
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            found.append(int(value))
        for item in value if isinstance(value, tuple) else (value,):
            found += error_codes(item)
    return found


class Side:
    """One cluster (Kafka's or ours): connections to its brokers by node id, and where a request goes."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self.bootstrap = (host, int(port))
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller = -1  # the node id Metadata names as the controller
        self._clients: dict[tuple[str, int], KafkaClient] = {}

    def client(self, address: tuple[str, int]) -> KafkaClient:
        if address not in self._clients:
            self._clients[address] = KafkaClient(*address, request_timeout_ms=20_000)
        return self._clients[address]

    async def metadata(self, *topics: str) -> MetadataResponse:
        response = await self.client(self.bootstrap).send(
            md.MetadataRequest(
                topics=tuple(md.MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
            MetadataResponse,
        )
        self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        self.controller = response.controller_id
        return response

    async def leader(self, topic: str, partition: int = 0) -> int:
        response = await self.metadata(topic)
        for p in response.topics[0].partitions:
            if p.partition_index == partition:
                return p.leader_id
        return min(self.brokers)

    async def coordinator(self, group: str, key_type: int = 0) -> int:
        for _ in range(100):
            response = await self.client(self.bootstrap).send(
                fc.FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(group,)),
                FindCoordinatorResponse,
            )
            if response.coordinators[0].node_id >= 0:
                break
            await asyncio.sleep(0.2)
        return response.coordinators[0].node_id

    async def exchange(self, api_key: int, request: Any, topic: str | None, group: str) -> Any:
        """The answer of the node a client would ask (the group's coordinator, the controller, the
        partition's leader, or any broker), retried while it is one a client retries; ListGroups from
        every broker, merged."""
        if not self.brokers:
            await self.metadata()
        if api_key == LIST_GROUPS:
            answers = [await self.send_to(node, request) for node in sorted(self.brokers)]
            groups = tuple(g for answer in answers for g in answer.groups)
            return dataclasses.replace(answers[0], groups=groups)
        for _ in range(50):
            if api_key in GROUP_APIS:
                node = await self.coordinator(group)
            elif api_key == DESCRIBE_TRANSACTIONS and request.transactional_ids:
                node = await self.coordinator(request.transactional_ids[0], key_type=1)
            elif api_key in ADMIN_APIS and self.controller in self.brokers:
                node = self.controller
            elif topic is not None:
                node = await self.leader(topic)
            else:
                node = min(self.brokers)
            response = await self.send_to(node, request)
            if not (RETRIABLE - SETTLED.get(api_key, frozenset())) & set(error_codes(response)):
                break
            await asyncio.sleep(0.2)
        return response

    async def send_to(self, node_id: int, request: Any) -> Any:
        if not self.brokers:
            await self.metadata()
        response_type = response_for(int(request.__api_key__), int(request.__version__))
        return await self.client(self.brokers[node_id]).send(request, response_type)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
