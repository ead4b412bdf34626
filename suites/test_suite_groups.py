"""Consumer groups: each rule of docs/design.md#groups driven to the moment
it is about, then a consumer group under faults aimed at its coordinator.

A library consumer hides what its coordinator answered: it retries, rejoins
and refetches by itself, so a commit taken from a stale generation or an
offset lost in a failover rarely shows in a workload's history. These
scenarios play the members themselves with raw requests
(harness/kafka_wire.py), so every error code is seen: a commit acknowledged
before the offsets topic's ISR holds it, a committed offset lost when the
coordinator fails, a fenced member whose commit is taken, a member never
expired, an OffsetFetch that answers another group's offsets, an assignment
delivered to the wrong member. One cluster is shared by the module (fixed
configuration, short group timeouts so that each scenario takes seconds);
each scenario leaves it healed. The pressure run at the end (its own tier,
after the smoke tier) runs a real two-member group with the group oracles
on while kills, pauses, partitions and session expiries hit its coordinator
too (faults/targets.py, `coordinator:GROUP`).
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any, Callable

import pytest

from cluster import admin, zkpaths
from cluster.protocol import errors as E
from contracts.deadline import wait_until
from faults.nemesis import Schedule, make_schedule
from harness import kafka_wire
from suite_helpers import SAFE, ZkView, assert_valid, crash_broker, wait_for

pytestmark = [pytest.mark.docker]

OFFSETS = "__consumer_offsets"
OFFSETS_PARTITIONS = 10        # offsets.topic.num.partitions (the default)
OFFSETS_REPLICAS = 3           # offsets.topic.replication.factor (the default)
LAG_S = 4.0
COMMIT_TIMEOUT_S = 5.0         # offsets.commit.timeout.ms (the default)
MIN_SESSION_MS = 1000          # group.min.session.timeout.ms: short sessions expire in seconds
INITIAL_DELAY_MS = 1500        # group.initial.rebalance.delay.ms
MAX_METADATA = 4096            # offset.metadata.max.bytes (the default)
# Churn as the pressure suite's (for the pressure run at the end): small
# segments roll every few seconds, a sparse-index entry every few batches.
CONFIG = {**SAFE, "replica.lag.time.max.ms": int(LAG_S * 1000),
          "group.min.session.timeout.ms": MIN_SESSION_MS,
          "group.initial.rebalance.delay.ms": INITIAL_DELAY_MS,
          "log.segment.bytes": 64 * 1024, "log.index.interval.bytes": 128}


@pytest.fixture(scope="module")
def shared_cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, broker_config=CONFIG)


@pytest.fixture
def cluster(shared_cluster):
    shared_cluster.wait_brokers_registered(timeout=90)
    return shared_cluster


# -- which partition, which broker -------------------------------------------------------------

def _java_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, 32-bit overflow),
    written here again: the suite must not share the broker's code."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


def _offsets_partition(group: str) -> int:
    """docs/design.md#groups: abs(javaHashCode(G)) % N, with Kafka's
    Utils.abs (the absolute value of Integer.MIN_VALUE is 0)."""
    h = _java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % OFFSETS_PARTITIONS


def _groups_sharing_a_partition(prefix: str, n: int) -> list[str]:
    """`n` group ids that map to one offsets partition: one coordinator,
    one log for all of them."""
    first = f"{prefix}-0"
    same = [first] + [g for g in (f"{prefix}-{i}" for i in range(1, 1000))
                      if _offsets_partition(g) == _offsets_partition(first)]
    return same[:n]


def _connect(run, broker: int, timeout: float = 60.0) -> kafka_wire.KafkaConnection:
    node = run.cluster.node(f"broker-{broker}")
    return kafka_wire.KafkaConnection(node.host, node.port, client_id="chaoslog-groups",
                                      timeout=timeout)


def _ask(run, broker: int, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """One request to `broker` on a connection of its own."""
    conn = _connect(run, broker, timeout=15)
    try:
        return fn(conn, *args, **kw)
    finally:
        conn.close()


def _offsets_topic_ready(run, zk: ZkView) -> None:
    """The offsets topic exists (the first FindCoordinator creates it) and
    each of its partitions has a leader and a full ISR."""
    wait_for(lambda: _ask(run, min(zk.registered()), kafka_wire.find_coordinator,
                          "chaoslog-probe")[0] == E.NONE, 60,
             f"FindCoordinator answering once it created {OFFSETS}")
    wait_for(lambda: zk.fully_replicated({OFFSETS: OFFSETS_PARTITIONS}), 60,
             f"every partition of {OFFSETS} with a leader and a full ISR")


def _records(run, broker: int, topic: str, partition: int) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every committed record of a partition, fetched
    from `broker` (its leader)."""
    conn = _connect(run, broker, timeout=15)
    out: list[tuple[int, bytes | None]] = []
    try:
        while True:
            r = kafka_wire.fetch(conn, topic, partition, out[-1][0] + 1 if out else 0)
            assert r.error == E.NONE, f"Fetch of {topic}/{partition}: {E.name(r.error)}"
            if not r.records:
                return out
            out += r.records
    finally:
        conn.close()


def _topic(run, name: str, partitions: int) -> None:
    """Create `name` (three replicas) and wait until every broker's Metadata
    serves each partition with a leader: a coordinator whose metadata lacks
    the topic answers a commit of it UNKNOWN_TOPIC_OR_PARTITION."""
    run.create_topics({name: partitions}, 3)

    def served() -> bool:
        for b in (1, 2, 3):
            parts = _ask(run, b, kafka_wire.metadata, [name]).partitions
            if any(parts.get((name, p)) is None or parts[(name, p)].leader < 0
                   for p in range(partitions)):
                return False
        return True

    wait_for(served, 30, f"every broker serving topic {name}")


def _coordinator(run, zk: ZkView, group: str, asking: list[int] | None = None,
                 timeout: float = 60.0) -> int:
    """The leader ZooKeeper names for the group's offsets partition, once
    FindCoordinator at every live broker (or at `asking`) names it and it
    serves the group (its load of the partition done)."""
    partition = _offsets_partition(group)

    def agreed() -> int | None:
        leader = zk.lai(OFFSETS, partition).leader
        if leader <= 0:
            return None
        for b in asking or sorted(zk.registered()):
            if _ask(run, b, kafka_wire.find_coordinator, group)[:2] != (E.NONE, leader):
                return None
        err, _ = _ask(run, leader, kafka_wire.offset_fetch, group)
        return leader if err == E.NONE else None

    return wait_for(agreed, timeout,
                    f"FindCoordinator naming the leader of {OFFSETS}/{partition} for {group}, "
                    f"which serves it")


def _healed(zk: ZkView, what: str = "") -> None:
    """Every broker registered and every offsets partition with its full ISR."""
    wait_for(lambda: zk.registered() == {1, 2, 3}
             and zk.fully_replicated({OFFSETS: OFFSETS_PARTITIONS}), 90,
             f"every broker back and every {OFFSETS} partition with a full ISR{what}")


def _move_offsets_leadership(run, zk: ZkView, partition: int) -> int:
    """Move the leadership of offsets partition `partition` to an in-sync
    follower (its replicas reordered, then a preferred election) while
    every broker lives: the old leader becomes a follower. Returns the new
    leader."""
    lai = zk.lai(OFFSETS, partition)
    to = next(b for b in sorted(lai.isr) if b != lai.leader)
    order = [to] + [r for r in zk.assignment(OFFSETS)[partition] if r != to]
    admin.reassign(run.zk, {(OFFSETS, partition): order})
    wait_for(lambda: zk.assignment(OFFSETS)[partition][0] == to
             and run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, 30,
             f"{OFFSETS}/{partition} reordered, broker {to} first")
    admin.preferred_election(run.zk, OFFSETS)
    wait_for(lambda: zk.lai(OFFSETS, partition).leader == to, 30,
             f"broker {to} elected leader of {OFFSETS}/{partition}")
    return to



class _Pending:
    """A request that waits (JoinGroup, SyncGroup, a commit waiting for its
    replication) in a thread of its own."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kw: Any):
        self._out: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn, args, kw), daemon=True)
        self._thread.start()

    def _run(self, fn, args, kw) -> None:
        try:
            self._out["value"] = fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001 - handed to result()
            self._out["error"] = e
        self._out["at"] = time.monotonic()

    def done(self) -> bool:
        return "at" in self._out

    @property
    def at(self) -> float:
        return self._out["at"]

    def result(self, timeout: float, what: str) -> Any:
        self._thread.join(timeout)
        if not self.done():
            raise AssertionError(f"{what}: no answer within {timeout:g} s")
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]


class _Member:
    """One member of a group as its client would be, on a connection of its
    own to the coordinator: its member id and generation as last given."""

    def __init__(self, run, broker: int, group: str, name: str, *, session_ms: int = 30000,
                 rebalance_ms: int = 30000, protocols: list[tuple[str, bytes]] | None = None):
        self.conn = _connect(run, broker)
        self.group, self.name = group, name
        self.session_ms, self.rebalance_ms = session_ms, rebalance_ms
        self.protocols = protocols or [("range", name.encode())]
        self.member_id = ""
        self.generation = -1

    def join(self, protocols: list[tuple[str, bytes]] | None = None) -> kafka_wire.JoinResult:
        if protocols is not None:
            self.protocols = protocols
        r = kafka_wire.join_group(self.conn, self.group, self.member_id, protocols=self.protocols,
                                  session_timeout_ms=self.session_ms,
                                  rebalance_timeout_ms=self.rebalance_ms)
        if r.error == E.NONE:
            self.member_id, self.generation = r.member_id, r.generation
        return r

    def sync(self, assignments: dict[str, bytes] | None = None) -> tuple[int, bytes]:
        return kafka_wire.sync_group(self.conn, self.group, self.generation, self.member_id,
                                     assignments)

    def heartbeat(self, generation: int | None = None) -> int:
        return kafka_wire.heartbeat(self.conn, self.group,
                                    self.generation if generation is None else generation,
                                    self.member_id)

    def commit(self, offsets: dict[tuple[str, int], int], generation: int | None = None
               ) -> dict[tuple[str, int], int]:
        return kafka_wire.offset_commit(self.conn, self.group, offsets,
                                        generation=self.generation if generation is None
                                        else generation, member_id=self.member_id)

    def leave(self) -> int:
        return kafka_wire.leave_group(self.conn, self.group, self.member_id)

    def close(self) -> None:
        self.conn.close()


def _join_together(members: list[_Member], timeout: float = 60.0) -> list[kafka_wire.JoinResult]:
    """Their JoinGroups sent at once; the answers, in the members' order."""
    pending = [_Pending(m.join) for m in members]
    return [p.result(timeout, f"{m.name}'s JoinGroup") for p, m in zip(pending, members)]


def _names(errors: dict[tuple[str, int], int]) -> dict[str, str]:
    return {f"{t}/{p}": E.name(e) for (t, p), e in errors.items()}


def _offsets(run, broker: int, group: str, partitions=None) -> dict[tuple[str, int], int]:
    """What OffsetFetch at `broker` answers for the group: (topic, partition)
    -> committed offset (-1: none); fails on an error."""
    err, found = _ask(run, broker, kafka_wire.offset_fetch, group, partitions)
    assert err == E.NONE, f"OffsetFetch of group {group} at broker {broker}: {E.name(err)}"
    return {tp: off for tp, (off, _md) in found.items()}


def _sync_round(leader: _Member, followers: list[_Member],
                assignments: dict[str, bytes]) -> dict[str, tuple[int, bytes]]:
    """The followers' SyncGroups first (each must wait for the leader's),
    then the leader's with `assignments`: member id -> (error, assignment)."""
    waiting = [_Pending(f.sync) for f in followers]
    early = wait_until(lambda: [f.name for f, w in zip(followers, waiting) if w.done()], 0.5, 0.1)
    assert not early, (f"SyncGroup of {early} answered before the leader's SyncGroup brought "
                       f"the assignment")
    got = {leader.member_id: leader.sync(assignments)}
    for f, w in zip(followers, waiting):
        got[f.member_id] = w.result(30, f"{f.name}'s SyncGroup once the leader's arrived")
    return got


# -- the scenarios -------------------------------------------------------------------------------

# Group ids whose hashes try the mapping: over UTF-16 code units (a
# surrogate pair, non-ASCII letters), negative, and Integer.MIN_VALUE.
MAPPED_GROUPS = ["chaoslog-😀-grüße", "polygenelubricants", "chaoslog-groups-" + "a" * 20,
                 "chaoslog-groups-map"]


@pytest.mark.smoke
def test_the_coordinator_is_the_leader_of_the_group_s_offsets_partition(chaos_run):
    """docs/design.md#groups, "The offsets topic" and "Which broker
    coordinates a group". The first FindCoordinator creates
    __consumer_offsets (10 partitions, 3 replicas). For each group, every
    broker's FindCoordinator names the leader of partition
    abs(javaHashCode(G)) % 10; every other broker answers NOT_COORDINATOR to
    each group request, storing nothing; clients may not produce to the
    offsets topic."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    plan = zk.assignment(OFFSETS)
    assert sorted(plan) == list(range(OFFSETS_PARTITIONS)) and all(
        len(set(r)) == OFFSETS_REPLICAS for r in plan.values()), (
        f"{OFFSETS} was created with replicas {plan}: want {OFFSETS_PARTITIONS} partitions of "
        f"{OFFSETS_REPLICAS} replicas")
    _topic(run, "nc", 1)
    for group in MAPPED_GROUPS:
        partition = _offsets_partition(group)
        answers: dict[int, tuple] = {}

        def every_broker_names_the_leader() -> bool:
            leader = zk.lai(OFFSETS, partition).leader
            for b in (1, 2, 3):
                answers[b] = _ask(run, b, kafka_wire.find_coordinator, group)
            node = run.cluster.node(f"broker-{leader}")
            return all(a == (E.NONE, leader, node.host, node.port) for a in answers.values())

        assert wait_until(every_broker_names_the_leader, 30, 0.2), (
            f"group {group!r} maps to {OFFSETS}/{partition} (hash {_java_hash(group)}), led by "
            f"broker {zk.lai(OFFSETS, partition).leader}; FindCoordinator answered (error, node, "
            f"host, port) {answers}")
        # ... and its commits are records of that partition.
        leader = answers[1][1]
        mark = f"placed {group}"
        got = _ask(run, leader, kafka_wire.offset_commit, group, {("nc", 0): 1}, metadata=mark)
        assert got == {("nc", 0): E.NONE}, f"a commit of group {group!r}: {_names(got)}"
        held = [o for o, v in _records(run, leader, OFFSETS, partition)
                if v is not None and mark.encode() in v]
        assert held, (f"group {group!r}'s acknowledged commit is not in {OFFSETS}/{partition}, "
                      f"the partition its id maps to")

    group = "chaoslog-groups-nc"
    coordinator = _coordinator(run, zk, group)
    for b in (x for x in (1, 2, 3) if x != coordinator):
        conn = _connect(run, b, timeout=15)
        try:
            answered = {
                "JoinGroup": kafka_wire.join_group(conn, group).error,
                "SyncGroup": kafka_wire.sync_group(conn, group, 1, "m")[0],
                "Heartbeat": kafka_wire.heartbeat(conn, group, 1, "m"),
                "LeaveGroup": kafka_wire.leave_group(conn, group, "m"),
                "OffsetCommit": kafka_wire.offset_commit(conn, group, {("nc", 0): 7})[("nc", 0)],
                "OffsetFetch": kafka_wire.offset_fetch(conn, group, [("nc", 0)])[0],
                "DescribeGroups": kafka_wire.describe_group(conn, group)[0],
            }
        finally:
            conn.close()
        wrong = {api: E.name(err) for api, err in answered.items() if err != E.NOT_COORDINATOR}
        assert not wrong, (f"broker {b}, not the coordinator of {group} (broker {coordinator} "
                           f"is), answered {wrong}, not NOT_COORDINATOR")
    stored = _offsets(run, coordinator, group, [("nc", 0)])
    assert stored == {("nc", 0): -1}, (
        f"group {group} committed only at brokers that are not its coordinator, and its "
        f"coordinator's OffsetFetch answers {stored}: a refused commit was stored, or the "
        f"answer is another group's")

    leader = zk.lai(OFFSETS, 0).leader
    conn = _connect(run, leader)
    try:
        end = kafka_wire.list_offset(conn, OFFSETS, 0, -1)
        err, _ = kafka_wire.produce(conn, OFFSETS, 0, [b"not a commit"])
        after = kafka_wire.list_offset(conn, OFFSETS, 0, -1)
    finally:
        conn.close()
    assert err == E.INVALID_TOPIC_EXCEPTION, (
        f"a client's Produce to {OFFSETS} was answered {E.name(err)}, not INVALID_TOPIC_EXCEPTION")
    assert after == end, f"{OFFSETS}/0 grew from {end} to {after} after a refused Produce"


@pytest.mark.smoke
def test_offset_fetch_answers_each_group_its_own_offsets(chaos_run):
    """docs/design.md#groups, "Commits". Three groups on one coordinator
    and one offsets partition: two commit different offsets for the same
    partitions, the third nothing. OffsetFetch (of listed partitions and of
    all) answers each group exactly its own commits, and -1 / nothing for
    the group that made none. A commit naming an unknown topic, or with
    metadata longer than offset.metadata.max.bytes (4096), is refused for
    that partition and not written; 4096 bytes are taken."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    _topic(run, "of", 2)
    ga, gb, gc = _groups_sharing_a_partition("chaoslog-groups-of", 3)
    c = _coordinator(run, zk, ga)
    a0, a1 = ("of", 0), ("of", 1)
    assert _ask(run, c, kafka_wire.offset_commit, ga, {a0: 3, a1: 4}) == {a0: E.NONE, a1: E.NONE}
    assert _ask(run, c, kafka_wire.offset_commit, gb, {a0: 7}) == {a0: E.NONE}
    listed = [a0, a1]
    seen = {g: (_offsets(run, c, g, listed), _offsets(run, c, g)) for g in (ga, gb, gc)}
    want = {ga: ({a0: 3, a1: 4}, {a0: 3, a1: 4}), gb: ({a0: 7, a1: -1}, {a0: 7}),
            gc: ({a0: -1, a1: -1}, {})}
    assert seen == want, (
        f"three groups of one coordinator: {ga} committed of/0=3, of/1=4; {gb} of/0=7; {gc} "
        f"nothing. OffsetFetch (listed, all) answered {seen}")

    unknown = ("of-unknown", 0)
    got = _ask(run, c, kafka_wire.offset_commit, ga, {a0: 5, unknown: 1})
    assert got == {a0: E.NONE, unknown: E.UNKNOWN_TOPIC_OR_PARTITION}, (
        f"a commit of of/0 and of an unknown topic was answered {_names(got)}")
    fits = "m" * MAX_METADATA
    got = _ask(run, c, kafka_wire.offset_commit, ga, {a1: 6}, metadata=fits)
    assert got == {a1: E.NONE}, (
        f"a commit with {MAX_METADATA} bytes of metadata was answered {_names(got)}")
    got = _ask(run, c, kafka_wire.offset_commit, ga, {a1: 9}, metadata=fits + "m")
    assert got == {a1: E.OFFSET_METADATA_TOO_LARGE}, (
        f"a commit with {MAX_METADATA + 1} bytes of metadata was answered {_names(got)}")
    err, found = _ask(run, c, kafka_wire.offset_fetch, ga)
    assert (err, found) == (E.NONE, {a0: (5, ""), a1: (6, fits)}), (
        f"after refused commits (an unknown topic, metadata too large) group {ga} has "
        f"{ {f'{t}/{p}': (o, len(m)) for (t, p), (o, m) in found.items()} } ({E.name(err)}): "
        f"want of/0=5, of/1=6 with {MAX_METADATA} bytes of metadata")


@pytest.mark.smoke
def test_members_of_a_stale_generation_or_unknown_id_are_fenced(chaos_run):
    """docs/design.md#groups, "Commits" and "Membership". Three members
    join together: one generation, the protocol most of them prefer, and
    only the leader's answer lists the members with their metadata for it.
    Joins that do not fit the group are refused (another protocol type, no
    protocol in common, a session timeout below the minimum). A commit
    without a member id to a group that has members, and every request of
    an unknown member id, get UNKNOWN_MEMBER_ID; once a rebalance makes the
    next generation, the former generation's commit, Heartbeat and
    SyncGroup get ILLEGAL_GENERATION; while the group waits for the
    leader's assignment, commits and heartbeats get REBALANCE_IN_PROGRESS.
    None of the refused commits is written. Once everyone left, a commit
    without generation (offsets only) is taken."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    _topic(run, "fe", 1)
    tp = ("fe", 0)
    group = "chaoslog-groups-fence"
    c = _coordinator(run, zk, group)
    members = [_Member(run, c, group, "A", protocols=[("x", b"A-x"), ("y", b"A-y")]),
               _Member(run, c, group, "B", protocols=[("y", b"B-y"), ("x", b"B-x")]),
               _Member(run, c, group, "C", protocols=[("y", b"C-y"), ("x", b"C-x")])]
    ghost = _Member(run, c, group, "ghost", protocols=[("y", b"ghost-y")])
    try:
        joined = _join_together(members)
        summary = [(E.name(j.error), j.generation, j.protocol, j.leader) for j in joined]
        assert len(set(summary)) == 1 and summary[0][:3] == ("NONE", 1, "y"), (
            f"three members joining an empty group together, two preferring protocol y, were "
            f"answered (error, generation, protocol, leader) {summary}: want one generation 1 "
            f"with y")
        by_id = {m.member_id: m for m in members}
        leader = by_id[joined[0].leader]
        listed = {j.member_id: {by_id[i].name: md for i, md in j.members.items()} for j in joined}
        assert listed[leader.member_id] == {"A": b"A-y", "B": b"B-y", "C": b"C-y"}, (
            f"the leader's JoinGroup answer lists members {listed[leader.member_id]}")
        assert all(not v for k, v in listed.items() if k != leader.member_id), (
            f"members other than the leader were sent the member list: {listed}")

        for what, kw, want in (
                ("protocol type 'other'", dict(protocol_type="other"),
                 E.INCONSISTENT_GROUP_PROTOCOL),
                ("only protocol 'z'", dict(protocols=[("z", b"")]), E.INCONSISTENT_GROUP_PROTOCOL),
                (f"session timeout {MIN_SESSION_MS - 1} ms",
                 dict(session_timeout_ms=MIN_SESSION_MS - 1), E.INVALID_SESSION_TIMEOUT)):
            err = kafka_wire.join_group(ghost.conn, group, **kw).error
            assert err == want, f"a JoinGroup with {what} was answered {E.name(err)}, not {E.name(want)}"

        followers = [m for m in members if m is not leader]
        synced = _sync_round(leader, followers, {m.member_id: m.name.encode() for m in members})
        wrong = {by_id[i].name: (E.name(e), a) for i, (e, a) in synced.items()
                 if (e, a) != (E.NONE, by_id[i].name.encode())}
        assert not wrong, f"SyncGroup answers differing from the leader's assignment: {wrong}"

        assert leader.commit({tp: 1}) == {tp: E.NONE}
        ghost.member_id, ghost.generation = "ghost", 1
        refused = {
            "a commit without member id or generation": (
                kafka_wire.offset_commit(ghost.conn, group, {tp: 101})[tp], E.UNKNOWN_MEMBER_ID),
            "an unknown member's commit": (ghost.commit({tp: 102})[tp], E.UNKNOWN_MEMBER_ID),
            "an unknown member's Heartbeat": (ghost.heartbeat(), E.UNKNOWN_MEMBER_ID),
            "an unknown member's SyncGroup": (ghost.sync()[0], E.UNKNOWN_MEMBER_ID),
            "an unknown member's JoinGroup": (ghost.join().error, E.UNKNOWN_MEMBER_ID),
            "an unknown member's LeaveGroup": (ghost.leave(), E.UNKNOWN_MEMBER_ID),
        }

        # The next generation: the leader joins again (a rebalance), the
        # others hear of it in their heartbeats and join again too.
        rejoin = _Pending(leader.join)
        for m in followers:
            wait_for(lambda m=m: m.heartbeat() == E.REBALANCE_IN_PROGRESS, 10,
                     f"{m.name}'s Heartbeat answering REBALANCE_IN_PROGRESS once the leader "
                     f"joined again")
        again = _join_together(followers) + [rejoin.result(30, "the leader's JoinGroup")]
        assert {(E.name(j.error), j.generation) for j in again} == {("NONE", 2)}, (
            f"the rebalance answered {[(E.name(j.error), j.generation) for j in again]}")
        b = followers[0]
        refused["a commit while the group waits for the leader's assignment"] = (
            b.commit({tp: 103})[tp], E.REBALANCE_IN_PROGRESS)
        refused["a Heartbeat while the group waits for the leader's assignment"] = (
            b.heartbeat(), E.REBALANCE_IN_PROGRESS)
        _sync_round(leader, followers, {m.member_id: m.name.encode() for m in members})
        refused["a commit of the former generation"] = (
            leader.commit({tp: 104}, generation=1)[tp], E.ILLEGAL_GENERATION)
        refused["a Heartbeat of the former generation"] = (
            leader.heartbeat(generation=1), E.ILLEGAL_GENERATION)
        stale = kafka_wire.sync_group(leader.conn, group, 1, leader.member_id,
                                      {m.member_id: b"stale" for m in members})
        refused["a SyncGroup of the former generation"] = (stale[0], E.ILLEGAL_GENERATION)
        wrong = {what: f"{E.name(got)}, not {E.name(want)}"
                 for what, (got, want) in refused.items() if got != want}
        assert not wrong, f"requests that must be refused were answered: {wrong}"
        assert _offsets(run, c, group, [tp]) == {tp: 1}, (
            f"after refused commits of offsets 101-104, group {group} has "
            f"{_offsets(run, c, group, [tp])}: want the one commit taken, 1")
        assert b.heartbeat() == E.NONE and b.sync() == (E.NONE, b.name.encode()), (
            "the assignment changed after a SyncGroup of the former generation")
        assert b.commit({tp: 2}) == {tp: E.NONE}

        left = {m.name: E.name(m.leave()) for m in members}
        assert set(left.values()) == {"NONE"}, f"LeaveGroup answered {left}"
        state = kafka_wire.describe_group(ghost.conn, group)
        assert state[:2] == (E.NONE, "Empty"), f"with every member gone the group is {state}"
        got = kafka_wire.offset_commit(ghost.conn, group, {tp: 3})
        assert got == {tp: E.NONE}, (
            f"a commit without generation to a group without members was answered {_names(got)}")
        assert _offsets(run, c, group, [tp]) == {tp: 3}
    finally:
        for m in members + [ghost]:
            m.close()


@pytest.mark.smoke
def test_members_share_the_partitions_and_a_silent_or_leaving_one_hands_them_over(chaos_run):
    """docs/design.md#groups, "Membership". Two members joining an empty
    group together make one generation (the delayed initial rebalance);
    each gets from its SyncGroup exactly what the leader assigned it,
    disjoint halves of the topic. A member joining again with the same
    metadata gets the same generation back, no rebalance. A member that
    stops heartbeating is removed after its session timeout, not before:
    the other's heartbeat then answers REBALANCE_IN_PROGRESS, it joins
    again, alone, and takes every partition; the removed member is fenced.
    A LeaveGroup does the same at once."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    _topic(run, "ms", 4)
    group = "chaoslog-groups-members"
    c = _coordinator(run, zk, group)
    session_ms = 4000
    a = _Member(run, c, group, "A", session_ms=session_ms, rebalance_ms=10000)
    b = _Member(run, c, group, "B", session_ms=session_ms, rebalance_ms=10000)
    late = _Member(run, c, group, "B2", session_ms=30000, rebalance_ms=10000)
    try:
        ja, jb = _join_together([a, b])
        assert (ja.error, jb.error, ja.generation, jb.generation) == (E.NONE, E.NONE, 1, 1) \
            and ja.leader == jb.leader, (
            f"two members joining an empty group together were answered (error, generation, "
            f"leader) {[(E.name(j.error), j.generation, j.leader) for j in (ja, jb)]}: want one "
            f"generation 1")
        leader, follower = (a, b) if ja.leader == a.member_id else (b, a)
        jl = ja if leader is a else jb
        assert jl.members == {a.member_id: b"A", b.member_id: b"B"}, (
            f"the leader's JoinGroup answer lists {jl.members}")
        halves = {leader.member_id: b"ms:0,1", follower.member_id: b"ms:2,3"}
        got = _sync_round(leader, [follower], halves)
        assert got == {i: (E.NONE, v) for i, v in halves.items()}, (
            f"the leader assigned {halves}; SyncGroup answered {got}")

        rejoined = follower.join()
        assert (rejoined.error, rejoined.generation) == (E.NONE, 1), (
            f"a member joining again with the same metadata was answered "
            f"{E.name(rejoined.error)} generation {rejoined.generation}, not generation 1")
        assert leader.heartbeat() == E.NONE, "a member rejoining unchanged started a rebalance"

        # The one that stays heartbeats; the other falls silent.
        silent, stays = (a, b)
        last = time.monotonic()
        assert silent.heartbeat() == E.NONE
        answers: list[int] = []

        def rebalance_seen() -> bool:
            answers.append(stays.heartbeat())
            return answers[-1] != E.NONE

        wait_for(rebalance_seen, session_ms / 1000 + 15,
                 f"a Heartbeat answering other than NONE after member {silent.name} fell silent",
                 interval=0.3)
        took = time.monotonic() - last
        assert answers[-1] == E.REBALANCE_IN_PROGRESS, (
            f"once {silent.name} fell silent, {stays.name}'s Heartbeat answered "
            f"{E.name(answers[-1])}")
        assert took >= session_ms / 1000 - 0.2, (
            f"member {silent.name} was removed {took:.1f} s after its last heartbeat: its session "
            f"timeout is {session_ms / 1000:g} s")
        alone = stays.join()
        assert (alone.error, alone.generation, alone.leader, alone.members) == (
            E.NONE, 2, stays.member_id, {stays.member_id: stays.name.encode()}), (
            f"the survivor joining again was answered {alone}: want generation 2, it alone")
        everything = b"ms:0,1,2,3"
        assert stays.sync({stays.member_id: everything}) == (E.NONE, everything)
        fenced = {"Heartbeat": silent.heartbeat(), "commit": silent.commit({("ms", 0): 1})[("ms", 0)]}
        assert set(fenced.values()) == {E.UNKNOWN_MEMBER_ID}, (
            f"the removed member's requests were answered "
            f"{ {k: E.name(v) for k, v in fenced.items()} }, not UNKNOWN_MEMBER_ID")

        # A new member joins (a rebalance); then it leaves: at once the
        # survivor's heartbeat says so, and it takes everything back.
        joining = _Pending(late.join)
        wait_for(lambda: stays.heartbeat() == E.REBALANCE_IN_PROGRESS, 10,
                 "a Heartbeat answering REBALANCE_IN_PROGRESS once a new member joined")
        both = [stays.join(), joining.result(30, "the new member's JoinGroup")]
        assert [(j.error, j.generation) for j in both] == [(E.NONE, 3)] * 2, both
        got = _sync_round(stays, [late], {stays.member_id: b"ms:0,1", late.member_id: b"ms:2,3"})
        assert got[late.member_id] == (E.NONE, b"ms:2,3"), got
        assert late.leave() == E.NONE
        after_leave = stays.heartbeat()
        assert after_leave == E.REBALANCE_IN_PROGRESS, (
            f"the first Heartbeat after the other member's LeaveGroup answered "
            f"{E.name(after_leave)}, not REBALANCE_IN_PROGRESS")
        alone = stays.join()
        assert (alone.error, alone.generation, list(alone.members)) == (
            E.NONE, 4, [stays.member_id]), f"after a LeaveGroup the survivor rejoined as {alone}"
        assert stays.sync({stays.member_id: everything}) == (E.NONE, everything)
        assert stays.leave() == E.NONE
    finally:
        for m in (a, b, late):
            m.close()


@pytest.mark.smoke
def test_a_member_waiting_in_a_rebalance_stays_and_one_that_never_rejoins_is_dropped(chaos_run):
    """docs/design.md#groups, "Membership". A member whose JoinGroup waits
    for a rebalance is not removed for missing heartbeats meanwhile, however
    long past its session timeout the others take to join again. A member
    that keeps heartbeating but does not join again is dropped when the
    rebalance timeout runs out, not sooner, and the rebalance completes
    without it."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    group = "chaoslog-groups-waiting"
    c = _coordinator(run, zk, group)
    rebalance_s = 8.0
    waits = _Member(run, c, group, "W", session_ms=2000, rebalance_ms=int(rebalance_s * 1000))
    other = _Member(run, c, group, "O", session_ms=30000, rebalance_ms=int(rebalance_s * 1000))
    try:
        jw, jo = _join_together([waits, other])
        assert (jw.error, jo.error, jw.generation, jo.generation) == (E.NONE, E.NONE, 1, 1), (jw, jo)
        leader, follower = (waits, other) if jw.leader == waits.member_id else (other, waits)
        _sync_round(leader, [follower], {waits.member_id: b"w", other.member_id: b"o"})

        # W joins again with other metadata: a rebalance; its JoinGroup waits for O.
        pending = _Pending(waits.join, [("range", b"W-2")])
        wait_for(lambda: other.heartbeat() == E.REBALANCE_IN_PROGRESS, 10,
                 "O's Heartbeat answering REBALANCE_IN_PROGRESS once W joined again")
        started = time.monotonic()
        while time.monotonic() - started < waits.session_ms / 1000 + 1.0:
            assert other.heartbeat() == E.REBALANCE_IN_PROGRESS
            time.sleep(0.3)   # O heartbeats on, for longer than W's session timeout
        assert not pending.done(), f"W's JoinGroup was answered {pending.result(0, 'W')} early"
        jo = other.join()
        assert jo.leader in (waits.member_id, other.member_id) and (
            jo.leader != other.member_id or set(jo.members) == {waits.member_id, other.member_id}), (
            f"W waited in its JoinGroup past its session timeout; O, joining again, was answered "
            f"{E.name(jo.error)} generation {jo.generation} with leader {jo.leader} and members "
            f"{sorted(jo.members)}: W ({waits.member_id}) was removed")
        jw = pending.result(15, "W's JoinGroup once O joined again")
        assert (jw.error, jw.generation, jo.error, jo.generation) == (E.NONE, 2, E.NONE, 2), (
            f"W waited in its JoinGroup past its session timeout; the rebalance then answered W "
            f"{E.name(jw.error)} generation {jw.generation}, O {E.name(jo.error)} generation "
            f"{jo.generation}: W must not have been removed")
        lead = jw if jw.leader == waits.member_id else jo
        assert set(lead.members) == {waits.member_id, other.member_id}, lead
        leader, follower = (waits, other) if jw.leader == waits.member_id else (other, waits)
        _sync_round(leader, [follower], {waits.member_id: b"w", other.member_id: b"o"})

        # W joins again with other metadata; O heartbeats but never joins.
        asked = time.monotonic()
        pending = _Pending(waits.join, [("range", b"W-3")])
        wait_for(lambda: other.heartbeat() == E.REBALANCE_IN_PROGRESS, 10,
                 "O's Heartbeat answering REBALANCE_IN_PROGRESS once W joined again")

        def o_heartbeats_until_w_is_answered() -> bool:
            other.heartbeat()
            return pending.done()

        wait_for(o_heartbeats_until_w_is_answered, rebalance_s + 15,
                 "W's JoinGroup answered once the rebalance timeout ran out", interval=0.3)
        jw = pending.result(0, "W's JoinGroup")
        took = pending.at - asked
        assert (jw.error, jw.generation, list(jw.members)) == (E.NONE, 3, [waits.member_id]), (
            f"O never joined again: the rebalance answered W {jw}, want generation 3 with W alone")
        assert took >= rebalance_s - 0.2, (
            f"the rebalance completed without O {took:.1f} s after it began: the rebalance "
            f"timeout is {rebalance_s:g} s")
        assert other.heartbeat() == E.UNKNOWN_MEMBER_ID, "O, dropped, is still a member"
        assert waits.sync({waits.member_id: b"all"}) == (E.NONE, b"all")
        assert waits.leave() == E.NONE
    finally:
        waits.close()
        other.close()


@pytest.mark.smoke
def test_a_committed_offset_survives_its_coordinator_s_failure(chaos_run, nemesis):
    """docs/design.md#groups, "Commits" and "Membership". Two groups of one
    offsets partition commit (one as a member of generation 1, the other
    without a generation; one offset twice: the last commit wins). The
    coordinator crashes (SIGKILL, its session expired): FindCoordinator
    names the partition's new leader, whose OffsetFetch answers exactly
    what was acknowledged. The new coordinator loaded the membership too:
    the member goes on in generation 1 (its Heartbeat and commit are
    taken), DescribeGroups shows it Stable, and a former generation is
    refused."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    _topic(run, "cf", 2)
    g1, g2 = _groups_sharing_a_partition("chaoslog-groups-failover", 2)
    partition = _offsets_partition(g1)
    c = _coordinator(run, zk, g1)
    p0, p1 = ("cf", 0), ("cf", 1)
    member = _Member(run, c, g1, "M")
    try:
        j = member.join()
        assert (j.error, j.generation) == (E.NONE, 1), j
        assert member.sync({member.member_id: b"cf"}) == (E.NONE, b"cf")
        assert member.commit({p0: 5, p1: 3}) == {p0: E.NONE, p1: E.NONE}
        assert member.commit({p0: 8}) == {p0: E.NONE}
        got = kafka_wire.offset_commit(member.conn, g2, {p0: 11}, metadata="g2")
        assert got == {p0: E.NONE}, _names(got)
    finally:
        member.close()
    acknowledged = {g1: {p0: (8, ""), p1: (3, "")}, g2: {p0: (11, "g2")}}

    killed = crash_broker(run, nemesis, c)
    survivors = [b for b in (1, 2, 3) if b != c]
    new = wait_for(lambda: zk.lai(OFFSETS, partition).leader in survivors
                   and zk.lai(OFFSETS, partition).leader, 30,
                   f"a new leader of {OFFSETS}/{partition} once broker {c} crashed")
    assert _coordinator(run, zk, g1, asking=survivors) == new
    loaded = {g: _ask(run, new, kafka_wire.offset_fetch, g) for g in (g1, g2)}
    assert loaded == {g: (E.NONE, o) for g, o in acknowledged.items()}, (
        f"after coordinator {c} crashed, its successor {new} answers OffsetFetch "
        f"{ {g: (E.name(e), o) for g, (e, o) in loaded.items()} }; acknowledged were "
        f"{acknowledged}")
    listed = _offsets(run, new, g1, [p0, p1])
    assert listed == {p0: 8, p1: 3}, f"OffsetFetch of {g1}'s listed partitions: {listed}"

    conn = _connect(run, new)
    try:
        beat = kafka_wire.heartbeat(conn, g1, 1, member.member_id)
        stale = kafka_wire.offset_commit(conn, g1, {p0: 2}, generation=0,
                                         member_id=member.member_id)[p0]
        commit = kafka_wire.offset_commit(conn, g1, {p0: 9}, generation=1,
                                          member_id=member.member_id)[p0]
        state = kafka_wire.describe_group(conn, g1)
    finally:
        conn.close()
    assert beat == E.NONE, (
        f"the new coordinator answered the member's Heartbeat {E.name(beat)}: it did not "
        f"load the group's membership")
    assert stale == E.ILLEGAL_GENERATION, (
        f"the new coordinator answered a commit of generation 0 {E.name(stale)}")
    assert commit == E.NONE, (
        f"the new coordinator answered the member's commit {E.name(commit)}")
    assert _offsets(run, new, g1, [p0]) == {p0: 9}
    assert state[:2] == (E.NONE, "Stable"), f"the new coordinator describes {g1} as {state}"
    killed.stop()
    _healed(zk, f" after broker {c} restarted")


@pytest.mark.smoke
def test_a_commit_is_acknowledged_only_once_the_offsets_partition_s_isr_holds_it(
        chaos_run, nemesis):
    """docs/design.md#groups, "Commits", #acks. The coordinator C of a group
    is cut off from the other brokers (not from ZooKeeper). A commit then
    appended waits for the followers: it must not be acknowledged (it ends
    REQUEST_TIMED_OUT after offsets.commit.timeout.ms, or
    COORDINATOR_NOT_AVAILABLE when the ISR shrinks below min.insync.replicas
    first), and OffsetFetch keeps answering the last acknowledged offset
    meanwhile and after. Once C's ISR is C alone, a commit is refused
    (COORDINATOR_NOT_AVAILABLE) and not written. Healed, commits succeed
    again."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    _topic(run, "ca", 1)
    group = "chaoslog-groups-acks"
    partition = _offsets_partition(group)
    c = _coordinator(run, zk, group)
    tp = ("ca", 0)
    conn = _connect(run, c)
    waiting_conn = _connect(run, c)
    try:
        assert kafka_wire.offset_commit(conn, group, {tp: 10}) == {tp: E.NONE}
        nemesis.inject("partition-isolate", f"broker-{c}", among="brokers")
        asked = time.monotonic()
        waiting = _Pending(kafka_wire.offset_commit, waiting_conn, group, {tp: 20})

        def moved() -> dict | None:
            now = _offsets(run, c, group, [tp])
            return now if now != {tp: 10} else None

        seen = wait_until(moved, 1.0, 0.2)
        assert seen is None, (
            f"while a commit of 20 waited for followers cut off from the coordinator, OffsetFetch "
            f"answered {seen} (the commit answered "
            f"{_names(waiting.result(0, 'the commit')) if waiting.done() else 'nothing yet'})")
        got = waiting.result(COMMIT_TIMEOUT_S + LAG_S + 20, "the commit waiting for the followers")
        assert got[tp] in (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE), (
            f"a commit appended while the coordinator was cut off from every follower was "
            f"answered {E.name(got[tp])} after {waiting.at - asked:.1f} s: acknowledged before "
            f"the offsets topic's ISR held it")
        after = _offsets(run, c, group, [tp])
        assert after == {tp: 10}, (
            f"a commit answered {E.name(got[tp])} changed OffsetFetch's answer to {after}")

        wait_for(lambda: zk.lai(OFFSETS, partition).isr == (c,), LAG_S + 20,
                 f"the ISR of {OFFSETS}/{partition} shrinking to broker {c}")
        got = kafka_wire.offset_commit(conn, group, {tp: 30})
        assert got == {tp: E.COORDINATOR_NOT_AVAILABLE}, (
            f"a commit while the offsets partition's ISR was [{c}], below min.insync.replicas 2, "
            f"was answered {_names(got)}, not COORDINATOR_NOT_AVAILABLE")
        assert _offsets(run, c, group, [tp]) == {tp: 10}, "a refused commit was written"
    finally:
        conn.close()
        waiting_conn.close()
        nemesis.heal()
    _healed(zk, " after the cut healed")
    c = _coordinator(run, zk, group)
    assert _ask(run, c, kafka_wire.offset_commit, group, {tp: 40}) == {tp: E.NONE}
    assert _offsets(run, c, group, [tp]) == {tp: 40}


@pytest.mark.smoke
def test_a_coordinator_that_loses_its_partition_sends_the_waiting_members_away(chaos_run):
    """docs/design.md#groups, "becoming follower". The leadership of a
    group's offsets partition moves to another broker while, in one group,
    a new member's JoinGroup waits for a rebalance and, in another of the
    same partition, a follower's SyncGroup waits for the leader's
    assignment. Both must be answered NOT_COORDINATOR at once (not when the
    rebalance timeout runs out), and every later request to the old
    coordinator too; the new one answers the committed offsets and knows
    the last generation written."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    _topic(run, "mv", 1)
    g1, g2 = _groups_sharing_a_partition("chaoslog-groups-move", 2)
    partition = _offsets_partition(g1)
    c = _coordinator(run, zk, g1)
    tp = ("mv", 0)
    # Nobody's session or rebalance may run out before the move: 2 minutes.
    long = dict(session_ms=120000, rebalance_ms=120000)
    stable = _Member(run, c, g1, "S", **long)
    newcomer = _Member(run, c, g1, "N", **long)
    x, y = _Member(run, c, g2, "X", **long), _Member(run, c, g2, "Y", **long)
    try:
        assert stable.join().error == E.NONE
        assert stable.sync({stable.member_id: b"mv"}) == (E.NONE, b"mv")
        assert stable.commit({tp: 6}) == {tp: E.NONE}
        join_waits = _Pending(newcomer.join)
        wait_for(lambda: stable.heartbeat() == E.REBALANCE_IN_PROGRESS, 10,
                 "S's Heartbeat answering REBALANCE_IN_PROGRESS once N joined")
        jx, jy = _join_together([x, y])
        assert (jx.error, jy.error) == (E.NONE, E.NONE), (jx, jy)
        follower = y if jx.leader == x.member_id else x
        sync_waits = _Pending(follower.sync)
        assert not wait_until(sync_waits.done, 0.5, 0.1), (
            "a follower's SyncGroup was answered before the leader's")

        to = _move_offsets_leadership(run, zk, partition)
        moved = time.monotonic()
        joined = join_waits.result(15, "the JoinGroup waiting at the old coordinator")
        synced = sync_waits.result(15, "the SyncGroup waiting at the old coordinator")
        assert (joined.error, synced[0]) == (E.NOT_COORDINATOR, E.NOT_COORDINATOR), (
            f"when broker {c} stopped leading {OFFSETS}/{partition}, the JoinGroup waiting there "
            f"was answered {E.name(joined.error)} and the SyncGroup {E.name(synced[0])}, not "
            f"NOT_COORDINATOR")
        assert max(join_waits.at, sync_waits.at) - moved < 10, "answered late"
        later = {"Heartbeat": stable.heartbeat(), "commit": stable.commit({tp: 7})[tp],
                 "OffsetFetch": kafka_wire.offset_fetch(stable.conn, g1, [tp])[0],
                 "JoinGroup": kafka_wire.join_group(stable.conn, g1).error}
        wrong = {k: E.name(v) for k, v in later.items() if v != E.NOT_COORDINATOR}
        assert not wrong, f"broker {c}, no longer the coordinator, answered {wrong}"
        assert _coordinator(run, zk, g1) == to
        assert _offsets(run, to, g1, [tp]) == {tp: 6}, (
            f"the new coordinator answers {_offsets(run, to, g1, [tp])}; 6 was committed")
        # The new coordinator loaded generation 1 with S, the last written:
        # the newcomer's rebalance was never completed, so it is not there.
        hb = _ask(run, to, kafka_wire.heartbeat, g1, stable.generation, stable.member_id)
        assert hb == E.NONE, f"the new coordinator answered S's Heartbeat {E.name(hb)}"
    finally:
        for m in (stable, newcomer, x, y):
            m.close()
    _healed(zk)


@pytest.mark.smoke
def test_a_member_goes_on_committing_after_its_group_moved(chaos_run):
    """docs/design.md#groups, "Membership": the new coordinator loads the
    group's last written generation with its members, as Kafka does, so a
    member of generation 1 commits on there after the leadership of the
    group's offsets partition moved, and a commit of another generation or
    member is refused and not written."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    _topic(run, "ig", 1)
    group = "chaoslog-groups-moved-commit"
    tp = ("ig", 0)
    member = _Member(run, _coordinator(run, zk, group), group, "M")
    try:
        assert member.join().error == E.NONE
        assert member.sync({member.member_id: b"ig"}) == (E.NONE, b"ig")
        assert member.commit({tp: 1}) == {tp: E.NONE}
    finally:
        member.close()
    to = _move_offsets_leadership(run, zk, _offsets_partition(group))
    assert _coordinator(run, zk, group) == to
    refused = {
        "another generation": _ask(run, to, kafka_wire.offset_commit, group, {tp: 5},
                                   generation=member.generation + 1,
                                   member_id=member.member_id)[tp],
        "an unknown member": _ask(run, to, kafka_wire.offset_commit, group, {tp: 6},
                                  generation=member.generation, member_id="stranger")[tp]}
    assert refused == {"another generation": E.ILLEGAL_GENERATION,
                       "an unknown member": E.UNKNOWN_MEMBER_ID}, {
        k: E.name(v) for k, v in refused.items()}
    got = _ask(run, to, kafka_wire.offset_commit, group, {tp: 2}, generation=member.generation,
               member_id=member.member_id)
    assert got == {tp: E.NONE}, (
        f"after its group moved to broker {to}, a member's commit of generation "
        f"{member.generation} was answered {_names(got)}")
    err, found = _ask(run, to, kafka_wire.offset_fetch, group, [tp])
    assert err == E.NONE and found[tp][0] == 2, f"OffsetFetch answered {E.name(err)} {found}"


@pytest.mark.smoke
def test_a_deposed_coordinator_cut_off_from_its_followers_hands_out_no_assignment(
        chaos_run, nemesis):
    """docs/design.md#groups, "Membership", and #g-groups (issue 34: the
    pressure run found two coordinators of one group at once). The
    group's coordinator is cut off from the other brokers, not from its
    clients nor ZooKeeper, and its offsets partition's leadership moves: the
    controller's LeaderAndIsr cannot reach it, so it still believes it
    coordinates. A member that joins it there must get no assignment: the
    coordinator cannot replicate the generation (its followers fetch from
    the new leader), and a generation is handed out only once written. A
    coordinator that handed it out gave the member every partition from the
    stale offsets it holds, while the group's real members own them too."""
    run = chaos_run
    zk = ZkView(run.zk)
    _offsets_topic_ready(run, zk)
    _topic(run, "zc", 2)
    group = "chaoslog-groups-deposed"
    partition = _offsets_partition(group)
    c = _coordinator(run, zk, group)
    if c == zk.controller():   # the controller knows what it decided: move the group away
        c = _move_offsets_leadership(run, zk, partition)
        c = _coordinator(run, zk, group)
    assert c != zk.controller()
    tp = ("zc", 0)
    assert _ask(run, c, kafka_wire.offset_commit, group, {tp: 3}) == {tp: E.NONE}
    member = _Member(run, c, group, "Z", session_ms=60000, rebalance_ms=60000)
    try:
        nemesis.inject("partition-isolate", f"broker-{c}", among="brokers")
        to = _move_offsets_leadership(run, zk, partition)
        wait_for(lambda: c not in zk.lai(OFFSETS, partition).isr, LAG_S + 30,
                 f"broker {c}, cut off, out of the ISR of {OFFSETS}/{partition}")
        assert _ask(run, to, kafka_wire.offset_commit, group, {tp: 9}) == {tp: E.NONE}
        joined = member.join()
        # A join may be refused already (the deposed coordinator learnt of it):
        # then there is nothing to hand out either.
        if joined.error == E.NONE:
            err, assignment = member.sync({member.member_id: b"zc-0,zc-1"})
            assert err != E.NONE and assignment == b"", (
                f"broker {c}, no longer the leader of {OFFSETS}/{partition} and cut off from its "
                f"followers, handed out an assignment (generation {member.generation}): "
                f"{E.name(err)} {assignment!r}")
        else:
            assert joined.error in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE), joined
    finally:
        member.close()
        nemesis.heal()
    assert _coordinator(run, zk, group) == to
    assert _offsets(run, to, group, [tp]) == {tp: 9}
    _healed(zk, f" after broker {c} was cut off")


# -- a consumer group under faults -----------------------------------------------------------------

PRESSURE_SEED = int(os.environ.get("CHAOSLOG_GROUPS_PRESSURE_SEED", "0"))
PRESSURE_S = float(os.environ.get("CHAOSLOG_GROUPS_PRESSURE_SECONDS", "70"))
# Two lanes of faults anywhere (roles drawn as the pressure suite's), one
# lane aimed at the group's coordinator (`coordinator:GROUP`).
ANYWHERE = {"kill": 2, "stop": 1, "pause": 2, "zk-expire": 2, "partition-isolate": 2,
            "partition-halves": 1, "partition-zk": 1, "partition-clients": 1, "move-leader": 1}
AT_COORDINATOR = {"kill": 2, "pause": 1, "stop": 1, "zk-expire": 1, "partition-isolate": 1}


@pytest.mark.pressure
def test_a_consumer_group_under_faults_aimed_at_its_coordinator(workload, nemesis):
    """docs/design.md#groups, #g-durability. Two consumers in one group
    (subscribe, a synchronous commit after each poll), crashed and started
    again now and then, read a topic acks=all producers write, while kills,
    clean stops, pauses, session expiries and partitions overlap, one lane
    of them aimed at the group's coordinator. Every oracle must hold,
    the group's too: no acknowledged commit regresses (commit-regressed), no
    assignment resumes past a commit over records the group never read
    (resume-past-commit), no record below the final commit goes unread
    (group-skipped)."""
    run = workload({"gp": 4}, replication_factor=3, rate=200, producers=2, slots=3,
                   consumers=2, fetchers=1, crash_every_s=15, sub_via="subscribe",
                   commit="manual",
                   mix=[{"acks": "all", "idempotent": True, "max_in_flight": 5},
                        {"acks": "all"}])
    group = run.workload.group
    spec = run.cluster.spec
    common = dict(duration_s=PRESSURE_S, interval_s=(2, 6), fault_duration_s=(4, 10), quiet_s=8,
                  brokers=spec.brokers, zookeepers=spec.zookeepers, lag_s=LAG_S)
    anywhere = make_schedule(PRESSURE_SEED, ANYWHERE, overlap=2, **common)
    aimed = make_schedule(PRESSURE_SEED + 1, AT_COORDINATOR, overlap=1,
                          targets={f: f"coordinator:{group}" for f in AT_COORDINATOR}, **common)
    steps = anywhere.steps + [dataclasses.replace(s, lane=s.lane + 2) for s in aimed.steps]
    weights = {f: ANYWHERE.get(f, 0) + AT_COORDINATOR.get(f, 0) for f in {*ANYWHERE, *AT_COORDINATOR}}
    schedule = Schedule(PRESSURE_SEED, PRESSURE_S, 8.0,
                        sorted(steps, key=lambda s: (s.at_s, s.lane)),
                        {**anywhere.settings, "overlap": 3, "faults": weights,
                         "lane 2": {"target": f"coordinator:{group}", "faults": AT_COORDINATOR}})
    played = nemesis(schedule)
    run.finish(quiet_s=8.0, final_timeout_s=90, settle_s=5.0)
    at_coordinator = [d for d in played.done if "target=coordinator:" in d.get("detail", "")]
    assert at_coordinator, (
        f"no fault hit the coordinator of {group}: skipped {played.skipped}")
    assert_valid(run)
