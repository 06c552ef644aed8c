"""Topics, partitions, topic configs, ISR changes and leader elections (KIP-497, 704, 841, 903).

Decisions return the records to write (plus response data) and never mutate state; state changes only
in ``replay``. AlterPartition is validated in Kafka's order with Kafka's error codes
(ReplicationControlManager.alterPartition); every leader and ISR change goes through the pure
PartitionChangeBuilder.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from epochkraft.controller.configuration_control import ConfigurationControl
from epochkraft.controller.partition_change import Election, PartitionChangeBuilder
from epochkraft.metadata.config_schema import ResourceType, validate
from epochkraft.metadata.image import MetadataDelta, MetadataImage
from epochkraft.metadata.registrations import (
    NO_LEADER,
    LeaderRecoveryState,
    PartitionRegistration,
    TopicInfo,
)
from epochkraft.metadata.topic_names import valid_topic_name
from epochkraft.metrics.documents import PartitionCounts
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)

RECOVERY_STATES = {int(state): state for state in LeaderRecoveryState}  # an enum call per change is slow


# Named tuples rather than dataclasses: one of each is built per partition of every AlterPartition.
class IsrMember(NamedTuple):
    broker_id: int
    broker_epoch: int  # -1: not checked (AlterPartition v2, or a broker that did not report it)


class AlterPartitionItem(NamedTuple):
    partition_index: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[IsrMember, ...]
    leader_recovery_state: int


class AlterPartitionResult(NamedTuple):
    partition_index: int
    error: ErrorCode
    partition: PartitionRegistration | None = None


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int
    replication_factor: int
    assignments: dict[int, tuple[int, ...]]
    configs: dict[str, str | None]


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    error: ErrorCode
    message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1


class ReplicationControl:
    def __init__(
        self, configuration: ConfigurationControl | None = None, image: MetadataImage | None = None
    ) -> None:
        self.image = image if image is not None else MetadataImage()
        self._replayer = MetadataDelta(self.image, in_place=True)
        self.topics: dict[uuid.UUID, TopicInfo] = self.image.topics
        self.topic_ids: dict[str, uuid.UUID] = self.image.topic_ids
        self.configuration = configuration or ConfigurationControl(
            {}, 0, self.topic_ids.__contains__, self.image
        )
        self._placement_start = 0

    # ---- queries ------------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicInfo | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def partitions(
        self, topic_names: Iterable[str] | None = None
    ) -> Iterator[tuple[TopicInfo, int, PartitionRegistration]]:
        """Every partition, or those of ``topic_names`` (names of no topic are skipped)."""
        if topic_names is None:
            topics: Iterable[TopicInfo] = self.topics.values()
        else:
            topics = [t for t in map(self.image.topic, topic_names) if t is not None]
        for topic in topics:
            for index, partition in topic.partitions.items():
                yield topic, index, partition

    def min_insync(self, topic_name: str) -> int:
        return self.configuration.min_insync(topic_name)

    def unclean_allowed(self, topic_name: str) -> bool:
        return self.configuration.unclean_leader_election_enabled_for_topic(topic_name)

    @property
    def elr_enabled(self) -> bool:
        """KIP-966's eligible leader replicas, on while the feature's finalized level is at least 1."""
        return self.image.elr_enabled

    def effective_min_isr(self, topic: TopicInfo) -> int:
        """min.insync.replicas capped at the replication factor (Kafka's getTopicEffectiveMinIsr)."""
        first = next(iter(topic.partitions.values()), None)
        replicas = len(first.replicas) if first is not None else 1
        return min(self.min_insync(topic.name), replicas)

    def builder(
        self,
        topic: TopicInfo,
        index: int,
        partition: PartitionRegistration,
        is_acceptable_leader: Callable[[int], bool],
        election: Election | None = None,
    ) -> PartitionChangeBuilder:
        """A change builder with the topic's election type (unless given), min ISR and the ELR feature."""
        if election is None:
            election = Election.UNCLEAN if self.unclean_allowed(topic.name) else Election.CLEAN
        return PartitionChangeBuilder(
            partition,
            topic.topic_id,
            index,
            is_acceptable_leader,
            election,
            min_isr=self.effective_min_isr(topic),
            elr_enabled=self.elr_enabled,
        )

    def counts(self) -> PartitionCounts:
        offline = under_replicated = under_min_isr = 0
        for topic, _index, p in self.partitions():
            offline += p.leader == NO_LEADER
            under_replicated += len(p.isr) < len(p.replicas)
            under_min_isr += len(p.isr) < self.min_insync(topic.name)
        return {
            "OfflinePartitionsCount": offline,
            "UnderReplicatedPartitions": under_replicated,
            "UnderMinIsrPartitionCount": under_min_isr,
            "GlobalPartitionCount": sum(len(t.partitions) for t in self.topics.values()),
            "GlobalTopicCount": len(self.topics),
        }

    # ---- topics -------------------------------------------------------------------------------------
    def decide_create_topic(
        self, spec: NewTopic, active_brokers: list[int], registered: set[int], defaults: tuple[int, int]
    ) -> tuple[CreatedTopic, list]:
        """(result, records). ``defaults`` = (num.partitions, default.replication.factor)."""
        if (reason := valid_topic_name(spec.name)) is not None:
            return CreatedTopic(ErrorCode.invalid_topic_exception, reason), []
        if spec.name in self.topic_ids:
            return CreatedTopic(ErrorCode.topic_already_exists, f"Topic '{spec.name}' already exists."), []
        for key, value in spec.configs.items():
            if value is None:
                return CreatedTopic(
                    ErrorCode.invalid_config, f"Null value not supported for topic configs: {key}"
                ), []
            if (why := validate(ResourceType.TOPIC, key, value)) is not None:
                return CreatedTopic(ErrorCode.invalid_config, why), []
        if spec.assignments:
            if spec.num_partitions not in (-1, len(spec.assignments)) or spec.replication_factor != -1:
                message = "both replica assignments and partition count / replication factor given"
                return CreatedTopic(ErrorCode.invalid_request, message), []
            if sorted(spec.assignments) != list(range(len(spec.assignments))):
                return CreatedTopic(ErrorCode.invalid_replica_assignment, "partitions must be 0..n-1"), []
            for replicas in spec.assignments.values():
                if not replicas or len(set(replicas)) != len(replicas):
                    return CreatedTopic(
                        ErrorCode.invalid_replica_assignment, "empty or duplicate replicas"
                    ), []
                if any(b not in registered for b in replicas):
                    return CreatedTopic(
                        ErrorCode.invalid_replica_assignment, "unregistered broker in assignment"
                    ), []
            assignment = dict(spec.assignments)
        else:
            partitions = defaults[0] if spec.num_partitions == -1 else spec.num_partitions
            rf = defaults[1] if spec.replication_factor == -1 else spec.replication_factor
            if partitions <= 0:
                return CreatedTopic(ErrorCode.invalid_partitions, "partition count must be positive"), []
            if rf <= 0:
                return CreatedTopic(
                    ErrorCode.invalid_replication_factor, "replication factor must be positive"
                ), []
            if rf > len(active_brokers):
                message = f"replication factor {rf} larger than the {len(active_brokers)} available brokers"
                return CreatedTopic(ErrorCode.invalid_replication_factor, message), []
            assignment = self._place(partitions, rf, sorted(active_brokers))
        active = set(active_brokers)
        elr_lists = self._new_elr_lists
        topic_id = uuid.uuid4()
        records: list = [TopicRecord(name=spec.name, topic_id=topic_id)]
        records += [
            ConfigRecord(resource_type=ResourceType.TOPIC, resource_name=spec.name, name=k, value=v)
            for k, v in sorted(spec.configs.items())
        ]
        for index, replicas in sorted(assignment.items()):
            isr = tuple(b for b in replicas if b in active)
            if not isr:
                return CreatedTopic(
                    ErrorCode.invalid_replication_factor, f"no active replica for partition {index}"
                ), []
            records.append(
                PartitionRecord(
                    partition_id=index,
                    topic_id=topic_id,
                    replicas=tuple(replicas),
                    isr=isr,
                    leader=isr[0],
                    leader_epoch=0,
                    partition_epoch=0,
                    eligible_leader_replicas=elr_lists,
                    last_known_elr=elr_lists,
                )
            )
        rf = len(next(iter(assignment.values())))
        return CreatedTopic(ErrorCode.none, None, topic_id, len(assignment), rf), records

    def decide_create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[tuple[int, ...]] | None,
        active_brokers: list[int],
        registered: set[int],
    ) -> tuple[ErrorCode, str | None, list]:
        """(error, message, PartitionRecords) raising a topic's partition count to ``count``, in the order of
        Kafka's ReplicationControlManager.createPartitions: new replicas placed round robin over active
        brokers with the topic's replication factor, or as assigned; the ISR is the active replicas."""
        topic = self.topic(name)
        if topic is None:
            return ErrorCode.unknown_topic_or_partition, None, []
        current = len(topic.partitions)
        if count == current:
            return ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).", []
        if count < current:
            message = (
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase."
            )
            return ErrorCode.invalid_partitions, message, []
        additional = count - current
        rf = len(next(iter(topic.partitions.values())).replicas)
        active = set(active_brokers)
        if assignments is not None:
            if len(assignments) != additional:
                message = (
                    f"Attempted to add {additional} additional partition(s), but only {len(assignments)} "
                    "assignment(s) were specified."
                )
                return ErrorCode.invalid_replica_assignment, message, []
            for offset, replicas in enumerate(assignments):
                if (why := self._invalid_manual_assignment(replicas, rf, registered)) is not None:
                    return ErrorCode.invalid_replica_assignment, why, []
                if not active.intersection(replicas):
                    message = (
                        "All brokers specified in the manual partition assignment for partition "
                        f"{current + offset} are fenced or in controlled shutdown."
                    )
                    return ErrorCode.invalid_replica_assignment, message, []
            placed = dict(enumerate(assignments, start=current))
        else:
            if rf > len(active):
                why = (
                    "All brokers are currently fenced or in controlled shutdown."
                    if not active
                    else f"The target replication factor of {rf} cannot be reached because only "
                    f"{len(active)} broker(s) are registered."
                )
                message = f"Unable to replicate the partition {rf} time(s): {why}"
                return ErrorCode.invalid_replication_factor, message, []
            placed = {current + p: r for p, r in self._place(additional, rf, sorted(active)).items()}
        records = []
        elr_lists = self._new_elr_lists
        for index, replicas in sorted(placed.items()):
            isr = tuple(b for b in replicas if b in active)
            records.append(
                PartitionRecord(
                    partition_id=index,
                    topic_id=topic.topic_id,
                    replicas=tuple(replicas),
                    isr=isr,
                    leader=isr[0],
                    leader_epoch=0,
                    partition_epoch=0,
                    eligible_leader_replicas=elr_lists,
                    last_known_elr=elr_lists,
                )
            )
        return ErrorCode.none, None, records

    @staticmethod
    def _invalid_manual_assignment(
        replicas: tuple[int, ...], rf: int | None, registered: set[int]
    ) -> str | None:
        """Kafka's validateManualPartitionAssignment."""
        if not replicas:
            return "The manual partition assignment includes an empty replica list."
        previous = None
        for broker in sorted(replicas):
            if broker not in registered:
                return f"The manual partition assignment includes broker {broker}, but no such broker is registered."
            if broker == previous:
                return f"The manual partition assignment includes the broker {broker} more than once."
            previous = broker
        if rf is not None and len(replicas) != rf:
            return (
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                f"this is not consistent with previous partitions, which have {rf} replica(s)."
            )
        return None

    def _place(self, partitions: int, rf: int, brokers: list[int]) -> dict[int, tuple[int, ...]]:
        """Round robin from a rotating start, so leaders spread over the brokers as topics are added."""
        start = self._placement_start
        self._placement_start += 1
        n = len(brokers)
        return {p: tuple(brokers[(start + p + r) % n] for r in range(rf)) for p in range(partitions)}

    @property
    def _new_elr_lists(self) -> tuple[int, ...] | None:
        """A new PartitionRecord's ELR lists: empty ones while ELR is on, as Kafka's toRecord writes."""
        return () if self.elr_enabled else None

    def decide_delete_topic(self, topic_id: uuid.UUID) -> list:
        return [RemoveTopicRecord(topic_id=topic_id)]

    # ---- reassignment (KIP-455) ----------------------------------------------------------------------
    def decide_alter_partition_reassignment(
        self,
        name: str,
        index: int,
        target: tuple[int, ...] | None,
        registered: set[int],
        is_acceptable_leader: Callable[[int], bool],
        allow_replication_factor_change: bool = True,
    ) -> tuple[ErrorCode, str | None, PartitionChangeRecord | None]:
        """(error, message, record) starting (``target`` replicas) or cancelling (None) one partition's
        reassignment, as Kafka's ReplicationControlManager.alterPartitionReassignment. The new replicas are
        added to the replica list at once; the reassignment completes, in a later change, when the ISR holds
        every target replica (PartitionChangeBuilder), or at once when it already does."""
        topic = self.topic(name)
        if topic is None:
            return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {name}.", None
        partition = topic.partitions.get(index)
        if partition is None:
            return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {name}:{index}.", None
        election = Election.UNCLEAN if self.unclean_allowed(name) else Election.CLEAN
        builder = self.builder(topic, index, partition, is_acceptable_leader, election)
        if target is None:
            if not partition.reassignment_in_progress:
                return (
                    ErrorCode.no_reassignment_in_progress,
                    "No partition reassignment is in progress.",
                    None,
                )
            # Kafka's PartitionReassignmentRevert: drop the replicas being added, keep those being removed.
            replicas = tuple(b for b in partition.replicas if b not in partition.adding_replicas)
            isr = tuple(b for b in partition.isr if b not in partition.adding_replicas)
            if not isr:
                if election != Election.UNCLEAN:
                    message = (
                        f"Unable to revert partition assignment for {name}:{index} because it would "
                        "require an unclean leader election."
                    )
                    return ErrorCode.invalid_replica_assignment, message, None
                isr = replicas[:1]
            change = builder.set_target_replicas(replicas).set_target_isr(isr).build()
            return ErrorCode.none, None, None if change is None else change.record
        if (why := self._invalid_manual_assignment(target, None, registered)) is not None:
            return ErrorCode.invalid_replica_assignment, why, None
        original = tuple(b for b in partition.replicas if b not in partition.adding_replicas)
        if not allow_replication_factor_change and len(target) != len(original):
            message = (
                f"The replication factor is changed from {len(original)} to {len(target)} but "
                "allowReplicationFactorChange is false."
            )
            return ErrorCode.invalid_replication_factor, message, None
        # Kafka's PartitionReassignmentReplicas: the target, then the current replicas it drops.
        removing = tuple(sorted(set(partition.replicas) - set(target)))
        adding = tuple(sorted(set(target) - set(partition.replicas)))
        change = builder.set_target_replicas(tuple(target) + removing, removing, adding).build()
        return ErrorCode.none, None, None if change is None else change.record

    def reassignments(self) -> Iterator[tuple[TopicInfo, int, PartitionRegistration]]:
        """The partitions with a reassignment in progress (ListPartitionReassignments)."""
        for topic, index, partition in self.partitions():
            if partition.reassignment_in_progress:
                yield topic, index, partition

    # ---- AlterPartition -----------------------------------------------------------------------------
    def decide_alter_partition(
        self,
        requester: int,
        topic_id: uuid.UUID,
        items: list[AlterPartitionItem],
        *,
        version: int,
        is_eligible: Callable[[IsrMember], bool],
        is_acceptable_leader: Callable[[int], bool],
        eligibility_check: bool = True,
    ) -> tuple[list[AlterPartitionResult], list]:
        """Per-partition checks 3-14 of the spec, then the change. Checks 1-2 are the caller's."""
        topic = self.topics.get(topic_id)
        if topic is None:
            code = ErrorCode.unknown_topic_id if version >= 2 else ErrorCode.unknown_topic_or_partition
            return [AlterPartitionResult(i.partition_index, code) for i in items], []
        results: list[AlterPartitionResult] = []
        records: list = []
        for item in items:
            error, record, partition = self._alter_one(
                requester, topic, item, version, is_eligible, is_acceptable_leader, eligibility_check
            )
            results.append(AlterPartitionResult(item.partition_index, error, partition))
            if record is not None:
                records.append(record)
        return results, records

    def _alter_one(
        self,
        requester: int,
        topic: TopicInfo,
        item: AlterPartitionItem,
        version: int,
        is_eligible: Callable[[IsrMember], bool],
        is_acceptable_leader: Callable[[int], bool],
        eligibility_check: bool,
    ) -> tuple[ErrorCode, PartitionChangeRecord | None, PartitionRegistration | None]:
        partition = topic.partitions.get(item.partition_index)
        if partition is None:
            return ErrorCode.unknown_topic_or_partition, None, None
        if item.leader_epoch > partition.leader_epoch or item.partition_epoch > partition.partition_epoch:
            return ErrorCode.not_controller, None, None
        if item.leader_epoch < partition.leader_epoch:
            return ErrorCode.fenced_leader_epoch, None, None
        if requester != partition.leader:
            return ErrorCode.invalid_request, None, None
        if item.partition_epoch < partition.partition_epoch:
            return ErrorCode.invalid_update_version, None, None
        isr = tuple([m.broker_id for m in item.new_isr])
        members = set(isr)
        if len(members) != len(isr) or not members.issubset(partition.replicas):
            return ErrorCode.invalid_request, None, None
        if partition.leader not in isr:
            return ErrorCode.invalid_request, None, None
        recovering = LeaderRecoveryState.RECOVERING
        if item.leader_recovery_state not in RECOVERY_STATES:
            return ErrorCode.invalid_request, None, None
        if item.leader_recovery_state == recovering and len(isr) > 1:
            return ErrorCode.invalid_request, None, None
        if (
            partition.leader_recovery_state == LeaderRecoveryState.RECOVERED
            and item.leader_recovery_state == recovering
        ):
            return ErrorCode.invalid_request, None, None
        if eligibility_check and not all(is_eligible(m) for m in item.new_isr):
            code = ErrorCode.ineligible_replica if version >= 2 else ErrorCode.operation_not_attempted
            return code, None, None
        change = (
            self.builder(topic, item.partition_index, partition, is_acceptable_leader, Election.CLEAN)
            .set_target_isr(isr)
            .set_target_recovery_state(RECOVERY_STATES[item.leader_recovery_state])
            .build()
        )
        if change is None:
            return ErrorCode.none, None, partition  # an idempotent retry: nothing to write
        if change.leader != requester:
            code = ErrorCode.new_leader_elected if version >= 2 else ErrorCode.fenced_leader_epoch
            return code, change.record, None
        return ErrorCode.none, change.record, partition  # the caller answers with the replayed state

    # ---- broker-driven changes ----------------------------------------------------------------------
    def decide_remove_from_isrs(self, broker_id: int, is_acceptable_leader: Callable[[int], bool]) -> list:
        """Removes a broker being fenced / shut down / unregistered from every ISR and leadership; with ELR
        on, the members leaving an ISR below min ISR join its ELR."""
        records = []
        for topic, index, partition in self.partitions():
            if broker_id not in partition.isr and partition.leader != broker_id:
                continue
            change = (
                self.builder(topic, index, partition, is_acceptable_leader)
                .set_target_isr(tuple(b for b in partition.isr if b != broker_id))
                .build()
            )
            if change is not None:
                records.append(change.record)
        return records

    def decide_unclean_shutdown(self, broker_id: int, is_acceptable_leader: Callable[[int], bool]) -> list:
        """Kafka's handleBrokerShutdown for a broker back from an unclean shutdown with ELR on: it leaves
        every ISR and every ELR (its unflushed records may be gone), and leads nothing."""
        records = []
        for topic, index, partition in self.partitions():
            if broker_id not in partition.isr and broker_id not in partition.elr:
                continue
            change = (
                self.builder(topic, index, partition, is_acceptable_leader)
                .set_unclean_shutdown_replicas((broker_id,))
                .set_target_isr(tuple(b for b in partition.isr if b != broker_id))
                .build()
            )
            if change is not None:
                records.append(change.record)
        return records

    def decide_remove_broker(self, broker_id: int, is_acceptable_leader: Callable[[int], bool]) -> list:
        """Kafka's handleBrokerUnregistered: an unregistered broker leaves every ISR and leadership, and
        with ELR on every ELR and last known ELR (not only those of the partitions whose ISR it is in), so a
        new disk registering as that id is never elected from them with an empty log."""
        records = []
        for topic, index, partition in self.partitions():
            if (
                broker_id not in partition.isr
                and broker_id not in partition.elr
                and broker_id not in partition.last_known_elr
                and partition.leader != broker_id
            ):
                continue
            change = (
                self.builder(topic, index, partition, is_acceptable_leader)
                .set_removed_brokers((broker_id,))
                .set_target_isr(tuple(b for b in partition.isr if b != broker_id))
                .build()
            )
            if change is not None:
                records.append(change.record)
        return records

    def decide_clear_elr(self, topic_name: str | None) -> list:
        """Clears the ELR and last known ELR of one topic's partitions (None: every topic's), as Kafka does
        when min.insync.replicas changes: members chosen under the old min ISR may not hold every record
        committed under the new one."""
        records = []
        for topic, index, partition in self.partitions():
            if topic_name is not None and topic.name != topic_name:
                continue
            if partition.elr or partition.last_known_elr:
                records.append(
                    PartitionChangeRecord(
                        partition_id=index,
                        topic_id=topic.topic_id,
                        eligible_leader_replicas=(),
                        last_known_elr=(),
                    )
                )
        return records

    def decide_leaderless_elections(self, is_acceptable_leader: Callable[[int], bool]) -> list:
        """Elects leaders for offline partitions, e.g. once a broker is unfenced."""
        records = []
        for topic, index, partition in self.partitions():
            if partition.leader != NO_LEADER:
                continue
            change = self.builder(topic, index, partition, is_acceptable_leader).build()
            if change is not None:
                records.append(change.record)
        return records

    def maybe_elect_unclean_leaders(
        self, is_acceptable_leader: Callable[[int], bool], topic_names: Iterable[str] | None = None
    ) -> list:
        """Unclean elections for leaderless partitions of topics that allow them (Kafka's
        maybeTriggerUncleanLeaderElectionForLeaderlessPartitions), e.g. once the config is turned on;
        among ``topic_names`` only, when given."""
        records = []
        for topic, index, partition in self.partitions(topic_names):
            if partition.leader != NO_LEADER or not self.unclean_allowed(topic.name):
                continue
            _error, record = self.decide_election(topic, index, Election.UNCLEAN, is_acceptable_leader)
            if record is not None:
                records.append(record)
        return records

    def decide_election(
        self, topic: TopicInfo, index: int, election: Election, is_acceptable_leader: Callable[[int], bool]
    ) -> tuple[ErrorCode, PartitionChangeRecord | None]:
        """ElectLeaders for one partition."""
        partition = topic.partitions.get(index)
        if partition is None:
            return ErrorCode.unknown_topic_or_partition, None
        if election == Election.PREFERRED:
            preferred = partition.replicas[0]
            if partition.leader == preferred:
                return ErrorCode.election_not_needed, None
            if preferred not in partition.isr or not is_acceptable_leader(preferred):
                return ErrorCode.preferred_leader_not_available, None
        elif partition.leader != NO_LEADER and is_acceptable_leader(partition.leader):
            return ErrorCode.election_not_needed, None
        change = self.builder(topic, index, partition, is_acceptable_leader, election).build()
        if change is None or change.leader == NO_LEADER:
            if election == Election.PREFERRED:
                return ErrorCode.preferred_leader_not_available, None
            return ErrorCode.eligible_leaders_not_available, None
        return ErrorCode.none, change.record

    # ---- replay -------------------------------------------------------------------------------------
    def replay(
        self, record: TopicRecord | PartitionRecord | PartitionChangeRecord | RemoveTopicRecord
    ) -> None:
        self._replayer.replay(record)
