"""Replication (seed 000 §G) with real broker processes and a hand-played
controller: acks=all across a leader kill, ISR shrink/expand written
conditionally to ZooKeeper, the leader fenced by a failed conditional write,
min.insync.replicas, HW checkpoints, and hw vs leader-epoch truncation."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from broker_cluster import AckedProducer, wait_until
from cluster import zkpaths
from cluster.protocol import control
from cluster.zkpaths import LeaderAndIsr, TopicAssignment
from kafka_wire import Wire, fetch, list_offset, produce, v2_batch


def _lai(cluster, topic, p=0) -> LeaderAndIsr:
    data, stat = cluster.zk.get(zkpaths.leader_and_isr_path(topic, p))
    return LeaderAndIsr.decode(data, stat.version)


def _consume_all(cluster, topic: str, leader: int) -> list[bytes]:
    """Every record below the HW of the leader, via raw Fetch v4."""
    from kafka.record.memory_records import MemoryRecords
    w = Wire(cluster.brokers[leader].address)
    out, offset = [], 0
    try:
        while True:
            err, hw, records = fetch(w, topic, 0, offset)
            assert err == 0, err
            if not records:
                return out
            mr = MemoryRecords(records)
            while mr.has_next():
                batch = mr.next_batch()
                if batch is None:
                    break
                for r in batch:
                    out.append(r.value)
                    offset = r.offset + 1
    finally:
        w.close()


def test_leader_killed_under_acks_all_load(make_cluster):
    """min ISR 2, unclean election off: SIGKILL the leader while a producer
    sends with acks=all, elect an ISR member by hand; every acknowledged
    message is on the new leader."""
    c = make_cluster(3, **{"min.insync.replicas": 2, "unclean.leader.election.enable": False})
    c.hc.create_topic("fo", {0: (1, 2, 3)})
    with AckedProducer(c.bootstrap, "fo", b"m%06d", **{
            "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 500}) as load:
        wait_until(lambda: len(load.acked) > 2000, 30, "acks before the kill")
        c.brokers[1].kill()
        cur = _lai(c, "fo")
        survivors = tuple(b for b in cur.isr if b != 1)
        assert len(survivors) >= 2  # nobody lagged out
        c.hc.elect("fo", 0, survivors[0], survivors)
        n = len(load.acked)
        wait_until(lambda: len(load.acked) > n + 2000, 30, "acks after the failover")
    got = _consume_all(c, "fo", survivors[0])
    missing = set(load.acked) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    assert len(load.acked) > 4000


def test_isr_shrink_expand_and_min_isr(make_cluster):
    c = make_cluster(3, **{"min.insync.replicas": 2, "replica.lag.time.max.ms": 1000})
    c.hc.create_topic("isr", {0: (1, 2, 3)})
    w = Wire(c.brokers[1].address)
    assert produce(w, "isr", 0, v2_batch([b"a"])) == (0, 0)
    version0 = _lai(c, "isr").zk_version

    # Follower 3 dies: the leader shrinks the ISR with a conditional write,
    # keeping leader, leader epoch and controller epoch, and notifies.
    c.brokers[3].kill()
    wait_until(lambda: _lai(c, "isr").isr == (1, 2), 10, "ISR shrink to 1,2")
    lai = _lai(c, "isr")
    assert (lai.leader, lai.leader_epoch, lai.controller_epoch) == (1, 0, 1)
    assert lai.zk_version == version0 + 1
    def notified():
        notes = c.zk.get_children(zkpaths.ISR_CHANGE_NOTIFICATION)
        return any(("isr", 0) in zkpaths.decode_partition_list(
            c.zk.get(f"{zkpaths.ISR_CHANGE_NOTIFICATION}/{n}")[0]) for n in notes)
    wait_until(notified, 5, "isr_change_notification znode")
    assert produce(w, "isr", 0, v2_batch([b"b"])) == (0, 1)  # ISR 2 >= min ISR 2

    # Follower 2 freezes: an acks=all append waits, the ISR shrinks to {1}
    # below min ISR -> NOT_ENOUGH_REPLICAS_AFTER_APPEND; then NOT_ENOUGH_REPLICAS.
    os.kill(c.brokers[2].proc.pid, signal.SIGSTOP)
    try:
        assert produce(w, "isr", 0, v2_batch([b"c"]), timeout_ms=15000) == (20, 2)
        assert _lai(c, "isr").isr == (1,)
        assert produce(w, "isr", 0, v2_batch([b"d"]))[0] == 19
        assert list_offset(w, "isr", 0) == (0, 3)  # nothing appended by the refused one
        assert produce(w, "isr", 0, v2_batch([b"e"]), acks=1) == (0, 3)
    finally:
        os.kill(c.brokers[2].proc.pid, signal.SIGCONT)

    # Both come back and catch up: the ISR expands again.
    c.brokers[3].start().wait_registered(c.zk)
    c.hc.push([c.hc.state("isr", 0)], to={3})
    wait_until(lambda: _lai(c, "isr").isr == (1, 2, 3), 15, "ISR expand to 1,2,3")
    assert produce(w, "isr", 0, v2_batch([b"f"])) == (0, 4)
    w.close()


def test_failed_conditional_isr_write_fences_leader(make_cluster):
    """Seed 000 discussion 3: the controller moved leadership in ZooKeeper but
    broker 1 did not hear about it. Its next ISR change fails on the znode
    version, so it stops taking writes until the controller tells it more."""
    c = make_cluster(3)
    hc = c.hc
    c.zk.create(zkpaths.topic_path("zombie"), TopicAssignment({0: (1, 2, 3)}).encode(),
                makepath=True)
    c.zk.create(zkpaths.leader_and_isr_path("zombie", 0),
                LeaderAndIsr(1, 0, (1, 2), 1).encode(), makepath=True)
    s0 = hc.state("zombie", 0)
    hc.push([s0], to={1, 2})
    w = Wire(c.brokers[1].address)
    assert produce(w, "zombie", 0, v2_batch([b"a"])) == (0, 0)
    # The "controller" elects broker 2 in ZooKeeper; broker 1 is not told.
    c.zk.set(zkpaths.leader_and_isr_path("zombie", 0),
             LeaderAndIsr(2, 1, (2,), 1).encode(), version=s0.zk_version)
    # Broker 3 starts following broker 1 and catches up: broker 1 tries to
    # add it to the ISR and fails the conditional write.
    hc.push([s0], to={3})
    wait_until(lambda: "stops accepting writes" in c.brokers[1].stderr(), 10, "fencing")
    assert produce(w, "zombie", 0, v2_batch([b"b"]))[0] == 6
    assert _lai(c, "zombie").leader == 2  # the controller's decision stands
    # The controller makes broker 1 leader again (newer epoch, current version).
    cur = _lai(c, "zombie")
    c.zk.set(zkpaths.leader_and_isr_path("zombie", 0),
             LeaderAndIsr(1, 2, (1, 2), 1).encode(), version=cur.zk_version)
    hc.push([hc.state("zombie", 0)])
    assert produce(w, "zombie", 0, v2_batch([b"c"])) == (0, 1)
    w.close()


def test_clean_shutdown_and_restart_keep_data_and_hw(make_cluster):
    c = make_cluster(2)
    c.hc.create_topic("restart", {0: (1, 2)})
    w = Wire(c.brokers[1].address)
    for i in range(5):
        assert produce(w, "restart", 0, v2_batch([b"r%d" % i] * 10))[0] == 0
    w.close()
    # SIGTERM: exit 0, HW checkpointed. (A follower learns the leader's HW
    # in the next fetch response: the long poll returns within
    # replica.fetch.wait.max.ms.)
    time.sleep(1.2)
    b2 = c.brokers[2]
    assert b2.terminate() == 0
    hw_file = (b2.log_dir / "replication-offset-checkpoint").read_text()
    assert "restart 0 50" in hw_file
    b2.start().wait_registered(c.zk)
    assert (b2.log_dir / "zk-session.json").exists()
    sess = json.loads((b2.log_dir / "zk-session.json").read_text())
    assert sess["session_id"] > 0 and bytes.fromhex(sess["password"])
    c.hc.push([c.hc.state("restart", 0)], to={2})
    # Now broker 2 leads; all 50 records are there.
    c.hc.elect("restart", 0, 2, (2, 1))
    assert len(_consume_all(c, "restart", 2)) == 50


def _expire(c, broker: int) -> int:
    """Expire `broker`'s ZooKeeper session (its own session file names it);
    returns the expired session id."""
    from kazoo.client import KazooClient
    sess = json.loads((c.brokers[broker].log_dir / "zk-session.json").read_text())
    k = KazooClient(c.zk_hosts, client_id=(sess["session_id"], bytes.fromhex(sess["password"])))
    k.start()
    k.stop()
    k.close()
    return sess["session_id"]


def test_broker_reregisters_after_session_expiry(make_cluster):
    c = make_cluster(1)
    b = c.brokers[1]
    old = c.zk.get(zkpaths.broker_path(1))[1].ephemeralOwner
    assert _expire(c, 1) == old

    def reregistered():
        st = c.zk.exists(zkpaths.broker_path(1))
        return st is not None and st.ephemeralOwner != old
    wait_until(reregistered, 20, "re-registration with a new session")
    new = json.loads((b.log_dir / "zk-session.json").read_text())
    wait_until(lambda: json.loads((b.log_dir / "zk-session.json").read_text())["session_id"]
               == c.zk.exists(zkpaths.broker_path(1)).ephemeralOwner, 5, "session file updated")


def test_a_replica_deleted_while_its_broker_was_expired_goes_when_it_registers_again(
        make_cluster):
    """docs/design.md#topics, #broker-startup: topic gone is deleted while
    broker 2's session has expired (the controller counts it dead and sends
    it no StopReplica); topic kept is not. When broker 2 registers again it
    must delete its replica of gone, and only that, as it would at startup."""
    c = make_cluster(2)
    c.hc.create_topic("gone", {0: (1, 2)})
    c.hc.create_topic("kept", {0: (1, 2)})
    b2 = c.brokers[2]
    wait_until(lambda: (b2.log_dir / "gone-0").is_dir() and (b2.log_dir / "kept-0").is_dir(),
               10, "broker 2's replicas")
    old = _expire(c, 2)
    # what the controller does for the live replica, then the znodes go
    c.hc.send(1, control.StopReplicaRequest(c.hc.controller_id, c.hc.controller_epoch, True,
                                            (control.TopicPartition("gone", 0),)))
    c.zk.delete(zkpaths.topic_path("gone"), recursive=True)

    def reregistered():
        st = c.zk.exists(zkpaths.broker_path(2))
        return st is not None and st.ephemeralOwner != old
    wait_until(reregistered, 20, "broker 2 registered again")
    assert not (b2.log_dir / "gone-0").exists(), "broker 2 kept its replica of the deleted topic"
    assert (b2.log_dir / "kept-0").is_dir(), "broker 2 deleted its replica of a topic it still has"


def test_requests_for_the_registration_before_a_session_expiry_are_refused(make_cluster):
    """A broker registers again after its session expired with a new start
    epoch: a controller request addressed to the previous registration (sent
    while it was cut off, delivered late) is refused, one for the new one is
    applied (docs/design.md#controller-epoch)."""
    from kazoo.client import KazooClient

    from cluster.protocol import errors as E
    from harness import probes
    c = make_cluster(1)
    b = c.brokers[1]
    before = zkpaths.BrokerRegistration.decode(1, c.zk.get(zkpaths.broker_path(1))[0])
    sess = json.loads((b.log_dir / "zk-session.json").read_text())
    k = KazooClient(c.zk_hosts, client_id=(sess["session_id"], bytes.fromhex(sess["password"])))
    k.start()
    k.stop()
    k.close()

    def registered_again():
        try:
            reg = zkpaths.BrokerRegistration.decode(1, c.zk.get(zkpaths.broker_path(1))[0])
        except Exception:
            return None
        return reg if reg.start_epoch > before.start_epoch else None
    after = wait_until(registered_again, 20, "a registration with a newer start epoch")

    def update(epoch: int) -> int:
        req = control.UpdateMetadataRequest(c.hc.controller_id, c.hc.controller_epoch, (), (),
                                            1, epoch)
        return probes.call(*b.address, req).error
    assert update(before.start_epoch) == E.STALE_BROKER_EPOCH
    assert update(after.start_epoch) == E.NONE


def test_bad_config_exits_2(tmp_path):
    import subprocess
    import sys
    from broker_cluster import REPO
    cfg = tmp_path / "bad.properties"
    cfg.write_text("broker.id=1\nno.such.key=3\n")
    r = subprocess.run([sys.executable, "-m", "cluster.broker", str(cfg)], cwd=REPO,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "no.such.key" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("truncation", ["hw", "leader-epoch"])
def test_kip101_truncation(make_cluster, truncation):
    """KIP-101 scenario 1. Follower 2 has all 10 acknowledged records but a
    checkpointed HW of 0; it restarts and is told to follow leader 1, which is
    frozen, then dies; broker 2 (in the ISR) becomes leader.
    - hw: broker 2 truncated to its HW on become-follower: the acknowledged
      records are gone (the seed design's known flaw);
    - leader-epoch: broker 2 waits for the leader's epoch end offset before
      truncating, so nothing is lost."""
    c = make_cluster(2, **{"replication.truncation": truncation,
                           "replica.high.watermark.checkpoint.interval.ms": 600000,
                           "replica.socket.timeout.ms": 60000})
    c.hc.create_topic("kip101", {0: (1, 2)})
    w = Wire(c.brokers[1].address)
    assert produce(w, "kip101", 0, v2_batch([b"k%d" % i for i in range(10)])) == (0, 0)
    w.close()
    b1, b2 = c.brokers[1], c.brokers[2]
    b2.kill()  # its checkpointed HW is 0 (the interval is 10 minutes)
    os.kill(b1.proc.pid, signal.SIGSTOP)
    try:
        b2.start().wait_registered(c.zk)
        cur = _lai(c, "kip101")
        c.zk.set(zkpaths.leader_and_isr_path("kip101", 0),
                 LeaderAndIsr(1, cur.leader_epoch + 1, (1, 2), 1).encode(),
                 version=cur.zk_version)
        st = c.hc.state("kip101", 0)
        c.hc.send(2, control.LeaderAndIsrRequest(c.hc.controller_id, c.hc.controller_epoch,
                                                 False, (st,), c.hc.live_endpoints()))
        time.sleep(0.5)
    finally:
        b1.kill()
    c.hc.elect("kip101", 0, 2, (2,))
    got = _consume_all(c, "kip101", 2)
    if truncation == "hw":
        assert got == []
    else:
        assert got == [b"k%d" % i for i in range(10)]


def _replica(c, broker: int, topic: str) -> dict:
    """What broker `broker`'s files hold of partition 0 of `topic`."""
    from harness.replicas import read_replica
    return read_replica(c.brokers[broker].log_dir / f"{topic}-0")


def _values(replica: dict) -> list[tuple[int, int]]:
    return [tuple(r) for r in replica["records"]]


def _produce(c, leader: int, topic: str, values: range, acks: int) -> None:
    w = Wire(c.brokers[leader].address)
    try:
        err, _ = produce(w, topic, 0, v2_batch([b"%d" % v for v in values]), acks=acks)
        assert err == 0, err
    finally:
        w.close()


def test_a_follower_the_controller_cannot_reach_is_fenced(make_cluster):
    """KIP-320 (docs/design.md#fencing). Follower 3 hears nothing from the
    controller while leadership goes 1 -> 2 -> 1 (epochs 1 and 2); it holds
    epoch-0 records 10..14 that broker 2 never had, and broker 1 replaced
    them with 2's as its follower. Fetching on from broker 1 as if nothing
    happened would append epoch-2 records after them and give its epoch cache an entry
    that hides the divergence from the truncation at its next LeaderAndIsr
    (the pressure suite found the replicas disagreeing for good): broker 1
    must fence its fetches instead, and then 3 must end up with 1's log."""
    c = make_cluster(3, **{"replication.truncation": "leader-epoch",
                           "replica.lag.time.max.ms": 60000})
    c.hc.create_topic("zf", {0: (1, 2, 3)})
    _produce(c, 1, "zf", range(0, 10), acks=-1)
    # Broker 2 stops fetching; 1 and 3 get 10..14.
    c.hc.send(2, control.StopReplicaRequest(c.hc.controller_id, c.hc.controller_epoch, False,
                                            (control.TopicPartition("zf", 0),)))
    _produce(c, 1, "zf", range(10, 15), acks=1)
    wait_until(lambda: _replica(c, 3, "zf")["log_end_offset"] == 15, 30, "3 fetching 10..14")
    zombie = c.brokers[3].stderr_path.stat().st_size
    # Epoch 1: broker 2 leads (broker 3 is not told); 1 truncates to 10.
    st = c.hc.state("zf", 0)
    c.zk.set(zkpaths.leader_and_isr_path("zf", 0),
             LeaderAndIsr(2, st.leader_epoch + 1, (1, 2, 3), c.hc.controller_epoch).encode(),
             version=st.zk_version)
    c.hc.push([c.hc.state("zf", 0)], to={1, 2})
    _produce(c, 2, "zf", range(100, 105), acks=1)  # 1's next batch starts where 3 fetches
    wait_until(lambda: _replica(c, 1, "zf")["log_end_offset"] == 15, 30, "1 following 2")
    # Epoch 2: broker 1 leads again (broker 3 still not told) and writes on.
    st = c.hc.state("zf", 0)
    c.zk.set(zkpaths.leader_and_isr_path("zf", 0),
             LeaderAndIsr(1, st.leader_epoch + 1, (1, 2, 3), c.hc.controller_epoch).encode(),
             version=st.zk_version)
    c.hc.push([c.hc.state("zf", 0)], to={1, 2})
    _produce(c, 1, "zf", range(200, 210), acks=1)
    wait_until(lambda: "FENCED_LEADER_EPOCH" in c.brokers[3].stderr()[zombie:], 30,
               "broker 1 fencing broker 3's fetches")
    assert _replica(c, 3, "zf")["log_end_offset"] == 15  # nothing appended after the fence
    # The controller reaches broker 3 at last: it truncates and catches up.
    c.hc.push([c.hc.state("zf", 0)], to={3})
    leader = _values(_replica(c, 1, "zf"))
    assert len(leader) == 25
    wait_until(lambda: _values(_replica(c, 3, "zf")) == leader, 30,
               "broker 3 holding broker 1's log")


def test_stop_replica_init_flag_and_startup_cleanup(make_cluster):
    c = make_cluster(2)
    hc = c.hc
    for t in ("keep", "stopme", "deleteme", "initgone", "gonewhiledown"):
        hc.create_topic(t, {0: (1, 2)})
    b2 = c.brokers[2]
    wait_until(lambda: all((b2.log_dir / f"{t}-0").exists()
                           for t in ("keep", "stopme", "deleteme", "initgone", "gonewhiledown")),
               5, "replica dirs on broker 2")
    tp = control.TopicPartition
    # StopReplica without delete keeps the log; with delete removes it.
    r = hc.send(2, control.StopReplicaRequest(hc.controller_id, hc.controller_epoch, False,
                                              (tp("stopme", 0),)))
    assert r.error == 0 and r.partitions[0].error == 0
    assert (b2.log_dir / "stopme-0").exists()
    r = hc.send(2, control.StopReplicaRequest(hc.controller_id, hc.controller_epoch, True,
                                              (tp("deleteme", 0),)))
    assert r.error == 0
    assert not (b2.log_dir / "deleteme-0").exists()
    assert "state-change: broker=2 completed stop-replica topic=deleteme partition=0" in b2.stderr()
    # A LeaderAndIsr with INIT (a new controller's first) deletes the
    # partitions it does not list.
    states = tuple(hc.state(t, 0) for t in ("keep", "stopme", "gonewhiledown"))
    hc.controller_epoch += 1
    r = hc.send(2, control.LeaderAndIsrRequest(hc.controller_id, hc.controller_epoch, True,
                                               states, hc.live_endpoints()))
    assert r.error == 0
    assert not (b2.log_dir / "initgone-0").exists()
    assert (b2.log_dir / "keep-0").exists()
    # A topic deleted while the broker is down is removed at startup (§E step 4).
    b2.kill()
    c.zk.delete(zkpaths.topic_path("gonewhiledown"), recursive=True)
    b2.start().wait_registered(c.zk)
    assert not (b2.log_dir / "gonewhiledown-0").exists()
    assert (b2.log_dir / "keep-0").exists()


def test_a_replica_a_reassignment_moves_here_survives_a_restart(make_cluster):
    """docs/design.md#broker-startup. While a reassignment moves moving-0 onto
    broker 2, broker 2 is in the new replicas (RAR) only, not in the topic's
    assignment; restarted then, it must keep its log: it may be the only
    in-sync copy (a pressure run saw such a replica delete its log and be
    elected with an empty one). Once no reassignment names it, a restart
    deletes the replica as before."""
    c = make_cluster(2)
    c.hc.create_topic("moving", {0: (1, 2)})
    b2 = c.brokers[2]
    replica = b2.log_dir / "moving-0"
    wait_until(replica.exists, 5, "the replica dir on broker 2")
    c.zk.set(zkpaths.topic_path("moving"), TopicAssignment({0: (1,)}).encode())
    c.zk.create(zkpaths.REASSIGN_PARTITIONS, zkpaths.encode_reassignment({("moving", 0): [1, 2]}),
                makepath=True)
    c.restart(2)
    assert replica.exists(), "a restart deleted a replica a pending reassignment moves here"
    c.zk.delete(zkpaths.REASSIGN_PARTITIONS)
    c.restart(2)
    assert not replica.exists(), "a replica assigned nowhere survived a restart"
