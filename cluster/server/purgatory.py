"""Delayed operations ("purgatory"), asyncio style.

A request that cannot be answered yet parks a future here and awaits it with
its own timeout: an acks=all produce waits in an OffsetWaiters until the high
watermark passes its last offset; a fetch with max_wait/min_bytes waits on a
Notifier woken by appends (followers) or HW advances (consumers). Everything
runs on the broker's event loop, so no locking is needed; waking is O(woken).
"""
from __future__ import annotations

import asyncio
import heapq
import itertools


class OffsetWaiters:
    """Futures completed once an offset (the HW) reaches a required value."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def add(self, required_offset: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (required_offset, next(self._seq), fut))
        return fut

    def complete_up_to(self, offset: int, result) -> None:
        """Complete every waiter needing <= offset; `result` is a value or a
        callable producing it (evaluated once, only if someone is woken)."""
        heap = self._heap
        value = None
        while heap and heap[0][0] <= offset:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                if value is None:
                    value = result() if callable(result) else result
                fut.set_result(value)

    def fail_all(self, result) -> None:
        """Complete every waiter with `result` (an error code): leadership lost."""
        heap, self._heap = self._heap, []
        for _, _, fut in heap:
            if not fut.done():
                fut.set_result(result)

    def __len__(self) -> int:
        return len(self._heap)


class Notifier:
    """Wake-all: `wait()` returns a future completed by the next `notify()`."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future] = set()

    def wait(self) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        fut.add_done_callback(self._waiters.discard)
        return fut

    def notify(self) -> None:
        if self._waiters:
            for fut in list(self._waiters):
                if not fut.done():
                    fut.set_result(None)
