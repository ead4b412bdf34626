"""The controller's view for tests and the harness: ControllerContext.snapshot
(plain JSON-able data) and Controller.snapshot (taken from another thread
between two events, docs/design.md#event-queue). Real ZooKeeper, the
in-process controller and fake brokers."""
from __future__ import annotations

import json
import threading

from cluster import admin, zkpaths
from cluster.controller.context import ControllerContext, ReassignmentContext
from cluster.zkpaths import BrokerRegistration, LeaderAndIsr
from controller_fakes import wait_until


def active(nodes):
    act = [n for n in nodes if n.controller.is_active]
    return act[0] if len(act) == 1 else None


def zk_partitions(zk, topic):
    """What ZooKeeper holds of a topic, in the snapshot's shape."""
    ta = zkpaths.TopicAssignment.decode(zk.get(zkpaths.topic_path(topic))[0])
    out = []
    for p, replicas in sorted(ta.partitions.items()):
        data, stat = zk.get(zkpaths.leader_and_isr_path(topic, p))
        lai = LeaderAndIsr.decode(data, stat.version)
        out.append({"topic": topic, "partition": p, "topic_id": ta.topic_id,
                    "replicas": list(replicas),
                    "leader_and_isr": {"leader": lai.leader, "leader_epoch": lai.leader_epoch,
                                       "isr": list(lai.isr),
                                       "controller_epoch": lai.controller_epoch,
                                       "zk_version": lai.zk_version}})
    return out


def test_controller_context_snapshot_is_plain_data():
    ctx = ControllerContext(4, epoch=9)
    ctx.live_brokers = {2: BrokerRegistration(2, "h", 9002, 5), 1: BrokerRegistration(1, "h", 9001, 3)}
    ctx.shutting_down.add(2)
    ctx.set_assignment(("t", 1), (2, 1))
    ctx.set_assignment(("t", 0), (1, 2))
    ctx.leaders[("t", 0)] = LeaderAndIsr(1, 6, (1, 2), 8, 11)
    ctx.reassigning[("t", 0)] = ReassignmentContext((2, 3), last_step=2)
    ctx.topics_being_deleted.add("old")
    snap = ctx.snapshot()
    assert json.loads(json.dumps(snap)) == snap
    assert snap["controller_id"] == 4 and snap["epoch"] == 9
    assert snap["live_brokers"] == [{"id": 1, "start_epoch": 3}, {"id": 2, "start_epoch": 5}]
    assert snap["shutting_down"] == [2]
    assert snap["partitions"] == [
        {"topic": "t", "partition": 0, "topic_id": "", "replicas": [1, 2],
         "leader_and_isr": {"leader": 1, "leader_epoch": 6, "isr": [1, 2],
                            "controller_epoch": 8, "zk_version": 11}},
        {"topic": "t", "partition": 1, "topic_id": "", "replicas": [2, 1], "leader_and_isr": None}]
    assert snap["reassigning"] == [{"topic": "t", "partition": 0, "old_replicas": [1, 2],
                                    "new_replicas": [2, 3], "last_step": 2}]
    assert snap["topics_being_deleted"] == ["old"]


def test_controller_snapshot_is_what_zookeeper_holds(nodes, zk):
    """Broker 3 never catches up, so a reassignment onto it stays in
    progress (step 3) and shows in the snapshot with its old and new replicas."""
    ns = nodes([1, 2]) + nodes([3], catch_up=False)
    ctl = wait_until(lambda: active(ns), what="controller")
    admin.create_topic(zk, "s", 3, 2, replica_assignment={0: [1, 2], 1: [2, 1], 2: [1, 2]})
    admin.wait_for_leaders(zk, "s")
    admin.reassign(zk, {("s", 0): [2, 3]})
    wait_until(lambda: ctl.controller.snapshot()["reassigning"], what="reassignment in progress")
    wait_until(lambda: ctl.controller.snapshot()["partitions"] == zk_partitions(zk, "s"),
               what="the controller's partitions as in ZooKeeper")
    snap = ctl.controller.snapshot()
    assert json.loads(json.dumps(snap)) == snap
    assert snap["active"] and snap["controller_id"] == ctl.id
    assert snap["epoch"] == int(zk.get(zkpaths.CONTROLLER_EPOCH)[0])
    assert snap["live_brokers"] == [{"id": b, "start_epoch": 1} for b in (1, 2, 3)]
    assert snap["shutting_down"] == [] and snap["topics_being_deleted"] == []
    (r,) = snap["reassigning"]
    assert (r["topic"], r["partition"], r["old_replicas"], r["new_replicas"]) == ("s", 0, [1, 2], [2, 3])
    other = next(n for n in ns if n is not ctl).controller.snapshot()
    assert not other["active"] and other["partitions"] == []


def test_controller_snapshot_from_another_thread_sees_whole_events(nodes, zk):
    """While topics are being created, every snapshot shows each topic with
    all its partitions and a leader for each: the state between two events
    (TopicChange assigns the partitions, then elects their leaders)."""
    ns = nodes([1, 2, 3])
    ctl = wait_until(lambda: active(ns), what="controller")
    topics, partitions = [f"c{i}" for i in range(6)], 40
    seen, problems, done = [], [], threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                snap = ctl.controller.snapshot()
            except Exception as x:  # noqa: BLE001 - the test reports it
                problems.append(repr(x))
                return
            by_topic: dict[str, int] = {}
            for p in snap["partitions"]:
                by_topic[p["topic"]] = by_topic.get(p["topic"], 0) + 1
                lai = p["leader_and_isr"]
                if lai is None or lai["leader"] not in p["replicas"]:
                    problems.append(f"no leader: {p}")
            problems.extend(f"{t}: {n} partitions" for t, n in by_topic.items() if n != partitions)
            seen.append(len(by_topic))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for t in topics:
            admin.create_topic(zk, t, partitions, 2)
        for t in topics:
            admin.wait_for_leaders(zk, t)
    finally:
        done.set()
        reader.join(30)
    assert not problems, problems[:5]
    assert len(set(seen)) >= 2, "the snapshots did not overlap the creation"
    assert {p["topic"] for p in ctl.controller.snapshot()["partitions"]} == set(topics)
