"""``cluster up --secure --controllers 3`` as LocalCluster(secure=True, controllers=3): the voters speak the
Raft RPCs over mTLS and the quorum elects and serves a broker; as Kafka's controller listener with an
authorizer (ControllerApis.handleVote, handleBeginQuorumEpoch, handleEndQuorumEpoch, handleFetchSnapshot:
CLUSTER_ACTION; handleDescribeQuorum: DESCRIBE), a client with a trusted certificate but no such ACL gets
CLUSTER_AUTHORIZATION_FAILED and a client without a certificate does not get through the handshake."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from kio.schema.describe_quorum.v1 import request as dq

from epochkraft.chaos.scenarios import until
from epochkraft.harness.cluster import LocalCluster
from epochkraft.harness.kio_client import split
from epochkraft.net.client import KafkaClient
from epochkraft.net.errors import NetworkError
from epochkraft.protocol.errors import ErrorCode
from epochkraft.raft import wire
from epochkraft.raft.messages import BeginQuorumEpochRequest, VoteRequest
from epochkraft.security.certs import LocalCA
from tests.conftest import write_fast_configs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

DESCRIBE_QUORUM = dq.DescribeQuorumRequest(
    topics=(dq.TopicData(topic_name="__cluster_metadata", partitions=(dq.PartitionData(partition_index=0),)),)
)


def prepare_security(directory: Path, brokers: int) -> None:
    """The files LocalSecurity would make, plus a keystore for ``mallory``: trusted by the CA, no ACL."""
    directory.mkdir(parents=True)
    ca = LocalCA.create("epochkraft")
    ca.write_truststore(directory / "ca.pem")
    for name in ["controller", "admin", "mallory", *(f"broker-{n}" for n in range(1, brokers + 1))]:
        ca.issue(name, directory / f"{name}.pem")


def tls(directory: Path, keystore: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(directory / "ca.pem"))
    if keystore is not None:
        context.load_cert_chain(str(directory / f"{keystore}.pem"))
    return context


async def send(cluster: LocalCluster, voter: int, context: ssl.SSLContext, request: object) -> object:
    host, port = split(cluster.voter_address(voter))[0]
    async with KafkaClient(host, port, ssl_context=context, request_timeout_ms=5000) as client:
        return await client.send(request)


async def scenario(cluster: LocalCluster, security_dir: Path) -> None:
    leader = await until(lambda: asyncio.to_thread(cluster.active_voter), 30, "an active controller")
    admin = tls(security_dir, "admin")
    mallory = tls(security_dir, "mallory")
    anonymous = tls(security_dir, None)
    view = await send(cluster, leader, admin, DESCRIBE_QUORUM)
    assert view.topics[0].partitions[0].leader_id == leader
    forged = [
        wire.encode_begin_quorum_epoch_request(BeginQuorumEpochRequest(leader, 2**30), cluster.cluster_id),
        wire.encode_vote_request(VoteRequest(2**30, leader, 0, 0), cluster.cluster_id, leader),
        DESCRIBE_QUORUM,
    ]
    for voter in cluster.voters:
        for request in forged:
            answer = await send(cluster, voter, mallory, request)
            assert answer.error_code == ErrorCode.cluster_authorization_failed, (voter, answer)
        with pytest.raises((ssl.SSLError, NetworkError, OSError)):
            await send(cluster, voter, anonymous, DESCRIBE_QUORUM)
    again = await send(cluster, leader, admin, DESCRIBE_QUORUM)
    assert again.topics[0].partitions[0].leader_epoch == view.topics[0].partitions[0].leader_epoch


def test_cluster_up_secure_with_a_quorum_of_three(tmp_path: Path) -> None:
    broker_cfg, controller_cfg = write_fast_configs(tmp_path / "config")
    cluster = LocalCluster(
        data_dir=tmp_path / "cluster",
        brokers=1,
        broker_config=broker_cfg,
        controller_config=controller_cfg,
        secure=True,
        controllers=3,
    )
    prepare_security(tmp_path / "cluster" / "security", 1)
    try:
        cluster.start()  # the broker registers with the quorum's active controller over mTLS
        asyncio.run(scenario(cluster, tmp_path / "cluster" / "security"))
    finally:
        cluster.stop()
        cluster.kill_all()
