"""A follower named the follower of the same leader again drops a request
that leader's dead incarnation will never answer (docs/design.md#replica-fetching).

Found by bench/compare_modes.py: a leader restarted at its old address, and
its followers waited out replica.socket.timeout.ms (30 s) on the fetch they
had sent to the dead one."""
from __future__ import annotations

import asyncio

from cluster.config import BrokerConfig
from cluster.server import fetcher
from cluster.server.fetcher import ReplicaFetcher
from fetcher_stubs import partitions_of

TP = ("t", 0)


async def _silent_listener():
    """A loopback server that accepts and reads, and never answers."""
    accepted = []

    async def on_connect(reader, writer):
        accepted.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[:2], accepted


def test_an_overdue_fetch_is_dropped_when_the_leader_is_named_again(monkeypatch):
    monkeypatch.setattr(fetcher, "OVERDUE_S", 0.3)

    async def run():
        server, addr, accepted = await _silent_listener()
        cfg = BrokerConfig.from_dict({"broker.id": 2, "replica.fetch.wait.max.ms": 100,
                                      "replica.fetch.backoff.ms": 50})
        f = ReplicaFetcher(cfg, partitions_of(), 1, lambda b: addr)
        try:
            f.add(TP, 0, truncating=False, leader_epoch=3)
            for _ in range(100):
                if f._sent_at is not None:
                    break
                await asyncio.sleep(0.01)
            assert f._sent_at is not None and len(accepted) == 1, "no fetch in flight"
            f.add(TP, 0, truncating=False, leader_epoch=4)    # not overdue yet: kept
            await asyncio.sleep(0.2)
            assert len(accepted) == 1
            await asyncio.sleep(0.3)                            # now past 0.1 + 0.3 s
            f.add(TP, 0, truncating=False, leader_epoch=5)
            for _ in range(100):
                if len(accepted) == 2:
                    break
                await asyncio.sleep(0.01)
            assert len(accepted) == 2, "the overdue request was not dropped"
        finally:
            await f.stop()
            server.close()
            await server.wait_closed()

    asyncio.run(run())
