"""GroupMetadataManager: the offsets partitions this broker leads, the
groups they hold, and committed offsets and group memberships written to and
read back from the offsets topic (docs/design.md#groups).

A broker coordinates the groups of the offsets partitions it leads. When it
becomes a partition's leader it reads the partition's log from the start
and rebuilds each group's membership and committed offsets (until then its
groups answer COORDINATOR_LOAD_IN_PROGRESS); when it stops leading it drops
them (NOT_COORDINATOR). While it leads, nobody else writes the partition, so
its cache and its log agree: the cache changes only after an append of its own.

A commit, and a group's membership at the end of a rebalance, is an append
to the group's partition with acks=all: the answer waits for the high
watermark (the partition's hw_waiters, as an acks=all produce), and only
then is the cache updated. Append errors become the codes a Kafka 2.0
coordinator answers. A deposed leader that has not heard of its successor
yet cannot reach the high watermark, so it can neither acknowledge a commit
nor hand out an assignment.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Callable

from cluster.log.errors import OffsetOutOfRangeError
from cluster.protocol import errors as E
from cluster.protocol.control_records import ControlRecordError, read_marker
from cluster.protocol.records import batch_headers
from cluster.server.group_metadata import (GroupMetadata, GroupState, MemberMetadata,
                                           OffsetAndMetadata)
from cluster.server.offsets_topic import (GROUP_METADATA_TOPIC, GroupRecord, MemberRecord,
                                          OffsetKey, commit_batch, group_batch, partition_for,
                                          read_records)
from cluster.server.partition import Partition

log = logging.getLogger(__name__)

LOAD_CHUNK_BYTES = 1 << 20   # read per step of a load; the loop serves others in between

Offsets = dict[tuple[str, int], OffsetAndMetadata]
CommitCallback = Callable[[dict[tuple[str, int], int]], None]
StoreCallback = Callable[[int], None]

# Append error -> commit error, as Kafka 2.0's GroupMetadataManager maps them.
_COMMIT_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_FOR_PARTITION: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.INVALID_FETCH_SIZE: E.INVALID_COMMIT_OFFSET_SIZE,
}


# Append error -> SyncGroup error, as Kafka 2.0's storeGroup maps them: a
# membership that is not written is not handed out.
_STORE_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_FOR_PARTITION: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.REQUEST_TIMED_OUT: E.REBALANCE_IN_PROGRESS,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.INVALID_FETCH_SIZE: E.UNKNOWN_SERVER_ERROR,
}


def commit_error(append_error: int) -> int:
    """What a commit answers for its append's result (REQUEST_TIMED_OUT, the
    acks=all wait running out, stays: the commit may yet be durable)."""
    return _COMMIT_ERRORS.get(append_error, append_error)


def store_error(append_error: int) -> int:
    """What the members of a rebalance are told when the group's record
    could not be written (REBALANCE_IN_PROGRESS: join again)."""
    return _STORE_ERRORS.get(append_error, append_error)


def wall_ms() -> int:
    return int(time.time() * 1000)


class OffsetsLoad:
    """Committed offsets and group memberships rebuilt from an offsets
    partition's records, fed in log order: the last record of a key wins,
    a tombstone removes it."""

    def __init__(self, partition: int):
        self.partition = partition
        self.offsets: dict[str, Offsets] = {}
        self.memberships: dict[str, GroupRecord] = {}
        # Offsets committed in transactions not ended yet: producer id -> group -> offsets.
        self.pending: dict[int, dict[str, Offsets]] = {}
        self.bad_records = 0

    def apply(self, data: bytes) -> int | None:
        """Take whole batches as read from the log; the offset after the
        last, or None if `data` holds no whole batch."""
        headers = batch_headers(data)
        if not headers:
            return None
        for h in headers:
            batch = data[h.position:h.position + h.size]
            if h.is_control:
                self._end_transaction(h, batch)
                continue
            pending = self.pending.setdefault(h.producer_id, {}) if h.is_transactional else None
            for _offset, key, value in read_records(batch, self._bad):
                if isinstance(key, OffsetKey):
                    self._apply(self.offsets if pending is None else pending, key, value)
                elif value is None:
                    self.memberships.pop(key.group, None)
                else:
                    self.memberships[key.group] = value
        return headers[-1].next_offset

    @staticmethod
    def _apply(offsets: dict[str, Offsets], key: OffsetKey,
               value: OffsetAndMetadata | None) -> None:
        group = offsets.setdefault(key.group, {})
        if value is None:
            group.pop((key.topic, key.partition), None)
        else:
            group[(key.topic, key.partition)] = value

    def _end_transaction(self, h, batch) -> None:
        try:
            commit = read_marker(bytes(batch)).commit
        except ControlRecordError as e:
            self._bad(h.base_offset, e)
            commit = False
        for group, offsets in self.pending.pop(h.producer_id, {}).items():
            if commit:
                self.offsets.setdefault(group, {}).update(offsets)

    def _bad(self, offset: int, error: Exception) -> None:
        self.bad_records += 1
        log.warning("%s-%d: skipping record at offset %d: %s", GROUP_METADATA_TOPIC,
                    self.partition, offset, error)

    def groups(self) -> dict[str, Offsets]:
        """Committed offsets of each group that has any."""
        return {g: o for g, o in self.offsets.items() if o}

    def loaded(self) -> list[GroupMetadata]:
        """Each group with a membership or committed offsets, as its
        coordinator holds it: Stable with its members, or Empty."""
        offsets = self.groups()
        out = []
        for gid in sorted(set(self.memberships) | set(offsets)):
            record = self.memberships.get(gid)
            group = GroupMetadata(gid) if record is None else group_of(gid, record)
            group.offsets.update(offsets.get(gid, {}))
            out.append(group)
        # Transactions still open keep their offsets pending in their groups.
        by_id = {g.group_id: g for g in out}
        for pid, groups in self.pending.items():
            for gid, pending in groups.items():
                group = by_id.get(gid)
                if group is None:
                    group = by_id[gid] = GroupMetadata(gid)
                    out.append(group)
                group.pending_txn_offsets[pid] = dict(pending)
        return out


def group_of(group_id: str, record: GroupRecord) -> GroupMetadata:
    """The group a membership record describes (Kafka's loadGroup): Stable
    with its members, their subscriptions to the group's protocol and their
    assignments, or Empty."""
    group = GroupMetadata(group_id, GroupState.STABLE if record.members else GroupState.EMPTY)
    group.generation_id = record.generation
    group.protocol_type = record.protocol_type or None
    group.protocol = record.protocol
    for m in record.members:
        member = MemberMetadata(m.member_id, m.client_id, m.client_host,
                                m.rebalance_timeout_ms, m.session_timeout_ms,
                                record.protocol_type, [(record.protocol or "", m.subscription)])
        member.assignment = m.assignment
        group.members[m.member_id] = member
    group.leader_id = record.leader if record.leader in group.members else None
    return group


def record_of(group: GroupMetadata, assignments: dict[str, bytes], now_ms: int) -> GroupRecord:
    """The membership record of `group`'s current generation with `assignments`."""
    members = tuple(MemberRecord(m.member_id, m.client_id, m.client_host,
                                 m.rebalance_timeout_ms, m.session_timeout_ms,
                                 m.metadata(group.protocol) if group.protocol else b"",
                                 assignments.get(m.member_id, b""))
                    for m in group.members.values())
    return GroupRecord(group.protocol_type or "", group.generation_id, group.protocol,
                       group.leader_id if members else None, now_ms, members)


class _Ownership:
    """This broker leads one offsets partition: loading, then loaded."""

    def __init__(self) -> None:
        self.loaded = False
        self.task: asyncio.Task | None = None


class GroupMetadataManager:
    """Handed how to find the local replica of a partition (the replica
    manager's lookup), how many partitions the offsets topic has, and the
    settings of commits: min.insync.replicas, message.max.bytes,
    offsets.commit.timeout.ms, offset.metadata.max.bytes."""

    def __init__(self, partition_of: Callable[[tuple[str, int]], Partition | None],
                 partition_count: Callable[[], int], min_isr: int, max_message_bytes: int,
                 commit_timeout_ms: int, max_metadata_bytes: int,
                 clock: Callable[[], int] = wall_ms):
        self.partition_of = partition_of
        self.partition_count = partition_count
        self.min_isr = min_isr
        self.max_message_bytes = max_message_bytes
        self.commit_timeout_ms = commit_timeout_ms
        self.max_metadata_bytes = max_metadata_bytes
        self.clock = clock
        self.groups: dict[str, GroupMetadata] = {}
        self._owned: dict[int, _Ownership] = {}
        self._tasks: set[asyncio.Task] = set()

    # -- which groups are here ------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count())

    def status(self, group_id: str) -> int:
        """E.NONE if this broker coordinates the group now."""
        owned = self._owned.get(self.partition_for(group_id))
        if owned is None:
            return E.NOT_COORDINATOR
        return E.NONE if owned.loaded else E.COORDINATOR_LOAD_IN_PROGRESS

    def is_loading(self) -> bool:
        return any(not o.loaded for o in self._owned.values())

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """The cached group of that id, or `group` now cached."""
        return self.groups.setdefault(group.group_id, group)

    # -- leadership of offsets partitions ----------------------------------------------------

    def load_partition(self, partition: int, p: Partition,
                       on_loaded: Callable[[GroupMetadata], None] = lambda g: None) -> None:
        """This broker leads `partition` now: load it, unless it already
        leads it (a new leader epoch without a change of leader), and hand
        each group loaded to `on_loaded`."""
        if partition in self._owned:
            return
        owned = self._owned[partition] = _Ownership()
        owned.task = self._spawn(self._load(partition, p, owned, on_loaded))

    def unload_partition(self, partition: int) -> list[GroupMetadata]:
        """This broker no longer leads `partition`: forget it and its
        groups. Returns the groups dropped (still to be told)."""
        owned = self._owned.pop(partition, None)
        if owned is None:
            return []
        if owned.task is not None:
            owned.task.cancel()
        dropped = [g for gid, g in self.groups.items() if self.partition_for(gid) == partition]
        for g in dropped:
            del self.groups[g.group_id]
        log.info("%s-%d: no longer the coordinator of its %d groups", GROUP_METADATA_TOPIC,
                 partition, len(dropped))
        return dropped

    async def _load(self, partition: int, p: Partition, owned: _Ownership,
                    on_loaded: Callable[[GroupMetadata], None]) -> None:
        started = time.monotonic()
        load = OffsetsLoad(partition)
        offset = p.log.log_start_offset
        while offset < p.leo:
            try:
                data = p.log.read(offset, LOAD_CHUNK_BYTES)
            except OffsetOutOfRangeError:   # retention moved the start meanwhile
                offset = p.log.log_start_offset
                continue
            nxt = load.apply(data)
            if nxt is None:
                break
            offset = nxt
            await asyncio.sleep(0)
        if self._owned.get(partition) is not owned:
            return
        groups = load.loaded()
        for group in groups:
            self.groups[group.group_id] = group
        owned.loaded = True
        log.info("%s-%d: loaded %d groups (%d with members) up to offset %d in %.0f ms",
                 GROUP_METADATA_TOPIC, partition, len(groups),
                 sum(1 for g in groups if g.members), offset,
                 (time.monotonic() - started) * 1000)
        for group in groups:
            on_loaded(group)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- committed offsets ------------------------------------------------------------------

    def get_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                    ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """The committed offsets of `partitions` (None where there is none),
        or all of the group's when `partitions` is None."""
        group = self.groups.get(group_id)
        known = {} if group is None or group.is_(GroupState.DEAD) else group.offsets
        if partitions is None:
            return dict(known)
        return {tp: known.get(tp) for tp in partitions}

    def _stamped(self, offsets: Offsets) -> tuple[dict, Offsets, int]:
        """(OFFSET_METADATA_TOO_LARGE per refused partition, the others stamped
        with this broker's clock, as Kafka does, and that time)."""
        results = {tp: E.OFFSET_METADATA_TOO_LARGE for tp, om in offsets.items()
                   if len(om.metadata) > self.max_metadata_bytes}
        now = self.clock()
        valid = {tp: dataclasses.replace(om, commit_timestamp=now)
                 for tp, om in offsets.items() if tp not in results}
        return results, valid, now

    def store_offsets(self, group: GroupMetadata, offsets: Offsets,
                      callback: CommitCallback) -> None:
        """Append the commit (stamped with this broker's clock, as Kafka
        does) to the group's partition, wait for the HW, then update the
        cache and call back with an error per partition."""
        results, valid, now = self._stamped(offsets)
        if not valid:
            callback(results)
            return

        def done(append_error: int) -> None:
            err = commit_error(append_error)
            if err == E.NONE and not group.is_(GroupState.DEAD):
                group.offsets.update(valid)
            elif err != E.NONE:
                log.info("commit of group %s failed: %s", group.group_id, E.name(err))
            callback({**results, **{tp: err for tp in valid}})

        self._append(group.group_id, commit_batch(group.group_id, valid, now), done)

    def store_txn_offsets(self, group: GroupMetadata, producer_id: int, producer_epoch: int,
                          offsets: Offsets, callback: CommitCallback) -> None:
        """TxnOffsetCommit: the offsets appended as a transactional batch of
        the producer; once the HW passed it they wait in the group for the
        transaction's marker (complete_txn)."""
        results, valid, now = self._stamped(offsets)
        if not valid:
            callback(results)
            return

        def done(append_error: int) -> None:
            err = commit_error(append_error)
            if err == E.NONE:
                group.pending_txn_offsets.setdefault(producer_id, {}).update(valid)
            callback({**results, **{tp: err for tp in valid}})

        data = commit_batch(group.group_id, valid, now, (producer_id, producer_epoch))
        p = self.partition_of((GROUP_METADATA_TOPIC, self.partition_for(group.group_id)))
        if p is None or not p.is_leader:
            done(E.NOT_LEADER_FOR_PARTITION)
            return
        err, required = p.append_txn_offsets(data, self.min_isr)
        self._when_durable(p, err, required, done)

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """The transaction's marker is written to offsets partition
        `partition`: its offsets there become the groups' (commit) or are
        dropped (abort)."""
        for gid, group in self.groups.items():
            if producer_id in group.pending_txn_offsets and self.partition_for(gid) == partition:
                group.complete_txn_offsets(producer_id, commit)

    def store_group(self, group: GroupMetadata, assignments: dict[str, bytes],
                    callback: StoreCallback) -> None:
        """Append the group's membership at its current generation with
        `assignments` (Kafka's storeGroup), wait for the HW, and call back
        with the error its members are to be told (NONE: written)."""
        now = self.clock()

        def done(append_error: int) -> None:
            err = store_error(append_error)
            if err != E.NONE:
                log.info("group %s: generation %d not written: %s", group.group_id,
                         group.generation_id, E.name(err))
            callback(err)

        self._append(group.group_id,
                     group_batch(group.group_id, record_of(group, assignments, now), now), done)

    def _append(self, group_id: str, data: bytes, done: Callable[[int], None]) -> None:
        """Append `data` to the group's partition as an acks=all write and
        call `done` with the append's error once the HW passed it (or the
        wait ran out: REQUEST_TIMED_OUT)."""
        p = self.partition_of((GROUP_METADATA_TOPIC, self.partition_for(group_id)))
        if p is None or not p.is_leader:
            done(E.NOT_LEADER_FOR_PARTITION)
            return
        err, _, required = p.append_as_leader(data, batch_headers(data), -1, self.min_isr,
                                              self.max_message_bytes)
        self._when_durable(p, err, required, done)

    def _when_durable(self, p: Partition, err: int, required: int,
                      done: Callable[[int], None]) -> None:
        """Call `done` with an append's error once the HW passed it."""
        if err == E.NONE and p.hw < required:
            # Parked now, not in the task: a leadership change before the
            # task runs must still fail it.
            fut = p.hw_waiters.add(required)
            self._spawn(self._await_hw(fut, done))
            return
        done(err if err != E.NONE else p.ack_result())

    async def _await_hw(self, fut: asyncio.Future, done: Callable[[int], None]) -> None:
        try:
            err = await asyncio.wait_for(fut, self.commit_timeout_ms / 1000)
        except asyncio.TimeoutError:
            err = E.REQUEST_TIMED_OUT
        done(err)
