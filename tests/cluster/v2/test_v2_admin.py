"""The V2 admin commands against a real ZooKeeper with no brokers (nothing
takes the queued requests): the failure paths. Brokers carrying them out:
test_v2_coordinator_e2e.py."""
from __future__ import annotations

import pytest

from cluster import zkpaths
from cluster.v2 import admin
from cluster.v2.state_queue import CLOSE_REPLICA, START_REPLICA, StateChangeQueue
from cluster.zkpaths import TopicAssignment


def ops(zk, broker):
    return [(p.change.op, p.change.partition) for p in StateChangeQueue(zk, broker).pending()]


def test_a_creation_nobody_takes_fails_and_the_next_attempt_cleans_it_up(zk):
    zk.ensure_path(zkpaths.BROKER_IDS)
    with pytest.raises(admin.V2AdminError, match=r"brokers \[1, 2\] did not take their "
                                                 r"start-replica within 0.3 s"):
        admin.create_topic(zk, "t", {0: [1, 2]}, timeout_s=0.3)
    assert not zk.exists(zkpaths.topic_path("t"))
    assert zk.get(zkpaths.partitions_reassigned_path("t", 0))[0] == b"[1, 2]"
    admin.clean_failed_creation(zk, "t")
    assert not zk.exists(zkpaths.partitions_reassigned_path("t"))
    assert ops(zk, 1) == ops(zk, 2) == [(START_REPLICA, 0), (CLOSE_REPLICA, 0)]


def test_existing_and_missing_topics_are_refused(zk):
    zk.ensure_path(zkpaths.TOPICS)
    zk.create(zkpaths.topic_path("here"), TopicAssignment({0: (1,)}).encode())
    with pytest.raises(admin.V2AdminError, match="topic 'here' already exists"):
        admin.create_topic(zk, "here", {0: [1]})
    with pytest.raises(admin.V2AdminError, match="topic 'gone' does not exist"):
        admin.delete_topic(zk, "gone")


def test_a_delete_with_every_replica_down_queues_the_closes_and_removes_the_topic(zk):
    zk.ensure_path(zkpaths.BROKER_IDS)
    zk.ensure_path(zkpaths.TOPICS)
    zk.create(zkpaths.topic_path("t"), TopicAssignment({0: (1, 2), 1: (2, 3)}).encode())
    assert admin.delete_topic(zk, "t", timeout_s=1) == [1, 2, 3]
    assert not zk.exists(zkpaths.topic_path("t"))
    assert not zk.exists(zkpaths.partitions_reassigned_path("t"))
    assert ops(zk, 2) == [(CLOSE_REPLICA, 0), (CLOSE_REPLICA, 1)]


def test_an_add_nobody_takes_fails_and_undoes_itself(zk):
    zk.ensure_path(zkpaths.BROKER_IDS)
    zk.ensure_path(zkpaths.TOPICS)
    before = TopicAssignment({0: (1, 2)}, "id-1")
    zk.create(zkpaths.topic_path("t"), before.encode())
    with pytest.raises(admin.V2AdminError, match=r"adding partitions to 't': brokers \[1, 2\] "
                                                 r"did not take their start-replica"):
        admin.add_partitions(zk, "t", {1: [2, 1]}, timeout_s=0.3)
    assert TopicAssignment.decode(zk.get(zkpaths.topic_path("t"))[0]) == before
    assert not zk.exists(zkpaths.partitions_reassigned_path("t"))
    assert ops(zk, 1) == ops(zk, 2) == [(START_REPLICA, 1), (CLOSE_REPLICA, 1)]
    with pytest.raises(admin.V2AdminError, match=r"already has partitions \[0\]"):
        admin.add_partitions(zk, "t", {0: [1]})


def test_a_removal_with_every_replica_down_shrinks_the_assignment(zk):
    zk.ensure_path(zkpaths.BROKER_IDS)
    zk.ensure_path(zkpaths.TOPICS)
    zk.create(zkpaths.topic_path("t"), TopicAssignment({0: (1, 2), 1: (2, 3)}, "id-1").encode())
    zk.ensure_path(zkpaths.partition_path("t", 1))
    with pytest.raises(admin.V2AdminError, match=r"has no partitions \[5\]"):
        admin.remove_partitions(zk, "t", [1, 5])
    with pytest.raises(admin.V2AdminError, match="every partition of 't'"):
        admin.remove_partitions(zk, "t", [0, 1])
    assert admin.remove_partitions(zk, "t", [1], timeout_s=1) == [2, 3]
    assert TopicAssignment.decode(zk.get(zkpaths.topic_path("t"))[0]) == \
        TopicAssignment({0: (1, 2)}, "id-1")
    assert not zk.exists(zkpaths.partition_path("t", 1))
    assert not zk.exists(zkpaths.partitions_reassigned_path("t"))
    assert ops(zk, 3) == [(CLOSE_REPLICA, 1)]


def test_a_reassignment_nobody_carries_out_stays_marked_and_pending(zk):
    """With no leader to carry it out the move stays marked: a second one is
    refused, and the harness's observer counts it as a pending reassignment
    (its `unrecovered` and `isr-invariant` checks allow for the new replicas)."""
    from harness.observer import zookeeper_state
    for b in (1, 2, 3):
        zk.create(zkpaths.broker_path(b), b"{}", makepath=True)
    zk.ensure_path(zkpaths.TOPICS)
    zk.create(zkpaths.topic_path("m"), TopicAssignment({0: (1, 2), 1: (2, 3)}).encode())
    assert admin.reassign(zk, {("m", 0): [3, 2], ("m", 1): [2, 3]}, timeout_s=0.5) == {("m", 0)}
    assert zookeeper_state(zk)["reassigning"] == {"m/0": [3, 2]}
    with pytest.raises(admin.V2AdminError, match=r"m-0 is already being changed \(to \[3, 2\]\)"):
        admin.reassign(zk, {("m", 0): [1, 3]})
    # A leader that wrote the assignment and died before unmarking: done.
    zk.set(zkpaths.topic_path("m"), TopicAssignment({0: (3, 2), 1: (2, 3)}).encode())
    assert zookeeper_state(zk)["reassigning"] == {}
    assert admin.reassign(zk, {("m", 0): [1, 3]}) == {("m", 0)}
