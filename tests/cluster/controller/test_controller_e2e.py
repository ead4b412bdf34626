"""End to end with real brokers (`python -m cluster.broker`), the controller
running inside each: failover under load, a SIGSTOPped zombie controller,
a topic deleted while a replica's broker is down."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from cluster import admin, zkpaths
from controller_brokers import BrokerProc
from controller_fakes import wait_until


@pytest.fixture
def cluster(zk_hosts, zk, tmp_path):
    procs: dict[int, BrokerProc] = {}

    def make(n, **overrides):
        for i in range(1, n + 1):
            procs[i] = BrokerProc(i, zk_hosts, tmp_path, **overrides).start()
        for p in procs.values():
            p.wait_registered(zk)
        wait_until(lambda: admin.controller_info(zk)["id"] in procs, what="a controller")
        return procs
    yield make
    for p in procs.values():
        p.kill()


class Load:
    """acks=all producer in a thread (confluent-kafka)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        import confluent_kafka as ck
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                              "message.timeout.ms": 60000, "retries": 1000000,
                              "retry.backoff.ms": 100})
        self.topic = topic
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def cb(self, err, msg):
        (self.errors.append(str(err)) if err else self.acked.append(msg.value()))

    def run(self):
        i = 0
        while not self.stop.is_set():
            try:
                self.p.produce(self.topic, value=b"v%07d" % i, on_delivery=self.cb)
                i += 1
            except BufferError:
                pass
            self.p.poll(0.002)
        self.p.flush(60)

    def finish(self):
        self.stop.set()
        self.t.join(90)


def test_controller_e2e_failover_under_load(cluster, zk):
    procs = cluster(3)
    admin.create_topic(zk, "load", 6, 3)
    admin.wait_for_leaders(zk, "load", 30)
    info = admin.controller_info(zk)
    load = Load(",".join(p.bootstrap for p in procs.values()), "load")
    try:
        wait_until(lambda: len(load.acked) > 500, timeout=30, what="acks")
        procs[info["id"]].kill()  # the controller broker dies
        def new_controller():
            i = admin.controller_info(zk)
            return i["id"] not in (-1, info["id"]) and i["epoch"] == info["epoch"] + 1 and i
        wait_until(new_controller, timeout=30, what="new controller with epoch + 1")
        def moved():
            d = admin.describe_topic(zk, "load")["partitions"]
            return all(p["leader"] not in (-1, info["id"]) and info["id"] not in p["isr"] for p in d)
        wait_until(moved, timeout=30, what="leaders moved off the dead broker")
        n = len(load.acked)
        wait_until(lambda: len(load.acked) > n + 500, timeout=60, what="acks after failover")
    finally:
        load.finish()
    assert load.errors == []


def test_controller_e2e_zombie_controller_sigstop(cluster, zk):
    procs = cluster(3)
    admin.create_topic(zk, "zz", 3, 3)
    admin.wait_for_leaders(zk, "zz", 30)
    info = admin.controller_info(zk)
    zombie = procs[info["id"]]
    zombie.signal(signal.SIGSTOP)
    try:
        def new_controller():
            i = admin.controller_info(zk)
            return i["id"] not in (-1, info["id"]) and i["epoch"] > info["epoch"] and i
        new = wait_until(new_controller, timeout=30, what="new controller while the old is frozen")
        wait_until(lambda: all(p["leader"] != zombie.id
                               for p in admin.describe_topic(zk, "zz")["partitions"]),
                   timeout=30, what="leaders moved off the frozen broker")
        snapshot = {p["partition"]: p for p in admin.describe_topic(zk, "zz")["partitions"]}
    finally:
        resumed = time.time()
        zombie.signal(signal.SIGCONT)
    # the zombie notices it lost its session and resigns, changing nothing
    wait_until(lambda: "resigned as controller" in zombie.stderr(), timeout=30, what="zombie resigned")
    time.sleep(2)
    by_zombie = [r for r in admin.state_log(zk) if r["controller_id"] == zombie.id
                 and r["controller_epoch"] == info["epoch"] and r["time"] >= resumed
                 and r["kind"] in ("partition", "replica")]
    assert by_zombie == []
    for p in admin.describe_topic(zk, "zz")["partitions"]:
        lai = zkpaths.LeaderAndIsr.decode(zk.get(zkpaths.leader_and_isr_path("zz", p["partition"]))[0])
        assert lai.controller_epoch > info["epoch"] or p == snapshot[p["partition"]]
    assert admin.controller_info(zk)["epoch"] >= new["epoch"]
    # the old broker re-registers with a new session and serves again
    wait_until(lambda: zk.exists(zkpaths.broker_path(zombie.id)), timeout=30, what="re-registered")


def test_controller_e2e_delete_topic_while_replica_down(cluster, zk):
    procs = cluster(3)
    admin.create_topic(zk, "gone", 2, 3)
    admin.wait_for_leaders(zk, "gone", 30)
    info = admin.controller_info(zk)
    down = next(p for i, p in procs.items() if i != info["id"])
    wait_until(lambda: any(d.name.startswith("gone-") for d in down.log_dir.iterdir()),
               timeout=30, what="replica dirs on the broker")
    down.kill()
    wait_until(lambda: zk.exists(zkpaths.broker_path(down.id)) is None, timeout=30, what="down")
    admin.delete_topic(zk, "gone", wait=True, timeout=30)
    assert zk.exists(zkpaths.topic_path("gone")) is None
    assert zk.exists(zkpaths.delete_topic_path("gone")) is None
    # the broker comes back and removes the deleted topic's data itself (seed §E 4)
    down.start().wait_registered(zk)
    wait_until(lambda: not any(d.name.startswith("gone-") for d in down.log_dir.iterdir()),
               timeout=30, what="stale replica data deleted at startup")


def test_controller_e2e_topic_recreated_while_replica_down(cluster, zk):
    """A broker that missed a topic's deletion and re-creation must not keep
    the old topic's records as the new one's (docs/design.md#topic-ids)."""
    import confluent_kafka as ck
    procs = cluster(3)
    admin.create_topic(zk, "again", 1, 3, replica_assignment={0: [1, 2, 3]})
    admin.wait_for_leaders(zk, "again", 30)
    p = ck.Producer({"bootstrap.servers": ",".join(b.bootstrap for b in procs.values()),
                     "acks": "all"})
    for i in range(20):
        p.produce("again", value=b"old-%d" % i)
    assert p.flush(30) == 0
    info = admin.controller_info(zk)
    down = next(b for i, b in procs.items() if i != info["id"])
    replica = down.log_dir / "again-0"
    wait_until(lambda: sum(f.stat().st_size for f in replica.glob("*.log")) > 0,
               timeout=30, what="the old records on the broker to stop")
    down.kill()
    wait_until(lambda: zk.exists(zkpaths.broker_path(down.id)) is None, timeout=30, what="down")
    admin.delete_topic(zk, "again", wait=True, timeout=30)
    admin.create_topic(zk, "again", 1, 3, replica_assignment={0: [1, 2, 3]})
    new_id = admin.describe_topic(zk, "again")["topic_id"]
    assert new_id
    admin.wait_for_leaders(zk, "again", 30)
    down.start().wait_registered(zk)

    def fresh_replica():
        meta = replica / "partition.metadata"
        return (meta.exists() and f"topic_id: {new_id}" in meta.read_text()
                and sum(f.stat().st_size for f in replica.glob("*.log")) == 0)
    wait_until(fresh_replica, timeout=30, what="the old replica replaced by the new topic's")
    wait_until(lambda: down.id in admin.describe_topic(zk, "again")["partitions"][0]["isr"],
               timeout=30, what="the broker back in the new topic's ISR")
