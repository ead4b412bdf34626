"""What the observer calls a recovered cluster (pure logic over one
ZooKeeper state, docs/history-format.md `recovery`)."""
from __future__ import annotations

from harness.observer import _not_recovered


def _state(**kw):
    base = {"controller": 1, "controller_epoch": 3, "live_brokers": [1, 2, 3], "reassigning": {},
            "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3], "leader": 1,
                            "leader_epoch": 2, "isr": [1, 2, 3], "zk_version": 4,
                            "controller_epoch": 3}],
            "unelected": []}
    return {**base, **kw}


def test_a_healthy_state_is_recovered():
    assert _not_recovered(_state(), [1, 2, 3]) == []
    old = _state()
    del old["unelected"]          # a state written before the key existed
    assert _not_recovered(old, [1, 2, 3]) == []


def test_a_partition_never_elected_keeps_the_cluster_unrecovered():
    """A partition added while faults happened whose leader the controller
    never elected has no leaderAndISR znode at all: without this it was
    simply absent from the state and the cluster counted as recovered."""
    assert _not_recovered(_state(unelected=["t/1"]), [1, 2, 3]) == [
        "t/1: assigned, but no leader was ever elected"]


def test_what_else_keeps_it_unrecovered():
    p = _state()["partitions"][0]
    wrong = _not_recovered(_state(controller=None, live_brokers=[1, 2], reassigning={"t/0": [1]},
                                  partitions=[{**p, "isr": [1, 2]}]), [1, 2, 3])
    assert wrong == ["broker 3 not registered", "no controller", "t/0: reassignment pending",
                     "t/0: ISR [1, 2] of replicas [1, 2, 3]"]


def test_a_cluster_without_a_controller_needs_none():
    """Coordination V2 has no controller (docs/design.md#v2)."""
    assert _not_recovered(_state(controller=None), [1, 2, 3], controller=False) == []
