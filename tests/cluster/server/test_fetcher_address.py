"""A follower's fetcher goes where its leader is now, not where it was.

A restarted container may come back with a new IP while its old one goes to
another broker (even to this follower): a fetcher that kept its connection
would fetch from the wrong broker for ever (CI, KIP-101 suite, 2026-11-21)."""
from __future__ import annotations

import asyncio

import pytest

from cluster.config import BrokerConfig
from cluster.server.fetcher import ReplicaFetcher
from fetcher_stubs import partitions_of


async def _listener():
    """A loopback server that counts the connections it accepts."""
    accepted = []

    async def on_connect(reader, writer):
        accepted.append(writer)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[:2], accepted


def test_fetcher_reconnects_when_the_leader_address_changes():
    async def run():
        old_server, old, old_accepted = await _listener()
        new_server, new, new_accepted = await _listener()
        where = {"leader": old}
        f = ReplicaFetcher(BrokerConfig.from_dict({"broker.id": 2}), partitions_of(), 1,
                           lambda b: where["leader"])
        try:
            await f._ensure_connected()
            await f._ensure_connected()  # same address: the connection is kept
            await asyncio.sleep(0.05)
            assert (len(old_accepted), len(new_accepted)) == (1, 0)
            where["leader"] = new  # a LeaderAndIsr names the leader's new endpoint
            await f._ensure_connected()
            await asyncio.sleep(0.05)
            assert (len(old_accepted), len(new_accepted)) == (1, 1)
            assert f._addr == tuple(new)
        finally:
            await f.stop()
            for s in (old_server, new_server):
                s.close()
                await s.wait_closed()

    asyncio.run(run())


def test_fetcher_keeps_its_connection_while_only_zookeeper_would_know():
    """Connected and nothing cached: keep the connection and do not ask ZooKeeper."""
    async def run():
        server, addr, accepted = await _listener()
        lookups = []

        async def from_zookeeper(b):
            lookups.append(b)
            return tuple(addr)

        f = ReplicaFetcher(BrokerConfig.from_dict({"broker.id": 2}), partitions_of(), 1,
                           lambda b: None, from_zookeeper)
        try:
            await f._ensure_connected()  # nothing cached, not connected: one lookup
            await f._ensure_connected()  # connected, nothing cached: no lookup, no reconnect
            await asyncio.sleep(0.05)
            assert lookups == [1]
            assert len(accepted) == 1 and f._addr == tuple(addr)
        finally:
            await f.stop()
            server.close()
            await server.wait_closed()

    asyncio.run(run())


def test_a_refused_cached_address_gives_way_to_the_registration():
    """The cache names the leader's old address (V2 applied the leadership
    before ZooKeeper's watch told it the new one; suites, 2026-11-29: a
    follower refused for minutes): after the refusal the fetcher goes where
    ZooKeeper says, until the cache learns something newer."""
    async def run():
        server, registered, accepted = await _listener()
        newer_server, newer, newer_accepted = await _listener()
        gone = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        old = tuple(gone.sockets[0].getsockname()[:2])
        gone.close()
        await gone.wait_closed()        # nothing listens at `old` now: refused
        cached = {"leader": old}
        lookups = []

        async def from_zookeeper(b):
            lookups.append(b)
            return tuple(registered)

        f = ReplicaFetcher(BrokerConfig.from_dict({"broker.id": 2}), partitions_of(), 1,
                           lambda b: cached["leader"], from_zookeeper)
        try:
            with pytest.raises(OSError):
                await f._ensure_connected()
            assert lookups == [1]
            await f._ensure_connected()      # the registration's address, the cache still old
            await asyncio.sleep(0.05)
            assert len(accepted) == 1 and f._addr == tuple(registered)
            cached["leader"] = tuple(newer)  # the cache learns something newer: followed
            await f._ensure_connected()
            await asyncio.sleep(0.05)
            assert len(newer_accepted) == 1 and f._addr == tuple(newer)
            assert lookups == [1]
        finally:
            await f.stop()
            for s in (server, newer_server):
                s.close()
                await s.wait_closed()

    asyncio.run(run())
