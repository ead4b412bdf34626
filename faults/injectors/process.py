"""Process faults through the Cluster interface: kill, clean stop, pause, and
bounce loops.

kill = SIGKILL (the broker gets no chance to flush or hand over leadership);
stop = SIGTERM, which for our broker is a controlled shutdown; pause = a freeze
the process does not notice (SIGSTOP or docker pause), so its ZooKeeper
session expires only if the pause outlasts the session timeout. Healing
restarts or resumes the very nodes that were hit.
"""
from __future__ import annotations

import threading
from typing import Any

from contracts.abilities import PauseResume, ProcessControl
from faults.injectors.base import (FaultContext, FaultError, Injector, is_broker,
                                   registration, wait_registered, wait_unregistered)


def _state(ctx: FaultContext, name: str) -> str:
    return ctx.cluster.node(name).state


def restart(ctx: FaultContext, name: str, wait: bool = True) -> bool:
    """Start a stopped node (resume it if it is frozen); for a broker, wait
    until it is registered, after a start by a new session (the dead one's
    registration may linger until its session expires). Returns False if it
    did not within the timeout."""
    state = _state(ctx, name)
    stale = None
    if state == "paused":
        ctx.cluster.resume_node(name)
    elif state == "stopped":
        if is_broker(name) and wait:
            try:
                stale = registration(ctx, name)
            except Exception:  # noqa: BLE001 - ZooKeeper unreachable: just wait for any
                stale = None
        ctx.cluster.start_node(name)
    if wait and is_broker(name):
        return wait_registered(ctx, name, not_by=stale)
    return True


def session_expired(ctx: FaultContext, name: str) -> bool:
    """Wait until a dead broker's ephemeral registration is gone (its
    ZooKeeper session expired), as Kafka's hard-bounce tests do before the
    restart; otherwise the restart races the old session."""
    if not is_broker(name):
        return True
    return wait_unregistered(ctx, name)


class Kill(Injector):
    fault = "kill"
    NEEDS = (ProcessControl,)

    def _start(self) -> None:
        for n in self.targets:
            self.ctx.cluster.kill_node(n)

    def _stop(self) -> None:
        late = [n for n in self.targets if not restart(self.ctx, n)]
        if late:
            self.notes.append(f"not registered after restart: {','.join(late)}")


class Stop(Injector):
    """SIGTERM: a controlled shutdown. Heal starts the node again."""
    fault = "stop"
    NEEDS = (ProcessControl,)

    def _start(self) -> None:
        for n in self.targets:
            self.ctx.cluster.stop_node(n, timeout=float(self.params.get("timeout", 30.0)))

    def _stop(self) -> None:
        late = [n for n in self.targets if not restart(self.ctx, n)]
        if late:
            self.notes.append(f"not registered after restart: {','.join(late)}")


class Pause(Injector):
    fault = "pause"
    NEEDS = (PauseResume,)

    def _start(self) -> None:
        for n in self.targets:
            self.ctx.cluster.pause_node(n)

    def _stop(self) -> None:
        for n in self.targets:
            if _state(self.ctx, n) == "paused":
                self.ctx.cluster.resume_node(n)


class Bounce(Injector):
    """Kafka's replication-test bounce: `times` rounds of take the target down
    (SIGKILL for hard, SIGTERM for clean), for a hard bounce wait until the
    broker has left /brokers/ids (session expired), restart, wait until it is
    registered again. The role is re-resolved every round (the leader moves
    after each bounce). Runs in its own thread between start and stop; stop
    cancels the remaining rounds and brings every node back."""
    NEEDS = (ProcessControl,)

    def __init__(self, ctx: FaultContext, target: str | None = None, *, hard: bool = True,
                 times: int = 3, down_s: float = 0.0, **params: Any):
        super().__init__(ctx, target, times=times, **params)
        self.hard = hard
        self.fault = "hard-bounce" if hard else "clean-bounce"
        self.times = int(times)
        self.down_s = float(down_s)
        self.hit: list[str] = []
        self.rounds = 0
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _start(self) -> None:
        if self.times < 1:
            raise FaultError("a bounce needs times >= 1")
        self._thread = threading.Thread(target=self._loop, name=f"{self.fault}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            for i in range(self.times):
                if self._cancel.is_set():
                    return
                victims = self.targets if i == 0 else self._resolve()
                for n in victims:
                    if self.hard:
                        self.ctx.cluster.kill_node(n)
                    else:
                        self.ctx.cluster.stop_node(n, timeout=30.0)
                    self.hit.append(n)
                for n in victims:
                    if self.hard and not session_expired(self.ctx, n):
                        self.notes.append(f"round {i}: {n} still registered after {self.ctx.wait_timeout}s")
                if self._cancel.wait(self.down_s):
                    return
                for n in victims:
                    if not restart(self.ctx, n):
                        self.notes.append(f"round {i}: {n} not registered after restart")
                self.rounds += 1
        except BaseException as e:  # noqa: BLE001 - reported in the stop event
            self.error = e
            self.notes.append(f"round failed: {e}")

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def _stop(self) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join()
        for n in sorted(set(self.hit) | set(self.targets)):
            restart(self.ctx, n)
        self.targets = sorted(set(self.hit) | set(self.targets))
        self.notes.append(f"rounds={self.rounds}")
