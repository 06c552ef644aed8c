"""``epochkraft cluster up --secure`` as LocalCluster(secure=True): the daemons come up with mTLS between
them and the authorizer on, and the printed client settings (SCRAM-SHA-512 over TLS as the admin) work
with confluent-kafka; a restart on the same data dir reuses the CA and the password."""

from __future__ import annotations

import uuid

import pytest

from epochkraft.harness.cluster import LocalCluster
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.timeout(240)]


def librdkafka(settings: str) -> dict[str, str]:
    """The librdkafka comment line of client.properties -> a confluent-kafka config."""
    values = dict(
        line.split("=", 1) for line in settings.splitlines() if "=" in line and not line.startswith("#")
    )
    extra = next(line for line in settings.splitlines() if line.startswith("# librdkafka"))
    conf = dict(item.split("=", 1) for item in extra.split(": ", 1)[1].split())
    return {
        "bootstrap.servers": values["bootstrap.servers"],
        "security.protocol": values["security.protocol"],
        "sasl.mechanism": values["sasl.mechanism"],
        **conf,
    }


def test_cluster_up_secure_prints_settings_that_work(tmp_path):
    from confluent_kafka import Consumer, Producer

    broker_cfg, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(
        data_dir=tmp_path / "cluster",
        brokers=3,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        secure=True,
    )
    try:
        cluster.start()
        security = cluster.security
        assert security is not None
        password = security.admin_password
        conf = librdkafka(security.client_properties(cluster.client_bootstrap))
        topic = f"secure-{uuid.uuid4().hex[:6]}"
        producer = Producer({**conf, "acks": "all"})
        for i in range(10):
            producer.produce(topic, b"%d" % i)
        assert producer.flush(30) == 0
        consumer = Consumer({**conf, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        values = set()
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.add(msg.value())
            if len(values) == 10:
                break
        consumer.close()
        assert values == {b"%d" % i for i in range(10)}
        cluster.stop()
        again = LocalCluster(
            data_dir=tmp_path / "cluster",
            brokers=3,
            broker_config=broker_cfg,
            controller_config=controller_cfg,
            secure=True,
        )
        assert again.security is not None and again.security.admin_password == password
    finally:
        cluster.kill_all()
