"""cluster/v2/coordinator.py's metadata loop: how soon it reads the cluster
again. Found by a V2 pressure run (seed 306): a read blocked by a network
partition until the session expired (13 s) held the next read back for 4
times that, and a broker served a stale ISR for half a minute after it was
back. The ZooKeeper thread and the replica manager are stand-ins here: the
loop's timing is the subject."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from kazoo.exceptions import ConnectionLoss

from cluster.v2 import coordinator
from cluster.v2.coordinator import ClusterView, Coordinator


class _ZooKeeper:
    """Reads of the cluster: the first fails after `slow_s`, the others answer at once."""

    def __init__(self, slow_s: float):
        self.slow_s = slow_s
        self.reads: list[tuple[float, float]] = []   # (began, ended)

    async def call(self, _fn):
        began = time.monotonic()
        if not self.reads:
            await asyncio.sleep(self.slow_s)
            self.reads.append((began, time.monotonic()))
            raise ConnectionLoss()
        self.reads.append((began, time.monotonic()))
        return ClusterView(brokers={}, partitions={}, marks={})


def _coordinator(zk) -> Coordinator:
    c = Coordinator.__new__(Coordinator)
    c.broker_id, c.zk, c.refresh_s = 1, zk, 0.05
    c.rm = SimpleNamespace(handle_update_metadata=lambda req: None)
    c.metadata = SimpleNamespace(topics={})
    c.started, c.preferred_asked = set(), frozenset()
    c._last_metadata, c._patched = None, False
    c._refresh_now = asyncio.Event()
    return c


def test_a_read_that_failed_does_not_hold_the_next_one_back():
    zk = _ZooKeeper(slow_s=0.5)

    async def go():
        c = _coordinator(zk)
        task = asyncio.create_task(c._metadata_loop())
        while len(zk.reads) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
    asyncio.run(asyncio.wait_for(go(), 10))
    (_, failed_at), (second, _), _ = zk.reads[:3]
    # The refresh period, not READ_GAP_FACTOR times the failed read's 0.5 s.
    assert second - failed_at < coordinator.READ_GAP_FACTOR * 0.5 / 2
