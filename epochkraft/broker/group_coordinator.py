"""Sans-IO classic consumer-group coordinator: membership, rebalances, assignments and committed offsets.

Follows Kafka's GroupCoordinator for the classic protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup /
OffsetCommit / OffsetFetch). Requests come in with ``now_ms`` and, for the calls that wait (JoinGroup and
SyncGroup), a caller-chosen ``token``. Every call returns a list of ``Completion(token, result)``: the
results for whichever waiting requests the call finished, possibly including its own. The asyncio edge maps
tokens to futures and calls ``tick(now_ms)`` on a timer so rebalance and session deadlines fire.

Committed offsets change only through ``apply_offset(...)``: the edge first makes a commit durable (in the
replicated ``__consumer_offsets`` topic) and then applies it, and a new coordinator rebuilds the same state
by applying the stored records in order.

A group's membership is stored as Kafka's GroupMetadata record (``classic_group_records``): the leader's
SyncGroup returns a ``StoreGroup`` for the edge to write, and the group is Stable only once
``complete_store`` is told the write succeeded; ``replay_group_metadata`` and ``on_loaded`` rebuild the group
on a new coordinator.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from epochkraft.protocol.errors import ErrorCode

OFFSETS_TOPIC = "__consumer_offsets"
Token = Hashable


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    # (member id, group instance id, protocol metadata); only the leader receives the member list
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    # a replaced static leader keeps the group's assignment (JoinGroup v9+, KIP-814)
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Completion:
    token: Token
    result: JoinResult | SyncResult


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int
    # where its record sits in the offsets partition: its log offset when loaded, an order above every
    # loaded one when written here (Kafka's OffsetAndMetadata.recordOffset)
    record_offset: int = field(default=-1, compare=False)


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat_ms: int
    assignment: bytes = b""  # what SyncGroup answers; empty from a join's completion until the leader syncs
    # the partitions the member was last given (ClassicGroupMember.assignment, kept through a rebalance
    # until the next sync): what it may still own when the group is upgraded
    synced_assignment: bytes = b""
    join_token: Token | None = None
    sync_token: Token | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # group instance id -> member id of the static members (ClassicGroup.staticMembers)
    static_members: dict[str, str] = field(default_factory=dict)
    # member ids handed out with MEMBER_ID_REQUIRED, with the deadline to come back by
    pending_members: dict[str, int] = field(default_factory=dict)
    # members of the generation whose SyncGroup has not come, removed at the deadline (pendingSyncMembers)
    pending_sync: set[str] = field(default_factory=set)
    pending_sync_deadline_ms: int = 0
    rebalance_deadline_ms: int = 0
    empty_since_ms: int | None = (
        None  # when tick() first saw it without members (Kafka's currentStateTimestamp)
    )
    join_not_before_ms: int = 0
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    state_timestamp_ms: int | None = None  # when it entered its state (Kafka's currentStateTimestamp)


@dataclass(frozen=True, slots=True)
class StoreGroup:
    """The leader's assignment of a generation, every member's, to write with the group as its
    GroupMetadata record before the group is Stable (completeClassicGroupSync's append);
    ``complete_store`` applies it once written."""

    group_id: str
    generation_id: int
    assignments: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class StoreStaticMember:
    """A static member replaced in a Stable group whose protocol stays (updateStaticMemberThenRebalanceOr
    CompleteJoin): the group, the new member id in the old one's place with its assignment, to write as its
    GroupMetadata record before the join is answered; ``complete_static_store`` answers it, or puts the old
    member back if the write failed."""

    group_id: str
    group_instance_id: str
    new_member_id: str
    old_member: Member  # as it was, put back on a failed write
    leader_before: str | None  # what a join before v9 is answered as the leader
    token: Token
    skip_assignment_supported: bool
    assignments: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Kafka's group.* broker settings."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes
    offset_metadata_max_bytes: int = 4096
    max_size: int = 2**31 - 1  # group.max.size: most members a classic group admits


def java_string_hash(value: str) -> int:
    """Java's String.hashCode, so groups map to the same __consumer_offsets partition as in Kafka."""
    data = value.encode("utf-16-be")
    h = 0
    for unit in struct.unpack(f">{len(data) // 2}H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator_partition(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``."""
    h = java_string_hash(group_id)
    return (h & 0x7FFFFFFF if h == -(1 << 31) else abs(h)) % num_partitions


class GroupCoordinator:
    """All groups whose coordinator partition this broker leads."""

    def __init__(self, settings: GroupSettings | None = None) -> None:
        self.settings = settings or GroupSettings()
        self.groups: dict[str, Group] = {}
        # Transactional commits awaiting their marker: offsets partition -> producer id -> group -> offsets
        self.pending_txn_offsets: dict[int, dict[int, dict[str, dict[tuple[str, int], CommittedOffset]]]] = {}

    # ---- membership -------------------------------------------------------------------------------
    def join_group(
        self,
        now_ms: int,
        token: Token,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = True,
        skip_assignment_supported: bool = False,
    ) -> tuple[list[Completion], StoreStaticMember | None]:
        """The completions, and for a static member replaced in a Stable group without a rebalance the
        group to write first (``complete_static_store`` answers the join once written)."""

        def fail(error: ErrorCode) -> tuple[list[Completion], StoreStaticMember | None]:
            return [Completion(token, JoinResult(error, member_id=member_id))], None

        if not group_id:
            return fail(ErrorCode.invalid_group_id)
        if (
            not self.settings.min_session_timeout_ms
            <= session_timeout_ms
            <= self.settings.max_session_timeout_ms
        ):
            return fail(ErrorCode.invalid_session_timeout)
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has no rebalance timeout
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return fail(ErrorCode.unknown_member_id)
            group = self.groups[group_id] = Group(group_id)
        if group.state == GroupState.DEAD:
            # being deleted: the member finds the coordinator again and joins the group made afresh
            return fail(ErrorCode.coordinator_not_available)
        if not self._accepts_joining_member(group, member_id):
            removed = self._remove_member(group, member_id)
            group.pending_members.pop(member_id, None)
            return [*removed, Completion(token, JoinResult(ErrorCode.group_max_size_reached))], None
        if not protocols or (
            group.members
            and (group.protocol_type != protocol_type or not self._has_common_protocol(group, protocols))
        ):
            return fail(ErrorCode.inconsistent_group_protocol)

        if not member_id and group_instance_id is not None:
            # a static member joins at once, with an id of its instance (classicGroupJoinNewStaticMember)
            member_id = f"{group_instance_id}-{uuid.uuid4()}"
            if group_instance_id in group.static_members:
                return self._replace_static_member(
                    now_ms,
                    token,
                    group,
                    group_instance_id,
                    member_id,
                    protocols,
                    (session_timeout_ms, rebalance_timeout_ms),
                    skip_assignment_supported,
                )
        elif not member_id:
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id:
                group.pending_members[new_id] = now_ms + session_timeout_ms
                return [Completion(token, JoinResult(ErrorCode.member_id_required, member_id=new_id))], None
            member_id = new_id
        elif member_id in group.pending_members:
            if group_instance_id is not None:
                # only dynamic members are handed pending ids: Kafka's IllegalStateException, as clients see it
                return fail(ErrorCode.unknown_server_error)
            del group.pending_members[member_id]
        else:
            error = self._validate_member(group, member_id, group_instance_id)
            if error != ErrorCode.none:
                return fail(error)

        member = group.members.get(member_id)
        if member is None:
            member = Member(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocols,
                now_ms,
            )
            self._add_member(group, member)
            group.protocol_type = protocol_type
            member.join_token = token
            return self._prepare_rebalance(now_ms, group), None

        if member.protocols == protocols and (
            group.state == GroupState.COMPLETING_REBALANCE
            or (group.state == GroupState.STABLE and member_id != group.leader_id)
        ):
            # classicGroupJoinExistingMember: the same metadata (a lost JoinGroup answer, say) gets the current
            # generation back, the leader its members while the group completes, and changes nothing (its
            # session and timeouts stay); only a Stable leader's rejoin rebalances (it may know of changes
            # its metadata does not show)
            return [Completion(token, self._join_result(group, member_id))], None
        member.last_heartbeat_ms = now_ms  # updateMemberThenRebalanceOrCompleteJoin
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.protocols = protocols
        member.join_token = token
        if group.state == GroupState.PREPARING_REBALANCE:
            return self._maybe_complete_join(now_ms, group), None
        return self._prepare_rebalance(now_ms, group), None

    def _replace_static_member(
        self,
        now_ms: int,
        token: Token,
        group: Group,
        group_instance_id: str,
        new_member_id: str,
        protocols: tuple[tuple[str, bytes], ...],
        timeouts: tuple[int, int],
        skip_assignment_supported: bool,
    ) -> tuple[list[Completion], StoreStaticMember | None]:
        """updateStaticMemberThenRebalanceOrCompleteJoin: the new member id takes the old one's place
        (replaceStaticMember: its waiting join and sync fenced, its assignment and leadership kept). A Stable
        group whose protocol stays writes the group and does not rebalance; a Stable group whose protocol
        would change, or one completing a rebalance (the leader may have been sent the old id), rebalances;
        one preparing a rebalance goes on with the new member joined."""
        leader_before = group.leader_id
        old_member = group.members[group.static_members[group_instance_id]]
        done = self._swap_static_member(group, group_instance_id, new_member_id)
        member = group.members[new_member_id]
        member.protocols = protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = timeouts
        member.last_heartbeat_ms = now_ms
        member.join_token = token
        if group.state == GroupState.STABLE and self._select_protocol(group) == group.protocol_name:
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            store = StoreStaticMember(
                group.group_id,
                group_instance_id,
                new_member_id,
                old_member,
                leader_before,
                token,
                skip_assignment_supported,
                assignments,
            )
            return done, store
        if group.state == GroupState.PREPARING_REBALANCE:
            return done + self._maybe_complete_join(now_ms, group), None
        return done + self._prepare_rebalance(now_ms, group), None

    def _swap_static_member(
        self, group: Group, group_instance_id: str, new_member_id: str
    ) -> list[Completion]:
        """ClassicGroup.replaceStaticMember: the member of the instance under a new id, everything else
        kept; a join or sync the old id still waits on is answered FENCED_INSTANCE_ID."""
        old_id = group.static_members[group_instance_id]
        old = group.members.pop(old_id)
        done = []
        if old.join_token is not None:
            done.append(
                Completion(old.join_token, JoinResult(ErrorCode.fenced_instance_id, member_id=old_id))
            )
        if old.sync_token is not None:
            done.append(Completion(old.sync_token, SyncResult(ErrorCode.fenced_instance_id)))
        group.members[new_member_id] = dataclasses.replace(
            old, member_id=new_member_id, join_token=None, sync_token=None
        )
        group.static_members[group_instance_id] = new_member_id
        if group.leader_id == old_id:
            group.leader_id = new_member_id
        if old_id in group.pending_sync:
            group.pending_sync.remove(old_id)
            group.pending_sync.add(new_member_id)
        return done

    def complete_static_store(
        self, now_ms: int, store: StoreStaticMember, error: ErrorCode
    ) -> list[Completion]:
        """The group with the replaced static member was written (``error`` NONE) or not: written, the join
        is answered the current generation (with the members and SkipAssignment for a leader from v9); not
        written, the old member is put back and the join answered the error with no member id. If a
        rebalance answered the join meanwhile, the old id is put back all the same (Kafka reverts in every
        case) but with the protocols and timeouts the rebalance took, and a later join it waits in is
        answered UNKNOWN_MEMBER_ID, so it joins again (FENCED_INSTANCE_ID is fatal). The new member gone
        meanwhile, the join is answered the error, or UNKNOWN_MEMBER_ID (ignored if its removal did)."""
        group = self.groups.get(store.group_id)
        member = None if group is None else group.members.get(store.new_member_id)
        if group is None or member is None:
            gone = ErrorCode.unknown_member_id if error == ErrorCode.none else error
            return [Completion(store.token, JoinResult(gone))]
        waiting = member.join_token == store.token
        if waiting:
            member.join_token = None
        elif error == ErrorCode.none:
            return []
        if error != ErrorCode.none:
            done = []
            if member.join_token is not None:  # a later join of the instance joins again (not fatally fenced)
                done.append(Completion(member.join_token, JoinResult(ErrorCode.unknown_member_id)))
                member.join_token = None
            done += self._swap_static_member(group, store.group_instance_id, store.old_member.member_id)
            restored = group.members[store.old_member.member_id]
            if waiting:  # after a rebalance, the protocols it was given a generation with stay
                restored.protocols = store.old_member.protocols
                restored.session_timeout_ms = store.old_member.session_timeout_ms
                restored.rebalance_timeout_ms = store.old_member.rebalance_timeout_ms
            restored.last_heartbeat_ms = now_ms
            failed = JoinResult(
                error,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=store.leader_before or "",
            )
            return [*done, Completion(store.token, failed)] if waiting else done
        member.last_heartbeat_ms = now_ms  # its session runs from its answer (rescheduled heartbeat)
        if store.skip_assignment_supported:
            result = self._join_result(group, member.member_id)
            result = dataclasses.replace(result, skip_assignment=group.leader_id == member.member_id)
        else:
            result = dataclasses.replace(
                self._join_result(group, member.member_id), leader=store.leader_before or "", members=()
            )
        return [Completion(store.token, result)]

    def sync_group(
        self,
        now_ms: int,
        token: Token,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: dict[str, bytes],
        group_instance_id: str | None = None,
    ) -> tuple[list[Completion], StoreGroup | None]:
        """The completions, and from the leader in CompletingRebalance the assignment to write first
        (every member's, an empty one for a member the leader left out): its sync, and the followers', are
        answered by ``complete_store``."""

        def answer(result: SyncResult) -> tuple[list[Completion], StoreGroup | None]:
            return [Completion(token, result)], None

        group = self.groups.get(group_id)
        if group is None:
            return answer(SyncResult(ErrorCode.unknown_member_id))
        if group.state == GroupState.DEAD:
            return answer(SyncResult(ErrorCode.coordinator_not_available))
        error = self._validate_member(group, member_id, group_instance_id)
        if error != ErrorCode.none:
            return answer(SyncResult(error))
        if generation_id != group.generation_id:
            return answer(SyncResult(ErrorCode.illegal_generation))
        member = group.members[member_id]
        member.last_heartbeat_ms = now_ms
        if group.state == GroupState.PREPARING_REBALANCE:
            return answer(SyncResult(ErrorCode.rebalance_in_progress))
        group.pending_sync.discard(member_id)
        if group.state == GroupState.STABLE:
            return answer(self._sync_result(group, member))
        member.sync_token = token
        if member_id != group.leader_id:
            return [], None
        assigned = {mid: assignments.get(mid, b"") for mid in group.members}
        return [], StoreGroup(group_id, generation_id, assigned)

    def complete_store(self, now_ms: int, store: StoreGroup, error: ErrorCode) -> list[Completion]:
        """The leader's assignment was written (``error`` NONE) or not (the error as clients know it), as
        completeClassicGroupSync's appendFuture: nothing if the group has moved on meanwhile; else, written,
        the group is Stable and the waiting syncs get their assignments; not written, they get the error
        and the group rebalances (resetAndPropagateAssignmentWithError, maybePrepareRebalanceOrCompleteJoin)."""
        group = self.groups.get(store.group_id)
        if (
            group is None
            or group.state != GroupState.COMPLETING_REBALANCE
            or group.generation_id != store.generation_id
        ):
            return []
        done = []
        for m in group.members.values():
            if error == ErrorCode.none:
                m.assignment = m.synced_assignment = store.assignments.get(m.member_id, b"")
            else:
                m.assignment = b""
            if m.sync_token is not None:
                result = self._sync_result(group, m) if error == ErrorCode.none else SyncResult(error)
                done.append(Completion(m.sync_token, result))
                m.sync_token = None
        if error != ErrorCode.none:
            return done + self._prepare_rebalance(now_ms, group)
        self._transition(group, GroupState.STABLE, now_ms)
        return done

    def heartbeat(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state == GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_member(group, member_id, group_instance_id)
        if error != ErrorCode.none:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation  # validateClassicGroupHeartbeat: the session is not renewed
        group.members[member_id].last_heartbeat_ms = now_ms
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, now_ms: int, *, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode], list[Completion]]:
        """LeaveGroup of (member id, group instance id) pairs, as classicGroupLeaveToClassicGroup: an empty
        member id with an instance id removes that static member (an admin's removal, KIP-345), a pending
        member id is forgotten, any other is validated (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) and removed.
        Returns (top-level error, per-member errors, completions of waiting requests)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, [ErrorCode.unknown_member_id] * len(members), []
        before = len(group.members)
        done: list[Completion] = []
        errors = [self._leave_one(group, member_id, instance_id, done) for member_id, instance_id in members]
        if len(group.members) < before:
            done += self._prepare_rebalance(now_ms, group)
        top = errors[0] if len(members) == 1 else ErrorCode.none
        return top, errors, done

    def _leave_one(
        self, group: Group, member_id: str, group_instance_id: str | None, done: list[Completion]
    ) -> ErrorCode:
        if not member_id:
            if group_instance_id not in group.static_members:
                return ErrorCode.unknown_member_id
            member_id = group.static_members[group_instance_id]
        elif member_id in group.pending_members:
            del group.pending_members[member_id]
            return ErrorCode.none
        else:
            error = self._validate_member(group, member_id, group_instance_id)
            if error != ErrorCode.none:
                return error
        done += self._remove_member(group, member_id)
        return ErrorCode.none

    def tick(self, now_ms: int) -> list[Completion]:
        """Expires sessions, pending member ids and rebalance deadlines."""
        done: list[Completion] = []
        for group in list(self.groups.values()):
            if group.state == GroupState.DEAD:
                pass  # being deleted: a failed deletion keeps its offsets' retention clock
            elif group.members or group.state != GroupState.EMPTY:
                group.empty_since_ms = None
            elif group.empty_since_ms is None:
                group.empty_since_ms = now_ms
            for pending, deadline in list(group.pending_members.items()):
                if now_ms >= deadline:
                    del group.pending_members[pending]
            # Sessions expire while a rebalance is prepared too (Kafka's expireClassicGroupMemberHeartbeat):
            # a dead member that will never rejoin must not hold the join until the rebalance timeout.
            expired = [
                m.member_id
                for m in group.members.values()
                # a member awaiting its join or sync answer has its heartbeat satisfied (Kafka's
                # ClassicGroupMember.hasSatisfiedHeartbeat): the leader's slow assignment expires no follower
                if m.join_token is None
                and m.sync_token is None
                and now_ms - m.last_heartbeat_ms > m.session_timeout_ms
            ]
            for member_id in expired:
                done += self._remove_member(group, member_id)
            if group.state == GroupState.PREPARING_REBALANCE:
                done += self._maybe_complete_join(now_ms, group)
                continue
            unsynced = None if expired else self._expire_pending_sync(now_ms, group)
            if expired or unsynced is not None:
                done += (unsynced or []) + self._prepare_rebalance(now_ms, group)
        return done

    def _expire_pending_sync(self, now_ms: int, group: Group) -> list[Completion] | None:
        """expirePendingSync: members of the generation that have not sent SyncGroup a rebalance timeout
        after the join completed are removed (a static member that did not rejoin, say); the answers to
        the requests they still wait on (a replaced static member's join), or None if none was removed."""
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return None
        if not group.pending_sync or now_ms < group.pending_sync_deadline_ms:
            return None
        done: list[Completion] = []
        for member_id in list(group.pending_sync):
            done += self._remove_member(group, member_id)
        return done

    # ---- online migration (KIP-848's group.consumer.migration.policy) ----------------------------------
    def release_members(self, group_id: str) -> list[Completion]:
        """The group's members move to a consumer group (GroupMetadataManager.convertToConsumerGroup): the
        joins and syncs waiting are answered REBALANCE_IN_PROGRESS so those members rejoin, now into the
        consumer group; the group keeps its committed offsets and is left empty."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        done: list[Completion] = []
        for m in group.members.values():
            if m.join_token is not None:
                done.append(
                    Completion(
                        m.join_token, JoinResult(ErrorCode.rebalance_in_progress, member_id=m.member_id)
                    )
                )
            if m.sync_token is not None:
                done.append(Completion(m.sync_token, SyncResult(ErrorCode.rebalance_in_progress)))
        group.members.clear()
        group.static_members.clear()
        group.pending_members.clear()
        group.state, group.leader_id, group.protocol_name = GroupState.EMPTY, None, None
        return done

    def adopt_members(
        self,
        now_ms: int,
        group_id: str,
        generation_id: int,
        members: list[Member],
        assignment_for: Callable[[str, bytes], bytes],
        rebalance: bool = True,
    ) -> None:
        """A consumer group whose last consumer protocol member left becomes this classic group
        (ClassicGroup.fromConsumerGroup, then prepareRebalance): Stable at the consumer group's epoch, each
        member given ``assignment_for(member id, its subscription in the protocol chosen)``, then a
        rebalance so every member rejoins (none when a static member's replacement converted it)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        group.generation_id, group.protocol_type = generation_id, "consumer"
        group.members, group.static_members, group.pending_sync = {}, {}, set()
        for member in members:
            self._add_member(group, member)
        group.pending_members.clear()
        group.leader_id = members[0].member_id
        protocol = group.protocol_name = self._select_protocol(group)
        for member in members:
            member.assignment = assignment_for(member.member_id, member.metadata_for(protocol))
            member.synced_assignment = member.assignment
            member.last_heartbeat_ms = now_ms
        self._transition(group, GroupState.STABLE, now_ms)
        if not rebalance:
            return
        done = self._prepare_rebalance(now_ms, group)
        assert not done, "no member of an adopted group waits for an answer"

    def revert_new_group(self, group_id: str, error: ErrorCode) -> list[Completion]:
        """The empty record of a group a join created could not be written: the group goes again, as
        Kafka's runtime reverts the join (classicGroupJoinToClassicGroup's append future), its waiting joins
        answered ``error``; kept if a rebalance has completed since (its own record is written then)."""
        group = self.groups.get(group_id)
        if group is None or group.generation_id != 0:
            return []
        done = [
            Completion(m.join_token, JoinResult(error, member_id=m.member_id))
            for m in group.members.values()
            if m.join_token is not None
        ]
        self.replay_group_metadata(group_id, None)  # an offset committed meanwhile stays, as after a load
        return done

    def membership_snapshot(self, group_id: str) -> Group | None:
        """The group's members and rebalance state, to restore if a conversion cannot be written; None
        without members. Waiting joins and syncs are not kept: a conversion answers them."""
        group = self.classic_group_of(group_id)
        if group is None:
            return None
        members = {
            member_id: dataclasses.replace(m, join_token=None, sync_token=None)
            for member_id, m in group.members.items()
        }
        return dataclasses.replace(
            group,
            members=members,
            static_members=dict(group.static_members),
            pending_members=dict(group.pending_members),
            pending_sync=set(group.pending_sync),
        )

    def restore_membership(self, snapshot: Group) -> None:
        """Puts back what ``membership_snapshot`` took, keeping the offsets committed since."""
        group = self.groups.get(snapshot.group_id)
        offsets = group.offsets if group is not None else snapshot.offsets
        self.groups[snapshot.group_id] = dataclasses.replace(snapshot, offsets=offsets)

    def classic_group_of(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return group if group is not None and group.members else None

    # ---- loading: the GroupMetadata records of an offsets partition ------------------------------------
    def replay_group_metadata(self, group_id: str, loaded: Group | None) -> None:
        """GroupMetadataManager.replay(GroupMetadataKey, GroupMetadataValue): the group as its record has it
        (``classic_group_records.group_from_record``), or removed by a tombstone (None). Its committed
        offsets, kept apart in Kafka, stay either way."""
        existing = self.groups.get(group_id)
        offsets = existing.offsets if existing is not None else {}
        if loaded is not None:
            self.groups[group_id] = dataclasses.replace(loaded, offsets=offsets)
        elif offsets:
            self.groups[group_id] = Group(group_id, offsets=offsets)
        else:
            self.groups.pop(group_id, None)

    def on_loaded(self, now_ms: int, group_ids: Iterable[str]) -> None:
        """GroupMetadataManager.onLoaded: each loaded member's session runs from now, so one that never
        comes back to this coordinator is removed; a group over group.max.size (lowered since it was
        written) rebalances, its members' rejoins admitted up to the maximum."""
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                continue
            for member in group.members.values():
                member.last_heartbeat_ms = now_ms
            if len(group.members) > self.settings.max_size:
                done = self._prepare_rebalance(now_ms, group)
                assert not done, "no member of a loaded group waits for an answer"

    def empty_groups_without_offsets(self) -> list[str]:
        """The groups cleanupGroupMetadata deletes (maybeDeleteGroup): Empty, with no committed or pending
        offsets and no member id handed out."""
        pending = {
            group_id
            for by_producer in self.pending_txn_offsets.values()
            for by_group in by_producer.values()
            for group_id, offsets in by_group.items()
            if offsets
        }
        return [
            g.group_id
            for g in self.groups.values()
            if g.state == GroupState.EMPTY
            and not g.members
            and not g.offsets
            and not g.pending_members
            and g.group_id not in pending
        ]

    # ---- offsets ------------------------------------------------------------------------------------
    def validate_offset_commit(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
        transactional: bool = False,
        api_version: int = 9,
    ) -> ErrorCode:
        """NONE when the commit may be written; the edge then persists it and calls apply_offset. As
        OffsetMetadataManager.validateOffsetCommit / validateTransactionalOffsetCommit: a commit with a
        negative generation to no group makes a simple group; one with a generation to no group is
        GROUP_ID_NOT_FOUND from OffsetCommit v9, ILLEGAL_GENERATION before and for TxnOffsetCommit."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                return ErrorCode.none
            if transactional or api_version < 9:
                return ErrorCode.illegal_generation
            return ErrorCode.group_id_not_found
        return self._validate_classic_offset_commit(
            group, generation_id, member_id, group_instance_id, transactional
        )

    def _validate_classic_offset_commit(
        self,
        group: Group,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        transactional: bool,
    ) -> ErrorCode:
        """ClassicGroup.validateOffsetCommit: without a generation only an Empty group's offsets may be
        written (an admin cannot overwrite a live group's, except inside a transaction); with one, the
        member (and its instance id) must be the group's at its generation; a plain commit while the group
        completes its rebalance is REBALANCE_IN_PROGRESS."""
        if group.state == GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.state == GroupState.EMPTY:
            return ErrorCode.none
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self._validate_member(group, member_id, group_instance_id)
            if error != ErrorCode.none:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional:
            return ErrorCode.unknown_member_id
        if not transactional and group.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def offset_metadata_too_large(self, metadata: str | None) -> bool:
        """Kafka's OffsetMetadataManager.isMetadataInvalid (GroupMetadataManager.validateOffsetMetadataLength
        before KIP-848): longer than offset.metadata.max.bytes, counted as Java's String.length()."""
        if metadata is None:
            return False
        return len(metadata.encode("utf-16-le")) // 2 > self.settings.offset_metadata_max_bytes

    def apply_offset(
        self, group_id: str, topic: str, partition: int, committed: CommittedOffset | None
    ) -> None:
        """Applies a durable commit (None = deletion); the only way committed offsets change. A deletion
        also drops the partition's pending transactional offsets, as Kafka's OffsetMetadataManager.replay
        of a tombstone: the transaction's marker would otherwise bring the deleted offset back."""
        if committed is None:
            self._drop_pending_txn_offset(group_id, (topic, partition))
        group = self.groups.get(group_id)
        if group is None:
            if committed is None:
                return
            group = self.groups[group_id] = Group(group_id)
        if committed is None:
            group.offsets.pop((topic, partition), None)
        else:
            group.offsets[(topic, partition)] = committed

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    # ---- transactional offsets (TxnOffsetCommit, KIP-98 / KIP-447) -------------------------------------
    def add_pending_txn_offsets(
        self, partition: int, producer_id: int, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]
    ) -> None:
        """Offsets a transaction wrote to ``partition`` of __consumer_offsets: invisible to OffsetFetch
        until the transaction's marker commits them (Kafka's GroupMetadata.prepareTxnOffsetCommit)."""
        by_group = self.pending_txn_offsets.setdefault(partition, {}).setdefault(producer_id, {})
        by_group.setdefault(group_id, {}).update(offsets)

    def complete_transactional_offsets(
        self, partition: int, producer_id: int, producer_epoch: int, committed: bool
    ) -> None:
        """The marker of ``producer_id``'s transaction was written to ``partition`` of __consumer_offsets:
        its pending offsets become committed, or are dropped if it aborted (Kafka's
        GroupMetadataManager.scheduleHandleTxnCompletion)."""
        by_group = self.pending_txn_offsets.get(partition, {}).pop(producer_id, {})
        if not committed:
            return
        for group_id, offsets in by_group.items():
            stored = self.committed_offsets(group_id)
            for (topic, index), offset in offsets.items():
                # the later record wins: a regular commit written after the transaction's stays
                existing = stored.get((topic, index))
                if existing is None or offset.record_offset > existing.record_offset:
                    self.apply_offset(group_id, topic, index, offset)

    def has_pending_txn_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset of the partition for the group (OffsetFetch with
        require_stable answers UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        return any(
            (topic, partition) in by_group.get(group_id, {})
            for by_producer in self.pending_txn_offsets.values()
            for by_group in by_producer.values()
        )

    def has_open_transactions(self, group_id: str) -> bool:
        """Whether an open transaction holds offsets of the group (Kafka's openTransactionsByGroup)."""
        return any(
            by_group.get(group_id)
            for by_producer in self.pending_txn_offsets.values()
            for by_group in by_producer.values()
        )

    def _drop_pending_txn_offset(self, group_id: str, topic_partition: tuple[str, int]) -> None:
        for by_producer in self.pending_txn_offsets.values():
            for by_group in by_producer.values():
                by_group.get(group_id, {}).pop(topic_partition, None)

    def drop_pending_txn_offsets(self, partition: int) -> None:
        self.pending_txn_offsets.pop(partition, None)

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self.groups.get(group_id)
        return dict(group.offsets) if group else {}

    def decide_expired_offsets(self, now_ms: int) -> dict[str, list[tuple[str, int]]]:
        """Offsets to tombstone, per group (``expired_offsets``)."""
        expired = {group_id: self.expired_offsets(group_id, now_ms) for group_id in self.groups}
        return {group_id: partitions for group_id, partitions in expired.items() if partitions}

    def expired_offsets(self, group_id: str, now_ms: int) -> list[tuple[str, int]]:
        """A group's offsets to tombstone (Kafka's GroupMetadata.removeExpiredOffsets, KIP-211): only a
        group without members loses offsets, each once offsets.retention.minutes have passed since the
        later of its commit and the moment the group became empty (since the commit alone for a group
        of simple consumers, which never had members)."""
        group = self.groups.get(group_id)
        if group is None or group.members:
            return []
        if group.protocol_type is None:  # simple consumers' commits: from each commit
            since = 0
        elif group.empty_since_ms is None:
            return []
        else:
            since = group.empty_since_ms
        retention = self.settings.offsets_retention_ms
        return sorted(
            tp
            for tp, committed in group.offsets.items()
            if max(committed.commit_timestamp_ms, since) + retention <= now_ms
        )

    # ---- deletion (DeleteGroups, OffsetDelete) -------------------------------------------------------
    def decide_delete_group(self, group_id: str) -> tuple[ErrorCode, list[tuple[str, int]]]:
        """(error, the offsets to tombstone): only a group without members may go (Kafka's deleteGroups)."""
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.group_id_not_found, []
        if group.members:
            return ErrorCode.non_empty_group, []
        return ErrorCode.none, sorted(group.offsets)

    def remove_group(self, group_id: str) -> None:
        """Forgets a deleted group once its offsets' tombstones are durable."""
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            del self.groups[group_id]

    def forget_deleted_group(self, group_id: str) -> None:
        """The group's tombstone is durable: the group as a load would replay it (an offset committed while
        it was written kept, in a fresh Empty group; the group dropped if none is left)."""
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            self.replay_group_metadata(group_id, None)

    def mark_dead(self, group_id: str) -> GroupState | None:
        """A group without members Dead while its tombstones are written, as Kafka deletes it at once:
        nothing joins it, commits to it or writes its Empty record meanwhile. Its state before, for
        ``revive`` if the write fails; None if there is no such group."""
        group = self.groups.get(group_id)
        if group is None or group.members or group.state == GroupState.DEAD:
            return None
        before, group.state = group.state, GroupState.DEAD
        return before

    def revive(self, group_id: str, state: GroupState | None) -> None:
        """The deletion's write failed: the group as ``mark_dead`` found it."""
        group = self.groups.get(group_id)
        if group is not None and state is not None and group.state == GroupState.DEAD:
            group.state = state

    def decide_delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """(top-level error, per-partition errors) as Kafka's deleteOffsets: an empty group loses any
        offset; a consumer group keeps the offsets of topics its members subscribe to
        (GROUP_SUBSCRIBED_TO_TOPIC); a non-empty group of another protocol type is NON_EMPTY_GROUP."""
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        subscribed: set[str] = set()
        if group.members:
            if group.protocol_type != "consumer":
                return ErrorCode.non_empty_group, {}
            for member in group.members.values():
                subscribed |= subscribed_topics(member.metadata_for(group.protocol_name or ""))
        return ErrorCode.none, {
            tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none
            for tp in partitions
        }

    def unload_groups(self, predicate) -> list[Completion]:
        """Drops groups (e.g. when this broker stops leading their offsets partition); waiters get
        NOT_COORDINATOR so clients look the coordinator up again."""
        done: list[Completion] = []
        for group_id in [g for g in self.groups if predicate(g)]:
            group = self.groups.pop(group_id)
            for m in group.members.values():
                if m.join_token is not None:
                    done.append(
                        Completion(m.join_token, JoinResult(ErrorCode.not_coordinator, member_id=m.member_id))
                    )
                if m.sync_token is not None:
                    done.append(Completion(m.sync_token, SyncResult(ErrorCode.not_coordinator)))
        return done

    # ---- internals ----------------------------------------------------------------------------------
    @staticmethod
    def _has_common_protocol(group: Group, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        names = {name for name, _ in protocols}
        for member in group.members.values():
            names &= {name for name, _ in member.protocols}
        return bool(names)

    def _accepts_joining_member(self, group: Group, member_id: str) -> bool:
        """GroupMetadataManager.acceptJoiningMember (group.max.size): an empty group takes anyone; while
        preparing a rebalance, a member already waiting in its join, or anyone while fewer than the
        maximum wait (so after group.max.size was lowered the last to rejoin are left out); otherwise
        a member, or anyone while the group has fewer members than the maximum."""
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        member = group.members.get(member_id)
        if group.state == GroupState.PREPARING_REBALANCE:
            awaiting = sum(1 for m in group.members.values() if m.join_token is not None)
            return (member is not None and member.join_token is not None) or awaiting < self.settings.max_size
        return member is not None or len(group.members) < self.settings.max_size

    @staticmethod
    def _validate_member(group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """ClassicGroup.validateMember: an instance id must map to the member id (FENCED_INSTANCE_ID if it
        maps to another, UNKNOWN_MEMBER_ID if to none), and the member id must be in the group."""
        if group_instance_id is not None:
            existing = group.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        return ErrorCode.none if member_id in group.members else ErrorCode.unknown_member_id

    @staticmethod
    def _add_member(group: Group, member: Member) -> None:
        group.members[member.member_id] = member
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member.member_id

    def _remove_member(self, group: Group, member_id: str) -> list[Completion]:
        """removeMemberAndUpdateClassicGroup: a join or sync the member still waits on is answered
        UNKNOWN_MEMBER_ID (a leader leaving while its assignment is written would otherwise hang)."""
        removed = group.members.pop(member_id, None)
        group.pending_sync.discard(member_id)
        if removed is None:
            return []
        if removed.group_instance_id is not None:
            group.static_members.pop(removed.group_instance_id, None)
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        done = []
        if removed.join_token is not None:
            # UNKNOWN_MEMBER_ID with no member id, so a live client joins again (Kafka's completeJoinFuture)
            done.append(Completion(removed.join_token, JoinResult(ErrorCode.unknown_member_id)))
        if removed.sync_token is not None:
            done.append(Completion(removed.sync_token, SyncResult(ErrorCode.unknown_member_id)))
        return done

    def _prepare_rebalance(self, now_ms: int, group: Group) -> list[Completion]:
        done: list[Completion] = []
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                if m.sync_token is not None:
                    done.append(Completion(m.sync_token, SyncResult(ErrorCode.rebalance_in_progress)))
                    m.sync_token = None
        if group.state != GroupState.PREPARING_REBALANCE:
            group.rebalance_deadline_ms = now_ms + self._rebalance_timeout(group)
            group.pending_sync.clear()
            group.join_not_before_ms = (
                now_ms + self.settings.initial_rebalance_delay_ms
                if group.state == GroupState.EMPTY
                else now_ms
            )
            self._transition(group, GroupState.PREPARING_REBALANCE, now_ms)
        return done + self._maybe_complete_join(now_ms, group)

    def _maybe_complete_join(self, now_ms: int, group: Group) -> list[Completion]:
        everyone_joined = all(m.join_token is not None for m in group.members.values())
        if now_ms < group.rebalance_deadline_ms and (
            not everyone_joined or now_ms < group.join_not_before_ms
        ):
            return []
        # completeClassicGroupJoin: dynamic members that did not rejoin in time are dropped (their waiting
        # requests answered); static ones stay in the generation until their session expires, so a restarted
        # instance keeps its place.
        done: list[Completion] = []
        not_rejoined = [m for m in group.members.values() if m.join_token is None]
        for member in not_rejoined:
            if member.group_instance_id is None:
                done += self._remove_member(group, member.member_id)
        if group.members and not self._elect_joined_leader(group):
            # nobody rejoined: wait another rebalance timeout, until sessions remove the silent members
            group.rebalance_deadline_ms = now_ms + self._rebalance_timeout(group)
            return done
        group.generation_id += 1
        if not group.members:
            self._transition(group, GroupState.EMPTY, now_ms)
            group.protocol_name = None
            group.leader_id = None
            return done
        group.protocol_name = self._select_protocol(group)
        self._transition(group, GroupState.COMPLETING_REBALANCE, now_ms)
        group.pending_sync = set(group.members)
        group.pending_sync_deadline_ms = now_ms + self._rebalance_timeout(group)
        for member in group.members.values():
            member.assignment = b""
            member.last_heartbeat_ms = now_ms
            if member.join_token is not None:
                done.append(Completion(member.join_token, self._join_result(group, member.member_id)))
                member.join_token = None
        return done

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        """ClassicGroup.maybeElectNewJoinedLeader: a leader that did not rejoin hands over to the first
        member that did; False if none did."""
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.join_token is not None:
            return True
        joined = next((m.member_id for m in group.members.values() if m.join_token is not None), None)
        if joined is None:
            return False
        group.leader_id = joined
        return True

    @staticmethod
    def _rebalance_timeout(group: Group) -> int:
        """ClassicGroup.rebalanceTimeoutMs: the longest of the members'."""
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0)

    @staticmethod
    def _transition(group: Group, state: GroupState, now_ms: int) -> None:
        """ClassicGroup.transitionTo: the state and when it was entered."""
        group.state, group.state_timestamp_ms = state, now_ms

    @staticmethod
    def _select_protocol(group: Group) -> str:
        """Each member votes for its most preferred protocol that every member supports."""
        candidates = None
        for m in group.members.values():
            names = {name for name, _ in m.protocols}
            candidates = names if candidates is None else candidates & names
        votes: dict[str, int] = {}
        for m in group.members.values():
            choice = next(name for name, _ in m.protocols if name in (candidates or set()))
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def _join_result(self, group: Group, member_id: str) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member_id == group.leader_id and group.protocol_name is not None:
            members = tuple(
                (m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.none,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member_id,
            members=members,
        )

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment)


def subscribed_topics(subscription: bytes) -> set[str]:
    """The topics of a consumer protocol Subscription (version, then an array of topic names)."""
    try:
        (count,) = struct.unpack_from(">i", subscription, 2)
        position, topics = 6, set()
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", subscription, position)
            topics.add(subscription[position + 2 : position + 2 + length].decode())
            position += 2 + length
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()
