"""The controller id brokers name in Metadata and DescribeCluster: a live broker at random, as Kafka's KRaft
brokers (KafkaApis with KRaftMetadataCache.getRandomAliveBrokerId), so admin clients spread their
controller-bound requests over every broker's forwarding channel."""

from kio.schema.types import BrokerId

from epochkraft.server.handlers._controller_id import NO_CONTROLLER, random_broker_id

LIVE = [BrokerId(1), BrokerId(2), BrokerId(3)]


def test_controller_id_names_every_live_broker_over_many_answers():
    # 300 answers miss one of three brokers with probability 3 * (2/3)^300, about 1e-52
    named = {random_broker_id(LIVE) for _ in range(300)}
    assert named == set(LIVE)


def test_controller_id_is_one_of_the_listed_brokers_only():
    assert {random_broker_id([BrokerId(7)]) for _ in range(20)} == {BrokerId(7)}


def test_no_live_broker_is_no_controller():
    assert random_broker_id([]) == NO_CONTROLLER == -1
