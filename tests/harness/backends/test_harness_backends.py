"""The Cluster interface on both backends, with ZooKeeper nodes (fast, and
independent of the broker), plus the reaper and the images cache."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness.backends import make_cluster
from harness.backends.base import PAUSED, RUNNING, STOPPED, ClusterError, ClusterSpec
from harness.docker_engine import engine_available
from harness.zk_probe import zk_mode

needs_docker = pytest.mark.skipif(not engine_available(), reason="no Docker engine answers here")
BACKENDS = ["local", pytest.param("docker", marks=[needs_docker, pytest.mark.docker])]


def _mode(cluster, name):
    n = cluster.node(name)
    return zk_mode(n.host, n.port)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zookeeper_node_lifecycle(cluster_factory, backend):
    c = cluster_factory(brokers=0, zookeepers=1, backend=backend)
    assert _mode(c, "zk-1") == "standalone"
    c.pause_node("zk-1")
    assert c.node("zk-1").state == PAUSED
    assert _mode(c, "zk-1") is None  # frozen: no answer
    c.resume_node("zk-1")
    assert c.node("zk-1").state == RUNNING
    c.kill_node("zk-1")
    assert c.node("zk-1").state == STOPPED
    c.start_node("zk-1")
    deadline = time.monotonic() + 60
    while _mode(c, "zk-1") != "standalone" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _mode(c, "zk-1") == "standalone"
    c.stop_node("zk-1")
    assert c.node("zk-1").state == STOPPED


@pytest.mark.parametrize("backend", BACKENDS)
def test_three_node_ensemble_elects_a_leader(cluster_factory, backend):
    c = cluster_factory(brokers=0, zookeepers=3, backend=backend)
    modes = sorted(_mode(c, f"zk-{i}") for i in (1, 2, 3))
    assert modes == ["follower", "follower", "leader"]
    assert len(c.zookeeper_connect.split(",")) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_unknown_node_is_a_clear_error(cluster_factory, backend):
    c = cluster_factory(brokers=0, zookeepers=1, backend=backend)
    with pytest.raises(ClusterError, match="no node 'broker-7'.*zk-1"):
        c.kill_node("broker-7")


def test_destroy_removes_local_processes_and_files(cluster_factory):
    c = cluster_factory(brokers=0, zookeepers=1, backend="local")
    pid = c.procs["zk-1"].pid
    base = c.base_dir
    c.destroy()
    assert not c.procs["zk-1"].running()
    assert not base.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_docker_backend_without_engine_says_what_to_do():
    code = textwrap.dedent("""
        from harness.backends import make_cluster
        from harness.backends.base import ClusterSpec, ClusterError
        try:
            make_cluster(ClusterSpec(brokers=1), "docker")
        except ClusterError as e:
            print("ERROR:", e)
    """)
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60).stdout
    assert "ERROR: no Docker engine answers" in out
    assert "--backend local" in out


@needs_docker
@pytest.mark.docker
def test_images_are_cached_by_their_inputs(chaoslog_backend):
    from harness.images import ensure_images
    ensure_images()
    t0 = time.monotonic()
    ensure_images()
    assert time.monotonic() - t0 < 5.0


@needs_docker
@pytest.mark.docker
def test_sigkilled_pytest_leaves_nothing_after_the_next_run(tmp_path):
    """Kill pytest with SIGKILL mid-test; the next session reaps what it left."""
    import docker
    client = docker.from_env()
    (tmp_path / "test_sleepy.py").write_text(textwrap.dedent("""
        import time
        def test_sleepy(cluster_factory):
            c = cluster_factory(brokers=0, zookeepers=1, backend="docker")
            open("started", "w").write(c.spec.name)
            time.sleep(600)
    """))
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    out = open(tmp_path / "victim.log", "wb")
    victim = subprocess.Popen([*pytest_cmd, "test_sleepy.py"], cwd=tmp_path,
                              stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not (tmp_path / "started").exists():
            assert victim.poll() is None, ("the victim pytest exited early:\n"
                                           + (tmp_path / "victim.log").read_text()[-3000:])
            assert time.monotonic() < deadline, "the victim never started its cluster"
            time.sleep(0.5)
        name = (tmp_path / "started").read_text()
        label = f"org.chaoslog.cluster={name}"
        assert client.containers.list(filters={"label": label})
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        # Still there after the kill ...
        assert client.containers.list(all=True, filters={"label": label})
        # ... and gone once the next session has started.
        r = subprocess.run([*pytest_cmd, "test_nothing.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not client.containers.list(all=True, filters={"label": label})
        assert not client.networks.list(filters={"label": label})
    finally:
        if victim.poll() is None:
            victim.kill()


@pytest.mark.parametrize("backend", BACKENDS)
def test_proxied_links_cut_a_broker_off_zookeeper(cluster_factory, backend):
    """Every link of a proxied cluster goes through its own proxy: disabling
    broker-2 -> zk-1 ends broker-2's ZooKeeper session and nothing else."""
    from harness.zookeeper import registered_brokers
    c = cluster_factory(brokers=3, zookeepers=1, proxied=True, backend=backend,
                        zk_session_timeout_ms=4000)
    assert registered_brokers(c.zookeeper_connect) == {1, 2, 3}
    names = {l.proxy_name for l in c.links.links.values()}
    assert {"client_to_broker-1", "broker-1_to_broker-2", "broker-2_to_zk-1"} <= names
    toxiproxy = c.links.proxy_client()
    toxiproxy.get_proxy("broker-2_to_zk-1").disable()
    deadline = time.monotonic() + 30
    while 2 in registered_brokers(c.zookeeper_connect) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert registered_brokers(c.zookeeper_connect) == {1, 3}
    toxiproxy.get_proxy("broker-2_to_zk-1").enable()
    c.wait_brokers_registered(["broker-2"], timeout=60)
    assert registered_brokers(c.zookeeper_connect) == {1, 2, 3}


def _members(protocol: type) -> set[str]:
    """The methods and attributes a protocol of contracts/abilities.py asks for."""
    return ({n for n in vars(protocol) if not n.startswith("_")}
            | set(vars(protocol).get("__annotations__", {})))


def test_each_backend_has_what_it_declares():
    """ABILITIES are what the injectors rely on (their NEEDS): every ability
    a backend declares has each method of its protocol there."""
    from contracts.abilities import ABILITIES, NodeNetwork, ZooKeeperAccess
    from harness.backends.docker import DockerCluster
    from harness.backends.external import ExternalCluster
    from harness.backends.local import LocalCluster
    from harness.backends.tansu import TansuCluster
    for cls in (DockerCluster, LocalCluster, TansuCluster, ExternalCluster):
        assert cls.ABILITIES and cls.ABILITIES <= set(ABILITIES), cls.__name__
        for ability in cls.ABILITIES:
            absent = sorted(m for m in _members(ability) if not hasattr(cls, m))
            assert absent == [], f"{cls.__name__} declares {ability.__name__} without {absent}"
    assert NodeNetwork in DockerCluster.ABILITIES and NodeNetwork not in LocalCluster.ABILITIES
    assert ZooKeeperAccess not in TansuCluster.ABILITIES | ExternalCluster.ABILITIES


def test_a_cluster_refuses_what_it_does_not_declare(tmp_path):
    """The local backend has no iptables (no NodeNetwork) and proxied links
    only when started with them: without, partitions and link faults are
    refused before a run starts (a recipe by its faults), with the words
    `chaoslog run` uses."""
    from contracts.abilities import ProxiedLinks
    from harness.backends.local import LocalCluster
    plain = LocalCluster(ClusterSpec(name="plain", brokers=3), base_dir=tmp_path / "plain")
    proxied = LocalCluster(ClusterSpec(name="proxied", brokers=3, proxied=True),
                           base_dir=tmp_path / "proxied")
    assert ProxiedLinks not in plain.abilities and ProxiedLinks in proxied.abilities
    assert plain.has_zookeeper and proxied.has_zookeeper
    assert plain.refuses("partition-halves") == ("partition-halves needs the docker backend "
                                                 "(iptables) or a proxied cluster")
    assert plain.refuses("latency", "leader") == ("latency needs links through the proxy "
                                                  "(a proxied cluster)")
    assert "partition-isolate needs" in plain.refuses("isr-shrink-then-leader-loss")
    assert [f for f in ("kill", "pause", "zk-expire", "truncate-tail", "reassign")
            if plain.refuses(f, "leader")] == []
    assert [f for f in ("partition-halves", "latency", "isr-shrink-then-leader-loss")
            if proxied.refuses(f)] == []


def test_v2_coordination_refuses_the_controller_role_and_topic_recreation():
    """docs/design.md#v2: no controller; a re-created topic would stay
    deleted with a broker down. The other admin faults run."""
    from harness.backends.base import v2_refusal
    assert v2_refusal("kill", "leader") is None
    assert v2_refusal("kill", "controller") == ("V2 coordination cannot run kill at the "
                                                "controller: it has none")
    assert "would stay deleted" in v2_refusal("recreate-topic", None)
    assert v2_refusal("elect-preferred", None) is None
    assert v2_refusal("reassign", None) is None
    assert v2_refusal("partition-isolate", "random") is None
    assert v2_refusal("isr-shrink-then-leader-loss", None) is None     # a recipe: its faults
    spec = ClusterSpec(name="v2", brokers=3, broker_config={"coordination": "v2"})
    assert make_cluster(spec, "local").refuses("zk-expire", "controller")
    assert make_cluster(ClusterSpec(name="v1", brokers=3), "local").refuses(
        "zk-expire", "controller") is None
    assert make_cluster(spec, "local").coordination == "v2"
    assert make_cluster(ClusterSpec(name="v1", brokers=3), "local").coordination == "controller"
