"""One consumer group as its coordinator holds it: members, generation,
chosen protocol, state, committed offsets (Kafka's GroupMetadata and
MemberMetadata; docs/design.md#groups).

Pure state with the rules of Kafka's group state machine: which transitions
are allowed, who leads, which protocol the members agree on. Timers,
callbacks and storage are the coordinator's (group_coordinator.py); every
method here runs on the broker's event loop and none blocks.
"""
from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any, Callable


class GroupState(enum.Enum):
    """Kafka's names: DescribeGroups answers them as they are."""
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
# state -> the states it may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY,
                       S.DEAD}),
}


class IllegalStateTransition(Exception):
    """A bug in the coordinator: the state machine forbids this move."""


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset as the offsets topic keeps it (value schema v1)."""
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


# What a member is told when its JoinGroup completes:
# (error, generation, protocol, leader, member id, members for the leader).
JoinResult = tuple[int, int, str, str, str, list[tuple[str, bytes]]]
JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[int, bytes], None]   # (error, assignment)


class MemberMetadata:
    """One member: who it is, the protocols it offers (name, metadata) in
    its order of preference, its assignment, and the requests it waits on."""

    def __init__(self, member_id: str, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]]):
        self.member_id = member_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = list(protocols)
        self.assignment = b""
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        self.latest_heartbeat_ms = 0
        self.heartbeat_timer: Any = None   # the coordinator's session timer
        self.is_leaving = False

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order."""
        return list(protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The first protocol of this member's preference the group can use."""
        for name in self.protocol_names():
            if name in candidates:
                return name
        raise KeyError(f"member {self.member_id} supports none of {sorted(candidates)}")


class GroupMetadata:
    def __init__(self, group_id: str, state: GroupState = S.EMPTY):
        self.group_id = group_id
        self.state = state
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}   # insertion order: the next leader
        # A member joined during the initial delayed rebalance: wait a little more.
        self.new_member_added = False
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        # Offsets committed in a transaction, by producer id: they become
        # the group's offsets when its COMMIT marker is written, and are
        # dropped on ABORT (docs/design.md#transactions).
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.join_timer: Any = None   # the coordinator's pending rebalance completion
        # That completion is the initial delay: it waits out its timer even
        # when every member has joined.
        self.initial_delay = False

    def complete_txn_offsets(self, producer_id: int, commit: bool) -> None:
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if pending and commit:
            self.offsets.update(pending)

    # -- state ------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[S.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {target.value} is not allowed")
        self.state = target

    # -- members ----------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        """The first member fixes the group's protocol type; the first one
        added while there is no leader leads."""
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member

    def remove(self, member_id: str) -> None:
        self.members.pop(member_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)

    def new_member_id(self, client_id: str) -> str:
        return f"{client_id}-{uuid.uuid4()}"

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols --------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, names: list[str]) -> bool:
        return not self.members or bool(set(names) & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes
        win (a tie: the protocol first voted for)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def init_next_generation(self) -> None:
        """A rebalance ends: the next generation, CompletingRebalance with a
        protocol, or Empty when nobody rejoined."""
        assert not self.not_yet_rejoined()
        self.generation_id += 1
        if self.members:
            self.protocol = self.select_protocol()
            self.transition_to(S.COMPLETING_REBALANCE)
        else:
            self.protocol = None
            self.transition_to(S.EMPTY)

    # -- what ListGroups and DescribeGroups show ---------------------------------------

    def summary(self) -> tuple[str, str, str, list[tuple[str, str, str, bytes, bytes]]]:
        """(state, protocol type, protocol, members (id, client id, client
        host, metadata, assignment)); metadata and assignment only when Stable."""
        stable = self.is_(S.STABLE)
        members = [(m.member_id, m.client_id, m.client_host,
                    m.metadata(self.protocol) if stable else b"",
                    m.assignment if stable else b"") for m in self.members.values()]
        return (self.state.value, self.protocol_type or "", self.protocol if stable else "",
                members)
