"""cluster/server/credentials.py against a real ZooKeeper: the cache sees
the users cluster.admin writes, their changes and their removal, and what
PLAIN and SCRAM check against is what it holds."""
from __future__ import annotations

import pytest

from cluster import admin
from cluster.server.credentials import CredentialCache
from cluster.server.sasl import AuthenticationError, PlainServer
from contracts.deadline import wait_until


def _plain(cache: CredentialCache, user: str, password: str) -> bool:
    try:
        PlainServer(cache.lookup).respond(f"\0{user}\0{password}".encode())
        return True
    except AuthenticationError:
        return False


def test_the_cache_follows_the_users_in_zookeeper(zk):
    admin.set_user(zk, "alice", "first-password")
    cache = CredentialCache(zk)
    cache.start()
    assert cache.lookup("alice", "SCRAM-SHA-512") is not None   # read at start
    assert _plain(cache, "alice", "first-password")

    admin.set_user(zk, "bob", "bobs-password", mechanisms=("SCRAM-SHA-256",))
    assert wait_until(lambda: cache.lookup("bob", "SCRAM-SHA-256"), 10)
    assert cache.lookup("bob", "SCRAM-SHA-512") is None

    admin.set_user(zk, "alice", "second-password")              # a password changed
    assert wait_until(lambda: _plain(cache, "alice", "second-password"), 10)
    assert not _plain(cache, "alice", "first-password")

    admin.delete_user(zk, "alice")
    assert wait_until(lambda: cache.lookup("alice", "SCRAM-SHA-512") is None, 10)
    admin.set_user(zk, "alice", "third-password")               # and back again
    assert wait_until(lambda: _plain(cache, "alice", "third-password"), 10)
    assert admin.list_users(zk) == {"alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"],
                                    "bob": ["SCRAM-SHA-256"]}


def test_the_znode_holds_kafka_s_format_and_no_password(zk):
    admin.set_user(zk, "carol", "carols-secret")
    data = zk.get("/config/users/carol")[0].decode()
    assert data.startswith('{"config":{"SCRAM-SHA-256":"salt=') and '"version":1' in data
    assert "carols-secret" not in data


@pytest.mark.parametrize("user, password, message", [("", "x", "bad user name"),
                                                     ("a/b", "x", "bad user name"),
                                                     ("dave", "", "empty password")])
def test_bad_users_are_refused(zk, user, password, message):
    with pytest.raises(admin.AdminError, match=message):
        admin.set_user(zk, user, password)
