"""The voter set of a dynamic quorum (KIP-853): replica keys, the voter set, its history in the log, and
the control records that carry it.

Followed from apache/kafka's raft module: ReplicaKey (a node id and the directory id written when its
disk was formatted), VoterSet (isVoter by replica key, addVoter, removeVoter, hasOverlappingMajority),
VoterSetHistory (the voter set at each offset of the log: addAt, lastValue, valueAtOrBefore,
truncateNewEntries, truncateOldEntries) and KRaftControlRecordStateMachine (the kraft.version and the
voter set read back from the log's VotersRecord and KRaftVersionRecord control records and from the
snapshot or bootstrap checkpoint below it).

A static quorum (``controller.quorum.voters``, kraft.version 0) has no records: its voter set is the
configured ids without directory ids, and a replica with a matching id is a voter whatever its disk.
"""

from __future__ import annotations

import bisect
import uuid
from dataclasses import dataclass

KRAFT_VERSION_0 = 0  # static voters (controller.quorum.voters)
KRAFT_VERSION_1 = 1  # the voter set in the log (KIP-853)
BOOTSTRAP_OFFSET = -1  # the bootstrap checkpoint's voter set holds before the log's first offset


@dataclass(frozen=True, slots=True, order=True)
class ReplicaKey:
    """Kafka's ReplicaKey: a node id and its directory id (None: NO_DIRECTORY_ID, a static voter)."""

    id: int
    directory_id: uuid.UUID | None = None

    def __str__(self) -> str:
        return f"{self.id}" if self.directory_id is None else f"{self.id}:{str(self.directory_id)[:8]}"


@dataclass(frozen=True, slots=True, order=True)
class Endpoint:
    """One listener of a voter (VotersRecord.Endpoint, AddRaftVoter's Listener): its name, host and port."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


Endpoints = tuple[Endpoint, ...]


@dataclass(frozen=True, slots=True)
class VoterSet:
    """Kafka's VoterSet: at most one replica key per node id, and the listeners each voter is reached on
    (``endpoints``, by node id; none in a static quorum, whose addresses are configured)."""

    voters: tuple[ReplicaKey, ...] = ()
    endpoints: tuple[tuple[int, Endpoints], ...] = ()

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.voters))
        if len({key.id for key in ordered}) != len(ordered):
            raise ValueError(f"two voters with one id in {ordered}")
        object.__setattr__(self, "voters", ordered)
        ids = {key.id for key in ordered}
        endpoints = tuple(sorted((i, e) for i, e in self.endpoints if i in ids and e))
        object.__setattr__(self, "endpoints", endpoints)

    def endpoints_of(self, voter_id: int) -> Endpoints:
        """The listeners of voter ``voter_id`` (VoterSet.listeners); empty when unknown."""
        return next((e for i, e in self.endpoints if i == voter_id), ())

    def with_endpoints(self, voter_id: int, endpoints: Endpoints) -> VoterSet:
        """The same voters, ``voter_id`` reached on ``endpoints`` (UpdateRaftVoter's change)."""
        others = tuple((i, e) for i, e in self.endpoints if i != voter_id)
        return VoterSet(self.voters, (*others, (voter_id, endpoints)))

    @classmethod
    def static(cls, ids: tuple[int, ...]) -> VoterSet:
        """The voters of controller.quorum.voters: ids without directory ids (kraft.version 0)."""
        return cls(tuple(ReplicaKey(voter) for voter in ids))

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(key.id for key in self.voters)

    def key_of(self, voter_id: int) -> ReplicaKey | None:
        return next((key for key in self.voters if key.id == voter_id), None)

    def is_voter(self, replica: ReplicaKey) -> bool:
        """VoterSet.isVoter / VoterNode.isVoter: the ids match, and the directory ids too when the voter
        set has one (a configured voter has none, so any disk of that node is the voter)."""
        key = self.key_of(replica.id)
        if key is None:
            return False
        return key.directory_id is None or key.directory_id == replica.directory_id

    def is_only_voter(self, replica: ReplicaKey) -> bool:
        return len(self.voters) == 1 and self.is_voter(replica)

    def add_voter(self, voter: ReplicaKey, endpoints: Endpoints = ()) -> VoterSet | None:
        """VoterSet.addVoter: None when a voter with that id is already in the set."""
        if self.key_of(voter.id) is not None:
            return None
        return VoterSet((*self.voters, voter), (*self.endpoints, (voter.id, endpoints)))

    def remove_voter(self, voter: ReplicaKey) -> VoterSet | None:
        """VoterSet.removeVoter: None unless that exact key is a voter and is not the last one."""
        if voter not in self.voters or len(self.voters) <= 1:
            return None
        return VoterSet(tuple(key for key in self.voters if key != voter), self.endpoints)

    def has_overlapping_majority(self, other: VoterSet) -> bool:
        """VoterSet.hasOverlappingMajority: the two sets differ by at most one key each way."""
        ours, theirs = set(self.voters), set(other.voters)
        return len(ours - theirs) <= 1 and len(theirs - ours) <= 1

    def majority_size(self) -> int:
        return len(self.voters) // 2 + 1

    def __str__(self) -> str:
        return "{" + ", ".join(str(key) for key in self.voters) + "}"


@dataclass(frozen=True, slots=True)
class VotersRecord:
    """The VotersRecord control record (version 0): the whole voter set from its offset on."""

    voters: VoterSet


@dataclass(frozen=True, slots=True)
class KRaftVersionRecord:
    """The KRaftVersionRecord control record: the kraft.version feature from its offset on."""

    kraft_version: int


class VoterSetHistory:
    """KRaftControlRecordStateMachine's view of the log: the voter sets and kraft.versions written at each
    offset (VoterSetHistory and its LogHistory of kraft versions), kept in step with the log's appends,
    truncations and snapshots. An empty history: the static voter set applies (kraft.version 0)."""

    def __init__(self) -> None:
        self._voter_offsets: list[int] = []
        self._voter_sets: list[VoterSet] = []
        self._version_offsets: list[int] = []
        self._versions: list[int] = []

    def add_voters_at(self, offset: int, voters: VoterSet) -> None:
        """VoterSetHistory.addAt: offsets only grow; a new set must overlap the last one's majority unless
        the history was empty (the bootstrap or the first record)."""
        if self._voter_offsets and offset <= self._voter_offsets[-1]:
            raise ValueError(f"voter set at {offset}, not after {self._voter_offsets[-1]}")
        last = self.last_value()
        if last is not None and not last.has_overlapping_majority(voters):
            raise ValueError(f"voter set {voters} at {offset} has no majority in common with {last}")
        self._voter_offsets.append(offset)
        self._voter_sets.append(voters)

    def add_kraft_version_at(self, offset: int, version: int) -> None:
        if self._version_offsets and offset < self._version_offsets[-1]:
            raise ValueError(f"kraft.version at {offset}, before {self._version_offsets[-1]}")
        self._version_offsets.append(offset)
        self._versions.append(version)

    def last_value(self) -> VoterSet | None:
        """VoterSetHistory.lastValue: the latest voter set in the log, committed or not."""
        return self._voter_sets[-1] if self._voter_sets else None

    def last_offset(self) -> int | None:
        """The offset of the latest voter set (VoterSetHistory.lastVoterSetOffset)."""
        return self._voter_offsets[-1] if self._voter_offsets else None

    def value_at_or_before(self, offset: int) -> VoterSet | None:
        index = bisect.bisect_right(self._voter_offsets, offset)
        return self._voter_sets[index - 1] if index else None

    def kraft_version(self) -> int:
        return self._versions[-1] if self._versions else KRAFT_VERSION_0

    def kraft_version_at_or_before(self, offset: int) -> int:
        """The kraft.version at ``offset`` (LogHistory.valueAtOrBefore; kraft.version 0 before any)."""
        index = bisect.bisect_right(self._version_offsets, offset)
        return self._versions[index - 1] if index else KRAFT_VERSION_0

    def truncate_new_entries(self, end_offset: int) -> None:
        """VoterSetHistory.truncateNewEntries: forgets what was written at ``end_offset`` and after."""
        keep = bisect.bisect_left(self._voter_offsets, end_offset)
        del self._voter_offsets[keep:], self._voter_sets[keep:]
        keep = bisect.bisect_left(self._version_offsets, end_offset)
        del self._version_offsets[keep:], self._versions[keep:]

    def truncate_old_entries(self, start_offset: int) -> None:
        """VoterSetHistory.truncateOldEntries: drops what a snapshot at ``start_offset`` supersedes, keeping
        the last value before it (the snapshot's)."""
        drop = max(bisect.bisect_left(self._voter_offsets, start_offset) - 1, 0)
        del self._voter_offsets[:drop], self._voter_sets[:drop]
        drop = max(bisect.bisect_left(self._version_offsets, start_offset) - 1, 0)
        del self._version_offsets[:drop], self._versions[:drop]

    def reset(self, offset: int, voters: VoterSet | None, kraft_version: int) -> None:
        """A snapshot replaces the whole log: its voter set and kraft.version are all that is known."""
        self._voter_offsets, self._voter_sets = ([offset], [voters]) if voters is not None else ([], [])
        self._version_offsets, self._versions = [offset], [kraft_version]
