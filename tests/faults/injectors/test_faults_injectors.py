"""Injector internals that need no cluster: iptables and proxy plans, disk
surgery on synthetic segments, and proxy partitions/toxics against the
project's own Toxiproxy-compatible server with a plain TCP echo upstream."""
import random
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from contracts.abilities import (KafkaMetadata, NodeFiles, PauseResume, ProcessControl,
                                 ProxiedLinks, ZooKeeperAccess)
from faults import grudge as G
from faults.injectors import disk, net
from faults.injectors.base import FaultContext, FaultError
from faults.injectors.link import LinkToxic
from faults.injectors.partition import Partition
from faults.targets import Resolver
from cluster.log import Log, LogConfig, iter_batches
from reports.observations import _injector_says

sys.path.insert(0, str(Path(__file__).parents[2] / "cluster" / "log"))
from log_support import make_batch  # noqa: E402


# -- what each fault needs (contracts/abilities.py) ------------------------------------

def test_every_fault_declares_its_needs_and_each_need_has_a_refusal():
    from faults.injectors import CATALOGUE, kind
    from faults.injectors.base import WANTED
    assert [k.name for k in CATALOGUE.values() if not k.injector.NEEDS] == []
    assert [k.name for k in CATALOGUE.values() if not all(n in WANTED for n in k.injector.NEEDS)] == []
    assert kind("zk-pause").injector.NEEDS == (PauseResume, ZooKeeperAccess)
    assert kind("lose-unfsynced").injector.NEEDS == (ProcessControl, NodeFiles)
    # a run's words for the network needs (`chaoslog run` sets up the proxy by them)
    assert (kind("partition-zk").needs, kind("latency").needs, kind("kill").needs) == (
        ("net",), ("proxy",), ())


# -- iptables plans ------------------------------------------------------------------

IPS = {"zk-1": "10.0.0.2", "broker-1": "10.0.0.3", "broker-2": "10.0.0.4", "broker-3": "10.0.0.5"}


def test_iptables_isolate_with_capable_brokers_only():
    grudge = G.isolate("broker-1", list(IPS))
    plan = net.plan_iptables(grudge, IPS, capable=lambda n: n.startswith("broker"))
    # broker-1 drops everyone on INPUT; zk-1 cannot run iptables, so "zk-1
    # drops broker-1" became an OUTPUT drop on broker-1
    assert sorted(plan["broker-1"]) == sorted(
        [f"iptables -A CHAOSLOG -s {IPS[n]} -j DROP" for n in ("zk-1", "broker-2", "broker-3")]
        + ["iptables -A CHAOSLOG-OUT -d 10.0.0.2 -j DROP"])
    assert "zk-1" not in plan
    assert plan["broker-2"] == ["iptables -A CHAOSLOG -s 10.0.0.3 -j DROP"]


def test_iptables_between_two_incapable_nodes_is_refused():
    with pytest.raises(FaultError, match="NET_ADMIN"):
        net.plan_iptables(G.isolate("zk-1", ["zk-1", "zk-2"]), {"zk-1": "a", "zk-2": "b"},
                          capable=lambda n: False)


def test_iptables_clients_cut_off():
    plan = net.plan_iptables(G.cut_off("broker-2", [G.CLIENTS]), IPS, capable=lambda n: True)
    rules = plan["broker-2"]
    assert rules[0] == "iptables -A CHAOSLOG -i lo -j RETURN"
    assert rules[-1] == "iptables -A CHAOSLOG -j DROP"
    assert len([r for r in rules if "RETURN" in r]) == 1 + len(IPS)
    assert set(plan) == {"broker-2"}


def test_chain_setup_is_idempotent_shell():
    setup = " && ".join(net.chain_setup())
    assert "iptables -N CHAOSLOG " in setup and "iptables -C INPUT -j CHAOSLOG" in setup
    assert "iptables -C OUTPUT -j CHAOSLOG-OUT" in setup


# -- proxy plans ---------------------------------------------------------------------

def L(src, dst):
    return SimpleNamespace(src=src, dst=dst, proxy_name=f"{src}_to_{dst}")


def test_plan_links_symmetric_and_one_way():
    links = [L("broker-1", "broker-2"), L("broker-2", "broker-1"), L("broker-1", "zk-1"),
             L("client", "broker-1"), L("broker-3", "zk-1")]
    g = G.merge(G.isolate("broker-1", ["broker-1", "broker-2", "zk-1"]))
    plan = dict(net.plan_links(g, links))
    assert plan == {"broker-1_to_broker-2": "disable", "broker-2_to_broker-1": "disable",
                    "broker-1_to_zk-1": "disable"}
    # broker-1 stops hearing broker-2: on the link 2->1 the upstream (2 to 1) is
    # held; on 1->2 the downstream (2's answers to 1) is held
    plan = dict(net.plan_links(G.one_way(["broker-1"], ["broker-2"]), links))
    assert plan == {"broker-2_to_broker-1": "upstream", "broker-1_to_broker-2": "downstream"}
    plan = dict(net.plan_links(G.cut_off("broker-1", [G.CLIENTS]), links))
    assert plan == {"client_to_broker-1": "disable"}


# -- disk surgery on synthetic segments ----------------------------------------------

def batch(base, count, payload=b"x" * 20):
    body = struct.pack(">ibIhi", 0, 2, 0, 0, count - 1) + payload  # epoch, magic, crc, attrs, lastOffsetDelta
    return struct.pack(">qi", base, len(body)) + body


def write_segment(d: Path, base: int, batches):
    d.mkdir(parents=True, exist_ok=True)
    data = b"".join(batches)
    (d / f"{base:020d}.log").write_bytes(data)
    (d / f"{base:020d}.index").write_bytes(b"\0" * 8)
    return data


def test_flip_bits_and_cut_tail(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(bytes(100))
    bits = disk.flip_bits(p, 3, 10, random.Random(1))
    data = p.read_bytes()
    assert sum(bin(b).count("1") for b in data) in (1, 3)  # a bit flipped twice cancels
    assert all(b // 8 >= 90 for b in bits)
    assert disk.cut_tail(p, 30) == 30 and p.stat().st_size == 70
    assert disk.cut_tail(p, 1000) == 70 and p.stat().st_size == 0


class DiskCluster:
    """Just enough of a Cluster for the disk injectors (no ZooKeeper: a
    broker counts as registered while it runs)."""
    backend = "fake"
    abilities = frozenset({ProcessControl, NodeFiles, KafkaMetadata})

    def __init__(self, base):
        self.base = base
        self.state = {"broker-1": "running"}
        self.spec = SimpleNamespace(node_names=lambda: ["zk-1", "broker-1"], proxied=False)

    def log_dir(self, name):
        return self.base / name / "logs"

    def node(self, name):
        return SimpleNamespace(name=name, state=self.state[name])

    def kill_node(self, name):
        self.state[name] = "stopped"

    def start_node(self, name):
        self.state[name] = "running"

    def broker_live(self, name):
        return self.state[name] == "running"


def test_lose_unfsynced_injector(tmp_path):
    logs = tmp_path / "broker-1" / "logs"
    write_segment(logs / "t-0", 0, [batch(0, 2), batch(2, 2), batch(4, 2)])
    write_segment(logs / "t-0", 6, [batch(6, 2)])
    write_segment(logs / "t-1", 0, [batch(0, 5)])
    write_segment(logs / "t-2", 0, [batch(0, 1)])
    (logs / "recovery-point-offset-checkpoint").write_text("0\n2\nt 0 4\nt 1 5\n")
    c = DiskCluster(tmp_path)
    ctx = FaultContext(c, Resolver(c, None, random.Random(0)), random.Random(0), log=lambda m: None)
    inj = disk.LoseUnfsynced(ctx, "broker-1")
    inj.ctx.wait_timeout = 0.0
    inj.start()
    assert c.state["broker-1"] == "stopped"
    assert (logs / "t-0" / f"{0:020d}.log").stat().st_size == 2 * len(batch(0, 2))
    assert not (logs / "t-0" / f"{6:020d}.log").exists()
    assert (logs / "t-1" / f"{0:020d}.log").stat().st_size == len(batch(0, 5))
    # never flushed: everything goes
    assert (logs / "t-2" / f"{0:020d}.log").stat().st_size == 0
    detail = inj.describe()["detail"]
    assert "'t-2': %d" % len(batch(0, 1)) in detail and "'t-1': 0" in detail
    inj.stop()
    assert c.state["broker-1"] == "running"


def test_truncate_tail_uses_the_default_partition(tmp_path):
    logs = tmp_path / "broker-1" / "logs"
    write_segment(logs / "t-0", 0, [batch(0, 2)])
    write_segment(logs / "t-0", 2, [batch(2, 2)])
    write_segment(logs / "u-0", 0, [batch(0, 2)])
    c = DiskCluster(tmp_path)
    ctx = FaultContext(c, Resolver(c, None, random.Random(0), ("t", 0)), random.Random(0),
                       log=lambda m: None, wait_timeout=0.0)
    inj = disk.TruncateTail(ctx, "broker-1", bytes=5)
    inj.start()
    inj.stop()
    assert (logs / "t-0" / f"{2:020d}.log").stat().st_size == len(batch(2, 2)) - 5
    assert (logs / "u-0" / f"{0:020d}.log").stat().st_size == len(batch(0, 2))


def test_a_disk_fault_aimed_at_a_partition_role_damages_that_partition(tmp_path):
    """"leader:u/0" names the replica as well as the broker: the damage goes
    to u/0, not to the run's default partition or the first directory."""
    logs = tmp_path / "broker-1" / "logs"
    for topic in ("t", "u"):
        write_segment(logs / f"{topic}-0", 0, [batch(0, 2)])
    c = DiskCluster(tmp_path)
    ctx = FaultContext(c, Resolver(c, None, random.Random(0), ("t", 0)), random.Random(0),
                       log=lambda m: None, wait_timeout=0.0)
    assert disk.TruncateTail(ctx, "leader:u/0").replica_dir("broker-1", logs) == logs / "u-0"
    assert disk.TruncateTail(ctx, "broker-1").replica_dir("broker-1", logs) == logs / "t-0"


def real_segment(d: Path, *counts: int) -> Path:
    """A segment the broker's own Log wrote: batches of `counts` records,
    CRCs and offsets as on a broker's disk."""
    lg = Log(d, LogConfig())
    for n in counts:
        lg.append_as_leader(make_batch(n), leader_epoch=1)
    lg.close()
    return d / f"{0:020d}.log"


def test_a_shifted_base_offset_keeps_its_crc_and_only_recovery_notices(tmp_path):
    seg = real_segment(tmp_path / "t-0", 3, 2, 4)
    assert disk.shift_last_base_offset(seg, 500) == (5, 505)
    headers = list(iter_batches(seg.read_bytes()))   # every CRC still verifies
    assert [h.base_offset for h in headers] == [0, 3, 505]
    # Only the contiguity check of recovery catches it: the last batch goes.
    lg = Log(tmp_path / "t-0", LogConfig())
    assert lg.log_end_offset == 5
    lg.close()


def test_no_whole_batch_no_shift(tmp_path):
    seg = tmp_path / "s.log"
    for data in (b"", bytes(11), batch(0, 2)[:-1]):   # empty, no prefix, a torn batch
        seg.write_bytes(data)
        assert disk.shift_last_base_offset(seg, 7) is None
        assert seg.read_bytes() == data
    seg.write_bytes(batch(0, 2) + batch(2, 2)[:20])   # a torn tail: the whole batch before it
    assert disk.shift_last_base_offset(seg, 7) == (0, 7)


def test_bad_offset_injector_says_what_it_shifted(tmp_path):
    logs = tmp_path / "broker-1" / "logs"
    write_segment(logs / "t-0", 0, [batch(0, 2)])
    write_segment(logs / "t-0", 2, [batch(2, 3), batch(5, 1)])
    c = DiskCluster(tmp_path)
    ctx = FaultContext(c, Resolver(c, None, random.Random(0), ("t", 0)), random.Random(0),
                       log=lambda m: None, wait_timeout=0.0)
    inj = disk.BadOffset(ctx, "broker-1", by=500)
    inj.start()
    assert c.state["broker-1"] == "stopped"
    detail = inj.describe()["detail"]
    assert ("broker-1: shifted the base offset of the last batch of "
            "t-0/00000000000000000002.log from 5 to 505") in detail
    assert _injector_says("bad-offset", detail) is True
    inj.stop()
    assert c.state["broker-1"] == "running"
    write_segment(logs / "t-0", 6, [])
    inj = disk.BadOffset(ctx, "broker-1", by=500)
    inj.start()
    inj.stop()
    detail = inj.describe()["detail"]
    assert "t-0/00000000000000000006.log holds no batch" in detail
    assert _injector_says("bad-offset", detail) is False


# -- against the real proxy ----------------------------------------------------------

@pytest.fixture
def proxy_server():
    from faults.proxy.server import ProxyServer

    server = ProxyServer("127.0.0.1", 0).start_in_thread()
    yield server
    server.stop()


@pytest.fixture
def echo():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            threading.Thread(target=pump, args=(conn,), daemon=True).start()

    def pump(conn):
        with conn:
            while True:
                try:
                    b = conn.recv(4096)
                except OSError:
                    return
                if not b:
                    return
                conn.sendall(b)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


class ProxiedCluster:
    """Nodes a, b plus one link a->b through the proxy, with a fake registry."""
    backend = "local"
    abilities = frozenset({ProxiedLinks})

    def __init__(self, api_port, upstream_port):
        from toxiproxy import Toxiproxy
        self.t = Toxiproxy()
        self.t.update_api_consumer("127.0.0.1", api_port)
        p = self.t.create(upstream=f"127.0.0.1:{upstream_port}", name="broker-1_to_broker-2",
                          listen="127.0.0.1:0")
        self.listen = p.listen
        self.spec = SimpleNamespace(node_names=lambda: ["broker-1", "broker-2"], proxied=True)
        self._links = [L("broker-1", "broker-2")]

    def proxied_links(self):
        return self._links

    def proxy_client(self):
        return self.t

    def nodes(self):
        return [SimpleNamespace(name=n, state="running") for n in self.spec.node_names()]

    def node(self, name):
        return SimpleNamespace(name=name, state="running")


def roundtrip(listen, payload=b"ping", timeout=1.0):
    host, port = listen.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(payload)
            return s.recv(100)
    except OSError:
        return None


def proxied_ctx(proxy_server, echo):
    c = ProxiedCluster(proxy_server.port, echo)
    return c, FaultContext(c, Resolver(c, None, random.Random(0)), random.Random(0),
                           log=lambda m: None, mechanism="proxy")


def test_proxy_isolate_then_heal(proxy_server, echo):
    c, ctx = proxied_ctx(proxy_server, echo)
    assert roundtrip(c.listen) == b"ping"
    inj = Partition(ctx, "broker-1", shape="isolate", among="brokers")
    inj.start()
    assert roundtrip(c.listen) is None
    assert "via proxy" in inj.describe()["detail"]
    inj.stop()
    assert roundtrip(c.listen) == b"ping"


def test_proxy_one_way_holds_one_direction(proxy_server, echo):
    c, ctx = proxied_ctx(proxy_server, echo)
    # broker-1 stops hearing broker-2: the echo's answers are held
    inj = Partition(ctx, "broker-1", shape="one-way", among="brokers")
    inj.start()
    toxics = c.t.get_proxy("broker-1_to_broker-2").toxics()
    assert list(toxics) == ["chaoslog-partition-downstream"]
    assert roundtrip(c.listen, timeout=0.5) is None
    inj.stop()
    assert c.t.get_proxy("broker-1_to_broker-2").toxics() == {}
    assert roundtrip(c.listen) == b"ping"


def test_latency_toxic_and_heal_all(proxy_server, echo):
    c, ctx = proxied_ctx(proxy_server, echo)
    inj = LinkToxic(ctx, "broker-2", fault="latency", latency=300, jitter=0)
    inj.start()
    t0 = time.monotonic()
    assert roundtrip(c.listen, timeout=3) == b"ping"
    assert time.monotonic() - t0 >= 0.25
    # another process heals without knowing what was done
    c.t.get_proxy("broker-1_to_broker-2").disable()
    done = net.heal_proxies(c)
    assert any("enabled" in d for d in done) and any("chaoslog-latency" in d for d in done)
    assert roundtrip(c.listen) == b"ping"
    inj.stop()  # nothing left to remove: still fine


def test_recreate_topic_is_refused_outside_a_run_and_beside_a_consumer_group():
    """The checker learns of a re-creation from the run's observations, and a
    consumer group's committed offsets would outlive the deleted topic: the
    step is refused before anything is touched (no ZooKeeper here)."""
    from faults.injectors.admin import RecreateTopic
    cluster = SimpleNamespace(abilities=frozenset({ZooKeeperAccess}))
    ctx = FaultContext(cluster, Resolver(cluster, None, random.Random(0)), random.Random(0))
    with pytest.raises(FaultError, match="needs a chaos run"):
        RecreateTopic(ctx).start()
    ctx.observe = lambda kind, **fields: None
    ctx.resolver.groups = {"chaoslog-g"}
    with pytest.raises(FaultError, match=r"consumer group \(chaoslog-g\)"):
        RecreateTopic(ctx).start()
