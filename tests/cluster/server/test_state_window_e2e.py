"""The test-only state window (cluster/server/state_window.py) on real
broker processes with the real controller: each replica's leader, epoch,
ISR, HW, LEO, the leader's view of its followers' LEOs and the last
committed batch, as the harness's oracles read them; off by default."""
from __future__ import annotations

import pytest

from broker_cluster import AckedProducer, wait_until
from cluster import admin
from harness import kafka_wire


def _window(broker) -> dict:
    conn = kafka_wire.KafkaConnection(*broker.address, timeout=10)
    try:
        return kafka_wire.state_window(conn)
    finally:
        conn.close()


def _replica(view: dict, topic: str) -> dict:
    [p] = [p for p in view["partitions"] if (p["topic"], p["partition"]) == (topic, 0)]
    return p


def test_each_broker_shows_its_replicas_and_the_leader_its_followers(make_cluster):
    c = make_cluster(3, **{"chaoslog.controller.enable": True, "min.insync.replicas": 2,
                           "chaoslog.state.window.enable": True})
    admin.create_topic(c.zk, "sw", 1, 3)
    leader = admin.wait_for_leaders(c.zk, "sw", 30)["partitions"][0]["leader"]
    with AckedProducer(c.bootstrap, "sw", b"w%05d") as load:
        wait_until(lambda: len(load.acked) > 500, 30, "acknowledged writes")
    assert load.errors == []

    def settled() -> list[dict]:
        views = {b: _replica(_window(c.brokers[b]), "sw") for b in (1, 2, 3)}
        hw = views[leader]["hw"]
        if any(v["hw"] != hw or v["leo"] != hw for v in views.values()):
            return []
        return views
    views = wait_until(settled, 30, "every replica at the leader's HW")
    lead = views[leader]
    assert lead["leader"] == leader and sorted(lead["isr"]) == [1, 2, 3]
    assert lead["hw"] >= 500 and not lead["fenced"]
    assert {int(b): leo for b, leo in lead["followers"].items()} == {
        b: lead["hw"] for b in (1, 2, 3) if b != leader}
    # The same last committed batch (base, last offset, leader epoch, CRC) everywhere.
    assert len({tuple(v["committed"]) for v in views.values()}) == 1
    assert lead["committed"][1] == lead["hw"] - 1
    assert {v["epoch"] for v in views.values()} == {lead["epoch"]}
    assert [b for b, v in views.items() if "followers" in v] == [leader]
    whole = _window(c.brokers[leader])
    assert whole["broker"] == leader and whole["start_epoch"] >= 1
    assert [p["topic"] for p in whole["partitions"]] == ["sw"] and not whole["truncated"]
    # The active controller, and it alone, shows its view: what it holds of `sw`.
    # (`busy` while a controller event runs past 50 ms: asked again.)
    def controller_views() -> list:
        views = {b: _window(c.brokers[b]).get("controller") for b in (1, 2, 3)}
        shown = [(b, v) for b, v in views.items() if v is not None]
        return [] if any(v.get("busy") for _b, v in shown) else shown or [(None, None)]
    [(cid, view)] = wait_until(controller_views, 30, "a controller view between two events")
    assert view["active"] and view["controller_id"] == cid and view["epoch"] >= 1
    assert sorted(b["id"] for b in view["live_brokers"]) == [1, 2, 3]
    [held] = [p for p in view["partitions"] if p["topic"] == "sw"]
    assert held["leader_and_isr"]["leader"] == leader
    assert sorted(held["leader_and_isr"]["isr"]) == [1, 2, 3]


def test_the_window_is_closed_unless_the_harness_asks_for_it(make_cluster):
    c = make_cluster(1, **{"chaoslog.controller.enable": True})
    with pytest.raises(kafka_wire.WireError):
        _window(c.brokers[1])
