"""Fixtures for the controller tests (controller/) and the admin CLI test
(test_admin_cli.py): one real ZooKeeper 3.8 (the harness's standalone server)
per session; each test gets its own chroot so tests cannot see each other.

This folder is put on sys.path so that every test below tests/cluster/ can
import the shared helper controller_fakes.py by its bare name (controller/'s
controller_brokers.py does too). The broker-process fixtures are in
server/conftest.py."""
from __future__ import annotations

import logging
import os
import sys
import uuid

import pytest
from kazoo.client import KazooClient

from harness.zookeeper import StandaloneZooKeeper

sys.path.insert(0, os.path.dirname(__file__))  # controller_fakes


@pytest.fixture(scope="session")
def zk_server():
    server = StandaloneZooKeeper().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_hosts(zk_server):
    """host:port/chroot of a fresh, empty namespace."""
    root = f"/t-{uuid.uuid4().hex[:12]}"
    with_root = KazooClient(zk_server.hosts)
    with_root.start(timeout=10)
    with_root.ensure_path(root)
    with_root.stop()
    with_root.close()
    return zk_server.hosts + root


@pytest.fixture
def zk(zk_hosts):
    client = KazooClient(zk_hosts)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def nodes(zk_hosts):
    """nodes(n, **kw) -> list of Node (fake broker + controller); all stopped at teardown."""
    # Imported here, not at the top: the log, protocol and server tests below
    # this folder load this conftest too and need not import the controller.
    from controller_fakes import Node
    made: list[Node] = []

    def make(ids, **kw):
        out = []
        for i in ids:
            n = Node(i, zk_hosts, **kw)
            made.append(n)
            out.append(n)
        return out
    yield make
    for n in made:
        try:
            n.stop()
        except Exception:
            logging.exception("stopping node %s", n.id)
