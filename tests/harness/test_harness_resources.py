"""The resource sampler (harness/resources.py) on this very process and a
stand-in ZooKeeper that answers `mntr`, and a real one; no cluster."""
import json
import os
import socket
import threading
from types import SimpleNamespace

from harness.observer import Observations
from harness.resources import ResourceSampler, _servers, process_sample, zk_watches


def test_a_live_process_is_sampled_and_a_gone_one_is_not():
    me = process_sample(os.getpid())
    assert me["rss_kb"] > 1000 and me["fds"] >= 3 and me["threads"] >= 1
    opened = [open(os.devnull) for _ in range(5)]
    try:
        assert process_sample(os.getpid())["fds"] >= me["fds"] + 5
    finally:
        for f in opened:
            f.close()
    assert process_sample(None) is None
    assert process_sample(2 ** 22 + 12345) is None     # above pid_max: never a process


def _fake_zookeeper(answer: bytes):
    """A server that answers one four-letter word per connection, then closes."""
    srv = socket.create_server(("127.0.0.1", 0))
    asked = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                asked.append(conn.recv(4))
                conn.sendall(answer)
    threading.Thread(target=serve, daemon=True).start()
    return srv, asked


def test_zookeeper_watches_come_from_mntr():
    srv, asked = _fake_zookeeper(b"zk_version\t3.8.0\nzk_watch_count\t7\nzk_watch_bytes\t0\n")
    try:
        assert zk_watches("127.0.0.1", srv.getsockname()[1]) == 7
        assert asked == [b"mntr"]
    finally:
        srv.close()
    garbled, _ = _fake_zookeeper(b"mntr is not executed because it is not in the whitelist.\n")
    port = garbled.getsockname()[1]
    try:
        assert zk_watches("127.0.0.1", port) is None
    finally:
        garbled.close()
    assert zk_watches("127.0.0.1", port, timeout=0.5) is None   # nobody listens any more


def test_connect_strings_name_every_server():
    assert _servers("127.0.0.1:2181,zk-2:2182/chroot") == [("127.0.0.1", 2181), ("zk-2", 2182)]
    assert _servers("") == []


def test_a_sample_holds_the_nodes_that_run_and_the_watch_count(tmp_path):
    srv, _ = _fake_zookeeper(b"zk_watch_count\t4\n")
    port = srv.getsockname()[1]
    cluster = SimpleNamespace(
        spec=SimpleNamespace(node_names=lambda: ["zk-1", "broker-1", "broker-2"]),
        host_pid=lambda name: os.getpid() if name == "broker-1" else None,
        zookeeper_connect=f"127.0.0.1:{port},127.0.0.1:{port}")
    obs = Observations(tmp_path / "observations.jsonl", lambda: 123)
    try:
        sampler = ResourceSampler(cluster, obs, period_s=60)
        got = sampler.sample()
    finally:
        srv.close()
        obs.close()
    assert set(got["nodes"]) == {"broker-1"} and got["zk_watches"] == 8
    line = json.loads((tmp_path / "observations.jsonl").read_text())
    assert line["kind"] == "resources" and line["time"] == 123 and sampler.samples == 1


def test_a_real_zookeeper_counts_child_watches_too():
    """`wchs` leaves child watches out: a controller watching /brokers/ids
    and /brokers/topics would count as watching nothing."""
    from kazoo.client import KazooClient

    from harness.zookeeper import StandaloneZooKeeper
    server = StandaloneZooKeeper().start()
    zk = KazooClient(server.hosts)
    try:
        zk.start(timeout=10)
        zk.ensure_path("/w/a")
        zk.get_children("/w/a", watch=lambda e: None)
        zk.get_children("/w", watch=lambda e: None)
        zk.exists("/w/none", watch=lambda e: None)
        assert zk_watches("127.0.0.1", server.port) == 3
    finally:
        zk.stop()
        zk.close()
        server.stop()
