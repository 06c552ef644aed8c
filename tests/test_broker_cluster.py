"""Controller + 3 brokers as real processes: acks=all replication, follower and leader failures, a
broker restarted with an empty disk kept out of the ISR until it has caught up under its new epoch."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from epochkraft.harness.kio_client import MiniClient
from epochkraft.protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await predicate()
        if result:
            return result
        await asyncio.sleep(interval)
    raise AssertionError("condition not met in time")


async def produce_values(client: MiniClient, topic: str, start: int, count: int) -> list[bytes]:
    acked = []
    for i in range(start, start + count):
        value = f"value-{i}".encode()
        error, _ = await client.produce(topic, 0, [value])
        assert error == ErrorCode.none, error
        acked.append(value)
    return acked


async def test_replication_failover_and_rejoin(make_cluster):
    cluster = make_cluster(3)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("orders", 1, 3, {"min.insync.replicas": "2"}) == ErrorCode.none
        acked = await produce_values(client, "orders", 0, 20)
        p, _ = await client.partition_state("orders")
        assert sorted(p.isr_nodes) == [1, 2, 3]

        # kill -9 a follower: the ISR shrinks, produce with acks=all continues (min.insync.replicas 2).
        follower = next(b for b in p.replica_nodes if b != p.leader_id)
        cluster.node(follower).kill()

        async def shrunk():
            state, _ = await client.partition_state("orders")
            return follower not in state.isr_nodes and state

        await wait_for(shrunk)
        acked += await produce_values(client, "orders", 20, 20)

        # Restart it: it catches up and rejoins the ISR.
        started = time.monotonic()
        cluster.node(follower).start()

        async def rejoined():
            state, _ = await client.partition_state("orders")
            return follower in state.isr_nodes

        await wait_for(rejoined)
        rejoin_seconds = time.monotonic() - started
        print(f"follower rejoined the ISR {rejoin_seconds:.2f}s after restart")

        # kill -9 the leader: a new leader from the ISR, no acknowledged record lost.
        p, _ = await client.partition_state("orders")
        old_leader = p.leader_id
        cluster.node(old_leader).kill()

        async def new_leader():
            state, _ = await client.partition_state("orders")
            return state.leader_id not in (-1, old_leader) and state

        state = await wait_for(new_leader)
        assert state.leader_id in p.isr_nodes
        acked += await produce_values(client, "orders", 40, 10)
        values = [v for _, v in await client.read_all("orders")]
        assert values == acked, "every acknowledged value, once, in order"
        cluster.node(old_leader).start()
    finally:
        await client.close()


async def test_not_enough_replicas_and_controlled_shutdown(make_cluster):
    cluster = make_cluster(3)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("strict", 1, 2, {"min.insync.replicas": "2"}) == ErrorCode.none
        p, _ = await client.partition_state("strict")
        follower = next(b for b in p.replica_nodes if b != p.leader_id)
        cluster.node(follower).kill()

        async def shrunk():
            state, _ = await client.partition_state("strict")
            return len(state.isr_nodes) == 1

        await wait_for(shrunk)
        error, _ = await client.produce("strict", 0, [b"x"], retries=1)
        assert error == ErrorCode.not_enough_replicas
        error, _ = await client.produce("strict", 0, [b"x"], acks=1)
        assert error == ErrorCode.none, "acks=1 does not need the ISR"

        # SIGTERM on a leader: controlled shutdown moves its leaderships before it exits.
        assert await client.create_topic("moving", 1, 2) == ErrorCode.none
        p, _ = await client.partition_state("moving")
        leader = cluster.node(p.leader_id)
        assert leader.stop() == 0
        state, _ = await client.partition_state("moving")
        assert state.leader_id not in (-1, p.leader_id)
        assert "controlled shutdown" in leader.log_text()
    finally:
        await client.close()


async def test_empty_disk_restart_rejoins_only_under_the_new_epoch(make_cluster):
    cluster = make_cluster(3)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("wiped", 1, 3, {"min.insync.replicas": "2"}) == ErrorCode.none
        acked = await produce_values(client, "wiped", 0, 30)
        p, _ = await client.partition_state("wiped")
        victim = next(b for b in p.replica_nodes if b != p.leader_id)
        node = cluster.node(victim)
        old_log = node.log_text()
        node.restart(wipe=True)
        assert "registered" in node.log_text()[len(old_log) :]

        async def rejoined():
            state, _ = await client.partition_state("wiped")
            return victim in state.isr_nodes

        await wait_for(rejoined)
        # It was admitted only after catching up: its log now holds every acknowledged record.
        from epochkraft.broker.log import PartitionLog
        from epochkraft.protocol.records import decode_batches

        await asyncio.sleep(0.5)
        plog = PartitionLog.open(node.data_dir / "wiped-0")
        values = [r.value for b in decode_batches(plog.read(0, 1 << 24)) for r in b.records]
        assert values[: len(acked)] == acked
        leader_log = cluster.node(p.leader_id).log_text()
        assert "ISR changed" in leader_log
    finally:
        await client.close()


async def follower_fetches_served(port: int) -> float:
    """The leader's count of follower Fetch requests served (its Prometheus histogram)."""
    import urllib.request

    def read() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return response.read().decode()

    text = await asyncio.to_thread(read)
    line = next(
        line
        for line in text.splitlines()
        if line.startswith("kafka_FetchRequestLatencySeconds_count") and 'kind="follower"' in line
    )
    return float(line.rsplit(" ", 1)[1])


async def test_followers_behind_a_leader_on_an_empty_disk_rejoin_without_spinning(make_cluster):
    """Both followers die, then the leader (the last ISR member); the leader comes back on an empty disk
    and is re-elected (the exception KIP-903 names), then the followers come back holding older epochs
    than any the leader has: each truncates to the leader's first epoch's start and rejoins the ISR, and
    none keeps fetching in a loop."""
    cluster = make_cluster(3, admin=True)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("healing", 1, 3) == ErrorCode.none
        await produce_values(client, "healing", 0, 20)
        p, _ = await client.partition_state("healing")
        leader = p.leader_id
        followers = [b for b in p.replica_nodes if b != leader]
        for follower in followers:
            cluster.node(follower).kill()

        async def only_leader():
            state, _ = await client.partition_state("healing")
            return list(state.isr_nodes) == [leader]

        await wait_for(only_leader)
        await produce_values(client, "healing", 20, 10)  # the followers miss these
        cluster.node(leader).restart(wipe=True)
        await client.close()
        client = MiniClient(cluster.bootstrap)

        async def leads_again():
            state, _ = await client.partition_state("healing")
            return state.leader_id == leader

        await wait_for(leads_again, timeout=30)
        await produce_values(client, "healing", 100, 5)
        for follower in followers:
            cluster.node(follower).start()
        started = time.monotonic()

        async def full_isr():
            state, _ = await client.partition_state("healing")
            return sorted(state.isr_nodes) == sorted([leader, *followers])

        await wait_for(full_isr, timeout=30)
        print(f"both followers back in the ISR {time.monotonic() - started:.2f}s after their restart")
        # No spin: a quiet follower long-polls (replica.fetch.wait.max.ms=200), a spinning one does not wait.
        port = cluster.admin_port(leader)
        before = await follower_fetches_served(port)
        await asyncio.sleep(2.0)
        served = await follower_fetches_served(port) - before
        long_polls = 2 * 2.0 / 0.2  # two followers, one long poll per 200 ms each
        assert served <= 5 * long_polls, f"{served} follower fetches in 2 s: a follower is spinning"
        for follower in followers:
            truncations = cluster.node(follower).log_text().count("follower truncating on divergence")
            assert 1 <= truncations <= 3, truncations
        values = [v for _, v in await client.read_all("healing")]
        assert values == [f"value-{i}".encode() for i in range(100, 105)]
    finally:
        await client.close()


def _api_versions_answered(port: int, wait_s: float) -> bool:
    """Sends ApiVersions v0 on a new connection; whether an answer arrives within ``wait_s`` (a port bound
    but not listening refuses the connection: no answer)."""
    client_id = b"catch-up-test"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            sock.settimeout(wait_s)
            return len(sock.recv(4)) == 4
    except (ConnectionRefusedError, TimeoutError):
        return False


async def test_a_restarted_broker_serves_clients_only_once_caught_up(make_cluster):
    # As Kafka's BrokerServer (request processing enabled after the initial metadata catch-up): a broker
    # back from a crash binds its port at once but serves nothing until it has applied the metadata log
    # past its new registration; before, it answered Metadata with no brokers or topics (clients then
    # dropped every broker they knew) and Produce with UNKNOWN_TOPIC_OR_PARTITION.
    cluster = make_cluster(2)
    client = MiniClient(cluster.bootstrap)
    try:
        assert await client.create_topic("caught-up", 2, 2) == ErrorCode.none
        broker, controller = cluster.node(2), cluster.node(0)
        broker.kill()
        controller.signal("STOP")  # the restarted broker cannot register, so cannot catch up
        try:
            broker.launch()
            await wait_for(lambda: asyncio.to_thread(lambda: broker.log_text().count("logs recovered") == 2))
            deadline = time.monotonic() + 2.0  # its listener is bound right after the line above
            while time.monotonic() < deadline:
                assert not await asyncio.to_thread(_api_versions_answered, broker.port, 0.3)
        finally:
            controller.signal("CONT")
        assert await wait_for(lambda: asyncio.to_thread(_api_versions_answered, broker.port, 1.0), 30)
        restarted = MiniClient(f"127.0.0.1:{broker.port}")
        metadata = await restarted.metadata("caught-up")
        await restarted.close()
        assert 1 in {
            b.node_id for b in metadata.brokers
        }  # itself too once unfenced (fenced ones are not listed)
        assert [t.error_code for t in metadata.topics] == [ErrorCode.none]
    finally:
        await client.close()
