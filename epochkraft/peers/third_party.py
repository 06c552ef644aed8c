"""kfake as a third party in the differential comparison: where epochkraft's answer differs from Kafka's,
the side franz-go's kfake takes (with Kafka, with epochkraft, or neither), and kfake's own differences from
Kafka (``KFAKE_DIFFERENCES``), listed so that epochkraft is not moved towards kfake on their account.
docs/kafka-compatibility.md ("Compared with Kafka") carries both tables."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from epochkraft.peers.differential import ANY, Difference, KnownDifference


@dataclass(frozen=True)
class ThirdParty:
    """One field of one answer compared three ways: where epochkraft differs from Kafka, the side kfake
    takes ("Kafka", "epochkraft", or "neither": a third value); where only kfake differs, "kfake only"."""

    api_key: int
    version: int
    case: str
    difference: Difference  # epochkraft's from Kafka's, or kfake's from Kafka's for "kfake only"
    kfake: object  # kfake's value at that path
    side: str

    def __str__(self) -> str:
        d = self.difference
        if self.side == "kfake only":
            return f"{d.path}: kfake {d.ours!r}, Kafka and epochkraft {d.theirs!r}"
        return f"{d.path}: epochkraft {d.ours!r}, Kafka {d.theirs!r}, kfake {self.kfake!r} (sides with {self.side})"

    @staticmethod
    def folded(path: str) -> str:
        """A field path without its indexes and names: ``topics[t].partitions[0].x`` becomes
        ``topics[].partitions[].x``."""
        return re.sub(r"\[[^\]]*\]", "[]", path)

    @staticmethod
    def table(found: Iterable[ThirdParty]) -> list[str]:
        """One line per API, side and field path (indexes and names folded), with the versions and cases
        seen: the run's findings, grouped for reading."""
        rows: dict[tuple[int, str, str], tuple[set[int], set[str]]] = {}
        for t in found:
            path = ThirdParty.folded(t.difference.path)
            versions, cases = rows.setdefault((t.api_key, t.side, path), (set(), set()))
            versions.add(t.version)
            cases.add(t.case)
        return [
            f"{key:>3} {side:<10} {path:<60} v{_ranges(versions)} {', '.join(sorted(cases))}"
            for (key, side, path), (versions, cases) in sorted(rows.items())
        ]


def _ranges(numbers: set[int]) -> str:
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and spans[-1][1] == n - 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _related(a: str, b: str) -> bool:
    """One path is the other or inside it (``topics[t].configs`` and ``topics[t].configs[x]``)."""
    short, long = sorted((a, b), key=len)
    return long == short or long.startswith((f"{short}.", f"{short}["))


def side_taken(
    api_key: int, version: int, case: str, ours: list[Difference], kfakes: list[Difference]
) -> list[ThirdParty]:
    """``ours``: epochkraft's answer against Kafka's; ``kfakes``: kfake's against Kafka's (both from
    ``differences``). Each field where epochkraft differs, with the side kfake takes there, and each where
    kfake alone differs. kfake differing at an enclosing path takes neither side (null configs against a
    list), except where it lacks the enclosing entry (a config it does not describe): that field is kfake's
    own difference, and no side is taken inside it."""

    def lacks(k: Difference, path: str) -> bool:
        return k.ours is False and k.theirs is True and k.path != path

    found: list[ThirdParty] = []
    judged: set[str] = set()
    for d in ours:
        near = [k for k in kfakes if _related(k.path, d.path)]
        exact = [k for k in near if k.path == d.path]
        if any(lacks(k, d.path) for k in near):
            continue
        judged.update(k.path for k in near)
        if not near:
            found.append(ThirdParty(api_key, version, case, d, d.theirs, "Kafka"))
        elif exact and exact[0].ours == d.ours:
            found.append(ThirdParty(api_key, version, case, d, d.ours, "epochkraft"))
        else:
            found.append(ThirdParty(api_key, version, case, d, (exact or near)[0].ours, "neither"))
    found += [
        ThirdParty(api_key, version, case, k, k.ours, "kfake only") for k in kfakes if k.path not in judged
    ]
    return found


# kfake's own differences from Kafka, where epochkraft answers as Kafka does: not to be copied. (franz-go's
# kfake at the version pinned in peers/kfake/go.mod; docs/kafka-compatibility.md has the same list.)
KFAKE_DIFFERENCES: tuple[KnownDifference, ...] = (
    KnownDifference(
        0,
        ANY,
        "Produce-two-batches",
        r"responses\[.*\]\.partition_responses\[.*\]\.error_code",
        "Two record batches for one partition: CORRUPT_MESSAGE; Kafka INVALID_RECORD (exactly one batch a "
        "partition from v3, ProduceRequest.validateRecords).",
    ),
    KnownDifference(
        0,
        ANY,
        "Produce-no-batch",
        r"responses\[.*\]\.partition_responses\[.*\]\.error_code",
        "No record batch for a partition: CORRUPT_MESSAGE; Kafka INVALID_RECORD.",
    ),
    KnownDifference(
        0,
        ANY,
        None,
        r"responses\[.*\]\.partition_responses\[.*\]\.base_offset",
        "A refused partition (unknown topic or partition, bad CRC, too large, acks=2): base offset 0; "
        "Kafka -1.",
    ),
    KnownDifference(
        1,
        ANY,
        None,
        r"responses\[.*\]\.partitions\[.*\]\.(high_watermark|aborted_transactions)",
        "A refused partition (unknown topic or partition, a leader epoch from the future): high watermark 0 "
        "and null aborted transactions; Kafka -1 and an empty array.",
    ),
    KnownDifference(
        3,
        (10, 11),
        None,
        r"brokers.*|topics\[.*\]\.(error_code|name|partitions.*)",
        "Metadata v10-11 naming a topic id: answered by the id; Kafka refuses the request (INVALID_REQUEST: "
        "ids are for v12+).",
    ),
    KnownDifference(
        9,
        ANY,
        None,
        r"error_code|groups\[.*\]\.(error_code|topics\[.*\])|topics\[.*\]",
        "OffsetFetch of a group without offsets: GROUP_ID_NOT_FOUND and no partitions; Kafka answers each "
        "partition asked with offset -1 and no error.",
    ),
    KnownDifference(
        8,
        ANY,
        "OffsetCommit-metadata-too-large",
        r"topics\[.*\]\.partitions\[.*\]\.error_code",
        "OffsetCommit metadata longer than offset.metadata.max.bytes (4096): committed (NONE); Kafka "
        "OFFSET_METADATA_TOO_LARGE.",
    ),
    KnownDifference(
        12,
        ANY,
        None,
        "error_code",
        "Heartbeat to an unknown group: GROUP_ID_NOT_FOUND; Kafka UNKNOWN_MEMBER_ID.",
    ),
    KnownDifference(
        13,
        ANY,
        None,
        r"error_code|members.*",
        "LeaveGroup from an unknown group: GROUP_ID_NOT_FOUND (v3+: without the member entries); Kafka "
        "UNKNOWN_MEMBER_ID, each member named.",
    ),
    KnownDifference(
        14,
        ANY,
        None,
        "error_code",
        "SyncGroup to an unknown group: GROUP_ID_NOT_FOUND; Kafka UNKNOWN_MEMBER_ID.",
    ),
    KnownDifference(
        16,
        ANY,
        None,
        r"groups\[.*\]",
        "ListGroups lists the groups an OffsetCommit to an unknown topic or partition created; Kafka's "
        "refused commit leaves no group behind.",
    ),
    KnownDifference(
        17,
        ANY,
        None,
        r"error_code|mechanisms.*",
        "SaslHandshake on a listener without SASL: UNSUPPORTED_SASL_MECHANISM with PLAIN and SCRAM listed; "
        "Kafka ILLEGAL_SASL_STATE and no mechanisms.",
    ),
    KnownDifference(
        19,
        ANY,
        None,
        r"topics\[.*\]\.(configs.*|error_code|num_partitions|replication_factor)",
        "CreateTopics (validate only) checks no config name or value, no topic name and no assigned broker "
        "(NONE where Kafka answers INVALID_CONFIG, INVALID_TOPIC_EXCEPTION, INVALID_REPLICA_ASSIGNMENT), "
        "answers the resolved partition count and replication factor where Kafka keeps -1, and null "
        "configs on an error where Kafka has an empty array.",
    ),
    KnownDifference(
        21,
        ANY,
        None,
        r"topics\[.*\]\.partitions\[.*\]\.low_watermark",
        "DeleteRecords refused (unknown topic or partition, offset beyond the high watermark): low "
        "watermark 0; Kafka -1.",
    ),
    KnownDifference(
        23,
        ANY,
        None,
        r"topics\[.*\]\.partitions\[.*\]\.end_offset",
        "OffsetForLeaderEpoch for leader epoch -1: end offset 0; Kafka -1 (UNDEFINED_EPOCH_OFFSET).",
    ),
    KnownDifference(
        24,
        (0, 3),
        None,
        r"results_by_topic_v3_and_below\[.*\]\.results_by_partition\[.*\]\.partition_error_code",
        "AddPartitionsToTxn with an empty transactional id: NOT_COORDINATOR; Kafka INVALID_REQUEST.",
    ),
    KnownDifference(
        24,
        (4, 5),
        None,
        r"results_by_transaction\[len\]",
        "AddPartitionsToTxn v4+ (a broker's batch) with an empty transactional id: no result for it; Kafka "
        "one, INVALID_REQUEST.",
    ),
    KnownDifference(
        25,
        ANY,
        None,
        "error_code",
        "AddOffsetsToTxn with an empty transactional id: NOT_COORDINATOR; Kafka INVALID_REQUEST.",
    ),
    KnownDifference(
        26,
        ANY,
        None,
        "error_code",
        "EndTxn with an empty transactional id: NOT_COORDINATOR; Kafka INVALID_REQUEST.",
    ),
    KnownDifference(
        28,
        ANY,
        None,
        r"topics\[.*\]\.partitions\[.*\]\.error_code",
        "TxnOffsetCommit of a producer no transaction coordinator knows: INVALID_PRODUCER_ID_MAPPING before "
        "the partition or the coordinator is looked at; Kafka UNKNOWN_TOPIC_OR_PARTITION, or the verification's "
        "COORDINATOR_NOT_AVAILABLE.",
    ),
    KnownDifference(
        66,
        ANY,
        None,
        r"unknown_state_filters\[len\]",
        "ListTransactions with a state filter no transaction state has: not answered as unknown; Kafka "
        "lists it in unknown_state_filters.",
    ),
    KnownDifference(
        29,
        ANY,
        None,
        "error_code",
        "ACLs without an authorizer configured: kfake keeps and answers them; Kafka SECURITY_DISABLED.",
    ),
    KnownDifference(30, ANY, None, r"results\[.*\]\.error_code", "As DescribeAcls: no SECURITY_DISABLED."),
    KnownDifference(
        31, ANY, None, r"filter_results\[.*\]\.error_code", "As DescribeAcls: no SECURITY_DISABLED."
    ),
    KnownDifference(
        32,
        ANY,
        None,
        r"results\[.*\]\.configs\[.*\]",
        "DescribeConfigs describes a subset of the topic configs (none of compression.*.level, flush.*, "
        "segment.jitter.ms, segment.index.bytes, index.interval.bytes, the throttled replicas, local.* "
        "and remote.*, the compaction lags, message.timestamp.*.max.ms, min.cleanable.dirty.ratio, "
        "preallocate, unclean.leader.election.enable, file.delete.delay.ms), and none at all for an empty "
        "key list; Kafka (ConfigHelper) and ours: every config for a null or empty list. epochkraft "
        "answered an empty list as kfake does until the Kafka comparison.",
    ),
    KnownDifference(
        33,
        ANY,
        None,
        r"responses\[.*\]\.error_code",
        "AlterConfigs checks no config name or value (NONE; Kafka INVALID_CONFIG).",
    ),
    KnownDifference(
        44,
        ANY,
        None,
        r"responses\[.*\]\.error_code",
        "IncrementalAlterConfigs checks no config name or value (NONE; Kafka INVALID_CONFIG); APPEND to a "
        "non-list config: INVALID_REQUEST (Kafka INVALID_CONFIG).",
    ),
    KnownDifference(
        35,
        ANY,
        None,
        r"results.*",
        "DescribeLogDirs naming only unknown topics or partitions: no log dir at all; Kafka lists its dir "
        "with no topics.",
    ),
    KnownDifference(
        37,
        ANY,
        None,
        r"results\[.*\]\.error_code",
        "CreatePartitions to the current count: NONE; Kafka INVALID_PARTITIONS (the count must grow).",
    ),
    KnownDifference(
        43,
        ANY,
        None,
        r"replica_election_results\[.*\]\.partition_result\[.*\]\.error_code",
        "A preferred election where the preferred replica already leads: elected again (NONE, a new "
        "leader epoch); Kafka ELECTION_NOT_NEEDED, nothing changes.",
    ),
    KnownDifference(
        75,
        ANY,
        None,
        r"topics\[.*\]\.partitions\[.*\]\.leader_epoch",
        "DescribeTopicPartitions after the sweep's ElectLeaders: the leader epochs kfake's needless "
        "elections bumped (see ElectLeaders).",
    ),
    KnownDifference(
        45,
        ANY,
        None,
        "allow_replication_factor_change",
        "AlterPartitionReassignments v1: allow_replication_factor_change answered true; Kafka echoes the "
        "request's false.",
    ),
    KnownDifference(
        3,
        (8, 99),
        None,
        r"cluster_authorized_operations|topics\[.*\]\.topic_authorized_operations",
        "Authorized operations (Metadata v8+): every operation's bit, asked for or not (topics 3576, the "
        "cluster 8184); Kafka the supported ones when asked (the cluster 8096) and -2147483648 when not.",
    ),
    KnownDifference(
        15,
        (3, 99),
        None,
        r"groups\[.*\]\.authorized_operations",
        "A group's authorized operations (DescribeGroups v3+): 328, asked for or not; Kafka the supported "
        "ones (3400) when asked and -2147483648 when not.",
    ),
    KnownDifference(
        60,
        ANY,
        None,
        r"brokers\[.*\]\.broker_id|cluster_authorized_operations",
        "DescribeCluster on the broker listener: kfake numbers its brokers from 0 (the peers' Kafka and "
        "epochkraft from 1), and its cluster authorized operations are every operation's bit (8184), "
        "asked for or not; Kafka 8096 when asked and -2147483648 when not.",
    ),
    KnownDifference(
        57,
        ANY,
        None,
        r"error_code|results.*",
        "UpdateFeatures that Kafka cannot apply (the sweep's request): accepted (NONE, one result); Kafka refuses "
        "the request (INVALID_UPDATE_VERSION, no results).",
    ),
    KnownDifference(
        48,
        ANY,
        None,
        r"error_code|error_message|entries.*",
        "DescribeClientQuotas with the sweep's filter, which Kafka refuses (INVALID_REQUEST): answered.",
    ),
    KnownDifference(
        49,
        ANY,
        None,
        r"entries\[.*\]\.(error_code|error_message)",
        "AlterClientQuotas with the sweep's entries, which Kafka refuses (INVALID_REQUEST): applied.",
    ),
    KnownDifference(
        68,
        ANY,
        None,
        r"error_code|error_message|heartbeat_interval|member_id|member_epoch|assignment.*",
        "ConsumerGroupHeartbeat of the sweep's request, which Kafka refuses (INVALID_REQUEST, heartbeat "
        "interval 0): UNKNOWN_MEMBER_ID or NOT_COORDINATOR with a 5 s heartbeat interval.",
    ),
    KnownDifference(
        69,
        ANY,
        None,
        r"groups\[.*\]\.(error_code|error_message|authorized_operations)",
        "ConsumerGroupDescribe of a group this broker does not coordinate: GROUP_ID_NOT_FOUND and every "
        "operation's bit (328); Kafka NOT_COORDINATOR and -2147483648 (not asked).",
    ),
)
