"""contracts.deadline: the one wait-with-a-deadline helper."""
from __future__ import annotations

import pytest

from contracts.deadline import Deadline, wait_until


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_returns_the_first_truthy_value():
    calls = iter([0, None, "", 7, 8])
    assert wait_until(lambda: next(calls), 5, 0.001) == 7


def test_none_after_the_deadline_with_a_last_check_at_it():
    clock = FakeClock()
    seen = []
    assert wait_until(lambda: seen.append(clock.t), 1.0, 0.3, clock=clock, sleep=clock.sleep) is None
    # 0, 0.3, 0.6, 0.9 and once more at exactly the deadline; never past it.
    assert seen[0] == 100.0 and seen[-1] == pytest.approx(101.0) and len(seen) == 5


def test_retry_on_counts_as_not_yet_and_other_errors_propagate():
    attempts = iter([ConnectionError("zk"), ConnectionError("zk"), True])

    def flaky():
        v = next(attempts)
        if isinstance(v, Exception):
            raise v
        return v

    assert wait_until(flaky, 5, 0.001, retry_on=(ConnectionError,)) is True
    with pytest.raises(KeyError):
        wait_until(lambda: {}["x"], 5, 0.001, retry_on=(ConnectionError,))


def test_deadline_remaining_never_negative():
    clock = FakeClock()
    d = Deadline(2.0, clock)
    clock.sleep(0.5)
    assert d.remaining() == pytest.approx(1.5) and not d.expired()
    clock.sleep(5)
    assert d.remaining() == 0.0 and d.expired()


def test_the_async_wait_lets_the_loop_run_meanwhile():
    import asyncio

    from contracts.deadline import wait_until_async

    async def scenario():
        flag: list[int] = []
        asyncio.get_running_loop().call_later(0.05, flag.append, 7)
        got = await wait_until_async(lambda: flag and flag[0], 5, 0.01)
        missed = await wait_until_async(lambda: False, 0.05, 0.01)
        return got, missed

    assert asyncio.run(scenario()) == (7, None)
