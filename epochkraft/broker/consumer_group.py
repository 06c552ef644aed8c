"""Sans-IO KIP-848 consumer groups: ConsumerGroupHeartbeat, member epochs, target assignments, timeouts.

Follows Kafka's GroupMetadataManager (its consumer group parts) and ConsumerGroup. A heartbeat comes in with
``now_ms`` and a view of the topics (``TopicsImage``); it may bump the group epoch (a new member, a changed
subscription, a member gone, partitions added or a topic created or deleted), in which case the group's
target assignment is computed again by the server-side assignor, and then moves the member one step towards
its part of that target (``CurrentAssignmentBuilder``). ``tick(now_ms)`` fences members whose session
expired and members that did not revoke partitions within their rebalance timeout.

Committed offsets stay with the classic coordinator (one group id namespace, one offsets store); this
module only says whether a commit or fetch by a member is valid. With ``group.consumer.migration.policy``
allowing it, a consumer member joining a classic group of the consumer protocol type converts the group
(convertToConsumerGroup), and the last consumer protocol member leaving converts it back
(convertToClassicGroup); classic members inside a consumer group are served by
``consumer_group_classic``. The edge writes each change of a group
to ``__consumer_offsets`` (``consumer_group_records``) before answering, and a new coordinator rebuilds
the groups from those records (``replay``, then ``on_loaded``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import re2

from epochkraft.broker.assignors import ASSIGNORS, Assignment, MemberSubscription
from epochkraft.broker.consumer_protocol import PROTOCOL_TYPE, MalformedConsumerProtocol
from epochkraft.broker.current_assignment import (
    ConsumerGroupMember,
    CurrentAssignmentBuilder,
    MemberState,
    is_subset,
)
from epochkraft.broker.group_coordinator import Completion, GroupCoordinator
from epochkraft.broker.group_migration import (
    CustomAssignorUserData,
    MigrationPolicy,
    assignment_bytes,
    classic_members_from_consumer,
    consumer_members_from_classic,
)
from epochkraft.metadata.group_config import (
    CONSUMER_ASSIGNMENT_INTERVAL,
    CONSUMER_HEARTBEAT_INTERVAL,
    CONSUMER_SESSION_TIMEOUT,
    GroupBounds,
    GroupConfig,
)
from epochkraft.protocol.errors import ErrorCode

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
MEMBER_ID_FROM_CLIENT_VERSION = 1  # v1+: the consumer generates its member id (KIP-1082)


class ConsumerGroupState(StrEnum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    """Kafka's group.consumer.* broker settings."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    max_size: int = 2**31 - 1
    classic_max_size: int = 2**31 - 1  # group.max.size: a larger group is not downgraded
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    bounds: GroupBounds = field(default_factory=GroupBounds.of)  # group configs are clamped into them
    assignment_interval_ms: int = 1_000

    def __post_init__(self) -> None:
        parse_assignors(",".join(self.assignors))

    def default_of(self, name: str) -> int:
        """The broker's setting behind a group config (its ``group.*`` synonym)."""
        return {
            CONSUMER_SESSION_TIMEOUT: self.session_timeout_ms,
            CONSUMER_HEARTBEAT_INTERVAL: self.heartbeat_interval_ms,
            CONSUMER_ASSIGNMENT_INTERVAL: self.assignment_interval_ms,
        }[name]


def parse_assignors(value: str) -> tuple[str, ...]:
    """group.consumer.assignors: known assignor names, comma-separated, at least one (ValueError else, as
    Kafka's GroupCoordinatorConfig refuses the broker's start)."""
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    if not names:
        raise ValueError("group.consumer.assignors must name at least one assignor")
    unknown = [name for name in names if name not in ASSIGNORS]
    if unknown:
        raise ValueError(
            f"group.consumer.assignors: unknown assignor {', '.join(unknown)} (known: {', '.join(ASSIGNORS)})"
        )
    return names


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


def subscription_metadata_hash(metadata: Mapping[str, TopicMetadata]) -> int:
    """A signed 64-bit hash of the subscribed topics (name, id, partition count), 0 for none as Kafka's
    Utils.computeGroupHash. Kafka hashes with XXH3 and includes the partitions' racks; only this
    coordinator compares the value, so it is its own (BLAKE2b) hash of what the assignors use."""
    if not metadata:
        return 0
    digest = hashlib.blake2b(digest_size=8)
    for name, topic in sorted(metadata.items()):
        digest.update(f"{name}\0{topic.topic_id}\0{topic.num_partitions}\0".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


@dataclass(frozen=True, slots=True)
class ResolvedRegularExpression:
    """Kafka's ResolvedRegularExpression: the topics a group's regular expression matched, the topics
    version it was matched at and when (ConsumerGroupRegularExpression's value)."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


class TopicsImage(Protocol):
    """What the coordinator needs of the cluster's metadata."""

    def by_name(self, name: str) -> TopicMetadata | None: ...

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...

    def names(self) -> Iterable[str]:
        """Every topic a regular expression may match (internal topics too, as in Kafka)."""

    @property
    def version(self) -> int:
        """Changes whenever a topic is created or deleted or gets partitions (unique across images)."""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # topic_partitions: None when unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1
    # DESCRIBE on a topic for the request's principal; topics a regular expression matches are kept only
    # if it allows them (None: no authorizer)
    topic_authorized: Callable[[str], bool] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    # answers for the classic group's waiting joins and syncs when the heartbeat converted it
    classic_completions: tuple[Completion, ...] = field(default=(), compare=False)


class GroupError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error, self.message = error, message


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    # subscription_metadata's hash: all a group rebuilt from its records knows of it (KIP-1101)
    metadata_hash: int = 0
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    session_deadlines: dict[str, int] = field(default_factory=dict)
    revocation_deadlines: dict[str, int] = field(default_factory=dict)
    # classic protocol members: told to rejoin, or joined and yet to sync, by then (rebalance timeout)
    join_deadlines: dict[str, int] = field(default_factory=dict)
    sync_deadlines: dict[str, int] = field(default_factory=dict)
    # the topics' version subscription_metadata was computed at; None once a member went
    subscription_metadata_version: int | None = None
    # what each regular expression a member subscribes to matched (ConsumerGroup.resolvedRegularExpressions)
    resolved_regexes: dict[str, ResolvedRegularExpression] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        """ConsumerGroup.maybeUpdateGroupState."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.state != MemberState.STABLE or member.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def copy(self) -> ConsumerGroup:
        """A snapshot to restore if the group's changes cannot be written (members are immutable)."""
        return dataclasses.replace(
            self,
            members=dict(self.members),
            static_members=dict(self.static_members),
            target_assignment=dict(self.target_assignment),
            subscription_metadata=dict(self.subscription_metadata),
            partition_epochs=dict(self.partition_epochs),
            session_deadlines=dict(self.session_deadlines),
            revocation_deadlines=dict(self.revocation_deadlines),
            join_deadlines=dict(self.join_deadlines),
            sync_deadlines=dict(self.sync_deadlines),
            resolved_regexes=dict(self.resolved_regexes),
        )

    def update_subscription_metadata(self, metadata: dict[str, TopicMetadata]) -> bool:
        """True if the subscribed topics changed, told by their hash as Kafka 4.1+ does (KIP-1101): a
        group rebuilt from its records has the hash, not the topics, until a member heartbeats."""
        self.subscription_metadata = metadata
        old, self.metadata_hash = self.metadata_hash, subscription_metadata_hash(metadata)
        return self.metadata_hash != old

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def update_member(self, member: ConsumerGroupMember) -> None:
        """Replaces a member, keeping the partition epochs (who owns what) in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._set_epochs(old, None)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._set_epochs(member, member.member_epoch)

    def remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._set_epochs(member, None)
        self.subscription_metadata_version = None
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target_assignment.pop(member_id, None)
        for deadlines in (
            self.session_deadlines,
            self.revocation_deadlines,
            self.join_deadlines,
            self.sync_deadlines,
        ):
            deadlines.pop(member_id, None)

    def _set_epochs(self, member: ConsumerGroupMember, epoch: int | None) -> None:
        """Sets the member's partitions to ``epoch``; None removes them, but only those still at the
        member's epoch (ConsumerGroup.removePartitionEpochs): a partition another member owns now stays
        owned."""
        for assignment in (member.assigned, member.pending_revocation):
            for topic, parts in assignment.items():
                for partition in parts:
                    if epoch is not None:
                        self.partition_epochs[(topic, partition)] = epoch
                    elif self.partition_epochs.get((topic, partition)) == member.member_epoch:
                        del self.partition_epochs[(topic, partition)]

    def subscribed_regexes(self, updated: ConsumerGroupMember | None = None) -> set[str]:
        """The regular expressions the members subscribe to, ``updated`` counted as it is now."""
        members = dict(self.members)
        if updated is not None:
            members[updated.member_id] = updated
        return {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex}

    def topic_names_of(self, member: ConsumerGroupMember) -> set[str]:
        """The member's topics: those it names and those its regular expression resolved to
        (ConsumerGroup.computeSubscribedTopicNames); none for a regular expression not resolved yet."""
        names = set(member.subscribed_topic_names)
        regex = member.subscribed_topic_regex
        if regex and (resolved := self.resolved_regexes.get(regex)) is not None:
            names |= resolved.topics
        return names

    def drop_unused_regexes(self) -> None:
        """maybeDeleteResolvedRegularExpression: a regular expression no member uses any more goes (its
        record is tombstoned)."""
        used = self.subscribed_regexes()
        for regex in [r for r in self.resolved_regexes if r not in used]:
            del self.resolved_regexes[regex]

    def preferred_assignor(self, default: str, updated: ConsumerGroupMember | None = None) -> str:
        """The server assignor most members ask for, else the default (computePreferredServerAssignor):
        ``updated``, the member of the heartbeat, counts as it is now, whether it is stored yet or not."""
        members = dict(self.members)
        if updated is not None:
            members[updated.member_id] = updated
        votes: dict[str, int] = {}
        for member in members.values():
            if member.server_assignor is not None:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name]) if votes else default


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # an invalid pattern is the client's error, answered, not logged


def compile_regex(pattern: str) -> re2._Regexp:
    """``pattern`` compiled with RE2; re2.error if it is not valid."""
    return re2.compile(pattern, _RE2_OPTIONS)


class RegexResolver:
    """Topic regular expressions resolved once per topics version, with RE2 (linear time, as Kafka's
    RE2J): a client's pattern cannot stall the event loop with backtracking."""

    def __init__(self) -> None:
        self._version: int | None = None
        self._resolved: dict[str, frozenset[str]] = {}

    def resolve(self, pattern: str, topics: TopicsImage) -> frozenset[str]:
        if topics.version != self._version:
            self._version, self._resolved = topics.version, {}
        names = self._resolved.get(pattern)
        if names is None:
            try:
                compiled = compile_regex(pattern)
            except re2.error:
                names = frozenset()
            else:
                names = frozenset(name for name in topics.names() if compiled.fullmatch(name))
            self._resolved[pattern] = names
        return names

    def matching(
        self, pattern: str, topics: TopicsImage, authorized: Callable[[str], bool] | None = None
    ) -> frozenset[str]:
        """The topics ``pattern`` matches and, as Kafka 4.x, only those ``authorized`` allows (DESCRIBE for
        the principal of the heartbeat that resolves it)."""
        matched = self.resolve(pattern, topics)
        return matched if authorized is None else frozenset(name for name in matched if authorized(name))


class ConsumerGroupCoordinator:
    """The consumer groups whose coordinator partition this broker leads.

    ``classic`` is the classic coordinator of the same partitions: the two kinds share one group id
    namespace, and a group moves between them as the migration policy allows. ``group_configs`` gives a
    group's dynamic configs (resource type GROUP in the metadata), which override the broker's session
    timeout and heartbeat interval for that group (GroupConfigManager)."""

    def __init__(
        self,
        settings: ConsumerGroupSettings | None = None,
        classic: GroupCoordinator | None = None,
        group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {},
    ) -> None:
        self.settings = settings or ConsumerGroupSettings()
        self.classic = classic if classic is not None else GroupCoordinator()
        self.group_configs = group_configs
        self.groups: dict[str, ConsumerGroup] = {}
        # consumer groups converted to classic groups whose GroupMetadata record is not written yet
        self.converted_to_classic: set[str] = set()
        self.regexes = RegexResolver()

    def group_config(self, group_id: str) -> GroupConfig:
        """The group's effective configs: its own, clamped into this broker's bounds, else the broker's
        (consumerGroupSessionTimeoutMs, consumerGroupHeartbeatIntervalMs)."""
        overrides = self.group_configs(group_id)
        return GroupConfig.evaluate(overrides, self.settings.default_of, self.settings.bounds)

    # ---- ConsumerGroupHeartbeat --------------------------------------------------------------------------
    def heartbeat(self, now_ms: int, request: HeartbeatRequest, topics: TopicsImage) -> HeartbeatResult:
        try:
            self.validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(now_ms, request)
            completions: list[Completion] = []
            result = self._heartbeat(now_ms, request, topics, completions)
            return dataclasses.replace(result, classic_completions=tuple(completions))
        except GroupError as exc:
            return HeartbeatResult(exc.error, exc.message)

    def invalid_request(self, request: HeartbeatRequest) -> HeartbeatResult | None:
        """The answer to a request that is not valid, whatever group it names; None if it is valid."""
        try:
            self.validate(request)
        except GroupError as exc:
            return HeartbeatResult(exc.error, exc.message)
        return None

    def validate(self, request: HeartbeatRequest) -> None:
        """GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid (Kafka 4.4), in its order;
        Kafka checks this before it looks for the group's coordinator."""

        def invalid(message: str) -> GroupError:
            return GroupError(ErrorCode.invalid_request, message)

        epoch = request.member_epoch
        member_id_required = (
            request.api_version >= MEMBER_ID_FROM_CLIENT_VERSION
            or epoch > 0
            or epoch == LEAVE_GROUP_MEMBER_EPOCH
        )
        if member_id_required and not request.member_id:
            raise invalid("MemberId can't be empty.")
        if not request.group_id:
            raise invalid("GroupId can't be empty.")
        if request.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if request.rack_id == "":
            raise invalid("RackId can't be empty.")
        if epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or any(request.owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.settings.assignors:
            raise GroupError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.settings.assignors)}.",
            )
        if request.subscribed_topic_regex is not None:
            try:
                compile_regex(request.subscribed_topic_regex)
            except re2.error as exc:
                reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
                raise GroupError(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not a valid regular "
                    f"expression: {reason}.",
                ) from None

    def _group_for(self, group_id: str, create: bool) -> ConsumerGroup:
        """GroupMetadataManager.getOrMaybeCreateConsumerGroup (the conversion of a live classic group is
        ``_consumer_group_from_classic``). A new group is not installed here: the heartbeat installs it once
        every check passed, as Kafka writes a group only with the records of a heartbeat that succeeded."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if self.classic.classic_group_of(group_id) is not None:
            raise GroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if not create:
            raise GroupError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        return ConsumerGroup(group_id)

    def _consumer_group_from_classic(self, now_ms: int, group_id: str, topics: TopicsImage) -> ConsumerGroup:
        """validateOnlineUpgrade, then convertToConsumerGroup: the classic members join at their
        generation with their last assignments. The group is built aside; ``_install`` puts it in place
        and releases the classic members only if the heartbeat succeeds (Kafka drops the records of a
        failed one, and the group stays classic)."""
        classic = self.classic.classic_group_of(group_id)
        assert classic is not None

        def refuse(why: str) -> GroupError:
            return GroupError(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade classic group {group_id} to consumer group {why}.",
            )

        if not self.settings.migration_policy.upgrade_enabled:
            raise refuse("because online upgrade is disabled")
        if classic.protocol_type != PROTOCOL_TYPE:
            raise refuse("because the group does not use the consumer embedded protocol")
        if len(classic.members) > self.settings.max_size:
            raise refuse("because the group size exceeds the consumer group maximum size")

        def topic_id_of(name: str) -> uuid.UUID | None:
            topic = topics.by_name(name)
            return None if topic is None else topic.topic_id

        try:
            members = consumer_members_from_classic(classic, topic_id_of)
        except MalformedConsumerProtocol:
            raise refuse("because the embedded consumer protocol is malformed") from None
        except CustomAssignorUserData:
            raise refuse(
                "because an unsupported custom assignor is in use. Please refer to the documentation or "
                "switch to a default assignor before re-attempting the upgrade"
            ) from None
        group = ConsumerGroup(
            group_id, group_epoch=classic.generation_id, assignment_epoch=classic.generation_id
        )
        for member in members:
            _refuse_if_owned(group, member)
            group.update_member(member)
            group.target_assignment[member.member_id] = member.assigned
            assert member.classic is not None
            group.session_deadlines[member.member_id] = now_ms + member.classic.session_timeout_ms
        return group

    def _group_for_heartbeat(
        self, now_ms: int, request: HeartbeatRequest, topics: TopicsImage
    ) -> tuple[ConsumerGroup, bool]:
        """The consumer group of the heartbeat, and whether it is a classic group being upgraded. A
        consumer group of that id comes first: a classic group beside it is never converted over it."""
        group = self.groups.get(request.group_id)
        if group is not None:
            return group, False
        joining = request.member_epoch == 0
        if joining and self.classic.classic_group_of(request.group_id) is not None:
            return self._consumer_group_from_classic(now_ms, request.group_id, topics), True
        return self._group_for(request.group_id, create=joining), False

    def _install(self, group: ConsumerGroup, upgraded: bool, completions: list[Completion]) -> None:
        """A group the heartbeat created or converted takes its place; the classic group it came from
        answers its waiting joins and syncs REBALANCE_IN_PROGRESS, so they rejoin into it."""
        if self.groups.get(group.group_id) is group:
            return
        self.groups[group.group_id] = group
        if upgraded:
            completions.extend(self.classic.release_members(group.group_id))

    def _heartbeat(
        self, now_ms: int, request: HeartbeatRequest, topics: TopicsImage, completions: list[Completion]
    ) -> HeartbeatResult:
        joining = request.member_epoch == 0
        group, upgraded = self._group_for_heartbeat(now_ms, request, topics)
        member_id = request.member_id or str(uuid.uuid4())  # v0 lets the coordinator choose it
        self.check_not_full(group, member_id)
        member = self._member_for(group, member_id, request)
        is_new = member.member_id not in group.members
        updated = self._with_request(member, request)
        bump = is_new or self._subscription_changed(member, updated)
        if self.update_subscription(now_ms, group, updated, topics, request.topic_authorized, bump):
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._update_target_assignment(group, updated)
        updated = self._drop_deleted_topics(updated, topics)
        reconciled = CurrentAssignmentBuilder(
            updated,
            group.assignment_epoch,
            group.target_assignment.get(updated.member_id, {}),
            group.partition_epoch,
            request.owned,
        ).build()
        group.update_member(reconciled)
        self._schedule_timeouts(now_ms, group, member, reconciled)
        self._install(group, upgraded, completions)
        full = joining or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        changed = is_new or reconciled.assigned != member.assigned
        return HeartbeatResult(
            ErrorCode.none,
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.group_config(group.group_id).consumer_heartbeat_interval_ms,
            assignment=reconciled.assigned if full or changed else None,
        )

    def check_not_full(self, group: ConsumerGroup, member_id: str) -> None:
        """throwIfConsumerGroupIsFull: a full group admits only its members. A static member's successor
        comes with a new member id, so it too waits until its predecessor's session has expired (Kafka
        looks at the member id alone)."""
        if len(group.members) >= self.settings.max_size and member_id not in group.members:
            raise GroupError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {self.settings.max_size} members.",
            )

    def _member_for(
        self, group: ConsumerGroup, member_id: str, request: HeartbeatRequest
    ) -> ConsumerGroupMember:
        """getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember: a new member, a static member replacing
        one that left with epoch -2 or one that uses the classic protocol, or the known member whose epoch is
        checked."""
        joining = request.member_epoch == 0
        if request.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise GroupError(
                        ErrorCode.unknown_member_id,
                        f"Member {member_id} is not a member of group {group.group_id}.",
                    )
                return ConsumerGroupMember(member_id)
            return _check_epoch(member, request)
        existing_id = group.static_members.get(request.instance_id)
        existing = group.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id)
            # a consumer protocol member waits for its predecessor's leave (-2); a classic one is replaced
            if existing.classic is None and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise GroupError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {member_id} with instance id {request.instance_id} cannot join the group "
                    f"because the instance id is owned by {existing.member_id} member.",
                )
            return self._replace_static_member(group, existing, member_id)
        return _check_epoch(known_static_member(existing, member_id, request.instance_id), request)

    @staticmethod
    def _replace_static_member(
        group: ConsumerGroup, existing: ConsumerGroupMember, member_id: str
    ) -> ConsumerGroupMember:
        """The restarted instance takes over its predecessor's assignment without a group epoch bump."""
        target = group.target_assignment.get(existing.member_id, {})
        group.remove_member(existing.member_id)
        replacement = dataclasses.replace(
            existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
        )
        group.update_member(replacement)
        group.target_assignment[member_id] = target
        return replacement

    @staticmethod
    def _with_request(member: ConsumerGroupMember, request: HeartbeatRequest) -> ConsumerGroupMember:
        """ConsumerGroupMember.Builder's maybeUpdate*: a null field keeps what the member had. The member
        speaks the consumer protocol from now on (setClassicMemberMetadata(null)), a classic static member
        it replaced included."""
        changes: dict[str, object] = {
            "client_id": request.client_id,
            "client_host": request.client_host,
            "classic": None,
        }
        for name, value in (
            ("instance_id", request.instance_id),
            ("rack_id", request.rack_id),
            ("server_assignor", request.server_assignor),
            ("subscribed_topic_names", request.subscribed_topic_names),
            ("subscribed_topic_regex", request.subscribed_topic_regex),
        ):
            if value is not None:
                changes[name] = value
        if request.rebalance_timeout_ms != -1:
            changes["rebalance_timeout_ms"] = request.rebalance_timeout_ms
        return dataclasses.replace(member, **changes)  # type: ignore[arg-type]

    @staticmethod
    def _subscription_changed(old: ConsumerGroupMember, new: ConsumerGroupMember) -> bool:
        return (
            set(old.subscribed_topic_names) != set(new.subscribed_topic_names)
            or old.subscribed_topic_regex != new.subscribed_topic_regex
            or old.server_assignor != new.server_assignor
        )

    def update_subscription(
        self,
        now_ms: int,
        group: ConsumerGroup,
        updated: ConsumerGroupMember,
        topics: TopicsImage,
        authorized: Callable[[str], bool] | None,
        bump: bool,
    ) -> bool:
        """Whether the group epoch must be bumped (updateSubscriptionMetadata): ``bump`` (a new member or
        subscription), a regular expression matching other topics, or other subscribed topics. They are
        looked at again when ``bump`` or when the topics changed since the last time."""
        if not bump and group.subscription_metadata_version == topics.version:
            return False
        stale = group.subscription_metadata_version != topics.version
        if self._refresh_regexes(now_ms, group, updated, topics, authorized, stale):
            bump = True
        metadata = self._subscription_metadata(group, updated, topics)
        group.subscription_metadata_version = topics.version
        return group.update_subscription_metadata(metadata) or bump

    def _refresh_regexes(
        self,
        now_ms: int,
        group: ConsumerGroup,
        updated: ConsumerGroupMember,
        topics: TopicsImage,
        authorized: Callable[[str], bool] | None,
        stale: bool,
    ) -> bool:
        """maybeUpdateRegularExpressions and handleRegularExpressionsResult in one step (Kafka resolves in
        the background, then writes): a regular expression no member uses goes, a new one is resolved, and
        all are resolved again when the topics changed (``stale``). A resolution is replaced, so written,
        only when it matches other topics. True if one did (Kafka then bumps the group epoch)."""
        regexes = group.subscribed_regexes(updated)
        for regex in [r for r in group.resolved_regexes if r not in regexes]:
            del group.resolved_regexes[regex]
        changed = False
        for regex in sorted(regexes):
            old = group.resolved_regexes.get(regex)
            if old is not None and not stale:
                continue
            matched = self.regexes.matching(regex, topics, authorized)
            if old is None or old.topics != matched:
                group.resolved_regexes[regex] = ResolvedRegularExpression(matched, topics.version, now_ms)
                changed = changed or matched != (frozenset() if old is None else old.topics)
        return changed

    @staticmethod
    def _subscription_metadata(
        group: ConsumerGroup, updated: ConsumerGroupMember, topics: TopicsImage
    ) -> dict[str, TopicMetadata]:
        """The topics any member subscribes to, as they are now (ConsumerGroup.computeSubscriptionMetadata)."""
        names = group.topic_names_of(updated)
        for member in group.members.values():
            if member.member_id != updated.member_id:
                names |= group.topic_names_of(member)
        metadata = {}
        for name in sorted(names):
            topic = topics.by_name(name)
            if topic is not None:
                metadata[name] = topic
        return metadata

    def _update_target_assignment(self, group: ConsumerGroup, updated: ConsumerGroupMember) -> None:
        """TargetAssignmentBuilder: every member's subscription and current target through the assignor."""
        partition_counts = {t.topic_id: t.num_partitions for t in group.subscription_metadata.values()}
        members = dict(group.members)
        members[updated.member_id] = updated
        specs = {
            member_id: MemberSubscription(
                frozenset(
                    group.subscription_metadata[name].topic_id
                    for name in group.topic_names_of(member)
                    if name in group.subscription_metadata
                ),
                member.instance_id,
                member.rack_id,
                group.target_assignment.get(member_id, {}),
            )
            for member_id, member in members.items()
        }
        assignor = ASSIGNORS[group.preferred_assignor(self.settings.assignors[0], updated)]
        group.target_assignment = assignor.assign(specs, partition_counts)
        group.assignment_epoch = group.group_epoch

    @staticmethod
    def _drop_deleted_topics(member: ConsumerGroupMember, topics: TopicsImage) -> ConsumerGroupMember:
        """Partitions of a deleted topic need no revocation: nobody can consume them any more."""

        def existing(assignment: Assignment) -> Assignment:
            return {t: p for t, p in assignment.items() if topics.by_id(t) is not None}

        assigned, pending = existing(member.assigned), existing(member.pending_revocation)
        if assigned == member.assigned and pending == member.pending_revocation:
            return member
        return dataclasses.replace(member, assigned=assigned, pending_revocation=pending)

    def _schedule_timeouts(
        self, now_ms: int, group: ConsumerGroup, before: ConsumerGroupMember, after: ConsumerGroupMember
    ) -> None:
        """The session restarts at every heartbeat; a member asked to revoke partitions must do so within
        its rebalance timeout, counted again at every change of the member, a move from one revocation to
        the next included (scheduleConsumerGroupRebalanceTimeout)."""
        session_timeout_ms = self.group_config(group.group_id).consumer_session_timeout_ms
        group.session_deadlines[after.member_id] = now_ms + session_timeout_ms
        if after.state != MemberState.UNREVOKED_PARTITIONS:
            group.revocation_deadlines.pop(after.member_id, None)
        elif before != after or after.member_id not in group.revocation_deadlines:
            group.revocation_deadlines[after.member_id] = now_ms + after.rebalance_timeout_ms

    # ---- leaving -------------------------------------------------------------------------------------------
    def _leave(self, now_ms: int, request: HeartbeatRequest) -> HeartbeatResult:
        """GroupMetadataManager.consumerGroupLeave: -1 removes the member; -2 (a static member) keeps its
        assignment for a successor with the same instance id until its session expires."""
        group = self._group_for(request.group_id, create=False)
        if request.instance_id is None:
            if request.member_id not in group.members:
                raise GroupError(
                    ErrorCode.unknown_member_id,
                    f"Member {request.member_id} is not a member of group {group.group_id}.",
                )
            member = group.members[request.member_id]
        else:
            member_id = group.static_members.get(request.instance_id)
            if member_id is None:
                raise GroupError(
                    ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown."
                )
            if member_id != request.member_id:
                raise GroupError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {request.member_id} with instance id {request.instance_id} was fenced by "
                    f"member {member_id}.",
                )
            member = group.members[member_id]
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            group.update_member(member.with_epoch(LEAVE_GROUP_STATIC_MEMBER_EPOCH))
        else:
            self.fence_member(now_ms, group, member.member_id)
        return HeartbeatResult(ErrorCode.none, member_id=member.member_id, member_epoch=request.member_epoch)

    def fence_member(self, now_ms: int, group: ConsumerGroup, member_id: str) -> None:
        """consumerGroupFenceMember: ``fence_members`` of one."""
        self.fence_members(now_ms, group, {member_id})

    def fence_members(self, now_ms: int, group: ConsumerGroup, member_ids: set[str]) -> None:
        """consumerGroupFenceMembers: the members go with their assignments; the group epoch is bumped once
        so the next heartbeat computes a target without them. If only classic protocol members would be
        left and the policy allows a downgrade, the group becomes a classic group of those instead."""
        if not member_ids:
            return
        if self._downgrade_allowed(group, member_ids):
            self._convert_to_classic_group(now_ms, group, member_ids)
            return
        for member_id in sorted(member_ids):
            group.remove_member(member_id)
        group.drop_unused_regexes()
        group.group_epoch += 1

    def _downgrade_allowed(self, group: ConsumerGroup, leaving: set[str]) -> bool:
        """validateOnlineDowngradeWithFencedMembers: classic protocol members left, the policy allowing
        it, and no more of them than a classic group admits (group.max.size)."""
        remaining = [m for m in group.members.values() if m.member_id not in leaving]
        return (
            bool(remaining)
            and all(m.uses_classic_protocol for m in remaining)
            and self.settings.migration_policy.downgrade_enabled
            and len(remaining) <= self.settings.classic_max_size
        )

    def downgrade_on_replacement(self, now_ms: int, group: ConsumerGroup, rebalance: bool) -> bool:
        """validateOnlineDowngradeWithReplacedMember, after a classic static member replaced the last
        consumer protocol member: the group becomes a classic group without anyone leaving, rebalancing
        only if the join changed the group epoch (a new subscription). False if it stays."""
        if (
            not self.settings.migration_policy.downgrade_enabled
            or not all(m.uses_classic_protocol for m in group.members.values())
            or len(group.members) > self.settings.classic_max_size
        ):
            return False
        self._convert_to_classic_group(now_ms, group, set(), rebalance)
        return True

    def _convert_to_classic_group(
        self, now_ms: int, group: ConsumerGroup, leaving: set[str], rebalance: bool = True
    ) -> None:
        """convertToClassicGroup: the consumer group goes (its records are tombstoned), the classic members
        left form a classic group at the group epoch holding their target assignments, which then
        rebalances (unless a static member's replacement converted it)."""
        names = {topic.topic_id: name for name, topic in group.subscription_metadata.items()}
        members = classic_members_from_consumer(group.members.values(), leaving, now_ms)
        del self.groups[group.group_id]
        self.converted_to_classic.add(group.group_id)  # its GroupMetadata record is due, whatever came before
        self.classic.adopt_members(
            now_ms,
            group.group_id,
            group.group_epoch,
            members,
            lambda member_id, subscription: assignment_bytes(
                group.target_assignment.get(member_id, {}), subscription, names.get
            ),
            rebalance,
        )

    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Fences members whose session, revocation, join or sync deadline passed; returns (group, member)
        fenced."""
        fenced = []
        for group in list(self.groups.values()):
            expired: set[str] = set()
            for deadlines in (
                group.session_deadlines,
                group.revocation_deadlines,
                group.join_deadlines,
                group.sync_deadlines,
            ):
                expired |= {m for m, deadline in deadlines.items() if now_ms >= deadline}
            for member_id in sorted(expired):
                if self.groups.get(group.group_id) is not group:
                    break  # converted to a classic group by the previous fencing
                self.fence_member(now_ms, group, member_id)
                fenced.append((group.group_id, member_id))
        return fenced

    # ---- offsets, listing, deletion ---------------------------------------------------------------------
    def validate_offset_commit(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        api_version: int,
        *,
        transactional: bool = False,
    ) -> ErrorCode | None:
        """ConsumerGroup.validateOffsetCommit; None when the group is not a consumer group. A
        transactional commit (TxnOffsetCommit) has no version floor."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if not transactional and not member.uses_classic_protocol and api_version < 9:
            return ErrorCode.unsupported_version
        return _member_epoch_error(member, member_epoch)

    def validate_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """ConsumerGroup.validateOffsetFetch; None when the group is not a consumer group."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return _member_epoch_error(member, member_epoch)

    def is_live(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The existing topics the group's members subscribe to (OffsetDelete keeps their offsets)."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return set()
        return set(group.subscription_metadata)

    def remove_empty_group(self, group_id: str) -> bool:
        """Drops an empty consumer group (a classic join takes its id, or DeleteGroups); False if it has
        members."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return False
        self.groups.pop(group_id, None)
        return True

    def on_loaded(self, now_ms: int, group_ids: Iterable[str], topics: TopicsImage | None = None) -> None:
        """Groups rebuilt from their records: every member's session starts now, and a member asked to
        revoke gets its rebalance timeout again (GroupMetadataManager.onLoaded). The subscribed topics come
        from ``topics`` (the records hold only their hash, which the next heartbeat compares)."""
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                continue
            if topics is not None:
                group.subscription_metadata = self._loaded_subscription_metadata(group, topics)
            session_timeout_ms = self.group_config(group_id).consumer_session_timeout_ms
            for member in group.members.values():
                if member.classic is not None:  # classic members have no revocation deadline
                    group.session_deadlines[member.member_id] = now_ms + member.classic.session_timeout_ms
                    continue
                group.session_deadlines[member.member_id] = now_ms + session_timeout_ms
                if member.state == MemberState.UNREVOKED_PARTITIONS:
                    group.revocation_deadlines[member.member_id] = now_ms + member.rebalance_timeout_ms

    def _loaded_subscription_metadata(
        self, group: ConsumerGroup, topics: TopicsImage
    ) -> dict[str, TopicMetadata]:
        """The topics the members subscribe to as they are now: what a downgrade names the target's topic
        ids by, and OffsetDelete keeps, before any member heartbeats (Kafka reads its metadata image). A
        regular expression's topics are those its record holds; one without a record (a log written before
        they were) is resolved here, and stored at the next heartbeat."""
        names: set[str] = set()
        for member in group.members.values():
            names |= group.topic_names_of(member)
            regex = member.subscribed_topic_regex
            if regex and regex not in group.resolved_regexes:
                names |= self.regexes.matching(regex, topics)
        return {name: topic for name in sorted(names) if (topic := topics.by_name(name)) is not None}

    def unload_groups(self, predicate: Callable[[str], bool]) -> None:
        for group_id in [g for g in self.groups if predicate(g)]:
            del self.groups[group_id]


def _refuse_if_owned(group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    """ConsumerGroup.addPartitionEpochs refuses a partition another member owns: classic assignments that
    overlap cannot be upgraded (Kafka fails the heartbeat with UNKNOWN_SERVER_ERROR; the group stays
    classic)."""
    for topic_id, partitions in member.assigned.items():
        for partition in sorted(partitions):
            epoch = group.partition_epochs.get((topic_id, partition))
            if epoch is not None:
                raise GroupError(
                    ErrorCode.unknown_server_error,
                    f"Cannot set the epoch of {topic_id}-{partition} to {member.member_epoch} because the "
                    f"partition is still owned at epoch {epoch}.",
                )


def _member_epoch_error(member: ConsumerGroupMember, member_epoch: int) -> ErrorCode:
    """ConsumerGroup.validateMemberEpoch: a classic protocol member's generation is its member epoch."""
    if member_epoch == member.member_epoch:
        return ErrorCode.none
    return ErrorCode.illegal_generation if member.uses_classic_protocol else ErrorCode.stale_member_epoch


def known_static_member(
    existing: ConsumerGroupMember | None, member_id: str, instance_id: str
) -> ConsumerGroupMember:
    """The static member a rejoining member id names: the instance id must be known, and held by that
    member id (else UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), for either protocol."""
    if existing is None:
        raise GroupError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise GroupError(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{existing.member_id}.",
        )
    return existing


def _check_epoch(member: ConsumerGroupMember, request: HeartbeatRequest) -> ConsumerGroupMember:
    """throwIfConsumerGroupMemberEpochIsInvalid: a newer epoch than known, or an older one other than the
    previous epoch with partitions the member still has (its last response was lost), is fenced."""
    received = request.member_epoch
    if received > member.member_epoch or (
        received < member.member_epoch
        and (received != member.previous_member_epoch or not is_subset(request.owned, member.assigned))
    ):
        raise GroupError(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a {'larger' if received > member.member_epoch else 'smaller'} "
            f"member epoch ({received}) than the one known by the group coordinator "
            f"({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    return member
