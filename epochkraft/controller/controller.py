"""The sans-IO controller: requests and time in, metadata records and responses out.

Each operation decides (reading state only), appends its records to the metadata log, and replays
them; ``replay`` is the only path that changes state, and the same path rebuilds it from the log after a
restart. Operations that depend on an earlier change (unfence, then elect; enter controlled shutdown,
then move leaderships) decide and commit in two steps, as Kafka's controller writes them in order.

Requests and responses are kio objects at the newest version served: BrokerRegistration v3,
BrokerHeartbeat v1, AlterPartition v3 (with the version the broker used), CreateTopics v7,
DeleteTopics v6, UnregisterBroker v0, ElectLeaders v2, DescribeCluster v1, AllocateProducerIds v0; the admin operations
(CreatePartitions, reassignment, configs) live in ``admin_operations.AdminOperations``, which it inherits.

Domain events (broker fenced, leader elected, ISR change committed or rejected...) are appended to
``outbox`` for the daemon to ship; the controller itself never does IO.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterator
from functools import singledispatchmethod

from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.allocate_producer_ids.v0.response import AllocateProducerIdsResponse
from kio.schema.alter_client_quotas.v1 import response as alter_quotas_resp
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.alter_partition.v3 import response as alter_resp
from kio.schema.alter_partition.v3.request import AlterPartitionRequest
from kio.schema.alter_user_scram_credentials.v0 import response as scram_resp
from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.schema.create_acls.v3 import response as create_acls_resp
from kio.schema.create_acls.v3.request import CreateAclsRequest
from kio.schema.create_topics.v7 import request as create_req
from kio.schema.create_topics.v7 import response as create_resp
from kio.schema.delete_acls.v3 import response as delete_acls_resp
from kio.schema.delete_acls.v3.request import DeleteAclsRequest
from kio.schema.delete_topics.v6 import response as delete_resp
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterBroker, DescribeClusterResponse
from kio.schema.elect_leaders.v2 import response as elect_resp
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.schema.unregister_broker.v0.response import UnregisterBrokerResponse
from kio.schema.update_features.v1.request import UpdateFeaturesRequest
from kio.schema.update_features.v1.response import UpdatableFeatureResult, UpdateFeaturesResponse
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from epochkraft.controller import client_quota_control, security_control
from epochkraft.controller.admin_operations import AdminOperations
from epochkraft.controller.cluster_control import CHANGE_NONE, BrokerControlState, ClusterControl
from epochkraft.controller.configuration_control import ConfigurationControl
from epochkraft.controller.feature_control import (
    METADATA_VERSION_LEVEL,
    FeatureUpdate,
    decide_update_features,
)
from epochkraft.controller.metadata_log import ControllerLog, MetadataLog
from epochkraft.controller.partition_change import Election
from epochkraft.controller.producer_id_control import generate_next_producer_id
from epochkraft.controller.replication_control import (
    AlterPartitionItem,
    IsrMember,
    NewTopic,
    ReplicationControl,
)
from epochkraft.controller.settings import ControllerSettings
from epochkraft.metadata import group_config
from epochkraft.metadata.config_schema import MIN_INSYNC, UNCLEAN
from epochkraft.metadata.image import ELR_VERSION as ELR_FEATURE
from epochkraft.metadata.image import METADATA_VERSION as MV_FEATURE
from epochkraft.metadata.image import TRANSACTION_VERSION as TV_FEATURE
from epochkraft.metadata.image import MetadataDelta, MetadataImage
from epochkraft.metadata.registrations import NO_LEADER, NO_LEADER_CHANGE, Endpoint, PartitionRegistration
from epochkraft.metadata.snapshot import Snapshot
from epochkraft.metrics.documents import ControllerLogState, ControllerSummary, PartitionRow
from epochkraft.metrics.event_schema import EventFields
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID, which kio reads as None
METADATA_VERSION = METADATA_VERSION_LEVEL  # written at bootstrap
ELECTION_TYPES = {0: Election.PREFERRED, 1: Election.UNCLEAN}
# Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH (its QuorumController's records per batch).
MAX_PARTITIONS_PER_REQUEST = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
THROTTLED = "The throttling quota has been exceeded."  # Errors.THROTTLING_QUOTA_EXCEEDED's message


def refused_topic(name: str, error: ErrorCode, message: str) -> create_resp.CreatableTopicResult:
    """A CreateTopics answer for a topic not created (also the handler's, before the controller)."""
    return create_resp.CreatableTopicResult(
        name=TopicName(name),
        topic_id=None,
        error_code=error,
        error_message=message,
        topic_config_error_code=i16(0),
        num_partitions=i32(-1),
        replication_factor=i16(-1),
        configs=(),
    )


class Controller(AdminOperations):
    def __init__(
        self,
        cluster_id: str,
        settings: ControllerSettings | None = None,
        log: ControllerLog | None = None,
        node_id: int = 0,
    ) -> None:
        self.settings = settings or ControllerSettings()
        self.cluster_id = cluster_id
        self.node_id = node_id
        self.log: ControllerLog = log if log is not None else MetadataLog()
        # One metadata image, the one brokers build too; each manager keeps its bookkeeping beside it.
        self.image = MetadataImage(node_id)
        self._replayer = MetadataDelta(self.image, in_place=True)  # records the managers do not keep
        self.cluster = ClusterControl(cluster_id, self.settings.session_timeout_ms, self.image)
        static = {
            MIN_INSYNC: str(self.settings.min_insync_replicas),
            UNCLEAN: str(self.settings.unclean_leader_election_enable).lower(),
        }
        self.configuration = ConfigurationControl(
            static,
            node_id,
            self.image.topic_ids.__contains__,
            self.image,
            group_config.bounds_of(self.settings),
        )
        self.replication = ReplicationControl(self.configuration, self.image)
        self.outbox: list[tuple[str, EventFields]] = []  # domain events: (name, fields)
        self.listener_endpoint: tuple[str, int] = ("127.0.0.1", 0)
        self.replay = self.replay  # bind once: 3.11's singledispatchmethod rebuilds a wrapper per access

    def reset(self) -> None:
        """Forgets every record replayed, keeping this object (the daemon's handlers, metrics and admin
        endpoint hold it): a quorum controller that renounced with a write in flight replays the committed
        log again."""
        listener_endpoint = self.listener_endpoint
        self.__init__(self.cluster_id, self.settings, self.log, self.node_id)  # type: ignore[misc]
        self.listener_endpoint = listener_endpoint

    # ---- log plumbing -------------------------------------------------------------------------------
    def bootstrap(self, now_ms: int, *, new_cluster: bool | None = None) -> None:
        """Writes a new cluster's feature levels into its log (by default: an empty one): metadata.version,
        eligible.leader.replicas.version (1 unless the settings say 0, as Kafka 4.1+ formats a new
        cluster), transaction.version (2 unless the settings say otherwise: Kafka's format gives TV_2 to
        every metadata.version from 4.0-IV2), and with ELR on the cluster-level min.insync.replicas (Kafka's bootstrap does the same,
        so ELR decisions never depend on one controller's static setting)."""
        if not (self.log.next_offset == 0 if new_cluster is None else new_cluster):
            return
        records: list = [FeatureLevelRecord(name=MV_FEATURE, feature_level=METADATA_VERSION)]
        if self.settings.eligible_leader_replicas_version > 0:
            records.append(
                FeatureLevelRecord(
                    name=ELR_FEATURE, feature_level=self.settings.eligible_leader_replicas_version
                )
            )
            records += self.configuration.elr_safety_records()
        if self.settings.transaction_version > 0:
            records.append(
                FeatureLevelRecord(name=TV_FEATURE, feature_level=self.settings.transaction_version)
            )
        self._commit(records, now_ms)

    def load(self, data: bytes, replay_from: int = 0) -> int:
        """Rebuilds state from metadata-log bytes read from disk, replaying the records from
        ``replay_from`` on (a loaded snapshot holds the others); returns the number replayed."""
        count = 0
        for offset, record in self.standalone_log.load(data, replay_from):
            self.replay(record, offset)
            count += 1
        return count

    @property
    def standalone_log(self) -> MetadataLog:
        """The log of a controller without a quorum, where a batch is committed once appended."""
        if not isinstance(self.log, MetadataLog):
            raise TypeError(
                "a quorum controller's log is Raft's: its committed part is the quorum's published"
            )
        return self.log

    def load_snapshot(self, snapshot: Snapshot) -> int:
        """Replays a snapshot's records into an empty controller, each at the snapshot's last contained
        offset (QuorumController.handleLoadSnapshot); returns the number of records."""
        offset = snapshot.snapshot_id.last_contained_offset
        for record in snapshot.records:
            self.replay(record, offset)
        return len(snapshot.records)

    def _commit(self, records: list, now_ms: int) -> int:
        if not records:
            return self.log.next_offset
        base = self.log.append(records, now_ms)
        replay_partition_change = self._replayer.replay_partition_change
        for offset, record in enumerate(records, start=base):
            self._note(offset, record)
            if type(record) is PartitionChangeRecord:  # most records; skips two dispatch layers
                replay_partition_change(record)
            else:
                self.replay(record, offset)
        return base

    def _note(self, offset: int, record: object) -> None:
        """Turns records into the events the metrics schema documents (before replay changes state)."""
        if isinstance(record, PartitionChangeRecord):
            topic = self.replication.topics.get(record.topic_id)
            before = topic.partitions.get(record.partition_id) if topic else None
            if topic is None or before is None:
                return
            where: EventFields = {"topic": topic.name, "partition": record.partition_id, "offset": offset}
            if record.leader != NO_LEADER_CHANGE and record.leader != before.leader:
                unclean = record.leader_recovery_state == 1
                self.outbox.append(
                    (
                        "leader_elected",
                        where
                        | {
                            "leader": record.leader,
                            "leader_epoch": before.leader_epoch + 1,
                            "unclean": unclean,
                            "previous_leader": before.leader,
                        },
                    )
                )
            if record.eligible_leader_replicas is not None or record.last_known_elr is not None:
                elr = record.eligible_leader_replicas
                last_known = record.last_known_elr
                self.outbox.append(
                    (
                        "elr_change_committed",
                        where
                        | {
                            "elr": list(before.elr if elr is None else elr),
                            "last_known_elr": list(
                                before.last_known_elr if last_known is None else last_known
                            ),
                            "partition_epoch": before.partition_epoch + 1,
                        },
                    )
                )
            if record.isr is not None:
                self.outbox.append(
                    (
                        "isr_change_committed",
                        where
                        | {
                            "isr": list(record.isr),
                            "previous_isr": list(before.isr),
                            "partition_epoch": before.partition_epoch + 1,
                        },
                    )
                )
        elif isinstance(record, RegisterBrokerRecord):
            self.outbox.append(
                (
                    "broker_registered",
                    {
                        "broker": record.broker_id,
                        "epoch": record.broker_epoch,
                        "incarnation": str(record.incarnation_id),
                    },
                )
            )
        elif isinstance(record, FenceBrokerRecord):
            self.outbox.append(("broker_fenced", {"broker": record.id, "epoch": record.epoch}))
        elif isinstance(record, UnfenceBrokerRecord):
            self.outbox.append(("broker_unfenced", {"broker": record.id, "epoch": record.epoch}))
        elif isinstance(record, BrokerRegistrationChangeRecord) and record.in_controlled_shutdown == 1:
            self.outbox.append(
                ("broker_controlled_shutdown", {"broker": record.broker_id, "epoch": record.broker_epoch})
            )

    # ---- replay: the only place state changes -------------------------------------------------------
    @singledispatchmethod
    def replay(self, record: object, offset: int = -1) -> None:
        raise TypeError(f"no replay for {type(record).__name__}")

    @replay.register(RegisterBrokerRecord)
    @replay.register(FenceBrokerRecord)
    @replay.register(UnfenceBrokerRecord)
    @replay.register(BrokerRegistrationChangeRecord)
    @replay.register(UnregisterBrokerRecord)
    def _(
        self,
        record: RegisterBrokerRecord
        | FenceBrokerRecord
        | UnfenceBrokerRecord
        | BrokerRegistrationChangeRecord
        | UnregisterBrokerRecord,
        offset: int = -1,
    ) -> None:
        self.cluster.replay(record, offset)

    @replay.register(TopicRecord)
    @replay.register(PartitionRecord)
    @replay.register(PartitionChangeRecord)
    @replay.register(RemoveTopicRecord)
    def _(
        self,
        record: TopicRecord | PartitionRecord | PartitionChangeRecord | RemoveTopicRecord,
        offset: int = -1,
    ) -> None:
        self.replication.replay(record)

    @replay.register
    def _(self, record: ConfigRecord, offset: int = -1) -> None:
        self.configuration.replay(record)

    @replay.register(UserScramCredentialRecord)
    @replay.register(RemoveUserScramCredentialRecord)
    @replay.register(AccessControlEntryRecord)
    @replay.register(RemoveAccessControlEntryRecord)
    @replay.register(ClientQuotaRecord)
    def _(self, record: object, offset: int = -1) -> None:
        self._replayer.replay(record)

    @replay.register
    def _(self, record: ProducerIdsRecord, offset: int = -1) -> None:
        # Kafka's ProducerIdControlManager.replay: the next block only ever moves up.
        if record.next_producer_id <= self.image.next_producer_id:
            raise RuntimeError(
                f"next producer id {record.next_producer_id} is not above {self.image.next_producer_id}"
            )
        self._replayer.replay(record)

    @replay.register(FeatureLevelRecord)
    def _(self, record: object, offset: int = -1) -> None:
        self._replayer.replay(record)

    @replay.register(NoOpRecord)
    def _(self, record: object, offset: int = -1) -> None:
        pass  # carried in the log for Kafka compatibility; nothing in our state depends on them

    # ---- features -----------------------------------------------------------------------------------
    def update_features(self, now_ms: int, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
        """UpdateFeatures (v1 objects): every update or none."""
        updates = [
            FeatureUpdate(u.feature, u.max_version_level, u.upgrade_type) for u in request.feature_updates
        ]
        error, message, records = decide_update_features(
            self.image,
            updates,
            elr_safety_records=self.configuration.elr_safety_records,
            clear_elr_records=lambda: self.replication.decide_clear_elr(None),
        )
        if error == ErrorCode.none and not request.validate_only:
            self._commit(records, now_ms)
        # v0-1 list each feature only when the request succeeded; a refusal is the top-level error alone
        # (as Kafka 4.4 answers).
        results = tuple(
            UpdatableFeatureResult(feature=u.feature, error_code=error, error_message=message)
            for u in updates
            if error == ErrorCode.none
        )
        return UpdateFeaturesResponse(
            throttle_time=NO_THROTTLE, error_code=error, error_message=message, results=results
        )

    # ---- SCRAM credentials and ACLs (security_control decides, replay applies) ----------------------
    def alter_scram_credentials(
        self, now_ms: int, request: AlterUserScramCredentialsRequest
    ) -> list[scram_resp.AlterUserScramCredentialsResult]:
        records, results = security_control.alter_scram_credentials(self.image, request)
        self._commit(records, now_ms)
        return results

    def add_scram_credentials(self, now_ms: int, records: list[UserScramCredentialRecord]) -> int:
        """Bootstrap credentials (``--add-scram``): written for users the log does not know yet."""
        new = [r for r in records if (r.name, r.mechanism) not in self.image.scram_credentials]
        self._commit(new, now_ms)
        return len(new)

    def create_acls(
        self, now_ms: int, request: CreateAclsRequest
    ) -> list[create_acls_resp.AclCreationResult]:
        records, results = security_control.create_acls(self.image, request)
        self._commit(records, now_ms)
        return results

    def delete_acls(
        self, now_ms: int, request: DeleteAclsRequest
    ) -> list[delete_acls_resp.DeleteAclsFilterResult]:
        records, results = security_control.delete_acls(self.image, request)
        self._commit(records, now_ms)
        return results

    # ---- client quotas (client_quota_control decides, replay applies) -------------------------------
    def alter_client_quotas(
        self, now_ms: int, request: AlterClientQuotasRequest
    ) -> alter_quotas_resp.AlterClientQuotasResponse:
        """AlterClientQuotas v1 (ControllerApis.handleAlterClientQuotas): atomic, validate_only writes
        nothing."""
        alterations = [
            (
                # Kafka's request turns the entity list into a map: a type named twice counts once
                tuple(dict((e.entity_type, e.entity_name) for e in entry.entity).items()),
                [(op.key, None if op.remove else float(op.value)) for op in entry.ops],
            )
            for entry in request.entries
        ]
        records, results = client_quota_control.alter_client_quotas(self.image.client_quotas, alterations)
        if not request.validate_only:
            self._commit(records, now_ms)
        entries = tuple(
            alter_quotas_resp.EntryData(
                error_code=error,
                error_message=message,
                entity=tuple(alter_quotas_resp.EntityData(entity_type=t, entity_name=n) for t, n in entity),
            )
            for entity, (error, message) in results.items()
        )
        return alter_quotas_resp.AlterClientQuotasResponse(throttle_time=NO_THROTTLE, entries=entries)

    # ---- producer ids -------------------------------------------------------------------------------
    def allocate_producer_ids(
        self, now_ms: int, request: AllocateProducerIdsRequest
    ) -> AllocateProducerIdsResponse:
        """Kafka's QuorumController.allocateProducerIds: a block of ids for a broker of the current epoch."""
        error, records, block = generate_next_producer_id(
            self.image.next_producer_id,
            request.broker_id,
            self.cluster.check_broker_epoch(request.broker_id, request.broker_epoch),
            request.broker_epoch,
        )
        self._commit(records, now_ms)
        return AllocateProducerIdsResponse(
            throttle_time=NO_THROTTLE,
            error_code=error,
            producer_id_start=ProducerId(block.first_producer_id),
            producer_id_len=i32(block.size),
        )

    # ---- registration and heartbeats ----------------------------------------------------------------
    def register_broker(self, now_ms: int, request: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
        endpoints = tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in request.listeners)
        error, epoch, record = self.cluster.decide_registration(
            now_ms,
            self.log.next_offset,
            broker_id=request.broker_id,
            cluster_id=request.cluster_id,
            incarnation_id=request.incarnation_id or ZERO_UUID,
            endpoints=endpoints,
            rack=request.rack,
            previous_broker_epoch=getattr(request, "previous_broker_epoch", -1),
        )
        if record is not None:
            existing = self.cluster.brokers.get(request.broker_id)
            if existing is not None:
                # A new incarnation: its old self leaves every ISR and leadership first, so it cannot
                # resume leading with a shorter log (Kafka's handleBrokerShutdown).
                clean = getattr(request, "previous_broker_epoch", -1) == existing.epoch
                changes = self._shutdown_changes(request.broker_id, clean=clean)
            else:
                # No registration to compare with (a new disk, or after UnregisterBroker): whatever ELR or
                # last known ELR still names this id, the log behind it may be empty.
                changes = self._unregister_changes(request.broker_id)
            # One batch (Kafka's atomic ControllerResult): a failover cannot separate them.
            self._commit([*changes, record], now_ms)
            self.cluster.touch(request.broker_id, now_ms, -1)
        return BrokerRegistrationResponse(
            throttle_time=NO_THROTTLE, error_code=error, broker_epoch=i64(epoch)
        )

    def track_heartbeat(self, now_ms: int, request: BrokerHeartbeatRequest) -> bool:
        """A heartbeat's arrival, before it waits for its turn to be handled (Kafka's processBrokerHeartbeat
        records it first, outside the controller's event queue)."""
        return self.cluster.track_heartbeat(request.broker_id, request.broker_epoch, now_ms)

    def heartbeat(self, now_ms: int, request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        """Kafka's processBrokerHeartbeat: the next broker state from the current one and the request,
        the records of the transition, then the session is touched."""
        broker_id, epoch = request.broker_id, request.broker_epoch
        if self.cluster.check_broker_epoch(broker_id, epoch) != ErrorCode.none:
            return BrokerHeartbeatResponse(
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.stale_broker_epoch,
                is_caught_up=False,
                is_fenced=True,
                should_shut_down=False,
            )
        current, next_state = self.cluster.calculate_next_broker_state(
            broker_id,
            want_fence=request.want_fence,
            want_shut_down=request.want_shut_down,
            current_metadata_offset=request.current_metadata_offset,
            has_leaderships=lambda: any(p.leader == broker_id for _, _, p in self.replication.partitions()),
        )
        if current != next_state:
            if next_state in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
                if not self.cluster.brokers[broker_id].fenced:
                    self._fence(now_ms, broker_id)
            # Each transition and the partition changes it brings are one batch (Kafka's ControllerResult of
            # processBrokerHeartbeat): a failover between them would leave an unfenced broker's leaderless
            # partitions offline, or a broker in controlled shutdown still in ISRs, with nothing to retry.
            elif next_state == BrokerControlState.UNFENCED:
                elections = self.replication.decide_leaderless_elections(
                    lambda b: b == broker_id or self.cluster.is_active(b)
                )
                self._commit([UnfenceBrokerRecord(id=broker_id, epoch=epoch), *elections], now_ms)
            elif next_state == BrokerControlState.CONTROLLED_SHUTDOWN:
                change = BrokerRegistrationChangeRecord(
                    broker_id=broker_id, broker_epoch=epoch, fenced=CHANGE_NONE, in_controlled_shutdown=1
                )
                removals = self.replication.decide_remove_from_isrs(
                    broker_id, lambda b: b != broker_id and self.cluster.is_active(b)
                )
                self._commit([change, *removals], now_ms)
        self.cluster.touch(broker_id, now_ms, request.current_metadata_offset)
        if next_state == BrokerControlState.CONTROLLED_SHUTDOWN:
            # Complete once every active broker has replayed the records that moved its leaderships.
            self.cluster.maybe_update_controlled_shutdown_offset(broker_id, self.log.next_offset - 1, now_ms)
        return BrokerHeartbeatResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            is_caught_up=request.current_metadata_offset >= self.cluster.register_offsets.get(broker_id, 0),
            is_fenced=next_state in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW),
            should_shut_down=next_state == BrokerControlState.SHUTDOWN_NOW,
        )

    def _fence(self, now_ms: int, broker_id: int) -> None:
        """ISR and leader changes first, then the fence record (Kafka's order), in one batch."""
        registration = self.cluster.brokers[broker_id]
        fence = FenceBrokerRecord(id=broker_id, epoch=registration.epoch)
        self._commit([*self._remove_broker_changes(broker_id), fence], now_ms)

    def _remove_broker_changes(self, broker_id: int) -> list:
        """ISR and leader changes taking ``broker_id`` out of every partition (the last ISR member stays)."""

        def acceptable(b: int) -> bool:
            return b != broker_id and self.cluster.is_active(b)

        return self.replication.decide_remove_from_isrs(broker_id, acceptable)

    def _unregister_changes(self, broker_id: int) -> list:
        """Kafka's handleBrokerUnregistered: ``broker_id`` leaves every ISR, ELR, last known ELR and
        leadership."""

        def acceptable(b: int) -> bool:
            return b != broker_id and self.cluster.is_active(b)

        return self.replication.decide_remove_broker(broker_id, acceptable)

    def _shutdown_changes(self, broker_id: int, *, clean: bool) -> list:
        """Kafka's handleBrokerShutdown: with ELR on, a broker back from an unclean shutdown (no clean
        shutdown marker naming its last epoch) leaves every ISR and every ELR, since records it had not
        flushed may be gone; otherwise it is taken out as a fenced broker is."""
        if not self.image.elr_enabled or clean:
            return self._remove_broker_changes(broker_id)

        def acceptable(b: int) -> bool:
            return b != broker_id and self.cluster.is_active(b)

        return self.replication.decide_unclean_shutdown(broker_id, acceptable)

    def tick(self, now_ms: int) -> list[int]:
        """Fences brokers whose session expired, oldest first; returns their ids."""
        fenced = []
        for broker_id in self.cluster.expired_brokers(now_ms):
            self._fence(now_ms, broker_id)
            fenced.append(broker_id)
        return fenced

    def next_session_expiry_ms(self, now_ms: int) -> int | None:
        """When ``tick`` will next find a session to expire if no heartbeat comes first (None: never)."""
        return self.cluster.next_expiry_ms(now_ms)

    def unregister_broker(self, now_ms: int, request: UnregisterBrokerRequest) -> UnregisterBrokerResponse:
        registration = self.cluster.brokers.get(request.broker_id)
        if registration is None:
            return UnregisterBrokerResponse(
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.broker_id_not_registered,
                error_message=f"broker {request.broker_id} is not registered",
            )

        record = UnregisterBrokerRecord(broker_id=request.broker_id, broker_epoch=registration.epoch)
        self._commit([*self._unregister_changes(request.broker_id), record], now_ms)  # one batch
        return UnregisterBrokerResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None
        )

    # ---- AlterPartition -----------------------------------------------------------------------------
    def alter_partition(
        self, now_ms: int, request: AlterPartitionRequest, version: int = 3
    ) -> alter_resp.AlterPartitionResponse:
        """``request`` is an AlterPartition v3 object; ``version`` the version the broker sent (2 or 3)."""
        if self.cluster.check_broker_epoch(request.broker_id, request.broker_epoch) != ErrorCode.none:
            return alter_resp.AlterPartitionResponse(
                throttle_time=NO_THROTTLE, error_code=ErrorCode.stale_broker_epoch, topics=()
            )
        records: list = []
        topics = []
        for topic_data in request.topics:
            items = [
                AlterPartitionItem(
                    p.partition_index,
                    p.leader_epoch,
                    p.partition_epoch,
                    tuple(
                        [IsrMember(s.broker_id, s.broker_epoch) for s in p.new_isr_with_epochs]
                        if version >= 3
                        else [IsrMember(s.broker_id, -1) for s in p.new_isr_with_epochs]
                    ),
                    p.leader_recovery_state,
                )
                for p in topic_data.partitions
            ]
            results, topic_records = self.replication.decide_alter_partition(
                request.broker_id,
                topic_data.topic_id or ZERO_UUID,
                items,
                version=version,
                is_eligible=self._is_eligible,
                is_acceptable_leader=self.cluster.is_active,
                eligibility_check=not self.settings.unsafe_disable_kip841_eligibility_check,
            )
            records += topic_records
            topics.append((topic_data.topic_id or ZERO_UUID, results))
        self._commit(records, now_ms)
        response_topics = []
        for topic_id, results in topics:
            partitions = []
            topic = self.replication.topics.get(topic_id)
            for result in results:
                partition = result.partition
                if result.error == ErrorCode.none and partition is not None:
                    # Report the state after the commit (the replayed registration).
                    partition = topic.partitions[result.partition_index] if topic else partition
                else:
                    self.outbox.append(
                        (
                            "isr_change_rejected",
                            {
                                "broker": request.broker_id,
                                "topic_id": str(topic_id),
                                "partition": result.partition_index,
                                "error": result.error.name.upper(),
                                "error_code": int(result.error),
                            },
                        )
                    )
                partitions.append(
                    alter_resp.PartitionData(
                        partition_index=i32(result.partition_index),
                        error_code=result.error,
                        leader_id=BrokerId(partition.leader if partition else NO_LEADER),
                        leader_epoch=i32(partition.leader_epoch if partition else -1),
                        isr=tuple(BrokerId(b) for b in partition.isr) if partition else (),
                        leader_recovery_state=i8(int(partition.leader_recovery_state) if partition else 0),
                        partition_epoch=i32(partition.partition_epoch if partition else -1),
                    )
                )
            response_topics.append(alter_resp.TopicData(topic_id=topic_id, partitions=tuple(partitions)))
        return alter_resp.AlterPartitionResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=tuple(response_topics)
        )

    def _is_eligible(self, member: IsrMember) -> bool:
        """KIP-841 + KIP-903: registered, unfenced, not shutting down, and the epoch matches (if given)."""
        registration = self.cluster.brokers.get(member.broker_id)
        if registration is None or not registration.active:
            return False
        return member.broker_epoch == -1 or member.broker_epoch == registration.epoch

    # ---- topics -------------------------------------------------------------------------------------
    def create_topics(
        self,
        now_ms: int,
        request: create_req.CreateTopicsRequest,
        charge: Callable[[int], bool] | None = None,
    ) -> create_resp.CreateTopicsResponse:
        """Every topic the request creates is written in one batch, as Kafka's ReplicationControlManager
        returns one atomic ControllerResult (one append, not one per topic), and a request for more than
        MAX_PARTITIONS_PER_REQUEST partitions is refused whole (validateTotalNumberOfPartitions), which
        bounds the records one write holds. ``charge``: KIP-599's controller mutation quota, charged a
        topic's partitions once the topic is valid and placed (validate_only too, as createTopic's
        applyPartitionChangeQuota); False refuses it THROTTLING_QUOTA_EXCEEDED."""
        if self._requested_partitions(request) > MAX_PARTITIONS_PER_REQUEST:
            refused = (
                refused_topic(t.name, ErrorCode.policy_violation, TOO_MANY_PARTITIONS) for t in request.topics
            )
            return create_resp.CreateTopicsResponse(throttle_time=NO_THROTTLE, topics=tuple(refused))
        active = [b for b, r in self.cluster.brokers.items() if r.active]
        registered = set(self.cluster.brokers)
        results = []
        batch: list = []
        seen: set[str] = set()
        for topic in request.topics:
            if topic.name in seen:
                results.append(
                    refused_topic(topic.name, ErrorCode.invalid_request, "topic named twice in one request")
                )
                continue
            seen.add(topic.name)
            spec = NewTopic(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments={a.partition_index: tuple(a.broker_ids) for a in topic.assignments},
                configs={c.name: c.value for c in topic.configs},
            )
            created, records = self.replication.decide_create_topic(
                spec,
                active,
                registered,
                (self.settings.num_partitions, self.settings.default_replication_factor),
            )
            if created.error == ErrorCode.none and charge is not None and not charge(created.num_partitions):
                results.append(refused_topic(topic.name, ErrorCode.throttling_quota_exceeded, THROTTLED))
                continue
            if created.error == ErrorCode.none and not request.validate_only:
                batch += records
            configs = tuple(
                create_resp.CreatableTopicConfigs(
                    name=name, value=value, read_only=False, config_source=i8(1), is_sensitive=False
                )
                for name, value in sorted(spec.configs.items())
            )
            ok = created.error == ErrorCode.none
            results.append(
                create_resp.CreatableTopicResult(
                    name=topic.name,
                    topic_id=created.topic_id if ok and not request.validate_only else None,
                    error_code=created.error,
                    error_message=created.message,
                    topic_config_error_code=i16(0),
                    num_partitions=i32(created.num_partitions),
                    replication_factor=i16(created.replication_factor),
                    configs=configs if ok else (),  # Kafka's default: an empty list, not null
                )
            )
        self._commit(batch, now_ms)
        return create_resp.CreateTopicsResponse(throttle_time=NO_THROTTLE, topics=tuple(results))

    def _requested_partitions(self, request: create_req.CreateTopicsRequest) -> int:
        """The partitions a CreateTopics asks for: each topic's assignments, else its count (else the
        num.partitions default), as Kafka's ReplicationControlManager.validateTotalNumberOfPartitions."""
        return sum(
            len(t.assignments)
            if t.assignments
            else (self.settings.num_partitions if t.num_partitions == -1 else max(0, t.num_partitions))
            for t in request.topics
        )

    def delete_topics(self, now_ms: int, request: DeleteTopicsRequest) -> delete_resp.DeleteTopicsResponse:
        results = []
        for state in request.topics:
            if state.name is not None:
                topic = self.replication.topic(state.name)
                missing = ErrorCode.unknown_topic_or_partition
            else:
                topic = self.replication.topics.get(state.topic_id or ZERO_UUID)
                missing = ErrorCode.unknown_topic_id
            if topic is None:
                results.append(
                    delete_resp.DeletableTopicResult(
                        name=state.name, topic_id=state.topic_id, error_code=missing, error_message=None
                    )
                )
                continue
            self._commit(self.replication.decide_delete_topic(topic.topic_id), now_ms)
            results.append(
                delete_resp.DeletableTopicResult(
                    name=TopicName(topic.name),
                    topic_id=topic.topic_id,
                    error_code=ErrorCode.none,
                    error_message=None,
                )
            )
        return delete_resp.DeleteTopicsResponse(throttle_time=NO_THROTTLE, responses=tuple(results))

    def elect_leaders(self, now_ms: int, request: ElectLeadersRequest) -> elect_resp.ElectLeadersResponse:
        election = ELECTION_TYPES.get(request.election_type)
        if election is None:
            return elect_resp.ElectLeadersResponse(
                throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request, replica_election_results=()
            )
        if request.topic_partitions is None:
            wanted = [(t.name, sorted(t.partitions)) for t in self.replication.topics.values()]
        else:
            wanted = [(tp.topic, list(tp.partitions)) for tp in request.topic_partitions]
        results = []
        for name, partitions in wanted:
            topic = self.replication.topic(name)
            partition_results = []
            for index in partitions:
                if topic is None:
                    error, record = ErrorCode.unknown_topic_or_partition, None
                else:
                    error, record = self.replication.decide_election(
                        topic, index, election, self.cluster.is_active
                    )
                if record is not None:
                    self._commit([record], now_ms)
                partition_results.append(
                    elect_resp.PartitionResult(partition_id=i32(index), error_code=error, error_message=None)
                )
            results.append(
                elect_resp.ReplicaElectionResult(
                    topic=TopicName(name), partition_result=tuple(partition_results)
                )
            )
        return elect_resp.ElectLeadersResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=tuple(results)
        )

    def describe_cluster(self) -> DescribeClusterResponse:
        """The controller listener describes the controller itself (endpoint type 2, as Kafka's)."""
        host, port = self.listener_endpoint
        return DescribeClusterResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            endpoint_type=i8(2),
            cluster_id=self.cluster_id,
            controller_id=BrokerId(self.node_id),
            brokers=(
                DescribeClusterBroker(broker_id=BrokerId(self.node_id), host=host, port=i32(port), rack=None),
            ),
            cluster_authorized_operations=i32(-2147483648),
        )

    # ---- observability --------------------------------------------------------------------------------
    def state(self) -> ControllerLogState:
        """A JSON-able view for /v1/state."""
        return {
            **self.summary_state(),
            "partitions": [partition_row(*token) for _, _, token in self.view_partitions()],
            **self.cluster.counts(),
            **self.replication.counts(),
        }

    def summary_state(self) -> ControllerSummary:
        """/v1/state without the partitions: the cluster, its metadata offset and its brokers."""
        return {
            "cluster_id": self.cluster_id,
            "metadata_offset": self.log.next_offset,
            "brokers": [
                {
                    "id": r.broker_id,
                    "epoch": r.epoch,
                    "incarnation": str(r.incarnation_id),
                    "fenced": r.fenced,
                    "in_controlled_shutdown": r.in_controlled_shutdown,
                    "endpoints": [f"{e.host}:{e.port}" for e in r.endpoints],
                }
                for r in sorted(self.cluster.brokers.values(), key=lambda r: r.broker_id)
            ],
        }

    def view_partitions(self) -> Iterator[tuple[str, int, PartitionToken]]:
        """Every partition as (topic, index, token): the token holds what its /v1/state row is made of (the
        registration, replaced and never changed by a PartitionChangeRecord, and the topic's min ISR), so
        an unchanged partition compares equal to its last token by identity, without building its row."""
        for topic in self.replication.topics.values():
            min_insync = self.replication.min_insync(topic.name)  # once per topic: configs are per topic
            for index, p in topic.partitions.items():
                yield topic.name, index, (topic.name, topic.topic_id, index, p, min_insync)


PartitionToken = tuple[str, uuid.UUID, int, PartitionRegistration, int]  # topic, topic id, index, it, min ISR


def partition_row(
    topic: str, topic_id: uuid.UUID, index: int, p: PartitionRegistration, min_insync: int
) -> PartitionRow:
    """A partition's row in /v1/state (and the live view)."""
    return {
        "topic": topic,
        "topic_id": str(topic_id),
        "partition": index,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "leader_recovery_state": p.leader_recovery_state.name,
        "elr": list(p.elr),
        "last_known_elr": list(p.last_known_elr),
        "min_insync_replicas": min_insync,
    }
