"""iptables partitions inside containers (docker backend): rules land in our
own chains, the cut is real, healing removes exactly our rules. Every node
runs with NET_ADMIN, so each drops what it must not hear itself (INPUT).
Skipped without a Docker engine."""
import socket
import time

import pytest

from faults.injectors import make
from faults.heal import heal_all
from faults.injectors.base import FaultContext

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def dcluster():
    from harness.backends import make_cluster
    from harness.backends.base import ClusterSpec
    from harness.docker_engine import engine_available

    if not engine_available():
        pytest.skip("no Docker engine answers here")
    from kazoo.client import KazooClient

    from cluster import admin
    c = make_cluster(ClusterSpec(name="faultsdock", brokers=3), "docker")
    c.start()
    zk = KazooClient(c.zookeeper_connect)
    zk.start()
    try:
        admin.create_topic(zk, "t", 3, 3)
        admin.wait_for_leaders(zk, "t")
        yield c, zk
    finally:
        zk.stop()
        zk.close()
        c.destroy()


def ctx_of(c, zk):
    return FaultContext.create(c, zk, seed=0, partition=("t", 0))


def reachable(c, name):
    n = c.node(name)
    try:
        socket.create_connection((n.host, n.port), timeout=1).close()
        return True
    except OSError:
        return False


def rules(c, name):
    code, out = c.exec(name, ["sh", "-c", "iptables -S CHAOSLOG; iptables -S CHAOSLOG-OUT"])
    return [l for l in out.splitlines() if l.startswith("-A")]


def test_isolate_a_broker_with_iptables(dcluster):
    c, zk = dcluster
    inj = make("partition-isolate", ctx_of(c, zk), "broker-1")
    inj.start()
    try:
        r = rules(c, "broker-1")
        assert f"-A CHAOSLOG -s {c.node_ip('broker-1')}/32 -j DROP" in rules(c, "zk-1")
        assert len([x for x in r if x.startswith("-A CHAOSLOG -s")]) == 3
        assert not [x for x in r if x.startswith("-A CHAOSLOG-OUT")]
        code, _ = c.exec("broker-2", ["sh", "-c", f"timeout 2 python -c \"import socket; "
                                      f"socket.create_connection(('{c.node_ip('broker-1')}', 9092), timeout=1)\""])
        assert code != 0                                           # broker-2 cannot reach broker-1
        assert reachable(c, "broker-1")                            # clients are not nodes: unaffected
        assert "via iptables" in inj.describe()["detail"]
    finally:
        inj.stop()
    assert rules(c, "broker-1") == [] and rules(c, "broker-2") == [] and rules(c, "zk-1") == []


def test_clients_cut_off_and_heal_all(dcluster):
    c, zk = dcluster
    inj = make("partition-clients", ctx_of(c, zk), "broker-2")
    inj.start()
    time.sleep(0.5)
    assert not reachable(c, "broker-2")
    assert reachable(c, "broker-3")
    heal_all(c)           # the stateless heal, as `chaoslog heal` does it
    assert reachable(c, "broker-2")
    inj.stop()
