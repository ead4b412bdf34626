"""GroupCoordinator: consumer-group membership and offset commits, as
Kafka's GroupCoordinator (docs/design.md#groups).

Members join a group (JoinGroup), the coordinator waits for every known
member to join again (a rebalance: PreparingRebalance), starts the next
generation, picks the protocol they all support and hands the leader every
member's metadata (CompletingRebalance); the leader's SyncGroup brings the
assignment, which every member gets in its own SyncGroup (Stable). A member
that misses its heartbeats for a session timeout, leaves, or joins with new
metadata starts another rebalance; members that do not rejoin within the
rebalance timeout are dropped. Heartbeats answer REBALANCE_IN_PROGRESS
while one is on, which is how members learn they must join again.

Requests that wait (JoinGroup until the rebalance completes, SyncGroup until
the leader's assignment, OffsetCommit until its record is replicated) take a
callback; the API layer turns it into the awaitable KafkaApis returns.
Timers (session timeouts, rebalance timeouts, the initial rebalance delay)
come from a Scheduler, so the state machine runs on a fake clock in tests.
Everything runs on the broker's event loop.

A rebalance's outcome is written to the offsets topic before anyone learns
it: the leader's assignment is handed out only once the group's record
(members, generation, assignments) is replicated, and an Empty generation
is written too. A new coordinator loads members and offsets alike, so the
members go on with it in their generation (docs/design.md#groups).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from cluster.protocol import errors as E
from cluster.server.group_metadata import (GroupMetadata, GroupState, JoinCallback,
                                           JoinResult, MemberMetadata, OffsetAndMetadata,
                                           SyncCallback)
from cluster.server.group_metadata_manager import CommitCallback, GroupMetadataManager
from cluster.server.offsets_topic import GROUP_METADATA_TOPIC
from cluster.server.partition import Partition

log = logging.getLogger(__name__)

S = GroupState
NO_GENERATION = -1
UNKNOWN_MEMBER = ""


class Timer(Protocol):
    def cancel(self) -> Any: ...


class Scheduler(Protocol):
    """A clock in milliseconds and one-shot timers on it."""

    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> Timer: ...


class LoopScheduler:
    """The event loop's timers on the monotonic clock."""

    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0, delay_ms) / 1000, fn)


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 300000
    initial_rebalance_delay_ms: int = 3000

    @classmethod
    def from_broker_config(cls, cfg: Any) -> "GroupConfig":
        return cls(cfg["group.min.session.timeout.ms"], cfg["group.max.session.timeout.ms"],
                   cfg["group.initial.rebalance.delay.ms"])


def join_error(member_id: str, error: int) -> JoinResult:
    return (error, NO_GENERATION, "", "", member_id, [])


class GroupCoordinator:
    def __init__(self, manager: GroupMetadataManager, config: GroupConfig,
                 scheduler: Scheduler | None = None):
        self.manager = manager
        self.config = config
        self.scheduler = scheduler or LoopScheduler()

    def _validate(self, group_id: str | None, allow_empty: bool = False) -> int:
        """Kafka's validateGroupStatus: a usable group id, and this broker
        coordinating the group's partition, loaded."""
        if group_id is None or (group_id == "" and not allow_empty):
            return E.INVALID_GROUP_ID
        return self.manager.status(group_id)

    # -- leadership of offsets partitions (the replica manager's listener) ---------------------

    def on_leadership_change(self, p: Partition, is_leader: bool) -> None:
        if p.topic != GROUP_METADATA_TOPIC:
            return
        if is_leader:
            self.manager.load_partition(p.partition, p, self._on_group_loaded)
        else:
            for group in self.manager.unload_partition(p.partition):
                self._on_group_unloaded(group)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        """A loaded member's session starts now (Kafka's onGroupLoaded)."""
        for m in group.members.values():
            self._heartbeat_done(group, m)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        """The group moved away: whoever waits is told NOT_COORDINATOR and
        finds the new coordinator."""
        previous = group.state
        group.transition_to(S.DEAD)
        self._cancel(group)
        for m in group.members.values():
            self._cancel_heartbeat(m)
            if previous is S.PREPARING_REBALANCE and m.awaiting_join is not None:
                m.awaiting_join, cb = None, m.awaiting_join
                cb(join_error(m.member_id, E.NOT_COORDINATOR))
            if m.awaiting_sync is not None:
                m.awaiting_sync, cb = None, m.awaiting_sync
                cb(E.NOT_COORDINATOR, b"")

    # -- JoinGroup --------------------------------------------------------------------------

    def handle_join_group(self, group_id: str, member_id: str, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]], callback: JoinCallback) -> None:
        err = self._validate(group_id)
        if err != E.NONE:
            return callback(join_error(member_id, err))
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return callback(join_error(member_id, E.INVALID_SESSION_TIMEOUT))
        group = self.manager.get_group(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER:
                return callback(join_error(member_id, E.UNKNOWN_MEMBER_ID))
            group = self.manager.add_group(GroupMetadata(group_id))
        self._do_join(group, member_id, client_id, client_host, rebalance_timeout_ms,
                      session_timeout_ms, protocol_type, protocols, callback)

    def _do_join(self, group: GroupMetadata, member_id: str, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]], callback: JoinCallback) -> None:
        names = [name for name, _ in protocols]
        if not group.is_(S.EMPTY) and (group.protocol_type != protocol_type
                                       or not group.supports_protocols(names)):
            return callback(join_error(member_id, E.INCONSISTENT_GROUP_PROTOCOL))
        if group.is_(S.EMPTY) and (not protocols or not protocol_type):
            return callback(join_error(member_id, E.INCONSISTENT_GROUP_PROTOCOL))
        if member_id != UNKNOWN_MEMBER and not group.has(member_id):
            return callback(join_error(member_id, E.UNKNOWN_MEMBER_ID))
        if group.is_(S.DEAD):
            return callback(join_error(member_id, E.UNKNOWN_MEMBER_ID))
        if member_id == UNKNOWN_MEMBER:
            self._add_member_and_rebalance(group, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols,
                                           callback)
        else:
            member = group.get(member_id)
            if group.is_(S.PREPARING_REBALANCE):
                self._update_member_and_rebalance(group, member, protocols, callback)
            elif group.is_(S.COMPLETING_REBALANCE):
                if member.matches(protocols):
                    # It missed the answer to its join: this generation again.
                    callback(self._join_result(group, member))
                else:
                    self._update_member_and_rebalance(group, member, protocols, callback)
            elif group.is_leader(member_id) or not member.matches(protocols):
                # Stable: a leader's join or new metadata forces a rebalance.
                self._update_member_and_rebalance(group, member, protocols, callback)
            else:
                callback((E.NONE, group.generation_id, group.protocol or "",
                          group.leader_id or "", member_id, []))
        if group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members = ([(m.member_id, m.metadata(group.protocol)) for m in group.members.values()]
                   if group.is_leader(member.member_id) else [])
        return (E.NONE, group.generation_id, group.protocol or "", group.leader_id or "",
                member.member_id, members)

    def _add_member_and_rebalance(self, group: GroupMetadata, client_id: str, client_host: str,
                                  rebalance_timeout_ms: int, session_timeout_ms: int,
                                  protocol_type: str, protocols: list[tuple[str, bytes]],
                                  callback: JoinCallback) -> None:
        member = MemberMetadata(group.new_member_id(client_id), client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                protocols)
        member.awaiting_join = callback
        if group.is_(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True   # the initial delay may wait a little more
        group.add(member)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]],
                                     callback: JoinCallback) -> None:
        member.protocols = list(protocols)
        if member.awaiting_join is not None:
            # A second JoinGroup while the first waits: the first is answered
            # now, or its connection would wait behind it for good.
            member.awaiting_join(join_error(member.member_id, E.REBALANCE_IN_PROGRESS))
        member.awaiting_join = callback
        self._maybe_prepare_rebalance(group)

    # -- rebalances -------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        initial = group.is_(S.EMPTY)
        group.transition_to(S.PREPARING_REBALANCE)
        self._cancel(group)
        if initial:
            # An empty group waits group.initial.rebalance.delay.ms for more
            # members, again while members keep coming, within the rebalance
            # timeout: one rebalance for a group starting together.
            delay = self.config.initial_rebalance_delay_ms
            self._initial_delayed_join(group, delay,
                                       max(group.rebalance_timeout_ms() - delay, 0))
        else:
            group.join_timer = self.scheduler.call_later(
                group.rebalance_timeout_ms(), lambda: self._complete_join(group))
        log.info("group %s: preparing to rebalance (generation %d)", group.group_id,
                 group.generation_id)

    def _initial_delayed_join(self, group: GroupMetadata, delay_ms: int, remaining_ms: int) -> None:
        def expired() -> None:
            group.join_timer = None
            if group.new_member_added and remaining_ms != 0:
                group.new_member_added = False
                d = min(self.config.initial_rebalance_delay_ms, remaining_ms)
                self._initial_delayed_join(group, d, max(remaining_ms - d, 0))
            else:
                self._complete_join(group)
        group.join_timer = self.scheduler.call_later(delay_ms, expired)
        group.initial_delay = True

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """Complete the rebalance once every member has joined again (not
        during the initial delay, which always runs out)."""
        if group.join_timer is not None and not group.initial_delay \
                and not group.not_yet_rejoined():
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        self._cancel(group)
        if not group.is_(S.PREPARING_REBALANCE):
            return
        for m in group.not_yet_rejoined():
            log.info("group %s: member %s did not join again in time: removed", group.group_id,
                     m.member_id)
            self._cancel_heartbeat(m)
            group.remove(m.member_id)
        group.init_next_generation()
        if group.is_(S.EMPTY):
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            # Written so that a later coordinator does not bring the members
            # back; if it fails they come back and their sessions run out.
            self.manager.store_group(group, {}, lambda err: None)
            return
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation_id, len(group.members), group.protocol,
                 group.leader_id)
        for m in list(group.members.values()):
            cb, m.awaiting_join = m.awaiting_join, None
            cb(self._join_result(group, m))
            self._heartbeat_done(group, m)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        for m in group.members.values():
            if m.awaiting_sync is not None:
                cb, m.awaiting_sync = m.awaiting_sync, None
                cb(error, m.assignment)
                self._heartbeat_done(group, m)

    # -- SyncGroup --------------------------------------------------------------------------

    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                          assignments: dict[str, bytes], callback: SyncCallback) -> None:
        err = self._validate(group_id)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance in progress is lost with the old coordinator:
            # start over at JoinGroup (older clients do not expect the load error).
            return callback(E.REBALANCE_IN_PROGRESS, b"")
        if err != E.NONE:
            return callback(err, b"")
        group = self.manager.get_group(group_id)
        if group is None or not group.has(member_id):
            return callback(E.UNKNOWN_MEMBER_ID, b"")
        if generation_id != group.generation_id:
            return callback(E.ILLEGAL_GENERATION, b"")
        if group.state in (S.EMPTY, S.DEAD):
            return callback(E.UNKNOWN_MEMBER_ID, b"")
        if group.is_(S.PREPARING_REBALANCE):
            return callback(E.REBALANCE_IN_PROGRESS, b"")
        member = group.get(member_id)
        if group.is_(S.STABLE):
            callback(E.NONE, member.assignment)
            self._heartbeat_done(group, member)
            return
        member.awaiting_sync = callback   # CompletingRebalance
        if group.is_leader(member_id):
            self._store_assignment(group, assignments)

    def _store_assignment(self, group: GroupMetadata, assignments: dict[str, bytes]) -> None:
        """Write the generation with the leader's assignment, then hand it
        out (Kafka's doSyncGroup): a coordinator that cannot replicate it,
        such as a deposed one, tells the members to join again instead."""
        generation = group.generation_id

        def stored(err: int) -> None:
            if not group.is_(S.COMPLETING_REBALANCE) or group.generation_id != generation:
                return   # the group moved on (or away) meanwhile
            if err != E.NONE:
                self._reset_and_propagate_assignment_error(group, err)
                self._maybe_prepare_rebalance(group)
                return
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self._propagate_assignment(group, E.NONE)
            group.transition_to(S.STABLE)

        self.manager.store_group(group, assignments, stored)

    # -- Heartbeat, LeaveGroup, session timeouts ----------------------------------------------

    def handle_heartbeat(self, group_id: str, member_id: str, generation_id: int) -> int:
        err = self._validate(group_id)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            return E.NONE   # Kafka answers blindly while loading
        if err != E.NONE:
            return err
        group = self.manager.get_group(group_id)
        if group is None or group.state in (S.EMPTY, S.DEAD) or not group.has(member_id):
            return E.UNKNOWN_MEMBER_ID
        if group.is_(S.COMPLETING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._heartbeat_done(group, group.get(member_id))
        return E.REBALANCE_IN_PROGRESS if group.is_(S.PREPARING_REBALANCE) else E.NONE

    def handle_leave_group(self, group_id: str, member_id: str) -> int:
        err = self._validate(group_id)
        if err != E.NONE:
            return err
        group = self.manager.get_group(group_id)
        if group is None or group.is_(S.DEAD) or not group.has(member_id):
            return E.UNKNOWN_MEMBER_ID
        member = group.get(member_id)
        member.is_leaving = True
        self._cancel_heartbeat(member)
        log.info("group %s: member %s leaves", group_id, member_id)
        self._on_member_failure(group, member)
        # A join or sync it still waits on (sent on another connection) is over.
        if member.awaiting_join is not None:
            member.awaiting_join, cb = None, member.awaiting_join
            cb(join_error(member_id, E.UNKNOWN_MEMBER_ID))
        if member.awaiting_sync is not None:
            member.awaiting_sync, cb = None, member.awaiting_sync
            cb(E.UNKNOWN_MEMBER_ID, b"")
        return E.NONE

    def _heartbeat_done(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """The member is alive now: its session timer starts again."""
        member.latest_heartbeat_ms = now = self.scheduler.now_ms()
        self._cancel_heartbeat(member)
        deadline = now + member.session_timeout_ms
        member.heartbeat_timer = self.scheduler.call_later(
            member.session_timeout_ms, lambda: self._heartbeat_expired(group, member, deadline))

    def _heartbeat_expired(self, group: GroupMetadata, member: MemberMetadata,
                           deadline: int) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member or member.is_leaving:
            return
        # A member waiting for its join or sync answer is alive; its timer
        # starts again when it is answered.
        if (member.awaiting_join is not None or member.awaiting_sync is not None
                or member.latest_heartbeat_ms + member.session_timeout_ms > deadline):
            return
        log.info("group %s: member %s missed its heartbeats for %d ms: removed",
                 group.group_id, member.member_id, member.session_timeout_ms)
        self._on_member_failure(group, member)

    def _on_member_failure(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- offsets ----------------------------------------------------------------------------

    def handle_commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                              offsets: dict[tuple[str, int], OffsetAndMetadata],
                              callback: CommitCallback) -> None:
        def all_(error: int) -> None:
            callback({tp: error for tp in offsets})
        err = self._validate(group_id, allow_empty=True)
        if err != E.NONE:
            return all_(err)
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                # A generation of a group never written to this partition:
                # the member must join again.
                return all_(E.ILLEGAL_GENERATION)
            group = self.manager.add_group(GroupMetadata(group_id))
        if group.is_(S.DEAD):
            return all_(E.UNKNOWN_MEMBER_ID)
        if generation_id < 0 and group.is_(S.EMPTY):
            # Kafka as offset storage only, no group management.
            return self.manager.store_offsets(group, offsets, callback)
        if group.is_(S.COMPLETING_REBALANCE):
            return all_(E.REBALANCE_IN_PROGRESS)
        if not group.has(member_id):
            return all_(E.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return all_(E.ILLEGAL_GENERATION)
        self._heartbeat_done(group, group.get(member_id))
        self.manager.store_offsets(group, offsets, callback)

    def handle_txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                  offsets: dict[tuple[str, int], OffsetAndMetadata],
                                  callback: CommitCallback) -> None:
        """TxnOffsetCommit (Kafka 2.0's): no member or generation to check;
        the offsets wait for the transaction's end (docs/design.md#transactions)."""
        err = self._validate(group_id, allow_empty=True)
        if err == E.NONE:
            group = self.manager.get_group(group_id) or self.manager.add_group(
                GroupMetadata(group_id))
            if not group.is_(S.DEAD):
                return self.manager.store_txn_offsets(group, producer_id, producer_epoch,
                                                      offsets, callback)
            err = E.UNKNOWN_MEMBER_ID
        callback({tp: err for tp in offsets})

    def on_txn_marker(self, tp: tuple[str, int], producer_id: int, commit: bool) -> None:
        """A transaction's marker is durable on `tp`: on an offsets
        partition, the transaction's offsets there become committed or go."""
        if tp[0] == GROUP_METADATA_TOPIC:
            self.manager.complete_txn(tp[1], producer_id, commit)

    def handle_fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                             ) -> tuple[int, dict[tuple[str, int], OffsetAndMetadata | None]]:
        """Offsets whatever the group's state: it may use Kafka for
        offsets only, without group management."""
        err = self._validate(group_id, allow_empty=True)
        if err != E.NONE:
            return err, {}
        return E.NONE, self.manager.get_offsets(group_id, partitions)

    # -- ListGroups, DescribeGroups ------------------------------------------------------------

    def handle_list_groups(self) -> tuple[int, list[tuple[str, str]]]:
        err = E.COORDINATOR_LOAD_IN_PROGRESS if self.manager.is_loading() else E.NONE
        return err, [(g.group_id, g.protocol_type or "")
                     for g in self.manager.groups.values() if not g.is_(S.DEAD)]

    def handle_describe_group(self, group_id: str) -> tuple[int, tuple]:
        """(error, (state, protocol type, protocol, members)); an unknown
        group is Dead, as Kafka describes it."""
        err = self._validate(group_id, allow_empty=True)
        if err != E.NONE:
            return err, ("", "", "", [])
        group = self.manager.get_group(group_id)
        if group is None:
            return E.NONE, (S.DEAD.value, "", "", [])
        return E.NONE, group.summary()

    # -- timers -----------------------------------------------------------------------------

    @staticmethod
    def _cancel(group: GroupMetadata) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay = False

    @staticmethod
    def _cancel_heartbeat(member: MemberMetadata) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
