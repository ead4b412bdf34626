"""Single guarantees, each driven to the moment it is about.

Randomized pressure (test_suite_pressure.py) rarely lines up the instants
some rules of the design are about: the ISR shrinking under a waiting
acks=all write, a follower rejoining the ISR that is failed-over to at once,
a deposed leader still reachable by clients, a request from a controller
that has been replaced. These scenarios make each happen on purpose, with
raw Kafka requests (harness/kafka_wire.py) so that every answer's error code
is seen, on one cluster shared by the module (fixed configuration with a
lag time of LAG_S, so that each takes seconds).
"""
from __future__ import annotations

import re
import threading
import time

import pytest

from cluster import admin, zkpaths
from cluster.protocol import errors as E
from contracts.deadline import wait_until
from faults.injectors.zookeeper import expire_session, read_session
from harness import kafka_wire, probes
from harness.replicas import HW_CHECKPOINT, high_watermarks, read_broker
from suite_helpers import (SAFE, SESSION_TIMEOUT_S, AckWatch, ZkView, assert_valid, crash_broker,
                           expire_broker_session, wait_for)

pytestmark = [pytest.mark.docker, pytest.mark.smoke]

LAG_S = 5.0
CHECKPOINT_S = 0.5
# The controller gives up on a request after this long and sends it again:
# shorter than a cut a scenario makes, so that the resending is seen.
CONTROLLER_TIMEOUT_S = 5.0
# A sparse-index entry every few small batches, so that truncations cut
# through index entries as they do on a busy broker.
CONFIG = {**SAFE, "replica.lag.time.max.ms": int(LAG_S * 1000),
          "replica.high.watermark.checkpoint.interval.ms": int(CHECKPOINT_S * 1000),
          "log.index.interval.bytes": 128,
          "controller.socket.timeout.ms": int(CONTROLLER_TIMEOUT_S * 1000)}


@pytest.fixture(scope="module")
def shared_cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, broker_config=CONFIG)


@pytest.fixture
def cluster(shared_cluster):
    shared_cluster.wait_brokers_registered(timeout=90)
    return shared_cluster


def _connect(run, broker: int, timeout: float = 60.0) -> kafka_wire.KafkaConnection:
    node = run.cluster.node(f"broker-{broker}")
    return kafka_wire.KafkaConnection(node.host, node.port, client_id="chaoslog-scenario",
                                      timeout=timeout)


def _connect_leader(run, broker: int, topic: str, timeout: float = 30.0
                    ) -> kafka_wire.KafkaConnection:
    """A connection to `broker` once it serves as `topic`/0's leader.
    ZooKeeper names a leader before the controller's LeaderAndIsr has reached
    it; until then the broker answers UNKNOWN_TOPIC_OR_PARTITION."""
    conn = _connect(run, broker)
    try:
        wait_for(lambda: kafka_wire.list_offset(conn, topic, 0, -1)[0] == E.NONE, timeout,
                 f"broker {broker} serving as the leader of {topic}/0")
    except BaseException:
        conn.close()
        raise
    return conn


def _create_led_by(run, zk: ZkView, topic: str, replicas: list[int]) -> None:
    """Create `topic` (one partition on `replicas`, the first preferred) and
    wait until the first leads it with a full ISR."""
    run.create_topics({topic: 1}, len(replicas), assignment={topic: {0: replicas}})
    wait_for(lambda: (len(zk.lai(topic, 0).isr) == len(replicas)
                      and zk.lai(topic, 0).leader == replicas[0]), 30,
             f"broker {replicas[0]} leading {topic}/0 with a full ISR")



def _led_by_one_preferring_the_controller(run, zk: ZkView, topic: str) -> tuple[int, int, int]:
    """Create `topic` (one partition, three replicas) led by L, not the
    controller C, then reorder its replicas so that C is the preferred one
    while L still leads (a preferred election then moves the leadership to
    C with one controller decision). Returns (C, L, the third broker)."""
    c = wait_for(zk.controller, 30, "a controller")
    leader, other = [b for b in (1, 2, 3) if b != c]
    _create_led_by(run, zk, topic, [leader, other, c])
    admin.reassign(run.zk, {(topic, 0): [c, leader, other]})
    wait_for(lambda: zk.assignment(topic)[0] == (c, leader, other)
             and run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, 30, f"{topic}/0 reordered")
    return c, leader, other


def _led_by_a_follower_of_the_controller(run, zk: ZkView, topic: str) -> int:
    """Create `topic` (one partition, three replicas) led by a broker that is
    not the controller; wait for its full ISR; return the leader."""
    controller = wait_for(zk.controller, 30, "a controller")
    leader = next(b for b in (1, 2, 3) if b != controller)
    _create_led_by(run, zk, topic, [leader] + [b for b in (1, 2, 3) if b != leader])
    return leader



def _log_end(run, broker: int, topic: str) -> int:
    """The log end offset of `broker`'s replica of `topic`/0, read from its files."""
    return read_broker(run.cluster.log_dir(f"broker-{broker}"), {topic})[0]["log_end_offset"]


def _batches(run, broker: int, topic: str) -> dict[int, tuple]:
    """`broker`'s replica of `topic`/0, read from its files: base offset ->
    (last offset, leader epoch, CRC) of each record batch."""
    return {base: (last, epoch, crc) for base, last, epoch, crc
            in read_broker(run.cluster.log_dir(f"broker-{broker}"), {topic})[0]["batches"]}


def _assert_holds_the_leader_s_batches(run, leader: int, follower: int, topic: str,
                                       how: str) -> None:
    """`follower`'s replica of `topic`/0 is a prefix of `leader`'s: the same
    batch (last offset, leader epoch, CRC) at every base offset both have,
    and no batch start the leader lacks (docs/design.md#g-replicas-agree)."""
    on_l, on_f = _batches(run, leader, topic), _batches(run, follower, topic)
    differ = {o: (on_l[o], on_f[o]) for o in sorted(set(on_l) & set(on_f)) if on_l[o] != on_f[o]}
    assert not differ and set(on_f) <= set(on_l), (
        f"broker {follower}, {how}, disagrees with its leader {leader}: batches (base offset: "
        f"(last offset, leader epoch, CRC) on {leader}, on {follower}) {differ}; batch starts "
        f"only on {follower}: {sorted(set(on_f) - set(on_l))}")


def test_requests_of_a_deposed_controller_are_refused(chaos_run, nemesis):
    """docs/design.md#g-controller-epoch. After a controller failover,
    harness/probes.py sends a follower LeaderAndIsr, StopReplica and
    UpdateMetadata of the previous controller epoch, and LeaderAndIsr of
    the current epoch meant for another broker or for an earlier incarnation
    of itself (a restarted container that took a dead broker's address).
    Each must be refused, and nothing may change: the follower stays a
    follower, serves the leader ZooKeeper names, keeps its replica's files."""
    run = chaos_run
    run.create_topics({"probe": 1}, 3)
    zk = ZkView(run.zk)
    wait_for(lambda: zk.fully_replicated({"probe": 1}), 30, "a full ISR")
    before = zk.controller_epoch()
    nemesis.inject("zk-expire", "controller")
    wait_for(lambda: zk.controller_epoch() > before and zk.controller() is not None, 30,
             "a new controller after the old one's session expired")
    nemesis.heal()
    wait_for(lambda: zk.fully_replicated({"probe": 1}), 30, "a full ISR after the failover")

    results = probes.probe_stale_requests(run.zk, "probe", 0)
    assert all(r.ok for r in results), "\n".join(str(r) for r in results if not r.ok)
    lai = zk.lai("probe", 0)
    follower = next(b for b in sorted(lai.isr) if b != lai.leader)
    node = run.cluster.node(f"broker-{follower}")
    wrong = probes.follower_unchanged(run.zk, "probe", 0, follower, node.host, node.port)
    assert not wrong, wrong
    kept = read_broker(run.cluster.log_dir(f"broker-{follower}"), {"probe"})
    assert [(r["topic"], r["partition"]) for r in kept] == [("probe", 0)], (
        f"broker {follower}'s replica of probe/0 is gone")


def test_partitions_added_while_the_controller_fails_over_are_created_and_led(
        chaos_run, nemesis):
    """docs/design.md#partitions, #controller-failover, #g-recovery. Two
    partitions are asked for (the admin's znode) while the controller is
    frozen; its session expires and another broker takes over. The new
    controller must carry out the request that was waiting when it started:
    both partitions assigned as asked, led with a full ISR, taking acks=all
    writes; and the broker that comes back from the freeze must not act as
    controller on it."""
    run = chaos_run
    zk = ZkView(run.zk)
    run.create_topics({"ap": 1}, 3)
    wait_for(lambda: zk.fully_replicated({"ap": 1}), 30, "a full ISR")
    c = wait_for(zk.controller, 30, "a controller")
    frozen = nemesis.inject("pause", f"broker-{c}")
    try:
        asked = admin.add_partitions(run.zk, "ap", 3)
        expire_broker_session(run, c)
        wait_for(lambda: zk.controller() not in (None, c), 30,
                 f"a controller other than the frozen broker {c}")
    finally:
        frozen.stop()
    wait_for(lambda: zk.fully_replicated({"ap": 3}), 60,
             "ap/1 and ap/2 led with a full ISR after the controller failover")
    got = zk.assignment("ap")
    assert {p: list(got[p]) for p in asked} == asked, (
        f"the partitions asked for were {asked}; ZooKeeper assigns {got}")
    assert run.zk.exists(zkpaths.partitions_add_path("ap")) is None, (
        "the request to add partitions to ap is still pending")
    for p in sorted(asked):
        leader = zk.lai("ap", p).leader
        conn = _connect(run, leader)
        try:
            wait_for(lambda: kafka_wire.produce(conn, "ap", p, [b"x"])[0] == E.NONE, 30,
                     f"an acks=all write to ap/{p} at its leader {leader}")
        finally:
            conn.close()


def test_admin_requests_waiting_through_a_controller_failover_are_carried_out(
        chaos_run, nemesis):
    """docs/design.md#controller-failover, #reassignment, #preferred-election,
    #topics. A reassignment, a preferred election and a topic deletion are
    asked for (the admin's znodes) while the controller is frozen; its
    session expires and another broker takes over. The new controller must
    find the three requests waiting and carry each out: the partition on its
    new replicas with a full ISR, the preferred replica leading, the topic
    gone from ZooKeeper and from every broker's log directory."""
    run = chaos_run
    zk = ZkView(run.zk)
    c = wait_for(zk.controller, 30, "a controller")
    others = [b for b in (1, 2, 3) if b != c]
    # ra/0 moves from [others[0], c] to [others[1], others[0]]; pe/0 is led by
    # others[0] while others[1] is preferred; dt is deleted.
    _create_led_by(run, zk, "ra", [others[0], c])
    _create_led_by(run, zk, "pe", [others[0], others[1], c])
    admin.reassign(run.zk, {("pe", 0): [others[1], others[0], c]})
    wait_for(lambda: zk.assignment("pe")[0] == (others[1], others[0], c)
             and run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, 30, "pe/0 reordered")
    _create_led_by(run, zk, "dt", [c, others[0], others[1]])
    frozen = nemesis.inject("pause", f"broker-{c}")
    try:
        admin.reassign(run.zk, {("ra", 0): [others[1], others[0]]})
        admin.preferred_election(run.zk, "pe")
        admin.delete_topic(run.zk, "dt")
        expire_broker_session(run, c)
        wait_for(lambda: zk.controller() not in (None, c), 30,
                 f"a controller other than the frozen broker {c}")
    finally:
        frozen.stop()
    wait_for(lambda: zk.assignment("ra")[0] == (others[1], others[0])
             and set(zk.lai("ra", 0).isr) == {others[0], others[1]}
             and run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, 60,
             f"ra/0 reassigned to {[others[1], others[0]]} with a full ISR")
    wait_for(lambda: zk.lai("pe", 0).leader == others[1]
             and run.zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION) is None, 60,
             f"the preferred replica {others[1]} leading pe/0")
    wait_for(lambda: run.zk.exists(zkpaths.topic_path("dt")) is None
             and run.zk.exists(zkpaths.delete_topic_path("dt")) is None, 60,
             "topic dt deleted")
    wait_for(lambda: not any(read_broker(run.cluster.log_dir(f"broker-{b}"), {"dt"})
                             for b in (1, 2, 3)), 60,
             "every broker's replica of dt removed from its log directory")


def test_a_topic_created_again_while_a_replica_was_down_does_not_bring_back_its_old_log(
        workload, history, nemesis):
    """docs/design.md#topic-ids, #broker-startup. While a producer and a
    consumer work on `rc`, a follower's broker is crashed; `rc` is deleted
    and created again on the same replicas (recreate-topic, which tells the
    checker when); the broker comes back with the old log on disk. It must
    drop it (another topic id), follow the new topic into its ISR, and then
    lead it without serving one old record: the checker judges the two
    incarnations apart, and a record of the first read from the second is
    `resurrected` (the replicas' files, compared at the end, would show the
    old log too: replica-divergence)."""
    run = workload({"rc": 1}, replication_factor=3, rate=50, producers=2, slots=4, consumers=1,
                   fetchers=1, mix=[{"acks": "all", "idempotent": True}, {"acks": "all"}])
    zk = ZkView(run.zk)
    acks = AckWatch(history)
    wait_for(lambda: zk.fully_replicated({"rc": 1}), 30, "a full ISR on rc/0")
    acks.wait_acks(20, 0, 30, "before the crash")
    leader = zk.lai("rc", 0).leader
    down = next(b for b in zk.assignment("rc")[0] if b != leader)
    crashed = crash_broker(run, nemesis, down)
    wait_for(lambda: down not in zk.lai("rc", 0).isr, 30, f"broker {down} out of rc/0's ISR")
    acks.wait_acks(20, acks.now(), 30, f"with broker {down} down")
    recreated = nemesis.inject("recreate-topic")
    wait_for(recreated.done, 90, "rc deleted and created again")
    recreated.stop()
    assert any("deleted and created again" in n for n in recreated.notes), recreated.notes
    acks.wait_acks(20, acks.now(), 60, "to the new rc")
    crashed.stop()
    wait_for(lambda: down in zk.lai("rc", 0).isr, 60, f"broker {down} in the new rc/0's ISR")
    others = [b for b in zk.assignment("rc")[0] if b != down]
    admin.reassign(run.zk, {("rc", 0): [down, *others]})
    wait_for(lambda: zk.assignment("rc")[0][0] == down
             and run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, 30, "rc/0 reordered")
    admin.preferred_election(run.zk, "rc")
    wait_for(lambda: zk.lai("rc", 0).leader == down, 30, f"broker {down} leading the new rc/0")
    acks.wait_acks(20, acks.now(), 30, f"with broker {down} leading")
    run.finish(quiet_s=2.0, final_timeout_s=60, settle_s=3.0)
    summary = assert_valid(run)
    parts = {p["topic"]: p for p in summary["final_reads"]["partitions"]}
    assert parts["rc"].get("deleted") and parts["rc#1"]["acknowledged"] > 0, parts


def test_isr_shrink_refusals_and_caught_up_rejoin(chaos_run, nemesis):
    """docs/design.md#isr, #acks, on a partition with two replicas (leader L,
    follower F) and min ISR 2:

    1. F is cut off from the other brokers (not from ZooKeeper: the
       controller sees nothing). An acks=all write waits for F.
       Consumers see only the records below the high watermark meanwhile.
    2. L takes F out of the ISR within the lag time (#g-isr-liveness); the
       waiting write is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, not
       success (#g-min-isr); a new acks=all write is refused before it is
       appended: NOT_ENOUGH_REPLICAS.
    3. acks=1 writes go on: with an ISR of one they are committed at once.
    4. The cut heals. The moment ZooKeeper shows F back in the ISR, L is
       killed: F leads and must hold every record L had committed (#g-isr:
       a follower joins only once it holds every committed record)."""
    run = chaos_run
    # i-other lives on broker 3 alone: nothing in this scenario changes it
    run.create_topics({"i": 1, "i-other": 1}, 2, assignment={"i": {0: [1, 2]},
                                                             "i-other": {0: [3]}})
    zk = ZkView(run.zk)
    wait_for(lambda: set(zk.lai("i", 0).isr) == {1, 2}, 30, "a full ISR [1, 2]")
    leader = zk.lai("i", 0).leader
    follower = 3 - leader
    conn = _connect_leader(run, leader, "i")
    try:
        assert kafka_wire.produce(conn, "i", 0, [b"first"])[0] == E.NONE

        nemesis.inject("partition-isolate", f"broker-{follower}", among="brokers")
        waiting: dict[str, int] = {}

        def write_that_waits() -> None:
            c = _connect(run, leader)
            try:
                waiting["error"] = kafka_wire.produce(c, "i", 0, [b"waits"], timeout_ms=30000)[0]
            finally:
                c.close()

        writer = threading.Thread(target=write_that_waits, daemon=True)
        writer.start()

        # Meanwhile a consumer sees the committed record only, never the one
        # waiting for F (#g-committed-reads).
        def uncommitted_seen() -> list[int]:
            r = kafka_wire.fetch(conn, "i", 0, 0)
            return [o for o, _v in r.records if o >= r.high_watermark]
        seen = wait_until(uncommitted_seen, 0.5, 0.1)
        assert not seen, f"a consumer fetch returned offsets {seen} at or past its high watermark"
        # ... and L's high-watermark checkpoint, written meanwhile, stays at
        # what is committed (#g-hw): a restarted L must not count the waiting
        # record as committed.
        hw = kafka_wire.fetch(conn, "i", 0, 0, max_bytes=1).high_watermark
        log_dir = run.cluster.log_dir(f"broker-{leader}")
        since = time.time()
        wait_for(lambda: (log_dir / HW_CHECKPOINT).stat().st_mtime > since + CHECKPOINT_S, 10,
                 f"broker {leader} checkpointing its high watermarks")
        checkpointed = high_watermarks(log_dir).get(("i", 0))
        assert follower in zk.lai("i", 0).isr, "the ISR shrank before the checkpoint was read"
        assert checkpointed is not None and checkpointed <= hw, (
            f"broker {leader} checkpointed high watermark {checkpointed} while {hw} was committed")

        wait_for(lambda: zk.lai("i", 0).isr == (leader,), LAG_S + 15,
                 f"broker {follower} out of the ISR within the lag time ({LAG_S:g} s) + 15 s")
        # The controller hears of the leader's ISR change and tells the
        # brokers (#g-metadata): its own Metadata answers name the new ISR,
        # and still every other partition. (The follower may be the
        # controller: it is cut off from the other brokers, never from itself.)
        cconn = _connect(run, wait_for(zk.controller, 30, "a controller"))
        try:
            wait_for(lambda: kafka_wire.metadata(cconn, ["i"]).partitions[("i", 0)].isr
                     == [leader], 15, f"the controller's Metadata naming the ISR [{leader}]")
            served = kafka_wire.metadata(cconn).partitions
        finally:
            cconn.close()
        assert ("i-other", 0) in served, (
            f"after an UpdateMetadata about i/0, the controller's Metadata serves only "
            f"{sorted(served)}: i-other/0 is gone")
        writer.join(40)
        assert waiting.get("error") == E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, (
            "an acks=all write waiting when the ISR shrank below min.insync.replicas was "
            f"answered {E.name(waiting['error']) if 'error' in waiting else 'nothing'}")
        err, _ = kafka_wire.produce(conn, "i", 0, [b"refused"])
        assert err == E.NOT_ENOUGH_REPLICAS, (
            f"an acks=all write with the ISR below min.insync.replicas was answered "
            f"{E.name(err)}, not refused before it was appended")

        # Enough that F needs several fetches (replica.fetch.max.bytes, 1 MiB).
        for _ in range(40):
            err, _ = kafka_wire.produce(conn, "i", 0, [b"x" * 1000] * 100, acks=1)
            assert err == E.NONE, E.name(err)
        committed = kafka_wire.fetch(conn, "i", 0, 0, max_bytes=1).high_watermark
        assert committed >= 4000, committed
    finally:
        conn.close()

    nemesis.heal()
    wait_for(lambda: follower in zk.lai("i", 0).isr, 60, f"broker {follower} back in the ISR",
             interval=0.01)
    crash_broker(run, nemesis, leader)
    wait_for(lambda: zk.lai("i", 0).leader == follower, 60, f"broker {follower} elected")
    fconn = _connect_leader(run, follower, "i")
    try:
        _err, end = kafka_wire.list_offset(fconn, "i", 0, -1)
    finally:
        fconn.close()
    assert end >= committed, (
        f"broker {follower} rejoined the ISR holding records up to {end} only, while {committed} "
        f"were committed: elected, it lost records consumers had been given")


def test_a_write_waiting_at_a_leader_that_becomes_a_follower_is_refused_at_once(
        chaos_run, nemesis):
    """docs/design.md#leader-and-isr, #acks, #g-durability. Leader L of mf/0
    has followers F (frozen) and C (the controller): an acks=all write to L
    waits for F. A preferred election then makes C leader, well within the
    lag time. L, a follower now, must answer the waiting write
    NOT_LEADER_FOR_PARTITION at once: kept waiting, it could be acknowledged
    for an offset whose record L truncated meanwhile as a follower."""
    run = chaos_run
    zk = ZkView(run.zk)
    c, leader, f = _led_by_one_preferring_the_controller(run, zk, "mf")
    conn = _connect_leader(run, leader, "mf")
    try:
        assert kafka_wire.produce(conn, "mf", 0, [b"committed"])[0] == E.NONE
    finally:
        conn.close()
    frozen = nemesis.inject("pause", f"broker-{f}")
    answer: dict[str, float] = {}

    def write_that_waits() -> None:
        w = _connect(run, leader)
        try:
            answer["error"] = kafka_wire.produce(w, "mf", 0, [b"waits"], timeout_ms=15000)[0]
            answer["at"] = time.monotonic()
        finally:
            w.close()

    writer = threading.Thread(target=write_that_waits, daemon=True)
    writer.start()
    l_dir = run.cluster.log_dir(f"broker-{leader}")
    wait_for(lambda: read_broker(l_dir, {"mf"})[0]["log_end_offset"] == 2, 10,
             f"broker {leader} appending the write that waits")
    admin.preferred_election(run.zk, "mf")
    wait_for(lambda: zk.lai("mf", 0).leader == c, 10, f"broker {c} elected")
    moved = time.monotonic()
    writer.join(20)
    frozen.stop()
    assert answer.get("error") == E.NOT_LEADER_FOR_PARTITION, (
        f"an acks=all write waiting at broker {leader} when it became a follower was answered "
        f"{E.name(answer['error']) if 'error' in answer else 'nothing'}")
    assert answer["at"] - moved < 5, (
        f"the waiting write was answered {answer['at'] - moved:.1f} s after the leadership moved")
    wait_for(lambda: f in zk.lai("mf", 0).isr, 60, f"broker {f} back in the ISR")


def test_an_election_after_a_leader_failure_keeps_a_lagging_replica_out_of_the_isr(
        chaos_run, nemesis):
    """docs/design.md#leader-selection, #broker-failure, #g-isr. oe/0 has
    replicas [L, G, F]: leader L, followers G and F (the controller). G is
    cut off from the other brokers (not from ZooKeeper: it stays registered,
    alive) and leaves the ISR; L then writes records G lacks. When L's
    session expires the controller must elect F, the live ISR member, though
    G comes first among the live replicas; and the new ISR is the old ISR's
    live members: G, alive but behind, must not be written back into it, or
    it could be elected next and lose what L acknowledged."""
    run = chaos_run
    zk = ZkView(run.zk)
    f = wait_for(zk.controller, 30, "a controller")
    leader, g = [b for b in (1, 2, 3) if b != f]
    _create_led_by(run, zk, "oe", [leader, g, f])
    nemesis.inject("partition-isolate", f"broker-{g}", among="brokers")
    wait_for(lambda: set(zk.lai("oe", 0).isr) == {leader, f}, LAG_S + 15,
             f"broker {g} out of the ISR within the lag time ({LAG_S:g} s) + 15 s")
    conn = _connect_leader(run, leader, "oe")
    try:
        assert kafka_wire.produce(conn, "oe", 0, [b"g lacks"] * 10)[0] == E.NONE
    finally:
        conn.close()
    nemesis.inject("zk-expire", f"broker-{leader}")
    elected = wait_for(lambda: (lai := zk.lai("oe", 0)).leader not in (leader, -1) and lai, 30,
                       f"a leader elected after broker {leader}'s session expired",
                       interval=0.01)
    nemesis.heal()
    assert elected.leader == f, (
        f"the election after broker {leader}'s failure made broker {elected.leader} leader "
        f"with ISR {list(elected.isr)}: broker {g} was out of the ISR, broker {f} in it")
    assert g not in elected.isr, (
        f"the election after broker {leader}'s failure wrote ISR {list(elected.isr)}: broker "
        f"{g}, alive but cut off and out of the ISR, was put back in sync")
    wait_for(lambda: g in zk.lai("oe", 0).isr, 60, f"broker {g} back in the ISR")


def test_a_leader_that_cannot_write_its_isr_change_keeps_waiting_for_the_follower(
        chaos_run, nemesis):
    """docs/design.md#isr, #g-fencing, #g-hw. Leader L of nz/0 (not the
    controller) has followers F, cut off from the other brokers, and the
    controller C. After the lag time L wants F out of the ISR, but L is cut
    off from ZooKeeper too: its conditional ISR write cannot succeed. Until
    it does, ZooKeeper names F in sync, and F, elected, would lack whatever
    L acknowledged: no acks=all write may be acknowledged, however fast C
    fetches. Nor may C take L's log end for the high watermark: C's
    checkpoint stays at what was committed."""
    run = chaos_run
    zk = ZkView(run.zk)
    leader = _led_by_a_follower_of_the_controller(run, zk, "nz")
    controller = zk.controller()
    follower = next(b for b in (1, 2, 3) if b not in (leader, controller))
    c_dir = run.cluster.log_dir(f"broker-{controller}")
    conn = _connect_leader(run, leader, "nz")
    answers: list[int] = []
    checkpointed: list[int] = []
    try:
        assert kafka_wire.produce(conn, "nz", 0, [b"committed"] * 10)[0] == E.NONE
        committed = kafka_wire.fetch(conn, "nz", 0, 0, max_bytes=1).high_watermark
        nemesis.inject("partition-isolate", f"broker-{follower}", among="brokers")
        isolated = time.monotonic()
        time.sleep(LAG_S / 2)  # L shrinks no sooner than LAG_S after F's last fetch
        nemesis.inject("partition-zk", f"broker-{leader}")
        # L's session outlives its cut by the session timeout; then the
        # controller elects another leader and C stops fetching from L.
        until = isolated + LAG_S / 2 + SESSION_TIMEOUT_S
        while time.monotonic() < until:
            answers.append(kafka_wire.produce(conn, "nz", 0, [b"not committed"],
                                              timeout_ms=500)[0])
            checkpointed.append(high_watermarks(c_dir).get(("nz", 0), 0))
    finally:
        conn.close()
    nemesis.heal()
    assert E.NONE not in answers, (
        f"broker {leader}, unable to write its ISR change to ZooKeeper, acknowledged acks=all "
        f"writes that broker {follower} (in the ISR ZooKeeper holds) lacks: answers "
        f"{[E.name(a) for a in answers]}")
    assert max(checkpointed) <= committed, (
        f"broker {controller}, a follower, checkpointed high watermark {max(checkpointed)} "
        f"while {committed} records were committed")


def test_a_new_replica_restarted_during_its_reassignment_keeps_its_log(chaos_run, nemesis):
    """docs/design.md#broker-startup, #reassignment, #g-durability. rr/0
    lives on A alone and moves to [A, B, C], B being the controller. C is
    frozen as the move starts (still registered, so the move is accepted):
    B catches up and joins the ISR, C never does, so the reassignment stays
    pending and B is in the new replicas only, not in the assignment. A
    dies (B leads, the only ISR member), then B restarts: at startup B must
    keep the replica a pending reassignment is moving to it. B, elected
    again as the last ISR member, must hold every committed record."""
    run = chaos_run
    zk = ZkView(run.zk)
    b = wait_for(zk.controller, 30, "a controller")
    a, c = [x for x in (1, 2, 3) if x != b]
    run.create_topics({"rr": 1}, 1, assignment={"rr": {0: [a]}})
    wait_for(lambda: zk.lai("rr", 0).leader == a, 30, f"broker {a} leading rr/0")
    conn = _connect_leader(run, a, "rr")
    try:
        for _ in range(10):   # an ISR of one commits acks=1 writes at once
            assert kafka_wire.produce(conn, "rr", 0, [b"r" * 100] * 100, acks=1)[0] == E.NONE
        committed = kafka_wire.fetch(conn, "rr", 0, 0, max_bytes=1).high_watermark
    finally:
        conn.close()
    nemesis.inject("pause", f"broker-{c}")
    admin.reassign(run.zk, {("rr", 0): [a, b, c]})
    wait_for(lambda: b in zk.lai("rr", 0).isr, 30, f"broker {b} in rr/0's ISR")
    killed_a = crash_broker(run, nemesis, a)
    wait_for(lambda: zk.lai("rr", 0).leader == b, 30,
             f"broker {b} leading rr/0 once broker {a} is gone")
    killed_b = crash_broker(run, nemesis, b)
    wait_for(lambda: b not in zk.registered(), 10, f"broker {b} gone")
    assert run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is not None, "the reassignment finished"
    killed_b.stop()
    wait_for(lambda: zk.lai("rr", 0).leader == b, 60, f"broker {b} leading rr/0 again")
    conn = _connect_leader(run, b, "rr")
    try:
        end = kafka_wire.list_offset(conn, "rr", 0, -1)
    finally:
        conn.close()
    killed_a.stop()
    nemesis.heal()
    assert end == (E.NONE, committed), (
        f"broker {b}, restarted while a reassignment was moving rr/0 to it, leads rr/0 with "
        f"end offset {end[1]} ({E.name(end[0])}) while {committed} records were committed")
    wait_for(lambda: run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, 45,
             "the reassignment of rr/0 completing once every broker is back")


def test_a_follower_that_missed_an_epoch_truncates_when_its_old_leader_returns(
        chaos_run, nemesis):
    """docs/design.md#leader-and-isr, #truncation, #g-replicas-agree. Leader
    A's follower C holds records A never committed (the other follower B was
    frozen); C is then cut off from everything. A dies, B leads and writes
    other records at the same offsets; A comes back as B's follower and
    must truncate its uncommitted records; a preferred election makes A leader
    again. Meanwhile C's session expired. When C returns, the controller
    tells it "A leads": the leader it last followed, in a newer epoch. C
    must truncate again (ask A where its last epoch ends), not fetch on from
    its log end: the replicas would disagree at those offsets for good."""
    run = chaos_run
    zk = ZkView(run.zk)
    b = wait_for(zk.controller, 30, "a controller")  # B leads while A is down
    a, c = [x for x in (1, 2, 3) if x != b]
    _create_led_by(run, zk, "ep", [a, b, c])
    conn = _connect_leader(run, a, "ep")
    try:
        assert kafka_wire.produce(conn, "ep", 0, [b"1"] * 10)[0] == E.NONE
        frozen = nemesis.inject("pause", f"broker-{b}")
        for _ in range(5):   # acks=1: A and C hold them, B does not
            assert kafka_wire.produce(conn, "ep", 0, [b"2"] * 10, acks=1)[0] == E.NONE
    finally:
        conn.close()
    wait_for(lambda: _log_end(run, c, "ep") == 60, 10,
             f"broker {c} fetching the records broker {b} lacks")
    nemesis.inject("partition-isolate", f"broker-{c}")
    killed = crash_broker(run, nemesis, a)
    frozen.stop()
    wait_for(lambda: zk.lai("ep", 0).leader == b, 60, f"broker {b} leading ep/0")
    conn = _connect_leader(run, b, "ep")
    try:
        for _ in range(8):   # other records at the offsets C holds, and more,
            # larger: A's truncated index entries point into different bytes
            assert kafka_wire.produce(conn, "ep", 0, [b"3" * 40] * 10, acks=1)[0] == E.NONE
    finally:
        conn.close()
    killed.stop()                            # A restarts: B's follower
    wait_for(lambda: a in zk.lai("ep", 0).isr, 60, f"broker {a} back in the ISR")

    # A, back in sync, holds B's records, not its own uncommitted ones (#truncation)
    on_a, on_b = _batches(run, a, "ep"), _batches(run, b, "ep")
    differ = {o: (on_a[o], on_b[o]) for o in sorted(set(on_a) & set(on_b)) if on_a[o] != on_b[o]}
    assert not differ, (
        f"broker {a}, back in the ISR as broker {b}'s follower, kept records it wrote as leader "
        f"that were never committed: batches (base offset: (last offset, leader epoch, CRC) on "
        f"{a}, on {b}) {differ}")
    wait_for(lambda: c not in zk.registered(), 30, f"broker {c}'s session expiring")
    admin.preferred_election(run.zk, "ep")
    wait_for(lambda: zk.lai("ep", 0).leader == a, 60, f"broker {a} leading ep/0 again")
    nemesis.heal()
    wait_for(lambda: c in zk.lai("ep", 0).isr, 60, f"broker {c} back in the ISR")
    _assert_holds_the_leader_s_batches(run, a, c, "ep", "after missing an epoch")
    # What a truncating follower asks (#leader-epoch): the first epoch ends
    # where the next epoch's first batch begins on the leader.
    first_epoch = min(epoch for _last, epoch, _crc in on_a.values())
    next_start = min(o for o, (_last, epoch, _crc) in on_a.items() if epoch > first_epoch)
    conn = _connect_leader(run, a, "ep")
    try:
        answer = kafka_wire.offset_for_leader_epoch(conn, "ep", 0, first_epoch)
    finally:
        conn.close()
    assert answer == (E.NONE, first_epoch, next_start), (
        f"OffsetForLeaderEpoch({first_epoch}) answered (error, epoch, end offset) {answer}; "
        f"the leader's log has epoch {first_epoch} end at {next_start}")


def test_a_follower_the_controller_cannot_reach_is_fenced_when_its_old_leader_returns(
        chaos_run, nemesis):
    """docs/design.md#fencing, #leader-epoch, #truncation, #g-replicas-agree
    (Kafka's KAFKA-6880). Follower C of zf/0 is cut off from ZooKeeper, not
    from the brokers: it keeps fetching from leader A, and once its session
    expired the controller B sends it nothing. B is frozen while C fetches
    A's uncommitted tail; A freezes and its session expires: B leads. A,
    back as B's follower, replaces that tail with B's records; a preferred
    election makes A leader again. C's next fetch, at the end of its tail,
    names a leader epoch older than A's: A must fence it. Served, C would
    append B's records after its stale tail, and its epoch cache would hide
    that from the truncation it makes when it can hear the controller again:
    the replicas would disagree for good."""
    run = chaos_run
    zk = ZkView(run.zk)
    a = _led_by_a_follower_of_the_controller(run, zk, "zf")
    b = zk.controller()
    c = next(x for x in (1, 2, 3) if x not in (a, b))
    conn = _connect_leader(run, a, "zf")
    try:
        assert kafka_wire.produce(conn, "zf", 0, [b"1"] * 10)[0] == E.NONE
        nemesis.inject("partition-zk", f"broker-{c}")   # C keeps its links to the brokers
        # B stays frozen for less than a session timeout, and A freezes
        # within the lag time of B's freeze: B leaves neither the brokers
        # nor the ISR. A record first wakes B's waiting fetch: the answer in
        # B's socket when it wakes up must not hold A's tail. (All of it
        # takes well under a second.)
        frozen_b = nemesis.inject("pause", f"broker-{b}")
        assert kafka_wire.produce(conn, "zf", 0, [b"2"], acks=1)[0] == E.NONE
        wait_for(lambda: _log_end(run, c, "zf") == 11, 5, f"broker {c} fetching offset 10",
                 interval=0.01)
        assert kafka_wire.produce(conn, "zf", 0, [b"3"] * 5, acks=1)[0] == E.NONE
        wait_for(lambda: _log_end(run, c, "zf") == 16, 5,
                 f"broker {c} fetching broker {a}'s tail 11..15", interval=0.01)
    finally:
        conn.close()
    frozen_a = nemesis.inject("pause", f"broker-{a}")
    frozen_b.stop()    # A, frozen, answers none of B's fetches
    expire_broker_session(run, c)   # first: B's election must not be sent to C
    expire_broker_session(run, a)
    wait_for(lambda: zk.lai("zf", 0).leader == b, 30, f"broker {b} leading zf/0")
    b_end = _log_end(run, b, "zf")
    assert b_end <= 11, (f"broker {b}, elected, holds broker {a}'s tail (log end {b_end}): "
                         f"the scenario did not play out")
    frozen_a.stop()    # A registers again and follows B
    conn = _connect_leader(run, b, "zf")
    try:   # one record a batch: A's log gets a batch start at C's log end
        for _ in range(16 + 2 - b_end):
            assert kafka_wire.produce(conn, "zf", 0, [b"4"], acks=1)[0] == E.NONE
    finally:
        conn.close()
    wait_for(lambda: a in zk.lai("zf", 0).isr, 60, f"broker {a} back in the ISR")
    admin.preferred_election(run.zk, "zf")
    wait_for(lambda: zk.lai("zf", 0).leader == a, 60, f"broker {a} leading zf/0 again")
    _connect_leader(run, a, "zf").close()
    # C's next fetch, within replica.fetch.backoff.ms (1 s) of the last one
    # A refused as a follower: fenced, C's log stays as it is
    wait_until(lambda: _log_end(run, c, "zf") > 16, 5, 0.1)
    nemesis.heal()
    wait_for(lambda: c in zk.lai("zf", 0).isr, 60, f"broker {c} back in the ISR")
    _assert_holds_the_leader_s_batches(
        run, a, c, "zf", f"which the controller could not reach while the leadership went "
                         f"{a} -> {b} -> {a}")


def test_a_topic_created_again_does_not_get_the_deleted_topic_s_records(chaos_run, nemesis):
    """docs/design.md#topic-ids, #g-topics, #g-broker-failure. Topic tt
    (replicas [D, A, B], D preferred) holds records "old"; D is killed, tt
    deleted and created again on the same replicas, and A leads it with
    records "new". When D returns it still holds tt-0 under that name: it
    must drop it, not serve it. D, made leader by a preferred election, must
    serve exactly the new topic's records. Topic td, created while its only
    replica D is down, gets D as its leader when D returns."""
    run = chaos_run
    zk = ZkView(run.zk)
    controller = wait_for(zk.controller, 30, "a controller")
    d = next(b for b in (1, 2, 3) if b != controller)
    a, b = [x for x in (1, 2, 3) if x != d]
    _create_led_by(run, zk, "tt", [d, a, b])
    conn = _connect_leader(run, d, "tt")
    try:
        assert kafka_wire.produce(conn, "tt", 0, [b"old"] * 20)[0] == E.NONE
    finally:
        conn.close()
    killed = crash_broker(run, nemesis, d)
    wait_for(lambda: d not in zk.registered(), 10, f"broker {d} gone")
    admin.delete_topic(run.zk, "tt", wait=True, timeout=60)
    # (through ZooKeeper, as the design's admin tool can: CreateTopics
    # refuses replicas on a broker that is not live)
    admin.create_topic(run.zk, "tt", 1, 3, replica_assignment={0: [d, a, b]})
    admin.create_topic(run.zk, "td", 1, 1, replica_assignment={0: [d]})
    wait_for(lambda: zk.lai("tt", 0).leader == a, 30, f"broker {a} leading the new tt/0")
    conn = _connect_leader(run, a, "tt")
    try:
        # A new topic's ISR may still settle (a loaded follower dropped, a
        # leader waiting for the controller's word): retried until written
        # (a refusal after the append leaves a copy: "new" only is what counts).
        wait_for(lambda: kafka_wire.produce(conn, "tt", 0, [b"new"] * 5)[0] == E.NONE, 60,
                 f"broker {a} taking writes for the new tt/0")
    finally:
        conn.close()
    killed.stop()
    wait_for(lambda: zk.lai("td", 0).leader == d, 30,
             f"broker {d} leading td/0, created while it was down")
    wait_for(lambda: d in zk.lai("tt", 0).isr, 60, f"broker {d} in the new tt/0's ISR")
    admin.preferred_election(run.zk, "tt")
    wait_for(lambda: zk.lai("tt", 0).leader == d, 60, f"broker {d} leading the new tt/0")
    conn = _connect_leader(run, d, "tt")
    try:
        got = kafka_wire.fetch(conn, "tt", 0, 0)
    finally:
        conn.close()
    values = [v for _o, v in got.records]
    assert set(values) == {b"new"} and got.high_watermark == len(values) >= 5, (
        f"broker {d}, down while tt was deleted and created again, serves the new tt/0 as "
        f"{values} (high watermark {got.high_watermark}): the deleted topic's records came back")


def test_a_deposed_leader_cut_off_from_its_followers_stops_taking_writes(chaos_run, nemesis):
    """docs/design.md#g-fencing. A leader that loses its leadership while cut
    off from the other brokers does not hear of it: the controller's
    LeaderAndIsr cannot reach it, and clients with old metadata keep writing
    to it. Its followers stop fetching from it, so within the lag time it
    tries to shrink its ISR; that conditional ZooKeeper write fails (the
    controller moved the znode on) and from then on it refuses every write.
    A zombie that shrank its ISR to itself anyway would, with min ISR 1,
    acknowledge acks=all writes nobody else has. The leader here is not the
    controller (the controller knows what it decided)."""
    run = chaos_run
    zk = ZkView(run.zk)
    leader = _led_by_a_follower_of_the_controller(run, zk, "z")
    conn = _connect_leader(run, leader, "z")
    try:
        assert kafka_wire.produce(conn, "z", 0, [b"before"])[0] == E.NONE
        nemesis.inject("partition-isolate", f"broker-{leader}", among="brokers")
        nemesis.inject("move-leader")
        wait_for(lambda: zk.lai("z", 0).leader not in (leader, -1), 60,
                 f"the leadership of z/0 moved away from broker {leader}")
        assert zk.controller() != leader, "the controller moved to the cut-off broker"

        def refuses() -> bool:
            err, _ = kafka_wire.produce(conn, "z", 0, [b"zombie"], acks=1, timeout_ms=5000)
            return err == E.NOT_LEADER_FOR_PARTITION

        wait_for(refuses, LAG_S + 15,
                 f"broker {leader}, deposed and cut off from its followers, refusing writes",
                 interval=0.5)
        err, _ = kafka_wire.produce(conn, "z", 0, [b"zombie-all"], timeout_ms=5000)
        assert err == E.NOT_LEADER_FOR_PARTITION, (
            f"the deposed leader answered an acks=all write with {E.name(err)}")
    finally:
        conn.close()


def test_a_broker_in_controlled_shutdown_does_not_rejoin_the_isr(chaos_run, nemesis):
    """docs/design.md#controlled-shutdown, #isr. A follower stopped with
    SIGTERM asks the controller to take it out of the ISRs first; a fetch it
    sent before the controller's LeaderAndIsr reached the leader must not
    bring it back (a follower joins only after two fetches in the leader's
    current state), or acks=all writes wait for a broker that is leaving.
    Writes flow meanwhile, so the follower's fetches are always in flight;
    ZooKeeper is watched every few milliseconds while the broker stops."""
    run = chaos_run
    run.create_topics({"c": 1}, 3, assignment={"c": {0: [1, 2, 3]}})
    zk = ZkView(run.zk)
    wait_for(lambda: len(zk.lai("c", 0).isr) == 3 and zk.lai("c", 0).leader == 1, 30,
             "broker 1 leading c/0 with a full ISR")
    controller = wait_for(zk.controller, 30, "a controller")
    stopping = 2 if controller != 2 else 3   # a follower, not the controller
    seen: list[tuple[int, tuple[int, ...]]] = []
    stopped = threading.Event()

    def stop() -> None:
        try:
            nemesis.inject("stop", f"broker-{stopping}")
        finally:
            stopped.set()

    def write() -> None:  # acks=1: the leader answers at once, the follower fetches each
        conn = _connect(run, 1)
        try:
            while not stopped.is_set():
                kafka_wire.produce(conn, "c", 0, [b"w"], acks=1)
        finally:
            conn.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    threading.Thread(target=stop, daemon=True).start()

    def record() -> None:
        lai = zk.lai("c", 0)
        if not seen or seen[-1] != (lai.zk_version, lai.isr):
            seen.append((lai.zk_version, lai.isr))

    wait_for(lambda: record() or stopped.is_set(), 60, f"broker {stopping} stopped",
             interval=0.005)
    wait_until(record, 1.0, 0.005)  # and a second more (record() is never truthy)
    writer.join(10)
    left = next((i for i, (_v, isr) in enumerate(seen) if stopping not in isr), None)
    assert left is not None, f"broker {stopping} never left the ISR: {seen}"
    back = [(v, isr) for v, isr in seen[left:] if stopping in isr]
    assert not back, (f"broker {stopping} came back into the ISR during its controlled "
                      f"shutdown: leaderAndISR versions and ISRs seen: {seen}")


def test_idempotent_retries_are_written_once_across_failover_and_restart(chaos_run, nemesis):
    """docs/design.md#g-idempotence, #idempotence. One producer session writes
    six batches with raw requests, then sends each again, as a client does
    when it did not hear an answer: a retry of any of the last five is
    answered with its original offset and not written again; the oldest and
    a batch past a gap are refused. Asked again after the leadership moved to
    a follower (whose producer state comes from the batches it fetched) and
    after that broker restarted (rebuilt from its log), the answers are the
    same, and the log holds each write once. Clients hide these answers
    (librdkafka may bump its own epoch and re-send), so they are asked here.
    First, every broker hands out producer ids no other broker hands out."""
    run = chaos_run
    zk = ZkView(run.zk)
    # Producer ids are cluster-unique: each broker hands out ids of a block
    # it claimed in ZooKeeper, and no two blocks overlap.
    handed: dict[int, list[int]] = {}
    for b in (1, 2, 3):
        c = _connect(run, b)
        try:
            handed[b] = [kafka_wire.init_producer_id(c)[1] for _ in range(3)]
        finally:
            c.close()
    ids = [p for got in handed.values() for p in got]
    assert -1 not in ids and len(set(ids)) == len(ids), (
        f"the brokers handed out producer ids {handed}: two producers would share one")
    first = _led_by_a_follower_of_the_controller(run, zk, "idem")
    conn = _connect_leader(run, first, "idem")
    try:
        err, pid, epoch = kafka_wire.init_producer_id(conn)
        assert err == E.NONE, f"InitProducerId answered {E.name(err)}"
        offsets = []
        for seq in range(6):
            err, offset = kafka_wire.produce(conn, "idem", 0, [b"i%d" % seq],
                                             producer=(pid, epoch, seq))
            assert err == E.NONE, f"batch {seq}: {E.name(err)}"
            offsets.append(offset)
    finally:
        conn.close()

    def ask_again(broker: int, where: str) -> None:
        c = _connect_leader(run, broker, "idem")
        try:
            for seq in range(1, 6):
                got = kafka_wire.produce(c, "idem", 0, [b"i%d" % seq], producer=(pid, epoch, seq))
                assert got == (E.NONE, offsets[seq]), (
                    f"{where}: the retry of batch {seq} (at offset {offsets[seq]}) was answered "
                    f"{E.name(got[0])} at offset {got[1]}")
            for seq, why in ((0, "older than the last five"), (7, "past a gap")):
                err, _ = kafka_wire.produce(c, "idem", 0, [b"i%d" % seq], producer=(pid, epoch, seq))
                assert err == E.OUT_OF_ORDER_SEQUENCE_NUMBER, (
                    f"{where}: batch {seq}, {why}, was answered {E.name(err)}")
            log_end = kafka_wire.list_offset(c, "idem", 0, -1)
            assert log_end == (E.NONE, offsets[-1] + 1), f"{where}: the log grew: {log_end}"
        finally:
            c.close()

    ask_again(first, f"leader {first}")
    nemesis.inject("move-leader")
    second = wait_for(lambda: zk.lai("idem", 0).leader not in (first, -1)
                      and zk.lai("idem", 0).leader, 60, f"the leadership moving from broker {first}")
    ask_again(second, f"broker {second}, leader after a failover")

    killed = nemesis.inject("kill", f"broker-{second}")
    wait_for(lambda: zk.lai("idem", 0).leader not in (second, -1), 60,
             f"a leader other than the killed broker {second}")
    killed.stop()  # restarts it: it rebuilds the producers' state from its log
    wait_for(lambda: second in zk.lai("idem", 0).isr, 60, f"broker {second} back in the ISR")
    nemesis.inject("elect-preferred")   # the move made it the preferred replica
    wait_for(lambda: zk.lai("idem", 0).leader == second, 60, f"broker {second} leading again")
    ask_again(second, f"broker {second}, leader again after a restart")

    c = _connect(run, second)
    try:
        values = [v for _o, v in kafka_wire.fetch(c, "idem", 0, 0).records]
    finally:
        c.close()
    assert values == [b"i%d" % seq for seq in range(6)], f"the log holds {values}"


def test_a_truncated_batch_is_written_when_its_producer_retries_it(chaos_run, nemesis):
    """docs/design.md#idempotence, #truncation, #g-idempotence. A leader cut
    off from its followers appends a batch of an idempotent producer and
    cannot commit it: the producer hears no success. The leadership moves;
    back as a follower, the old leader truncates the batch away. Elected
    again, it must take the producer's retry of that batch as a new write:
    a broker that still counted the removed batch's sequence would answer
    the retry as a duplicate and store nothing, losing an acknowledged write."""
    run = chaos_run
    zk = ZkView(run.zk)
    leader = _led_by_a_follower_of_the_controller(run, zk, "trunc")
    conn = _connect_leader(run, leader, "trunc")
    try:
        err, pid, epoch = kafka_wire.init_producer_id(conn)
        assert err == E.NONE, f"InitProducerId answered {E.name(err)}"
        for seq in range(3):
            got = kafka_wire.produce(conn, "trunc", 0, [b"t%d" % seq], producer=(pid, epoch, seq))
            assert got == (E.NONE, seq), f"batch {seq}: {E.name(got[0])} at offset {got[1]}"
        nemesis.inject("partition-isolate", f"broker-{leader}", among="brokers")
        err, _ = kafka_wire.produce(conn, "trunc", 0, [b"t3"], producer=(pid, epoch, 3),
                                    timeout_ms=2000)
        assert err != E.NONE, "a leader cut off from its followers committed an acks=all write"
    finally:
        conn.close()
    assert read_broker(run.cluster.log_dir(f"broker-{leader}"), {"trunc"})[0][
        "log_end_offset"] == 4, f"broker {leader} did not append the batch it could not commit"
    nemesis.inject("move-leader")
    wait_for(lambda: zk.lai("trunc", 0).leader not in (leader, -1), 60,
             f"the leadership of trunc/0 moving away from broker {leader}")
    nemesis.heal()
    log_dir = run.cluster.log_dir(f"broker-{leader}")
    wait_for(lambda: read_broker(log_dir, {"trunc"})[0]["log_end_offset"] == 3, 60,
             f"broker {leader}, a follower again, truncating the batch it could not commit")
    wait_for(lambda: leader in zk.lai("trunc", 0).isr, 60, f"broker {leader} in the ISR")
    # The move made another broker preferred: make it the old leader again.
    others = [r for r in zk.assignment("trunc")[0] if r != leader]
    moved = admin.reassign(run.zk, {("trunc", 0): [leader, *others]}, wait=True)
    assert moved["done"], moved
    admin.preferred_election(run.zk, "trunc")
    wait_for(lambda: zk.lai("trunc", 0).leader == leader, 60, f"broker {leader} leading again")
    conn = _connect_leader(run, leader, "trunc")
    try:
        got = kafka_wire.produce(conn, "trunc", 0, [b"t3"], producer=(pid, epoch, 3))
        assert got == (E.NONE, 3), f"the retry of batch 3 was answered {E.name(got[0])} at {got[1]}"
        values = [v for _o, v in kafka_wire.fetch(conn, "trunc", 0, 0).records]
    finally:
        conn.close()
    assert values == [b"t0", b"t1", b"t2", b"t3"], (
        f"the log holds {values}: the retried batch was answered but not written")


def test_a_leader_that_restarted_before_the_controller_noticed_is_handled_as_failed(
        chaos_run, nemesis):
    """docs/design.md#broker-failure, #g-durability. Leader L of bn/0 (not
    the controller) crashes with a power loss: its unfsynced records are
    gone (the broker fsyncs nothing, so all of them). Its old session is
    expired at once, so it registers again as soon as it has restarted, and
    the controller is frozen meanwhile: when it wakes up it sees L registered
    with another start epoch, a "bounce". It must handle L as failed (elect
    an in-sync follower, raising the leader epoch) and then as new. Left
    leader, L would serve its empty log and its followers would truncate the
    acknowledged records to match it."""
    run = chaos_run
    zk = ZkView(run.zk)
    leader = _led_by_a_follower_of_the_controller(run, zk, "bn")
    controller = zk.controller()
    conn = _connect_leader(run, leader, "bn")
    try:
        for _ in range(5):
            err, _ = kafka_wire.produce(conn, "bn", 0, [b"b" * 100] * 20)
            assert err == E.NONE, E.name(err)
        committed = kafka_wire.fetch(conn, "bn", 0, 0, max_bytes=1).high_watermark
    finally:
        conn.close()
    epoch = zk.lai("bn", 0).leader_epoch
    node = f"broker-{leader}"
    session, password = read_session(run.cluster, node)
    frozen = nemesis.inject("pause", f"broker-{controller}")
    try:
        crashed = nemesis.inject("lose-unfsynced", node)
        expire_session(run.cluster.zookeeper_connect, session, password)
        crashed.stop()  # restarts it and waits until it registered again
    finally:
        frozen.stop()
    assert any("bn-0" in n for n in crashed.notes), crashed.notes
    lai = wait_for(lambda: zk.lai("bn", 0).leader not in (leader, -1) and zk.lai("bn", 0), 60,
                   f"the leadership of bn/0 moving off broker {leader}, which restarted unseen")
    assert lai.leader_epoch > epoch, lai
    conn = _connect_leader(run, lai.leader, "bn")
    ends: list[tuple[int, int]] = []

    def holds_every_committed_record() -> bool:
        ends.append(kafka_wire.list_offset(conn, "bn", 0, -1))
        return ends[-1] == (E.NONE, committed)

    try:  # a new leader's high watermark reaches its log end once its followers fetch
        held = wait_until(holds_every_committed_record, 30, 0.5)
    finally:
        conn.close()
    assert held, (f"after broker {leader} restarted unseen without its records, the end offset "
                  f"of bn/0 is {ends[-1][1]} ({E.name(ends[-1][0])}) while {committed} records "
                  f"were committed")


def test_a_reassignment_stops_old_replicas_only_once_the_new_ones_caught_up(chaos_run, nemesis):
    """docs/design.md#reassignment, #g-durability. Partition r/0 moves from
    [A, B] to [A, C] while C is cut off from the other brokers, so it cannot
    copy A's log. The old replica B must stay (in the assignment and the
    ISR) as long as C is not in the ISR: stopped early, the committed
    records would be on A alone. Once the cut heals, C catches up and the
    reassignment completes, with every committed record on C."""
    run = chaos_run
    zk = ZkView(run.zk)
    controller = wait_for(zk.controller, 30, "a controller")
    c = next(b for b in (1, 2, 3) if b != controller)
    a, b = [x for x in (1, 2, 3) if x != c]
    run.create_topics({"r": 1}, 2, assignment={"r": {0: [a, b]}})
    wait_for(lambda: set(zk.lai("r", 0).isr) == {a, b}, 30, f"a full ISR [{a}, {b}]")
    conn = _connect_leader(run, zk.lai("r", 0).leader, "r")
    try:
        for _ in range(10):
            err, _ = kafka_wire.produce(conn, "r", 0, [b"r" * 100] * 100)
            assert err == E.NONE, E.name(err)
        committed = kafka_wire.fetch(conn, "r", 0, 0, max_bytes=1).high_watermark
    finally:
        conn.close()
    nemesis.inject("partition-isolate", f"broker-{c}", among="brokers")
    admin.reassign(run.zk, {("r", 0): [a, c]})

    def stopped_early() -> str | None:
        lai, ar = zk.lai("r", 0), zk.assignment("r")[0]
        if b not in ar or b not in lai.isr or run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None:
            return f"assignment {list(ar)}, ISR {list(lai.isr)}"
        return None

    early = wait_until(stopped_early, 5, 0.2)  # a controller that does not wait stops B at once
    assert early is None, (
        f"the reassignment of r/0 to [{a}, {c}] stopped broker {b} while broker {c}, cut off, "
        f"held nothing: {early}")
    nemesis.heal()
    wait_for(lambda: zk.assignment("r")[0] == (a, c)
             and run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, 90,
             f"the reassignment to [{a}, {c}] completed after the cut healed")
    held = read_broker(run.cluster.log_dir(f"broker-{c}"), {"r"})
    assert held and held[0]["log_end_offset"] >= committed, (
        f"broker {c} joined r/0 holding {held[0]['log_end_offset'] if held else 'nothing'} "
        f"of {committed} committed records")


def test_a_controller_request_that_failed_is_sent_again(chaos_run, nemesis):
    """docs/design.md#request-batch, #g-recovery. Follower B of cr/0 is cut
    off from the other brokers (not from ZooKeeper: it stays registered).
    The controller C first creates topic cr-first on B: that LeaderAndIsr
    fails once the cut outlasts the request timeout (CONTROLLER_TIMEOUT_S),
    and C's channel to B reconnects for every later request. A preferred
    election then moves cr/0's leadership from L to C; its LeaderAndIsr to B
    fails too, on a connect that times out. Both must be sent again until B
    can be reached: dropped, B would follow L for good and never rejoin the
    ISR. (The first failure alone proves nothing: the bytes of a request
    that timed out waiting for its answer stay in the kernel's send buffer,
    and TCP delivers them when the cut heals, resent or not.)"""
    run = chaos_run
    zk = ZkView(run.zk)
    c, leader, b = _led_by_one_preferring_the_controller(run, zk, "cr")
    bconn = _connect(run, b)
    try:   # the reorder has reached B: nothing else is queued for it
        wait_for(lambda: kafka_wire.metadata(bconn, ["cr"]).partitions[("cr", 0)].replicas
                 == [c, leader, b], 30, f"cr/0 reordered, as broker {b} knows")
    finally:
        bconn.close()
    failed = re.compile(rf"request LeaderAndIsrRequest to broker {b} at \S+ failed")

    def failures() -> int:   # earlier scenarios' failures are in the same log
        return len(failed.findall(run.cluster.logs(f"broker-{c}")))

    before = failures()
    nemesis.inject("partition-isolate", f"broker-{b}", among="brokers")
    run.create_topics({"cr-first": 1}, 1, assignment={"cr-first": {0: [b]}})
    wait_for(lambda: failures() > before, CONTROLLER_TIMEOUT_S + 20,
             f"the controller's LeaderAndIsr creating cr-first on broker {b} failing",
             interval=0.5)
    admin.preferred_election(run.zk, "cr")
    wait_for(lambda: zk.lai("cr", 0).leader == c, 30, f"broker {c} elected")
    # Each attempt fails after CONTROLLER_TIMEOUT_S (or the connect timeout,
    # as long); one more LeaderAndIsr failure means the one for cr/0 has
    # been tried, as the requests are sent in order.
    wait_for(lambda: failures() > before + 1, 3 * CONTROLLER_TIMEOUT_S + 20,
             f"the controller's LeaderAndIsr to broker {b} failing again", interval=0.5)
    nemesis.heal()
    wait_for(lambda: b in zk.lai("cr", 0).isr, 30,
             f"broker {b} back in the ISR of cr/0, following broker {c}")


def test_controlled_shutdown_and_preferred_election_choose_in_sync_replicas(chaos_run, nemesis):
    """docs/design.md#controlled-shutdown, #preferred-election, #g-durability.
    One follower is alive but out of the ISR (cut off from the other
    brokers, not from ZooKeeper). It comes first in the replica list of
    topic cs, and it is the preferred replica of topic pf. A controlled
    shutdown of cs's leader must hand the leadership to the in-sync
    follower, and a preferred replica election must not make the cut-off
    broker pf's leader: it misses acknowledged writes."""
    run = chaos_run
    zk = ZkView(run.zk)
    controller = wait_for(zk.controller, 30, "a controller")
    leader, lagging = [b for b in (1, 2, 3) if b != controller]
    run.create_topics({"cs": 1, "pf": 1}, 3, assignment={"cs": {0: [leader, lagging, controller]},
                                                         "pf": {0: [controller, lagging, leader]}})

    def full(topic: str, want_leader: int) -> bool:
        lai = zk.lai(topic, 0)
        return len(lai.isr) == 3 and lai.leader == want_leader

    wait_for(lambda: full("cs", leader) and full("pf", controller), 30,
             "both topics with a full ISR")
    # pf's replicas reordered: the lagging broker-to-be becomes its preferred
    # replica, the controller keeps leading it.
    admin.reassign(run.zk, {("pf", 0): [lagging, controller, leader]})
    wait_for(lambda: zk.assignment("pf")[0] == (lagging, controller, leader)
             and run.zk.exists(zkpaths.REASSIGN_PARTITIONS) is None and full("pf", controller),
             30, f"pf reordered, broker {controller} still leading it")
    for topic in ("cs", "pf"):
        conn = _connect_leader(run, zk.lai(topic, 0).leader, topic)
        try:
            assert kafka_wire.produce(conn, topic, 0, [b"before"])[0] == E.NONE
        finally:
            conn.close()
    nemesis.inject("partition-isolate", f"broker-{lagging}", among="brokers")
    wait_for(lambda: lagging not in zk.lai("cs", 0).isr and lagging not in zk.lai("pf", 0).isr,
             LAG_S + 15, f"broker {lagging}, cut off from the other brokers, out of both ISRs")

    nemesis.inject("stop", f"broker-{leader}")
    lai = wait_for(lambda: zk.lai("cs", 0).leader not in (leader, -1) and zk.lai("cs", 0), 60,
                   f"the leadership of cs moving off the stopped broker {leader}")
    assert lai.leader == controller and lai.leader in lai.isr, (
        f"the controlled shutdown of broker {leader} made broker {lai.leader} leader of cs with "
        f"ISR {list(lai.isr)}; broker {lagging} was out of the ISR")

    election = nemesis.inject("elect-preferred")
    wait_for(election.done, 60, "the preferred replica election finished")
    lai = zk.lai("pf", 0)
    assert lai.leader == controller and lai.leader in lai.isr, (
        f"a preferred replica election made broker {lai.leader} leader of pf with ISR "
        f"{list(lai.isr)}; the preferred replica {lagging} was out of the ISR")


def test_a_batch_that_fails_its_crc_is_refused_and_not_stored(chaos_run):
    """docs/design.md#log. A produce request whose batch was damaged on the
    way (one byte of a value flipped, the CRC left as it was) is refused with
    CORRUPT_MESSAGE and nothing is appended: a consumer would otherwise read
    a value no producer sent."""
    run = chaos_run
    zk = ZkView(run.zk)
    run.create_topics({"crc": 1}, 3)
    leader = wait_for(lambda: zk.lai("crc", 0).leader > 0 and zk.lai("crc", 0).leader, 30,
                      "a leader for crc/0")
    conn = _connect_leader(run, leader, "crc")
    try:
        assert kafka_wire.produce(conn, "crc", 0, [b"intact"]) == (E.NONE, 0)
        batch = bytearray(kafka_wire.record_batch([b"damaged"]))
        batch[-1] ^= 0x01                      # the last byte of the value
        err, _ = kafka_wire.produce_batch(conn, "crc", 0, bytes(batch))
        assert err == E.CORRUPT_MESSAGE, f"a batch failing its CRC was answered {E.name(err)}"
        assert kafka_wire.list_offset(conn, "crc", 0, -1) == (E.NONE, 1), "the log grew"
    finally:
        conn.close()


def test_a_batch_whose_offset_was_damaged_on_disk_is_cut_away_at_recovery(chaos_run, nemesis):
    """docs/design.md#log, #g-offsets. A batch's CRC does not cover its
    base offset. Broker X, the only replica of bo/0, is killed and the base
    offset of the last batch on its disk moved 100 up. Recovering, X must
    cut that batch away (it does not continue the batch before it): kept, X
    would serve its record at an offset nobody wrote, above a gap, and give
    the next write an offset 100 too high."""
    run = chaos_run
    zk = ZkView(run.zk)
    controller = wait_for(zk.controller, 30, "a controller")
    x = next(b for b in (1, 2, 3) if b != controller)
    _create_led_by(run, zk, "bo", [x])
    conn = _connect_leader(run, x, "bo")
    try:   # acks=1: one replica is below min.insync.replicas
        for i in range(5):
            assert kafka_wire.produce(conn, "bo", 0, [b"o%d" % i], acks=1) == (E.NONE, i)
    finally:
        conn.close()
    damaged = nemesis.inject("bad-offset", "leader:bo/0", by=100)
    damaged.stop()   # restarts X, which recovers its log and leads bo/0 again
    assert any("from 4 to 104" in n for n in damaged.notes), damaged.notes
    conn = _connect_leader(run, x, "bo")
    try:
        end = kafka_wire.list_offset(conn, "bo", 0, -1)
        written = kafka_wire.produce(conn, "bo", 0, [b"after"], acks=1)
        records = kafka_wire.fetch(conn, "bo", 0, 0).records
    finally:
        conn.close()
    assert end == (E.NONE, 4), (
        f"after recovering a batch moved to offset 104, broker {x}'s log of bo/0 ends at "
        f"{end[1]} ({E.name(end[0])}), not at 4")
    assert written == (E.NONE, 4), f"the next write was answered {E.name(written[0])} at {written[1]}"
    assert records == [(i, b"o%d" % i) for i in range(4)] + [(4, b"after")], (
        f"bo/0 serves {records}")
