"""The chaoslog pytest plugin (a `pytest11` entry point).

Fixtures:
  zookeeper          ZooKeeper alone (one node; `@pytest.mark.zookeepers(3)` for an ensemble)
  cluster            ZooKeeper plus brokers, one per test; shape it with markers:
                       @pytest.mark.cluster_size(3)
                       @pytest.mark.zookeepers(1)
                       @pytest.mark.broker_config(**{"min.insync.replicas": 2})
                       @pytest.mark.proxied  (every link through the proxy; local backend)
  cluster_factory    make clusters of any spec, removed at the end of the requesting scope
  chaoslog_backend   the backend in use ("docker" or "local")
  spark              one SparkSession for the whole pytest session

Options: --chaoslog-backend docker|local, --chaoslog-keep (leave the clusters of
a failed test up for inspection), --chaoslog-target chaoslog|tansu (the
clusters run tansu instead of the built-in broker; only the tests marked
`any_target` run), --chaoslog-coordination controller|v2 (the built-in
broker's coordination mode; with v2 only the tests marked `any_coordination`
or `v2_only` run, and the `v2_only` ones run only then), --chaoslog-security
PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL (the built-in brokers' listener; other
than PLAINTEXT only the tests marked `any_security` run). When a test fails, every node's log is
attached to its report. Teardown removes every container, network, process
and file a test made, also on failure or Ctrl-C; what a killed earlier
session left behind is reaped by label when the next session starts.
"""
from __future__ import annotations

import atexit
import os
import signal
import uuid
from typing import Callable

import pytest

from cluster.config import COORDINATION_MODES
from cluster.protocol.sasl import SECURITY_PROTOCOLS
from harness.backends import BACKENDS, default_backend, make_cluster

TARGETS = ("chaoslog", "tansu")
from harness.backends.base import Cluster, ClusterError, ClusterSpec
# The chaos-suite fixtures, registered with the plugin.
from harness.fixtures import chaos_run, history, nemesis, workload  # noqa: F401

_LIVE: dict[str, Cluster] = {}  # every cluster this session started and has not removed
_CLUSTERS_OF_ITEM = pytest.StashKey[list]()


def pytest_addoption(parser):
    group = parser.getgroup("chaoslog")
    group.addoption("--chaoslog-backend", choices=BACKENDS, default=None,
                    help="where clusters run (default: docker when an engine answers, else local)")
    group.addoption("--chaoslog-keep", action="store_true", default=False,
                    help="leave the clusters of a failed test up for inspection")
    group.addoption("--chaoslog-target", choices=TARGETS, default="chaoslog",
                    help="the system the clusters run: chaoslog (the built-in broker) or tansu "
                         "(its opt-in image; only tests marked any_target run)")
    group.addoption("--chaoslog-coordination", choices=COORDINATION_MODES, default="controller",
                    help="the built-in broker's coordination mode (docs/design.md#v2); with v2 "
                         "only tests marked any_coordination or v2_only run")
    group.addoption("--chaoslog-security", choices=SECURITY_PROTOCOLS, default="PLAINTEXT",
                    help="the built-in brokers' listener (docs/design.md#security); other than "
                         "PLAINTEXT only tests marked any_security run")


def pytest_configure(config):
    for line in (
        "cluster_size(n): number of brokers of the `cluster` fixture",
        "zookeepers(n): ZooKeeper nodes (1 or 3) of the `cluster`/`zookeeper` fixtures",
        "broker_config(**cfg): broker config of the `cluster` fixture",
        "proxied: route the `cluster` fixture's links through the proxy",
        "docker: needs a Docker engine (skipped with the local backend)",
        "any_target: runs against any --chaoslog-target (the others: the built-in broker only)",
        "any_coordination: runs in either --chaoslog-coordination (the others: the controller "
        "mode only)",
        "v2_only: runs only with --chaoslog-coordination v2 (V2's own script of a scenario)",
        "any_security: runs with any --chaoslog-security (the others: PLAINTEXT only); its "
        "clients take the cluster's settings (Cluster.client_security)",
        "v2_fast: the five-minute V2 tier (make test-v2-fast): V2's elections, state-change "
        "queues, reassignment, preferred election and controlled shutdown under pressure",
    ):
        config.addinivalue_line("markers", line)


def _destroy_all(*_):
    for name, c in list(_LIVE.items()):
        try:
            c.destroy()
        except Exception:
            pass
        _LIVE.pop(name, None)


def pytest_sessionstart(session):
    from harness import reaper
    removed = reaper.reap_orphans(docker=session.config.getoption("--chaoslog-backend") != "local")
    if removed:
        print(f"\nchaoslog: removed {len(removed)} leftovers of a killed earlier run: "
              + ", ".join(removed[:6]) + (" ..." if len(removed) > 6 else ""))
    atexit.register(_destroy_all)
    # SIGTERM (a CI timeout, `kill`) ends the session like Ctrl-C does: the
    # clusters torn down, the fixtures finalized, no further test. (A
    # SystemExit raised inside a test is only that test's failure: pytest
    # went on with the next ones.)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        def on_term(signum, frame):
            _destroy_all()
            raise KeyboardInterrupt(f"signal {signum}")
        signal.signal(signal.SIGTERM, on_term)


@pytest.fixture(scope="session")
def chaoslog_backend(pytestconfig) -> str:
    backend = pytestconfig.getoption("--chaoslog-backend") or default_backend()
    if backend == "docker":
        from harness.docker_engine import docker_client
        docker_client()  # DockerUnavailable says what to do
        from harness.images import ensure_images
        ensure_images()
    return backend


def pytest_collection_modifyitems(config, items):
    target = config.getoption("--chaoslog-target")
    if target != "chaoslog":
        skip = pytest.mark.skip(reason=f"tests the built-in broker; --chaoslog-target {target} "
                                       "runs only the tests marked any_target")
        for item in items:
            if "any_target" not in item.keywords:
                item.add_marker(skip)
    coordination = config.getoption("--chaoslog-coordination")
    if coordination != "controller":
        skip = pytest.mark.skip(reason=f"tests the controller mode; --chaoslog-coordination "
                                       f"{coordination} runs only the tests marked any_coordination")
        for item in items:
            if "any_coordination" not in item.keywords and "v2_only" not in item.keywords:
                item.add_marker(skip)
    else:
        skip = pytest.mark.skip(reason="V2's own script: runs with --chaoslog-coordination v2")
        for item in items:
            if "v2_only" in item.keywords:
                item.add_marker(skip)
    security = config.getoption("--chaoslog-security")
    if security != "PLAINTEXT":
        skip = pytest.mark.skip(reason=f"connects as a PLAINTEXT client; --chaoslog-security "
                                       f"{security} runs only the tests marked any_security")
        for item in items:
            if "any_security" not in item.keywords:
                item.add_marker(skip)
    backend = config.getoption("--chaoslog-backend")
    if backend == "local":
        skip = pytest.mark.skip(reason="needs the docker backend (run with --chaoslog-backend docker)")
        for item in items:
            if "docker" in item.keywords:
                item.add_marker(skip)


class ClusterFactory:
    """Makes clusters and removes them when its scope ends."""

    def __init__(self, backend: str, keep_on_failure: bool, target: str = "chaoslog",
                 coordination: str = "controller", security: str = "PLAINTEXT"):
        self.backend = backend
        self.target = target
        self.coordination = coordination
        self.security = security
        self.keep_on_failure = keep_on_failure
        self.clusters: list[Cluster] = []
        self.on_create: Callable[[Cluster], None] | None = None

    def __call__(self, brokers: int = 3, zookeepers: int = 1, broker_config: dict | None = None,
                 proxied: bool = False, backend: str | None = None, start: bool = True,
                 **spec_kw) -> Cluster:
        name = f"pytest-{uuid.uuid4().hex[:8]}"
        if self.target == "tansu":
            # tansu takes none of the built-in broker's settings: only the size applies.
            from harness.backends.tansu import TansuCluster, TansuSpec
            cluster: Cluster = TansuCluster(TansuSpec(name=name, brokers=brokers, proxied=proxied))
        else:
            cfg = dict(broker_config or {})
            cfg.setdefault("coordination", self.coordination)
            spec_kw.setdefault("security", self.security)
            spec = ClusterSpec(name=name, brokers=brokers, zookeepers=zookeepers,
                               broker_config=cfg, proxied=proxied, **spec_kw)
            cluster = make_cluster(spec, backend or self.backend)
        _LIVE[name] = cluster
        self.clusters.append(cluster)
        if self.on_create:
            self.on_create(cluster)
        if start:
            cluster.start()
        return cluster

    def close(self, failed: bool) -> None:
        for c in self.clusters:
            if failed and self.keep_on_failure:
                c.persistent = True
                c.save()
                print(f"\nchaoslog: kept cluster {c.spec.name!r} for inspection: "
                      f"chaoslog cluster status --name {c.spec.name}; remove it with "
                      f"chaoslog cluster down --name {c.spec.name}")
                _LIVE.pop(c.spec.name, None)
                continue
            try:
                c.destroy()
            finally:
                _LIVE.pop(c.spec.name, None)
        self.clusters.clear()


def _factory(request, backend: str) -> ClusterFactory:
    f = ClusterFactory(backend, request.config.getoption("--chaoslog-keep"),
                       request.config.getoption("--chaoslog-target"),
                       request.config.getoption("--chaoslog-coordination"),
                       request.config.getoption("--chaoslog-security"))
    node = request.node
    if isinstance(node, pytest.Item):
        f.on_create = lambda c: node.stash.setdefault(_CLUSTERS_OF_ITEM, []).append(c)
    yield f
    failed = any(getattr(node, f"rep_{w}", None) is not None and getattr(node, f"rep_{w}").failed
                 for w in ("setup", "call"))
    f.close(failed)


@pytest.fixture
def cluster_factory(request, chaoslog_backend):
    yield from _factory(request, chaoslog_backend)


@pytest.fixture(scope="module")
def module_cluster_factory(request, chaoslog_backend):
    """For a module whose tests share one cluster (they must not disturb each other)."""
    yield from _factory(request, chaoslog_backend)


def _marker_arg(request, name, default):
    m = request.node.get_closest_marker(name)
    return m.args[0] if m and m.args else default


@pytest.fixture
def cluster(request, cluster_factory) -> Cluster:
    cfg_marker = request.node.get_closest_marker("broker_config")
    broker_config = dict(cfg_marker.kwargs) if cfg_marker else {}
    param = getattr(request, "param", None) or {}
    return cluster_factory(
        brokers=param.get("brokers", _marker_arg(request, "cluster_size", 3)),
        zookeepers=param.get("zookeepers", _marker_arg(request, "zookeepers", 1)),
        broker_config={**broker_config, **param.get("broker_config", {})},
        proxied=param.get("proxied", request.node.get_closest_marker("proxied") is not None))


@pytest.fixture
def zookeeper(request, cluster_factory) -> Cluster:
    return cluster_factory(brokers=0, zookeepers=_marker_arg(request, "zookeepers", 1))


@pytest.fixture(scope="session")
def spark():
    from reports.spark_checker import get_spark
    session = get_spark()
    yield session
    session.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
    if rep.failed:
        for c in item.stash.get(_CLUSTERS_OF_ITEM, []):
            for n in c.spec.node_names():
                try:
                    text = c.logs(n)
                except (ClusterError, Exception) as e:  # a node that never started
                    text = f"(no log: {e})"
                rep.sections.append((f"chaoslog {c.spec.name} {n} log", text[-20000:]))
