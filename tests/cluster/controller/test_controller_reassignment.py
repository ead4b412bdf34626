"""Partition reassignment (KAFKA-42): its six test cases, and a controller
failover between every two steps. Fake brokers join the ISR in ZooKeeper
themselves when told to follow, to simulate catching up."""
import pytest

from cluster import admin, zkpaths
from cluster.protocol import control
from controller_fakes import Node, wait_until


def active(nodes):
    act = [n for n in nodes if n.controller.is_active]
    return act[0] if len(act) == 1 else None


def part(zk, topic, p=0):
    return {x["partition"]: x for x in admin.describe_topic(zk, topic)["partitions"]}[p]


def setup_cluster(nodes, zk, n=4, **kw):
    """Broker 1 is the controller and hosts no replica of the test topic."""
    (c,) = nodes([1], **kw)
    wait_until(lambda: c.controller.is_active, what="controller 1")
    rest = nodes(range(2, n + 1))
    return c, rest


def check_done(zk, nodes_by_id, topic, rar, old):
    p = part(zk, topic)
    assert p["replicas"] == rar
    assert p["leader"] in rar and set(p["isr"]) <= set(rar) and p["isr"]
    assert zk.exists(zkpaths.REASSIGN_PARTITIONS) is None
    for b in old:
        if b in nodes_by_id:
            stops = [r for r in nodes_by_id[b].broker.of_type(control.StopReplicaRequest)
                     if r.delete_partitions and any(x.topic == topic for x in r.partitions)]
            assert stops, f"old replica {b} was not deleted"


@pytest.mark.parametrize("case,ar,rar", [
    ("leader in new replicas", [2, 3], [2, 4]),
    ("leader not in new replicas", [2, 3], [3, 4]),
    ("no overlap", [2, 3], [4, 5]),
])
def test_controller_reassign_cases(nodes, zk, case, ar, rar):
    c, rest = setup_cluster(nodes, zk, n=5)
    by_id = {n.id: n for n in [c, *rest]}
    admin.create_topic(zk, "r", 1, 2, replica_assignment={0: ar})
    admin.wait_for_leaders(zk, "r")
    wait_until(lambda: sorted(part(zk, "r")["isr"]) == sorted(ar), what="ISR full")
    res = admin.reassign(zk, {("r", 0): rar}, wait=True, timeout=30)
    assert res["done"], res
    check_done(zk, by_id, "r", rar, [b for b in ar if b not in rar])
    steps = [r["to"] for r in admin.state_log(zk, "r", 0) if r["kind"] == "reassignment"]
    assert steps == [f"step {i} done" for i in range(1, 8)]


def test_controller_reassign_nonexistent_partition_rejected(nodes, zk):
    c, rest = setup_cluster(nodes, zk, n=3)
    admin.create_topic(zk, "r", 1, 1, replica_assignment={0: [2]})
    admin.wait_for_leaders(zk, "r")
    # bypass the admin's own check: write the znode directly
    zk.create(zkpaths.REASSIGN_PARTITIONS, zkpaths.encode_reassignment({("r", 7): [2, 3], ("r", 0): [2, 9]}))
    wait_until(lambda: zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, what="invalid requests removed")
    recs = [r for r in admin.state_log(zk, "r") if r["kind"] == "reassignment"]
    notes = " ".join(r.get("note", "") for r in recs)
    assert "partition does not exist" in notes and "not alive" in notes
    assert part(zk, "r")["replicas"] == [2]


def test_controller_reassign_completed_up_to_step6_by_previous_controller(nodes, zk):
    """KAFKA-42 case 5: AR already equals RAR; the new controller just removes
    the admin entry."""
    c, rest = setup_cluster(nodes, zk, n=3)
    admin.create_topic(zk, "r", 1, 1, replica_assignment={0: [2]})
    admin.wait_for_leaders(zk, "r")
    c.kill()
    new = wait_until(lambda: active(rest), what="new controller")
    zk.create(zkpaths.REASSIGN_PARTITIONS, zkpaths.encode_reassignment({("r", 0): [2]}))
    wait_until(lambda: zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, what="entry removed")
    assert new.controller.is_active


@pytest.mark.parametrize("halt_after", [1, 2, 3, 4, 5, 6])
def test_controller_reassign_survives_failover_after_step(nodes, zk, halt_after):
    """The controller dies right after step N; another one resumes from the
    admin path and completes (KAFKA-42 failure cases 1-5; case 6 is N=3)."""
    (c,) = nodes([1], halt_after_step=halt_after)
    wait_until(lambda: c.controller.is_active, what="controller 1")
    rest = nodes([2, 3, 4])
    by_id = {n.id: n for n in [c, *rest]}
    ar, rar = [2, 3], [3, 4]  # the leader (2) is not in RAR
    admin.create_topic(zk, "r", 1, 2, replica_assignment={0: ar})
    admin.wait_for_leaders(zk, "r")
    wait_until(lambda: sorted(part(zk, "r")["isr"]) == sorted(ar), what="ISR full")
    admin.reassign(zk, {("r", 0): rar})
    wait_until(lambda: c.controller.events.halted, what=f"halt after step {halt_after}")
    steps = [r["to"] for r in admin.state_log(zk, "r", 0) if r["kind"] == "reassignment"]
    assert steps[-1] == f"step {halt_after} done"
    c.kill()
    new = wait_until(lambda: active(rest), what="new controller")
    wait_until(lambda: zk.exists(zkpaths.REASSIGN_PARTITIONS) is None, timeout=30,
               what="reassignment completed by the new controller")
    check_done(zk, by_id, "r", rar, [2])
    assert new.controller.epoch == c.controller.epoch + 1
