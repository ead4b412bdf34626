"""Waiting with a deadline: the one helper for every loop that polls a
condition until it holds or time runs out.

The broker's admin tools, the harness and the fault injectors all wait for
ZooKeeper or a cluster to reach some state. Writing that loop by hand each
time gets the details wrong in small, different ways (a last check skipped at
the deadline, a sleep past it, an exception that ends the wait early), so it
is written once, here, and the others import it (every layer may import
`contracts`).
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Deadline:
    """A point in time `timeout_s` from now on the monotonic clock."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.at = clock() + timeout_s

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - self._clock())

    def expired(self) -> bool:
        return self._clock() >= self.at


def wait_until(predicate: Callable[[], T], timeout_s: float, interval_s: float = 0.2, *,
               retry_on: tuple[type[BaseException], ...] = (),
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], object] = time.sleep) -> T | None:
    """Call `predicate` until it returns something truthy and return that;
    None once `timeout_s` has passed. It is always called at least once, and
    once more at the deadline. Exceptions of the `retry_on` types count as
    "not yet" (a ZooKeeper hiccup while a node restarts); others propagate."""
    deadline = Deadline(timeout_s, clock)
    while True:
        try:
            value = predicate()
            if value:
                return value
        except retry_on:
            pass
        left = deadline.remaining()
        if left <= 0:
            return None
        sleep(min(interval_s, left))


async def wait_until_async(predicate: Callable[[], T], timeout_s: float,
                           interval_s: float = 0.2) -> T | None:
    """wait_until on the event loop: it sleeps with asyncio.sleep, so the
    loop serves other requests meanwhile (a broker's admin request waiting
    for the controller)."""
    deadline = Deadline(timeout_s)
    while True:
        value = predicate()
        if value:
            return value
        left = deadline.remaining()
        if left <= 0:
            return None
        await asyncio.sleep(min(interval_s, left))
