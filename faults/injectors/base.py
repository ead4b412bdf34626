"""The one interface every fault has, and the heal that undoes all of them.

An injector is built for one fault occurrence: `start()` resolves its targets
(a role means whoever holds it *now*), records a nemesis `start` event and
breaks something; `stop()` (alias `heal()`) repairs it and records `stop`.
Recording lives here rather than in the nemesis so that a fault applied by
hand (`chaoslog fault`) or from a pytest fixture leaves the same trace as one
from a schedule.

`heal_all` is the stateless last resort: it knows nothing of what was done and
repairs everything any injector can do (frozen or stopped nodes, iptables
chains, proxy toxics and disabled proxies). The final heal of every run and
`chaoslog heal` from another process use it.
"""
from __future__ import annotations

import abc
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from faults.targets import Resolver, Target


class FaultError(RuntimeError):
    """A fault that cannot be applied to this cluster (missing capability,
    bad parameter); the message says why."""


@dataclass
class FaultContext:
    """What an injector may use. `recorder` is a harness.history.HistoryRecorder
    (anything with .nemesis(fault, phase, targets, detail)) or None."""
    cluster: Any
    resolver: Resolver
    rng: random.Random
    recorder: Any = None
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr))
    mechanism: str = "auto"        # partitions: iptables | proxy | auto
    wait_timeout: float = 60.0     # for "broker left/rejoined ZooKeeper" waits

    @property
    def default_partition(self) -> tuple[str, int] | None:
        return self.resolver.default_partition


class Injector(abc.ABC):
    """One fault occurrence. Subclasses implement _start/_stop and may
    override _resolve and detail()."""

    fault: str = "?"

    def __init__(self, ctx: FaultContext, target: str | None = None, **params: Any):
        self.ctx = ctx
        self.target = Target.parse(target) if target else None
        self.params = params
        self.targets: list[str] = []
        self.active = False
        self.notes: list[str] = []
        self._lock = threading.Lock()

    # -- the interface -------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self.active:
                raise FaultError(f"{self.fault} is already active")
            self.targets = self._resolve()
            self._record("start")
            self.active = True
        try:
            self._start()
        except BaseException as e:
            self.notes.append(f"start failed: {e}")
            self.stop()
            raise

    def stop(self) -> None:
        with self._lock:
            if not self.active:
                return
            try:
                self._stop()
            except BaseException as e:
                self.notes.append(f"heal failed: {e}")
                raise
            finally:
                self.active = False
                self._record("stop")

    heal = stop

    def describe(self) -> dict[str, Any]:
        return {"fault": self.fault, "targets": list(self.targets), "detail": self.detail()}

    def detail(self) -> str:
        parts = [f"target={self.target}"] if self.target else []
        parts += [f"{k}={v}" for k, v in sorted(self.params.items())]
        parts += self.notes
        return "; ".join(parts)

    # -- for subclasses ------------------------------------------------------
    def _resolve(self) -> list[str]:
        if self.target is None:
            raise FaultError(f"{self.fault} needs a target")
        return self.ctx.resolver.resolve(self.target)

    @abc.abstractmethod
    def _start(self) -> None: ...

    @abc.abstractmethod
    def _stop(self) -> None: ...

    def _record(self, phase: str) -> None:
        rec = self.ctx.recorder
        if rec is not None and not getattr(rec, "closed", False):
            rec.nemesis(self.fault, phase, self.targets, self.detail() or None)
        self.ctx.log(f"nemesis: {self.fault} {phase} {','.join(self.targets) or '-'}"
                     + (f" ({self.detail()})" if self.detail() else ""))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.fault} targets={self.targets} active={self.active}>"


# -- waiting on ZooKeeper ---------------------------------------------------------

def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return True
        except Exception:  # noqa: BLE001 - a ZooKeeper hiccup is "not yet"
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def registration(ctx: FaultContext, name: str) -> int | None:
    """The ZooKeeper session that holds the broker's /brokers/ids/N, or None."""
    from cluster.zkpaths import broker_path
    stat = ctx.resolver.zk.exists(broker_path(int(name.rsplit("-", 1)[1])))
    return None if stat is None else stat.ephemeralOwner


def broker_registered(ctx: FaultContext, name: str, not_by: int | None = None) -> bool:
    """Registered, and (with `not_by`) by another session than that one: a
    killed broker's registration outlives it until its session expires, so
    "registered again" must mean a new session."""
    owner = registration(ctx, name)
    return owner is not None and (not_by is None or owner != not_by)


def is_broker(name: str) -> bool:
    return name.startswith("broker-")


# -- heal everything --------------------------------------------------------------

def heal_all(cluster: Any, log: Callable[[str], None] = lambda m: None) -> list[str]:
    """Undo every kind of fault on `cluster`, whoever applied it. Returns what
    it did (for the log and the history's final heal detail). Never raises
    for one part failing: it tries the others and reports."""
    from faults.injectors import net  # local import: net needs only this module

    done: list[str] = []
    try:
        nodes = cluster.nodes()
    except Exception as e:  # noqa: BLE001
        return [f"cannot list nodes: {e}"]
    for n in nodes:
        try:
            if n.state == "paused":
                cluster.resume_node(n.name)
                done.append(f"resumed {n.name}")
        except Exception as e:  # noqa: BLE001
            done.append(f"resume {n.name} failed: {e}")
    for part in (net.heal_iptables, net.heal_proxies):
        try:
            done.extend(part(cluster))
        except Exception as e:  # noqa: BLE001
            done.append(f"{part.__name__} failed: {e}")
    # ZooKeeper before brokers: a broker cannot register without it.
    for n in sorted(cluster.nodes(), key=lambda n: n.kind != "zookeeper"):
        try:
            if n.state == "stopped":
                cluster.start_node(n.name)
                done.append(f"started {n.name}")
        except Exception as e:  # noqa: BLE001
            done.append(f"start {n.name} failed: {e}")
    for line in done:
        log(f"heal: {line}")
    return done
