"""kfake as a third party: the differential sweep of ``tests/test_differential.py`` (every broker-listener
API and version, its error paths and the extra error cases) sent as the same kio-built bytes to Apache
Kafka, to epochkraft and to franz-go's kfake, the answers compared two by two.

Where epochkraft differs from Kafka (each such difference is in ``KNOWN_DIFFERENCES``), the run says
whether kfake sides with Kafka or with us; where kfake alone differs from Kafka, the difference must be in
``KFAKE_DIFFERENCES``: kfake's own, listed so that nobody moves epochkraft towards kfake on its account.
docs/kafka-compatibility.md ("Compared with Kafka") carries the resulting table."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.create_topics.v7 import request as ct

from epochkraft.harness.cluster import LocalCluster
from epochkraft.net.errors import NetworkError
from epochkraft.peers.differential import (
    KNOWN_DIFFERENCES,
    LIST_GROUPS,
    Difference,
    KnownDifference,
    Side,
    differences,
)
from epochkraft.peers.kafka import KafkaPeer
from epochkraft.peers.kfake import KfakePeer
from epochkraft.peers.third_party import KFAKE_DIFFERENCES, ThirdParty, side_taken
from epochkraft.protocol.api import BROKER
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.framing import API_VERSIONS_KEY
from epochkraft.server.handlers import served
from tests.support.kio_requests import Scenario, request_for
from tests.test_differential import RECORDS, _produce, error_cases, scenarios

pytestmark = [pytest.mark.slow, pytest.mark.peers, pytest.mark.timeout(300)]

# Names of their own, new in each run: the two-party module may have run in the same session, and a
# reused peer (EPOCHKRAFT_KAFKA_PEER, EPOCHKRAFT_KFAKE_PEER) keeps an earlier run's topics and groups.
RUN = uuid.uuid4().hex[:6]
TOPIC = f"diff3-{RUN}"
UNKNOWN_TOPIC = f"diff3-{RUN}-no-such-topic"
GROUPS = f"diff3-{RUN}-"
SIDES = ("kafka", "epochkraft", "kfake")
DESCRIBE_CONFIGS = 32


@dataclasses.dataclass
class Trio:
    sides: dict[str, Side]
    versions: dict[str, dict[int, tuple[int, int]]]  # side name -> api key -> (min, max) advertised
    topic_ids: dict[str, uuid.UUID]
    loop: asyncio.AbstractEventLoop
    seen: list[ThirdParty] = dataclasses.field(default_factory=list)  # every three-way finding so far

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def common_versions(self, key: int) -> range:
        spec = served(BROKER)[key]
        low, high = spec.min_version, spec.max_version
        for advertised in self.versions.values():
            a, b = advertised.get(key, (1, 0))
            low, high = max(low, a), min(high, b)
        return range(low, high + 1)


async def _prepare(side: Side) -> uuid.UUID:
    """TOPIC with one partition on three replicas, led by a broker with every replica in sync, and one
    record; created through the controller (kfake takes CreateTopics nowhere else)."""
    await side.metadata()
    replicas = tuple(sorted(side.brokers))  # kfake numbers its brokers from 0, Kafka's and ours from 1
    create = ct.CreateTopicsRequest(
        topics=(
            ct.CreatableTopic(
                name=TOPIC,
                num_partitions=-1,
                replication_factor=-1,
                assignments=(ct.CreatableReplicaAssignment(partition_index=0, broker_ids=replicas),),
                configs=(),
            ),
        ),
        timeout=datetime.timedelta(seconds=10),
        validate_only=False,
    )
    error = (await side.exchange(19, create, None, "")).topics[0].error_code
    assert error in (ErrorCode.none, ErrorCode.topic_already_exists), (side.name, error)
    for _ in range(100):
        metadata = await side.metadata(TOPIC)
        partitions = metadata.topics[0].partitions
        if partitions and partitions[0].leader_id in replicas and len(partitions[0].isr_nodes) == 3:
            break
        await asyncio.sleep(0.1)
    for _ in range(100):  # a leader just elected may not know it yet: retried, as a client does
        answer = await side.exchange(0, _produce(RECORDS, topic=TOPIC), TOPIC, "")
        error = answer.responses[0].partition_responses[0].error_code
        if error != ErrorCode.not_leader_or_follower:
            break
        await asyncio.sleep(0.1)
    assert error == ErrorCode.none, (side.name, answer)
    return metadata.topics[0].topic_id


@pytest.fixture(scope="module")
def trio(
    kafka_peer: KafkaPeer, epochkraft_peer_cluster: LocalCluster, kfake_peer: KfakePeer
) -> Iterator[Trio]:
    sides = {
        "kafka": Side("kafka", kafka_peer.bootstrap),
        "epochkraft": Side("epochkraft", epochkraft_peer_cluster.bootstrap),
        "kfake": Side("kfake", kfake_peer.bootstrap),
    }

    async def setup() -> Trio:
        ids, versions = {}, {}
        for name, side in sides.items():
            ids[name] = await _prepare(side)
            answer = await side.client(side.bootstrap).api_versions()
            versions[name] = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        return Trio(sides, versions, ids, loop)

    loop = asyncio.new_event_loop()
    try:
        yield loop.run_until_complete(setup())
        for side in sides.values():
            loop.run_until_complete(side.close())
    finally:
        loop.close()


async def _answer(side: Side, key: int, request: object, topic: str | None, group: str) -> object:
    try:
        answer = await side.exchange(key, request, topic, group)
    except NetworkError:
        return "closed"
    if key == LIST_GROUPS:  # only this module's groups: the two-party sweep's are not in kfake's cluster
        answer = dataclasses.replace(
            answer, groups=tuple(g for g in answer.groups if g.group_id.startswith(GROUPS))
        )
    return answer


def _differences(one: object, other: object) -> list[Difference]:
    if isinstance(one, str) or isinstance(other, str):
        return [] if one == other else [Difference("connection", one, other)]
    return differences(one, other)


def _covered(table: tuple[KnownDifference, ...], key: int, version: int, case: str, d: Difference) -> bool:
    return any(k.covers(key, version, case, d) for k in table)


def _judge(trio: Trio, key: int, version: int, case: str, answers: dict[str, object]) -> list[str]:
    """Records what kfake sides with; returns what no table explains."""
    ours = _differences(answers["epochkraft"], answers["kafka"])
    theirs = _differences(answers["kfake"], answers["kafka"])
    found = side_taken(key, version, case, ours, theirs)
    trio.seen.extend(found)
    problems = []
    for t in found:
        if t.side == "kfake only":
            if not _covered(KFAKE_DIFFERENCES, key, version, case, t.difference):
                problems.append(f"v{version} {case}: kfake alone differs from Kafka, not listed: {t}")
        elif not _covered(KNOWN_DIFFERENCES, key, version, case, t.difference):
            problems.append(f"v{version} {case}: epochkraft differs from Kafka, not listed: {t}")
    return problems


@pytest.mark.parametrize(
    "key", [k for k in served(BROKER) if k != API_VERSIONS_KEY], ids=lambda k: served(BROKER)[k].name
)
def test_kfake_as_a_third_party(trio: Trio, key: int) -> None:
    versions = trio.common_versions(key)
    if not versions:
        pytest.skip(f"no version of {served(BROKER)[key].name} served by all three")
    problems: list[str] = []

    async def sweep() -> None:
        for version in versions:
            for scenario in scenarios(key, version, uuid.UUID(int=0), TOPIC, UNKNOWN_TOPIC):
                group = f"{GROUPS}{key}-v{version}-{scenario.label}"
                if key == DESCRIBE_CONFIGS:
                    scenario = dataclasses.replace(scenario, overrides={"configuration_keys": None})
                answers = {}
                for name in SIDES:
                    topic_id = trio.topic_ids[name] if scenario.topic == TOPIC else scenario.topic_id
                    s = dataclasses.replace(scenario, topic_id=topic_id, group=group)
                    topic = TOPIC if s.topic == TOPIC else None
                    answers[name] = await _answer(
                        trio.sides[name], key, request_for(key, version, s), topic, group
                    )
                problems.extend(_judge(trio, key, version, scenario.label, answers))

    trio.run(sweep())
    assert not problems, "\n".join(problems)


# The two-party module's error cases, and DescribeConfigs with an empty key list (every config for Kafka
# and ours, none for kfake; the sweep asks with a null list here, so that kfake's configs are compared).
ERROR_CASES = {
    **error_cases(TOPIC, UNKNOWN_TOPIC, f"{GROUPS}errors"),
    "DescribeConfigs-empty-keys": request_for(
        32, 4, Scenario("all", TOPIC, overrides={"configuration_keys": ()})
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_kfake_as_a_third_party_on_error_paths(trio: Trio, case: str) -> None:
    request = ERROR_CASES[case]
    key, version = type(request).__api_key__, type(request).__version__
    if version not in trio.common_versions(key):
        pytest.skip(f"{case}: v{version} not served by all three")

    async def three() -> dict[str, object]:
        return {
            name: await _answer(trio.sides[name], key, request, TOPIC, f"{GROUPS}errors") for name in SIDES
        }

    problems = _judge(trio, key, version, case, trio.run(three()))
    assert not problems, "\n".join(problems)


# Where epochkraft differs from Kafka in this sweep, the side kfake takes (the table in
# docs/kafka-compatibility.md): an API key and field path (indexes folded) -> "Kafka", "epochkraft" or
# "neither".
SIDES_TAKEN = {
    (1, "responses[].partitions[].high_watermark"): "epochkraft",  # OFFSET_OUT_OF_RANGE
    (1, "responses[].partitions[].last_stable_offset"): "epochkraft",
    (1, "responses[].partitions[].log_start_offset"): "epochkraft",
    (3, "topics[].error_code"): "Kafka",  # Metadata v0-3 auto-creation
    (3, "topics[].partitions[]"): "Kafka",
    (19, "topics[].configs[]"): "neither",  # CreateTopics v5+ configs: kfake null
    (29, "connection"): "neither",  # an UNKNOWN enum in an ACL filter: kfake INVALID_REQUEST
    (32, "results[].configs[].documentation"): "Kafka",
    (27, "markers[].topics[].partitions[].error_code"): "epochkraft",  # a marker for no producer: appended
    (35, "results[].topics[].partitions[].partition_size"): "epochkraft",  # those markers counted
}


def test_kfake_sides_table(trio: Trio, request: pytest.FixtureRequest) -> None:
    """Runs last: prints what kfake sided with (``pytest -s`` shows it), checks it against SIDES_TAKEN, and
    that each KFAKE_DIFFERENCES entry still explains something. Only meaningful when the whole module ran."""
    print()
    for line in ThirdParty.table(trio.seen):
        print(line)
    selected = [i for i in request.session.items if i.module is request.module]
    if len(selected) < len(served(BROKER)) - 1 + len(ERROR_CASES) + 1 or request.session.testsfailed:
        pytest.skip("only part of the kfake module ran, or some of it failed")
    stale = [
        k
        for k in KFAKE_DIFFERENCES
        if not any(
            t.side == "kfake only" and k.covers(t.api_key, t.version, t.case, t.difference) for t in trio.seen
        )
    ]
    assert not stale, "\n".join(f"{k.api_key} {k.case} {k.path}: {k.reason}" for k in stale)
    taken = {
        (t.api_key, ThirdParty.folded(t.difference.path)): t.side for t in trio.seen if t.side != "kfake only"
    }
    assert taken == SIDES_TAKEN


# ---- the three-way verdict itself, without peers -------------------------------------------------------
def test_side_taken_names_the_side_kfake_takes() -> None:
    ours = [
        Difference("a.hw", 34, -1),  # kfake answers as ours
        Difference("a.error_code", 0, 3),  # kfake answers as Kafka
        Difference("a.lso", 34, -1),  # kfake answers a third value
        Difference("t.configs[x]", False, True),  # kfake answers null where Kafka has a list
        Difference("c[y].doc", "ours", "Kafka's"),  # kfake does not describe c[y] at all
    ]
    kfakes = [
        Difference("a.hw", 34, -1),
        Difference("a.lso", 0, -1),
        Difference("t.configs", None, ()),
        Difference("c[y]", False, True),
        Difference("b.base_offset", 0, -1),  # kfake alone
    ]
    found = side_taken(0, 9, "case", ours, kfakes)
    assert [(t.difference.path, t.side, t.kfake) for t in found] == [
        ("a.hw", "epochkraft", 34),
        ("a.error_code", "Kafka", 3),
        ("a.lso", "neither", 0),
        ("t.configs[x]", "neither", None),
        ("c[y]", "kfake only", False),
        ("b.base_offset", "kfake only", 0),
    ]
    assert ThirdParty.table(found)[0].split() == ["0", "Kafka", "a.error_code", "v9", "case"]
