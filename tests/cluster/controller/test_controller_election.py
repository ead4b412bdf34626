"""Election, epochs, failover, zombie fencing - against a real ZooKeeper."""
import time

from kazoo.exceptions import NoNodeError

from cluster import admin, zkpaths
from cluster.protocol import control
from controller_fakes import wait_until


def active(nodes):
    act = [n for n in nodes if n.controller.is_active]
    return act[0] if len(act) == 1 else None


def test_controller_election_and_epoch(nodes, zk):
    (n1,) = nodes([1])
    wait_until(lambda: n1.controller.is_active, what="controller 1 active")
    assert admin.controller_info(zk) == {"id": 1, "epoch": 1}
    # INIT LeaderAndIsr (empty: no partitions) and UpdateMetadata reach the broker
    wait_until(lambda: n1.broker.of_type(control.UpdateMetadataRequest), what="update metadata")
    lai = n1.broker.of_type(control.LeaderAndIsrRequest)
    assert lai and lai[0].init and lai[0].controller_epoch == 1


def test_controller_two_controllers_one_wins_and_failover(nodes, zk):
    n1, n2, n3 = nodes([1, 2, 3])
    wait_until(lambda: active([n1, n2, n3]), what="one active controller")
    time.sleep(0.5)
    assert sum(n.controller.is_active for n in (n1, n2, n3)) == 1
    winner = active([n1, n2, n3])
    epoch = winner.controller.epoch
    assert admin.controller_info(zk) == {"id": winner.id, "epoch": epoch}
    admin.create_topic(zk, "t", 3, 3)
    admin.wait_for_leaders(zk, "t")
    for n in (n1, n2, n3):
        n.broker.clear()
    winner.expire_session()
    rest = [n for n in (n1, n2, n3) if n is not winner]
    new = wait_until(lambda: active(rest), what="new controller")
    wait_until(lambda: admin.controller_info(zk)["epoch"] == epoch + 1, what="epoch + 1")
    assert new.controller.epoch == epoch + 1
    # the old one resigned
    wait_until(lambda: not winner.controller.is_active, what="old controller resigned")
    # every live broker got LeaderAndIsr INIT with epoch+1 for all its partitions
    for n in rest:
        def got_init(n=n):
            return [r for r in n.broker.of_type(control.LeaderAndIsrRequest)
                    if r.init and r.controller_epoch == epoch + 1]
        reqs = wait_until(got_init, what=f"INIT to broker {n.id}")
        assert {(s.topic, s.partition) for s in reqs[0].partition_states} == {("t", 0), ("t", 1), ("t", 2)}


def test_controller_zombie_requests_rejected_and_recorded(nodes, zk):
    n1, n2 = nodes([1, 2])
    wait_until(lambda: active([n1, n2]), what="active")
    ctl = active([n1, n2])
    # The brokers have seen a newer controller: the next request of this one is stale.
    for n in (n1, n2):
        n.broker.reject_below = ctl.controller.epoch + 1
    admin.create_topic(zk, "z", 1, 2)
    wait_until(lambda: any(r["kind"] == "rejected" for r in admin.state_log(zk, "z")),
               what="rejected record")
    rec = [r for r in admin.state_log(zk, "z") if r["kind"] == "rejected"][0]
    assert rec["controller_epoch"] == ctl.controller.epoch and rec["target_broker"] in (1, 2)
    assert n1.broker.rejected() or n2.broker.rejected()


def test_controller_zombie_zk_writes_fenced(nodes, zk):
    n1, n2 = nodes([1, 2])
    wait_until(lambda: active([n1, n2]), what="active")
    ctl = active([n1, n2]).controller
    admin.create_topic(zk, "f", 1, 2)
    admin.wait_for_leaders(zk, "f")
    # another controller bumps the epoch behind this one's back
    data, stat = zk.get(zkpaths.CONTROLLER_EPOCH)
    zk.set(zkpaths.CONTROLLER_EPOCH, str(int(data) + 1).encode(), version=stat.version)
    before = zk.get(zkpaths.leader_and_isr_path("f", 0))
    admin.preferred_election(zk, "f")  # any event that would write
    zk.create(zkpaths.REASSIGN_PARTITIONS, zkpaths.encode_reassignment({("f", 0): [2, 1]}))
    # its fenced write fails, it resigns; as /controller is still its own it
    # is then elected again with a new epoch (3), and only then writes
    wait_until(lambda: ctl.epoch == int(data) + 2, what="re-election with a new epoch")
    recs = admin.state_log(zk)
    assert any("resigned: another controller" in (r.get("note") or "") for r in recs)
    lai = zkpaths.LeaderAndIsr.decode(zk.get(zkpaths.leader_and_isr_path("f", 0))[0])
    assert zk.get(zkpaths.leader_and_isr_path("f", 0))[0] == before[0] or lai.controller_epoch == ctl.epoch
    assert not [r for r in recs if r["kind"] == "partition" and r["controller_epoch"] == 1
                and r["event"] == "PartitionReassigned"]
