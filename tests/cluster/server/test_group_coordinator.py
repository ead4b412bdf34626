"""Consumer groups without processes (docs/design.md#groups): which offsets
partition holds a group (Java's String.hashCode), the offsets topic's key
and value records, rebuilding committed offsets from a log, the commit path
with its error mapping, and the membership state machine of
GroupCoordinator on a fake clock. Real brokers and clients:
test_groups_e2e.py."""
from __future__ import annotations

import asyncio
import heapq
import itertools
import struct

import pytest

from cluster.config import BrokerConfig
from cluster.log import Log, LogConfig
from cluster.protocol import errors as E
from cluster.server.group_coordinator import GroupConfig, GroupCoordinator
from cluster.server.group_metadata import (GroupMetadata, GroupState, IllegalStateTransition,
                                           MemberMetadata, OffsetAndMetadata)
from cluster.server.group_metadata_manager import (GroupMetadataManager, OffsetsLoad,
                                                   commit_error, store_error)
from cluster.server.offsets_topic import (GROUP_METADATA_TOPIC, GroupMetadataKey, GroupRecord,
                                          MemberRecord, OffsetKey, RecordFormatError,
                                          commit_batch, decode_group_value, decode_key,
                                          decode_offset_value, encode_group_key,
                                          encode_group_value, encode_offset_key,
                                          encode_offset_value, group_batch, java_string_hash,
                                          partition_for, read_records)
from cluster.server.partition import Partition

S = GroupState
SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000
RANGE = [("range", b"r-meta")]


# -- which partition holds a group ----------------------------------------------------------------

def test_java_string_hash():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    # Overflows to Integer.MIN_VALUE, whose Utils.abs is 0.
    assert java_string_hash("polygenelubricants") == -2**31
    # Outside the BMP: two UTF-16 code units (a surrogate pair).
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_partition_for_is_kafkas_abs_hash_modulo():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 10) == 0
    assert java_string_hash("my-group") == -1906497762   # as Java computes it
    assert partition_for("my-group", 10) == 1906497762 % 10


# -- records of the offsets topic ---------------------------------------------------------------

def test_offset_key_and_value_round_trip_in_kafkas_v1_layout():
    key = encode_offset_key("g", "t", 3)
    assert key == struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + \
        struct.pack(">i", 3)
    assert decode_key(key) == OffsetKey("g", "t", 3)
    om = OffsetAndMetadata(42, "meta", 1_700_000_000_000, -1)
    value = encode_offset_value(om)
    assert value[:2] == struct.pack(">h", 1) and len(value) == 2 + 8 + 2 + 4 + 8 + 8
    assert decode_offset_value(value) == om


def test_values_of_other_kafka_versions_are_read():
    v0 = struct.pack(">hq", 0, 7) + struct.pack(">h", 1) + b"m" + struct.pack(">q", 99)
    assert decode_offset_value(v0) == OffsetAndMetadata(7, "m", 99, -1)
    v3 = struct.pack(">hqi", 3, 8, 5) + struct.pack(">h", 0) + struct.pack(">q", 100)
    assert decode_offset_value(v3) == OffsetAndMetadata(8, "", 100, -1)
    group_key = struct.pack(">hh", 2, 1) + b"g"
    assert decode_key(group_key) == GroupMetadataKey("g")
    for bad in (b"", struct.pack(">h", 9), struct.pack(">hh", 1, 50) + b"short"):
        with pytest.raises(RecordFormatError):
            decode_key(bad)
    with pytest.raises(RecordFormatError):
        decode_offset_value(struct.pack(">hq", 1, 7))


def _batch(records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i, (k, v) in enumerate(records):
        b.append(i, timestamp=1, key=k, value=v, headers=[])
    return bytes(b.build())


def _log(tmp_path, name: str = "offsets") -> Log:
    return Log(tmp_path / name, LogConfig.from_broker_config(BrokerConfig.from_dict({})))


def test_offsets_are_rebuilt_from_the_log_last_record_wins_tombstones_remove(tmp_path):
    lg = _log(tmp_path)
    om = OffsetAndMetadata
    lg.append_as_leader(commit_batch("g1", {("t", 0): om(5, "", 10), ("t", 1): om(7, "x", 10)},
                                     10), 0)
    lg.append_as_leader(commit_batch("g2", {("t", 0): om(1, "", 11)}, 11), 0)
    lg.append_as_leader(_batch([
        (encode_offset_key("g1", "t", 0), encode_offset_value(om(6, "", 12))),
        (struct.pack(">hh", 2, 2) + b"g1", b"not a group metadata value"),   # skipped
        (b"\x00\x09garbage", b"?"),                       # unknown key version: skipped
        (encode_offset_key("g2", "t", 0), None),          # tombstone
    ]), 0)
    lg.append_as_leader(commit_batch("g1", {("u", 0): om(3, "", 13)}, 13), 0)
    load = OffsetsLoad(0)
    offset = 0
    while offset < lg.log_end_offset:
        offset = load.apply(lg.read(offset, 100))   # small reads: one batch at a time
    assert load.groups() == {"g1": {("t", 0): om(6, "", 12), ("t", 1): om(7, "x", 10),
                                    ("u", 0): om(3, "", 13)}}
    assert load.bad_records == 2
    assert load.apply(b"") is None


def test_read_records_reports_a_bad_record_and_goes_on():
    bad = []
    data = _batch([(None, b"v"), (encode_offset_key("g", "t", 0),
                                  encode_offset_value(OffsetAndMetadata(1)))])
    got = list(read_records(data, lambda off, e: bad.append(off)))
    assert [(off, key) for off, key, _ in got] == [(1, OffsetKey("g", "t", 0))]
    assert bad == [0]


MEMBERS = (MemberRecord("m1", "c1", "/h1", 30000, 10000, b"sub-1", b"asg-1"),
           MemberRecord("m2", "c2", "/h2", 30000, 10000, b"sub-2", b""))


def test_group_record_round_trips_in_kafkas_v2_layout_and_older_versions_read():
    rec = GroupRecord("consumer", 7, "range", "m1", 1234, MEMBERS)
    data = encode_group_value(rec)
    assert data[:2] == struct.pack(">h", 2) and decode_group_value(data) == rec
    assert decode_key(encode_group_key("g")) == GroupMetadataKey("g")
    empty = GroupRecord("consumer", 8, None, None, 1, ())
    assert decode_group_value(encode_group_value(empty)) == empty

    def s(x):
        return struct.pack(">h", len(x)) + x

    def b(x):
        return struct.pack(">i", len(x)) + x
    head = s(b"consumer") + struct.pack(">i", 3) + s(b"range") + s(b"m")
    v0 = (struct.pack(">h", 0) + head + struct.pack(">i", 1) + s(b"m") + s(b"c") + s(b"/h")
          + struct.pack(">i", 6000) + b(b"S") + b(b"A"))
    v3 = (struct.pack(">h", 3) + head + struct.pack(">q", 5) + struct.pack(">i", 1) + s(b"m")
          + struct.pack(">h", -1) + s(b"c") + s(b"/h") + struct.pack(">ii", 9000, 6000)
          + b(b"S") + b(b"A"))
    assert decode_group_value(v0) == GroupRecord(
        "consumer", 3, "range", "m", -1, (MemberRecord("m", "c", "/h", 6000, 6000, b"S", b"A"),))
    assert decode_group_value(v3) == GroupRecord(
        "consumer", 3, "range", "m", 5, (MemberRecord("m", "c", "/h", 9000, 6000, b"S", b"A"),))
    for bad in (struct.pack(">h", 4) + head, v0[:-3]):
        with pytest.raises(RecordFormatError):
            decode_group_value(bad)


def test_memberships_are_rebuilt_from_the_log_last_record_wins_tombstones_remove(tmp_path):
    lg = _log(tmp_path)
    lg.append_as_leader(group_batch("g1", GroupRecord("consumer", 1, "range", "m1", 1,
                                                      MEMBERS[:1]), 1), 0)
    lg.append_as_leader(group_batch("g2", GroupRecord("consumer", 4, "range", "m2", 2,
                                                      MEMBERS[1:]), 2), 0)
    lg.append_as_leader(commit_batch("g1", {("t", 0): OffsetAndMetadata(5, "", 3)}, 3), 0)
    lg.append_as_leader(group_batch("g1", GroupRecord("consumer", 2, "range", "m2", 4,
                                                      MEMBERS), 4), 0)
    lg.append_as_leader(_batch([(encode_group_key("g2"), None)]), 0)
    lg.append_as_leader(group_batch("g3", GroupRecord("consumer", 6, None, None, 5, ()), 5), 0)
    load = OffsetsLoad(0)
    offset = 0
    while offset < lg.log_end_offset:
        offset = load.apply(lg.read(offset, 1 << 20))
    groups = {g.group_id: g for g in load.loaded()}
    assert sorted(groups) == ["g1", "g3"]
    g1 = groups["g1"]
    assert (g1.state, g1.generation_id, g1.protocol, g1.leader_id) == (S.STABLE, 2, "range", "m2")
    assert list(g1.members) == ["m1", "m2"]
    assert g1.get("m1").assignment == b"asg-1" and g1.get("m2").metadata("range") == b"sub-2"
    assert g1.offsets == {("t", 0): OffsetAndMetadata(5, "", 3)}
    assert (groups["g3"].state, groups["g3"].generation_id) == (S.EMPTY, 6)


# -- the commit path ------------------------------------------------------------------------------

def test_append_errors_become_kafka_2_0_commit_errors():
    assert commit_error(E.NONE) == E.NONE
    assert commit_error(E.NOT_LEADER_FOR_PARTITION) == E.NOT_COORDINATOR
    assert commit_error(E.KAFKA_STORAGE_ERROR) == E.NOT_COORDINATOR
    assert commit_error(E.NOT_ENOUGH_REPLICAS) == E.COORDINATOR_NOT_AVAILABLE
    assert commit_error(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND) == E.COORDINATOR_NOT_AVAILABLE
    assert commit_error(E.UNKNOWN_TOPIC_OR_PARTITION) == E.COORDINATOR_NOT_AVAILABLE
    assert commit_error(E.MESSAGE_TOO_LARGE) == E.INVALID_COMMIT_OFFSET_SIZE
    assert commit_error(E.REQUEST_TIMED_OUT) == E.REQUEST_TIMED_OUT
    # A membership not written in time is not handed out: join again.
    assert store_error(E.REQUEST_TIMED_OUT) == E.REBALANCE_IN_PROGRESS
    assert store_error(E.NOT_LEADER_FOR_PARTITION) == E.NOT_COORDINATOR
    assert store_error(E.NOT_ENOUGH_REPLICAS) == E.COORDINATOR_NOT_AVAILABLE
    assert store_error(E.MESSAGE_TOO_LARGE) == E.UNKNOWN_SERVER_ERROR


class FakeClock:
    """The Scheduler of the coordinator, advanced by hand."""

    class Timer:
        def __init__(self, fn):
            self.fn, self.cancelled = fn, False

        def cancel(self):
            self.cancelled = True

    def __init__(self):
        self.now = 0
        self._heap: list = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def call_later(self, delay_ms, fn):
        t = self.Timer(fn)
        heapq.heappush(self._heap, (self.now + max(0, delay_ms), next(self._seq), t))
        return t

    def advance(self, ms: int) -> None:
        end = self.now + ms
        while self._heap and self._heap[0][0] <= end:
            due, _, t = heapq.heappop(self._heap)
            self.now = due
            if not t.cancelled:
                t.fn()
        self.now = end


class Env:
    """A coordinator of a one-partition offsets topic whose only replica is
    local (ISR of one: a commit is committed when appended)."""

    def __init__(self, tmp_path, isr=(1,), commit_timeout_ms=5000):
        self.clock = FakeClock()
        self.p = Partition(GROUP_METADATA_TOPIC, 0, _log(tmp_path, "co-0"), 1, 0)
        self.p.make_leader((1, 2), isr, leader_epoch=0, zk_version=0, controller_epoch=1,
                           now_ms=0)
        self.manager = GroupMetadataManager(
            lambda tp: self.p if tp == (GROUP_METADATA_TOPIC, 0) else None, lambda: 1,
            min_isr=1, max_message_bytes=1 << 20, commit_timeout_ms=commit_timeout_ms,
            max_metadata_bytes=16, clock=lambda: 1000)
        self.gc = GroupCoordinator(self.manager, GroupConfig(6000, 300000, DELAY), self.clock)

    async def lead(self):
        self.gc.on_leadership_change(self.p, True)
        for _ in range(3):
            await asyncio.sleep(0)
        assert self.manager.status("any") == E.NONE

    def join(self, group="g", member="", protocols=RANGE, session=SESSION, client="c"):
        got = []
        self.gc.handle_join_group(group, member, client, "", REBALANCE, session, "consumer",
                                  protocols, got.append)
        return got

    def sync(self, group, generation, member, assignments=None):
        got = []
        self.gc.handle_sync_group(group, generation, member, assignments or {},
                                  lambda err, a: got.append((err, a)))
        return got

    def commit(self, group, member, generation, offsets):
        got = []
        self.gc.handle_commit_offsets(group, member, generation, offsets, got.append)
        return got

    def stable_pair(self):
        """Group g, two members, Stable at generation 1: (leader, follower)."""
        a, b = self.join(client="a"), self.join(client="b")
        self.clock.advance(2 * DELAY)   # b came during the initial delay: one more delay
        (ra,), (rb,) = a, b
        assert ra[0] == rb[0] == E.NONE and ra[1] == rb[1] == 1
        leader, follower = ra[4], rb[4]
        assert ra[3] == leader and len(ra[5]) == 2 and rb[5] == []
        assert self.sync("g", 1, follower) == []   # waits for the leader's assignment
        self.sync("g", 1, leader, {leader: b"A", follower: b"B"})
        return leader, follower


def run(coro_fn, tmp_path, **kw):
    async def main():
        env = Env(tmp_path, **kw)
        await env.lead()
        return await coro_fn(env)
    return asyncio.run(main())


def test_commit_is_appended_then_cached_and_survives_a_reload(tmp_path):
    async def body(env: Env):
        om = OffsetAndMetadata(12, "m")
        assert env.commit("g", "", -1, {("t", 0): om, ("t", 1): OffsetAndMetadata(1, "x" * 17)}) \
            == [{("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE}]
        assert env.gc.handle_fetch_offsets("g", [("t", 0), ("t", 1)]) == (
            E.NONE, {("t", 0): OffsetAndMetadata(12, "m", 1000), ("t", 1): None})
        assert env.p.leo == 1   # one record: the refused partition is not written
        # Leadership moves away and back: the offsets come from the log.
        env.gc.on_leadership_change(env.p, False)
        assert env.gc.handle_fetch_offsets("g", None) == (E.NOT_COORDINATOR, {})
        env.gc.on_leadership_change(env.p, True)
        assert env.gc.handle_fetch_offsets("g", None)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        err, offsets = env.gc.handle_fetch_offsets("g", None)
        assert err == E.NONE and offsets[("t", 0)].offset == 12
        assert offsets[("t", 0)].metadata == "m" and offsets[("t", 0)].commit_timestamp == 1000
    run(body, tmp_path)


def test_offsets_committed_in_a_transaction_show_only_once_it_commits(tmp_path):
    """TxnOffsetCommit: pending until the COMMIT marker; dropped on ABORT;
    a reload between the commit and the marker keeps them pending."""
    async def body(env: Env):
        def txn_commit(pid, offset):
            got = []
            env.gc.handle_txn_commit_offsets("g", pid, 0, {("t", 0): OffsetAndMetadata(offset)},
                                             got.append)
            return got

        def committed():
            return env.gc.handle_fetch_offsets("g", [("t", 0)])[1][("t", 0)]

        assert txn_commit(7, 5) == [{("t", 0): E.NONE}]
        assert committed() is None
        assert env.p.append_marker(7, 0, False, 0, 1, 2000)[0] == E.NONE
        env.gc.on_txn_marker((GROUP_METADATA_TOPIC, 0), 7, False)
        assert committed() is None
        assert txn_commit(7, 9) == [{("t", 0): E.NONE}]
        # Leadership moves away and back before the marker: still pending after the load.
        env.gc.on_leadership_change(env.p, False)
        env.gc.on_leadership_change(env.p, True)
        for _ in range(3):
            await asyncio.sleep(0)
        assert env.manager.get_group("g").pending_txn_offsets == {
            7: {("t", 0): OffsetAndMetadata(9, "", 1000)}}
        assert committed() is None
        env.p.append_marker(7, 0, True, 0, 1, 2000)
        env.gc.on_txn_marker((GROUP_METADATA_TOPIC, 0), 7, True)
        assert committed().offset == 9
        # And from the log: COMMIT read at load.
        env.gc.on_leadership_change(env.p, False)
        env.gc.on_leadership_change(env.p, True)
        for _ in range(3):
            await asyncio.sleep(0)
        assert committed().offset == 9
        assert env.manager.get_group("g").pending_txn_offsets == {}
    run(body, tmp_path)


def test_commit_waits_for_the_high_watermark(tmp_path):
    async def body(env: Env):
        got = env.commit("g", "", -1, {("t", 0): OffsetAndMetadata(3)})
        await asyncio.sleep(0.05)
        assert got == [] and env.gc.handle_fetch_offsets("g", [("t", 0)])[1] == {("t", 0): None}
        env.p.record_follower_fetch(2, env.p.leo, 1)    # the follower has it: HW passes
        await asyncio.sleep(0.05)
        assert got == [{("t", 0): E.NONE}]
        assert env.gc.handle_fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 3
    run(body, tmp_path, isr=(1, 2))


def test_commit_not_replicated_in_time_is_request_timed_out_and_not_cached(tmp_path):
    async def body(env: Env):
        got = env.commit("g", "", -1, {("t", 0): OffsetAndMetadata(3)})
        await asyncio.sleep(0.3)
        assert got == [{("t", 0): E.REQUEST_TIMED_OUT}]
        assert env.gc.handle_fetch_offsets("g", [("t", 0)])[1] == {("t", 0): None}
    run(body, tmp_path, isr=(1, 2), commit_timeout_ms=100)


def test_commit_waiting_when_leadership_moves_is_not_coordinator(tmp_path):
    async def body(env: Env):
        got = env.commit("g", "", -1, {("t", 0): OffsetAndMetadata(3)})
        env.p.make_follower((1, 2), (1, 2), 2, 1, 1, 1)
        env.gc.on_leadership_change(env.p, False)
        await asyncio.sleep(0.05)
        assert got == [{("t", 0): E.NOT_COORDINATOR}]
    run(body, tmp_path, isr=(1, 2))


# -- membership ---------------------------------------------------------------------------------

def test_first_join_waits_out_the_initial_delay_then_the_leader_assigns(tmp_path):
    async def body(env: Env):
        got = env.join()
        env.clock.advance(DELAY - 1)
        assert got == [] and env.manager.get_group("g").is_(S.PREPARING_REBALANCE)
        env.clock.advance(1)
        [(err, generation, protocol, leader, member, members)] = got
        assert (err, generation, protocol) == (E.NONE, 1, "range")
        assert leader == member and member.startswith("c-")
        assert members == [(member, b"r-meta")]
        assert env.manager.get_group("g").is_(S.COMPLETING_REBALANCE)
        assert env.sync("g", 1, member, {member: b"assigned"}) == [(E.NONE, b"assigned")]
        assert env.manager.get_group("g").is_(S.STABLE)
        assert env.gc.handle_heartbeat("g", member, 1) == E.NONE
        assert env.gc.handle_describe_group("g") == (E.NONE, (
            "Stable", "consumer", "range", [(member, "c", "", b"r-meta", b"assigned")]))
        assert env.gc.handle_list_groups() == (E.NONE, [("g", "consumer")])
    run(body, tmp_path)


def test_members_joining_during_the_initial_delay_extend_it_up_to_the_rebalance_timeout(tmp_path):
    async def body(env: Env):
        first = env.join()
        for _ in range(3):
            env.clock.advance(DELAY - 1)
            env.join()
        # Each came just before a delay ran out: four delays in all.
        env.clock.advance(4 * DELAY - 1 - env.clock.now)
        assert first == []
        env.clock.advance(1)
        assert first and first[0][1] == 1 and len(first[0][5]) == 4
    run(body, tmp_path)


def test_a_new_member_makes_the_group_rebalance_and_heartbeats_say_so(tmp_path):
    async def body(env: Env):
        leader, follower = env.stable_pair()
        newcomer = env.join(client="n")
        assert env.manager.get_group("g").is_(S.PREPARING_REBALANCE)
        assert env.gc.handle_heartbeat("g", follower, 1) == E.REBALANCE_IN_PROGRESS
        # Commits of the current generation are still taken while preparing.
        assert env.commit("g", follower, 1, {("t", 0): OffsetAndMetadata(1)}) == [
            {("t", 0): E.NONE}]
        a, b = env.join(member=leader), env.join(member=follower)
        assert newcomer and a and b   # the last rejoin completes it, no timer needed
        assert {r[0][1] for r in (newcomer, a, b)} == {2}
        assert len(a[0][5]) == 3 and b[0][5] == [] and newcomer[0][5] == []
        assert env.gc.handle_heartbeat("g", follower, 2) == E.REBALANCE_IN_PROGRESS  # syncing
        assert env.commit("g", follower, 2, {("t", 0): OffsetAndMetadata(2)}) == [
            {("t", 0): E.REBALANCE_IN_PROGRESS}]
        assert env.gc.handle_heartbeat("g", follower, 1) == E.REBALANCE_IN_PROGRESS
    run(body, tmp_path)


def test_commit_checks_member_and_generation(tmp_path):
    async def body(env: Env):
        leader, follower = env.stable_pair()
        tp = ("t", 0)
        assert env.commit("g", "stranger", 1, {tp: OffsetAndMetadata(1)}) == [
            {tp: E.UNKNOWN_MEMBER_ID}]
        assert env.commit("g", follower, 0, {tp: OffsetAndMetadata(1)}) == [
            {tp: E.ILLEGAL_GENERATION}]
        assert env.commit("g", follower, 1, {tp: OffsetAndMetadata(1)}) == [{tp: E.NONE}]
        # A group this coordinator does not know (it moved here): only
        # commits without group management are taken.
        assert env.commit("other", "m", 4, {tp: OffsetAndMetadata(1)}) == [
            {tp: E.ILLEGAL_GENERATION}]
        assert env.commit("other", "", -1, {tp: OffsetAndMetadata(1)}) == [{tp: E.NONE}]
        assert env.gc.handle_heartbeat("g", follower, 0) == E.ILLEGAL_GENERATION
        assert env.gc.handle_heartbeat("g", "stranger", 1) == E.UNKNOWN_MEMBER_ID
        assert env.gc.handle_heartbeat("nobody", "m", 1) == E.UNKNOWN_MEMBER_ID
        assert env.sync("g", 0, follower) == [(E.ILLEGAL_GENERATION, b"")]
        assert env.sync("g", 1, follower) == [(E.NONE, b"B")]   # Stable: its assignment
    run(body, tmp_path)


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(tmp_path):
    async def body(env: Env):
        leader, follower = env.stable_pair()
        env.clock.advance(SESSION - 1)
        assert env.gc.handle_heartbeat("g", leader, 1) == E.NONE
        group = env.manager.get_group("g")
        assert group.has(follower)
        env.clock.advance(1)
        assert not group.has(follower) and group.is_(S.PREPARING_REBALANCE)
        assert env.gc.handle_heartbeat("g", leader, 1) == E.REBALANCE_IN_PROGRESS
        got = env.join(member=leader)
        assert got and got[0][1] == 2 and [m for m, _ in got[0][5]] == [leader]
    run(body, tmp_path)


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(tmp_path):
    async def body(env: Env):
        leader, follower = env.stable_pair()
        got = env.join(member=leader)
        for _ in range(2):
            env.clock.advance(REBALANCE // 2)
            env.gc.handle_heartbeat("g", follower, 1)   # alive, but it never rejoins
        assert got and got[0][1] == 2 and [m for m, _ in got[0][5]] == [leader]
        assert not env.manager.get_group("g").has(follower)
    run(body, tmp_path)


def test_leave_group_rebalances_the_rest_and_the_last_leaving_empties_it(tmp_path):
    async def body(env: Env):
        leader, follower = env.stable_pair()
        assert env.gc.handle_leave_group("g", leader) == E.NONE
        group = env.manager.get_group("g")
        assert group.is_(S.PREPARING_REBALANCE) and group.leader_id == follower
        assert env.gc.handle_leave_group("g", leader) == E.UNKNOWN_MEMBER_ID
        got = env.join(member=follower)
        assert got[0][:2] == (E.NONE, 2) and got[0][3] == follower
        assert env.gc.handle_leave_group("g", follower) == E.NONE
        env.clock.advance(REBALANCE)
        assert group.is_(S.EMPTY) and group.generation_id == 3
        assert env.gc.handle_describe_group("g") == (E.NONE, ("Empty", "consumer", "", []))
    run(body, tmp_path)


def test_protocol_chosen_by_votes_among_those_all_members_support(tmp_path):
    async def body(env: Env):
        env.join(protocols=[("roundrobin", b"1"), ("range", b"2")], client="a")
        env.join(protocols=[("range", b"3"), ("sticky", b"4")], client="b")
        env.join(protocols=[("roundrobin", b"5"), ("range", b"6"), ("sticky", b"7")],
                 client="c")
        assert env.join(protocols=[("sticky", b"")])[0][0] == E.INCONSISTENT_GROUP_PROTOCOL
        env.clock.advance(2 * DELAY)
        assert env.manager.get_group("g").protocol == "range"
        group = GroupMetadata("h")
        for i, names in enumerate((["a", "b"], ["b", "a"], ["a"])):
            group.add(MemberMetadata(f"m{i}", "c", "", 1, 1, "consumer",
                                     [(n, b"") for n in names]))
        assert group.select_protocol() == "a"
    run(body, tmp_path)


def test_bad_joins_get_kafkas_errors(tmp_path):
    async def body(env: Env):
        assert env.join(group="")[0][0] == E.INVALID_GROUP_ID
        assert env.join(session=100)[0][0] == E.INVALID_SESSION_TIMEOUT
        assert env.join(protocols=[])[0][0] == E.INCONSISTENT_GROUP_PROTOCOL
        assert env.join(member="made-up")[0][0] == E.UNKNOWN_MEMBER_ID
        env.join()
        got = []
        env.gc.handle_join_group("g", "", "c", "", REBALANCE, SESSION, "connect", RANGE,
                                 got.append)
        assert got[0][0] == E.INCONSISTENT_GROUP_PROTOCOL
    run(body, tmp_path)


def test_losing_the_offsets_partition_answers_waiting_members_not_coordinator(tmp_path):
    async def body(env: Env):
        leader, follower = env.stable_pair()
        first = env.join(member=leader)              # waits for the follower
        waiting = env.join(member=leader)            # a second join: the first one is answered
        assert first[0][0] == E.REBALANCE_IN_PROGRESS and waiting == []
        env.p.make_follower((1, 2), (1, 2), 2, 1, 1, 1)
        env.gc.on_leadership_change(env.p, False)
        assert waiting and waiting[0][0] == E.NOT_COORDINATOR
        assert env.gc.handle_heartbeat("g", follower, 1) == E.NOT_COORDINATOR
        assert env.join()[0][0] == E.NOT_COORDINATOR
        assert env.gc.handle_describe_group("g")[0] == E.NOT_COORDINATOR
        env.clock.advance(REBALANCE + SESSION)   # the dropped group's timers do nothing
    run(body, tmp_path)


def test_while_loading_heartbeats_pass_syncs_restart_and_the_rest_wait(tmp_path):
    async def body(env: Env):
        env.gc.on_leadership_change(env.p, False)
        env.gc.on_leadership_change(env.p, True)   # loading until the loop turns
        assert env.join()[0][0] == E.COORDINATOR_LOAD_IN_PROGRESS
        assert env.gc.handle_heartbeat("g", "m", 1) == E.NONE
        assert env.sync("g", 1, "m") == [(E.REBALANCE_IN_PROGRESS, b"")]
        assert env.gc.handle_list_groups()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert env.gc.handle_list_groups() == (E.NONE, [])
    run(body, tmp_path)


# -- memberships in the offsets topic ----------------------------------------------------------

def test_an_assignment_is_handed_out_only_once_the_isr_holds_the_generation(tmp_path):
    """A coordinator whose followers stopped fetching from it (deposed, not
    yet told) cannot replicate the group's record: the leader's SyncGroup
    must not hand out its assignment, or two coordinators give two
    memberships the same partitions."""
    async def body(env: Env):
        a = env.join(client="a")
        env.clock.advance(DELAY)
        [(err, generation, _p, leader, member, _m)] = a
        got = env.sync("g", generation, member, {member: b"A"})
        await asyncio.sleep(0.05)
        assert got == [], "the assignment was handed out before the ISR held the generation"
        env.p.record_follower_fetch(2, env.p.leo, 1)
        await asyncio.sleep(0.05)
        assert got == [(E.NONE, b"A")] and env.manager.get_group("g").is_(S.STABLE)
    run(body, tmp_path, isr=(1, 2))


def test_a_generation_not_written_in_time_sends_the_members_to_join_again(tmp_path):
    async def body(env: Env):
        a, b = env.join(client="a"), env.join(client="b")
        env.clock.advance(2 * DELAY)
        (ra,), (rb,) = a, b
        leader, follower = ra[4], rb[4]
        waiting = env.sync("g", 1, follower)
        got = env.sync("g", 1, leader, {leader: b"A", follower: b"B"})
        await asyncio.sleep(0.3)
        assert got == [(E.REBALANCE_IN_PROGRESS, b"")]
        assert waiting == [(E.REBALANCE_IN_PROGRESS, b"")]
        group = env.manager.get_group("g")
        assert group.is_(S.PREPARING_REBALANCE)
        assert all(m.assignment == b"" for m in group.members.values())
    run(body, tmp_path, isr=(1, 2), commit_timeout_ms=100)


def test_a_new_coordinator_loads_the_members_who_go_on_in_their_generation(tmp_path):
    async def body(env: Env):
        leader, follower = env.stable_pair()
        tp = ("t", 0)
        assert env.commit("g", follower, 1, {tp: OffsetAndMetadata(4)}) == [{tp: E.NONE}]
        env.gc.on_leadership_change(env.p, False)      # moved away and back: a reload
        env.gc.on_leadership_change(env.p, True)
        for _ in range(3):
            await asyncio.sleep(0)
        group = env.manager.get_group("g")
        assert group.is_(S.STABLE) and group.generation_id == 1 and group.leader_id == leader
        assert env.gc.handle_heartbeat("g", follower, 1) == E.NONE
        assert env.sync("g", 1, follower) == [(E.NONE, b"B")]
        assert env.commit("g", follower, 1, {tp: OffsetAndMetadata(5)}) == [{tp: E.NONE}]
        assert env.commit("g", follower, 0, {tp: OffsetAndMetadata(6)}) == [
            {tp: E.ILLEGAL_GENERATION}]
        # The leader never heartbeats the new coordinator: its session runs out.
        env.clock.advance(SESSION - 1)
        assert env.gc.handle_heartbeat("g", follower, 1) == E.NONE
        env.clock.advance(1)
        assert not group.has(leader) and group.is_(S.PREPARING_REBALANCE)
    run(body, tmp_path)


def test_an_empty_generation_is_written_so_a_reload_brings_no_member_back(tmp_path):
    async def body(env: Env):
        leader, follower = env.stable_pair()
        env.gc.handle_leave_group("g", leader)
        env.gc.handle_leave_group("g", follower)
        env.clock.advance(REBALANCE)
        env.gc.on_leadership_change(env.p, False)
        env.gc.on_leadership_change(env.p, True)
        for _ in range(3):
            await asyncio.sleep(0)
        group = env.manager.get_group("g")
        assert group.is_(S.EMPTY) and group.generation_id == 2 and not group.members
    run(body, tmp_path)


def test_state_transitions_outside_kafkas_table_are_refused():
    g = GroupMetadata("g")
    with pytest.raises(IllegalStateTransition):
        g.transition_to(S.STABLE)
    g.transition_to(S.PREPARING_REBALANCE)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(S.STABLE)
    g.transition_to(S.COMPLETING_REBALANCE)
    g.transition_to(S.STABLE)
    g.transition_to(S.DEAD)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(S.EMPTY)
