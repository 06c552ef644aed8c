"""KIP-848 consumer groups with real clients: librdkafka (confluent-kafka, ``group.protocol=consumer``)
consumers share a topic through ConsumerGroupHeartbeat, one leaves and the other takes over, and every
record is consumed; the group is described and listed as a consumer group; a classic group is migrated to
the consumer protocol one consumer at a time, and back; static members of a classic group restart without a
rebalance."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.leave_group.v5.response import LeaveGroupResponse
from kio.schema.types import GroupId
from kio.static.primitive import i32

from epochkraft.broker.group_coordinator import coordinator_partition
from epochkraft.harness.kio_client import MiniClient
from epochkraft.net.errors import NetworkError
from epochkraft.peers.fetch import PeerUnavailable, kafka_classpath
from epochkraft.protocol.errors import ErrorCode
from tests.test_clients import create_topic, produce
from tests.test_kafka_tools import GROUPS, QUIET_LOG4J2, run_tool

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(150)]

GROUP_PROTOCOL = {"group.protocol": "consumer"}
JAVA_CHECK = (
    Path(__file__).resolve().parents[1] / "scripts" / "clients" / "java" / "ConsumerProtocolCheck.java"
)


def consumer(bootstrap: str, group: str, **conf) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            **GROUP_PROTOCOL,
            **conf,
        }
    )


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def poll_until(consumers: list[Consumer], seen: dict[str, set[bytes]], done, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not done():
        for c in consumers:
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.setdefault(c.memberid() or "", set()).add(msg.value())


def test_two_consumers_share_a_topic_and_one_takes_over(make_cluster):
    cluster = make_cluster(brokers=3)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "kip848", partitions=6)
    first_batch = produce(bootstrap, "kip848", 300)
    a, b = consumer(bootstrap, "g848"), consumer(bootstrap, "g848")
    try:
        a.subscribe(["kip848"])
        b.subscribe(["kip848"])
        seen: dict[str, set[bytes]] = {}
        poll_until(
            [a, b],
            seen,
            lambda: (
                assigned(a)
                and assigned(b)
                and not assigned(a) & assigned(b)
                and len(assigned(a) | assigned(b)) == 6
            ),
            60,
        )
        assert len(assigned(a)) == 3 and len(assigned(b)) == 3, (assigned(a), assigned(b))
        assert not assigned(a) & assigned(b)
        everything = {v for _, _, v in first_batch}
        poll_until([a, b], seen, lambda: set().union(*seen.values()) >= everything, 30)
        assert set().union(*seen.values()) >= everything
        assert len(seen) == 2  # both consumed

        admin = AdminClient({"bootstrap.servers": bootstrap})
        (described,) = admin.describe_consumer_groups(["g848"]).values()
        group = described.result(15)
        assert str(group.type).endswith("CONSUMER") and len(group.members) == 2
        listed = admin.list_consumer_groups().result(15)
        assert [
            (g.group_id, str(g.type).endswith("CONSUMER")) for g in listed.valid if g.group_id == "g848"
        ] == [("g848", True)]

        b.close()  # leaves with member epoch -1: its partitions go to a at once
        second_batch = produce(bootstrap, "kip848", 300)
        later = {v for _, _, v in second_batch}
        taken: dict[str, set[bytes]] = {}
        poll_until(
            [a], taken, lambda: len(assigned(a)) == 6 and set().union(set(), *taken.values()) >= later, 60
        )
        assert len(assigned(a)) == 6
        assert set().union(*taken.values()) >= later
    finally:
        for c in (a, b):
            with contextlib.suppress(KafkaException, RuntimeError):
                c.close()


@pytest.mark.peers
def test_java_consumers_with_the_consumer_protocol(make_cluster, tmp_path):
    """Kafka's own KafkaConsumer (group.protocol=consumer): the same scenario, then the group described by
    kafka-consumer-groups --describe (the tool asks ConsumerGroupDescribe)."""
    try:
        classpath = kafka_classpath()
    except PeerUnavailable as exc:
        pytest.skip(f"kafka-clients unavailable: {exc}")
    cluster = make_cluster(brokers=3)
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J2)
    result = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath,
         str(JAVA_CHECK), cluster.bootstrap, "kip848-java", "g848-java"],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"
    lines = [line for line in result.stdout.splitlines() if line.startswith("OK ")]
    assert lines == [
        "OK two consumers share the topic assigned=3+3 read=300",
        "OK describeConsumerGroups type=Consumer members=2 state=Stable",
        "OK one consumer takes over assigned=6 read=300",
    ], result.stdout
    described = run_tool(
        log4j, GROUPS, "--bootstrap-server", cluster.bootstrap, "--group", "g848-java", "--describe"
    )
    rows = [line.split() for line in described.splitlines() if "kip848-java" in line]
    assert sorted(int(row[2]) for row in rows) == list(range(6)), described
    assert sum(int(row[3]) for row in rows) == 600, described  # every record's offset committed


def described_epochs(bootstrap: str, group: str) -> tuple[int, dict[str, int]]:
    """(group epoch, member epochs) from ConsumerGroupDescribe, asked of the brokers until the
    coordinator answers."""

    async def ask() -> tuple[int, dict[str, int]]:
        client = MiniClient(bootstrap)
        try:
            for address in client.addresses:
                request = ConsumerGroupDescribeRequest(
                    group_ids=(group,), include_authorized_operations=False
                )
                with contextlib.suppress(NetworkError, OSError):
                    (described,) = (await client._client(address).send(request)).groups
                    if described.error_code == ErrorCode.none:
                        return described.group_epoch, {m.member_id: m.member_epoch for m in described.members}
            raise AssertionError(f"no broker describes {group}")
        finally:
            await client.close()

    return asyncio.run(ask())


def classic_generation(bootstrap: str, group: str, member_id: str) -> int | None:
    """The generation a classic group's member is at, as its coordinator knows it: the one its Heartbeat is
    answered NONE at (another is ILLEGAL_GENERATION and changes nothing); None if no broker knows it."""

    async def ask() -> int | None:
        client = MiniClient(bootstrap)
        try:
            for address in client.addresses:
                for generation in range(1, 30):
                    request = HeartbeatRequest(
                        group_id=GroupId(group), generation_id=i32(generation), member_id=member_id,
                        group_instance_id=None,
                    )  # fmt: skip
                    try:
                        error = (await client._client(address).send(request)).error_code
                    except (NetworkError, OSError):
                        break
                    if error == ErrorCode.none:
                        return generation
                    if error != ErrorCode.illegal_generation:
                        break
            return None
        finally:
            await client.close()

    return asyncio.run(ask())


def described_elsewhere(bootstrap: str, group: str, killed: int, timeout_s: float = 45):
    """The group as a coordinator other than ``killed`` describes it, asked until one does; each time by a
    new admin client, which learns the live brokers (one made before the kill may wait on the killed
    broker until its request times out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            described = admin.describe_consumer_groups([group])[group].result(10)
            if described.coordinator.id != killed:
                return described
        except (KafkaException, concurrent.futures.TimeoutError):
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, f"{group} still coordinated by {killed}"
        time.sleep(0.2)


def group_beside(group: str, partitions: int = 3) -> str:
    """A group id coordinated from the same __consumer_offsets partition as ``group``."""
    wanted = coordinator_partition(group, partitions)
    return next(
        g for i in range(100) if coordinator_partition(g := f"classic-failover-{i}", partitions) == wanted
    )


def test_consumer_group_survives_its_coordinator(make_cluster):
    """The coordinator's broker is killed: the new coordinator replays the groups from __consumer_offsets.
    The consumer group's members keep their member ids (no rejoin with epoch 0 bumping the group epoch
    twice); the classic group beside it (GroupMetadata record) is described Stable with the same members
    and answers their heartbeats at the same generation before anyone rejoined, and no member is assigned
    again; every record produced afterwards is consumed by both groups."""
    cluster = make_cluster(brokers=3)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "kip848-failover", partitions=6)
    a, b = consumer(bootstrap, "g848-failover"), consumer(bootstrap, "g848-failover")
    classic_group = group_beside("g848-failover")
    classic = {"group.protocol": "classic", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    x, y = consumer(bootstrap, classic_group, **classic), consumer(bootstrap, classic_group, **classic)
    assignments: list[int] = []  # the classic consumers' rebalances, each assigning
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        a.subscribe(["kip848-failover"])
        b.subscribe(["kip848-failover"])
        for c in (x, y):
            c.subscribe(["kip848-failover"], on_assign=lambda _c, parts: assignments.append(len(parts)))
        poll_until([a, b], {}, lambda: len(assigned(a)) == 3 and len(assigned(b)) == 3, 60)
        poll_until([x, y], {}, lambda: len(assigned(x)) == 3 and len(assigned(y)) == 3, 60)
        before = admin.describe_consumer_groups(["g848-failover"])["g848-failover"].result(15)
        coordinator = before.coordinator.id
        epochs = described_epochs(bootstrap, "g848-failover")
        classic_before = admin.describe_consumer_groups([classic_group])[classic_group].result(15)
        assert classic_before.coordinator.id == coordinator
        classic_members = sorted(m.member_id for m in classic_before.members)
        generation = classic_generation(bootstrap, classic_group, classic_members[0])
        rebalances = len(assignments)
        cluster.nodes[coordinator].signal("KILL")
        classic_after = described_elsewhere(bootstrap, classic_group, coordinator)
        assert classic_after.state == classic_before.state == ConsumerGroupState.STABLE
        assert sorted(m.member_id for m in classic_after.members) == classic_members
        assert [classic_generation(bootstrap, classic_group, m) for m in classic_members] == [generation] * 2
        produced = produce(bootstrap, "kip848-failover", 300)
        everything = {v for _, _, v in produced}
        for group in ([a, b], [x, y]):
            seen: dict[str, set[bytes]] = {}
            poll_until(group, seen, lambda seen=seen: set().union(set(), *seen.values()) >= everything, 60)
            assert set().union(set(), *seen.values()) >= everything
        after = described_elsewhere(bootstrap, "g848-failover", coordinator)
        assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
        assert described_epochs(bootstrap, "g848-failover") == epochs  # resumed, not rejoined
        assert len(assignments) == rebalances  # the classic consumers were not assigned again
    finally:
        for c in (a, b, x, y):
            with contextlib.suppress(KafkaException, RuntimeError):
                c.close()


class Fleet:
    """librdkafka consumers of one group, polled in turn; every delivery is recorded as (partition, offset),
    with the position of the run (``phase``) in which it came."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.consumers: list[tuple[str, Consumer]] = []
        self.deliveries: list[tuple[int, int, int]] = []  # (phase, partition, offset)
        self.phase = 0

    def start(self, protocol: str) -> None:
        conf = {"heartbeat.interval.ms": 500, "session.timeout.ms": 6000} if protocol == "classic" else {}
        c = consumer(self.bootstrap, self.group, **{"group.protocol": protocol, **conf})
        c.subscribe([self.topic])
        self.consumers.append((protocol, c))

    def stop_oldest(self, protocol: str) -> None:
        """Closes the first consumer of ``protocol``: it commits what it consumed and leaves the group."""
        index = next(i for i, (p, _) in enumerate(self.consumers) if p == protocol)
        _, c = self.consumers.pop(index)
        c.close()

    def poll(self, until, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for _, c in self.consumers:
                for msg in c.consume(100, 0.02):
                    if msg.error() is None:
                        self.deliveries.append((self.phase, msg.partition(), msg.offset()))
            if until():
                return True
        return False

    def balanced(self, partitions: int) -> bool:
        """Every partition owned by exactly one consumer, and every consumer owning some."""
        owned = [assigned(c) for _, c in self.consumers]
        return all(owned) and sum(map(len, owned)) == partitions and len(set().union(*owned)) == partitions


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    listed = admin.list_consumer_group_offsets([request])[group].result(15)
    return {tp.partition: tp.offset for tp in listed.topic_partitions}


def tool_describes_a_consumer_group(tmp_path: Path, bootstrap: str, group: str) -> None:
    """kafka-consumer-groups --describe --state --verbose shows the group epochs only a consumer group has
    (skipped where Kafka's jars cannot be fetched)."""
    try:
        kafka_classpath()
    except PeerUnavailable:
        return
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J2)
    described = run_tool(
        log4j, GROUPS, "--bootstrap-server", bootstrap, "--group", group, "--describe", "--state", "--verbose"
    )
    header, row = [line.split() for line in described.splitlines() if line.strip()][:2]
    assert "GROUP-EPOCH" in header and "TARGET-ASSIGNMENT-EPOCH" in header, described
    assert row[0] == group and "Stable" in row and row[-1] == "3", described


@pytest.mark.peers  # kafka-consumer-groups describes the group where Kafka's jars can be had
def test_rolling_migration_of_a_classic_group_to_the_consumer_protocol_and_back(make_cluster, tmp_path):
    """KIP-848's online migration with real clients: three librdkafka consumers on the classic protocol
    read a topic while it is produced; restarted one by one with group.protocol=consumer, the first
    converts the group and the classic ones go on inside it until replaced; the group is then described as
    a consumer group. Restarted back one by one, the last consumer protocol member leaving converts it to
    a classic group again. Every acknowledged record is consumed; after each restart no record below the
    offset committed before it is delivered again (committed offsets survive both conversions)."""
    partitions, topic, group = 6, "migrate", "g-migrate"
    cluster = make_cluster(
        brokers=1,
        broker_extra="group.consumer.heartbeat.interval.ms=500\ngroup.consumer.min.heartbeat.interval.ms=500\n",
    )
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, topic, partitions=partitions, rf=1)
    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()

    def keep_producing() -> None:
        while not stop.is_set():
            acked.extend(produce(bootstrap, topic, 20))
            stop.wait(0.1)

    producer = threading.Thread(target=keep_producing, daemon=True)
    fleet = Fleet(bootstrap, group, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    committed_before: dict[int, dict[int, int]] = {}
    try:
        for _ in range(3):
            fleet.start("classic")
        producer.start()
        assert fleet.poll(lambda: fleet.balanced(partitions), 60), "the classic group never balanced"
        fleet.poll(lambda: False, 1)  # some records consumed and their offsets committed
        for old, new in (("classic", "consumer"), ("consumer", "classic")):
            for step in range(3):
                fleet.stop_oldest(old)
                fleet.phase += 1
                committed_before[fleet.phase] = committed_offsets(bootstrap, group, topic, partitions)
                fleet.start(new)
                assert fleet.poll(lambda: fleet.balanced(partitions), 60), (fleet.phase, old, new)
                fleet.poll(lambda: False, 0.5)
                # a consumer group from the first consumer protocol member until the last one left
                kind = "CLASSIC" if new == "classic" and step == 2 else "CONSUMER"
                described = admin.describe_consumer_groups([group])[group].result(15)
                assert str(described.type).endswith(kind), (fleet.phase, described.type)
                members = {m.member_id for m in described.members}
                assert members == {c.memberid() for _, c in fleet.consumers}, fleet.phase
            if new == "consumer":
                tool_describes_a_consumer_group(tmp_path, bootstrap, group)
        stop.set()
        producer.join(30)
        everything = {(p, o) for p, o, _ in acked}
        assert fleet.poll(lambda: {(p, o) for _, p, o in fleet.deliveries} >= everything, 60)
    finally:
        stop.set()
        for _, c in fleet.consumers:
            with contextlib.suppress(KafkaException, RuntimeError):
                c.close()
    for phase, committed in committed_before.items():
        replayed = [(p, o) for ph, p, o in fleet.deliveries if ph >= phase and o < committed.get(p, -1)]
        assert not replayed, f"after restart {phase}, records below the committed offsets: {replayed[:5]}"
    duplicates = len(fleet.deliveries) - len({(p, o) for _, p, o in fleet.deliveries})
    assert duplicates < len(everything) // 4, (duplicates, len(everything))


def test_static_classic_consumer_restarted_with_the_consumer_protocol(make_cluster):
    """testConsumerGroupHeartbeatToClassicGroupFromExistingStaticMember with real clients: a static
    librdkafka consumer (group.instance.id) of a classic group closes without leaving and comes back at once
    with group.protocol=consumer and the same instance id. It takes its own classic member's place, well
    before that member's session would expire, converting the group (a consumer protocol restart must not
    wait for a -2 leave its classic predecessor never sends)."""
    topic, group = "static848", "g-static848"
    cluster = make_cluster(
        brokers=1,
        broker_extra="group.consumer.heartbeat.interval.ms=500\ngroup.consumer.min.heartbeat.interval.ms=500\n",
    )
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, topic, partitions=3, rf=1)
    static = {"group.instance.id": "i1"}
    classic = consumer(
        bootstrap, group, **{"group.protocol": "classic", "session.timeout.ms": 30_000}, **static
    )
    restarted: Consumer | None = None
    try:
        classic.subscribe([topic])
        poll_until([classic], {}, lambda: assigned(classic) == {0, 1, 2}, 60)
        assert assigned(classic) == {0, 1, 2}
        classic.close()
        restarted = consumer(bootstrap, group, **static)
        restarted.subscribe([topic])
        # within 20 s: the classic member's session (30 s) has not run out, so it was replaced
        poll_until([restarted], {}, lambda: assigned(restarted) == {0, 1, 2}, 20)
        assert assigned(restarted) == {0, 1, 2}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(15)
        assert str(described.type).endswith("CONSUMER"), described.type
        assert [m.member_id for m in described.members] == [restarted.memberid()]
    finally:
        for c in (classic, restarted):
            with contextlib.suppress(KafkaException, RuntimeError):
                if c is not None:
                    c.close()


def leave_by_instance_id(bootstrap: str, group: str, instance_id: str) -> tuple[ErrorCode, list[ErrorCode]]:
    """A LeaveGroup v5 naming only the instance id (as AdminClient.removeMembersFromConsumerGroup sends it)
    to the cluster's one broker: (top-level error, the member's error)."""

    async def ask() -> tuple[ErrorCode, list[ErrorCode]]:
        client = MiniClient(bootstrap)
        try:
            member = MemberIdentity(member_id="", group_instance_id=instance_id, reason="removed")
            left = await client.any_send(
                LeaveGroupRequest(group_id=GroupId(group), members=(member,)), LeaveGroupResponse
            )
            return left.error_code, [m.error_code for m in left.members]
        finally:
            await client.close()

    return asyncio.run(ask())


def describe_classic(admin: AdminClient, group: str) -> tuple[str, dict[str | None, str]]:
    """(state, member id per instance id) of a classic group."""
    described = admin.describe_consumer_groups([group])[group].result(15)
    return str(described.state), {m.group_instance_id: m.member_id for m in described.members}


def test_static_classic_consumer_restarts_without_a_rebalance(make_cluster):
    """KIP-345 in a classic group with librdkafka: of two static consumers (group.instance.id) in a Stable
    group, one is closed (librdkafka sends no LeaveGroup for a static member) and restarted with the same
    instance id within its session: it takes its old member id's place, the generation stays, both go on
    consuming. Then a LeaveGroup by instance id alone (an admin's removal) takes the other one's closed
    instance out at once, well before its session would expire, and the restarted consumer gets every
    partition."""
    topic, group = "static-classic", "g-static-classic"
    cluster = make_cluster(brokers=1)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, topic, partitions=4, rf=1)
    classic = {"group.protocol": "classic", "session.timeout.ms": 30_000}
    a = consumer(bootstrap, group, **classic, **{"group.instance.id": "s1"})
    b = consumer(bootstrap, group, **classic, **{"group.instance.id": "s2"})
    restarted: Consumer | None = None
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        poll_until([a, b], {}, lambda: len(assigned(a)) == 2 and len(assigned(b)) == 2, 60)
        state, members = describe_classic(admin, group)
        assert state.endswith("STABLE") and members == {"s1": a.memberid(), "s2": b.memberid()}
        generation = classic_generation(bootstrap, group, b.memberid())
        old_id, held = a.memberid(), assigned(a)

        a.close()
        restarted = consumer(bootstrap, group, **classic, **{"group.instance.id": "s1"})
        restarted.subscribe([topic])
        poll_until([restarted, b], {}, lambda: assigned(restarted) == held, 20)
        assert assigned(restarted) == held and len(assigned(b)) == 2
        state, members = describe_classic(admin, group)
        assert state.endswith("STABLE") and members == {"s1": restarted.memberid(), "s2": b.memberid()}
        assert restarted.memberid() != old_id
        assert classic_generation(bootstrap, group, b.memberid()) == generation
        batch = {v for _, _, v in produce(bootstrap, topic, 200)}
        seen: dict[str, set[bytes]] = {}
        poll_until([restarted, b], seen, lambda: set().union(set(), *seen.values()) >= batch, 30)
        assert set().union(set(), *seen.values()) >= batch and len(seen) == 2, "both consume"

        b.close()
        assert leave_by_instance_id(bootstrap, group, "s2") == (ErrorCode.none, [ErrorCode.none])
        poll_until([restarted], {}, lambda: len(assigned(restarted)) == 4, 20)  # the session is 30 s
        assert len(assigned(restarted)) == 4
        assert describe_classic(admin, group)[1] == {"s1": restarted.memberid()}
        assert leave_by_instance_id(bootstrap, group, "s2") == (ErrorCode.none, [ErrorCode.unknown_member_id])
    finally:
        for c in (a, b, restarted):
            with contextlib.suppress(KafkaException, RuntimeError):
                if c is not None:
                    c.close()


def refusal_seen(c: Consumer, errors: list, timeout_s: float = 20) -> KafkaError | None:
    """Polls ``c`` until its group refuses it GROUP_MAX_SIZE_REACHED (in a poll or in its error_cb)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is not None:
            errors.append(msg.error())
        # the consumer protocol's refusal is fatal to librdkafka: _FATAL, naming the error underneath
        found = [
            e
            for e in errors
            if e.code() == KafkaError.GROUP_MAX_SIZE_REACHED or "group has reached maximum size" in e.str()
        ]
        if found:
            return found[0]
    return None


def test_a_full_group_refuses_another_consumer_of_either_protocol(make_cluster):
    """GROUP_MAX_SIZE_REACHED with librdkafka: a classic group at group.max.size and a consumer group at
    group.consumer.max.size (both 1 here) refuse a second consumer, which reports the error; the member
    already in keeps its partitions."""
    cluster = make_cluster(brokers=1, broker_extra="group.max.size=1\ngroup.consumer.max.size=1\n")
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "full", partitions=2, rf=1)
    for protocol in ("classic", "consumer"):
        group = f"g-full-{protocol}"
        errors: list = []
        first = consumer(bootstrap, group, **{"group.protocol": protocol})
        second = consumer(bootstrap, group, **{"group.protocol": protocol, "error_cb": errors.append})
        try:
            first.subscribe(["full"])
            poll_until([first], {}, lambda c=first: assigned(c) == {0, 1}, 20)
            assert assigned(first) == {0, 1}, protocol
            second.subscribe(["full"])
            refused = refusal_seen(second, errors)
            assert refused is not None, (protocol, [e.str() for e in errors])
            first.poll(0.5)
            assert assigned(first) == {0, 1} and not assigned(second), protocol
        finally:
            second.close()
            first.close()


@pytest.mark.peers
def test_kafka_dump_log_decodes_our_consumer_offsets(make_cluster, tmp_path):
    """Kafka's DumpLogSegments --offsets-decoder (kafka-dump-log) reads our __consumer_offsets segments: a
    classic group's and a consumer group's commits, the classic group's GroupMetadata records (empty when the
    first JoinGroup created it, its member with subscription and assignment, then its empty generation once
    the member left), the consumer group's member (read as a consumer-protocol one), epoch and assignment
    records and the tombstones of the member that left, a regex group's ConsumerGroupRegularExpression and
    its tombstone, with no record it cannot decode."""
    from epochkraft.peers.fetch import java_command

    try:
        command = java_command("org.apache.kafka.tools.DumpLogSegments", [], jvm=["-XX:TieredStopAtLevel=1"])
    except PeerUnavailable as exc:
        pytest.skip(f"Kafka's tools unavailable: {exc}")
    cluster = make_cluster(brokers=1)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "dumped", partitions=2, rf=1)
    produce(bootstrap, "dumped", 20)
    members = {}
    for protocol in ("classic", "consumer"):
        c = consumer(
            bootstrap, f"dump-{protocol}", **{"group.protocol": protocol, "enable.auto.commit": False}
        )
        try:
            c.subscribe(["dumped"])
            poll_until([c], {}, lambda c=c: assigned(c) == {0, 1}, 30)
            assert assigned(c) == {0, 1}, protocol
            c.commit(
                offsets=[TopicPartition("dumped", 0, 7), TopicPartition("dumped", 1, 8)], asynchronous=False
            )
            members[protocol] = c.memberid()
        finally:
            c.close()
    regex = consumer(bootstrap, "dump-regex", **{"group.protocol": "consumer", "enable.auto.commit": False})
    try:
        regex.subscribe(["^dump.*"])
        poll_until([regex], {}, lambda: assigned(regex) == {0, 1}, 30)
        assert assigned(regex) == {0, 1}
    finally:
        regex.close()
    time.sleep(1)  # the consumer group's leave is written after the close returns
    segments = sorted(str(p) for p in (tmp_path / "cluster").glob("broker-*/**/__consumer_offsets-*/*.log"))
    result = subprocess.run(
        [*command, "--offsets-decoder", "--files", ",".join(segments)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for protocol in ("classic", "consumer"):
        for partition, offset in ((0, 7), (1, 8)):
            commit = f'"group":"dump-{protocol}","topic":"dumped","partition":{partition}'
            assert commit in out and f'"offset":{offset},' in out, (protocol, out[-3000:])
    member_key = '"data":{"groupId":"dump-consumer","memberId":"' + members["consumer"] + '"}}'
    for record_type in (5, 7, 8):  # the member's subscription, target and current assignment
        assert f'key: {{"type":"{record_type}",{member_key} payload: {{"version":"0"' in out, out[-3000:]
    subscription = next(
        line for line in out.splitlines() if f'key: {{"type":"5",{member_key} payload: {{' in line
    )
    assert '"classicMemberMetadata":null' in subscription, subscription  # a consumer-protocol member
    tombstones = [f'key: {{"type":"{t}",{member_key} payload: <DELETE>' for t in (8, 7, 5)]
    assert all(t in out for t in tombstones) and sorted(tombstones, key=out.index) == tombstones
    epoch = 'key: {"type":"3","data":{"groupId":"dump-consumer"}} payload: {"version":"0","data":{"epoch":1,'
    assert epoch in out
    classic_key = 'key: {"type":"2","data":{"group":"dump-classic"}} payload: {"version":"3","data":'
    stable = next(
        line
        for line in out.splitlines()
        if classic_key + '{"protocolType":"consumer","generation":1,' in line
    )
    assert f'"members":[{{"memberId":"{members["classic"]}",' in stable, stable  # the synced member
    assert '"assignment":{"assignedPartitions":[{"topic":"dumped","partitions":[0,1]}]' in stable, stable
    empty = '{"protocolType":"consumer","generation":2,"protocol":null,"leader":null,'
    assert classic_key + empty in out and out.index(classic_key + empty) > out.index(stable)  # it left
    created = (
        '{"protocolType":"","generation":0,"protocol":null,"leader":null,'  # newEmptyGroupMetadataRecord
    )
    assert classic_key + created in out and out.index(classic_key + created) < out.index(stable)
    regex_key = 'key: {"type":"16","data":{"groupId":"dump-regex","regularExpression":"'
    resolved = next(line for line in out.splitlines() if regex_key in line and "<DELETE>" not in line)
    assert '"topics":["dumped"]' in resolved, resolved
    assert any(regex_key in line and "<DELETE>" in line for line in out.splitlines()), out[-3000:]
    for failure in ("Exception", "Unknown record", "Could not", "error", "isvalid: false"):
        assert failure not in out, out[-3000:]
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J2)
    formatted = run_tool(
        log4j, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
        "--topic", "__consumer_offsets", "--from-beginning", "--timeout-ms", "30000",
        "--max-messages", str(out.count("| offset: ")),  # ours; its own group's records come after
        "--formatter", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
    )  # fmt: skip
    for protocol in ("classic", "consumer"):  # Kafka's formatter prints the offset commits alone
        commit = (
            f'"data":{{"group":"dump-{protocol}","topic":"dumped","partition":1}}}},"value":{{"version":4'
        )
        assert commit in formatted, formatted
