"""Fixtures of the tests that run real broker processes (the *_e2e.py modules
of this folder): one real ZooKeeper per session, brokers as real processes
(killed at teardown, even on failure), each test module in its own ZooKeeper
chroot so clusters never see each other's znodes.

This folder is put on sys.path for its helpers, imported by their bare names:
broker_cluster.py, kafka_wire.py, fetcher_stubs.py."""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from cluster import admin
from harness.zookeeper import StandaloneZooKeeper

sys.path.insert(0, str(Path(__file__).parent))
from broker_cluster import BrokerProcess, HandController  # noqa: E402

_chroots = itertools.count(1)


@pytest.fixture(scope="session")
def zookeeper():
    zk = StandaloneZooKeeper().start()
    try:
        yield zk
    finally:
        zk.stop()


class Cluster:
    """Brokers of one test (or module) under their own chroot, plus a kazoo
    client on that chroot and a HandController."""

    def __init__(self, zookeeper: StandaloneZooKeeper, base: Path, n: int,
                 users: dict[str, str] | None = None, **config):
        self.chroot = f"/t{next(_chroots)}"
        root = KazooClient(zookeeper.hosts)
        root.start()
        root.ensure_path(self.chroot)
        root.stop()
        root.close()
        self.zk = KazooClient(zookeeper.hosts + self.chroot)
        self.zk.start()
        for user, password in (users or {}).items():   # before any broker needs them
            admin.set_user(self.zk, user, password)
        self.zk_hosts = zookeeper.hosts
        self.base = base
        self.config = config
        self.brokers: dict[int, BrokerProcess] = {}
        try:
            for i in range(1, n + 1):
                self.add_broker(i)
            for b in self.brokers.values():
                b.wait_registered(self.zk)
        except BaseException:
            self.close()
            raise
        self.hc = HandController(self.zk, self.brokers)
        # As a controller does when brokers start: tell them who is live.
        # Until then a broker refuses client Metadata requests. (Brokers
        # running their controller components hear it from the real one.)
        if not config.get("chaoslog.controller.enable"):
            self.hc.update_metadata(())

    def add_broker(self, i: int, start: bool = True) -> BrokerProcess:
        b = BrokerProcess(i, self.zk_hosts, self.base, chroot=self.chroot, **self.config)
        self.brokers[i] = b
        if start:
            b.start()
        return b

    def restart(self, i: int) -> BrokerProcess:
        old = self.brokers[i]
        old.kill()
        old.start()
        return old.wait_registered(self.zk)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive)

    def stderr(self) -> str:
        return "\n".join(f"--- broker {b.id}\n{b.stderr()[-4000:]}" for b in self.brokers.values())

    def close(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.zk.stop()
        self.zk.close()


@pytest.fixture
def make_cluster(zookeeper, tmp_path):
    made: list[Cluster] = []

    def make(n: int = 3, users: dict[str, str] | None = None, **config) -> Cluster:
        c = Cluster(zookeeper, tmp_path / f"c{len(made)}", n, users, **config)
        made.append(c)
        return c
    try:
        yield make
    finally:
        for c in made:
            c.close()


@pytest.fixture(scope="module")
def cluster3(zookeeper, tmp_path_factory):
    """A shared 3-broker cluster for tests that do not disturb each other
    (each uses its own topics)."""
    c = Cluster(zookeeper, tmp_path_factory.mktemp("cluster3"), 3,
                **{"min.insync.replicas": 2})
    try:
        yield c
    finally:
        c.close()
