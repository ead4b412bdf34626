"""The broker with the real controller component in each process: topics
created through cluster.admin get leaders, clients produce and consume, and
SIGTERM makes a broker ask the controller for a controlled shutdown (moving
leadership away first) before it exits 0."""
from __future__ import annotations

import time

from broker_cluster import AckedProducer, wait_until
from cluster import admin


def test_controller_driven_cluster_and_controlled_shutdown(make_cluster):
    import confluent_kafka as ck
    c = make_cluster(3, **{"chaoslog.controller.enable": True,
                           "controlled.shutdown.enable": True,
                           "controlled.shutdown.retry.backoff.ms": 500,
                           "min.insync.replicas": 2})
    admin.create_topic(c.zk, "ctl", 1, 3)
    desc = admin.wait_for_leaders(c.zk, "ctl", 30)
    leader = desc["partitions"][0]["leader"]
    assert leader in (1, 2, 3)

    with AckedProducer(c.bootstrap, "ctl", b"c%06d", **{"enable.idempotence": True}) as load:
        wait_until(lambda: len(load.acked) > 2000, 30, "acks before the shutdown")
        t0 = time.monotonic()
        assert c.brokers[leader].terminate(60) == 0
        took = time.monotonic() - t0
        log = c.brokers[leader].stderr()
        assert "controlled shutdown succeeded" in log, log[-3000:]
        new = admin.wait_for_leaders(c.zk, "ctl", 30)["partitions"][0]["leader"]
        assert new != leader
        n = len(load.acked)
        wait_until(lambda: len(load.acked) > n + 2000, 30, "acks after the shutdown")
    assert load.errors == []
    cons = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": "x",
                        "enable.auto.commit": False})
    cons.assign([ck.TopicPartition("ctl", 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(load.acked) and time.monotonic() < deadline:
        for m in cons.consume(1000, 0.5):
            if not m.error():
                got.append(m.value())
    cons.close()
    assert set(load.acked) <= set(got)
    # Idempotence across the leader change: no duplicates either.
    assert len(got) == len(set(got))
    assert took < 30
