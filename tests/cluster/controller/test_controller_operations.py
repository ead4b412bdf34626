"""Broker failure, topics, partitions, preferred election, controlled
shutdown - controller in-process, fake brokers, real ZooKeeper."""
import pytest

from cluster import admin, zkpaths
from cluster.protocol import control
from cluster.protocol import errors as E
from controller_fakes import wait_until


def active(nodes):
    act = [n for n in nodes if n.controller.is_active]
    return act[0] if len(act) == 1 else None


def desc(zk, topic):
    return {p["partition"]: p for p in admin.describe_topic(zk, topic)["partitions"]}


def test_controller_topic_create_assigns_and_elects(nodes, zk):
    ns = nodes([1, 2, 3])
    wait_until(lambda: active(ns), what="controller")
    got = admin.create_topic(zk, "t", 6, 2)
    # round-robin: each broker is the preferred replica of 2 partitions
    assert sorted(r[0] for r in got.values()) == [1, 1, 2, 2, 3, 3]
    d = admin.wait_for_leaders(zk, "t")
    for p in d["partitions"]:
        assert p["leader"] == p["replicas"][0] and sorted(p["isr"]) == sorted(p["replicas"])
        assert p["leader_epoch"] == 0
    # each replica's broker got one LeaderAndIsr naming it
    def all_told():
        for n in ns:
            states = n.broker.leader_states()
            mine = {p["partition"] for p in d["partitions"] if n.id in p["replicas"]}
            if {tp[1] for tp in states if tp[0] == "t"} != mine:
                return False
        return True
    wait_until(all_told, what="LeaderAndIsr to every replica")
    # every broker learns the metadata
    wait_until(lambda: all(any(s.topic == "t" for r in n.broker.of_type(control.UpdateMetadataRequest)
                               for s in r.partition_states) for n in ns), what="metadata")
    recs = admin.state_log(zk, "t", 0)
    kinds = {(r["kind"], r["to"]) for r in recs}
    assert ("partition", "OnlinePartition") in kinds and ("replica", "OnlineReplica") in kinds
    assert any(r["kind"] == "request" and r["target_broker"] is not None for r in recs)


def test_controller_broker_failure_moves_leaders(nodes, zk):
    ns = nodes([1, 2, 3])
    ctl = wait_until(lambda: active(ns), what="controller")
    victim = next(n for n in ns if n is not ctl)
    admin.create_topic(zk, "t", 3, 3, replica_assignment={0: [victim.id, 1, 2, 3][:1] + [b for b in (1, 2, 3) if b != victim.id],
                                                      1: [b for b in (1, 2, 3) if b != victim.id] + [victim.id],
                                                      2: [b for b in (1, 2, 3) if b != victim.id][::-1] + [victim.id]})
    admin.wait_for_leaders(zk, "t")
    assert desc(zk, "t")[0]["leader"] == victim.id
    victim.kill()
    def moved():
        d = desc(zk, "t")
        return all(p["leader"] != victim.id and p["leader"] >= 0 and victim.id not in p["isr"]
                   for p in d.values()) and d
    d = wait_until(moved, what="new leaders, victim out of ISRs")
    assert d[0]["leader_epoch"] == 1
    assert d[1]["leader_epoch"] == 1  # follower removed from ISR: epoch bumped too
    recs = admin.state_log(zk, "t", 0)
    assert any(r["kind"] == "replica" and r["to"] == "OfflineReplica" and r["target_broker"] == victim.id
               for r in recs)


@pytest.mark.parametrize("unclean", [True, False])
def test_controller_unclean_election(nodes, zk, unclean):
    n1, n2, n3 = nodes([1, 2, 3], config={"unclean.leader.election.enable": unclean})
    wait_until(lambda: active([n1, n2, n3]), what="controller")
    ctl = active([n1, n2, n3])
    others = [n for n in (n1, n2, n3) if n is not ctl]
    a, b = others
    admin.create_topic(zk, "u", 1, 2, replica_assignment={0: [a.id, b.id]})
    admin.wait_for_leaders(zk, "u")
    # b falls out of the ISR (the leader shrank it), then the leader dies
    path = zkpaths.leader_and_isr_path("u", 0)
    data, stat = zk.get(path)
    lai = zkpaths.LeaderAndIsr.decode(data)
    zk.set(path, zkpaths.LeaderAndIsr(lai.leader, lai.leader_epoch, (a.id,), lai.controller_epoch).encode(),
           version=stat.version)
    a.kill()
    if unclean:
        p = wait_until(lambda: desc(zk, "u")[0]["leader"] == b.id and desc(zk, "u")[0], what="unclean leader")
        assert p["isr"] == [b.id]
        assert any("UNCLEAN" in (r.get("note") or "") for r in admin.state_log(zk, "u", 0))
    else:
        p = wait_until(lambda: desc(zk, "u")[0]["leader"] == -1 and desc(zk, "u")[0], what="no leader")
        assert p["isr"] == [a.id]  # kept, so a can come back cleanly
        # a comes back: elected cleanly from the ISR
        from controller_fakes import Node
        a2 = Node(a.id, a.broker.zk_hosts, start_controller=False)
        try:
            wait_until(lambda: desc(zk, "u")[0]["leader"] == a.id, what="clean re-election")
        finally:
            a2.stop()


def test_controller_topic_delete(nodes, zk):
    ns = nodes([1, 2])
    wait_until(lambda: active(ns), what="controller")
    admin.create_topic(zk, "d", 2, 2)
    admin.wait_for_leaders(zk, "d")
    for n in ns:
        n.broker.clear()
    admin.delete_topic(zk, "d", wait=True, timeout=20)
    assert zk.exists(zkpaths.delete_topic_path("d")) is None
    assert "d" not in admin.list_topics(zk)
    for n in ns:
        stops = wait_until(lambda n=n: n.broker.of_type(control.StopReplicaRequest), what="stop")
        assert stops[0].delete_partitions and {(p.topic, p.partition) for p in stops[0].partitions} == {("d", 0), ("d", 1)}
        um = wait_until(lambda n=n: [s for r in n.broker.of_type(control.UpdateMetadataRequest)
                                     for s in r.partition_states if s.topic == "d"], what="deleted metadata")
        assert all(s.leader == -2 for s in um)
    # the name can be used again
    admin.create_topic(zk, "d", 1, 1)
    admin.wait_for_leaders(zk, "d")


def test_controller_topic_delete_with_replica_down(nodes, zk):
    ns = nodes([1, 2, 3])
    ctl = wait_until(lambda: active(ns), what="controller")
    down = next(n for n in ns if n is not ctl)
    admin.create_topic(zk, "dd", 3, 3)
    admin.wait_for_leaders(zk, "dd")
    down.kill()
    wait_until(lambda: all(p["leader"] != down.id for p in desc(zk, "dd").values()), what="moved")
    admin.delete_topic(zk, "dd", wait=True, timeout=20)
    assert zk.exists(zkpaths.topic_path("dd")) is None


def test_controller_add_partitions(nodes, zk):
    ns = nodes([1, 2, 3])
    wait_until(lambda: active(ns), what="controller")
    admin.create_topic(zk, "a", 2, 2)
    admin.wait_for_leaders(zk, "a")
    new = admin.add_partitions(zk, "a", 5)
    assert sorted(new) == [2, 3, 4]
    d = wait_until(lambda: len(desc(zk, "a")) == 5 and all(p["leader"] >= 0 for p in desc(zk, "a").values())
                   and desc(zk, "a"), what="5 partitions led")
    assert {p: d[p]["replicas"] for p in (2, 3, 4)} == {p: r for p, r in new.items()}
    wait_until(lambda: zk.exists(zkpaths.partitions_add_path("a")) is None, what="admin path cleared")
    # bad request: partition that exists -> rejected and removed
    zk.create(zkpaths.partitions_add_path("a", 1), b"[1]", makepath=True)
    wait_until(lambda: zk.exists(zkpaths.partitions_add_path("a", 1)) is None, what="rejected add removed")
    # remove a partition (seed §H)
    admin.remove_partitions(zk, "a", [4])
    wait_until(lambda: 4 not in desc(zk, "a"), what="partition 4 removed")
    assert zk.exists(zkpaths.partition_path("a", 4)) is None


def test_controller_preferred_election(nodes, zk):
    ns = nodes([1, 2, 3])
    ctl = wait_until(lambda: active(ns), what="controller")
    others = [n for n in ns if n is not ctl]
    pref = others[0]
    admin.create_topic(zk, "p", 1, 3, replica_assignment={0: [pref.id, others[1].id, ctl.id]})
    admin.wait_for_leaders(zk, "p")
    pref.kill()
    wait_until(lambda: desc(zk, "p")[0]["leader"] == others[1].id, what="failover")
    from controller_fakes import Node
    back = Node(pref.id, pref.broker.zk_hosts, start_controller=False)
    try:
        # back, in the ISR (fake brokers join the ISR themselves), but not leader
        wait_until(lambda: pref.id in desc(zk, "p")[0]["isr"], what="back in ISR")
        assert desc(zk, "p")[0]["leader"] == others[1].id
        admin.preferred_election(zk, "p")
        wait_until(lambda: desc(zk, "p")[0]["leader"] == pref.id, what="preferred leader")
        wait_until(lambda: zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION) is None, what="admin path removed")
    finally:
        back.stop()


def test_controller_auto_rebalance(nodes, zk):
    ns = nodes([1, 2], config={"auto.leader.rebalance.enable": True,
                               "leader.imbalance.check.interval.seconds": 1})
    ctl = wait_until(lambda: active(ns), what="controller")
    other = next(n for n in ns if n is not ctl)
    admin.create_topic(zk, "r", 1, 2, replica_assignment={0: [other.id, ctl.id]})
    admin.wait_for_leaders(zk, "r")
    # move leadership away from the preferred replica behind the controller's back
    path = zkpaths.leader_and_isr_path("r", 0)
    data, stat = zk.get(path)
    lai = zkpaths.LeaderAndIsr.decode(data)
    zk.set(path, zkpaths.LeaderAndIsr(ctl.id, lai.leader_epoch + 1, lai.isr, lai.controller_epoch).encode(),
           version=stat.version)
    ctl.controller.ctx.leaders[("r", 0)] = zkpaths.LeaderAndIsr(ctl.id, lai.leader_epoch + 1, lai.isr, 0)
    wait_until(lambda: desc(zk, "r")[0]["leader"] == other.id, what="auto rebalance", timeout=15)


def test_controller_controlled_shutdown(nodes, zk):
    ns = nodes([1, 2, 3])
    ctl = wait_until(lambda: active(ns), what="controller")
    victim = next(n for n in ns if n is not ctl)
    admin.create_topic(zk, "c", 6, 2)
    admin.create_topic(zk, "single", 1, 1, replica_assignment={0: [victim.id]})
    admin.wait_for_leaders(zk, "c")
    admin.wait_for_leaders(zk, "single")
    led_before = [p["partition"] for p in desc(zk, "c").values() if p["leader"] == victim.id]
    assert led_before
    for n in ns:
        n.broker.clear()
    fut = ctl.controller.handle_controlled_shutdown(victim.id, 1)
    err, remaining = fut.result(timeout=20)
    assert err == E.NONE and remaining == []
    d = desc(zk, "c")
    for p in d.values():
        assert p["leader"] != victim.id and victim.id not in p["isr"]
    # followers on the victim were told to stop (no delete)
    stops = victim.broker.of_type(control.StopReplicaRequest)
    assert stops and not stops[0].delete_partitions
    # the single-replica partition stays (Kafka: it cannot move)
    assert desc(zk, "single")[0]["leader"] == victim.id
    # stale broker epoch
    assert ctl.controller.handle_controlled_shutdown(victim.id, 99).result(10)[0] == E.STALE_BROKER_EPOCH
    # a non-controller answers NOT_CONTROLLER at once
    assert victim.controller.handle_controlled_shutdown(victim.id, 1).result(1) == (E.NOT_CONTROLLER, [])


def test_controller_unreachable_broker_does_not_block(nodes, zk):
    ns = nodes([1, 2, 3])
    ctl = wait_until(lambda: active(ns), what="controller")
    mute = next(n for n in ns if n is not ctl)
    mute.broker.close_socket()  # registered in ZooKeeper but unreachable
    admin.create_topic(zk, "x", 3, 3)
    admin.wait_for_leaders(zk, "x", timeout=10)
    admin.create_topic(zk, "y", 1, 1, replica_assignment={0: [ctl.id]})
    admin.wait_for_leaders(zk, "y", timeout=10)
    live = [n for n in ns if n is not mute]
    wait_until(lambda: all(("y", 0) in {(s.topic, s.partition) for r in n.broker.of_type(control.UpdateMetadataRequest)
                                        for s in r.partition_states} for n in live), what="others served")
