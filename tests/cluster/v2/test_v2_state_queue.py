"""The V2 state-change queue against a real ZooKeeper (docs/design.md#v2-state-queue)."""
from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from cluster.v2.state_queue import (CLOSE_REPLICA, NO_EPOCH, START_REPLICA, StateChange,
                                    StateChangeQueue, StateQueueFull, acts_on)
from cluster.zkpaths import state_queue_path


def start(topic="t", partition=0, epoch=3, sender="broker-1"):
    return StateChange(START_REPLICA, topic, partition, epoch, sender)


def close(topic="t", partition=0, epoch=3, sender="broker-1"):
    return StateChange(CLOSE_REPLICA, topic, partition, epoch, sender)


def test_requests_come_back_in_the_order_they_were_put(zk):
    q = StateChangeQueue(zk, 2)
    q.create()
    sent = [start("a", 0, 1), close("b", 3, 7), start("a", 1, NO_EPOCH, "admin")]
    names = [q.put(c) for c in sent]
    assert names == sorted(names)
    assert [p.change for p in q.pending()] == sent
    assert [p.name for p in q.pending()] == names


def test_the_queue_outlives_the_session_that_filled_it(zk, zk_hosts):
    StateChangeQueue(zk, 4).put(close("gone", 2, 9))     # put creates the queue too
    other = KazooClient(zk_hosts)
    other.start(timeout=10)
    try:
        assert [p.change for p in StateChangeQueue(other, 4).pending()] == [close("gone", 2, 9)]
    finally:
        other.stop()
        other.close()


def test_drain_acts_in_order_and_keeps_what_failed_and_what_follows(zk):
    q = StateChangeQueue(zk, 1)
    for c in (start("t", 0), close("t", 1), start("t", 2)):
        q.put(c)
    seen = []

    def act(request):
        seen.append(request.change.partition)
        if request.change.partition == 1:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        q.drain(act)
    assert seen == [0, 1]
    assert [p.change.partition for p in q.pending()] == [1, 2]
    seen.clear()
    assert q.drain(lambda r: seen.append(r.change.partition)) == 2
    assert seen == [1, 2] and q.pending() == []


def test_a_znode_that_is_no_request_is_handed_over_with_the_reason_and_removed(zk):
    q = StateChangeQueue(zk, 1)
    q.put(start())
    zk.create(f"{state_queue_path(1)}/request-", b'{"op": "explode"', sequence=True)
    zk.create(f"{state_queue_path(1)}/request-", b'{"op": "move-replica", "topic": "t", '
              b'"partition": 0, "epoch": 1, "from": "broker-3"}', sequence=True)
    q.put(close())
    got = []
    q.drain(got.append)
    assert [r.change for r in got] == [start(), None, None, close()]
    assert "not a state-change request" in got[1].problem
    assert "unknown state change 'move-replica'" in got[2].problem
    assert q.pending() == []


def test_a_full_queue_shrinks_to_the_newest_close_of_each_partition(zk):
    q = StateChangeQueue(zk, 3, max_requests=6)
    for c in (start("a", 0, 1), close("a", 0, 4), close("a", 0, 2), start("b", 1, 5),
              close("b", 1, 5), start("c", 0, 1)):
        q.put(c)
    q.put(start("d", 0, 1))          # full: shrinks, then fits
    assert [p.change for p in q.pending()] == [close("a", 0, 4), close("b", 1, 5),
                                               start("d", 0, 1)]


def test_a_queue_full_of_distinct_closes_refuses_and_writes_nothing(zk):
    q = StateChangeQueue(zk, 3, max_requests=3)
    closes = [close("t", p, 1) for p in range(3)]
    for c in closes:
        q.put(c)
    with pytest.raises(StateQueueFull, match="broker 3 holds 3 requests after shrinking; "
                                             "start-replica of t-9 not queued"):
        q.put(start("t", 9))
    assert [p.change for p in q.pending()] == closes


@pytest.mark.parametrize("change, leader_epoch, acted", [
    (close(epoch=1), 5, True),               # deletions reach brokers that were down
    (close(epoch=NO_EPOCH), None, True),
    (start(epoch=5), 5, True),                # from the current leader
    (start(epoch=4), 5, False),               # queued by an earlier leader: stale
    (start(epoch=6), 5, False),
    (start(epoch=NO_EPOCH), None, True),      # a new partition, from an admin command
    (start(epoch=NO_EPOCH), 0, False),        # an admin start once a leader exists
])
def test_which_requests_are_acted_on(change, leader_epoch, acted):
    assert acts_on(change, leader_epoch) is acted


def test_a_request_round_trips_through_its_bytes():
    c = StateChange(START_REPLICA, "tópic", 7, 12, "broker-3")
    assert StateChange.decode(c.encode()) == c
    with pytest.raises(ValueError, match="not a state-change request"):
        StateChange.decode(b"\xff\xfe")
