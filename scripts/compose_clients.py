"""The Kafka clients scripts/compose-test runs, from the host and inside the compose network (piped to
`python3 -` in the notebook container): librdkafka through confluent-kafka, every call bounded in time;
and the look at the controller quorum through the controllers' admin ports.

    compose_clients.py create  --bootstrap B --topic T
    compose_clients.py produce --bootstrap B --topic T --start S --count N    (acks=all, idempotent)
    compose_clients.py verify  --bootstrap B --topic T --count N              (every value 0..N-1 once)
    compose_clients.py isr     --bootstrap B --timeout S                      (every ISR full again)
    compose_clients.py quorum  --admin A,... [--not-leader ID] [--topic T] --timeout S
        (the controllers at A agree on one active controller, not ID, and hold what it committed, T too;
        the last line printed is leader=ID)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create(args: argparse.Namespace) -> int:
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    topic = NewTopic(args.topic, 3, 3, config={"min.insync.replicas": "2"})
    for future in admin.create_topics([topic], operation_timeout=30).values():
        future.result(60)
    print(f"created {args.topic}: 3 partitions, RF 3, min.insync.replicas 2")
    return 0


def produce(args: argparse.Namespace) -> int:
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "delivery.timeout.ms": 60000,
        }
    )
    acked: list[int] = []
    failed: list[str] = []

    def on_delivery(error, message) -> None:
        if error is None:
            acked.append(int(message.value()))
        else:
            failed.append(str(error))

    for value in range(args.start, args.start + args.count):
        producer.produce(args.topic, str(value).encode(), on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(90)
    print(f"produced {args.count} to {args.topic} via {args.bootstrap}: {len(acked)} acknowledged (acks=all)")
    if failed:
        print(f"  failed: {len(failed)}, first: {failed[0]}")
    return 0 if len(acked) == args.count and not left else 1


def verify(args: argparse.Namespace) -> int:
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "compose-test-verify"})
    try:
        partitions = consumer.list_topics(args.topic, timeout=30).topics[args.topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
        values: list[int] = []
        positions = dict.fromkeys(partitions, 0)
        deadline = time.monotonic() + 90
        while any(positions[p] < ends[p] for p in partitions) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            values.append(int(message.value()))
            positions[message.partition()] = message.offset() + 1
    finally:
        consumer.close()
    missing = set(range(args.count)) - set(values)
    duplicated = len(values) - len(set(values))
    print(
        f"read {len(values)} records of {args.topic} via {args.bootstrap}: "
        f"{len(missing)} of {args.count} acknowledged missing, {duplicated} duplicated"
    )
    return 0 if not missing and not duplicated else 1


def isr(args: argparse.Namespace) -> int:
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    deadline = time.monotonic() + args.timeout
    short: list[str] = []
    while time.monotonic() < deadline:
        try:
            topics = admin.list_topics(timeout=10).topics
        except KafkaException:
            time.sleep(1)
            continue
        short = [
            f"{name}-{index} isr {sorted(p.isrs)} of {sorted(p.replicas)}"
            for name, topic in topics.items()
            for index, p in topic.partitions.items()
            if sorted(p.isrs) != sorted(p.replicas) or p.leader < 0
        ]
        if not short:
            count = sum(len(t.partitions) for t in topics.values())
            print(f"every ISR is full: {count} partitions of {len(topics)} topics")
            return 0
        time.sleep(1)
    print(f"ISRs still short after {args.timeout} s: {', '.join(short[:10])}")
    return 1


def admin_state(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/v1/state", timeout=5) as response:
        return json.load(response)


def quorum(args: argparse.Namespace) -> int:
    """Waits until every controller at --admin is in the quorum (all of its voters), follows the same leader
    in the same epoch, exactly that leader is active, every high watermark has reached the leader's of the
    look before (a controller back from a stop has caught up), and each lists --topic's partitions."""
    addresses = args.admin.split(",")
    deadline = time.monotonic() + args.timeout
    reached: tuple[int, int] | None = None  # (leader, its high watermark) at the previous look
    problem = "no look yet"
    while time.monotonic() < deadline:
        try:
            states = {address: admin_state(address) for address in addresses}
        except (OSError, ValueError) as exc:
            problem, reached = f"admin port: {exc}", None
            time.sleep(0.5)
            continue
        views = {address: state["quorum"] for address, state in states.items()}
        leaders = {(q["leader"], q["epoch"]) for q in views.values()}
        active = sorted(q["node_id"] for q in views.values() if q["active"])
        (leader, epoch) = next(iter(leaders))
        watermarks = {q["node_id"]: q["high_watermark"] or 0 for q in views.values()}
        missing = [
            q["node_id"]
            for address, q in views.items()
            if args.topic and not any(p["topic"] == args.topic for p in states[address]["partitions"])
        ]
        if len(leaders) > 1 or active != [leader] or leader < 0:
            problem = f"leaders (id, epoch) {sorted(leaders)}, active {active}"
        elif leader == args.not_leader:
            problem = f"{leader} still the active controller"
        elif any(len(q["voters"]) != 3 for q in views.values()):
            problem = f"voters {[q['voters'] for q in views.values()]}"
        elif reached is None or reached[0] != leader or min(watermarks.values()) < reached[1]:
            problem = f"high watermarks {watermarks}, the leader's before {reached}"
        elif missing:
            problem = f"controllers {missing} do not list {args.topic}"
        else:
            roles = ", ".join(f"{q['node_id']} {q['role']}" for q in views.values())
            print(f"controller {leader} active in epoch {epoch} ({roles}); high watermarks {watermarks}")
            print(f"leader={leader}")
            return 0
        if len(leaders) == 1 and leader >= 0 and leader in watermarks:
            reached = (leader, watermarks[leader])
        time.sleep(0.5)
    print(f"no agreed active controller at {args.admin} within {args.timeout} s: {problem}")
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["create", "produce", "verify", "isr", "quorum"])
    parser.add_argument("--bootstrap")
    parser.add_argument("--admin", help="controllers' admin ports, HOST:PORT,...")
    parser.add_argument("--not-leader", type=int, default=-1)
    parser.add_argument("--topic", help="default: compose-test (quorum: none)")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    by_admin = args.command == "quorum"
    if by_admin == (args.bootstrap is not None) or by_admin != bool(args.admin):
        parser.error("quorum takes --admin; the others take --bootstrap")
    if args.topic is None and not by_admin:
        args.topic = "compose-test"
    commands = {"create": create, "produce": produce, "verify": verify, "isr": isr, "quorum": quorum}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
