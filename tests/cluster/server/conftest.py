"""Fixtures of the tests that run real broker processes (the *_e2e.py modules
of this folder): one real ZooKeeper per session, brokers as real processes
(killed at teardown, even on failure), each test module in its own ZooKeeper
chroot so clusters never see each other's znodes.

This folder is put on sys.path for its helpers, imported by their bare names:
broker_cluster.py, kafka_wire.py, fetcher_stubs.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.zookeeper import StandaloneZooKeeper

sys.path.insert(0, str(Path(__file__).parent))
from broker_cluster import Cluster  # noqa: E402

@pytest.fixture(scope="session")
def zookeeper():
    zk = StandaloneZooKeeper().start()
    try:
        yield zk
    finally:
        zk.stop()


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
